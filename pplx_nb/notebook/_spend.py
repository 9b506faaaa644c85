"""``%pplx_costs``: what the stored answers cost, as a table and a small plot; ``%pplx_budget``:
what each ``PPLX_NB_BUDGET`` cap has left, and when it resets.

Both read what every kernel, MCP server and worker on the store shares: the stored turns
(:meth:`Researcher.costs`) and the store's ledger (:meth:`Researcher.budget`). The plot needs
matplotlib (the lab extra); without it the table shows alone, and a line says so.
"""

from __future__ import annotations

import base64
import html
import io
from typing import TYPE_CHECKING

from IPython.core.magic import magics_class, no_var_expand

from pplx_nb.notebook._input import argument, magic_arguments, output_options, unquote
from pplx_nb.notebook._kernel import CellMagics, line_magic, show, show_widget
from pplx_nb.notebook.display import NO_MATH, notice_bundle

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas as pd

    from pplx_nb._models import Answer
    from pplx_nb.notebook.display import Bundle
    from pplx_nb.research import CostEstimate, PeriodStanding

__all__ = [
    "PplxSpendMagics",
    "add_cost_line",
    "budget_bundle",
    "cost_words",
    "costs_plot",
    "costs_summary",
    "estimate_bundle",
]

_BAR = "#20808d"
_CELL = "padding:2px 10px;text-align:right"


def _amounts(text: str) -> str:
    """``text`` as HTML whose dollars no Markdown renderer takes for TeX delimiters."""
    return html.escape(text).replace("$", "&#36;")


def _line(text: str) -> str:
    """One small line of amounts, as HTML that MathJax leaves alone."""
    return f'<p class="{NO_MATH}"><small>{_amounts(text)}</small></p>'


@magics_class
class PplxSpendMagics(CellMagics):
    """What was spent, read from the store."""

    @no_var_expand
    @magic_arguments()
    @argument("--by", choices=("day", "model", "mode"), help="totals per day, model or mode")
    @argument("--since", metavar="WHEN", help="only since WHEN: 2026-11-01, 7d, 12h, 2w")
    @output_options
    @line_magic
    def pplx_costs(self, line: str) -> None:
        """What the stored answers cost: a table, a line with the total, and a small plot.

        One row per paid turn, or totals --by day (UTC), model or mode (search, research,
        web). -o VAR stores the table as a pandas DataFrame (Researcher.costs in Python).

        Examples:
          %pplx_costs --by day --since 7d
          %pplx_costs --by model -o spend
        """
        with self._guard(line, "%pplx_costs"):
            args = self._parse(self.pplx_costs, line)
            since = unquote(args.since) if args.since else None
            frame = self.researcher.costs(by=args.by, since=since)
            self._store(args, frame)
            show(costs_summary(frame, args.by, since))
            if frame.empty:
                return
            show_widget(frame)
            plot = costs_plot(frame, args.by)
            if plot is None:
                show(
                    notice_bundle(
                        "NO_PLOT",
                        "matplotlib is not installed, so the table shows without its plot: "
                        "`pip install 'pplx_nb[lab]'` brings it.",
                    )
                )
            else:
                show(plot)

    @no_var_expand
    @magic_arguments()
    @output_options
    @line_magic
    def pplx_budget(self, line: str) -> None:
        """What each PPLX_NB_BUDGET cap has left, and when it resets (UTC).

        The caps are checked before every paid request, against one ledger per store that
        every kernel, MCP server and worker on it shares. -o VAR stores where each cap stands
        (Researcher.budget() in Python).

        Examples:
          %pplx_budget
          %env PPLX_NB_BUDGET=0.50/request,5/day
        """
        with self._guard(line, "%pplx_budget"):
            args = self._parse(self.pplx_budget, line)
            standings = self.researcher.budget()
            self._store(args, standings)
            show(budget_bundle(standings, self.researcher.settings.budget))


