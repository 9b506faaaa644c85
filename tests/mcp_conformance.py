"""The official MCP conformance suite (``@modelcontextprotocol/conformance``) over HTTP.

    python tests/mcp_conformance.py        # or: make conformance

Installs the pinned suite and the Node 22 it needs (npm's ``node`` package) into ``tests/.node/``,
starts ``python -m pplx_nb.mcp --transport http`` on a free loopback port, runs every scenario
(``--suite all``) with ``tests/node/conformance-baseline.yml`` naming the scenarios that need the
reference server's fixtures or capabilities pplx_nb does not declare, and prints the summary.
Exits with the suite's status: 0 when every other scenario passed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from support.mcp import http_server
from support.node import SOURCE, node_tools

__all__ = ["Outcome", "run"]

_LINE = re.compile(r"^([✓✗]) (\S+): (\d+) passed, (\d+) failed", re.MULTILINE)


class Outcome:
    """The suite's exit status, its summary, and each scenario's verdict (``True`` = passed)."""

    def __init__(self, returncode: int, summary: str, scenarios: dict[str, bool]) -> None:
        self.returncode = returncode
        self.summary = summary
        self.scenarios = scenarios


def run(timeout: float = 900) -> Outcome:
    """Serve over HTTP, run the suite against it, and return what it found."""
    tools = node_tools()
    suite = tools / "node_modules" / "@modelcontextprotocol" / "conformance"
    with (
        tempfile.TemporaryDirectory(prefix="pplx-nb-conformance-") as scratch,
        http_server(Path(scratch) / "logs") as port,
    ):
        done = subprocess.run(
            [
                str(tools / "node_modules" / ".bin" / "node"),
                str(suite / "dist" / "index.js"),
                "server",
                "--url",
                f"http://127.0.0.1:{port}/mcp",
                "--suite",
                "all",
                "--expected-failures",
                str(SOURCE / "conformance-baseline.yml"),
            ],
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    output = done.stdout + done.stderr
    summary = output[output.find("=== SUMMARY ===") :].strip()
    scenarios = {
        name: mark == "✓" and int(passed) > 0 and int(failed) == 0
        for mark, name, passed, failed in _LINE.findall(output)
    }
    return Outcome(done.returncode, summary, scenarios)


if __name__ == "__main__":
    outcome = run()
    print(outcome.summary)
    passed = sorted(name for name, ok in outcome.scenarios.items() if ok)
    print(f"\nPassed ({len(passed)}): {', '.join(passed)}")
    sys.exit(outcome.returncode)
