"""pplx_nb: Perplexity's search-grounded answers as a first-class part of Jupyter.

``%load_ext pplx_nb`` loads the notebook magics; :class:`Researcher` is the Python façade; the same
core runs as an MCP server (``python -m pplx_nb.mcp``) and answers offline from a built-in simulator
(``python -m pplx_nb.sim``) when no API key is set.

Names are imported lazily on first use, so ``import pplx_nb`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from pplx_nb._config import Settings
    from pplx_nb._errors import (
        APIError,
        APIKeyInvalid,
        APIQuotaExceeded,
        APIServerError,
        APITimeoutError,
        BudgetExceeded,
        CacheError,
        ConversationCorrupted,
        ConversationNotFound,
        FilesystemError,
        InvalidInput,
        JobInProgress,
        LeaseLost,
        MissingExtra,
        NetworkError,
        PplxError,
        RemoteRunFailed,
        RunRequiresAction,
        RunTimedOut,
        StoreUnavailable,
        SubmissionUnknown,
        ValidationError,
    )
    from pplx_nb._models import (
        Answer,
        Conversation,
        ConversationSummary,
        Cost,
        JobStatus,
        Message,
        Progress,
        Source,
        Usage,
    )
    from pplx_nb._options import SearchOptions, WebSearchFilters
    from pplx_nb.research import Researcher
    from pplx_nb.store import ConversationStore

_LAZY: dict[str, str] = {
    "APIError": "pplx_nb._errors",
    "APIKeyInvalid": "pplx_nb._errors",
    "APIQuotaExceeded": "pplx_nb._errors",
    "APIServerError": "pplx_nb._errors",
    "APITimeoutError": "pplx_nb._errors",
    "Answer": "pplx_nb._models",
    "BudgetExceeded": "pplx_nb._errors",
    "CacheError": "pplx_nb._errors",
    "Conversation": "pplx_nb._models",
    "ConversationCorrupted": "pplx_nb._errors",
    "ConversationNotFound": "pplx_nb._errors",
    "ConversationStore": "pplx_nb.store",
    "ConversationSummary": "pplx_nb._models",
    "Cost": "pplx_nb._models",
    "FilesystemError": "pplx_nb._errors",
    "InvalidInput": "pplx_nb._errors",
    "JobInProgress": "pplx_nb._errors",
    "JobStatus": "pplx_nb._models",
    "LeaseLost": "pplx_nb._errors",
    "Message": "pplx_nb._models",
    "MissingExtra": "pplx_nb._errors",
    "NetworkError": "pplx_nb._errors",
    "PplxError": "pplx_nb._errors",
    "Progress": "pplx_nb._models",
    "RemoteRunFailed": "pplx_nb._errors",
    "RunRequiresAction": "pplx_nb._errors",
    "Researcher": "pplx_nb.research",
    "RunTimedOut": "pplx_nb._errors",
    "SearchOptions": "pplx_nb._options",
    "Settings": "pplx_nb._config",
    "Source": "pplx_nb._models",
    "StoreUnavailable": "pplx_nb._errors",
    "SubmissionUnknown": "pplx_nb._errors",
    "Usage": "pplx_nb._models",
    "ValidationError": "pplx_nb._errors",
    "WebSearchFilters": "pplx_nb._options",
}

__all__ = [
    "APIError",
    "APIKeyInvalid",
    "APIQuotaExceeded",
    "APIServerError",
    "APITimeoutError",
    "Answer",
    "BudgetExceeded",
    "CacheError",
    "Conversation",
    "ConversationCorrupted",
    "ConversationNotFound",
    "ConversationStore",
    "ConversationSummary",
    "Cost",
    "FilesystemError",
    "InvalidInput",
    "JobInProgress",
    "JobStatus",
    "LeaseLost",
    "Message",
    "MissingExtra",
    "NetworkError",
    "PplxError",
    "Progress",
    "RemoteRunFailed",
    "Researcher",
    "RunRequiresAction",
    "RunTimedOut",
    "SearchOptions",
    "Settings",
    "Source",
    "StoreUnavailable",
    "SubmissionUnknown",
    "Usage",
    "ValidationError",
    "WebSearchFilters",
    "__version__",
    "load_ipython_extension",
    "unload_ipython_extension",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pplx_nb' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext pplx_nb``: registers the ``%%pplx`` family of magics.

    Raises:
        MissingExtra: the notebook extra (IPython, ipywidgets, pandas) is not installed.
    """
    from pplx_nb._extras import require

    require("notebook", "%load_ext pplx_nb")
    from pplx_nb.notebook.extension import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Called by ``%unload_ext pplx_nb``."""
    from pplx_nb.notebook.extension import unload_ipython_extension as unload

    unload(ipython)
