"""What the MCP server tests share: the published tool names, a server process's environment, and
a check that an installed ``pplx-nb-mcp`` answers over stdio."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "INITIALIZE",
    "ROOT",
    "TOOLS",
    "UNKNOWN_ID",
    "check_serves",
    "http_server",
    "serve_once",
    "server_env",
]

ROOT = Path(__file__).resolve().parent.parent.parent
TOOLS = {
    "perplexity_search",
    "perplexity_deep_research",
    "perplexity_search_followup",
    "perplexity_deep_research_followup",
    "get_conversation_history",
    "get_conversation_histories",
    "await_conversation_histories",
    "list_conversations",
    "cancel_deep_research",
    "perplexity_web_search",
    "get_references",
}
UNKNOWN_ID = "20200101-1577836800000"
"""A well-formed conversation ID that no test creates."""
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "pplx-nb-raw-test", "version": "1"},
    },
}
"""A raw JSON-RPC ``initialize`` request (id 1), for tests that speak the protocol by hand."""


def server_env(logs_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of ``python -m pplx_nb.mcp`` on the offline simulator, storing in
    ``logs_dir``; ``extra`` adds or overrides variables."""
    env = {
        "PPLX_NB_OFFLINE": "1",
        "PPLX_NB_SIM_LATENCY_MS": "0",
        "PPLX_NB_SIM_DEEP_RESEARCH_SECONDS": "0.5",
        "CONVERSATION_LOGS_DIR": str(logs_dir),
        "PYTHONPATH": str(ROOT),
        "LOG_LEVEL": "info",
    }
    env.update(extra)
    return env


def _free_port() -> int:
    """A port free on every address, below the kernel's ephemeral range where one is: a server
    that another test (or person) starts on port 0 meanwhile is never given it, so the server
    started on it binds it, and the wait below cannot mistake that other server for ours."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    below = range(20000, max(ephemeral, 20000))
    for port in random.sample(below, k=min(50, len(below))):
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def http_server(
    logs_dir: Path, *args: str, host: str = "127.0.0.1", log: Path | None = None, **env: str
) -> Iterator[int]:
    """``python -m pplx_nb.mcp --transport http`` on a free port, once it accepts connections.

    Yields the port; ``args`` are more command-line options, ``env`` more variables (LOG_LEVEL
    is ``warning`` unless they say otherwise), ``log`` where its output goes (discarded
    otherwise). Stopped when the block ends.
    """
    port = _free_port()
    address = "127.0.0.1" if host in ("0.0.0.0", "localhost") else host
    command = ["-m", "pplx_nb.mcp", "--transport", "http", "--host", host, "--port", str(port)]
    with ExitStack() as stack:
        output = stack.enter_context(log.open("wb")) if log else subprocess.DEVNULL
        process = subprocess.Popen(
            [sys.executable, *command, *args],
            cwd=ROOT,
            env={**os.environ, **server_env(logs_dir, **{"LOG_LEVEL": "warning", **env})},
            stdout=output,
            stderr=output,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with socket.create_connection((address, port), timeout=1):
                        break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the MCP server did not start in 30 s") from None
                    time.sleep(0.05)
            yield port
        finally:
            process.terminate()
            process.wait(timeout=15)


def serve_once(script: Path, cwd: Path) -> list[dict[str, Any]]:
    """Start ``script`` (an installed ``pplx-nb-mcp``) over stdio in ``cwd``, offline; send
    initialize, tools/list and one search; the replies."""
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


def check_serves(script: Path, cwd: Path) -> None:
    """``script`` initializes as pplx_nb, lists the published tools and answers a search."""
    initialized, listed, searched = serve_once(script, cwd)
    info = initialized["result"]["serverInfo"]
    assert info["name"] == "pplx_nb"
    assert {tool["name"] for tool in listed["result"]["tools"]} == TOOLS
    result = searched["result"]
    assert result.get("isError") is not True, result
    assert result["structuredContent"]["sources"][0]["url"].startswith("https://docs.python.org/")
