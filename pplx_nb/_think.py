"""Reasoning inside an answer: the leading ``<think>...</think>`` block of reasoning models.

The API client moves it out of the answer text as it arrives; answers another program stored
with the block still inside (the TypeScript perplexity-mcp-server keeps the raw content) are
split the same way when they are read, so the reasoning is never shown, exported or sent back
as if it were the answer.
"""

from __future__ import annotations

__all__ = ["THINK_CLOSE", "THINK_OPEN", "split_think"]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def split_think(content: str) -> tuple[str, str | None]:
    """``(text, thinking)``: a leading ``<think>`` block moved out of ``content``.

    An unclosed block is all thinking (a cut-off answer); content without one is returned as it
    is, with ``None``.
    """
    stripped = content.lstrip()
    if not stripped.startswith(THINK_OPEN):
        return content, None
    end = stripped.find(THINK_CLOSE)
    if end < 0:
        return "", stripped[len(THINK_OPEN) :].strip()
    thinking = stripped[len(THINK_OPEN) : end].strip()
    return stripped[end + len(THINK_CLOSE) :].lstrip(), thinking
