"""This kernel's Researcher and the conversation a bare ``%pplx_followup`` continues.

The one documented default instance of the notebook layer: the magics and widgets share it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pplx_nb.research import Researcher

__all__ = ["get_researcher", "last_conversation_id", "remember", "set_researcher", "switch"]


class _Session:
    """This kernel's Researcher and the conversation a bare ``%pplx_followup`` continues."""

    def __init__(self) -> None:
        self.researcher: Researcher | None = None
        self.last_conversation_id: str | None = None
        self.lock = threading.Lock()


_session = _Session()


def set_researcher(researcher: Researcher | None) -> None:
    """Use ``researcher`` for every magic in this kernel (``None``: build one again on next use).

    The hook for tests and for notebooks that configure a Researcher in code. The previous
    Researcher is not closed: whoever created it owns it.
    """
    with _session.lock:
        _session.researcher = researcher
        _session.last_conversation_id = None


def get_researcher() -> Researcher:
    """This kernel's Researcher, created on first use from the environment."""
    with _session.lock:
        if _session.researcher is None:
            from pplx_nb._config import Settings
            from pplx_nb.research import Researcher

            settings = Settings.from_env()
            queued = settings.enable_async_deep_research is not False
            _session.researcher = Researcher(settings, async_deep_research=queued)
        return _session.researcher


def last_conversation_id() -> str | None:
    """The conversation this kernel asked in last (what a bare ``%pplx_followup`` continues)."""
    return _session.last_conversation_id


def remember(conversation_id: str | None) -> None:
    """Note ``conversation_id`` as the one a bare ``%pplx_followup`` continues."""
    if conversation_id:
        _session.last_conversation_id = conversation_id


def switch(researcher: Researcher) -> None:
    """Use ``researcher`` from now on, keeping the conversation a bare follow-up continues."""
    with _session.lock:
        _session.researcher = researcher
