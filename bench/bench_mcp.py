"""MCP server: start-up, memory and per-call overhead, against a hello-world MCPServer.

Every server runs in its own process over stdio and is driven by the official client, exactly as an
assistant drives it. The simulator runs in a third process (``python -m pplx_nb.sim``) so that its
memory and CPU are not counted against the server. Memory under many clients is measured over
streamable HTTP: short-lived clients, half of which leave without ending their session.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from bench._util import ROOT, median, ratio, simulator, table
from pplx_nb.research import SYSTEM_PROMPT

TITLE = "MCP server (python -m pplx_nb.mcp)"

RUNS = 7
SEARCHES = 100
CLIENTS = 150
CALLS_PER_CLIENT = 10
IDLE_SECONDS = 10
HELLO = '''
import sys

from mcp.server.mcpserver import MCPServer

app = MCPServer("hello")


@app.tool()
def hello(name: str) -> str:
    """Say hello."""
    return f"hello {name}"


if len(sys.argv) > 1:
    app.run("streamable-http", port=int(sys.argv[1]))
else:
    app.run()
'''


def _children() -> set[int]:
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                pids.add(int(entry.name))
    return pids


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class _Server:
    """A connected client session, the server's pid, and the seconds from spawn to initialized."""

    def __init__(self, session: ClientSession, pid: int, startup: float) -> None:
        self.session = session
        self.pid = pid
        self.startup = startup


@asynccontextmanager
async def _connect(
    args: list[str], env: dict[str, str], command: str = sys.executable
) -> AsyncIterator[_Server]:
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(ROOT))
    before = _children()
    start = time.perf_counter()
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            startup = time.perf_counter() - start
            (pid,) = _children() - before
            yield _Server(session, pid, startup)


def _pplx_env(logs: Path, base_url: str | None = None) -> dict[str, str]:
    env = {"CONVERSATION_LOGS_DIR": str(logs), "PYTHONPATH": str(ROOT), "LOG_LEVEL": "warning"}
    if base_url is None:
        env |= {"PPLX_NB_OFFLINE": "1", "PPLX_NB_SIM_LATENCY_MS": "0"}
    else:
        env |= {
            "PPLX_NB_OFFLINE": "0",
            "PERPLEXITY_BASE_URL": base_url,
            "PERPLEXITY_API_KEY": "pplx-bench-dummy-key-000000",
        }
    return env


async def _startups(hello: Path, logs: Path) -> tuple[list[float], list[float]]:
    ours, theirs = [], []
    for _ in range(RUNS):
        async with _connect(["-m", "pplx_nb.mcp"], _pplx_env(logs)) as server:
            ours.append(server.startup)
        async with _connect([str(hello)], {}) as server:
            theirs.append(server.startup)
    return ours, theirs


async def _timed_calls(
    session: ClientSession, name: str, arguments: Callable[[int], dict[str, Any]], count: int
) -> list[float]:
    out = []
    for index in range(count):
        start = time.perf_counter()
        result = await session.call_tool(name, arguments(index))
        out.append(time.perf_counter() - start)
        if result.is_error:
            raise RuntimeError(f"{name} failed: {result.content}")
    return out


