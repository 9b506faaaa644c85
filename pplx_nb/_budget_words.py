"""The facts of a spend cap in words every surface shares: amounts, where a cap stands, and a
refusal's figures and reset. Each surface adds what to do next in its own words (a magic's
flags and ``%env`` in a notebook, the tools and the server's environment over MCP)."""

from __future__ import annotations

from datetime import UTC, datetime

from pplx_nb._errors import BudgetExceeded

__all__ = ["estimate_words", "refusal_figures", "resets_words", "usd"]

_WHOSE = {"day": "today's (UTC)", "month": "this month's (UTC)"}


def usd(amount: float) -> str:
    """An amount in USD: cents from a dollar up, four decimals below (answers cost fractions
    of a cent)."""
    return f"${amount:,.2f}" if amount >= 1 or amount == 0 else f"${amount:.4f}"


def resets_words(resets_at: datetime, now: datetime | None = None) -> str:
    """``2026-11-29 00:00 UTC (in 5 h 12 min)``."""
    left = max(int((resets_at - (now or datetime.now(UTC))).total_seconds()), 0)
    days, rest = divmod(left, 86_400)
    hours, minutes = divmod(rest // 60, 60)
    span = f"{days} d {hours} h" if days else f"{hours} h {minutes} min" if hours else None
    return f"{resets_at:%Y-%m-%d %H:%M} UTC (in {span or f'{max(minutes, 1)} min'})"


def refusal_figures(error: BudgetExceeded, now: datetime | None = None) -> str | None:
    """What was refused, in figures: the request's worst case against the cap it would pass,
    what the period has spent and when it resets. ``None`` for a refusal rebuilt from a stored
    ``{code, message}`` (a job's status), whose figures are in its message only."""
    if error.cap <= 0 and error.estimate <= 0:
        return None
    if error.period not in _WHOSE:
        return (
            f"it could cost up to {usd(error.estimate)}, over the per-request cap of "
            f"{usd(error.cap)} (PPLX_NB_BUDGET). Nothing was sent."
        )
    said = (
        f"it could cost up to {usd(error.estimate)}, and {usd(error.spent)} of "
        f"{_WHOSE[error.period]} cap of {usd(error.cap)} is spent or reserved, leaving "
        f"{usd(max(error.cap - error.spent, 0.0))} (PPLX_NB_BUDGET). Nothing was sent."
    )
    if error.resets_at is not None:
        said += f" The {error.period}'s cap resets at {resets_words(error.resets_at, now)}."
    return said


def estimate_words(expected: float, high: float) -> str:
    """``about $0.0400, at most $1.2000``: what to expect of a run, and what a cap reserves."""
    return f"about {usd(expected)}, at most {usd(high)}"
