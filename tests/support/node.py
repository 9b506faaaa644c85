"""The official TypeScript MCP client and other pinned npm tools for the tests, installed on demand.

``tests/node/package.json`` and its lock pin the versions; :func:`node_tools` copies them with
the driver scripts into ``tests/.node/`` (gitignored) and runs ``npm ci`` there once per lock
file. Without node or npm the tests that need them skip with the reason, except where
``CI=true`` or ``PPLX_NB_REQUIRE_NODE=1`` asks for them: there a missing tool is a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

__all__ = ["CACHE", "SOURCE", "drive", "inspect", "node_tools", "require"]

SOURCE = Path(__file__).resolve().parent.parent / "node"
CACHE = SOURCE.parent / ".node"
_FILES = ("package.json", "package-lock.json", "drive.mjs")


def require(*commands: str) -> dict[str, str]:
    """The paths of ``commands``; skip (or fail where node is required) when one is missing."""
    found = {name: shutil.which(name) for name in commands}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        reason = f"{' and '.join(missing)} not installed (Node.js 20+ and npm are needed)"
        if os.environ.get("CI") == "true" or os.environ.get("PPLX_NB_REQUIRE_NODE") == "1":
            pytest.fail(f"node is required here but {reason}")
        pytest.skip(reason)
    return {name: path for name, path in found.items() if path is not None}


def node_tools() -> Path:
    """``tests/.node`` with the pinned packages installed and the driver scripts next to them."""
    paths = require("node", "npm")
    CACHE.mkdir(exist_ok=True)
    with FileLock(str(CACHE / ".install.lock")):
        for name in _FILES:
            shutil.copyfile(SOURCE / name, CACHE / name)
        digest = hashlib.sha256((SOURCE / "package-lock.json").read_bytes()).hexdigest()
        stamp = CACHE / "node_modules" / ".pplx-nb-installed"
        if not stamp.is_file() or stamp.read_text() != digest:
            subprocess.run(
                [paths["npm"], "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=CACHE,
                check=True,
                timeout=600,
                capture_output=True,
            )
            stamp.write_text(digest)
    return CACHE


def drive(plan: dict[str, Any], tmp_path: Path, timeout: float = 240) -> dict[str, Any]:
    """Run ``tests/node/drive.mjs`` on ``plan`` and return its report."""
    tools = node_tools()
    plan_file = tmp_path / f"plan-{id(plan)}.json"
    report_file = plan_file.with_name(f"report-{id(plan)}.json")
    plan_file.write_text(json.dumps(plan))
    done = subprocess.run(
        ["node", str(tools / "drive.mjs"), str(plan_file), str(report_file)],
        cwd=tools,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(report_file.read_text())
    return report


def inspect(
    target: list[str], *args: str, env: dict[str, str], cwd: Path, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """Run the MCP Inspector's CLI (``mcp-inspector --cli``) with ``args`` on the stdio server
    started by the ``target`` command with ``env`` (the Inspector passes the server only the
    variables it is given with ``-e``), on the pinned Node 22 it needs."""
    tools = node_tools()
    cli = tools / "node_modules" / "@modelcontextprotocol" / "inspector" / "clients" / "cli"
    variables = [part for item in env.items() for part in ("-e", "=".join(item))]
    node = tools / "node_modules" / ".bin" / "node"
    return subprocess.run(
        [str(node), str(cli / "build" / "index.js"), *args, *variables, *target],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
