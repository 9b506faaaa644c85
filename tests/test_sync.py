"""The sync bridge: iterating an async producer from a plain thread, with and without ticks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from pplx_nb._sync import TICK, iterate_sync


async def _paused(pause: float) -> AsyncIterator[str]:
    yield "before"
    await asyncio.sleep(pause)
    yield "after"


def test_ticks_come_while_the_producer_pauses_and_items_keep_their_order() -> None:
    items = list(iterate_sync(_paused(0.35), tick=0.05))
    assert items[0] == "before" and items[-1] == "after"
    ticks = items[1:-1]
    assert ticks and all(item is TICK for item in ticks)
    assert 3 <= len(ticks) <= 8, f"one tick per 50 ms of a 350 ms pause, got {len(ticks)}"


def test_without_tick_only_items_come() -> None:
    assert list(iterate_sync(_paused(0.2))) == ["before", "after"]


def test_ticks_stop_with_the_stream_and_errors_still_surface() -> None:
    async def failing() -> AsyncIterator[str]:
        await asyncio.sleep(0.12)
        raise LookupError("gone")
        yield "never"  # makes this an async generator

    seen: list[object] = []
    with pytest.raises(LookupError, match="gone"):
        for item in iterate_sync(failing(), tick=0.05):
            seen.append(item)
    assert seen and all(item is TICK for item in seen)
