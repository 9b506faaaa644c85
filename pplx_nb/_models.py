"""Pydantic models shared by every layer.

Stored models (:class:`Message`, :class:`Conversation`, :class:`JobStatus` and what they
hold) use the camelCase keys of the conversation-logs files and keep unknown keys, so files
written by other tools (the TypeScript perplexity-mcp-server) load and round-trip unchanged.
:class:`Answer` is what users get back from a question.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, GetPydanticSchema
from pydantic.alias_generators import to_camel
from typing_extensions import TypedDict

from pplx_nb._markdown import link_citations, notes_markdown, related_markdown, sources_markdown
from pplx_nb._options import SearchOptions
from pplx_nb._think import split_think

__all__ = [
    "ACTIVE_JOB_STATES",
    "DONE_JOB_STATES",
    "JOB_STATES",
    "Answer",
    "Conversation",
    "ConversationSummary",
    "Cost",
    "ErrorInfo",
    "JobParams",
    "JobRecord",
    "JobRequest",
    "JobResult",
    "JobState",
    "JobStatus",
    "Message",
    "Progress",
    "Role",
    "Source",
    "Unanswered",
    "UnansweredState",
    "Usage",
    "closing_turn",
    "now_iso",
]

Role = Literal["system", "user", "assistant"]
JobState = Literal["pending", "in_progress", "completed", "failed", "cancelled"]
JOB_STATES: tuple[JobState, ...] = get_args(JobState)
"""Every job state, in lifecycle order."""
ACTIVE_JOB_STATES: frozenset[JobState] = frozenset(("pending", "in_progress"))
"""A job in these states holds its conversation: no follow-up until it ends."""
DONE_JOB_STATES: frozenset[JobState] = frozenset(("completed", "failed", "cancelled"))
"""A job in these states has ended and never changes again."""


def now_iso(moment: datetime | None = None) -> str:
    """An ISO 8601 UTC timestamp with milliseconds and ``Z``, as the files use."""
    moment = moment or datetime.now(UTC)
    return (
        moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    )


_AS_WRITTEN = GetPydanticSchema(lambda _source, handler: handler(dict[str, Any]))
"""Read and written as a plain JSON object: a stored dict typed by a :class:`TypedDict` keeps
every key and value as its writer wrote them (none coerced or dropped, ``null`` kept, keys a
newer writer added kept), while type checkers see its keys."""


class JobRequest(TypedDict, total=False):
    """What a queued research job asks for (``request`` in job.json and status.json), under
    the keys written there; a job the TypeScript server queued has ``params`` instead."""

    model: str
    """The model (or deep-research effort) asked for."""
    opts: SearchOptions
    """The search options of the question, as checked when it was asked."""
    searchQuery: str
    """The text searched for: the question as sent (reformulated, files attached)."""
    notes: list[str]
    """Notes for the model, added to the system prompt (e.g. a file already in the history)."""
    collectRunId: str
    """A run already started for the question (a retry): its report is read before anything
    is submitted."""


class JobParams(TypedDict, total=False):
    """A job's ``params`` in job.json, as the TypeScript perplexity-mcp-server's worker reads
    them (and its tools write them): the question as asked, and its reasoning effort."""

    query: str
    reasoning_effort: str


class JobResult(TypedDict, total=False):
    """What a job ended with (``result`` in status.json), under the keys written there."""

    tokens: int
    """Total tokens of the report."""
    cost: float | None
    """Its cost in USD; ``None`` with ``costUnknown`` when no cost was reported."""
    costUnknown: bool
    """A run was started and reported no cost (cancelled): what it cost is unknown."""
    finishedBeforeCancel: bool
    """The run had finished before the cancel reached it; its report is stored."""
    handedOver: bool
    """The report came from an attempt that had lost its lease, and was stored for the job."""
    remoteCancelled: bool
    """Only in the status a cancel returns: whether the API confirmed the run stopped."""
    alreadyEnded: bool
    """Only in the status a cancel returns: the job had ended before, nothing was sent."""


class _Stored(BaseModel):
    """Base for on-disk models: camelCase on disk, snake_case in Python, unknown keys kept."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="allow",
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The dict written to disk: camelCase keys, ``None`` fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Source(_Stored):
    """A web page an answer cites."""

    url: str
    title: str | None = None
    date: str | None = None
    snippet: str | None = None
    last_updated: str | None = None
    ids: list[int] | None = None
    """The ``id`` of each search result that was this page (a later search may find a page
    again under a new id); the answer's ``[n]`` markers name them. ``None``: the API gave none,
    or the answer was stored before ids were kept, and ``[n]`` is the n-th source."""

    @property
    def domain(self) -> str:
        """The host name without a leading ``www.``."""
        host = urlsplit(self.url).hostname or ""
        return host.removeprefix("www.")


class Usage(_Stored):
    """Token counts as reported by the API."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int | None = None
    citation_tokens: int | None = None
    num_search_queries: int | None = None
    search_context_size: str | None = None
    cache_read_input_tokens: int | None = None
    """Input tokens read from the provider's prompt cache (Agent API)."""
    cache_creation_input_tokens: int | None = None
    """Input tokens written to the provider's prompt cache (Agent API)."""
    tool_calls: dict[str, int] | None = None
    """Tool invocations by billing name, e.g. ``{"search_web": 2, "fetch_url": 3}`` (Agent API)."""


