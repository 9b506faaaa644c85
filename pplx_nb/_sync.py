"""Running async code from synchronous callers, including inside a running Jupyter kernel.

The kernel's thread already runs an event loop, so ``asyncio.run`` cannot be used there. Instead
every sync wrapper in pplx_nb hands its coroutine to ONE dedicated daemon thread that runs its own
event loop for the life of the process; the caller's thread blocks on the result (or, for
:func:`iterate_sync`, consumes items handed over through a queue).

:func:`sync_twin` makes a sync function from an async one in one line, as nbclient's
``execute = run_sync(async_execute)`` does::

    class Researcher:
        async def asearch(self, query: str) -> Answer: ...
        search = sync_twin(asearch)

:data:`TICK` is what :func:`iterate_sync` yields, when asked to, after ``tick`` seconds without an
item: a consumer that paints (a streaming notebook cell) gets a turn to repaint during a pause.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import inspect
import os
import queue
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from typing import Any, Concatenate, Final, ParamSpec, TypeVar, overload

__all__ = ["TICK", "Tick", "background_loop", "iterate_sync", "run_sync", "sync_twin"]

T = TypeVar("T")
A = TypeVar("A")
S = TypeVar("S")
P = ParamSpec("P")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_pid: int | None = None


class Tick(enum.Enum):
    """The type of :data:`TICK` (an enum member, so type checkers narrow ``item is TICK``)."""

    TICK = "tick"


TICK: Final = Tick.TICK
"""Yielded by ``iterate_sync(items, tick=...)`` when no item came for ``tick`` seconds."""


def background_loop() -> asyncio.AbstractEventLoop:
    """The shared background event loop, started on first use (again after a fork)."""
    global _loop, _thread, _pid
    with _lock:
        if _loop is None or _pid != os.getpid() or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=serve, name="pplx_nb-loop", daemon=True)
            thread.start()
            ready.wait()
            _loop, _thread, _pid = loop, thread, os.getpid()
        return _loop


def _check_thread() -> None:
    if threading.current_thread() is _thread:
        raise RuntimeError(
            "A pplx_nb sync method was called from pplx_nb's own event-loop thread; "
            "await the async method instead."
        )


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the background loop and return its result in the calling thread.

    Works whether or not the calling thread runs an event loop. Interrupting the wait (Ctrl-C,
    a kernel interrupt) cancels the coroutine.
    """
    loop = background_loop()
    try:
        _check_thread()
    except RuntimeError:
        coro.close()
        raise
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return future.result(timeout)
    except BaseException:
        future.cancel()
        raise


@overload
def iterate_sync(items: AsyncIterator[T], tick: None = None) -> Generator[T, None, None]: ...


@overload
def iterate_sync(items: AsyncIterator[T], tick: float) -> Generator[T | Tick, None, None]: ...


def iterate_sync(
    items: AsyncIterator[T], tick: float | None = None
) -> Generator[T | Tick, None, None]:
    """Iterate ``items`` on the background loop, yielding each one in the calling thread.

    Items pass through a queue, so the consumer (e.g. the kernel's main thread) does the work
    between items. Stopping early (``break``, ``close()``, an exception) cancels the producer.
    With ``tick`` (seconds), :data:`TICK` is yielded whenever no item has come for that long, so
    the consumer can do timed work (repaint a clock) while it waits; without it, only items come.
    """
    handoff: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
    loop = background_loop()
    _check_thread()
    future = asyncio.run_coroutine_threadsafe(_pump(items, handoff), loop)
    finished = False
    try:
        while True:
            try:
                kind, value = handoff.get(timeout=tick)
            except queue.Empty:
                yield TICK
                continue
            if kind == "item":
                yield value
                continue
            finished = True
            if kind == "error":
                raise value
            return
    finally:
        if not finished:
            future.cancel()


async def _pump(items: AsyncIterator[T], handoff: queue.SimpleQueue[tuple[str, Any]]) -> None:
    """Hand ``items`` over one by one, then ``done`` or the ``error`` that ended them."""
    try:
        async for item in items:
            handoff.put(("item", item))
    except BaseException as exc:
        handoff.put(("error", exc))
        if not isinstance(exc, Exception):
            raise
    else:
        handoff.put(("done", None))
    finally:
        closer = getattr(items, "aclose", None)
        if closer is not None:
            await closer()


@overload
def sync_twin(
    func: Callable[P, Coroutine[Any, Any, T]], /, name: str | None = None, *, via: None = None
) -> Callable[P, T]: ...


@overload
def sync_twin(
    func: Callable[P, AsyncIterator[T]], /, name: str | None = None, *, via: None = None
) -> Callable[P, Generator[T, None, None]]: ...


@overload
def sync_twin(
    func: Callable[Concatenate[A, P], Coroutine[Any, Any, T]],
    /,
    name: str | None = None,
    *,
    via: Callable[[S], A],
) -> Callable[Concatenate[S, P], T]: ...


@overload
def sync_twin(
    func: Callable[Concatenate[A, P], AsyncIterator[T]],
    /,
    name: str | None = None,
    *,
    via: Callable[[S], A],
) -> Callable[Concatenate[S, P], Generator[T, None, None]]: ...


def sync_twin(
    func: Callable[..., Any], /, name: str | None = None, *, via: Callable[[Any], Any] | None = None
) -> Callable[..., Any]:
    """The blocking twin of ``func``, with its parameters and docstring.

    A coroutine function's twin returns its result (:func:`run_sync`); an async generator
    function's twin returns a generator whose items are produced on the background loop and
    consumed in the calling thread (:func:`iterate_sync`). The twin is called ``name``, by
    default ``func``'s name without its leading ``a`` (``asearch`` -> ``search``).

    ``via``: ``func`` is a method of another class (a sync client's ``AsyncClient.ask``) and
    ``via(self)`` is the instance to call it on; a function defined in the twin's class body,
    which also names that class. The twin then keeps ``func``'s name by default, as httpx's
    ``Client`` and ``AsyncClient`` share theirs.
    """
    streams = inspect.isasyncgenfunction(func)

    @functools.wraps(func)
    def twin(*args: Any, **kwargs: Any) -> Any:
        if via is not None:
            args = (via(args[0]), *args[1:])
        if streams:
            return iterate_sync(func(*args, **kwargs))
        return run_sync(func(*args, **kwargs))

    twin.__name__ = name or (func.__name__ if via else func.__name__.removeprefix("a"))
    owner = (via or func).__qualname__.rpartition(".")[0]
    twin.__qualname__ = f"{owner}.{twin.__name__}".lstrip(".")
    what = func.__qualname__ if via else func.__name__
    twin.__doc__ = f"Sync :meth:`{what}`. {func.__doc__ or ''}".rstrip()
    return twin
