"""Stored conversations as MCP resources: ``pplx://conversations/{id}``, listed and completed.

Reading one gives its Markdown transcript (the turns as stored, without the system prompt), so a
client can attach a conversation to a chat or open it from a result's ``resource_link``.
``resources/list`` names the newest conversations; ``completion/complete`` suggests conversation
IDs for the template's ``{id}`` and for any prompt argument called ``conversationId``; and the
session that added a conversation hears ``notifications/resources/list_changed``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    Completion,
    CompletionArgument,
    CompletionContext,
    PromptReference,
    ResourceTemplateReference,
)
from mcp_types import Resource as MCPResource
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pplx_nb._errors import PplxError
from pplx_nb.mcp._backend import Backend

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context, MCPServer

    from pplx_nb._models import ConversationSummary

__all__ = [
    "CONVERSATION_URI",
    "LISTED_CONVERSATIONS",
    "announce_new_conversation",
    "conversation_resources",
    "register_conversation_resources",
]

logger = logging.getLogger("pplx_nb.mcp")

CONVERSATION_URI = "pplx://conversations/{id}"
"""The URI template of a stored conversation (its Markdown transcript)."""

LISTED_CONVERSATIONS = 100
"""How many conversations ``resources/list`` names (the newest; the template reads any)."""
MAX_COMPLETIONS = 100
"""The spec's cap on the values of one completion."""
_ID_ARGUMENTS = ("id", "conversationId")


def _resource(summary: ConversationSummary) -> MCPResource:
    query = " ".join((summary.first_query or "").split())
    title = query if len(query) <= 80 else query[:79] + "…"
    return MCPResource(
        uri=CONVERSATION_URI.format(id=summary.conversation_id),
        name=summary.conversation_id,
        title=title or f"Conversation {summary.conversation_id}",
        description=f"{summary.message_count} messages, updated {summary.updated_at}",
        mime_type="text/markdown",
    )


async def conversation_resources(backend: Backend) -> list[MCPResource]:
    """The newest stored conversations as resources."""
    summaries = await backend.read(
        lambda researcher: researcher.conversations(limit=LISTED_CONVERSATIONS)
    )
    return [_resource(summary) for summary in summaries]


async def announce_new_conversation(context: Context[Any, Any]) -> None:
    """Tell the client that the resource list changed: a tool call added a conversation.

    A client on a 2026-07-28 session hears it on its ``subscriptions/listen`` stream; an earlier
    one as a notification on its session. The answer is paid for and stored: failing to say so
    (the client went away) must not turn it into an error.
    """
    try:
        await context.notify_resources_changed()
        if context.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            await context.session.send_resource_list_changed()
    except Exception:  # the result still goes back; only the notice is lost
        logger.info("Could not send resources/list_changed", exc_info=True)


def register_conversation_resources(server: MCPServer[Any], backend: Backend) -> None:
    """Add the ``pplx://conversations/{id}`` template and the completion of conversation IDs."""

    @server.resource(
        CONVERSATION_URI,
        name="conversation",
        title="A stored conversation",
        description=(
            "A conversation's turns as Markdown, with each answer's sources. The ID is the "
            "conversationId the search and research tools return (list_conversations finds "
            "older ones)."
        ),
        mime_type="text/markdown",
    )
    async def conversation(id: str) -> str:
        # export imports the store's models: loaded on the first read, not at start-up.
        from pplx_nb.export import to_markdown

        try:
            loaded = await backend.read(lambda researcher: researcher.history(id))
        except PplxError as exc:
            raise MCPError(
                INVALID_PARAMS, f"{exc.code}: {exc.message}", data={"code": exc.code}
            ) from None
        return to_markdown(loaded)

    async def complete(
        ref: PromptReference | ResourceTemplateReference,
        argument: CompletionArgument,
        context: CompletionContext | None,
    ) -> Completion | None:
        if argument.name not in _ID_ARGUMENTS:
            return None
        if isinstance(ref, ResourceTemplateReference) and ref.uri != CONVERSATION_URI:
            return None
        return await _complete_id(backend, argument.value)

    server.completion()(complete)  # type: ignore[no-untyped-call]  # the SDK's is untyped


async def _complete_id(backend: Backend, prefix: str) -> Completion:
    """The stored conversation IDs that start with ``prefix``, newest first (from the store's
    listing of IDs alone: a client asks again at each keystroke)."""
    stored = await backend.read(lambda researcher: researcher.store.ids())
    ids = [cid for cid in stored if cid.startswith(prefix)]
    return Completion(
        values=ids[:MAX_COMPLETIONS], total=len(ids), has_more=len(ids) > MAX_COMPLETIONS
    )
