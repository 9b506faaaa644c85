"""Stored conversations as pandas DataFrames, Markdown transcripts and JSON.

:func:`to_dataframe` reads a whole store (or chosen conversations) into one DataFrame at the level
you analyse: one row per message, per conversation, or per cited source. pandas is imported only
when a DataFrame is asked for, so ``import pplx_nb`` stays cheap.

Column types (``str`` columns hold NaN where a value is missing)::

    messages       conversation_id str, turn int64, role category, content str, tool str,
                   model str, timestamp datetime64[ns, UTC], prompt_tokens Int64,
                   completion_tokens Int64, cost_usd float64, n_sources int64,
                   parent_conversation_id str, reasoning_tokens Int64,
                   cached_input_tokens Int64, web_searches Int64, tool_calls Int64,
                   tool_calls_cost_usd float64, cache_cost_usd float64, cost_unknown bool,
                   cost_estimated bool
    conversations  conversation_id str, created_at / updated_at datetime64[ns, UTC],
                   message_count int64, first_query str, tools object (list of str),
                   total_tokens Int64, total_cost_usd float64, job_status category,
                   known_cost_usd float64, unknown_costs int64
    sources        conversation_id str, turn int64, url str, domain str, title str, date str

``turn`` is the message's index in ``Conversation.messages``. ``web_searches`` counts the
answer's web searches (Agent API ``search_web`` calls, Sonar ``num_search_queries``);
``tool_calls`` all its tool calls, ``tool_calls_cost_usd`` what they cost and
``cache_cost_usd`` the prompt-cache reads and writes: missing where the API did not say.

Some runs are paid for but report no cost: a cancelled deep research (the API reports no usage
for it) or a submission whose reply was lost (SUBMISSION_UNKNOWN: it may have been billed). The
turn that closes such a question has ``cost_unknown`` True. At the conversations level
``unknown_costs`` counts those turns, ``known_cost_usd`` sums the costs that are known, and
``total_cost_usd`` is that sum only when nothing is unknown: NaN otherwise, since the total is not
known. ``df.total_cost_usd.sum()`` skips NaN as pandas always does; sum ``known_cost_usd`` for
what was spent at least, and filter on ``unknown_costs > 0`` for the conversations it leaves out.
A message whose ``cost_usd`` was worked out from the price table (the API reported none) has
``cost_estimated`` True.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pplx_nb._errors import ConversationNotFound, PplxError
from pplx_nb._errors import ValidationError as PplxValidationError
from pplx_nb._extras import require
from pplx_nb._logging import get_logger
from pplx_nb._markdown import defuse, link_citations, sources_markdown
from pplx_nb._models import JOB_STATES, Conversation, Message
from pplx_nb._think import split_think
from pplx_nb.backends import home_of, open_store
from pplx_nb.cite import to_bibtex, to_csl_json, to_report, to_ris
from pplx_nb.store import ConversationStore

if TYPE_CHECKING:
    import pandas as pd

# The citation formats and reports live in pplx_nb.cite; they are exported here too, beside
# the other ways out of the store.
__all__ = [
    "to_bibtex",
    "to_csl_json",
    "to_dataframe",
    "to_json",
    "to_markdown",
    "to_report",
    "to_ris",
]

logger = get_logger("pplx_nb.export")

Level = Literal["messages", "conversations", "sources"]
Exportable = ConversationStore | Conversation | Iterable[str | Conversation]

_ROLES = ["system", "user", "assistant"]


class _Doc:
    """One conversation as its raw camelCase document and the store it is kept in, if any."""

    __slots__ = ("conversation_id", "document", "store")

    def __init__(
        self, conversation_id: str, document: dict[str, Any], store: ConversationStore | None
    ):
        self.conversation_id = conversation_id
        self.document = document
        self.store = store

    def job_state(self) -> str | None:
        """The conversation's job state, asked of its store (``None`` outside one)."""
        if self.store is None:
            return None
        try:
            return self.store.job_state(self.conversation_id)
        except PplxValidationError:
            return None  # a Conversation built by hand, with an id no store could hold


