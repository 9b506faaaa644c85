"""A conversation on Redis as the canonical document: its meta hash and its message list.

``where`` in these functions names the conversation's keys in error messages
(:meth:`RedisBackend.document_location <pplx_nb.store._redis.RedisBackend.document_location>`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pplx_nb.store._document import (
    SUMMARY_KEY,
    assemble,
    corrupted,
    fresh_summary_field,
    parse,
    summary_field,
)

__all__ = ["REQUIRED", "decoded", "document_of", "header_fields", "summary_of_meta"]

REQUIRED = ("conversationId", "createdAt", "updatedAt", "messageCount")
"""The meta fields every stored conversation has, in the order documents list them."""


def document_of(
    conversation_id: str, where: str, meta: dict[bytes, bytes], lines: list[bytes]
) -> bytes:
    """The canonical document of ``meta`` and ``lines``: CONVERSATION_CORRUPTED unless the
    meta hash counts the lines and each is one line (as the store writes them), so that
    the store can tell each line holds one message."""
    fields = header_fields(conversation_id, where, meta)
    count = decoded(conversation_id, where, meta, ("messageCount",))["messageCount"]
    problem = None
    if count != len(lines):
        problem = f"its meta hash says messageCount {count}, its messages list holds {len(lines)}"
    elif b"\n" in b"".join(lines):
        problem = "a message in its messages list spans several lines"
    if problem is not None:
        raise corrupted(conversation_id, where, problem)
    return assemble(fields, lines)


def header_fields(
    conversation_id: str, where: str, meta: dict[bytes, bytes]
) -> list[tuple[str, bytes]]:
    """The meta hash as header fields: the required ones first, the summary last."""
    named = {_name(conversation_id, where, key): value for key, value in meta.items()}
    missing = [name for name in REQUIRED if name not in named]
    if missing:
        raise corrupted(conversation_id, where, f"its meta hash lacks {', '.join(missing)}")
    order = [*REQUIRED, *sorted(set(named) - {*REQUIRED, SUMMARY_KEY})]
    if SUMMARY_KEY in named:
        order.append(SUMMARY_KEY)
    return [(name, named[name]) for name in order]


def summary_of_meta(
    conversation_id: str, where: str, meta: dict[bytes, bytes], lines: list[bytes]
) -> dict[str, Any]:
    """The stored summary when current, else one computed from the messages."""
    found = decoded(conversation_id, where, meta, (SUMMARY_KEY, "messageCount"))
    fresh = fresh_summary_field(found)
    if fresh is not None and found.get("messageCount") == len(lines):
        return fresh
    document = parse(b'{"messages": [' + b",".join(lines) + b"]}", conversation_id, where)
    return summary_field({}, document["messages"])


def decoded(
    conversation_id: str, where: str, meta: dict[bytes, bytes], names: Sequence[str]
) -> dict[str, Any]:
    """The meta fields ``names`` as JSON values (those present); CONVERSATION_CORRUPTED when
    one is not JSON."""
    values: dict[str, Any] = {}
    for name in names:
        raw = meta.get(name.encode())
        if raw is None:
            continue
        try:
            values[name] = json.loads(raw)
        except (ValueError, RecursionError):
            raise corrupted(
                conversation_id, where, f"its meta field {name} is not valid JSON"
            ) from None
    return values


def _name(conversation_id: str, where: str, key: bytes) -> str:
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        raise corrupted(
            conversation_id, where, "its meta hash has a field name that is not UTF-8"
        ) from None
