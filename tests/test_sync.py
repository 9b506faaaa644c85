"""The sync bridge: iterating an async producer from a plain thread, with and without ticks, and
sync twins of async methods made in one line."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator

import pytest

from pplx_nb._sync import TICK, iterate_sync, sync_twin


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


class _Counter:
    """A class with async methods and their twins, as Researcher has them."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    async def aadd(self, a: int, *, b: int = 1) -> int:
        """Add ``b`` to ``a``."""
        self.threads.append(threading.current_thread().name)
        await asyncio.sleep(0)
        return a + b

    async def acount(self, n: int) -> AsyncIterator[int]:
        """Count up to ``n``."""
        for i in range(n):
            self.threads.append(threading.current_thread().name)
            yield i

    async def await_failure(self) -> None:
        """Fail."""
        raise LookupError("gone")

    add = sync_twin(aadd)
    count = sync_twin(acount)
    wait_failure = sync_twin(await_failure, name="wait_failure")


def test_a_sync_twin_runs_its_coroutine_on_the_background_loop_and_returns_its_value() -> None:
    counter = _Counter()
    assert counter.add(2, b=3) == 5
    assert counter.threads == ["pplx_nb-loop"]
    assert _Counter.add.__name__ == "add" and _Counter.add.__qualname__ == "_Counter.add"
    assert inspect.signature(_Counter.add) == inspect.signature(_Counter.aadd)
    assert "Add ``b`` to ``a``." in (_Counter.add.__doc__ or "")


def test_a_sync_twin_of_an_async_generator_yields_in_the_calling_thread() -> None:
    counter = _Counter()
    consumed: list[tuple[int, str]] = []
    for item in counter.count(3):
        consumed.append((item, threading.current_thread().name))
    assert [item for item, _ in consumed] == [0, 1, 2]
    assert {thread for _, thread in consumed} == {threading.current_thread().name}
    assert set(counter.threads) == {"pplx_nb-loop"}


def test_a_sync_twin_raises_its_coroutines_error_and_takes_the_name_it_is_given() -> None:
    with pytest.raises(LookupError, match="gone"):
        _Counter().wait_failure()
    assert _Counter.wait_failure.__name__ == "wait_failure"


class _SyncCounter:
    """A sync class over an async one, as ``Client`` is over ``AsyncClient``."""

    def __init__(self) -> None:
        self._async = _Counter()

    def _twin_of(self) -> _Counter:
        return self._async

    aadd = sync_twin(_Counter.aadd, via=_twin_of)
    acount = sync_twin(_Counter.acount, name="count", via=_twin_of)


def test_a_sync_twin_via_another_object_keeps_the_name_and_belongs_to_its_class() -> None:
    counter = _SyncCounter()
    assert counter.aadd(2, b=3) == 5 and list(counter.acount(2)) == [0, 1]
    assert counter._async.threads == ["pplx_nb-loop"] * 3
    assert _SyncCounter.aadd.__qualname__ == "_SyncCounter.aadd"
    assert _SyncCounter.acount.__name__ == "count"
    assert inspect.signature(_SyncCounter.aadd) == inspect.signature(_Counter.aadd)
    assert (_SyncCounter.aadd.__doc__ or "").startswith("Sync :meth:`_Counter.aadd`. Add ``b``")


def test_every_method_of_the_sync_client_is_a_twin_of_the_async_one() -> None:
    from pplx_nb.api import AsyncClient, Client

    properties = {"settings", "cache", "rate_limit"}
    methods = {name for name in vars(Client) if not name.startswith("_")} - properties
    cores = {name: "aclose" if name == "close" else name for name in methods}
    assert set(cores.values()) == {
        name
        for name, member in vars(AsyncClient).items()
        if not name.startswith("_") and callable(member)
    }
    for name, core_name in cores.items():
        twin, core = getattr(Client, name), getattr(AsyncClient, core_name)
        assert twin.__qualname__ == f"Client.{name}" and not inspect.iscoroutinefunction(twin)
        assert inspect.signature(twin) == inspect.signature(core)
        assert inspect.getdoc(core) in (inspect.getdoc(twin) or "")
