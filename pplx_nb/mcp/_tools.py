"""The MCP tools: parse (the signature is the input schema), call the Researcher, render.

The functions' parameter names and ``Annotated`` types are what clients see as input schemas, and
their return annotations declare the output schemas of the structured content. Every Researcher
call runs off the server's event loop (:class:`Backend` ``call`` / ``read``), so a call that waits
on a conversation's lock or the disk never holds up another client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ToolAnnotations

from pplx_nb._errors import ValidationError
from pplx_nb._models import JobStatus
from pplx_nb.mcp._backend import Backend
from pplx_nb.mcp._descriptions import DESCRIPTIONS, TITLES
from pplx_nb.mcp._histories import await_histories, read_histories
from pplx_nb.mcp._progress import ProgressRelay
from pplx_nb.mcp._render import (
    answer_result,
    cancel_result,
    histories_result,
    history_result,
    list_result,
    queued_result,
    references_result,
    web_search_result,
)
from pplx_nb.mcp._schemas import (
    AfterDate,
    AskResult,
    BeforeDate,
    CancelResult,
    CiteAll,
    CiteConsulted,
    CiteFormat,
    CiteIds,
    ConversationId,
    ConversationIds,
    ConversationList,
    Country,
    DomainFilter,
    Files,
    FollowupQuery,
    HistoriesResult,
    HistoryResult,
    IncludeSystemPrompt,
    Limit,
    ListText,
    MaxResults,
    MaxTokensPerPage,
    ModelName,
    Query,
    ReasoningEffort,
    RecencyFilter,
    ReferencesResult,
    RelatedQuestions,
    SaveResults,
    SearchMode,
    ShowThinking,
    Since,
    TimeoutSeconds,
    ToolName,
    Until,
    WebSearchResult,
)

if TYPE_CHECKING:
    from pplx_nb._models import Answer
    from pplx_nb.research import Researcher

__all__ = ["ATTACHMENTS_OFF", "TOOL_NAMES", "register_tools"]

AskOutput = Annotated[CallToolResult, AskResult]
HistoryOutput = Annotated[CallToolResult, HistoryResult]
ListOutput = Annotated[CallToolResult, ConversationList]
ReferencesOutput = Annotated[CallToolResult, ReferencesResult]
HistoriesOutput = Annotated[CallToolResult, HistoriesResult]
WebSearchOutput = Annotated[CallToolResult, WebSearchResult]
CancelOutput = Annotated[CallToolResult, CancelResult]

_ASK = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)
_READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
_HINTS = {
    "perplexity_search": _ASK,
    "perplexity_deep_research": _ASK,
    "perplexity_search_followup": _ASK,
    "perplexity_deep_research_followup": _ASK,
    "get_conversation_history": _READ,
    "get_conversation_histories": _READ,
    "await_conversation_histories": _READ,
    "list_conversations": _READ,
    "cancel_deep_research": ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=True
    ),
    "perplexity_web_search": ToolAnnotations(
        read_only_hint=False, destructive_hint=False, open_world_hint=True
    ),
    "get_references": _READ,
}
TOOL_NAMES = tuple(_HINTS)
DEFAULT_WAIT_SECONDS = 300.0

ATTACHMENTS_OFF = (
    "File attachments are off on this MCP server. To allow them, set PPLX_NB_FILE_ROOTS "
    "in the server's environment to the folder(s) whose files may be attached (e.g. "
    "PPLX_NB_FILE_ROOTS=/home/me/projects/report), restart it, and call again; or "
    "paste the relevant text into the query."
)


def _opts(**options: Any) -> dict[str, Any]:
    """Search options for the Researcher: the ones the caller set."""
    return {key: value for key, value in options.items() if value not in (None, False)}


def _attachable(files: list[str] | None, backend: Backend) -> list[str] | None:
    """``files`` as real paths under PPLX_NB_FILE_ROOTS; refused without it or outside it.

    An assistant's server often runs from ``/``: with the working directory as a root, any
    readable file on the machine could be sent to the API. So the server checks the files
    against the configured roots alone before the Researcher attaches them.
    """
    if not files:
        return files
    from pplx_nb.context import resolve_attachments

    roots = backend.settings.file_roots
    if not roots:
        raise ValidationError(ATTACHMENTS_OFF)
    return [str(path) for path in resolve_attachments(files, roots, working_directory=False)]


class Tools:
    """The tool functions; their signatures are the published input schemas."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def _render(
        self, result: Answer | JobStatus, path: str, *, followup: bool, show_thinking: bool
    ) -> CallToolResult:
        if isinstance(result, JobStatus):
            return queued_result(result, path, followup=followup)
        return answer_result(result, followup=followup, show_thinking=show_thinking)

    async def _ask(
        self,
        conversation_id: str | None,
        query: str,
        mode: Literal["search", "research"],
        files: list[str] | None,
        show_thinking: bool,
        ctx: Context | None,
        **options: Any,
    ) -> CallToolResult:
        """Start or continue a conversation in ``mode``; with progress when ``ctx`` is given."""
        opts = _opts(show_thinking=show_thinking, **options)

        async def work(researcher: Researcher) -> tuple[Answer | JobStatus, str]:
            attached = _attachable(files, self._backend)
            result: Answer | JobStatus
            if conversation_id is not None:
                result = await researcher.afollowup(
                    conversation_id, query, mode=mode, files=attached, on_progress=relay, **opts
                )
            elif mode == "research":
                result = await researcher.adeep_research(
                    query, files=attached, on_progress=relay, **opts
                )
            else:
                result = await researcher.asearch(query, files=attached, **opts)
            cid = result.conversation_id or ""
            return result, researcher.store.conversation_location(cid) if cid else ""

        relay = ProgressRelay(ctx.report_progress) if ctx is not None else None
        if relay is None:
            result, path = await self._backend.call(work)
        else:
            async with relay.running():
                result, path = await self._backend.call(work)
        return self._render(
            result, path, followup=conversation_id is not None, show_thinking=show_thinking
        )

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
        """Search and answer on a NEW conversation."""
        return await self._ask(
            None,
            query,
            "search",
            files,
            showThinking,
            None,
            search_recency_filter=search_recency_filter,
            search_domain_filter=search_domain_filter,
            search_after_date_filter=search_after_date_filter,
            search_before_date_filter=search_before_date_filter,
            search_mode=search_mode,
            return_related_questions=return_related_questions,
        )

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
        """Deep research on a NEW conversation: blocks with progress, or queues."""
        return await self._ask(
            None,
            query,
            "research",
            files,
            showThinking,
            ctx,
            reasoning_effort=reasoning_effort,
            search_recency_filter=search_recency_filter,
            search_domain_filter=search_domain_filter,
            search_after_date_filter=search_after_date_filter,
            search_before_date_filter=search_before_date_filter,
            search_mode=search_mode,
            return_related_questions=return_related_questions,
        )

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
        """Continue a conversation with a quick search."""
        return await self._ask(
            conversationId,
            query,
            "search",
            files,
            showThinking,
            None,
            search_recency_filter=search_recency_filter,
            search_domain_filter=search_domain_filter,
            search_after_date_filter=search_after_date_filter,
            search_before_date_filter=search_before_date_filter,
            search_mode=search_mode,
            return_related_questions=return_related_questions,
        )

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
        """Continue a conversation with deep research."""
        return await self._ask(
            conversationId,
            query,
            "research",
            files,
            showThinking,
            ctx,
            reasoning_effort=reasoning_effort,
            search_recency_filter=search_recency_filter,
            search_domain_filter=search_domain_filter,
            search_after_date_filter=search_after_date_filter,
            search_before_date_filter=search_before_date_filter,
            search_mode=search_mode,
            return_related_questions=return_related_questions,
        )

    async def get_conversation_history(
        self,
        conversationId: ConversationId,
        includeSystemPrompt: IncludeSystemPrompt = False,
    ) -> HistoryOutput:
        """A conversation's turns, preceded by its job status if one ran."""

        def read(researcher: Researcher) -> CallToolResult:
            # The status first, as in read_histories: never "completed" beside older turns.
            status = researcher.status(conversationId)
            conversation = researcher.history(conversationId, include_system=includeSystemPrompt)
            answering = researcher.answering_since(conversationId)
            path = researcher.store.conversation_location(conversationId)
            return history_result(conversation, path, status, answering)

        return await self._backend.read(read)

    async def get_conversation_histories(
        self,
        conversationIds: ConversationIds,
        includeSystemPrompt: IncludeSystemPrompt = False,
    ) -> HistoriesOutput:
        """Several conversations at once, each with its job state and latest report."""
        result = await read_histories(self._backend, conversationIds, includeSystemPrompt)
        return histories_result(result, awaited=False)

    async def await_conversation_histories(
        self,
        conversationIds: ConversationIds,
        ctx: Context,
        timeoutSeconds: TimeoutSeconds = DEFAULT_WAIT_SECONDS,
        includeSystemPrompt: IncludeSystemPrompt = False,
    ) -> HistoriesOutput:
        """Wait, with progress, until every listed conversation's job has ended or time is up."""
        relay = ProgressRelay(ctx.report_progress)
        async with relay.running():
            result = await await_histories(
                self._backend, conversationIds, includeSystemPrompt, timeoutSeconds, relay
            )
        return histories_result(result, awaited=True)

    async def list_conversations(
        self,
        limit: Limit = 20,
        text: ListText = None,
        tool: ToolName = None,
        model: ModelName = None,
        since: Since = None,
        until: Until = None,
    ) -> ListOutput:
        """Stored conversations, newest first, filtered."""
        summaries = await self._backend.read(
            lambda researcher: researcher.conversations(
                text=text, tool=tool, model=model, since=since, until=until, limit=limit
            )
        )
        return list_result(summaries)

    async def perplexity_web_search(
        self,
        query: Query,
        max_results: MaxResults = 10,
        search_recency_filter: RecencyFilter = None,
        search_domain_filter: DomainFilter = None,
        search_after_date_filter: AfterDate = None,
        search_before_date_filter: BeforeDate = None,
        search_mode: SearchMode = None,
        country: Country = None,
        max_tokens_per_page: MaxTokensPerPage = None,
        save: SaveResults = False,
    ) -> WebSearchOutput:
        """Ranked web results from the Search API, no answer; stored only with ``save``."""
        filters = _opts(
            search_recency_filter=search_recency_filter,
            search_domain_filter=search_domain_filter,
            search_after_date_filter=search_after_date_filter,
            search_before_date_filter=search_before_date_filter,
            search_mode=search_mode,
            country=country,
            max_tokens_per_page=max_tokens_per_page,
        )

        async def work(researcher: Researcher) -> CallToolResult:
            results = await researcher.aweb_search(
                query, max_results=max_results, save=save, **filters
            )
            cid = results.conversation_id
            path = str(researcher.store.path(cid)) if cid else None
            return web_search_result(results, path)

        return await self._backend.call(work)

    async def cancel_deep_research(self, conversationId: ConversationId) -> CancelOutput:
        """Cancel a queued or running deep research, and its run at the API."""

        async def work(researcher: Researcher) -> CallToolResult:
            status = await researcher.acancel(conversationId)
            path = str(researcher.store.path(conversationId))
            return cancel_result(conversationId, path, status)

        return await self._backend.call(work)

    async def get_references(
        self,
        conversationIds: CiteIds = None,
        all: CiteAll = False,
        format: CiteFormat = "bibtex",
        consulted: CiteConsulted = False,
    ) -> ReferencesOutput:
        """The sources of conversations (or of every one) as references, in a chosen format."""
        if bool(conversationIds) == all:
            raise ValidationError(
                "Pass conversationIds (the conversations to cite) or all: true (every stored "
                "conversation), one of the two."
            )

        def work(researcher: Researcher) -> CallToolResult:
            from pplx_nb import cite  # bibtexparser is loaded by the first call that cites

            store = researcher.store
            source: Any = store if all else list(dict.fromkeys(conversationIds or []))
            references = cite.collect(source, store=store, consulted=consulted)
            text = cite.write_references(references, cite.check_format(format))
            return references_result(references, format, text)

        return await self._backend.read(work)


def register_tools(server: MCPServer[Any], backend: Backend) -> None:
    """Add the tools, with their titles, descriptions and read-only hints, to ``server``."""
    tools = Tools(backend)
    for name, hints in _HINTS.items():
        server.add_tool(
            getattr(tools, name),
            name=name,
            title=TITLES[name],
            description=DESCRIPTIONS[name],
            annotations=hints,
            structured_output=True,
        )
