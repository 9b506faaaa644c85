"""The ``conversation.json`` document: parsing, its canonical layout, appends, light summaries.

The store writes every document in one canonical layout::

    {"conversationId": "...", "createdAt": "...", "messageCount": 2, "messages": [
    {"role": "user", "content": "..."},
    {"role": "assistant", "content": "...", "sources": [...]}
    ]}

The header (every top-level key but ``messages``) is the first line, then one message per line.
Compact JSON never contains a raw newline, so an append splices the new lines in before the
closing ``]}`` and rewrites only the header: the history is neither decoded nor re-encoded. Any
other layout (the TypeScript server writes indented JSON) is parsed in full and rewritten
canonically on its first append.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from pplx_nb._errors import ConversationCorrupted, ValidationError

__all__ = [
    "Canonical",
    "append_messages",
    "corrupted",
    "encode",
    "extend_summary",
    "header",
    "parse",
    "split",
    "summarize",
]

_MARK = b'"messages": ['
_TAIL = b"\n]}\n"
_EMPTY_REST = _TAIL[1:]
_ROLES = frozenset(("system", "user", "assistant"))


class Canonical(NamedTuple):
    """A canonical document: its decoded header, and where its undecoded message lines are."""

    header: dict[str, Any]
    data: bytes
    body_start: int
    body_end: int
    message_count: int


def _dumps(value: Any) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except ValueError as exc:
        raise ValidationError(
            f"A conversation can hold only finite numbers ({exc}): NaN and Infinity are not "
            "JSON, and other readers of conversation.json reject them. Pass None or a string "
            "instead.",
        ) from exc


def _assemble(header: Mapping[str, Any], body: bytes) -> bytes:
    head = _dumps(dict(header))[:-1] + (b", " if header else b"") + _MARK
    return head + b"\n" + body + _TAIL if body else head + _TAIL


def encode(document: Mapping[str, Any]) -> bytes:
    """The canonical bytes of a document (a dict with a ``messages`` list)."""
    header = {key: value for key, value in document.items() if key != "messages"}
    return _assemble(header, b",\n".join(_dumps(m) for m in document["messages"]))


def header(data: bytes) -> dict[str, Any] | None:
    """The decoded header line (every key but ``messages``) of a canonical document, or ``None``."""
    newline = data.find(b"\n")
    head = data[:newline]
    if newline < 0 or not head.startswith(b"{") or not head.endswith(_MARK):
        return None
    try:
        decoded = json.loads(head[: -len(_MARK)].rstrip(b", ") + b"}")
    except (ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, dict) else None


def split(data: bytes) -> Canonical | None:
    """A canonical document's header and message lines, or ``None`` for any other layout.

    Nothing is copied: the message lines stay in ``data``, located by offsets.
    """
    decoded = header(data)
    if decoded is None:
        return None
    start = data.find(b"\n") + 1
    if data.endswith(_EMPTY_REST) and len(data) - start == len(_EMPTY_REST):
        end = start
        count = 0
    elif data.endswith(_TAIL) and len(data) - start > len(_TAIL):
        end = len(data) - len(_TAIL)
        count = data.count(b"\n", start, end) + 1
    else:
        return None
    if decoded.get("messageCount") != count:
        return None
    return Canonical(decoded, data, start, end, count)


def append_messages(
    canonical: Canonical, messages: Sequence[Mapping[str, Any]], updated_at: str
) -> bytes:
    """The new document bytes with ``messages`` appended (one copy of the history)."""
    fields = dict(canonical.header)
    fields["updatedAt"] = updated_at
    fields["messageCount"] = canonical.message_count + len(messages)
    head = _dumps(fields)[:-1] + b", " + _MARK
    lines = b",\n".join(_dumps(dict(m)) for m in messages)
    if canonical.body_start == canonical.body_end:
        return b"".join((head, b"\n", lines, _TAIL))
    body = memoryview(canonical.data)[canonical.body_start : canonical.body_end]
    return b"".join((head, b"\n", body, b",\n", lines, _TAIL))


def parse(data: bytes, conversation_id: str, where: str) -> dict[str, Any]:
    """Decode a whole document and check its shape; CONVERSATION_CORRUPTED says what is wrong."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise corrupted(conversation_id, where, f"not valid JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise corrupted(conversation_id, where, "the top level is not a JSON object")
    messages = document.get("messages")
    if not isinstance(messages, list):
        raise corrupted(conversation_id, where, '"messages" is missing or not a list')
    for number, message in enumerate(messages):
        if (
            not isinstance(message, dict)
            or message.get("role") not in _ROLES
            or not isinstance(message.get("content"), str)
        ):
            raise corrupted(
                conversation_id,
                where,
                f"message {number} lacks a role (system|user|assistant) or a string content",
            )
    return document


def corrupted(conversation_id: str, where: str, problem: str) -> ConversationCorrupted:
    """The CONVERSATION_CORRUPTED error for the document at ``where``, saying what is wrong."""
    return ConversationCorrupted(
        f"Conversation {conversation_id} is corrupted: {where}: {problem}. Restore the file from "
        "a backup or delete the conversation; other conversations are not affected.",
        conversation_id=conversation_id,
        path=where,
        problem=problem,
    )


def _add_unique(target: list[str], values: Iterable[Any]) -> None:
    for value in values:
        if isinstance(value, str) and value and value not in target:
            target.append(value)


def summarize(document: Mapping[str, Any]) -> dict[str, Any]:
    """The light summary of a decoded document (camelCase keys, as ``ConversationSummary``)."""
    summary = {
        key: document[key]
        for key in ("conversationId", "createdAt", "updatedAt", "parentConversationId")
        if key in document
    }
    summary.update(messageCount=0, firstQuery=None, tools=[], models=[])
    return extend_summary(summary, document["messages"], document.get("updatedAt"))


def extend_summary(
    summary: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], updated_at: Any
) -> dict[str, Any]:
    """``summary`` updated for ``messages`` appended at ``updated_at``."""
    result = dict(summary)
    tools, models = list(result.get("tools") or []), list(result.get("models") or [])
    _add_unique(tools, (m.get("tool") for m in messages))
    _add_unique(models, (m.get("model") for m in messages))
    if result.get("firstQuery") is None:
        result["firstQuery"] = next(
            (m.get("content") for m in messages if m.get("role") == "user"), None
        )
    result.update(
        tools=tools,
        models=models,
        messageCount=int(result.get("messageCount") or 0) + len(messages),
        updatedAt=updated_at,
    )
    return result
