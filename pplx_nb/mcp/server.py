"""The MCP server: six tools and a health resource as thin adapters over :class:`Researcher`.

Each tool parses its arguments (the input schema does the checking), calls the Researcher, and
renders the result as text with the seed's conversation header plus structured content. Errors
come back as ``isError`` results whose text starts with the error code. The Researcher is built on
first use, so the server answers ``initialize`` before the API client and store are even imported.

    server = create_server(Settings.from_env())
    server.run("stdio")
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import ValidationError as PydanticValidationError

from pplx_nb import __version__
from pplx_nb._config import Settings
from pplx_nb._errors import PplxError, ValidationError
from pplx_nb._models import JobStatus
from pplx_nb.mcp._descriptions import DESCRIPTIONS
from pplx_nb.mcp._progress import ProgressRelay
from pplx_nb.mcp._render import (
    answer_result,
    error_result,
    history_result,
    list_result,
    queued_result,
    validation_message,
)
from pplx_nb.mcp._schemas import (
    AfterDate,
    AskResult,
    BeforeDate,
    ConversationId,
    ConversationList,
    DomainFilter,
    Files,
    FollowupQuery,
    HistoryResult,
    IncludeSystemPrompt,
    Limit,
    ListText,
    ModelName,
    Query,
    ReasoningEffort,
    RecencyFilter,
    RelatedQuestions,
    SearchMode,
    ShowThinking,
    Since,
    ToolName,
    Until,
)

if TYPE_CHECKING:
    from pplx_nb._models import Answer
    from pplx_nb.research import Researcher

__all__ = ["SERVER_NAME", "PplxMCPServer", "create_server"]

logger = logging.getLogger("pplx_nb.mcp")

SERVER_NAME = "pplx_nb"
INSTRUCTIONS = (
    "Perplexity search and deep research with conversations stored on disk. Start with "
    "perplexity_search (quick) or perplexity_deep_research (exhaustive); both return a "
    "conversationId. Continue with perplexity_search_followup or "
    "perplexity_deep_research_followup (either mode, whatever started the conversation); read a "
    "conversation, or collect a queued research report, with get_conversation_history."
)

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
AskOutput = Annotated[CallToolResult, AskResult]
HistoryOutput = Annotated[CallToolResult, HistoryResult]
ListOutput = Annotated[CallToolResult, ConversationList]

_ASK = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)
_READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)


class _Backend:
    """The Researcher, built once on first use (importing it is most of a cold start)."""

    def __init__(self, settings: Settings, researcher: Researcher | None) -> None:
        self.settings = settings
        self._researcher = researcher
        self._lock = threading.Lock()

    @property
    def async_mode(self) -> bool:
        if self._researcher is not None:
            return self._researcher.async_deep_research
        return bool(self.settings.enable_async_deep_research)

    def get(self) -> Researcher:
        if self._researcher is None:
            with self._lock:
                if self._researcher is None:
                    from pplx_nb.research import Researcher

                    self._researcher = Researcher(
                        self.settings, async_deep_research=self.async_mode
                    )
        return self._researcher

    def start_worker(self) -> None:
        researcher = self.get()
        # Create the queue first: Researcher.start_worker builds it under its own (non-reentrant)
        # lock, and would wait on itself if the queue did not exist yet.
        _ = researcher.queue
        researcher.start_worker()

    def close(self) -> None:
        if self._researcher is not None:
            self._researcher.close()


def _opts(**options: Any) -> dict[str, Any]:
    """Search options for the Researcher: the ones the caller set."""
    return {key: value for key, value in options.items() if value not in (None, False)}


class _Tools:
    """The tool functions; their signatures are the published input schemas."""

    def __init__(self, backend: _Backend) -> None:
        self._backend = backend

    def _path(self, conversation_id: str) -> str:
        return str(self._backend.get().store.path(conversation_id))

    def _render(
        self, result: Answer | JobStatus, *, followup: bool, show_thinking: bool
    ) -> CallToolResult:
        if isinstance(result, JobStatus):
            path = self._path(result.conversation_id)
            return queued_result(result, path, followup=followup)
        return answer_result(result, followup=followup, show_thinking=show_thinking)

    async def perplexity_search(
        self,
        query: Query,
        search_recency_filter: RecencyFilter = None,
        search_domain_filter: DomainFilter = None,
        search_after_date_filter: AfterDate = None,
        search_before_date_filter: BeforeDate = None,
        search_mode: SearchMode = None,
        return_related_questions: RelatedQuestions = False,
        showThinking: ShowThinking = False,
        files: Files = None,
    ) -> AskOutput:
        answer = await self._backend.get().asearch(
            query,
            files=files,
            **_opts(
                search_recency_filter=search_recency_filter,
                search_domain_filter=search_domain_filter,
                search_after_date_filter=search_after_date_filter,
                search_before_date_filter=search_before_date_filter,
                search_mode=search_mode,
                return_related_questions=return_related_questions,
                show_thinking=showThinking,
            ),
        )
        return answer_result(answer, followup=False, show_thinking=showThinking)

    async def perplexity_deep_research(
        self,
        query: Query,
        ctx: Context,
        reasoning_effort: ReasoningEffort = None,
        search_recency_filter: RecencyFilter = None,
        search_domain_filter: DomainFilter = None,
        search_after_date_filter: AfterDate = None,
        search_before_date_filter: BeforeDate = None,
        search_mode: SearchMode = None,
        return_related_questions: RelatedQuestions = False,
        showThinking: ShowThinking = False,
        files: Files = None,
    ) -> AskOutput:
        relay = ProgressRelay(ctx.report_progress)
        async with relay.running():
            result = await self._backend.get().adeep_research(
                query,
                files=files,
                on_progress=relay,
                **_opts(
                    reasoning_effort=reasoning_effort,
                    search_recency_filter=search_recency_filter,
                    search_domain_filter=search_domain_filter,
                    search_after_date_filter=search_after_date_filter,
                    search_before_date_filter=search_before_date_filter,
                    search_mode=search_mode,
                    return_related_questions=return_related_questions,
                    show_thinking=showThinking,
                ),
            )
        return self._render(result, followup=False, show_thinking=showThinking)

    async def perplexity_search_followup(
        self,
        conversationId: ConversationId,
        query: FollowupQuery,
        search_recency_filter: RecencyFilter = None,
        search_domain_filter: DomainFilter = None,
        search_after_date_filter: AfterDate = None,
        search_before_date_filter: BeforeDate = None,
        search_mode: SearchMode = None,
        return_related_questions: RelatedQuestions = False,
        showThinking: ShowThinking = False,
        files: Files = None,
    ) -> AskOutput:
        result = await self._backend.get().afollowup(
            conversationId,
            query,
            mode="search",
            files=files,
            **_opts(
                search_recency_filter=search_recency_filter,
                search_domain_filter=search_domain_filter,
                search_after_date_filter=search_after_date_filter,
                search_before_date_filter=search_before_date_filter,
                search_mode=search_mode,
                return_related_questions=return_related_questions,
                show_thinking=showThinking,
            ),
        )
        return self._render(result, followup=True, show_thinking=showThinking)

    async def perplexity_deep_research_followup(
        self,
        conversationId: ConversationId,
        query: FollowupQuery,
        ctx: Context,
        reasoning_effort: ReasoningEffort = None,
        search_recency_filter: RecencyFilter = None,
        search_domain_filter: DomainFilter = None,
        search_after_date_filter: AfterDate = None,
        search_before_date_filter: BeforeDate = None,
        search_mode: SearchMode = None,
        return_related_questions: RelatedQuestions = False,
        showThinking: ShowThinking = False,
        files: Files = None,
    ) -> AskOutput:
        relay = ProgressRelay(ctx.report_progress)
        async with relay.running():
            result = await self._backend.get().afollowup(
                conversationId,
                query,
                mode="research",
                files=files,
                on_progress=relay,
                **_opts(
                    reasoning_effort=reasoning_effort,
                    search_recency_filter=search_recency_filter,
                    search_domain_filter=search_domain_filter,
                    search_after_date_filter=search_after_date_filter,
                    search_before_date_filter=search_before_date_filter,
                    search_mode=search_mode,
                    return_related_questions=return_related_questions,
                    show_thinking=showThinking,
                ),
            )
        return self._render(result, followup=True, show_thinking=showThinking)

    async def get_conversation_history(
        self,
        conversationId: ConversationId,
        includeSystemPrompt: IncludeSystemPrompt = False,
    ) -> HistoryOutput:
        from pplx_nb.jobs import format_status_message

        researcher = self._backend.get()
        conversation = researcher.history(conversationId, include_system=includeSystemPrompt)
        status = researcher.status(conversationId)
        status_text = format_status_message(status) if status is not None else None
        return history_result(conversation, self._path(conversationId), status, status_text)

    async def list_conversations(
        self,
        limit: Limit = 20,
        text: ListText = None,
        tool: ToolName = None,
        model: ModelName = None,
        since: Since = None,
        until: Until = None,
    ) -> ListOutput:
        summaries = self._backend.get().conversations(
            text=text, tool=tool, model=model, since=since, until=until, limit=limit
        )
        return list_result(summaries)


class PplxMCPServer(MCPServer[Any]):
    """An MCPServer whose tool failures all come back as coded ``isError`` results."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        """Run a tool; map a PplxError or rejected arguments to an ``isError`` result."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = _root_cause(exc)
            if isinstance(cause, PplxError):
                logger.info("Tool %s failed: %s", name, cause.code)
                return error_result(cause)
            if isinstance(cause, PydanticValidationError):
                logger.info("Tool %s rejected its arguments", name)
                return error_result(ValidationError(validation_message(name, cause)))
            if cause is None:
                raise
            logger.error("Tool %s crashed", name, exc_info=cause)
            return error_result(
                PplxError(
                    f"`{name}` failed unexpectedly ({type(cause).__name__}). The server log "
                    "(stderr) has the details; retry, and report it if it happens again."
                )
            )


