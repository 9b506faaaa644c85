"""Queued deep research: how often the percentage a client polls moves while the run works.

An MCP server in async mode (offline: the simulator in its process, a deep research taking
RUN_SECONDS) queues one deep research; the official Python client then calls
``await_conversation_histories`` with a one-second timeout until the job ends, as a client that
polls once a second does, and reads the job's percentage from each reply.
"""

from __future__ import annotations

import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import anyio

from bench._util import table
from bench.bench_mcp import _connect, _pplx_env

TITLE = "Queued research progress (await_conversation_histories, polled every second)"

RUN_SECONDS = 20
POLL_SECONDS = 1.0


async def _polls(logs: Path) -> list[tuple[float, int]]:
    env = _pplx_env(logs) | {
        "PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH": "true",
        "PPLX_NB_SIM_DEEP_RESEARCH_SECONDS": str(RUN_SECONDS),
    }
    async with _connect(["-m", "pplx_nb.mcp"], env) as server:
        session = server.session
        # The first tool call builds the Researcher and loads the simulator's corpus.
        await session.call_tool("list_conversations", {"limit": 1})
        started = time.monotonic()
        queued = await session.call_tool(
            "perplexity_deep_research", {"query": "How do asyncio tasks work?"}
        )
        cid = (queued.structured_content or {})["conversationId"]
        polls: list[tuple[float, int]] = []
        while time.monotonic() - started < RUN_SECONDS * 5:
            waited = await session.call_tool(
                "await_conversation_histories",
                {"conversationIds": [cid], "timeoutSeconds": POLL_SECONDS},
            )
            entry: dict[str, Any] = (waited.structured_content or {})["conversations"][cid]
            if entry["status"] not in ("pending", "in_progress"):
                break
            if entry.get("progress"):
                polls.append((time.monotonic() - started, entry["progress"]["percentage"]))
    return polls


def _longest_hold(percentages: list[int]) -> int:
    longest = run = 1
    for earlier, later in pairwise(percentages):
        run = run + 1 if later == earlier else 1
        longest = max(longest, run)
    return longest


def run() -> str:
    """Measure and return the Markdown section."""
    with tempfile.TemporaryDirectory() as tmp:
        polls = anyio.run(_polls, Path(tmp) / "conversation-logs")
    percentages = [p for _, p in polls]
    moved = sum(b != a for a, b in pairwise(percentages))
    share = moved / max(len(polls) - 1, 1)
    at_85 = next((elapsed for elapsed, p in polls if p >= 85), None)
    shown_85 = "never" if at_85 is None else f"{at_85:.1f} s ({at_85 / RUN_SECONDS:.0%} of the run)"
    rows: list[list[object]] = [
        ["polls while the job ran", len(polls), ""],
        ["share of polls on which the percentage moved", f"**{share:.0%}** ({moved})", "> 50%"],
        ["most polls in a row on one value", _longest_hold(percentages), ""],
        ["first poll at 85% or more", shown_85, "not before 50%"],
        ["percentages seen", " → ".join(str(p) for p in percentages), "rising, < 100"],
    ]
    return (
        f"One deep research of {RUN_SECONDS} s on the simulator, queued through the MCP server "
        f"and polled with `await_conversation_histories` (`timeoutSeconds: {POLL_SECONDS:g}`) "
        "until it ended. The percentage is halfway between the stage the run's events reached "
        "and the time since submission against the time such a run takes; the simulator spreads "
        "the run's research events over its first three quarters and writes the report in "
        "the last.\n\n"
        + table(["measure", "value", "target"], rows)
        + "\n\nBefore, with the percentage from the events alone and the simulator's events "
        "evenly spaced (its research over the first third), the same run moved on 42% of 20 "
        "polls, showed 85% at 41% of the run and held one value for 6 polls in a row."
    )


if __name__ == "__main__":
    print(run())
