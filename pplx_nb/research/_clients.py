"""The API clients of a Researcher: one per event loop (connections are bound to their loop), all
sharing one response cache."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from typing import TYPE_CHECKING

from pplx_nb._config import Settings

if TYPE_CHECKING:
    from pplx_nb.api import AsyncClient, ResponseCache
    from pplx_nb.budget import BudgetGuard

__all__ = ["ClientPool"]


class ClientPool:
    """Hands out the client of the running event loop, or ``fixed`` for every call if given.

    ``budget``: the spend caps of the store, which every client made here checks before it
    pays (``fixed`` has its own).
    """

    def __init__(
        self,
        settings: Settings,
        fixed: AsyncClient | None = None,
        budget: BudgetGuard | None = None,
    ) -> None:
        self._settings = settings
        self._fixed = fixed
        self.budget = fixed.budget if fixed is not None else budget
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self._cache: ResponseCache | None = None
        self._lock = threading.Lock()

    @property
    def cache(self) -> ResponseCache | None:
        """The shared response cache, once a client was made."""
        return self._cache

    def current(self) -> AsyncClient:
        """The client of the running event loop (made on first use)."""
        if self._fixed is not None:
            return self._fixed
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients.setdefault(loop, self.new())
        return client

    def for_job(self) -> AsyncClient:
        """A client for one background job, which closes it: nothing outlives the worker's loop."""
        return self._fixed or self.new()

    def new(self) -> AsyncClient:
        """A new client over the shared cache."""
        from pplx_nb.api import AsyncClient, ResponseCache

        with self._lock:
            if self._cache is None:
                self._cache = ResponseCache(
                    ttl=self._settings.cache_ttl, max_size=self._settings.cache_max_size
                )
        return AsyncClient(self._settings, cache=self._cache, budget=self.budget)

    def close(self) -> None:
        """Close the client of every event loop used, from any thread."""
        clients = list(self._clients.items())
        self._clients.clear()
        for loop, client in clients:
            if loop.is_closed():
                continue
            with contextlib.suppress(Exception):
                if not loop.is_running():
                    loop.run_until_complete(client.aclose())
                elif _running_loop() is loop:
                    loop.create_task(client.aclose())
                else:
                    asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=5)

    async def aclose_current(self) -> None:
        """Close the running loop's client, awaiting it."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
