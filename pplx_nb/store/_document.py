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

The header also carries ``pplxSummary`` (first query, tools and models, and the message count it
describes), so ``list()`` reads one line per conversation. It is a derived copy: trusted only
while its count equals the header's ``messageCount`` (another writer that keeps unknown keys
but appends messages makes it stale), recomputed on the next append, and never part of a
loaded :class:`~pplx_nb._models.Conversation`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pplx_nb._errors import ConversationCorrupted, ValidationError, not_unicode

if TYPE_CHECKING:
    import pydantic

__all__ = [
    "SUMMARY_KEY",
    "TAIL",
    "Canonical",
    "append_messages",
    "appended",
    "assemble",
    "body",
    "check_lines",
    "corrupted",
    "dumps",
    "encode",
    "first_problem",
    "fresh_summary_field",
    "header",
    "last_role",
    "misplaced",
    "new_document",
    "parse",
    "replaced",
    "split",
    "summarize",
    "summary_field",
    "summary_of_header",
]

SUMMARY_KEY = "pplxSummary"
"""The header key holding the derived listing summary (see the module docstring)."""

_MARK = b'"messages": ['
TAIL = b"\n]}\n"
"""How every canonical document ends: a file cut short does not."""
_EMPTY_REST = TAIL[1:]
_ROLES = frozenset(("system", "user", "assistant"))
_DECODER = json.JSONDecoder()
_BARE_HEAD = '{"messages": ['
_LAST_KEY = ', "messages": ['


class Canonical(NamedTuple):
    """A canonical document: its decoded header, and where its undecoded message lines are."""

    header: dict[str, Any]
    data: bytes
    body_start: int
    body_end: int
    message_count: int


