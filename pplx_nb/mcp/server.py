"""The MCP server: the tools, a health resource and the stored conversations as resources, thin
adapters over :class:`Researcher`.

Each tool parses its arguments (the input schema does the checking), calls the Researcher, and
renders the result as text with the seed's conversation header plus structured content. Errors
come back as ``isError`` results whose text starts with the error code, without structured
content (so strict clients, which validate it against the output schema, show them); an unknown
tool is a JSON-RPC error. Arguments are checked as the published schema says: no argument it
does not name (``additionalProperties: false``) and no silent conversion (``"yes"`` is not
``true``, ``"5"`` is not ``5``); ``files`` is published only when PPLX_NB_FILE_ROOTS allows
attachments.

Start-up stays close to a bare SDK server: the tools (whose schemas take pydantic work to build)
are registered on the first ``tools/list`` or ``tools/call``, and the Researcher on first use, so
``initialize`` is answered before either exists.

    server = create_server(Settings.from_env())
    server.run("stdio")
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import anyio
from mcp.server.lowlevel import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult
from pydantic import ConfigDict
from pydantic import ValidationError as PydanticValidationError

from pplx_nb import __version__
from pplx_nb._config import Settings
from pplx_nb._errors import BudgetExceeded, PplxError, ValidationError
from pplx_nb._option_names import worded
from pplx_nb.mcp._backend import Backend
from pplx_nb.mcp._resources import (
    announce_new_conversation,
    conversation_resources,
    register_conversation_resources,
)

if TYPE_CHECKING:
    from mcp_types import Resource, Tool

    from pplx_nb.research import Researcher

__all__ = ["SERVER_NAME", "PplxMCPServer", "create_server"]

logger = logging.getLogger("pplx_nb.mcp")

SERVER_NAME = "pplx_nb"
INSTRUCTIONS = (
    "Perplexity search and deep research with conversations stored on disk. Start with "
    "perplexity_search (quick) or perplexity_deep_research (exhaustive); both return a "
    "conversationId. Continue with perplexity_search_followup or "
    "perplexity_deep_research_followup (either mode, whatever started the conversation); read a "
    "conversation, or collect a queued research report, with get_conversation_history; "
    "several at once with get_conversation_histories, or wait for queued research to finish "
    "with await_conversation_histories. Find earlier conversations with list_conversations. "
    "Stop a queued or running research with cancel_deep_research. For ranked web results "
    "without an answer (URLs, recent news, sources), use perplexity_web_search."
)

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class PplxMCPServer(MCPServer[Any]):
    """An MCPServer whose tools load on first use and whose failures are coded ``isError`` results.

    Args:
        backend: holds the Researcher the tools call.
        **kwargs: passed to :class:`MCPServer`.
    """

    def __init__(self, backend: Backend, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._backend = backend
        self._tools_loaded = False
        # The SDK builds the capabilities from NotificationOptions given to
        # create_initialization_options, which its HTTP transport calls without any: bind ours,
        # so every transport declares that the resource list changes (a tool adds a
        # conversation).
        lowlevel = self._lowlevel_server
        lowlevel.create_initialization_options = functools.partial(  # type: ignore[method-assign]
            lowlevel.create_initialization_options, NotificationOptions(resources_changed=True)
        )

    def load_tools(self) -> None:
        """Register the tools now (otherwise done on the first ``tools/list`` or call)."""
        if not self._tools_loaded:
            from pplx_nb.mcp._tools import TOOL_NAMES, register_tools

            register_tools(self, self._backend)
            for name in TOOL_NAMES:
                self._check_as_published(name)
            self._tools_loaded = True

    def _check_as_published(self, name: str) -> None:
        """Make a tool's arguments checked exactly as its input schema says, and say so.

        The SDK validates in pydantic's lax mode after re-parsing strings as JSON, so ``"5"``
        became ``5`` and ``"yes"`` became ``true`` for an integer or boolean the schema declares.
        """
        tool = self._tool_manager.get_tool(name)
        assert tool is not None
        loose = tool.fn_metadata.arg_model
        strict = type(
            loose.__name__,
            (loose,),
            {"model_config": ConfigDict(**loose.model_config, strict=True)},
        )
        tool.fn_metadata = _AsSent(
            arg_model=strict,
            output_schema=tool.fn_metadata.output_schema,
            output_model=tool.fn_metadata.output_model,
            wrap_output=tool.fn_metadata.wrap_output,
        )
        tool.parameters["additionalProperties"] = False
        if not self._backend.attachments:
            tool.parameters.get("properties", {}).pop("files", None)

    async def run_stdio_async(self) -> None:
        """Serve over stdin and stdout, as the SDK does, but reply to every request: one the
        transport cannot parse (a lone surrogate in a string) is answered, not dropped
        (:mod:`pplx_nb.mcp._unparsed`)."""
        from mcp.server.stdio import stdio_server

        from pplx_nb.mcp._unparsed import AnsweringReader

        lowlevel = self._lowlevel_server
        async with stdio_server() as (read_stream, write_stream):
            await lowlevel.run(
                AnsweringReader(read_stream, write_stream),
                write_stream,
                lowlevel.create_initialization_options(),
            )

    async def list_tools(self) -> list[Tool]:
        """The tools with their input and output schemas."""
        self.load_tools()
        return await super().list_tools()

    async def list_resources(self) -> list[Resource]:
        """The health resource, then the newest stored conversations."""
        return [*await super().list_resources(), *await conversation_resources(self._backend)]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        """Run a tool; a PplxError, rejected arguments or a crash become an ``isError`` result.

        Raises:
            MCPError: ``-32602`` when there is no tool ``name`` (a protocol error, as the spec
                says; the other failures are results the model can read and correct).
        """
        self.load_tools()
        if self._tool_input_schema(name) is None:
            from pplx_nb.mcp._tools import TOOL_NAMES

            raise MCPError(
                INVALID_PARAMS,
                f"Unknown tool: {name}. The tools are: {', '.join(TOOL_NAMES)}.",
            )
        refused = self._refuse_unknown(name, arguments)
        if refused is not None:
            return _error_result(name, refused)
        try:
            result = await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = _root_cause(exc)
            if cause is None:
                raise
            return _error_result(name, cause)
        if context is not None and _adds_conversation(result, arguments):
            await announce_new_conversation(context)
        return result

    async def get_prompt(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        context: Context[Any, Any] | None = None,
    ) -> Any:
        """The prompt ``name``, rendered with ``arguments``.

        Raises:
            MCPError: ``-32602`` when there is no prompt ``name`` (the SDK answers an unknown
                prompt with code ``0``, which no client can tell from a crash).
        """
        if self._prompt_manager.get_prompt(name) is None:
            prompts = [prompt.name for prompt in await self.list_prompts()]
            listed = f"The prompts are: {', '.join(prompts)}." if prompts else "It has no prompts."
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {name}. {listed}")
        return await super().get_prompt(name, arguments, context)

    def _refuse_unknown(self, name: str, arguments: dict[str, Any]) -> ValidationError | None:
        """Arguments the tool's schema does not name, as an error.

        The SDK would drop unknown arguments silently: a ``conversationId`` passed to
        ``perplexity_search`` would start a new conversation instead of continuing one.
        """
        from pplx_nb.mcp._tools import ATTACHMENTS_OFF

        schema = self._tool_input_schema(name) or {}
        accepted = list(schema.get("properties", {}))
        unknown = sorted(set(arguments) - set(accepted))
        if not unknown:
            return None
        if unknown == ["files"] and not self._backend.attachments:
            tool = self._tool_manager.get_tool(name)
            if tool is not None and "files" in tool.fn_metadata.arg_model.model_fields:
                return ValidationError(ATTACHMENTS_OFF, tool=name)
        return ValidationError(
            f"`{name}` does not take {', '.join(unknown)}. Its arguments are: "
            f"{', '.join(accepted)}. Remove the others and call again.",
            tool=name,
        )


class _AsSent(FuncMetadata):
    """Tool metadata that validates the arguments as the client sent them (already JSON)."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        """The arguments unchanged: a string stays a string, whatever it looks like."""
        return dict(data)


def _adds_conversation(result: object, arguments: dict[str, Any]) -> bool:
    """Whether ``result`` names a conversation that the call created (not the one it was given)."""
    if not isinstance(result, CallToolResult) or result.is_error:
        return False
    created = (result.structured_content or {}).get("conversationId")
    return created is not None and created != arguments.get("conversationId")


def _root_cause(exc: BaseException) -> BaseException | None:
    """The exception a tool raised, unwrapped from the SDK's ToolError and task-group groups."""
    cause = exc.__cause__
    while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
        cause = cause.exceptions[0]
    return cause