def to_dataframe(source: Exportable, level: Level = "messages") -> pd.DataFrame:
    """The conversations of ``source`` as a DataFrame at ``level`` (see the module docstring).

    Args:
        source: a :class:`ConversationStore` (every conversation in it, newest first; corrupted
            ones are skipped with a warning), a list of conversation ids (read from the default
            store), a list of :class:`Conversation` objects, or one Conversation.
        level: ``"messages"`` (one row per message), ``"conversations"`` (one row each) or
            ``"sources"`` (one row per cited source).

    A conversation with a paid run whose cost is unknown (a cancelled deep research) has
    ``total_cost_usd`` NaN, ``unknown_costs`` above 0 and the costs that are known in
    ``known_cost_usd``; the turn closing that run has ``cost_unknown`` True.
    """
    require("notebook", "to_dataframe()", ("pandas",))
    builders = {"messages": _messages, "conversations": _conversations, "sources": _sources}
    if level not in builders:
        raise PplxValidationError(
            f"level={level!r} is not one of 'messages', 'conversations', 'sources'."
        )
    return builders[level](_documents(source))


def _documents(source: Exportable) -> Iterator[_Doc]:
    if isinstance(source, ConversationStore):
        yield from _store_documents(source)
        return
    if isinstance(source, Conversation):
        source = [source]
    if isinstance(source, (str, bytes)) or not isinstance(source, Iterable):
        raise PplxValidationError(
            "to_dataframe() takes a ConversationStore, a list of conversation ids or a list of "
            f"Conversations, not {type(source).__name__}.",
        )
    default: ConversationStore | None = None
    stores: dict[str, ConversationStore] = {}
    for item in source:
        if isinstance(item, Conversation):
            store = None
            home = home_of(item.path) if item.path else None
            if home is not None:
                store = stores.get(home.location) or stores.setdefault(
                    home.location, home.conversation_store()
                )
            elif item.path:
                # Loaded from the Redis store this process is configured with (or from memory).
                store = default = default or open_store()
            yield _Doc(item.conversation_id, item.to_json_dict(), store)
        elif isinstance(item, str):
            default = default or open_store()
            yield _Doc(item, default.read_raw(item), default)
        else:
            raise PplxValidationError(
                f"Cannot export a {type(item).__name__}: pass conversation ids or Conversations.",
            )


def _store_documents(store: ConversationStore) -> Iterator[_Doc]:
    for conversation_id, document in store.documents():
        if isinstance(document, ConversationNotFound):
            continue
        if isinstance(document, PplxError):
            logger.warning("Skipping conversation %s: %s", conversation_id, document)
            continue
        yield _Doc(conversation_id, document, store)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _utc(values: list[Any]) -> Any:
    import pandas as pd

    stamps = pd.to_datetime(
        pd.Series([_text(v) for v in values], dtype="object"),
        utc=True,
        format="ISO8601",
        errors="coerce",
    )
    return stamps.dt.as_unit("ns")


def _messages(docs: Iterable[_Doc]) -> pd.DataFrame:
    import pandas as pd

    ids: list[str] = []
    turns: list[int] = []
    roles: list[str] = []
    contents: list[str] = []
    tools: list[str | None] = []
    models: list[str | None] = []
    stamps: list[str | None] = []
    prompt: list[int | None] = []
    completion: list[int | None] = []
    costs: list[float | None] = []
    counts: list[int] = []
    parents: list[str | None] = []
    details: list[dict[str, Any]] = []
    unknown: list[bool] = []
    estimated: list[bool] = []
    for doc in docs:
        parent = _text(doc.document.get("parentConversationId"))
        for turn, message in enumerate(doc.document["messages"]):
            usage = message.get("usage")
            usage = usage if isinstance(usage, dict) else {}
            cost = message.get("cost")
            sources = message.get("sources")
            ids.append(doc.conversation_id)
            turns.append(turn)
            roles.append(message["role"])
            contents.append(split_think(message["content"])[0])
            tools.append(_text(message.get("tool")))
            models.append(_text(message.get("model")))
            stamps.append(message.get("timestamp"))
            prompt.append(_int(usage.get("promptTokens")))
            completion.append(_int(usage.get("completionTokens")))
            costs.append(_float(cost.get("totalCost")) if isinstance(cost, dict) else None)
            counts.append(len(sources) if isinstance(sources, list) else 0)
            parents.append(parent)
            details.append(_usage_details(usage, cost if isinstance(cost, dict) else {}))
            unknown.append(_cost_unknown(message))
            estimated.append(isinstance(cost, dict) and cost.get("estimated") is True)
    detail = {key: [row[key] for row in details] for key in _DETAIL_TYPES}
    return pd.DataFrame(
        {
            "conversation_id": pd.Series(ids, dtype="str"),
            "turn": pd.Series(turns, dtype="int64"),
            "role": pd.Categorical(roles, categories=_ROLES),
            "content": pd.Series(contents, dtype="str"),
            "tool": pd.Series(tools, dtype="str"),
            "model": pd.Series(models, dtype="str"),
            "timestamp": _utc(stamps),
            "prompt_tokens": pd.Series(prompt, dtype="Int64"),
            "completion_tokens": pd.Series(completion, dtype="Int64"),
            "cost_usd": pd.Series(costs, dtype="float64"),
            "n_sources": pd.Series(counts, dtype="int64"),
            "parent_conversation_id": pd.Series(parents, dtype="str"),
            **{key: pd.Series(detail[key], dtype=kind) for key, kind in _DETAIL_TYPES.items()},
            "cost_unknown": pd.Series(unknown, dtype="bool"),
            "cost_estimated": pd.Series(estimated, dtype="bool"),
        }
    )