def dumps(value: Any) -> bytes:
    """``value`` as the compact one-line JSON every document is made of (UTF-8, finite numbers)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        raise not_unicode("A message") from None
    except ValueError as exc:
        raise ValidationError(
            f"A conversation can hold only finite numbers ({exc}): NaN and Infinity are not "
            "JSON, and other readers of conversation.json reject them. Pass None or a string "
            "instead.",
        ) from exc


def _assemble(header: Mapping[str, Any], body: bytes) -> bytes:
    head = dumps(dict(header))[:-1] + (b", " if header else b"") + _MARK
    return head + b"\n" + body + TAIL if body else head + TAIL


def assemble(fields: Iterable[tuple[str, bytes]], lines: Sequence[bytes]) -> bytes:
    """The canonical document of header ``fields`` (names with their JSON values, as stored)
    and message ``lines`` (one JSON message each), without decoding any of them."""
    head = b"{" + b"".join(dumps(name) + b": " + value + b", " for name, value in fields) + _MARK
    return head + b"\n" + b",\n".join(lines) + TAIL if lines else head + TAIL


def encode(document: Mapping[str, Any]) -> bytes:
    """The canonical bytes of a document (a dict with a ``messages`` list), summary included."""
    header = {key: value for key, value in document.items() if key != "messages"}
    header[SUMMARY_KEY] = summary_field({}, document["messages"])
    return _assemble(header, b",\n".join(dumps(m) for m in document["messages"]))


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
    span = None if decoded is None else body(data)
    if decoded is None or span is None:
        return None
    start, end = span
    count = data.count(b"\n", start, end) + 1 if end > start else 0
    if decoded.get("messageCount") != count:
        return None
    return Canonical(decoded, data, start, end, count)


def body(data: bytes) -> tuple[int, int] | None:
    """Where the message lines of a document laid out as canonical documents are (from the line
    after the first to the closing ``]}``), or ``None``; neither line is counted nor decoded."""
    start = data.find(b"\n") + 1
    if data.endswith(_EMPTY_REST) and len(data) - start == len(_EMPTY_REST):
        return (start, start)
    if start and data.endswith(TAIL) and len(data) - start > len(TAIL):
        return (start, len(data) - len(TAIL))
    return None


def append_messages(
    canonical: Canonical, messages: Sequence[Mapping[str, Any]], updated_at: str
) -> bytes:
    """The new document bytes with ``messages`` appended (one copy of the history)."""
    fields = dict(canonical.header)
    fields["updatedAt"] = updated_at
    fields["messageCount"] = canonical.message_count + len(messages)
    previous = fresh_summary_field(canonical.header)
    if previous is None:
        history = canonical.data[canonical.body_start : canonical.body_end]
        previous = summary_field({}, json.loads(b"[" + history + b"]"))
    fields[SUMMARY_KEY] = summary_field(previous, messages)
    head = dumps(fields)[:-1] + b", " + _MARK
    lines = b",\n".join(dumps(dict(m)) for m in messages)
    if canonical.body_start == canonical.body_end:
        return b"".join((head, b"\n", lines, TAIL))
    body = memoryview(canonical.data)[canonical.body_start : canonical.body_end]
    return b"".join((head, b"\n", body, b",\n", lines, TAIL))


def new_document(
    conversation_id: str,
    stamp: str,
    messages: Sequence[Mapping[str, Any]],
    meta: Mapping[str, Any],
) -> bytes:
    """The canonical bytes of a conversation created at ``stamp`` (ISO 8601)."""
    return encode(
        {
            "conversationId": conversation_id,
            "createdAt": stamp,
            "updatedAt": stamp,
            "messageCount": len(messages),
            **meta,
            "messages": [dict(m) for m in messages],
        }
    )


def appended(
    data: bytes,
    messages: Sequence[Mapping[str, Any]],
    updated_at: str,
    conversation_id: str,
    where: str,
) -> bytes:
    """``data`` with ``messages`` appended: spliced in after the history when ``data`` is laid out
    canonically, else the whole document re-encoded (one another program wrote)."""
    canonical = split(data)
    if canonical is not None:
        return append_messages(canonical, messages, updated_at)
    document = parse(data, conversation_id, where)
    document["messages"].extend(dict(m) for m in messages)
    document["updatedAt"] = updated_at
    document["messageCount"] = len(document["messages"])
    return encode(document)


def replaced(
    document: dict[str, Any], index: int, message: Mapping[str, Any], updated_at: str
) -> bytes:
    """The parsed ``document`` with its message at ``index`` replaced by ``message``, encoded."""
    document["messages"][index] = dict(message)
    document["updatedAt"] = updated_at
    return encode(document)


def last_role(data: bytes, conversation_id: str, where: str) -> str | None:
    """The role of a document's last message (``None`` without messages), reading one line of
    a canonical document."""
    canonical = split(data)
    if canonical is None:
        messages = parse(data, conversation_id, where)["messages"]
        return str(messages[-1]["role"]) if messages else None
    if canonical.message_count == 0:
        return None
    newline = data.rfind(b"\n", canonical.body_start, canonical.body_end)
    line = data[newline + 1 if newline >= 0 else canonical.body_start : canonical.body_end]
    try:
        role = json.loads(line).get("role")
    except (ValueError, RecursionError, AttributeError) as exc:
        raise corrupted(conversation_id, where, "its last message is not valid JSON") from exc
    return str(role)


def parse(data: bytes, conversation_id: str, where: str) -> dict[str, Any]:
    """Decode a whole document and check its shape; CONVERSATION_CORRUPTED says what is wrong."""
    decoded = _decoded_once(data)
    if decoded is None:
        document = _decoded(data, conversation_id, where)
        canonical = split(data)
    else:
        document, canonical = decoded
    messages = document["messages"]
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
    check_lines(canonical, document, len(messages), conversation_id, where)
    return document


def _decoded(data: bytes, conversation_id: str, where: str) -> dict[str, Any]:
    """``data`` decoded whole: an object with a list of messages, else CONVERSATION_CORRUPTED."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise corrupted(conversation_id, where, f"not valid JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise corrupted(conversation_id, where, "the top level is not a JSON object")
    if not isinstance(document.get("messages"), list):
        raise corrupted(conversation_id, where, '"messages" is missing or not a list')
    return document


def _decoded_once(data: bytes) -> tuple[dict[str, Any], Canonical | None] | None:
    """A canonical document decoded with each byte read once, and its :func:`split`; ``None``
    when ``data`` is not plainly canonical, for :func:`_decoded` to judge.

    :func:`split` decodes the header line on its own, and a bulk read decoded it twice, the
    whole document then the line. Here the header line is decoded as an object and the list of
    messages from the ``[`` that ends it: when both end where a canonical document puts them,
    the document is exactly their union (the list is the top-level object's last value), as
    ``json.loads`` would give it. Anything else, valid or not, takes the ordinary way.
    """
    span = body(data)
    if span is None or not data.startswith(b"{"):
        return None
    try:
        # As json.loads decodes bytes that start with "{" and a byte other than 0.
        text = data.decode("utf-8", "surrogatepass")
        newline = text.find("\n")
        head = text[:newline]
        if head == _BARE_HEAD:
            fields: dict[str, Any] = {}
        elif head.endswith(_LAST_KEY):
            decoded = _DECODER.decode(head[: -len(_LAST_KEY)] + "}")
            # An object of one key or more, so that the comma before "messages" separates two
            # members, as it must in the whole document; one naming "messages" goes the
            # ordinary way.
            if type(decoded) is not dict or not decoded or "messages" in decoded:
                return None
            fields = decoded
        else:
            return None
        messages, end = _DECODER.raw_decode(text, newline - 1)
    except (ValueError, RecursionError):
        return None
    if end != len(text) - len("}\n"):
        return None  # the list closed before the document's last line
    start, stop = span
    count = data.count(b"\n", start, stop) + 1 if stop > start else 0
    canonical = Canonical(fields, data, start, stop, count)
    return {**fields, "messages": messages}, (
        canonical if fields.get("messageCount") == count else None
    )


