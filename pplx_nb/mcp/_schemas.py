"""Input parameter types and structured results of the MCP tools.

Parameter names follow the seed server (``conversationId``, ``showThinking``, ``search_*``), so the
input schemas that clients see are the ones the TypeScript perplexity-mcp-server published. The
result models are what ``structuredContent`` carries next to the readable text. The accepted
option values come from :mod:`pplx_nb._options`, the rules the Python API checks too.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from pplx_nb._options import (
    MAX_DOMAIN_CHARS,
    MAX_DOMAINS,
    ReasoningEffortValue,
    RecencyValue,
    SearchModeValue,
    parse_date,
)

__all__ = [
    "CONVERSATION_ID_PATTERN",
    "MAX_DOMAINS",
    "MAX_QUERY_CHARS",
    "AfterDate",
    "AskResult",
    "BeforeDate",
    "CancelResult",
    "ConversationId",
    "ConversationIds",
    "ConversationList",
    "Country",
    "DomainFilter",
    "Files",
    "FollowupQuery",
    "HistoriesResult",
    "HistoryEntry",
    "HistoryResult",
    "IncludeSystemPrompt",
    "Limit",
    "ListText",
    "MaxResults",
    "MaxTokensPerPage",
    "ModelName",
    "Query",
    "ReasoningEffort",
    "RecencyFilter",
    "RelatedQuestions",
    "ResultModel",
    "SaveResults",
    "SearchMode",
    "ShowThinking",
    "Since",
    "SourceOut",
    "TimeoutSeconds",
    "ToolName",
    "Until",
    "WebSearchResult",
]

MAX_QUERY_CHARS = 10_000
CONVERSATION_ID_PATTERN = r"^\d{8}-\d{13}$"
MAX_CONVERSATIONS = 50
MAX_WAIT_SECONDS = 3600


def _date(value: str | None) -> str | None:
    return None if value is None else parse_date(value)


def _whole(value: object) -> object:
    """A number without a fraction (``3.0``) as the integer it is: JSON Schema's ``integer``
    counts it as one, and clients that compute a count may send it so."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Query = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        description="Your question, complete and well-formed (1 to 10,000 characters).",
    ),
]
FollowupQuery = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        description=(
            "Your follow-up question. It is added to the conversation history, so earlier "
            "context need not be repeated."
        ),
    ),
]
ConversationId = Annotated[
    str,
    Field(
        pattern=CONVERSATION_ID_PATTERN,
        description=(
            "The conversation ID from a previous search or deep research response, "
            'e.g. "20250124-1706102400123".'
        ),
    ),
]
ConversationIds = Annotated[
    list[Annotated[str, Field(pattern=CONVERSATION_ID_PATTERN)]],
    Field(
        min_length=1,
        max_length=MAX_CONVERSATIONS,
        description=(
            "The conversation IDs to read (1 to 50), as returned by the search and research "
            'tools, e.g. ["20250124-1706102400123"].'
        ),
    ),
]
TimeoutSeconds = Annotated[
    float,
    Field(
        gt=0,
        le=MAX_WAIT_SECONDS,
        description=(
            "Return after at most this many seconds even if some jobs are still running "
            "(they go on in the background; call again to keep waiting). Default 300."
        ),
    ),
]
RecencyFilter = Annotated[
    RecencyValue | None,
    Field(description="Only use sources published within this period."),
]
DomainFilter = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=MAX_DOMAIN_CHARS)]] | None,
    Field(
        max_length=MAX_DOMAINS,
        description=(
            "Restrict sources to these domains (at most 20); prefix a domain with '-' to "
            'exclude it, e.g. ["python.org", "-pinterest.com"].'
        ),
    ),
]
AfterDate = Annotated[
    str | None,
    AfterValidator(_date),
    Field(description="Only sources published after this date (MM/DD/YYYY, e.g. 01/31/2025)."),
]
BeforeDate = Annotated[
    str | None,
    AfterValidator(_date),
    Field(description="Only sources published before this date (MM/DD/YYYY, e.g. 01/31/2025)."),
]
SearchMode = Annotated[
    SearchModeValue | None,
    Field(description="'academic' prefers scholarly sources, 'sec' SEC filings; default 'web'."),
]
RelatedQuestions = Annotated[bool, Field(description="Also return questions related to this one.")]
ReasoningEffort = Annotated[
    ReasoningEffortValue | None,
    Field(description="How much effort deep research spends: more is slower and more thorough."),
]
ShowThinking = Annotated[
    bool, Field(description="Include the model's reasoning before the answer, when it gives one.")
]
Files = Annotated[
    list[Annotated[str, Field(min_length=1)]] | None,
    Field(
        max_length=20,
        description=(
            "Paths of local text files to attach as context (read by the server; files already "
            "attached earlier in the conversation are not sent again)."
        ),
    ),
]
IncludeSystemPrompt = Annotated[
    bool, Field(description="Include the system prompt in the returned history.")
]
Limit = Annotated[
    int,
    BeforeValidator(_whole),
    Field(ge=1, le=200, description="At most this many conversations."),
]
ListText = Annotated[
    str | None,
    Field(
        max_length=500,
        description="Only conversations whose questions or answers contain these words.",
    ),
]
Since = Annotated[
    str | None,
    Field(
        max_length=40,
        description="Only conversations created at or after this instant (ISO 8601).",
    ),
]
Until = Annotated[
    str | None,
    Field(
        max_length=40,
        description="Only conversations created at or before this instant (ISO 8601).",
    ),
]
ModelName = Annotated[
    str | None,
    Field(max_length=100, description="Only conversations answered by this model."),
]
ToolName = Annotated[
    Literal[
        "perplexity_search",
        "perplexity_deep_research",
        "perplexity_search_followup",
        "perplexity_deep_research_followup",
    ]
    | None,
    Field(description="Only conversations with a turn produced by this tool."),
]