class Cost(_Stored):
    """What a request cost in USD; ``estimated`` when computed from the price table, not the API."""

    input_cost: float = 0.0
    output_cost: float = 0.0
    request_cost: float = 0.0
    total_cost: float = 0.0
    currency: str = "USD"
    estimated: bool = False
    cache_read_cost: float | None = None
    cache_creation_cost: float | None = None
    tool_calls_cost: float | None = None
    """What the tool calls cost in all (Agent API; also counted in ``request_cost``)."""
    tool_costs: dict[str, float] | None = None
    """The cost of each tool's calls by billing name (Agent API)."""


UnansweredState = Literal["failed", "cancelled", "interrupted"]
_NOT_ANSWERED = {
    "failed": "the request for it failed",
    "cancelled": "its research was cancelled",
    "interrupted": "no answer arrived (whatever was answering it stopped)",
}


class Unanswered(_Stored):
    """Why an assistant turn holds no answer: it closes a question that got none, so the turns
    of a conversation keep alternating for every program that replays them."""

    state: UnansweredState
    code: str | None = None
    message: str | None = None
    cost_unknown: bool | None = None
    """True when a run was (or may have been) started for the question and reported no cost: a
    cancelled deep research, a submission whose reply was lost. Left out otherwise."""
    remote_id: str | None = None
    """The run the API started for the question, when it named one (``resp_...``): its report
    may still be read by that id while the API keeps it. Left out otherwise."""


class Message(_Stored):
    """One turn of a conversation, with optional metadata on assistant turns."""

    role: Role
    content: str
    timestamp: str | None = None
    tool: str | None = None
    model: str | None = None
    sources: list[Source] | None = None
    usage: Usage | None = None
    cost: Cost | None = None
    files: list[dict[str, Any]] | None = None
    reformulated_query: str | None = None
    related_questions: list[str] | None = None
    images: list[dict[str, Any]] | None = None
    thinking: str | None = None
    notes: list[str] | None = None
    """What the answer's caller should know, e.g. an attached file that was cut to fit."""
    effort: str | None = None
    """The effort the answer's run went with; ``preset``: the same in the API's deprecated
    field."""
    preset: str | None = None
    unanswered: Unanswered | None = None
    """Set on the assistant turn that closes a question which got no answer."""
    job_id: str | None = None
    """The job whose report this assistant turn is (``jobId``)."""
    closes_job: str | None = None
    """The job that ended without an answer, on the turn that closes its question
    (``closesJob``): a report its run delivers after all takes this turn's place."""

    @property
    def answer_text(self) -> str:
        """The content without a leading ``<think>`` block (other programs store answers of
        reasoning models with it inside)."""
        return split_think(self.content)[0]

    @property
    def reasoning(self) -> str | None:
        """The model's reasoning: the ``thinking`` kept with the answer, else its ``<think>``
        block."""
        return self.thinking or split_think(self.content)[1]


def closing_turn(
    state: UnansweredState,
    code: str | None = None,
    message: str | None = None,
    *,
    cost_unknown: bool = False,
    job_id: str | None = None,
    remote_id: str | None = None,
    cost: Cost | None = None,
    usage: Usage | None = None,
) -> Message:
    """The assistant turn that closes a question left without an answer, saying why.

    ``code`` and ``message`` are the error that ended it, if any (``message`` must already be
    free of secrets: it is stored). ``cost_unknown``: a run was started for it and reported no
    cost; a SUBMISSION_UNKNOWN failure counts as one (it may have been billed). ``job_id``
    names the job that ended without an answer (``closesJob``): a report its run delivers
    after all takes this turn's place. ``remote_id``: the run the API named for the question;
    a run that was started and did not answer counts as one whose cost is unknown, unless
    ``cost`` says what it reported (a run stopped ``requires_action``; ``usage`` beside it).
    """
    reason = _NOT_ANSWERED[state] + (f" ({code})" if code else "")
    unknown = cost is None and (
        cost_unknown or code == "SUBMISSION_UNKNOWN" or remote_id is not None
    )
    return Message(
        role="assistant",
        content=f"This question was not answered: {reason}. Ask it again to get an answer.",
        timestamp=now_iso(),
        unanswered=Unanswered(
            state=state,
            code=code,
            message=message,
            cost_unknown=True if unknown else None,
            remote_id=remote_id,
        ),
        cost=cost,
        usage=usage,
        closes_job=job_id or None,
    )


class Conversation(_Stored):
    """A conversation as stored in ``conversation-logs/<id>/conversation.json``."""

    conversation_id: str
    created_at: str
    updated_at: str
    message_count: int = 0
    messages: list[Message] = Field(default_factory=list)
    parent_conversation_id: str | None = None
    path: str | None = Field(None, exclude=True)

    def first_query(self) -> str | None:
        """The first user message, or ``None``."""
        return next((m.content for m in self.messages if m.role == "user"), None)

    def last_answer(self) -> Message | None:
        """The newest assistant message, or ``None``."""
        return next((m for m in reversed(self.messages) if m.role == "assistant"), None)


