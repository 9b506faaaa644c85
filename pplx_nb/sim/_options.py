"""The knobs of one simulator."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SimOptions"]


@dataclass(frozen=True, slots=True)
class SimOptions:
    """Knobs of one simulator: added latency, deep-research duration, expected key."""

    latency_ms: int = 300
    deep_research_seconds: float = 5.0
    api_key: str | None = None