def _cost_unknown(message: dict[str, Any]) -> bool:
    """Whether ``message`` closes a question whose run was (or may have been) paid for and
    reported no cost: a cancelled deep research, a submission whose reply was lost."""
    unanswered = message.get("unanswered")
    return isinstance(unanswered, dict) and unanswered.get("costUnknown") is True


_DETAIL_TYPES = {
    "reasoning_tokens": "Int64",
    "cached_input_tokens": "Int64",
    "web_searches": "Int64",
    "tool_calls": "Int64",
    "tool_calls_cost_usd": "float64",
    "cache_cost_usd": "float64",
}


def _usage_details(usage: dict[str, Any], cost: dict[str, Any]) -> dict[str, Any]:
    """The detail columns of one message from its stored camelCase ``usage`` and ``cost``."""
    calls = usage.get("toolCalls")
    counts = (
        [n for n in map(_int, calls.values()) if n is not None] if isinstance(calls, dict) else []
    )
    searches = _int(calls.get("search_web")) if isinstance(calls, dict) else None
    tools_cost = _float(cost.get("toolCallsCost"))
    per_tool = cost.get("toolCosts")
    if tools_cost is None and isinstance(per_tool, dict):
        paid = [x for x in map(_float, per_tool.values()) if x is not None]
        tools_cost = sum(paid) if paid else None
    caches = [_float(cost.get("cacheReadCost")), _float(cost.get("cacheCreationCost"))]
    known = [x for x in caches if x is not None]
    return {
        "reasoning_tokens": _int(usage.get("reasoningTokens")),
        "cached_input_tokens": _int(usage.get("cacheReadInputTokens")),
        "web_searches": searches if searches is not None else _int(usage.get("numSearchQueries")),
        "tool_calls": sum(counts) if counts else None,
        "tool_calls_cost_usd": tools_cost,
        "cache_cost_usd": sum(known) if known else None,
    }


def _conversations(docs: Iterable[_Doc]) -> pd.DataFrame:
    import pandas as pd

    ids: list[str] = []
    created: list[Any] = []
    updated: list[Any] = []
    counts: list[int] = []
    firsts: list[str | None] = []
    tools: list[list[str]] = []
    tokens: list[int | None] = []
    costs: list[float | None] = []
    unknowns: list[int] = []
    held: list[tuple[str, ConversationStore | None]] = []
    for doc in docs:
        messages = doc.document["messages"]
        used: list[str] = []
        token_sum: int | None = None
        cost_sum: float | None = None
        unknown = 0
        for message in messages:
            tool = message.get("tool")
            if isinstance(tool, str) and tool not in used:
                used.append(tool)
            usage = message.get("usage")
            if isinstance(usage, dict):
                total = _int(usage.get("totalTokens"))
                if total is None:
                    total = (_int(usage.get("promptTokens")) or 0) + (
                        _int(usage.get("completionTokens")) or 0
                    )
                token_sum = (token_sum or 0) + total
            cost = message.get("cost")
            value = _float(cost.get("totalCost")) if isinstance(cost, dict) else None
            if value is not None:
                cost_sum = (cost_sum or 0.0) + value
            unknown += _cost_unknown(message)
        ids.append(doc.conversation_id)
        created.append(doc.document.get("createdAt"))
        updated.append(doc.document.get("updatedAt"))
        counts.append(len(messages))
        firsts.append(next((m["content"] for m in messages if m["role"] == "user"), None))
        tools.append(used)
        tokens.append(token_sum)
        costs.append(cost_sum)
        unknowns.append(unknown)
        held.append((doc.conversation_id, doc.store))  # not the document: it may be large
    states = _job_states(held)
    known = pd.Series(costs, dtype="float64")
    unknown_costs = pd.Series(unknowns, dtype="int64")
    return pd.DataFrame(
        {
            "conversation_id": pd.Series(ids, dtype="str"),
            "created_at": _utc(created),
            "updated_at": _utc(updated),
            "message_count": pd.Series(counts, dtype="int64"),
            "first_query": pd.Series(firsts, dtype="str"),
            "tools": pd.Series(tools, dtype="object"),
            "total_tokens": pd.Series(tokens, dtype="Int64"),
            "total_cost_usd": known.where(unknown_costs == 0),
            "job_status": pd.Categorical(states, categories=list(JOB_STATES)),
            "known_cost_usd": known,
            "unknown_costs": unknown_costs,
        }
    )