def check_lines(
    canonical: Canonical | None,
    keys: Iterable[str],
    message_count: int,
    conversation_id: str,
    where: str,
) -> None:
    """CONVERSATION_CORRUPTED unless each message line of a canonical document (``canonical``,
    its decoded top-level ``keys``, ``message_count`` messages) held exactly one message.

    A line holding two values, or one that closes the list and opens a key, still parses, but
    the messages after it would be read as something else and an append would vanish.
    """
    if canonical is None:
        return
    if message_count != canonical.message_count or not set(keys) <= {*canonical.header, "messages"}:
        raise corrupted(
            conversation_id,
            where,
            f"its {canonical.message_count} message lines do not hold one message each (a line "
            "holds more than one JSON value, or closes the list of messages)",
        )


def first_problem(exc: pydantic.ValidationError) -> str:
    """Where a document failed validation and why, in one line (and how many more problems)."""
    error = exc.errors()[0]
    place = ".".join(str(part) for part in error["loc"]) or "document"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{place}: {error['msg']}{more}"


def corrupted(conversation_id: str, where: str, problem: str) -> ConversationCorrupted:
    """The CONVERSATION_CORRUPTED error for the document at ``where``, saying what is wrong."""
    return ConversationCorrupted(
        f"Conversation {conversation_id} is corrupted: {where}: {problem}. Restore the file from "
        "a backup or delete the conversation; other conversations are not affected.",
        conversation_id=conversation_id,
        path=where,
        problem=problem,
    )


def misplaced(inner: object, conversation_id: str, where: str) -> ConversationCorrupted:
    """The CONVERSATION_CORRUPTED error for a document stored as ``conversation_id`` (at
    ``where``) that names another conversation, ``inner``.

    A folder copied under another id would otherwise be answered, and billed, under the wrong
    id, and listed and exported twice under the id it names.
    """
    return corrupted(
        conversation_id,
        where,
        f"it says it is conversation {inner!r}, not {conversation_id} (a copied or renamed "
        f"folder). Set its conversationId to {conversation_id}, or move it back to the folder "
        "it names",
    )


def _add_unique(target: list[str], values: Iterable[Any]) -> None:
    for value in values:
        if isinstance(value, str) and value and value not in target:
            target.append(value)


def summarize(document: Mapping[str, Any]) -> dict[str, Any]:
    """The light summary of a decoded document (camelCase keys, as ``ConversationSummary``)."""
    return _listing(document, summary_field({}, document["messages"]))


def summary_of_header(fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """The light summary from a canonical header alone, or ``None`` if its summary is stale."""
    stored = fresh_summary_field(fields)
    return None if stored is None else _listing(fields, stored)


def _listing(fields: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    summary = {
        key: fields[key]
        for key in ("conversationId", "createdAt", "updatedAt", "parentConversationId")
        if key in fields
    }
    summary.update(
        messageCount=stored["messageCount"],
        firstQuery=stored["firstQuery"],
        tools=list(stored["tools"]),
        models=list(stored["models"]),
    )
    return summary


def fresh_summary_field(fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """The header's ``pplxSummary`` if it describes the header's ``messageCount``, else ``None``."""
    stored = fields.get(SUMMARY_KEY)
    if (
        isinstance(stored, dict)
        and stored.get("messageCount") == fields.get("messageCount")
        and isinstance(stored.get("tools"), list)
        and isinstance(stored.get("models"), list)
        and isinstance(stored.get("firstQuery"), str | None)
    ):
        return stored
    return None


def summary_field(
    previous: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """``previous`` (the header's summary, or empty) updated for ``messages`` appended."""
    tools, models = list(previous.get("tools") or []), list(previous.get("models") or [])
    _add_unique(tools, (m.get("tool") for m in messages))
    _add_unique(models, (m.get("model") for m in messages))
    first = previous.get("firstQuery")
    if first is None:
        first = next((m.get("content") for m in messages if m.get("role") == "user"), None)
    return {
        "messageCount": int(previous.get("messageCount") or 0) + len(messages),
        "firstQuery": first,
        "tools": tools,
        "models": models,
    }