def _error_result(name: str, cause: BaseException) -> CallToolResult:
    from pplx_nb.mcp._render import budget_refusal, error_result, validation_message

    if isinstance(cause, BudgetExceeded):
        logger.info("Tool %s refused by PPLX_NB_BUDGET (%s cap)", name, cause.period)
        return error_result(budget_refusal(name, cause))
    if isinstance(cause, PplxError):
        logger.info("Tool %s failed: %s", name, cause.code)
        return error_result(_in_tool_words(cause))
    if isinstance(cause, PydanticValidationError):
        logger.info("Tool %s rejected its arguments", name)
        return error_result(ValidationError(validation_message(name, cause)))
    logger.error("Tool %s crashed", name, exc_info=cause)
    return error_result(
        PplxError(
            f"`{name}` failed unexpectedly ({type(cause).__name__}). The server log (stderr) "
            "has the details; retry, and report it if it happens again."
        )
    )


def _in_tool_words(error: PplxError) -> PplxError:
    """``error`` naming the options it is about as the tools name them (``showThinking``)."""
    message = worded(error, "mcp")
    if message == error.message:
        return error
    return type(error)(message, **error.details)


def create_server(
    settings: Settings | None = None, *, researcher: Researcher | None = None
) -> PplxMCPServer:
    """The MCP server over ``researcher`` (default: one built from ``settings`` on first use).

    In async mode (PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH) deep research is queued and the server
    runs the background worker from start-up, so jobs left by an earlier run are picked up too.
    """
    settings = settings or (researcher.settings if researcher else Settings.from_env())
    backend = Backend(settings, researcher)

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

    # The SDK hands its level to logging.basicConfig, i.e. the root logger: DEBUG there turns on
    # every library's debug output (httpcore dumps response headers). pplx_nb's own loggers
    # follow LOG_LEVEL through configure_logging; the rest stays at WARNING at most.
    level = settings.log_level.upper()
    sdk_level: LogLevel = level if level in ("ERROR", "CRITICAL") else "WARNING"  # type: ignore[assignment]
    server = PplxMCPServer(
        backend,
        name=SERVER_NAME,
        title="Perplexity research (pplx_nb)",
        instructions=INSTRUCTIONS,
        version=__version__,
        lifespan=lifespan,
        log_level=sdk_level,
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

    register_conversation_resources(server, backend)
    return server