def _job_states(held: list[tuple[str, ConversationStore | None]]) -> list[str | None]:
    """Each conversation's job state, asked of its store in one batch per store (on Redis one
    round trip per batch, not one per conversation)."""
    states: list[str | None] = [None] * len(held)
    batches: dict[int, tuple[ConversationStore, list[int]]] = {}
    for index, (_, store) in enumerate(held):
        if store is not None:
            batches.setdefault(id(store), (store, []))[1].append(index)
    for store, indexes in batches.values():
        try:
            found: list[str | None] = [*store.job_states([held[i][0] for i in indexes])]
        except PplxValidationError:  # a Conversation built by hand, with an id no store holds
            found = [_Doc(held[i][0], {}, store).job_state() for i in indexes]
        for index, state in zip(indexes, found, strict=True):
            states[index] = state
    return states


def _domain(url: str) -> str:
    """The host of ``url`` without ``www.``; empty for a URL that does not parse (its row stays)."""
    try:
        return (urlsplit(url).hostname or "").removeprefix("www.")
    except ValueError:  # an unclosed IPv6 bracket, say
        return ""


def _sources(docs: Iterable[_Doc]) -> pd.DataFrame:
    import pandas as pd

    ids: list[str] = []
    turns: list[int] = []
    urls: list[str] = []
    domains: list[str] = []
    titles: list[str | None] = []
    dates: list[str | None] = []
    for doc in docs:
        for turn, message in enumerate(doc.document["messages"]):
            sources = message.get("sources")
            if not isinstance(sources, list):
                continue
            for source in sources:
                url = source.get("url") if isinstance(source, dict) else None
                if not isinstance(url, str):
                    continue
                ids.append(doc.conversation_id)
                turns.append(turn)
                urls.append(url)
                domains.append(_domain(url))
                titles.append(_text(source.get("title")))
                dates.append(_text(source.get("date")))
    return pd.DataFrame(
        {
            "conversation_id": pd.Series(ids, dtype="str"),
            "turn": pd.Series(turns, dtype="int64"),
            "url": pd.Series(urls, dtype="str"),
            "domain": pd.Series(domains, dtype="str"),
            "title": pd.Series(titles, dtype="str"),
            "date": pd.Series(dates, dtype="str"),
        }
    )


def to_markdown(conversation: Conversation, *, include_system: bool = False) -> str:
    """A readable Markdown transcript: one section per turn, citations linked to their sources."""
    title = ((conversation.first_query() or "").strip().splitlines() or ["Conversation"])[0]
    title = title if len(title) <= 80 else title[:77].rstrip() + "…"
    facts = [
        f"`{conversation.conversation_id}`",
        f"created {conversation.created_at}",
        f"{len(conversation.messages)} messages",
    ]
    if conversation.parent_conversation_id:
        facts.append(f"forked from `{conversation.parent_conversation_id}`")
    parts = [f"# {defuse(title)}", " · ".join(facts)]
    for message in conversation.messages:
        if message.role == "system" and not include_system:
            continue
        parts.append(_turn_markdown(message))
    return "\n\n".join(parts) + "\n"


def _turn_markdown(message: Message) -> str:
    label = {"system": "System", "user": "User", "assistant": "Assistant"}[message.role]
    about = [x for x in (message.model, message.tool, message.timestamp) if x]
    heading = f"## {label}" + (f" · {' · '.join(about)}" if about else "")
    if message.role != "assistant" or not message.sources:
        return f"{heading}\n\n{defuse(message.answer_text)}"
    text = link_citations(message.answer_text, message.sources)
    return f"{heading}\n\n{text}\n\n{sources_markdown(message.sources, message.answer_text)}"


def to_json(conversation: Conversation, *, indent: int | None = 2) -> str:
    """The conversation as JSON text in the on-disk shape (camelCase keys, no missing fields)."""
    return json.dumps(conversation.to_json_dict(), ensure_ascii=False, indent=indent)
