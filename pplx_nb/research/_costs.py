"""What the stored answers cost, as a DataFrame: one row per paid turn, or totals per day, model
or mode.

The store is the single source of truth: every turn is read through
:func:`pplx_nb.export.to_dataframe`, as any export is, so a cost is counted here exactly when it
is stored (by any kernel, MCP server or worker on the same store).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from itertools import product
from typing import TYPE_CHECKING, Literal, get_args

from pplx_nb._extras import require
from pplx_nb._option_names import option_error
from pplx_nb.research._turns import Mode, tool_for
from pplx_nb.research._web import WEB_SEARCH_TOOL

if TYPE_CHECKING:
    import pandas as pd

    from pplx_nb.store import ConversationStore

__all__ = ["COST_COLUMNS", "GROUP_COLUMNS", "CostsBy", "Since", "costs_frame", "since_instant"]

CostsBy = Literal["day", "model", "mode"]
Since = datetime | date | str

COST_COLUMNS = [
    "timestamp",
    "conversation_id",
    "turn",
    "mode",
    "model",
    "cost_usd",
    "cost_estimated",
    "cost_unknown",
]
"""One paid turn: when it was answered (UTC), where it is stored, how it was asked and what it
cost (``cost_usd`` NaN where ``cost_unknown``)."""
GROUP_COLUMNS = ["cost_usd", "turns", "estimated_costs", "unknown_costs"]
"""A group's total of the known costs, its paid turns, and how many of them were estimated
from the price table or have no known cost at all."""

_MODES: dict[str, str] = {
    tool_for(mode, follow_up): mode for mode, follow_up in product(get_args(Mode), (False, True))
} | {WEB_SEARCH_TOOL: "web"}
_AGO = re.compile(r"^\s*(\d{1,5})\s*([hdw])\s*$")
_UNITS = {"h": "hours", "d": "days", "w": "weeks"}


def since_instant(since: Since, now: datetime | None = None) -> datetime:
    """``since`` as an instant in UTC.

    A datetime without a zone is read as UTC; a date is its midnight UTC; text is an ISO date or
    date-time (``2026-11-01``, ``2026-11-01T09:00Z``), or a span back from ``now``: ``7d``,
    ``12h``, ``2w``.

    Raises:
        ValidationError: for anything else, naming the option as each surface writes it.
    """
    if isinstance(since, datetime):
        return since.replace(tzinfo=UTC) if since.tzinfo is None else since.astimezone(UTC)
    if isinstance(since, date):
        return datetime(since.year, since.month, since.day, tzinfo=UTC)
    if isinstance(since, str):
        if span := _AGO.match(since):
            back = timedelta(**{_UNITS[span.group(2)]: int(span.group(1))})
            return (now or datetime.now(UTC)) - back
        try:
            return since_instant(datetime.fromisoformat(since.strip()))
        except ValueError:
            pass
    raise option_error(
        "{given} is not a time to count from: give a date (2026-11-01), a date and time "
        "(2026-11-01T09:00Z) or a span back from now (7d, 12h, 2w).",
        "since",
        since,
    )


def costs_frame(
    store: ConversationStore,
    *,
    by: CostsBy | None = None,
    since: Since | None = None,
    now: datetime | None = None,
) -> pd.DataFrame:
    """The paid turns of ``store`` (see :meth:`Researcher.costs`), oldest first, or their totals
    ``by`` day, model or mode.

    A paid turn is an assistant turn with a stored cost, or one that closes a run that was (or
    may have been) paid for and reported no cost (``cost_unknown``).
    """
    require("notebook", "costs()", ("pandas",))
    if by is not None and by not in get_args(CostsBy):
        raise option_error(
            "{given} is not a way to group costs: use 'day', 'model' or 'mode' (or leave it "
            "out for one row per paid turn).",
            "by",
            by,
        )
    start = since_instant(since, now) if since is not None else None
    turns = _paid_turns(store, start)
    return turns if by is None else _grouped(turns, by)


def _paid_turns(store: ConversationStore, start: datetime | None) -> pd.DataFrame:
    from pplx_nb.export import to_dataframe

    messages = to_dataframe(store, level="messages")
    paid = messages[
        (messages["role"] == "assistant")
        & (messages["cost_usd"].notna() | messages["cost_unknown"])
    ]
    if start is not None:
        paid = paid[paid["timestamp"] >= start]
    paid = paid.assign(mode=paid["tool"].map(_MODES).fillna("other").astype("str"))
    ordered = paid.sort_values(["timestamp", "conversation_id", "turn"], kind="stable")
    return ordered[COST_COLUMNS].reset_index(drop=True)


def _grouped(turns: pd.DataFrame, by: CostsBy) -> pd.DataFrame:
    if by == "day":
        keys = turns["timestamp"].dt.date
    elif by == "model":  # the Search API's requests are billed per request, by no model
        keys = turns["model"].fillna(turns["mode"].map({"web": "Search API"})).fillna("unknown")
    else:
        keys = turns["mode"]
    groups = turns.groupby(keys.rename(by), sort=True)
    totals = groups.agg(
        cost_usd=("cost_usd", "sum"),
        turns=("cost_usd", "size"),
        estimated_costs=("cost_estimated", "sum"),
        unknown_costs=("cost_unknown", "sum"),
    )
    totals = totals.astype(dict.fromkeys(GROUP_COLUMNS, "int64") | {"cost_usd": "float64"})
    if by != "day":  # the costliest first; days in order
        totals = totals.sort_values("cost_usd", ascending=False, kind="stable")
    return totals[GROUP_COLUMNS]
