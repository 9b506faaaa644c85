"""The six MCP tools: parse (the signature is the input schema), call the Researcher, render.

The functions' parameter names and ``Annotated`` types are what clients see as input schemas, and
their return annotations declare the output schemas of the structured content.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ToolAnnotations

from pplx_nb._errors import ValidationError
from pplx_nb._models import JobStatus
from pplx_nb.mcp._backend import Backend
from pplx_nb.mcp._descriptions import DESCRIPTIONS
from pplx_nb.mcp._progress import ProgressRelay
from pplx_nb.mcp._render import (
    answer_result,
    history_result,
    list_result,
    queued_result,
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

__all__ = ["TOOL_NAMES", "register_tools"]

AskOutput = Annotated[CallToolResult, AskResult]
HistoryOutput = Annotated[CallToolResult, HistoryResult]
ListOutput = Annotated[CallToolResult, ConversationList]

_ASK = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)
_READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
_HINTS = {
    "perplexity_search": _ASK,
    "perplexity_deep_research": _ASK,
    "perplexity_search_followup": _ASK,
    "perplexity_deep_research_followup": _ASK,
    "get_conversation_history": _READ,
    "list_conversations": _READ,
}
TOOL_NAMES = tuple(_HINTS)


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

    roots = backend.get().settings.file_roots
    if not roots:
        raise ValidationError(
            "File attachments are off on this MCP server. To allow them, set PPLX_NB_FILE_ROOTS "
            "in the server's environment to the folder(s) whose files may be attached (e.g. "
            "PPLX_NB_FILE_ROOTS=/home/me/projects/report), restart it, and call again; or "
            "paste the relevant text into the query."
        )
    return [str(path) for path in resolve_attachments(files, roots, working_directory=False)]


class Tools:
    """The tool functions; their signatures are the published input schemas."""

    def __init__(self, backend: Backend) -> None:
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
        """Search and answer on a NEW conversation."""
        answer = await self._backend.get().asearch(
            query,
            files=_attachable(files, self._backend),
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
        """Deep research on a NEW conversation: blocks with progress, or queues."""
        relay = ProgressRelay(ctx.report_progress)
        async with relay.running():
            result = await self._backend.get().adeep_research(
                query,
                files=_attachable(files, self._backend),
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
        """Continue a conversation with a quick search."""
        result = await self._backend.get().afollowup(
            conversationId,
            query,
            mode="search",
            files=_attachable(files, self._backend),
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
        """Continue a conversation with deep research."""
        relay = ProgressRelay(ctx.report_progress)
        async with relay.running():
            result = await self._backend.get().afollowup(
                conversationId,
                query,
                mode="research",
                files=_attachable(files, self._backend),
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
        """A conversation's turns, preceded by its job status if one ran."""
        from pplx_nb.jobs import format_status_message

        researcher = self._backend.get()
        conversation = researcher.history(conversationId, include_system=includeSystemPrompt)
        status = researcher.status(conversationId)
        status_text = format_status_message(status) if status is not None else None
        answering = researcher.queue.answering_since(conversationId)
        return history_result(
            conversation, self._path(conversationId), status, status_text, answering
        )

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
        summaries = self._backend.get().conversations(
            text=text, tool=tool, model=model, since=since, until=until, limit=limit
        )
        return list_result(summaries)


def register_tools(server: MCPServer[Any], backend: Backend) -> None:
    """Add the six tools, with their descriptions and read-only hints, to ``server``."""
    tools = Tools(backend)
    for name, hints in _HINTS.items():
        server.add_tool(
            getattr(tools, name),
            name=name,
            description=DESCRIPTIONS[name],
            annotations=hints,
            structured_output=True,
        )
