"""Listing and searching stored conversations: summaries filtered by time, tool, model and text,
and documents read in batches.

Conversations are read in batches that grow from the first (one round trip each on Redis); one
that cannot be read, or that names another conversation (a folder copied under a new id), is
skipped with a warning, never breaking the listing of the others. The
job states come from the job side, and a document a batch read caught mid-rewrite is read again
patiently by the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pydantic

from pplx_nb._errors import (
    ConversationCorrupted,
    ConversationNotFound,
    FilesystemError,
    PplxError,
    ValidationError,
)
from pplx_nb._logging import get_logger
from pplx_nb._models import ConversationSummary, JobState
from pplx_nb._option_names import option_error
from pplx_nb.store._base import StoreBackend
from pplx_nb.store._document import SUMMARY_KEY, corrupted, first_problem, misplaced, parse

__all__ = ["documents", "list_summaries", "parse_instant"]

logger = get_logger("pplx_nb.store")

_FIRST_BATCH = 64
_LARGEST_BATCH = 512

JobStatesOf = Callable[[Sequence[str]], list[JobState | None]]
"""The job side's ``job_states``: each conversation's job state, asked in one batch."""

Reread = Callable[[str], dict[str, Any]]
"""The store's ``read_raw``: a conversation's document, read patiently."""


def list_summaries(
    backend: StoreBackend,
    job_states: JobStatesOf,
    reread: Reread,
    *,
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    tool: str | None = None,
    model: str | None = None,
    text: str | None = None,
    limit: int | None = None,
) -> tuple[list[ConversationSummary], list[PplxError]]:
    """The summaries :meth:`ConversationStore.list` returns, newest first, and the errors of
    the conversations it skipped (each also logged as a warning)."""
    low = _to_ms(since, "since")
    high = _to_ms(until, "until")
    needle = text.casefold() if text else None
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise option_error(
            "{given} is not accepted; give a whole number of 0 or more.", "limit", limit
        )
    candidates: list[str] = []
    for conversation_id in backend.ids():
        created_ms = int(conversation_id[9:])
        if high is not None and created_ms > high:
            continue
        if low is not None and created_ms < low:
            break
        candidates.append(conversation_id)
    found: list[ConversationSummary] = []
    skipped: list[PplxError] = []
    for chunk in _chunks(candidates, limit):
        if limit is not None and len(found) >= limit:
            break
        summaries = backend.summaries(chunk)
        states = job_states(chunk)
        read_documents = backend.read_many(chunk) if needle else [None] * len(chunk)
        for conversation_id, read, state, document in zip(
            chunk, summaries, states, read_documents, strict=True
        ):
            if limit is not None and len(found) >= limit:
                break
            try:
                if isinstance(read, PplxError):
                    raise read
                summary = read
                if summary.get("conversationId") != conversation_id:
                    where = backend.document_location(conversation_id)
                    raise misplaced(summary.get("conversationId"), conversation_id, where)
                summary["jobStatus"] = state
                if (tool and tool not in summary.get("tools", ())) or (
                    model and model not in summary.get("models", ())
                ):
                    continue
                if needle and not _contains(backend, reread, conversation_id, needle, document):
                    continue
                found.append(_summary_model(backend, conversation_id, summary))
            except ConversationNotFound:
                continue  # deleted meanwhile, or a folder whose conversation is being created
            except (ConversationCorrupted, FilesystemError) as exc:
                logger.warning("Skipping conversation %s: %s", conversation_id, exc)
                skipped.append(exc)
    return found, skipped


def documents(
    backend: StoreBackend, reread: Reread, ids: Sequence[str] | None = None
) -> Iterator[tuple[str, dict[str, Any] | PplxError]]:
    """What :meth:`ConversationStore.documents` yields: each conversation's document, or the
    error reading it gave, read in batches."""
    chosen = backend.ids() if ids is None else [*ids]
    for chunk in _chunks(chosen, None):
        for conversation_id, read in zip(chunk, backend.read_many(chunk), strict=True):
            try:
                yield conversation_id, _document(backend, reread, conversation_id, read)
            except (ConversationNotFound, ConversationCorrupted, FilesystemError) as exc:
                yield conversation_id, exc


def parse_instant(value: object, name: str) -> datetime:
    """``value`` (a datetime or an ISO 8601 string; naive means UTC) as an aware datetime;
    VALIDATION_ERROR naming the option ``name`` otherwise."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise option_error(
                "{given} is not an ISO 8601 instant, e.g. 2025-01-24T15:00:00Z.", name, value
            ) from exc
    else:
        raise ValidationError(
            f"{name} must be a datetime or an ISO 8601 string, got {type(value).__name__}.",
        )
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _to_ms(value: datetime | str | None, name: str) -> int | None:
    if value is None:
        return None
    return int(parse_instant(value, name).timestamp() * 1000)


def _contains(
    backend: StoreBackend,
    reread: Reread,
    conversation_id: str,
    needle: str,
    read: bytes | PplxError | None,
) -> bool:
    """Whether a message of the conversation (its document ``read`` in a batch) holds
    ``needle``."""
    messages = _document(backend, reread, conversation_id, read)["messages"]
    return any(needle in message["content"].casefold() for message in messages)


def _document(
    backend: StoreBackend, reread: Reread, conversation_id: str, read: bytes | PplxError | None
) -> dict[str, Any]:
    """The document of a batch read, read again patiently if it did not parse."""
    if isinstance(read, PplxError):
        raise read
    if read is not None:
        try:
            # No file name for its errors: none is raised here (reading again names the file),
            # and a bulk read would otherwise build one for every conversation.
            document = parse(read, conversation_id, "")
        except ConversationCorrupted:
            pass  # perhaps caught mid-rewrite
        else:
            if document.get("conversationId") == conversation_id:
                document.pop(SUMMARY_KEY, None)
                return document
    # Read patiently: the error of a document still damaged, or naming another conversation.
    return reread(conversation_id)


def _summary_model(
    backend: StoreBackend, conversation_id: str, summary: dict[str, Any]
) -> ConversationSummary:
    try:
        return ConversationSummary.model_validate(summary)
    except pydantic.ValidationError as exc:
        where = backend.document_location(conversation_id)
        raise corrupted(conversation_id, where, first_problem(exc)) from exc


def _chunks(ids: Sequence[str], limit: int | None) -> Iterator[Sequence[str]]:
    """``ids`` in batches that grow from the first (``limit`` ids when given, so a short
    listing reads little) to a few hundred: one round trip each on Redis."""
    size = max(1, min(limit, _FIRST_BATCH)) if limit is not None else _FIRST_BATCH
    start = 0
    while start < len(ids):
        yield ids[start : start + size]
        start += size
        size = min(size * 4, _LARGEST_BATCH)
