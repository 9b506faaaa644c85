"""The knobs of one simulator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CITATION_STYLES", "CitationStyle", "SimOptions"]

CitationStyle = Literal["numbered", "web", "link"]
CITATION_STYLES: tuple[CitationStyle, ...] = ("numbered", "web", "link")


@dataclass(frozen=True, slots=True)
class SimOptions:
    """Knobs of one simulator.

    ``sonar`` serves the retired Sonar chat completions (an OpenAI-compatible server for
    testing); without it they answer 403 as the live API does. ``citations`` is how Agent
    answers mark sources: ``numbered`` (``[1]``, the result with id 1), ``web`` (``[web:0]``,
    the result at position 0) or ``link`` (markdown links). ``cancel_seconds`` is how long a
    cancelled background run stays ``cancelling`` before it reports ``cancelled``.
    """

    latency_ms: int = 300
    deep_research_seconds: float = 5.0
    api_key: str | None = None
    sonar: bool = False
    citations: CitationStyle = "numbered"
    cancel_seconds: float = 0.2
