"""The history budget: per-model context windows, a cheap token estimate, and trimming to fit."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from pplx_nb._errors import ValidationError
from pplx_nb._models import Message

__all__ = [
    "CONTEXT_WINDOWS",
    "MESSAGE_OVERHEAD_TOKENS",
    "FittedHistory",
    "budget_tokens",
    "context_window",
    "estimate_tokens",
    "fit_history",
    "message_tokens",
]

CONTEXT_WINDOWS: dict[str, int] = {
    "sonar": 128_000,
    "sonar-pro": 200_000,
    "sonar-reasoning": 128_000,
    "sonar-reasoning-pro": 128_000,
    "sonar-deep-research": 128_000,
    "r1-1776": 128_000,
    "perplexity/sonar": 128_000,
    "fast": 128_000,
    "low": 200_000,
    "medium": 128_000,
    "high": 128_000,
    "xhigh": 128_000,
    "default": 128_000,
}
"""Context window sizes in tokens, by model name or Agent API preset; ``default`` for the rest."""

MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens counted per message on top of its content, for the role and framing."""


class FittedHistory(NamedTuple):
    """The messages to send, how many whole turns were dropped, and a note saying so, if any."""

    messages: list[Message]
    dropped_turns: int
    note: str | None


def estimate_tokens(text: str) -> int:
    """A cheap token estimate: one token per four characters, rounded up.

    English prose and code average close to four characters per token with the tokenisers
    Perplexity's models use; the estimate errs on the high side for short words, which is the
    safe side for a budget.
    """
    return math.ceil(len(text) / 4)


def message_tokens(message: Message) -> int:
    """The estimated cost of one message: its content plus :data:`MESSAGE_OVERHEAD_TOKENS`."""
    return estimate_tokens(message.content) + MESSAGE_OVERHEAD_TOKENS


def context_window(model: str) -> int:
    """The window of ``model`` (``perplexity/`` prefix ignored), else the ``default`` entry."""
    name = model.strip().lower()
    if name in CONTEXT_WINDOWS:
        return CONTEXT_WINDOWS[name]
    return CONTEXT_WINDOWS.get(name.removeprefix("perplexity/"), CONTEXT_WINDOWS["default"])


def _turns(messages: Sequence[Message]) -> list[list[Message]]:
    """Messages grouped into turns: each user message with the answers that follow it."""
    turns: list[list[Message]] = []
    for message in messages:
        if message.role == "user" or not turns:
            turns.append([message])
        else:
            turns[-1].append(message)
    return turns


def _note(dropped: int) -> str:
    noun = "turn was" if dropped == 1 else "turns were"
    return f"{dropped} earlier {noun} left out to fit the context window."


def budget_tokens(
    model: str, *, reserve_tokens: int | None = None, window: int | None = None
) -> int:
    """The tokens a request to ``model`` may use: its window minus a reserve for the answer.

    ``window`` overrides the table; ``reserve_tokens`` defaults to a fifth of the window.
    """
    size = window if window is not None else context_window(model)
    reserve = reserve_tokens if reserve_tokens is not None else size // 5
    if size <= 0 or reserve < 0 or reserve >= size:
        raise ValidationError(
            f"The context budget is empty (window {size}, reserve {reserve} tokens). "
            "Use a window larger than the reserve for the answer.",
            window=size,
            reserve_tokens=reserve,
        )
    return size - reserve


def fit_history(
    messages: Sequence[Message],
    model: str,
    *,
    reserve_tokens: int | None = None,
    window: int | None = None,
) -> FittedHistory:
    """Fit ``messages`` into ``model``'s window minus a reserve for the answer.

    Leading system messages and the newest turn (the question being asked) are always kept;
    older turns — a user message with its answers — are dropped whole, oldest first, until the
    estimate (:func:`message_tokens` summed) is at most the budget. ``window`` overrides the
    table; ``reserve_tokens`` defaults to a fifth of the window (:func:`budget_tokens`). When
    turns were dropped, ``note`` says how many; the caller puts it where the model sees it (e.g.
    the system prompt).
    """
    budget = budget_tokens(model, reserve_tokens=reserve_tokens, window=window)
    head = 0
    while head < len(messages) and messages[head].role == "system":
        head += 1
    system = list(messages[:head])
    turns = _turns(messages[head:])
    used = sum(message_tokens(m) for m in messages)
    dropped = 0
    while used > budget and dropped < len(turns) - 1:
        used -= sum(message_tokens(m) for m in turns[dropped])
        dropped += 1
    kept = [m for turn in turns[dropped:] for m in turn]
    return FittedHistory([*system, *kept], dropped, _note(dropped) if dropped else None)
