"""``python -m pplx_nb.mcp``: pplx_nb as an MCP server, on the official ``mcp`` SDK.

Tools: ``perplexity_search``, ``perplexity_deep_research``, ``perplexity_search_followup``,
``perplexity_deep_research_followup``, ``get_conversation_history``,
``get_conversation_histories``, ``await_conversation_histories``, ``list_conversations``,
``cancel_deep_research``, ``perplexity_web_search``; resource ``pplx://health``. Each tool is
a thin adapter over :class:`pplx_nb.Researcher`, so a conversation started in a notebook can be
continued here and vice versa. :func:`create_server` builds the server for embedding;
:func:`main` is the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pplx_nb.mcp.__main__ import main
    from pplx_nb.mcp.server import PplxMCPServer, create_server

__all__ = ["PplxMCPServer", "create_server", "main"]


def __getattr__(name: str) -> Any:
    if name == "main":
        from pplx_nb.mcp.__main__ import main

        return main
    if name in ("PplxMCPServer", "create_server"):
        from pplx_nb.mcp import server

        return getattr(server, name)
    raise AttributeError(f"module 'pplx_nb.mcp' has no attribute {name!r}")