def budget_bundle(standings: Sequence[PeriodStanding], caps: str | None) -> Bundle:
    """Each cap as a row: the cap, spent, reserved, left, when it resets; or how to set one."""
    from pplx_nb._budget_words import resets_words, usd
    from pplx_nb._caps import BUDGET_EXAMPLE

    if not standings:
        example = f"PPLX_NB_BUDGET={BUDGET_EXAMPLE}"
        said = (
            f"No budget set: {example} (USD, periods in UTC) caps what is spent, checked before "
            "every paid request;"
        )
        return {
            "text/html": f'<p class="{NO_MATH}">{html.escape(said)} '
            f"<code>%env {example}</code> sets one in this kernel.</p>",
            "text/plain": f"{said} %env {example} sets one in this kernel.",
        }
    rows, lines = [], [f"Spend caps (PPLX_NB_BUDGET={caps}):"]
    for standing in standings:
        if standing.period == "request":
            rows.append(["per request", usd(standing.cap), "", "", "", "checked on each"])
            lines.append(f"  per request: at most {usd(standing.cap)} each")
            continue
        resets = resets_words(standing.resets_at) if standing.resets_at else ""
        figures = [usd(x) for x in (standing.cap, standing.spent, standing.reserved, standing.left)]
        rows.append([standing.period, *figures, resets])
        lines.append(
            f"  {standing.period}: {figures[3]} left of {figures[0]} ({figures[1]} spent, "
            f"{figures[2]} reserved); resets {resets}"
        )
    head = "".join(
        f'<th style="{_CELL}">{name}</th>'
        for name in ("cap", "USD", "spent", "reserved", "left", "resets")
    )
    body = "".join(
        "<tr>" + "".join(f'<td style="{_CELL}">{_amounts(cell)}</td>' for cell in row) + "</tr>"
        for row in rows
    )
    return {
        "text/html": f'<div class="{NO_MATH}"><p><b>Spend caps</b> '
        f"<code>PPLX_NB_BUDGET={html.escape(caps or '')}</code></p>"
        f"<table><tr>{head}</tr>{body}</table></div>",
        "text/plain": "\n".join(lines),
    }


def estimate_bundle(estimate: CostEstimate) -> Bundle:
    """What a run may cost, said before it is asked: expected, worst case, and on what basis.
    (A run no cap has room for is refused right after, before it is queued.)"""
    from pplx_nb._budget_words import estimate_words

    said = f"Estimated cost: {estimate_words(estimate.expected, estimate.high)}"
    said += f" ({'; '.join(estimate.basis)})."
    return {"text/html": _line(said), "text/plain": said}


def cost_words(answer: Answer, estimate: CostEstimate) -> str:
    """What a run cost, beside what it was estimated to cost before it ran."""
    from pplx_nb._budget_words import estimate_words, usd

    cost = answer.cost
    if cost is None:
        spent = "Cost unknown: the API reported none"
    else:
        table = " (from the price table)" if cost.estimated else ""
        spent = f"Cost: {usd(cost.total_cost)}{table}"
    before = estimate_words(estimate.expected, estimate.high)
    return f"{spent}; estimated before it ran: {before}."


def add_cost_line(bundle: Bundle, answer: Answer, estimate: CostEstimate) -> Bundle:
    """``bundle`` (a report) with :func:`cost_words` as its last line."""
    said = cost_words(answer, estimate)
    return {
        **bundle,
        "text/markdown": f"{bundle['text/markdown']}\n\n{_line(said)}",
        "text/plain": f"{bundle['text/plain']}\n\n{said}",
    }


def costs_summary(frame: pd.DataFrame, by: str | None, since: str | None) -> Bundle:
    """One line: the known total, how many paid turns, how many estimated or unknown."""
    from pplx_nb._budget_words import usd

    if by is None:
        total, turns = float(frame["cost_usd"].sum()), len(frame)
        estimated, unknown = int(frame["cost_estimated"].sum()), int(frame["cost_unknown"].sum())
    else:
        total, turns = float(frame["cost_usd"].sum()), int(frame["turns"].sum())
        estimated, unknown = int(frame["estimated_costs"].sum()), int(frame["unknown_costs"].sum())
    when = f" since {since}" if since else ""
    if not turns:
        said = f"No paid answers in the store{when}."
    else:
        noun = "paid turn" if turns == 1 else "paid turns"
        said = f"{usd(total)} spent on {turns} {noun}{when}"
        notes = [f"{estimated} estimated from the price table"] if estimated else []
        if unknown:
            notes.append(f"{unknown} of unknown cost, not in the total")
        said += f" ({', '.join(notes)})." if notes else "."
    return {"text/plain": said, "text/html": f'<p class="{NO_MATH}">{_amounts(said)}</p>'}


def costs_plot(frame: pd.DataFrame, by: str | None) -> Bundle | None:
    """A small PNG of ``frame``: bars per group, or the running total over time; ``None``
    without matplotlib."""
    try:  # matplotlib comes with the lab extra only
        from matplotlib.figure import Figure
    except ImportError:
        return None
    figure = Figure(figsize=(6, 2.4), dpi=96, layout="constrained")
    axes = figure.add_subplot()
    if by is None:
        spent = frame["cost_usd"].fillna(0.0).cumsum()
        axes.step(frame["timestamp"], spent, where="post", color=_BAR)
        axes.set_title("Spent (USD, running total)", fontsize=10)
        figure.autofmt_xdate()
    else:
        labels = [str(key) for key in frame.index]
        axes.barh(labels[::-1], frame["cost_usd"].to_numpy()[::-1], color=_BAR)
        axes.set_title(f"Spent per {by} (USD)", fontsize=10)
    axes.tick_params(labelsize=8)
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return {
        "image/png": base64.b64encode(png.getvalue()).decode("ascii"),
        "text/plain": f"<plot: spent {'over time' if by is None else f'per {by}'}>",
    }
