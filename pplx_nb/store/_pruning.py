"""Pruning: deleting the conversations not updated for a while, keeping any whose job is
pending or running and any that cannot be read."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from pplx_nb._errors import (
    ConversationCorrupted,
    ConversationNotFound,
    FilesystemError,
    ValidationError,
)
from pplx_nb._logging import get_logger
from pplx_nb._models import ACTIVE_JOB_STATES, JobState
from pplx_nb.store._base import StoreBackend
from pplx_nb.store._listing import parse_instant

__all__ = ["prune"]

logger = get_logger("pplx_nb.store")


def prune(
    backend: StoreBackend,
    job_state: Callable[[str], JobState | None],
    delete: Callable[[str], None],
    older_than: timedelta,
) -> int:
    """What :meth:`ConversationStore.prune` does: ``delete`` each conversation not updated for
    ``older_than`` unless ``job_state`` says its job is active; return how many were deleted."""
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise ValidationError(
            f"prune(older_than=...) needs a non-negative timedelta, got {older_than!r}, "
            "e.g. timedelta(days=30).",
        )
    try:
        cutoff = datetime.now(UTC) - older_than
    except OverflowError:
        return 0  # before year 1: no conversation is that old
    cutoff_ms = int(cutoff.timestamp() * 1000)
    deleted = 0
    for conversation_id in backend.ids():
        if int(conversation_id[9:]) >= cutoff_ms:
            continue
        try:
            summary = backend.summary(conversation_id)
            if job_state(conversation_id) in ACTIVE_JOB_STATES:
                continue
            if parse_instant(summary.get("updatedAt"), "updatedAt") >= cutoff:
                continue
            delete(conversation_id)
        except (
            ConversationNotFound,
            ConversationCorrupted,
            FilesystemError,
            ValidationError,
        ) as exc:
            logger.info("prune: keeping %s (%s)", conversation_id, exc)
            continue
        deleted += 1
    return deleted
