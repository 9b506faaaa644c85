"""Follow-up reformulation by a cheap model, with the offline heuristic as its fallback.

With a real API, :func:`areformulate` asks ``sonar`` to rewrite the last question as a standalone
search query; any failure, timeout, or an answer instead of a query falls back to
:func:`~pplx_nb.context._followup.reformulate`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any, Protocol

from pplx_nb._logging import get_logger
from pplx_nb._markdown import CITATION
from pplx_nb._models import Answer, Message
from pplx_nb.context._followup import reformulate

__all__ = ["REFORMULATION_MODEL", "areformulate"]

logger = get_logger("pplx_nb.context")

REFORMULATION_MODEL = "perplexity/sonar"
"""The cheap model asked to rewrite follow-ups when a real API is in use."""

_MODEL_DEADLINE_MS = 5_000
_MAX_MODEL_OUTPUT_CHARS = 300


class _Asker(Protocol):
    """What :func:`areformulate` needs from a client: ``AsyncClient.ask``."""

    async def ask(self, request: Any) -> Answer: ...


_PROMPT = (
    "Rewrite the user's last question as one standalone search query. Replace pronouns and "
    "vague references with the explicit names they refer to in the conversation. Keep the "
    "user's intent and wording; do not answer it. Reply with the query only, on one line."
)


def _model_messages(query: str, history: Sequence[Message]) -> list[dict[str, str]]:
    lines = []
    for message in history[-6:]:
        if message.role == "system":
            continue
        content = " ".join(message.answer_text.split())[:500]
        lines.append(f"{message.role}: {content}")
        if message.role == "assistant" and message.sources:
            titles = ", ".join(s.title or s.url for s in message.sources[:3])
            lines.append(f"(sources: {titles})")
    transcript = "\n".join(lines)
    return [
        {"role": "system", "content": _PROMPT},
        {"role": "user", "content": f"Conversation:\n{transcript}\n\nLast question: {query}"},
    ]


def _clean_model_output(text: str, query: str) -> str | None:
    """The model's one-line query, or ``None`` when it answered instead (lines, citations)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) != 1 or CITATION.search(lines[0]):
        return None
    line = lines[0].strip("\"'`*").strip()
    line = re.sub(r"^(?:standalone\s+)?(?:search\s+)?query:\s*", "", line, flags=re.IGNORECASE)
    if not line or len(line) > max(_MAX_MODEL_OUTPUT_CHARS, 3 * len(query)):
        return None
    return line


async def areformulate(
    query: str, history: Sequence[Message], client: _Asker | None, *, use_model: bool
) -> str:
    """Reformulate ``query``, asking a cheap model when ``use_model`` (a real API) is set.

    The model (``perplexity/sonar``, at most 60 output tokens, temperature 0) gets a strict one-line
    prompt with the recent transcript, and at most 5 s in all, retries included: the heuristic is a
    better answer than a search held up by a struggling API. Any error or timeout, an empty or
    overlong answer, or one that answers the question (several lines, citations) instead of
    rewriting it falls back to :func:`reformulate`, as does ``use_model=False`` (offline /
    simulator) or a missing client.
    """
    if not use_model or client is None:
        return reformulate(query, history)
    try:
        from pplx_nb.api import Request

        request = Request(
            messages=_model_messages(query, history),
            model=REFORMULATION_MODEL,
            max_tokens=60,
            temperature=0.0,
            disable_search=True,
            timeout_ms=_MODEL_DEADLINE_MS,
        )
        answer = await asyncio.wait_for(client.ask(request), _MODEL_DEADLINE_MS / 1000)
    except Exception as exc:  # any failure means: use the heuristic
        reason = str(exc) or f"no answer within {_MODEL_DEADLINE_MS / 1000:g} s"
        logger.warning("query reformulation by model failed (%s); using the heuristic", reason)
        return reformulate(query, history)
    cleaned = _clean_model_output(answer.text, query)
    if cleaned is None:
        logger.info("query reformulation by model gave no usable query; using the heuristic")
        return reformulate(query, history)
    return cleaned
