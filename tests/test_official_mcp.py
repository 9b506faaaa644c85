"""Perplexity's own MCP server (npm ``@perplexity-ai/mcp-server``) with the simulator as its API.

It streams ``POST /v1/agent`` with the ``fast``, ``medium`` and ``high`` presets for
``perplexity_ask``, ``perplexity_reason`` and ``perplexity_research``, and calls ``POST /search``
for ``perplexity_search``: every one of its tools has to return results from the simulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, TextContent
from support.npm import npm_package

from pplx_nb.sim import serve, stats

PACKAGE, VERSION = "@perplexity-ai/mcp-server", "1.2.1"
KEY = "pplx-official-mcp-test-key"
MESSAGES = [{"role": "user", "content": "How do I cancel an asyncio task?"}]


@pytest.fixture(scope="module")
def server_script() -> Path:
    return npm_package(PACKAGE, VERSION) / "dist" / "index.js"


@pytest.fixture
def sim() -> Iterator[str]:
    with serve(latency_ms=0, deep_research_seconds=1.0, api_key=KEY) as url:
        yield url


def text_of(result: CallToolResult) -> str:
    return "".join(part.text for part in result.content if isinstance(part, TextContent))


async def call_every_tool(script: Path, url: str, progress: list[str]) -> dict[str, CallToolResult]:
    params = StdioServerParameters(
        command="node",
        args=[str(script)],
        env={
            "PERPLEXITY_API_KEY": KEY,
            "PERPLEXITY_BASE_URL": url,
            "PERPLEXITY_TIMEOUT_MS": "60000",
        },
    )

    async def note(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    calls: dict[str, dict[str, Any]] = {
        "perplexity_search": {"query": "asyncio task cancel", "max_results": 5},
        "perplexity_ask": {"messages": MESSAGES, "search_domain_filter": ["docs.python.org"]},
        "perplexity_reason": {"messages": MESSAGES, "search_context_size": "high"},
        "perplexity_research": {"messages": MESSAGES},
    }
    results: dict[str, CallToolResult] = {}
    with anyio.fail_after(120):
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = {tool.name for tool in (await session.list_tools()).tools}
            assert listed == set(calls)
            for name, arguments in calls.items():
                result = await session.call_tool(name, arguments, progress_callback=note)
                assert isinstance(result, CallToolResult)
                results[name] = result
    return results


def test_all_four_tools_of_the_official_server_return_results(
    server_script: Path, sim: str
) -> None:
    progress: list[str] = []
    results = anyio.run(call_every_tool, server_script, sim, progress)

    for name, result in results.items():
        assert not result.is_error, f"{name}: {text_of(result)}"
    search = text_of(results["perplexity_search"])
    assert search.startswith("Found 5 search results:") and "https://docs.python.org/" in search
    assert "Date: " in search
    for name in ("perplexity_ask", "perplexity_reason", "perplexity_research"):
        answer = text_of(results[name])
        assert "Offline simulator answer" in answer and "asyncio.Task.cancel" in answer
        assert "\n\nCitations:\n[1] https://docs.python.org/" in answer
    assert "## Overview" in text_of(results["perplexity_research"])
    assert any(m.startswith("Searching: ") for m in progress)
    assert any(m.startswith("Reading ") for m in progress)
    assert "Fetching page content" in progress and "Writing answer" in progress

    counters = stats(sim)
    assert counters["searches"] == 1 and counters["generations"] == 3
    assert counters["requests"]["POST /v1/agent"] == 3
