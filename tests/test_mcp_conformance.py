"""The official MCP conformance suite passes over HTTP for every capability the server declares."""

from __future__ import annotations

from mcp_conformance import run
from support.node import require

# Scenarios that exercise what the server declares (the others need the reference server's
# fixture tools, resources and prompts; tests/node/conformance-baseline.yml names them).
DECLARED = {
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "prompts-list",
    "completion-complete",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
}


def test_the_conformance_suite_passes_the_scenarios_of_declared_capabilities() -> None:
    require("node", "npm")
    outcome = run()
    assert outcome.returncode == 0, outcome.summary
    failed = sorted(name for name in DECLARED if not outcome.scenarios.get(name))
    assert not failed, outcome.summary
