"""The project as MCP users get it: ``python -m build``, a fresh virtualenv, ``pplx-nb-mcp``.

The wheel and the sdist are built as a release would build them, installed without extras into a
new virtualenv (dependencies from the package index) and started from a folder where the checkout
is not importable: the console script must answer ``initialize``, list the tools and answer a
search offline, with nothing from Jupyter, pandas or numpy installed. ``uvx --from <wheel>
pplx-nb-mcp`` must answer the official TypeScript client. ``server.json`` (the MCP registry entry)
must agree with the package.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.mcp import ROOT, TOOLS, check_serves
from support.node import drive

_NETWORK = {
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
}
EXTRAS_ONLY = {
    "ipython",
    "ipywidgets",
    "pandas",
    "numpy",
    "redis",
    "hiredis",
    "jupyterlab",
    "matplotlib",
}
"""Distributions that come with an extra (or with one of its packages), never with the core."""


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel built from it, as ``python -m build`` makes them for a release,
    once for the module's tests (uv installs the isolated build environment: the same backend
    builds the same files, in a fraction of pip's time)."""
    outdir = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(outdir), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    return outdir


@pytest.mark.slow
def test_wheel_and_sdist_install_into_a_fresh_venv_and_serve(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("pplx_nb-*.whl")
    (sdist,) = dist.glob("pplx_nb-*.tar.gz")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True, timeout=1800)
    work = tmp_path / "elsewhere"
    work.mkdir()
    script = venv / "bin" / "pplx-nb-mcp"
    check_serves(script, work)
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert {package["name"].lower() for package in json.loads(listed)} & EXTRAS_ONLY == set()

    installed = venv / "lib"
    assert list(installed.glob("python3*/site-packages/pplx_nb/py.typed"))
    assert not list(installed.glob("python3*/site-packages/tests"))
    assert len(_shipped_corpus(installed)) == 2

    reinstall = [*pip, "--force-reinstall", "--no-deps", str(sdist)]
    subprocess.run(reinstall, check=True, capture_output=True, timeout=900)
    check_serves(script, work)
    assert len(_shipped_corpus(installed)) == 2


@pytest.mark.slow
def test_uvx_runs_the_wheel_for_the_official_typescript_client(dist: Path, tmp_path: Path) -> None:
    uvx = shutil.which("uvx", path=str(Path(sys.executable).parent)) or shutil.which("uvx")
    if uvx is None:
        pytest.fail("uvx is missing: the dev extra installs uv")
    (wheel,) = dist.glob("pplx_nb-*.whl")
    work = tmp_path / "elsewhere"
    work.mkdir()
    plan = {
        "transport": "stdio",
        "command": uvx,
        "args": ["--from", str(wheel), "pplx-nb-mcp"],
        "cwd": str(work),
        "env": {
            # uv downloads the wheel's dependencies: it needs the machine's certificates and proxy.
            **{name: value for name, value in os.environ.items() if name in _NETWORK},
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(work),
            # Downloads are kept between runs; the environment uvx builds is new for each wheel.
            "UV_CACHE_DIR": str(ROOT / ".cache" / "uv"),
            "PPLX_NB_OFFLINE": "1",
            "PPLX_NB_SIM_LATENCY_MS": "0",
            "CONVERSATION_LOGS_DIR": str(work / "conversation-logs"),
        },
        "calls": [{"name": "perplexity_search", "arguments": {"query": "What is a coroutine?"}}],
    }

    report = drive(plan, tmp_path, timeout=600)

    assert report["connectError"] is None, report["connectError"]
    assert {tool["name"] for tool in report["tools"]} == TOOLS
    (search,) = report["results"]
    assert search["error"] is None and search["schemaErrors"] is None, search
    assert search["result"].get("isError") is not True, search["result"]
    assert search["result"]["structuredContent"]["sources"][0]["url"].startswith(
        "https://docs.python.org/"
    )


def _shipped_corpus(installed: Path) -> list[Path]:
    """The simulator's frozen corpus and its license as installed (the search answered from it)."""
    sim = "python3*/site-packages/pplx_nb/sim"
    return [
        *installed.glob(f"{sim}/python_docs.json.gz"),
        *installed.glob(f"{sim}/python_docs_LICENSE.txt"),
    ]


def test_server_json_describes_this_package() -> None:
    entry = json.loads((ROOT / "server.json").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert re.fullmatch(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+", entry["name"])
    assert 1 <= len(entry["description"]) <= 100
    assert entry["version"] == project["version"]
    (package,) = entry["packages"]
    assert package["registryType"] == "pypi" and package["identifier"] == project["name"]
    assert package["version"] == project["version"]
    assert package["transport"] == {"type": "stdio"}
    assert "pplx-nb-mcp" in project["scripts"]
    variables = {variable["name"]: variable for variable in package["environmentVariables"]}
    assert variables["PERPLEXITY_API_KEY"]["isSecret"] is True
    # The registry checks ownership of a PyPI package by this line in its description.
    assert f"mcp-name: {entry['name']}" in (ROOT / "README.md").read_text()