MaxResults = Annotated[
    int,
    BeforeValidator(_whole),
    Field(ge=1, le=20, description="How many results to return (1 to 20, default 10)."),
]
MaxTokensPerPage = Annotated[
    int | None,
    BeforeValidator(_whole),
    Field(
        ge=256,
        le=2048,
        description="How much text to take from each page for its snippet, in tokens (256 to "
        "2048; the API's default when omitted).",
    ),
]
Country = Annotated[
    str | None,
    Field(
        pattern=r"^[A-Za-z]{2}$",
        description="ISO 3166-1 alpha-2 country code for regional results, e.g. 'US', 'GB'.",
    ),
]
SaveResults = Annotated[
    bool,
    Field(
        description="Also store the query and the results as a NEW conversation, so that "
        "`perplexity_search_followup` can ask about them (default false: nothing is stored)."
    ),
]


def _portable_schema(schema: dict[str, Any]) -> None:
    """Write each optional field as its one type, with no ``null`` branch.

    An optional field is left out of the structured content when it has no value
    (:meth:`ResultModel.structured`) instead of being ``null``, so its schema needs no ``null``:
    neither a type array (``["string", "null"]``), which clients that map a schema onto one
    type per field reject (Gemini's function declarations; the Inspector's ``--strict`` warns),
    nor an ``anyOf``, which took about half of the official Python client's validation time.
    """
    for field in schema.get("properties", {}).values():
        options = field.get("anyOf")
        if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
            (kept,) = [option for option in options if option != {"type": "null"}]
            del field["anyOf"]
            field.update(kept)
            if field.get("default", ...) is None:
                del field["default"]


class ResultModel(BaseModel):
    """A tool's structured result: exactly the fields its output schema names."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_portable_schema)

    def structured(self) -> dict[str, Any]:
        """The model as a tool result's structured content: JSON values, no field that is None."""
        return self.model_dump(mode="json", exclude_none=True)


class SourceOut(ResultModel):
    """A cited web page."""

    url: str
    title: str | None = None
    date: str | None = None
    snippet: str | None = None


class AskResult(ResultModel):
    """What the search and research tools return as structured content.

    ``status`` is ``completed`` when ``answer`` holds the answer, or ``pending`` when deep research
    was queued and ``answer`` is empty until ``get_conversation_history`` shows it completed.
    """

    conversationId: str
    conversationPath: str
    status: Literal["completed", "pending"]
    answer: str
    sources: list[SourceOut] = Field(default_factory=list)
    relatedQuestions: list[str] = Field(default_factory=list)
    model: str | None = None
    usage: dict[str, Any] | None = None
    cost: dict[str, Any] | None = None
    reformulatedQuery: str | None = None
    notes: list[str] = Field(default_factory=list)
    thinking: str | None = None
    cached: bool = False


class HistoryResult(ResultModel):
    """A stored conversation, its location, and its research job when one ever ran."""

    conversationId: str
    conversationPath: str
    createdAt: str
    updatedAt: str
    messageCount: int
    messages: list[dict[str, Any]]
    parentConversationId: str | None = None
    job: dict[str, Any] | None = None
    answeringSince: str | None = None
    """When the follow-up whose answer is still on its way was asked; absent when none is."""


class ConversationList(ResultModel):
    """Stored conversations, newest first."""

    count: int
    conversations: list[dict[str, Any]]


class HistoryEntry(ResultModel):
    """One conversation of a batch: its job's state and, when it has one, its latest report.

    ``status`` is the job's state, ``answered`` when no job ever ran (a plain conversation), or
    ``error`` when the conversation could not be read (``error`` says why).
    """

    status: Literal[
        "pending", "in_progress", "completed", "failed", "cancelled", "answered", "error"
    ]
    conversation: dict[str, Any] | None = None
    job: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None
    report: str | None = None
    error: dict[str, str] | None = None


class HistoriesResult(ResultModel):
    """Several conversations at once, keyed by conversation ID.

    From ``await_conversation_histories``: ``timedOut`` is true when the wait ended at its
    timeout, and ``pending`` lists the conversations whose jobs were still pending or running.
    """

    conversations: dict[str, HistoryEntry]
    count: int
    pending: list[str] = Field(default_factory=list)
    timedOut: bool = False
    waitedSeconds: float = 0.0


class WebSearchResult(ResultModel):
    """Search API results: ranked pages, no answer.

    ``conversationId`` and ``conversationPath`` are set when the results were saved.
    """

    query: str
    count: int
    results: list[SourceOut]
    conversationId: str | None = None
    conversationPath: str | None = None


class CancelResult(ResultModel):
    """What ``cancel_deep_research`` did.

    ``status`` is the job's state after the call (``cancelled``, or the state it had already
    ended in: ``completed`` or ``failed``, or ``cancelled`` by an earlier call), absent when the
    conversation never had a research job; ``cancelled`` is true only when this call cancelled
    it. A run that had finished before the cancel reached it is ``completed``: its report is
    stored. ``remoteCancelled`` says whether the API confirmed that the job's run stopped (absent
    when no run was asked to stop); ``costUnknown`` is true when a run was started: a
    cancelled run reports no usage.
    """

    conversationId: str
    conversationPath: str
    status: str | None = None
    cancelled: bool
    remoteId: str | None = None
    remoteCancelled: bool | None = None
    costUnknown: bool = False
    message: str
