"""What every endpoint shares: the corpus, answer caches, pacing, kept runs, billing counters.

Transport concerns (routing, auth, injected faults, sending) live in :mod:`pplx_nb.sim._app`;
handlers get a parsed :class:`Request` and the fault, if any, that still concerns them
(``agent_failed``, ``odd``). Each protocol's handlers extend :class:`Handlers`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from pplx_nb.sim._agent import AgentRequest
from pplx_nb.sim._answers import Answer, Filters, compose
from pplx_nb.sim._corpus import Corpus
from pplx_nb.sim._http import dumps
from pplx_nb.sim._options import SimOptions
from pplx_nb.sim._runs import Run, frame_times
from pplx_nb.sim._sonar import ChatRequest

__all__ = ["STREAM_PIECES", "Handlers", "remember"]

_CACHE_SIZE = 4096
_MEMO_SIZE = 256
"""How many answers and serialised bodies are kept for repeated requests, the least recently used
forgotten first: enough for benchmarks and re-run notebooks, and a bound on what a long-running
offline MCP server holds (each is a few kilobytes, and its questions rarely repeat)."""
# Requests longer than this are answered but not cached: the caches keep each request as a key,
# so a few thousand huge prompts would otherwise pin gigabytes.
_CACHEABLE_CHARS = 16_384
_ID_SLOT = "SIMID0SLOT"
_TIME_SLOT = 4102444800
STREAM_PIECES = 16


T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def _recall(memo: OrderedDict[K, T], key: K) -> T | None:
    """The value kept for ``key`` (now the most recently used), or None."""
    value = memo.get(key)
    if value is not None:
        memo.move_to_end(key)
    return value


def _memorise(memo: OrderedDict[K, T], key: K, value: T) -> None:
    """Keep ``value`` for ``key``; past _MEMO_SIZE the least recently used is forgotten."""
    memo[key] = value
    if len(memo) > _MEMO_SIZE:
        memo.popitem(last=False)


def remember(runs: dict[str, T], ident: str, entry: T) -> None:
    """Keep a run by id; past _CACHE_SIZE runs the oldest is forgotten, as if it expired."""
    while len(runs) >= _CACHE_SIZE:
        del runs[next(iter(runs))]
    runs[ident] = entry


class Handlers:
    """State the handlers of both protocols share over one corpus.

    ``sleep(seconds)`` waits and returns True when the wait was cut short (server stopping).
    """

    def __init__(
        self, corpus: Corpus, options: SimOptions, sleep: Callable[[float], Awaitable[bool]]
    ) -> None:
        self.corpus = corpus
        self.options = options
        self._sleep = sleep
        self.generations = 0
        self.background_runs = 0
        self.cancels = 0
        self.searches = 0
        self.billed_usd = 0.0
        self.runs: dict[str, tuple[Run, AgentRequest]] = {}
        self.async_runs: dict[str, tuple[Run, ChatRequest]] = {}
        self._answers: OrderedDict[tuple[Any, ...], Answer] = OrderedDict()
        self._bodies: OrderedDict[Hashable, bytes] = OrderedDict()

    def reset_counters(self) -> None:
        """Forget how many answers, runs, cancels and searches there were."""
        self.generations = 0
        self.background_runs = 0
        self.cancels = 0
        self.searches = 0
        self.billed_usd = 0.0

    def counters(self) -> dict[str, int | float]:
        """What would be billed: answers generated, background runs, cancels, searches, and
        the USD billed (the costs reported for them; a cancelled run's given back)."""
        return {
            "generations": self.generations,
            "background_runs": self.background_runs,
            "cancels": self.cancels,
            "searches": self.searches,
            "billed_usd": round(self.billed_usd, 6),
        }

    # -- answers ------------------------------------------------------------------------------

    def _answer(
        self,
        query: str,
        tier: str,
        filters: Filters,
        *,
        related: bool = False,
        related_in_text: bool = False,
        max_tokens: int | None = None,
    ) -> Answer:
        key = (query, tier, filters, related, related_in_text, max_tokens)
        answer = _recall(self._answers, key)
        if answer is None:
            answer = compose(
                self.corpus,
                query,
                model=tier,
                filters=filters,
                related=related,
                related_in_text=related_in_text,
                max_tokens=max_tokens,
            )
            if len(query) <= _CACHEABLE_CHARS:
                _memorise(self._answers, key, answer)
        return answer

    def _template(self, request: Hashable, prompt: str, build: Callable[[str, int], Any]) -> bytes:
        """The serialised answer to ``request`` with placeholders for its id and timestamp.

        Requests repeat (benchmarks, retries, notebooks re-run), so the JSON is built once and
        only the id and time are spliced in afterwards.
        """
        body = _recall(self._bodies, request)
        if body is None:
            body = dumps(build(_ID_SLOT, _TIME_SLOT))
            if len(prompt) <= _CACHEABLE_CHARS:
                _memorise(self._bodies, request, body)
        return body

    @staticmethod
    def _fill(body: bytes, ident: str, created: int) -> bytes:
        return body.replace(_ID_SLOT.encode(), ident.encode()).replace(
            str(_TIME_SLOT).encode(), str(created).encode()
        )

    def _pace(self, frames: int, deep: bool, research: int = 0) -> list[float]:
        """Delays before each frame: deep research spreads over its duration, its first
        ``research`` frames (reasoning) before the output (:func:`frame_times`)."""
        if frames == 0:
            return []
        if deep:
            due = frame_times(frames, research, self.options.deep_research_seconds)
            return [later - earlier for earlier, later in zip([0.0, *due], due, strict=False)]
        latency = self.options.latency_ms / 1000
        step = min(0.05, latency / frames)
        return [latency] + [step] * (frames - 1)

    async def _delay(self, deep: bool) -> bool:
        seconds = self.options.deep_research_seconds if deep else self.options.latency_ms / 1000
        return seconds > 0 and await self._sleep(seconds)
