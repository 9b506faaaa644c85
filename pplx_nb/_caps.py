"""Spend caps (``PPLX_NB_BUDGET``): what they say, and the UTC periods they apply to. Pure.

``"2/request,10/day,100/month"`` caps one request at $2, each UTC day at $10 and each UTC month
at $100; any of the three may be left out. Amounts are USD; money is counted in whole
micro-dollars (:func:`to_micros`), the precision the API reports costs in, so totals add up
exactly across processes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from pplx_nb._errors import ValidationError

__all__ = [
    "BUDGET_EXAMPLE",
    "PERIODS",
    "Caps",
    "Period",
    "from_micros",
    "parse_caps",
    "period_bounds",
    "to_micros",
]

Period = Literal["request", "day", "month"]
PERIODS: tuple[Period, ...] = ("request", "day", "month")
BUDGET_EXAMPLE = "2/request,10/day,100/month"
_PART = re.compile(r"^\$?\s*(\d+(?:\.\d*)?|\.\d+)\s*/\s*(request|day|month)$")


def to_micros(usd: float) -> int:
    """``usd`` in whole micro-dollars, rounded up: a reservation never falls short."""
    return math.ceil(round(usd * 1e6, 3))


def from_micros(micros: int) -> float:
    """Micro-dollars back in USD."""
    return micros / 1e6


@dataclass(frozen=True, slots=True)
class Caps:
    """Spend caps in USD; ``None``: that period is not capped."""

    request: float | None = None
    day: float | None = None
    month: float | None = None

    def __bool__(self) -> bool:
        return any(cap is not None for cap in (self.request, self.day, self.month))

    def cap(self, period: Period) -> float | None:
        """The cap of ``period``."""
        cap: float | None = getattr(self, period)
        return cap

    def periods(self) -> list[tuple[Period, float]]:
        """The capped periods with their caps, request first."""
        return [(p, cap) for p in PERIODS if (cap := self.cap(p)) is not None]

    def __str__(self) -> str:
        return ",".join(f"{cap:g}/{period}" for period, cap in self.periods())


def parse_caps(text: str | None) -> Caps:
    """``PPLX_NB_BUDGET`` as :class:`Caps` (empty or ``None``: no cap at all).

    Raises ValidationError, naming the variable and an example, for anything else: an unknown
    period, an amount that is not a positive number, a period given twice.
    """
    if text is None or not text.strip():
        return Caps()
    found: dict[str, float] = {}
    for part in text.lower().split(","):
        match = _PART.match(part.strip())
        amount = float(match.group(1)) if match else 0.0
        if match is None or not 0 < amount < 1e9 or match.group(2) in found:
            raise _malformed(text, part.strip())
        found[match.group(2)] = amount
    return Caps(**found)


def _malformed(text: str, part: str) -> ValidationError:
    return ValidationError(
        f"PPLX_NB_BUDGET {text!r} is not a list of spend caps ({part!r} is not AMOUNT/PERIOD "
        "with a positive amount in USD, each period once). Write it like "
        f"{BUDGET_EXAMPLE!r}: USD per request, per UTC day, per UTC month, any of the three; "
        "unset it for no cap."
    )


def period_bounds(period: Period, now: datetime) -> tuple[datetime, datetime | None]:
    """When ``period`` began and when it resets (UTC), for the one containing ``now``;
    a request's period has no reset (``None``) and begins at ``now``."""
    now = now.astimezone(UTC)
    if period == "request":
        return now, None
    if period == "day":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + timedelta(days=1)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (start + timedelta(days=32)).replace(day=1)
    return start, following
