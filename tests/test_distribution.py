"""The project as MCP users get it: ``python -m build``, a fresh virtualenv, ``pplx-nb-mcp``.

The wheel and the sdist are built as a release would build them, installed into a new virtualenv
(dependencies from the package index) and started from a folder where the checkout is not
importable: the console script must answer ``initialize``, list the tools and answer a search
offline. ``server.json`` (the MCP registry entry) must agree with the package.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from support.mcp import INITIALIZE, ROOT, TOOLS


def _serve_once(script: Path, cwd: Path) -> list[dict[str, Any]]:
    """Start ``script`` over stdio, send initialize, tools/list and one search; the replies."""
    messages = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "perplexity_search", "arguments": {"query": "What is a coroutine?"}},
        },
    ]
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(cwd),
        "PPLX_NB_OFFLINE": "1",
        "PPLX_NB_SIM_LATENCY_MS": "0",
        "CONVERSATION_LOGS_DIR": str(cwd / "conversation-logs"),
    }
    process = subprocess.Popen(
        [str(script)],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    replies: list[dict[str, Any]] = []
    try:
        for message in messages:
            process.stdin.write(json.dumps(message).encode() + b"\n")
            process.stdin.flush()
            if "id" in message:
                while True:
                    line = process.stdout.readline()
                    assert line, process.stderr.read().decode() if process.stderr else ""
                    reply = json.loads(line)
                    if reply.get("id") == message["id"]:
                        replies.append(reply)
                        break
    finally:
        process.stdin.close()
        process.wait(timeout=60)
        process.stdout.close()
        if process.stderr is not None:
            process.stderr.close()
    return replies


def _check_serves(script: Path, cwd: Path) -> None:
    initialized, listed, searched = _serve_once(script, cwd)
    info = initialized["result"]["serverInfo"]
    assert info["name"] == "pplx_nb"
    assert {tool["name"] for tool in listed["result"]["tools"]} == TOOLS
    result = searched["result"]
    assert result.get("isError") is not True, result
    assert result["structuredContent"]["sources"][0]["url"].startswith("https://docs.python.org/")


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
    _check_serves(script, work)

    installed = venv / "lib"
    assert list(installed.glob("python3*/site-packages/pplx_nb/py.typed"))
    assert not list(installed.glob("python3*/site-packages/tests"))

    reinstall = [*pip, "--force-reinstall", "--no-deps", str(sdist)]
    subprocess.run(reinstall, check=True, capture_output=True, timeout=900)
    _check_serves(script, work)


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
