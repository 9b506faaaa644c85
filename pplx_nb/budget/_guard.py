"""The budget guard: caps and a ledger, asked before every paid request and told after it.

The API client holds one (``AsyncClient(budget=...)``; ``None``: no caps, no check at all) and
calls :meth:`BudgetGuard.reserve` with the request's worst case before sending it: over the
per-request cap, or over a day's or month's cap once added to what that period spent and
reserved, it raises :class:`~pplx_nb.BudgetExceeded` and nothing is sent. After the request,
the hold is settled to the reported cost, kept as spent at its reservation when the cost is
unknown, or released when provably nothing was sent.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from pplx_nb._budget_words import usd
from pplx_nb._caps import Caps, Period, from_micros, period_bounds, to_micros
from pplx_nb._errors import BudgetExceeded, PplxError
from pplx_nb._logging import get_logger
from pplx_nb.budget._estimate import CostEstimate
from pplx_nb.budget._ledger import History, Ledger

__all__ = ["BudgetGuard", "PeriodStanding", "refusal"]

logger = get_logger("pplx_nb.budget")

_WHEN = {"day": "today (UTC)", "month": "this month (UTC)"}
HISTORY_SECONDS = 60.0
"""How long a kind's history read from the ledger is reused: it only narrows estimates, and
reading it for every request would double the ledger's round trips."""


def utc_now() -> datetime:
    """The current time in UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class PeriodStanding:
    """Where one capped period stands, in USD: ``left`` is ``cap - spent - reserved`` (not
    below 0); ``resets_at`` is when the period starts again (UTC; ``None`` per request)."""

    period: Period
    cap: float
    spent: float
    reserved: float
    left: float
    resets_at: datetime | None


def refusal(
    period: Period, cap: float, spent: float, estimate: float, resets_at: datetime | None
) -> BudgetExceeded:
    """The BUDGET_EXCEEDED for a request that would reserve ``estimate`` over ``period``'s
    ``cap``, which had ``spent`` (and reserved) before it."""
    if period == "request":
        message = (
            f"This request could cost up to {usd(estimate)}, over the per-request cap of "
            f"{usd(cap)} (PPLX_NB_BUDGET); it was not sent. Pick a cheaper mode or effort "
            "(or a lower max_tokens), or raise the per-request cap in PPLX_NB_BUDGET."
        )
    else:
        when = f"{resets_at:%Y-%m-%d %H:%M} UTC" if resets_at else "the next period"
        message = (
            f"This request could cost up to {usd(estimate)}, and {_WHEN[period]} "
            f"{usd(spent)} of the {period}'s cap of {usd(cap)} is spent or reserved "
            f"(PPLX_NB_BUDGET), leaving {usd(max(cap - spent, 0.0))}; it was not sent. "
            f"Wait until the cap resets at {when}, raise PPLX_NB_BUDGET, or pick a cheaper "
            "mode or effort."
        )
    return BudgetExceeded(
        message, cap=cap, period=period, spent=spent, estimate=estimate, resets_at=resets_at
    )


class BudgetGuard:
    """Caps checked against one store's ledger (see the module).

    Blocking: the ledger's steps are file or Redis I/O; the API client runs them in a thread.

    Args:
        caps: the caps (``PPLX_NB_BUDGET``); at least one is set.
        ledger: the store's ledger.
        clock: the current UTC time (tests pass their own).
        monotonic: the clock by which a history read is reused (:data:`HISTORY_SECONDS`).
    """

    def __init__(
        self,
        caps: Caps,
        ledger: Ledger,
        *,
        clock: Callable[[], datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.caps = caps
        self.ledger = ledger
        self._clock = clock
        self._monotonic = monotonic
        self._histories: dict[str, tuple[float, History]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"BudgetGuard(caps={str(self.caps)!r}, ledger={self.ledger.where!r})"

    def reserve(self, estimate: CostEstimate, kind: str, hold: str | None = None) -> str:
        """Reserve ``estimate.high`` for a request of ``kind`` under ``hold`` (default: a new
        id) and return the hold's id; BudgetExceeded when a cap would be passed."""
        self._check_request_cap(estimate)
        hold = hold or uuid.uuid4().hex
        limits: dict[Period, int] = {
            p: to_micros(cap) for p, cap in self.caps.periods() if p != "request"
        }
        now = self._clock()
        refused = self.ledger.reserve(hold, to_micros(estimate.high), limits, now, kind)
        if refused is not None:
            cap = self.caps.cap(refused.period)
            assert cap is not None  # the ledger refuses only for a capped period
            resets_at = period_bounds(refused.period, now)[1]
            raise refusal(refused.period, cap, from_micros(refused.used), estimate.high, resets_at)
        return hold

    def check(self, estimate: CostEstimate) -> None:
        """BudgetExceeded when ``estimate.high`` would not fit now; reserves nothing (a
        request about to store its question asks first, so that a refusal leaves nothing)."""
        self._check_request_cap(estimate)
        if not (self.caps.day or self.caps.month):
            return
        now = self._clock()
        totals = self.ledger.totals(now)
        for period, cap in self.caps.periods():
            if period != "request":
                used = totals[period].used
                if used + to_micros(estimate.high) > to_micros(cap):
                    resets_at = period_bounds(period, now)[1]
                    raise refusal(period, cap, from_micros(used), estimate.high, resets_at)

    def _check_request_cap(self, estimate: CostEstimate) -> None:
        cap = self.caps.request
        if cap is not None and to_micros(estimate.high) > to_micros(cap):
            raise refusal("request", cap, 0.0, estimate.high, None)

    def settle(self, hold: str, cost: float | None) -> None:
        """Settle ``hold`` to ``cost`` (USD; ``None``: unknown, its reservation stays spent).

        Never raises: the request is paid for by now, and its answer must not be lost to a
        ledger that cannot be written (that is logged)."""
        amount = None if cost is None else to_micros(max(cost, 0.0))
        self._finish(hold, lambda: self.ledger.settle(hold, amount), "settle")

    def release(self, hold: str) -> None:
        """Release ``hold``: nothing was spent. Never raises (see :meth:`settle`)."""
        self._finish(hold, lambda: self.ledger.release(hold), "release")

    def _finish(self, hold: str, step: Callable[[], bool], what: str) -> None:
        try:
            step()
        except PplxError as exc:
            logger.error(
                "Could not %s budget hold %s in %s: %s", what, hold, self.ledger.where, exc
            )

    def history(self, kind: str) -> History:
        """The settled runs of ``kind`` in this store (read at most every
        :data:`HISTORY_SECONDS` per kind)."""
        now = self._monotonic()
        with self._lock:
            found = self._histories.get(kind)
        if found is not None and now - found[0] < HISTORY_SECONDS:
            return found[1]
        history = self.ledger.history(kind)
        with self._lock:
            self._histories[kind] = (now, history)
        return history

    def standing(self) -> list[PeriodStanding]:
        """Each capped period's cap, spent, reserved, left and reset, request first."""
        now = self._clock()
        totals = self.ledger.totals(now) if self.caps.day or self.caps.month else {}
        standings = []
        for period, cap in self.caps.periods():
            spent = reserved = 0.0
            if period != "request":
                spent = from_micros(totals[period].spent)
                reserved = from_micros(totals[period].reserved)
            left = max(round(cap - spent - reserved, 6), 0.0)
            resets = period_bounds(period, now)[1]
            standings.append(PeriodStanding(period, cap, spent, reserved, left, resets))
        return standings
