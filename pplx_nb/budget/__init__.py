"""Spend caps (``PPLX_NB_BUDGET``): the caps, the ledger, the estimate and the guard.

No money is spent past what the user allowed: every paid request reserves its worst case
(:class:`CostEstimate`'s ``high``) in its store's one ledger before it is sent, and settles to
what it cost after. ``backends.open_budget(settings)`` opens the guard beside the store;
without caps there is none, and no ledger is ever read or written.
"""

from pplx_nb._caps import BUDGET_EXAMPLE, PERIODS, Caps, Period, parse_caps
from pplx_nb.budget._estimate import CostEstimate, estimate_run, estimate_web_search
from pplx_nb.budget._guard import BudgetGuard, PeriodStanding, refusal
from pplx_nb.budget._ledger import (
    FileLedger,
    History,
    Ledger,
    MemoryLedger,
    Refusal,
    Totals,
)
from pplx_nb.budget._redis import RedisLedger

__all__ = [
    "BUDGET_EXAMPLE",
    "PERIODS",
    "BudgetGuard",
    "Caps",
    "CostEstimate",
    "FileLedger",
    "History",
    "Ledger",
    "MemoryLedger",
    "Period",
    "PeriodStanding",
    "RedisLedger",
    "Refusal",
    "Totals",
    "estimate_run",
    "estimate_web_search",
    "parse_caps",
    "refusal",
]
