"""The Researcher behind the MCP tools, built on first use.

Importing the Researcher (API client, store, job queue) is most of a cold start, so the server
answers ``initialize`` first and builds it when the first tool or resource needs it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from pplx_nb._config import Settings

if TYPE_CHECKING:
    from pplx_nb.research import Researcher

__all__ = ["Backend"]


class Backend:
    """Holds the one Researcher of a server; thread-safe, built on first :meth:`get`."""

    def __init__(self, settings: Settings, researcher: Researcher | None) -> None:
        self.settings = settings
        self._researcher = researcher
        self._lock = threading.Lock()

    @property
    def async_mode(self) -> bool:
        """Whether deep research is queued for the background worker."""
        if self._researcher is not None:
            return self._researcher.async_deep_research
        return bool(self.settings.enable_async_deep_research)

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

    def start_worker(self) -> None:
        """Start the Researcher's background worker (it runs queued deep research)."""
        researcher = self.get()
        # Create the queue first: Researcher.start_worker builds it under its own (non-reentrant)
        # lock, and would wait on itself if the queue did not exist yet.
        _ = researcher.queue
        researcher.start_worker()

    def close(self) -> None:
        """Stop the worker and close the API clients, if the Researcher was ever built."""
        if self._researcher is not None:
            self._researcher.close()