def _root_cause(exc: BaseException) -> BaseException | None:
    """The exception a tool raised, unwrapped from the SDK's ToolError and task-group groups."""
    cause = exc.__cause__
    while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
        cause = cause.exceptions[0]
    return cause


def create_server(
    settings: Settings | None = None, *, researcher: Researcher | None = None
) -> PplxMCPServer:
    """The MCP server over ``researcher`` (default: one built from ``settings`` on first use).

    In async mode (PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH) deep research is queued and the server
    runs the background worker from start-up, so jobs left by an earlier run are picked up too.
    """
    settings = settings or (researcher.settings if researcher else Settings.from_env())
    backend = _Backend(settings, researcher)

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[dict[str, Any]]:
        if backend.async_mode:
            threading.Thread(
                target=backend.start_worker, name="pplx-nb-worker-start", daemon=True
            ).start()
        try:
            yield {}
        finally:
            await anyio.to_thread.run_sync(backend.close)

    level = settings.log_level.upper()
    sdk_level: LogLevel = level if level in get_args(LogLevel) else "INFO"  # type: ignore[assignment]
    server = PplxMCPServer(
        SERVER_NAME,
        title="Perplexity research (pplx_nb)",
        instructions=INSTRUCTIONS,
        version=__version__,
        lifespan=lifespan,
        log_level=sdk_level,
    )
    tools = _Tools(backend)
    for name, hints in (
        ("perplexity_search", _ASK),
        ("perplexity_deep_research", _ASK),
        ("perplexity_search_followup", _ASK),
        ("perplexity_deep_research_followup", _ASK),
        ("get_conversation_history", _READ),
        ("list_conversations", _READ),
    ):
        server.add_tool(
            getattr(tools, name),
            name=name,
            description=DESCRIPTIONS[name],
            annotations=hints,
            structured_output=True,
        )

    @server.resource(
        "pplx://health",
        name="health",
        title="pplx_nb health and metrics",
        description="Health (healthy | degraded | unhealthy, with its checks) and request metrics.",
        mime_type="application/json",
    )
    async def health() -> str:
        researcher = backend.get()
        report = await anyio.to_thread.run_sync(researcher.health)
        report["metrics"] = researcher.metrics()
        return json.dumps(report, default=str)

    return server