class ConversationSummary(_Stored):
    """A light view of a conversation, as returned by ``ConversationStore.list()``."""

    conversation_id: str
    created_at: str
    updated_at: str
    message_count: int = 0
    first_query: str | None = None
    tools: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)
    parent_conversation_id: str | None = None
    job_status: JobState | None = None
    path: str | None = None


class ErrorInfo(_Stored):
    """An error as kept in status.json: code, message, and when and on which attempt it happened."""

    code: str
    message: str
    at: str | None = None
    attempt: int | None = None


class Progress(_Stored):
    """How far a job has come: percentage, what it is doing, elapsed time and attempt."""

    percentage: int = 0
    message: str = ""
    elapsed_ms: int = 0
    attempt: int = 1


class JobStatus(_Stored):
    """The contents of ``status.json`` for a conversation whose research runs as a job."""

    conversation_id: str
    status: JobState
    tool_name: str
    started_at: str
    updated_at: str
    attempts: int = 0
    completed_at: str | None = None
    error: ErrorInfo | None = None
    error_history: list[ErrorInfo] = Field(default_factory=list)
    progress: Progress | None = None
    worker_id: str | None = None
    heartbeat_at: str | None = None
    priority: int = 0
    remote_id: str | None = None
    job_id: str | None = None
    """Fixed at enqueue; tags the answer the job stores (``jobId``)."""
    queue_key: str | None = None
    """The job's marker in the claim index (``queueKey``)."""
    submitting_at: str | None = None
    """Set while a paid submission is being sent and its outcome is not known yet."""
    submitted_at: str | None = None
    """When the background run ``remote_id`` was submitted: its deadline counts from then."""
    request: Annotated[JobRequest, _AS_WRITTEN] | None = None
    """What the job asked for, kept for a deliberate retry."""
    result: Annotated[JobResult, _AS_WRITTEN] | None = None
    """What the job ended with: tokens and cost, and how it ended when that needs saying."""

    @property
    def done(self) -> bool:
        """True once the job has ended (completed, failed or cancelled)."""
        return self.status in DONE_JOB_STATES


class JobRecord(_Stored):
    """The contents of ``job.json``: what a queued job asks for, kept while the job is active.

    A record without ids loads (as ``""``): it belongs to no job, and the job that finds it
    fails saying its request is lost rather than stalling on a damaged file.
    """

    job_id: str = ""
    conversation_id: str = ""
    tool_name: str = ""
    request: Annotated[JobRequest, _AS_WRITTEN] = Field(default_factory=JobRequest)
    priority: int = 0
    enqueued_at: str = ""
    queue_key: str | None = None
    params: Annotated[JobParams, _AS_WRITTEN] | None = None
    """The TypeScript perplexity-mcp-server's view of the request (``query``,
    ``reasoning_effort``): with ``created_at``, ``attempts`` and ``max_attempts`` it makes the
    record a job that server's worker runs too, and a record it queued has only those."""
    created_at: str | None = None
    attempts: int = 0
    max_attempts: int = 3

    @property
    def foreign(self) -> bool:
        """Queued by the TypeScript server: its fields, no job id of ours."""
        return not self.job_id and bool(self.params)


class Answer(BaseModel):
    """A cited answer: text, sources, related questions, usage and cost, and where it is stored."""

    model_config = ConfigDict(extra="ignore")

    text: str
    sources: list[Source] = Field(default_factory=list)
    related_questions: list[str] = Field(default_factory=list)
    images: list[dict[str, Any]] = Field(default_factory=list)
    thinking: str | None = None
    model: str | None = None
    usage: Usage | None = None
    cost: Cost | None = None
    response_id: str | None = None
    finish_reason: str | None = None
    effort: str | None = None
    """The effort the run went with (``fast`` ... ``xhigh``, possibly pinned to a version), as
    the API reports it, else as asked."""
    preset: str | None = None
    """The same as the API's deprecated ``preset`` field reports it."""
    searched: bool | None = None
    """Whether the run searched the web for this answer (``False``: from the model alone;
    ``None``: not reported)."""
    conversation_id: str | None = None
    conversation_path: str | None = None
    reformulated_query: str | None = None
    cached: bool = False
    notes: list[str] = Field(default_factory=list)
    """Notes about the question, e.g. an attached file already in the conversation history."""

    def linked_text(self) -> str:
        """The text as safe Markdown, its ``[n]`` / ``[web:N]`` markers linked to their sources."""
        return link_citations(self.text, self.sources)

    def to_markdown(self) -> str:
        """A readable Markdown rendering: linked answer, numbered sources, related questions."""
        extra = [
            sources_markdown(self.sources, self.text),
            related_markdown(self.related_questions),
            notes_markdown(self.notes),
        ]
        if self.conversation_id:
            extra.append(f"<sub>Conversation `{self.conversation_id}`</sub>")
        return "\n\n".join([self.linked_text(), *(part for part in extra if part)])

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def __str__(self) -> str:
        return self.text
