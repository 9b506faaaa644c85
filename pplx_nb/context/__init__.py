"""Context that follows the conversation.

The pure pieces the :class:`~pplx_nb.Researcher` calls before each request:

- follow-ups: :func:`is_follow_up`, :func:`reformulate` (deterministic heuristic) and
  :func:`areformulate` (a cheap model when a real API is used, the heuristic otherwise), so the
  search sees "how do I cancel asyncio task?" instead of "how do I cancel it?";
- the history budget: :data:`CONTEXT_WINDOWS`, :func:`estimate_tokens`, :func:`fit_history`, and
  :func:`budget_tokens` / :func:`message_tokens` to check a request against the same rule;
- attached files: :func:`prepare_files`, embedded once per conversation, confined to allowed roots;
- branches: :func:`chain_messages`, the history of a forked conversation.
"""

from __future__ import annotations

from pplx_nb.context._budget import (
    CONTEXT_WINDOWS,
    FittedHistory,
    budget_tokens,
    context_window,
    estimate_tokens,
    fit_history,
    message_tokens,
)
from pplx_nb.context._chain import MAX_CHAIN_DEPTH, chain_messages
from pplx_nb.context._files import (
    DEFAULT_MAX_BYTES,
    PreparedFiles,
    allowed_roots,
    prepare_files,
    resolve_attachments,
    scrub_secrets,
)
from pplx_nb.context._followup import is_follow_up, reformulate, subject_of
from pplx_nb.context._rewrite import areformulate

__all__ = [
    "CONTEXT_WINDOWS",
    "DEFAULT_MAX_BYTES",
    "MAX_CHAIN_DEPTH",
    "FittedHistory",
    "PreparedFiles",
    "allowed_roots",
    "areformulate",
    "budget_tokens",
    "chain_messages",
    "context_window",
    "estimate_tokens",
    "fit_history",
    "is_follow_up",
    "message_tokens",
    "prepare_files",
    "reformulate",
    "resolve_attachments",
    "scrub_secrets",
    "subject_of",
]
