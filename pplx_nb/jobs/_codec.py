"""A job status and a queued request as JSON bytes, the same for every status backend.

Both backends store the ``status.json`` and ``job.json`` shapes (camelCase, ``None`` fields left
out), so a status moved between files and Redis reads the same. Damage is reported as
CONVERSATION_CORRUPTED naming where the value lives (a file, a Redis key), never a crash.
"""

from __future__ import annotations

import json

import pydantic

from pplx_nb._errors import ConversationCorrupted
from pplx_nb._models import JOB_STATES, JobRecord, JobState, JobStatus

__all__ = ["encode", "parse_record", "parse_state", "parse_status"]


def encode(model: pydantic.BaseModel) -> bytes:
    """Compact JSON straight from pydantic-core: no dict in between, no pure-Python encoder."""
    return model.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8")


def parse_status(raw: bytes, where: str) -> JobStatus:
    """``raw`` as a :class:`JobStatus`; CONVERSATION_CORRUPTED naming ``where`` if it is not."""
    try:
        return JobStatus.model_validate_json(raw)
    except pydantic.ValidationError as exc:
        _checked_state(_decoded(raw, where), where)
        raise ConversationCorrupted(
            f"{where} does not match the status schema: {exc}. Delete it to reset the job state.",
            path=where,
        ) from exc


def parse_state(raw: bytes, where: str) -> JobState:
    """Only the ``status`` of ``raw``, checked with ``attempts`` (a status written by another
    tool with fewer fields still answers)."""
    return _checked_state(_decoded(raw, where), where)


def parse_record(raw: bytes, where: str) -> JobRecord:
    """``raw`` as a :class:`JobRecord`; CONVERSATION_CORRUPTED naming ``where`` if it is not."""
    try:
        return JobRecord.model_validate_json(raw)
    except pydantic.ValidationError as exc:
        _decoded(raw, where)
        raise ConversationCorrupted(
            f"{where} does not hold a queued job: {exc}. Delete it to reset the job state.",
            path=where,
        ) from exc


def _decoded(raw: bytes, where: str) -> dict[str, object]:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ConversationCorrupted(
            f"{where} is not valid JSON ({exc}). Restore it from a backup or delete it to reset "
            "the job state.",
            path=where,
        ) from exc
    if not isinstance(data, dict):
        raise ConversationCorrupted(
            f"{where} does not hold a JSON object. Delete it to reset the job state.", path=where
        )
    return data


def _checked_state(data: dict[str, object], where: str) -> JobState:
    state, attempts = data.get("status"), data.get("attempts", 0)
    if state not in JOB_STATES or not isinstance(attempts, int):
        raise ConversationCorrupted(
            f"{where} holds no valid job state (status {state!r}, attempts {attempts!r}). "
            "Delete it to reset the job state.",
            path=where,
        )
    return state
