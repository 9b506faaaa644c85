"""What the MCP server tests share: the published tool names and a server process's environment."""

from __future__ import annotations

from pathlib import Path

__all__ = ["ROOT", "TOOLS", "UNKNOWN_ID", "server_env"]

ROOT = Path(__file__).resolve().parent.parent.parent
TOOLS = {
    "perplexity_search",
    "perplexity_deep_research",
    "perplexity_search_followup",
    "perplexity_deep_research_followup",
    "get_conversation_history",
    "get_conversation_histories",
    "await_conversation_histories",
    "list_conversations",
}
UNKNOWN_ID = "20200101-1577836800000"
"""A well-formed conversation ID that no test creates."""


def server_env(logs_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of ``python -m pplx_nb.mcp`` on the offline simulator, storing in
    ``logs_dir``; ``extra`` adds or overrides variables."""
    env = {
        "PPLX_NB_OFFLINE": "1",
        "PPLX_NB_SIM_LATENCY_MS": "0",
        "PPLX_NB_SIM_DEEP_RESEARCH_SECONDS": "0.5",
        "CONVERSATION_LOGS_DIR": str(logs_dir),
        "PYTHONPATH": str(ROOT),
        "LOG_LEVEL": "info",
    }
    env.update(extra)
    return env
