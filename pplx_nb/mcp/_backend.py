"""The Researcher behind the MCP tools, built on first use, and where its work runs.

Importing the Researcher (API client, store, job queue) is most of a cold start, so the server
answers ``initialize`` first and builds it when the first tool or resource needs it. Its work
never runs on the server's event loop (see :mod:`pplx_nb.mcp._offload`): :meth:`Backend.call`
runs a coroutine on a private loop, :meth:`Backend.read` a blocking read on a worker thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from pplx_nb._config import Settings
from pplx_nb.mcp._offload import LoopPool, in_thread

if TYPE_CHECKING:
    from pplx_nb.research import Researcher

__all__ = ["Backend"]

T = TypeVar("T")


class Backend:
    """Holds the one Researcher of a server; thread-safe, built on first :meth:`get`."""

    def __init__(self, settings: Settings, researcher: Researcher | None) -> None:
        self.settings = settings
        self._researcher = researcher
        self._lock = threading.Lock()
        self._pool = LoopPool()

    @property
    def async_mode(self) -> bool:
        """Whether deep research is queued for the background worker."""
        if self._researcher is not None:
            return self._researcher.async_deep_research
        return bool(self.settings.enable_async_deep_research)

    @property
    def attachments(self) -> bool:
        """Whether tools may attach files (PPLX_NB_FILE_ROOTS names at least one folder)."""
        return bool(self.settings.file_roots)

    def get(self) -> Researcher:
        """The Researcher, built now if this is the first use."""
        if self._researcher is None:
            with self._lock:
                if self._researcher is None:
                    from pplx_nb.research import Researcher

                    self._researcher = Researcher(
                        self.settings, async_deep_research=self.async_mode
                    )
        return self._researcher

    async def call(self, work: Callable[[Researcher], Coroutine[Any, Any, T]]) -> T:
        """Await ``work(researcher)`` run on a private event loop of its own."""
        researcher = self._researcher
        if researcher is None:
            researcher = await in_thread(self.get)
        return await self._pool.run(work(researcher))

    async def read(self, work: Callable[[Researcher], T]) -> T:
        """``work(researcher)`` (blocking disk reads) on a worker thread."""
        return await in_thread(lambda: work(self.get()))

    def start_worker(self) -> None:
        """Start the Researcher's background worker (it runs queued deep research)."""
        self.get().ensure_worker()

    def close(self) -> None:
        """Stop the worker, close the API clients (on their loops), then stop the loops."""
        if self._researcher is not None:
            self._researcher.close()
        self._pool.close()
