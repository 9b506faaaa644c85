"""The Binder recipe: what repo2docker would do with binder/, done without Docker.

repo2docker copies the repository, runs ``pip install -r binder/requirements.txt`` from its root,
runs ``binder/postBuild`` once, and wraps every session in ``binder/start``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from pplx_nb.notebook._icons import icon

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"
QUICKSTART = "notebooks/01-quickstart.ipynb"
# Binder clones the repository: nothing gitignored is there (.cache alone holds the tests' npm
# packages and the TypeScript server's build, some 30,000 files).
_NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".venv-pythons",
    ".cache",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    "conversation-logs",
    "bench",
    "tests",
)


def _start(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PERPLEXITY_", "PPLX_NB_"))}
    return subprocess.run(
        [str(BINDER / "start"), *command],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def _printed_env(command_result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert command_result.returncode == 0, command_result.stderr
    printed: dict[str, str] = json.loads(command_result.stdout)
    return printed


_PRINT_ENV = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]


def test_start_turns_the_simulator_on_when_no_key_is_set() -> None:
    env = _printed_env(_start(_PRINT_ENV))
    assert env["PPLX_NB_OFFLINE"] == "1"


def test_start_leaves_the_real_api_on_when_a_key_is_set() -> None:
    env = _printed_env(_start(_PRINT_ENV, PERPLEXITY_API_KEY="pplx-test-key"))
    assert "PPLX_NB_OFFLINE" not in env
    assert env["PERPLEXITY_API_KEY"] == "pplx-test-key"


def test_start_replaces_itself_with_the_command_and_keeps_its_exit_code() -> None:
    result = _start(["sh", "-c", "echo started; exit 7"])
    assert result.returncode == 7
    assert result.stdout == "started\n"


def test_requirements_install_the_repository_itself_with_the_lab_extra() -> None:
    lines = [
        line.strip()
        for line in (BINDER / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines == ["-e .[lab]"]


def test_jupyterlab_overrides_turn_off_the_news_prompt() -> None:
    overrides = json.loads((BINDER / "overrides.json").read_text())
    notification = overrides["@jupyterlab/apputils-extension:notification"]
    assert notification == {"fetchNews": "false", "checkForUpdates": False}


# Deadlines for a loaded 2-core CI machine (the install alone took over 150 s there with two
# CPU-bound neighbours); they still end a hung step, and the test's own timeout covers their sum.
_INSTALL_SECONDS = 600
_POST_BUILD_SECONDS = 180
_NOTEBOOK_SECONDS = 300


@pytest.mark.slow
@pytest.mark.timeout(_INSTALL_SECONDS + _POST_BUILD_SECONDS + _NOTEBOOK_SECONDS + 120)
def test_recipe_builds_a_fresh_environment_that_runs_the_quickstart(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=_NOT_COPIED)
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PERPLEXITY_", "PPLX_NB_"))}
    base.pop("VIRTUAL_ENV", None)
    env = {
        **base,
        "PATH": f"{bin_dir}{os.pathsep}{base.get('PATH', '')}",
        "HOME": base.get("HOME", str(tmp_path)),
        "PPLX_NB_SIM_LATENCY_MS": "0",
        "PPLX_NB_SIM_DEEP_RESEARCH_SECONDS": "0.5",
    }

    def run(*command: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout
        )

    # As repo2docker installs it, less compiling every installed module to bytecode ahead of
    # time (half of pip's CPU time here): Python compiles what the quickstart imports as it runs.
    install = run(
        "pip",
        "install",
        "--quiet",
        "--no-compile",
        "-r",
        "binder/requirements.txt",
        timeout=_INSTALL_SECONDS,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    post_build = run("binder/postBuild", timeout=_POST_BUILD_SECONDS)
    assert post_build.returncode == 0, post_build.stderr

    installed = sorted((env_dir / "share/jupyter/lab/settings").glob("overrides.json"))
    assert [json.loads(p.read_text()) for p in installed] == [
        json.loads((BINDER / "overrides.json").read_text())
    ]

    executed = tmp_path / "executed.ipynb"
    result = run(
        "binder/start",
        "jupyter",
        "nbconvert",
        "--execute",
        "--to",
        "notebook",
        "--output",
        str(executed),
        QUICKSTART,
        timeout=_NOTEBOOK_SECONDS,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    notebook = json.loads(executed.read_text())
    outputs = [o for cell in notebook["cells"] for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    shown = "\n".join(
        str(o.get("data", {}).get("text/markdown", ""))
        + str(o.get("data", {}).get("text/html", ""))
        for o in outputs
    )
    assert "docs.python.org" in shown
    assert icon("warning") not in shown, "an error box"
