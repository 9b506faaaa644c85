"""This kernel's Researcher and the conversation a bare ``%pplx_followup`` continues.

The one documented default instance of the notebook layer: the magics and widgets share it.
Unless a notebook sets its own Researcher (:func:`set_researcher`), the settings are read from the
environment again before each magic, so ``%env CONVERSATION_LOGS_DIR=...`` or a change to
``os.environ`` takes effect for the next magic: a Researcher over the new settings (and its
worker, which then serves the folder in use) replaces the old one, which is closed in the
background.
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pplx_nb._config import Settings
    from pplx_nb.research import Researcher

__all__ = [
    "close_session",
    "forget",
    "get_researcher",
    "last_conversation_id",
    "remember",
    "set_researcher",
    "switch",
]

_RETIRE_SECONDS = 20.0
"""How long a replaced Researcher's worker may take to finish or release its running jobs."""
_EXIT_SECONDS = 4.0
"""The same when the kernel shuts down: a kernel is killed if it takes much longer to stop."""


class _Session:
    """This kernel's Researcher and the conversation a bare ``%pplx_followup`` continues."""

    def __init__(self) -> None:
        self.researcher: Researcher | None = None
        self.explicit = False
        """Whether the Researcher was set in code (then the environment is not read again)."""
        self.overrides: dict[str, Any] = {}
        """Settings the magics changed (``%pplx_config --offline``), kept over the environment."""
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
        _session.explicit = researcher is not None
        _session.overrides = {}
        _session.last_conversation_id = None


def get_researcher(*, reread: bool = True) -> Researcher:
    """This kernel's Researcher, over the settings the environment holds now.

    Built on first use, and built again when the settings changed since (a Researcher set with
    :func:`set_researcher` is kept as it is). ``reread=False`` skips reading the environment
    (a few milliseconds) when one was built already: a magic reads it once, when it starts.
    """
    from pplx_nb._config import Settings

    with _session.lock:
        current = _session.researcher
        if current is not None and (_session.explicit or not reread):
            return current
        settings = Settings.from_env(**_session.overrides)
        if current is not None and current.settings == settings:
            return current
        fresh = _build(settings)
        if current is not None and current.store.location != fresh.store.location:
            _session.last_conversation_id = None
        _session.researcher = fresh
    if current is not None:
        _retire(current)
    return fresh


def _build(settings: Settings) -> Researcher:
    """A Researcher that queues deep research unless the settings turn that off."""
    from pplx_nb.research import Researcher

    queued = settings.enable_async_deep_research is not False
    return Researcher(settings, async_deep_research=queued)


def _retire(researcher: Researcher, seconds: float = _RETIRE_SECONDS) -> None:
    """Close ``researcher`` on a helper thread: its worker may take seconds to let go of jobs."""
    threading.Thread(
        target=researcher.close, kwargs={"timeout": seconds}, name="pplx-retire", daemon=True
    ).start()


def last_conversation_id() -> str | None:
    """The conversation this kernel asked in last (what a bare ``%pplx_followup`` continues)."""
    return _session.last_conversation_id


def remember(conversation_id: str | None) -> None:
    """Note ``conversation_id`` as the one a bare ``%pplx_followup`` continues."""
    if conversation_id:
        _session.last_conversation_id = conversation_id


def forget() -> None:
    """No conversation to continue: a new question is on its way and is not stored yet.

    Were it interrupted, a bare ``%pplx_followup`` would otherwise continue the conversation
    before it, which the user did not mean.
    """
    _session.last_conversation_id = None


def switch(**overrides: Any) -> Researcher:
    """Use these settings over the environment's from now on; return the new Researcher.

    The conversation a bare follow-up continues is kept when the folder stays the same.
    """
    with _session.lock:
        _session.overrides = {**_session.overrides, **overrides}
        if _session.explicit and _session.researcher is not None:
            # A Researcher set in code: derive the new one from its settings, not the environment.
            settings = _session.researcher.settings.model_copy(update=overrides)
            _session.researcher = _build(settings)
            return _session.researcher
    return get_researcher()


def close_session(seconds: float = _EXIT_SECONDS) -> None:
    """Stop the kernel's Researcher (its worker lets go of the folder) before the kernel exits.

    Registered with :mod:`atexit` when the extension loads, so a temporary logs folder removed
    at exit is not written to by the worker while it is being removed.
    """
    with _session.lock:
        researcher, _session.researcher = _session.researcher, None
        explicit = _session.explicit
    if researcher is not None and not explicit:
        researcher.close(timeout=seconds)


def register_exit() -> None:
    """Register :func:`close_session` with :mod:`atexit` (once)."""
    atexit.unregister(close_session)
    atexit.register(close_session)
