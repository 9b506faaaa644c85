"""A question on its way to the API: checked, given a model, its files and history fitted to the
model's context window (the budget rule of :mod:`pplx_nb.context`), and what to store with it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pplx_nb._config import Settings
from pplx_nb._errors import ValidationError, not_unicode
from pplx_nb._models import Message, now_iso
from pplx_nb._options import SEARCH_OPTIONS, SearchOptions, check_options

if TYPE_CHECKING:
    from pplx_nb._models import JobParams, JobRequest, JobStatus
    from pplx_nb.api import AsyncClient, Request
    from pplx_nb.store import ConversationStore

__all__ = [
    "DEEP_RESEARCH_MODEL",
    "MAX_QUERY_CHARS",
    "SYSTEM_PROMPT",
    "Mode",
    "Turn",
    "TurnBuilder",
    "build_request",
    "fitted_messages",
    "tool_for",
    "ts_options",
    "ts_params",
]

Mode = Literal["search", "research"]

SYSTEM_PROMPT = (
    "You are an advanced research assistant. Answer accurately and concisely, ground every claim "
    "in your search results and cite them with [n] markers. When the conversation continues, use "
    "its earlier turns as context."
)
DEEP_RESEARCH_MODEL = "medium"
"""Deep research: the Agent preset that replaced ``sonar-deep-research`` (mapped back for Sonar)."""
MAX_QUERY_CHARS = 32_000
_REQUEST_FIELDS = SEARCH_OPTIONS - {"model", "show_thinking", "preset"}
_TOOLS = {
    ("search", False): "perplexity_search",
    ("research", False): "perplexity_deep_research",
    ("search", True): "perplexity_search_followup",
    ("research", True): "perplexity_deep_research_followup",
}
_GROUNDED = frozenset({"perplexity_search", "perplexity_search_followup"})
"""The tools whose questions are answered from a web search (deep research searches anyway)."""
_TsEffort = Literal["low", "medium", "high"]
_TS_EFFORTS: tuple[_TsEffort, ...] = get_args(_TsEffort)
"""The reasoning efforts the TypeScript server's deep research accepts."""


def tool_for(mode: Mode, follow_up: bool) -> str:
    """The tool name a turn is stored under (the MCP tool that would have asked it)."""
    return _TOOLS[mode, follow_up]


@dataclass
class Turn:
    """One question on its way to the API, and what to store once it is answered."""

    conversation_id: str | None
    messages: list[dict[str, str]]
    user: Message
    tool: str
    model: str
    opts: SearchOptions
    seed: list[Message] = field(default_factory=list)
    """Messages stored before the question in a new conversation (the system prompt)."""
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    remote_id: str | None = None
    """A run the API already started for this question (a retry): its report is read by this
    id, and a new run is paid for only when the API no longer has it or it failed."""

    @property
    def show_thinking(self) -> bool:
        """Whether the model's reasoning is kept with the answer."""
        return bool(self.opts.get("show_thinking"))

    @property
    def grounded(self) -> bool:
        """Whether the answer must come from a web search (``tool_choice: required``)."""
        return self.tool in _GROUNDED

    def request(self) -> Request:
        """The API request that asks this turn."""
        return build_request(self.messages, self.model, self.opts, grounded=self.grounded)

    def job_request(self) -> JobRequest:
        """What a queued research job needs to run this turn later (job.json ``request``)."""
        request: JobRequest = {
            "model": self.model,
            "opts": self.opts,
            "searchQuery": self.messages[-1]["content"],
        }
        if self.notes:
            request["notes"] = self.notes
        if self.remote_id:
            request["collectRunId"] = self.remote_id
        return request

    def job_params(self) -> JobParams:
        """The same job as the TypeScript perplexity-mcp-server's worker reads it (job.json
        ``params``): the question as asked, and the effort when it is one that server knows."""
        return ts_params(self.user.content, self.opts.get("reasoning_effort"))


def _started_run(messages: Sequence[Message]) -> str | None:
    """The run named by the turn that closed the last question, if one does."""
    last = messages[-1] if messages else None
    if last is None or last.role != "assistant" or last.unanswered is None:
        return None
    return last.unanswered.remote_id


