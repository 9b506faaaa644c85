"""Seeing the spend: ``Researcher.costs`` and ``%pplx_costs``, read from the store."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell
from support.ipython import Run, loaded_shell

from pplx_nb import Researcher, ValidationError
from pplx_nb._models import Cost, Message, closing_turn
from pplx_nb.research._costs import COST_COLUMNS, GROUP_COLUMNS, since_instant
from pplx_nb.sim import stats

NOW = datetime.now(UTC).replace(microsecond=0)


def _stamp(days_ago: float) -> str:
    stamp = (NOW - timedelta(days=days_ago)).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def _answer(days_ago: float, tool: str, model: str | None, cost: Cost | None) -> Message:
    return Message(
        role="assistant",
        content="An answer.",
        timestamp=_stamp(days_ago),
        tool=tool,
        model=model,
        cost=cost,
    )


def _question(days_ago: float) -> Message:
    return Message(role="user", content="A question?", timestamp=_stamp(days_ago))


def _cost(total: float, *, estimated: bool = False) -> Cost:
    return Cost(total_cost=total, estimated=estimated)


@pytest.fixture
def spent(researcher: Researcher) -> dict[str, str]:
    """Four conversations with known costs: two search turns yesterday (one estimated), a web
    search 3 days ago, a deep research 10 days ago, a cancelled one of unknown cost 2 days ago,
    and an answer stored without a cost (not a paid turn)."""
    store = researcher.store
    system = Message(role="system", content="You research.", timestamp=_stamp(20))
    search = store.create(
        [
            system,
            _question(1.5),
            _answer(1.5, "perplexity_search", "perplexity/sonar", _cost(0.01)),
            _question(1.2),
            _answer(
                1.2, "perplexity_search_followup", "perplexity/sonar", _cost(0.02, estimated=True)
            ),
        ]
    )
    research = store.create(
        [system, _question(10), _answer(10, "perplexity_deep_research", "medium", _cost(0.5))]
    )
    cancelled_turn = closing_turn("cancelled", cost_unknown=True).model_copy(
        update={"timestamp": _stamp(2), "tool": "perplexity_deep_research", "model": "medium"}
    )
    cancelled = store.create([system, _question(2), cancelled_turn])
    web = store.create(
        [
            system,
            _question(3),
            _answer(3, "perplexity_web_search", None, _cost(0.005, estimated=True)),
        ]
    )
    unpriced = store.create([system, _question(4), _answer(4, "perplexity_search", None, None)])
    return {
        "search": search.conversation_id,
        "research": research.conversation_id,
        "cancelled": cancelled.conversation_id,
        "web": web.conversation_id,
        "unpriced": unpriced.conversation_id,
    }


def test_costs_has_one_row_per_paid_turn_oldest_first(
    researcher: Researcher, spent: dict[str, str]
) -> None:
    frame = researcher.costs()

    assert list(frame.columns) == COST_COLUMNS
    assert frame["conversation_id"].tolist() == [
        spent["research"],
        spent["web"],
        spent["cancelled"],
        spent["search"],
        spent["search"],
    ]
    assert frame["mode"].tolist() == ["research", "web", "research", "search", "search"]
    assert frame["turn"].tolist() == [2, 2, 2, 2, 4]
    assert frame["cost_usd"].tolist()[:2] == [0.5, 0.005]
    assert pd.isna(frame["cost_usd"][2]) and frame["cost_unknown"].tolist()[2]
    assert frame["cost_estimated"].tolist() == [False, True, False, False, True]
    assert frame["timestamp"].dtype == pd.DatetimeTZDtype("ns", "UTC")
    assert frame["timestamp"].is_monotonic_increasing
    assert frame["cost_usd"].sum() == pytest.approx(0.535)


def test_costs_by_day_model_and_mode_total_the_known_costs_and_count_the_rest(
    researcher: Researcher, spent: dict[str, str]
) -> None:
    by_mode = researcher.costs(by="mode")
    assert list(by_mode.columns) == GROUP_COLUMNS
    assert by_mode.to_dict("index") == {
        "research": {"cost_usd": 0.5, "turns": 2, "estimated_costs": 0, "unknown_costs": 1},
        "search": {
            "cost_usd": pytest.approx(0.03),
            "turns": 2,
            "estimated_costs": 1,
            "unknown_costs": 0,
        },
        "web": {"cost_usd": 0.005, "turns": 1, "estimated_costs": 1, "unknown_costs": 0},
    }
    by_model = researcher.costs(by="model")
    assert by_model.index.tolist() == ["medium", "perplexity/sonar", "Search API"]
    assert by_model["turns"].tolist() == [2, 2, 1]

    by_day = researcher.costs(by="day")
    days = [(NOW - timedelta(days=n)).date() for n in (10, 3, 2)]
    assert by_day.index.tolist()[:3] == days
    assert by_day["turns"].sum() == 5
    assert by_day["cost_usd"].sum() == pytest.approx(0.535)
    assert by_day["unknown_costs"].tolist()[2] == 1


@pytest.mark.parametrize(
    "since",
    ["7d", "168h", "1w", NOW - timedelta(days=7), (NOW - timedelta(days=7)).replace(tzinfo=None)],
)
def test_costs_since_leaves_out_older_turns(
    researcher: Researcher, spent: dict[str, str], since: object
) -> None:
    frame = researcher.costs(since=since)  # type: ignore[arg-type]
    assert spent["research"] not in frame["conversation_id"].tolist()
    assert len(frame) == 4


def test_since_takes_dates_and_iso_text_in_utc() -> None:
    assert since_instant("2026-11-01") == datetime(2026, 11, 1, tzinfo=UTC)
    assert since_instant(date(2026, 11, 1)) == datetime(2026, 11, 1, tzinfo=UTC)
    assert since_instant("2026-11-01T09:30+01:00") == datetime(2026, 11, 1, 8, 30, tzinfo=UTC)
    assert since_instant("7d", now=NOW) == NOW - timedelta(days=7)


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"since": "last week"}, "since='last week' is not a time to count from"),
        ({"since": 7}, "since=7 is not a time to count from"),
        ({"by": "week"}, "by='week' is not a way to group costs"),
    ],
)
def test_costs_refuses_what_it_cannot_read_naming_the_option(
    researcher: Researcher, kwargs: dict[str, object], said: str
) -> None:
    with pytest.raises(ValidationError, match=said):
        researcher.costs(**kwargs)  # type: ignore[arg-type]


def test_costs_counts_what_the_simulator_billed_as_stored(
    researcher: Researcher, sim_url: str
) -> None:
    answer = researcher.search("What is a coroutine?")
    results = researcher.web_search("asyncio TaskGroup", save=True)
    billed = stats(sim_url)
    assert (billed["generations"], billed["searches"]) == (1, 1)

    frame = researcher.costs()
    assert frame["conversation_id"].tolist() == [answer.conversation_id, results.conversation_id]
    assert answer.cost is not None
    assert frame["cost_usd"].tolist() == [answer.cost.total_cost, 0.005]
    assert frame["mode"].tolist() == ["search", "web"]


def test_costs_without_pandas_names_the_pip_line(
    researcher: Researcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pplx_nb import MissingExtra

    monkeypatch.setattr("pplx_nb._extras._findable", lambda module: module != "pandas")
    with pytest.raises(MissingExtra, match=r"costs\(\) needs pandas.*pplx_nb\[notebook\]"):
        researcher.costs()


# -- %pplx_costs --------------------------------------------------------------------------------


@pytest.fixture
def shell(researcher: Researcher) -> Iterator[InteractiveShell]:
    with loaded_shell(researcher, "spend") as shell:
        yield shell


def test_pplx_costs_shows_the_total_the_table_and_a_plot(
    shell: InteractiveShell, spent: dict[str, str]
) -> None:
    run = Run(shell, "%pplx_costs --by mode --since 30d -o spend")

    summary, table, plot = run.outputs
    assert summary["text/plain"] == (
        "$0.5350 spent on 5 paid turns since 30d (2 estimated from the price table, "
        "1 of unknown cost, not in the total)."
    )
    assert "research" in table["text/html"] and "unknown_costs" in table["text/html"]
    assert base64.b64decode(plot["image/png"]).startswith(b"\x89PNG")
    assert shell.user_ns["spend"].index.tolist() == ["research", "search", "web"]


def test_pplx_costs_without_matplotlib_shows_the_table_and_says_so(
    shell: InteractiveShell, spent: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails, as uninstalled
    run = Run(shell, "%pplx_costs")

    assert len(run.outputs) == 3
    assert run.outputs[0]["text/plain"].startswith("$0.5350 spent on 5 paid turns (")
    assert spent["web"] in run.outputs[1]["text/html"]
    assert run.outputs[2]["text/plain"].startswith("NO_PLOT: matplotlib is not installed")
    assert "pip install 'pplx_nb[lab]'" in run.outputs[2]["text/plain"]


def test_pplx_costs_on_an_empty_store_says_nothing_was_paid(shell: InteractiveShell) -> None:
    run = Run(shell, "%pplx_costs --since 2026-11-01")
    assert [data["text/plain"] for data in run.outputs] == [
        "No paid answers in the store since 2026-11-01."
    ]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("--since yesterday", "<code>--since yesterday</code> is not a time to count from"),
        ("--by week", "argument --by: invalid choice: &#x27;week&#x27;"),
    ],
)
def test_pplx_costs_refuses_a_bad_option_as_written(
    shell: InteractiveShell, line: str, said: str
) -> None:
    run = Run(shell, f"%pplx_costs {line}")
    assert run.last["text/plain"].startswith("VALIDATION_ERROR: ")
    assert said in run.last["text/html"]
