"""MCP server memory over a long run of searches from short-lived HTTP clients.

A server as a new user starts it (``python -m pplx_nb.mcp --transport http``, offline: the
simulator runs inside the server process, with no added latency) answers distinct questions, each
stored as a conversation, from clients that connect, search and leave, driven by the official
Python client. RSS is read from ``/proc`` after the first client and after the last; a hello-world
``MCPServer`` under the same clients is the floor the SDK itself sets.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from bench._util import table
from bench.bench_mcp import HELLO, _http_server, _pplx_env, _question, _rss_mb

TITLE = "MCP server memory (python -m pplx_nb.mcp over HTTP, offline)"

CLIENTS = 150
SEARCHES_PER_CLIENT = 12
LONG_RUN = 20_000
AT_ONCE = 4
"""Clients of the long run connected at the same time (the server is the bottleneck)."""


async def _client(url: str, tool: str, first: int, count: int, end_session: bool) -> None:
    async with (
        streamable_http_client(url, terminate_on_close=end_session) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for index in range(first, first + count):
            arguments = {"query": _question(index)} if tool != "hello" else {"name": str(index)}
            result = await session.call_tool(tool, arguments)
            if result.is_error:
                raise RuntimeError(f"{tool} failed: {result.content}")


async def _load(
    url: str, pid: int, tool: str, clients: int, *, end_sessions: bool, at_once: int = 1
) -> dict[str, float]:
    """RSS (MB) after a first client and after ``clients`` more, each making
    SEARCHES_PER_CLIENT calls; calls per second."""
    per = SEARCHES_PER_CLIENT
    await _client(url, tool, 0, per, end_sessions)
    first = _rss_mb(pid)
    start = time.perf_counter()
    done = 0

    async def worker(lane: int) -> None:
        nonlocal done
        for client in range(lane, clients, at_once):
            await _client(url, tool, (client + 1) * per, per, end_sessions)
            done += 1

    async with anyio.create_task_group() as group:
        for lane in range(at_once):
            group.start_soon(worker, lane)
    took = time.perf_counter() - start
    return {"first": first, "last": _rss_mb(pid), "rate": clients * per / took, "calls": done * per}


async def _measure(hello: Path, logs: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ours = ["-m", "pplx_nb.mcp", "--transport", "http", "--port"]
    for name, end_sessions in (("open", False), ("ended", True)):
        async with _http_server(ours, _pplx_env(logs / name)) as (url, pid):
            out[name] = await _load(
                url, pid, "perplexity_search", CLIENTS, end_sessions=end_sessions
            )
    async with _http_server([str(hello)], {}) as (url, pid):
        out["hello"] = await _load(url, pid, "hello", CLIENTS, end_sessions=False)
    long_clients = LONG_RUN // SEARCHES_PER_CLIENT
    async with _http_server(ours, _pplx_env(logs / "long")) as (url, pid):
        out["long"] = await _load(
            url, pid, "perplexity_search", long_clients, end_sessions=True, at_once=AT_ONCE
        )
    return out


def _growth(m: dict[str, float]) -> list[str]:
    grown = m["last"] - m["first"]
    return [
        f"{m['first']:.0f} → {m['last']:.0f} MB",
        f"**{grown:+.1f} MB**",
        f"{grown * 1024 * 1024 / m['calls'] / 1024:.1f} kB",
        f"{m['rate']:.0f}",
    ]


def run() -> str:
    """Measure and return the Markdown section."""
    with tempfile.TemporaryDirectory() as tmp:
        hello = Path(tmp) / "hello_server.py"
        hello.write_text(HELLO)
        m = anyio.run(_measure, hello, Path(tmp))
    searches = CLIENTS * SEARCHES_PER_CLIENT
    long_clients = LONG_RUN // SEARCHES_PER_CLIENT
    rows = [
        [f"{CLIENTS} clients × {SEARCHES_PER_CLIENT} searches ({searches:,}), sessions left "
         "open (as the TypeScript client leaves them)", *_growth(m["open"]), "≤ +10 MB"],
        ["the same, clients ending their sessions", *_growth(m["ended"]), "≤ +10 MB"],
        [f"hello-world MCPServer, {CLIENTS} clients × {SEARCHES_PER_CLIENT} calls, sessions "
         "left open", *_growth(m["hello"]), ""],
        [f"{(long_clients + 1) * SEARCHES_PER_CLIENT:,} stored searches: {long_clients:,} "
         f"clients × {SEARCHES_PER_CLIENT} after the first, {AT_ONCE} at a time",
         *_growth(m["long"]), "≤ +25 MB"],
    ]  # fmt: skip
    return (
        "RSS of the server process after a first client (12 searches) and after the rest; every "
        "question is new, so each search is answered by the simulator and stored as a "
        "conversation.\n\n"
        + table(["load", "RSS", "growth", "per call", "calls/s", "target"], rows)
        + "\n\nWhat a search leaves behind (tracemalloc over the same load): in the simulator, "
        "the run it keeps for GET and cancel (about 1.7 kB without its prompt; the 4,096 newest "
        "runs) and its body and answer in memos of the 256 most recently used requests; in "
        "pplx_nb, entries of caches bounded by count (100 answers, 1,024 history seals, 1,000 "
        "latencies); the conversation itself is on disk. Before the simulator's memos were "
        "bounded and its runs dropped their prompts, a search kept about 8.7 kB (+10.9 MB over "
        "the 1,800 searches with sessions ended). A session "
        "a client leaves open is the SDK's: its transport, tasks and last response (about 40 kB "
        "in the hello-world server, 57 kB here, where the last response is a search answer) stay "
        "until `--session-idle-seconds` (300 by default) pass without a request, so that row "
        "grows with the clients of the last five minutes, not with searches."
    )


if __name__ == "__main__":
    print(run())