def _unanswered_question(messages: Sequence[Message]) -> Message | None:
    """The last question if it has no answer: last of all, or closed by a "not answered" turn."""
    if messages and messages[-1].role == "assistant" and messages[-1].unanswered is not None:
        messages = messages[:-1]
    return messages[-1] if messages and messages[-1].role == "user" else None


def ts_params(query: str, effort: object) -> JobParams:
    """``{"query", "reasoning_effort"}`` as the TypeScript server's jobs hold them."""
    known = _ts_effort(effort)
    return {"query": query, "reasoning_effort": known} if known else {"query": query}


def ts_options(params: JobParams) -> SearchOptions:
    """The options of a job the TypeScript server queued (its ``params``)."""
    known = _ts_effort(params.get("reasoning_effort"))
    return {"reasoning_effort": known} if known else {}


def _ts_effort(value: object) -> _TsEffort | None:
    """``value`` if it is an effort the TypeScript server accepts, else ``None``."""
    return next((effort for effort in _TS_EFFORTS if effort == value), None)


class TurnBuilder:
    """Builds turns: new questions, follow-ups (reformulated when context-dependent), retries.

    Args:
        settings: the model default, file roots and whether a real API is used.
        store: where earlier turns are read and forks are made.
        refuse_if_busy: raises JobInProgress while the conversation's job or answer is under way.
        client: the API client of the running loop (for reformulating follow-ups).
        working_directory: whether files may come from the working directory (asked each time).
        counted: counts a turn refused while it is built.
    """

    def __init__(
        self,
        settings: Settings,
        store: ConversationStore,
        refuse_if_busy: Callable[[str], None],
        client: Callable[[], AsyncClient],
        working_directory: Callable[[], bool],
        counted: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self._settings = settings
        self._store = store
        self._refuse_if_busy = refuse_if_busy
        self._client = client
        self._working_directory = working_directory
        self._counted = counted

    def new(
        self, query: str, mode: Mode, files: Sequence[str | Path] | None, opts: SearchOptions
    ) -> Turn:
        """The first question of a new conversation (stored with the system prompt)."""
        with self._counted():
            query, told = check_query(query)
            opts = check_options(opts)
            model = self._model(mode, opts)
            content, records, notes = self._attach(query, files, [])
            notes = [*told, *notes]
            system = Message(role="system", content=SYSTEM_PROMPT, timestamp=now_iso())
            user = Message(role="user", content=content, timestamp=now_iso(), files=records)
            messages = fitted_messages([system, user], model, notes)
            tool = tool_for(mode, False)
            return Turn(None, messages, user, tool, model, opts, seed=[system], notes=notes)

    async def followup(
        self,
        conversation_id: str,
        query: str,
        mode: Mode,
        fork: bool,
        files: Sequence[str | Path] | None,
        opts: SearchOptions,
    ) -> Turn:
        """A question continuing ``conversation_id`` (or a fork of it), with its history."""
        from pplx_nb import context

        with self._counted():
            query, told = check_query(query)
            opts = check_options(opts)
            self._refuse_if_busy(conversation_id)
            # A fork starts as a copy of this history; it is made last, so a refused turn
            # leaves none.
            history = context.chain_messages(self._store, conversation_id)
            model = self._model(mode, opts)
            # A file counts as already embedded only if its turn survives the context budget.
            question = Message(role="user", content=query)
            visible = context.fit_history([*history, question], model).messages[:-1]
            content, records, notes = self._attach(query, files, visible)
            notes = [*told, *notes]
            reformulated = await self._reformulated(conversation_id, query, history)
            user = Message(
                role="user",
                content=content,
                timestamp=now_iso(),
                files=records,
                reformulated_query=reformulated,
            )
            sent = content.replace(query, reformulated, 1) if reformulated else content
            messages = fitted_messages([*history, user], model, notes)
            messages[-1] = {"role": "user", "content": sent}
            if fork:
                conversation_id = self._store.fork(conversation_id).conversation_id
            tool = tool_for(mode, True)
            return Turn(conversation_id, messages, user, tool, model, opts, notes=notes)

    def retry(self, conversation_id: str, status: JobStatus | None, opts: SearchOptions) -> Turn:
        """The unanswered last question of ``conversation_id``, asked again as deep research.

        The earlier job's model, options, notes and search text (from ``status``) are reused
        unless ``opts`` override them.
        """
        from pplx_nb import context

        self._refuse_if_busy(conversation_id)
        conversation = self._store.load(conversation_id)
        question = _unanswered_question(conversation.messages)
        if question is None:
            raise ValidationError(
                f"Conversation {conversation_id} has no unanswered question to retry: its "
                "last question has an answer. Ask again with a follow-up."
            )
        # Asked again as a new turn after the one that closed it: the turns keep alternating.
        question = question.model_copy(update={"timestamp": now_iso()})
        earlier: JobRequest = (status.request or {}) if status else {}
        opts = check_options({**(earlier.get("opts") or {}), **opts})
        model = str(opts.get("model") or earlier.get("model") or DEEP_RESEARCH_MODEL)
        notes = [str(note) for note in earlier.get("notes") or []]
        messages = fitted_messages(
            [*context.chain_messages(self._store, conversation_id), question], model, notes
        )
        if earlier.get("searchQuery"):
            messages[-1] = {"role": "user", "content": str(earlier["searchQuery"])}
        asked = sum(1 for m in conversation.messages if m.role == "user")
        tool = status.tool_name if status else tool_for("research", asked > 1)
        # A run the API named for the question (its process killed, or its reply unreadable)
        # may have finished: its report is read by id before anything is paid for again.
        run = _started_run(conversation.messages)
        if run is None and conversation.messages[-1].role == "user":
            run = self._store.answering_run(conversation_id)
        return Turn(
            conversation_id, messages, question, tool, model, opts, notes=notes, remote_id=run
        )

    def _model(self, mode: Mode, opts: SearchOptions) -> str:
        model = opts.get("model")
        if model:
            return str(model)
        return DEEP_RESEARCH_MODEL if mode == "research" else self._settings.model

    def _attach(
        self,
        query: str,
        files: Sequence[str | Path] | None,
        history: Sequence[Message],
    ) -> tuple[str, list[dict[str, Any]] | None, list[str]]:
        """The question with new files embedded, the file records to store, and notes."""
        if not files:
            return query, None, []
        from pplx_nb import context

        prepared = context.prepare_files(
            files,
            history,
            roots=self._settings.file_roots,
            working_directory=self._working_directory(),
        )
        content = f"{query}\n\n{prepared.text}" if prepared.text else query
        return content, list(prepared.records) or None, list(prepared.notes)

    async def _reformulated(
        self, conversation_id: str, query: str, history: Sequence[Message]
    ) -> str | None:
        """The follow-up as a self-contained search, when it depends on the history."""
        from pplx_nb import context

        if not context.is_follow_up(query, history):
            return None
        use_model = not self._settings.is_offline
        if use_model:
            # Rewriting the question is a paid call: fail first if its turn cannot be stored.
            self._store.check_writable(conversation_id)
        client = self._client() if use_model else None
        candidate = await context.areformulate(query, history, client, use_model=use_model)
        if candidate and candidate.strip() != query:
            return candidate.strip()
        return None


_ATTACH = {
    "python": "Shorten it, or save the long material to a file and attach it: "
    "`files=['notes.md']`.",
    "mcp": 'Shorten it, or save the long material to a file and attach it: `files: ["notes.md"]`.',
    "notebook": "Shorten it, or save the long material to a file and attach it with "
    "`--file PATH` (`%%pplx --file notes.md`, repeatable).",
}
"""How each surface attaches long material to a question."""


def check_query(query: object, *, attach: bool = True) -> tuple[str, list[str]]:
    """The question to send and store, stripped, key-shaped text replaced by ``***``, and notes
    saying so; VALIDATION_ERROR when empty, over :data:`MAX_QUERY_CHARS` or not Unicode.

    ``attach``: the question may come with files, so a long one is told how to attach them.
    """
    if not isinstance(query, str) or not query.strip():
        raise ValidationError("The query is empty: ask a question in words.")
    if len(query) > MAX_QUERY_CHARS:
        said = f"The query is {len(query):,} characters; the limit is {MAX_QUERY_CHARS:,}."
        wordings = {
            surface: f"{said} {how if attach else 'Shorten it.'}"
            for surface, how in _ATTACH.items()
        }
        raise ValidationError(wordings["python"], wordings=wordings)
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise not_unicode("The query", exc.start) from None
    from pplx_nb import context

    return context.scrub_secrets(query.strip(), "Your question")


def build_request(
    messages: list[dict[str, str]], model: str, opts: SearchOptions, *, grounded: bool = False
) -> Request:
    """The API request for ``messages``, with the options that are request fields;
    ``grounded``: the run must search before it answers."""
    from pplx_nb.api import Request

    fields: dict[str, Any] = {key: value for key, value in opts.items() if key in _REQUEST_FIELDS}
    if "preset" in opts:  # its deprecated name; effort wins, as at the API
        fields.setdefault("effort", opts["preset"])
    if grounded:
        fields["tool_choice"] = "required"
    return Request(messages=messages, model=model, **fields)


def fitted_messages(
    messages: Sequence[Message], model: str, notes: Sequence[str] = ()
) -> list[dict[str, str]]:
    """``messages`` fitted to ``model``'s context window, as the API wants them.

    ``notes`` (e.g. a file already in the history) and, when older turns had to be left out, a
    note saying so go into the system prompt: the model reads them there, and the question —
    the search text — stays the question.
    """
    from pplx_nb import context

    fitted = context.fit_history(messages, model)
    _refuse_oversized(fitted.messages, model)
    told = [*([fitted.note] if fitted.note else []), *notes]
    return _with_system_notes(_wire_messages(fitted.messages), told)


def _refuse_oversized(messages: Sequence[Message], model: str) -> None:
    """Refuse what is over ``model``'s budget with every earlier turn left out.

    The API would answer such a request with a 400 after the upload; the estimate is cheap, and
    the files attached to the newest question are what can be made smaller.
    """
    from pplx_nb import context

    budget = context.budget_tokens(model)
    used = sum(context.message_tokens(m) for m in messages)
    if used <= budget:
        return
    window = context.context_window(model)
    files = next((m.files or [] for m in reversed(messages) if m.role == "user"), [])
    sizes = ", ".join(
        f"{record.get('path')} ({record.get('bytes', 0):,} bytes)" for record in files
    )
    advice = (
        f"Attached files: {sizes}. Attach fewer or smaller files (an excerpt of each)."
        if sizes
        else "Shorten the question."
    )
    raise ValidationError(
        f"The question is about {used:,} tokens (estimated, with the system prompt), over the "
        f"{budget:,} tokens that fit in the {window:,}-token context window of {model} with room "
        f"left for the answer, even with every earlier turn left out. {advice}",
        estimated_tokens=used,
        window=window,
        files=[{"path": r.get("path"), "bytes": r.get("bytes")} for r in files],
    )


def _with_system_notes(
    messages: list[dict[str, str]], notes: Sequence[str]
) -> list[dict[str, str]]:
    """``messages`` with ``notes`` added to the system prompt (put first if there is none)."""
    if not notes:
        return messages
    text = "\n".join(notes)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _wire_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """Messages as the API wants them: roles alternate after the system prompt.

    A question that got no answer is left out with the turn that closed it (or, never closed,
    when another question follows). Answers go without the ``<think>`` reasoning another program
    may have stored inside them.
    """
    out: list[dict[str, str]] = []
    for message in messages:
        if message.unanswered is not None:
            if out and out[-1]["role"] == "user":
                out.pop()
            continue
        content = message.answer_text
        if out and out[-1]["role"] == message.role == "user":
            out[-1] = {"role": "user", "content": content}
        elif out and out[-1]["role"] == message.role == "assistant":
            out[-1] = {"role": "assistant", "content": out[-1]["content"] + "\n\n" + content}
        else:
            out.append({"role": message.role, "content": content})
    return out
