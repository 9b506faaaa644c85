"""The project as MCP users get it: ``python -m build``, a fresh virtualenv, ``pplx-nb-mcp``.

The wheel and the sdist are built as a release would build them, installed into a new virtualenv
(dependencies from the package index) and started from a folder where the checkout is not
importable: the console script must answer ``initialize``, list the tools and answer a search
offline. ``server.json`` (the MCP registry entry) must agree with the package.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.mcp import ROOT, check_serves


@pytest.mark.slow
def test_wheel_and_sdist_install_into_a_fresh_venv_and_serve(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=900,
    )
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

    installed = venv / "lib"
    assert list(installed.glob("python3*/site-packages/pplx_nb/py.typed"))
    assert not list(installed.glob("python3*/site-packages/tests"))
    assert len(_shipped_corpus(installed)) == 2

    reinstall = [*pip, "--force-reinstall", "--no-deps", str(sdist)]
    subprocess.run(reinstall, check=True, capture_output=True, timeout=900)
    check_serves(script, work)
    assert len(_shipped_corpus(installed)) == 2


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