async def _raw_simulator_calls(base_url: str, count: int) -> list[float]:
    """The simulator's own time for the same questions, asked directly over HTTP."""
    out = []
    async with httpx2.AsyncClient(base_url=base_url, timeout=30) as client:
        for index in range(count):
            body = {
                "preset": "low",
                "instructions": SYSTEM_PROMPT,
                "input": [{"role": "user", "content": _question(index)}],
                "tools": [{"type": "web_search"}],
            }
            start = time.perf_counter()
            response = await client.post(
                "/v1/agent",
                json=body,
                headers={"Authorization": "Bearer pplx-bench-dummy-key-000000"},
            )
            response.raise_for_status()
            json.loads(response.content)
            out.append(time.perf_counter() - start)
    return out


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def _http_server(args: list[str], env: dict[str, str]) -> AsyncIterator[tuple[str, int]]:
    """A server process listening on a free port: its ``/mcp`` URL and pid."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, *args, str(port)],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{args} did not start") from None
                await anyio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", process.pid
    finally:
        process.terminate()
        process.wait(timeout=15)


async def _many_clients(
    url: str, pid: int, name: str, arguments: dict[str, Any], *, end_sessions: bool = True
) -> tuple[float, float, float]:
    """RSS after the first call and after CLIENTS clients of CALLS_PER_CLIENT calls; seconds.

    With ``end_sessions`` False the clients vanish without a DELETE, as killed clients do.
    """
    first = 0.0
    start = time.perf_counter()
    for _ in range(CLIENTS):
        async with (
            streamable_http_client(url, terminate_on_close=end_sessions) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for _ in range(CALLS_PER_CLIENT):
                result = await session.call_tool(name, arguments)
                if result.is_error:
                    raise RuntimeError(f"{name} failed: {result.content}")
                if not first:
                    first = _rss_mb(pid)
    return first, _rss_mb(pid), time.perf_counter() - start


async def _memory_under_clients(hello: Path, logs: Path) -> dict[str, Any]:
    env = _pplx_env(logs)
    ours_args = ["-m", "pplx_nb.mcp", "--transport", "http", "--session-idle-seconds"]
    out: dict[str, Any] = {}
    async with _http_server([*ours_args, str(IDLE_SECONDS), "--port"], env) as (url, pid):
        async with (
            streamable_http_client(url) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            started = await session.call_tool("perplexity_search", {"query": _question(0)})
        history = {"conversationId": (started.structured_content or {})["conversationId"]}
        out["ours"] = await _many_clients(url, pid, "get_conversation_history", history)
        gone = [
            await _many_clients(url, pid, "get_conversation_history", history, end_sessions=False)
        ]
        await anyio.sleep(IDLE_SECONDS + 3)
        gone.append(
            await _many_clients(url, pid, "get_conversation_history", history, end_sessions=False)
        )
        out["abandoned"] = gone
    async with _http_server([str(hello)], {}) as (url, pid):
        out["theirs"] = await _many_clients(url, pid, "hello", {"name": "n"})
    return out


def _question(index: int) -> str:
    topics = ("asyncio tasks", "context managers", "dataclasses", "pathlib", "itertools")
    return f"How do I use {topics[index % len(topics)]} (case {index})?"


async def _measure(hello: Path, logs: Path) -> dict[str, Any]:
    ours_start, hello_start = await _startups(hello, logs)
    with simulator() as base_url:
        async with _connect(["-m", "pplx_nb.mcp"], _pplx_env(logs, base_url)) as server:
            session = server.session
            rss_idle = _rss_mb(server.pid)
            searches = await _timed_calls(
                session, "perplexity_search", lambda i: {"query": _question(i)}, SEARCHES
            )
            rss_ours = _rss_mb(server.pid)
            raw = await _raw_simulator_calls(base_url, SEARCHES)
            cached = await _timed_calls(
                session, "perplexity_search", lambda _: {"query": _question(0)}, 50
            )
        async with _connect([str(hello)], {}) as server:
            hello_calls = await _timed_calls(
                server.session, "hello", lambda i: {"name": f"n{i}"}, SEARCHES
            )
            rss_hello = _rss_mb(server.pid)
    clients = await _memory_under_clients(hello, logs)
    return {
        "clients": clients,
        "ours_start": ours_start,
        "hello_start": hello_start,
        "rss_idle": rss_idle,
        "rss_ours": rss_ours,
        "rss_hello": rss_hello,
        "searches": searches[5:],
        "raw": raw[5:],
        "cached": cached[5:],
        "hello_calls": hello_calls[5:],
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def run() -> str:
    """Measure and return the Markdown section."""
    with tempfile.TemporaryDirectory() as tmp:
        hello = Path(tmp) / "hello_server.py"
        hello.write_text(HELLO)
        m = anyio.run(_measure, hello, Path(tmp) / "conversation-logs")
    start_ours, start_hello = median(m["ours_start"]), median(m["hello_start"])
    search, raw = median(m["searches"]), median(m["raw"])
    overhead = search - raw
    cached, hello_call = median(m["cached"]), median(m["hello_calls"])
    rows = [
        ["start → initialized", _ms(start_ours), _ms(start_hello), ratio(start_ours, start_hello),
         "≤ 1.2 s and ≤ 1.15×"],
        [f"RSS after {SEARCHES} searches", f"{m['rss_ours']:.0f} MB (idle {m['rss_idle']:.0f})",
         f"{m['rss_hello']:.0f} MB", ratio(m["rss_ours"], m["rss_hello"]), "≤ 100 MB"],
        ["tools/call search, uncached (p50)", _ms(search), _ms(hello_call),
         ratio(search, hello_call), ""],
        ["same question straight to the simulator (p50)", _ms(raw), "", "", ""],
        ["overhead over the simulator (p50)", _ms(overhead), "", "", "≤ 10 ms"],
        ["tools/call search, cached (p50)", _ms(cached), _ms(hello_call),
         ratio(cached, hello_call), "≤ 5 ms"],
    ]  # fmt: skip
    (first, last, took), (hello_first, hello_last, _) = m["clients"]["ours"], m["clients"]["theirs"]
    (gone_first, gone_mid, _), (_, gone_last, _) = m["clients"]["abandoned"]
    calls = CLIENTS * CALLS_PER_CLIENT
    rows += [
        [f"RSS growth over {CLIENTS} short-lived HTTP clients + {calls:,} calls, from after the "
         "first call", f"+{last - first:.1f} MB ({first:.0f} → {last:.0f}; "
         f"{calls / took:.0f} calls/s)", f"+{hello_last - hello_first:.1f} MB "
         f"({hello_first:.0f} → {hello_last:.0f})", "", "≤ 10 MB"],
        [f"same, clients vanishing without ending their session: after {CLIENTS}, then after "
         f"expiry ({IDLE_SECONDS} s idle) and {CLIENTS} more", f"+{gone_mid - gone_first:.1f} MB, "
         f"then +{gone_last - gone_mid:.1f} MB", "", "", "flat after expiry"],
    ]  # fmt: skip
    return (
        f"Medians: start-up over {RUNS} alternating runs each; calls over {SEARCHES - 5} calls "
        "after 5 warm-ups. The alternative is a hello-world `MCPServer` with one tool, in the same "
        "run; the simulator runs in its own process with no added latency. HTTP rows: each "
        f"client initializes, makes {CALLS_PER_CLIENT} calls (get_conversation_history; hello) "
        "and leaves; the last row's clients never end their sessions, which the server closes "
        f"after `--session-idle-seconds` ({IDLE_SECONDS} here; default 300).\n\n"
        + table(["measure", "pplx_nb.mcp", "hello-world MCPServer", "ratio", "target"], rows)
    )


if __name__ == "__main__":
    print(run())
