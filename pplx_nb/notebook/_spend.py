"""``%pplx_costs``: what the stored answers cost, as a table and a small plot.

Read from the store (:meth:`Researcher.costs`), so it counts what every kernel, MCP server and
worker on it paid for. The plot needs matplotlib (the lab extra); without it the table shows
alone, and a line says so.
"""

from __future__ import annotations

import base64
import html
import io
from typing import TYPE_CHECKING

from IPython.core.magic import magics_class, no_var_expand

from pplx_nb.notebook._input import argument, magic_arguments, output_options, unquote
from pplx_nb.notebook._kernel import CellMagics, line_magic, show, show_widget
from pplx_nb.notebook.display import notice_bundle

if TYPE_CHECKING:
    import pandas as pd

    from pplx_nb.notebook.display import Bundle

__all__ = ["PplxSpendMagics", "costs_plot", "costs_summary"]

_BAR = "#20808d"


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


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 100 else f"${value:.4f}"


def costs_summary(frame: pd.DataFrame, by: str | None, since: str | None) -> Bundle:
    """One line: the known total, how many paid turns, how many estimated or unknown."""
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
        said = f"{_usd(total)} spent on {turns} {noun}{when}"
        notes = [f"{estimated} estimated from the price table"] if estimated else []
        if unknown:
            notes.append(f"{unknown} of unknown cost, not in the total")
        said += f" ({', '.join(notes)})." if notes else "."
    return {"text/plain": said, "text/html": f"<p>{html.escape(said)}</p>"}


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
