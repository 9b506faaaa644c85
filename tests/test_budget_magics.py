"""Spend caps in a notebook's words: ``%pplx_budget``, the estimate and the actual cost of
``%%pplx_research``, and every magic that can be refused showing BUDGET_EXCEEDED with its
figures, when the cap resets and what to do."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from IPython.core.interactiveshell import InteractiveShell
from support.ipython import Run, loaded_shell

from pplx_nb import Answer, JobStatus, Researcher, Settings
from pplx_nb._models import Message
from pplx_nb.notebook.magics import get_researcher
from pplx_nb.notebook.widgets import JobMonitor
from pplx_nb.sim import stats


def _researcher(settings: Settings, budget: str | None) -> Researcher:
    return Researcher(settings.model_copy(update={"budget": budget}), async_deep_research=True)


@pytest.fixture
def budgeted(settings: Settings, request: pytest.FixtureRequest) -> Iterator[InteractiveShell]:
    """A shell whose Researcher has the caps the test is parametrized with."""
    with (
        _researcher(settings, request.param) as researcher,
        loaded_shell(researcher, "standing") as shell,
    ):
        yield shell


def _tomorrow() -> str:
    return f"{(datetime.now(UTC) + timedelta(days=1)):%Y-%m-%d} 00:00 UTC"


@pytest.mark.parametrize("budgeted", [None], indirect=True)
def test_pplx_budget_without_caps_says_how_to_set_them(budgeted: InteractiveShell) -> None:
    run = Run(budgeted, "%pplx_budget -o standing")
    assert run.last["text/plain"].startswith(
        "No budget set: PPLX_NB_BUDGET=2/request,10/day,100/month (USD, periods in UTC)"
    )
    assert budgeted.user_ns["standing"] == []


@pytest.mark.parametrize("budgeted", ["0.5/request,0.2/day,3/month"], indirect=True)
def test_pplx_budget_shows_what_each_cap_has_left_and_when_it_resets(
    budgeted: InteractiveShell,
) -> None:
    answer = Run(budgeted, "%%pplx\nWhat is a coroutine?").result
    assert isinstance(answer, Answer) and answer.cost is not None
    cost = answer.cost.total_cost

    shown = Run(budgeted, "%pplx_budget -o standing").last
    lines = shown["text/plain"].splitlines()
    assert lines[:2] == [
        "Spend caps (PPLX_NB_BUDGET=0.5/request,0.2/day,3/month):",
        "  per request: at most $0.5000 each",
    ]
    assert lines[2].startswith(
        f"  day: ${0.2 - cost:.4f} left of $0.2000 (${cost:.4f} spent, $0.00 reserved); "
        f"resets {_tomorrow()} (in "
    )
    assert lines[3].startswith(f"  month: ${3 - cost:,.2f} left of $3.00")
    assert re.search(r">day</td><td [^>]*>&#36;0\.2000</td>", shown["text/html"])
    periods = [standing.period for standing in budgeted.user_ns["standing"]]
    assert periods == ["request", "day", "month"]


def _refusal(run: Run) -> str:
    plain = run.last["text/plain"]
    assert plain.startswith("BUDGET_EXCEEDED: This request was refused: it could cost up to $")
    return plain


@pytest.mark.parametrize(
    ("budgeted", "cell", "cap"),
    [
        ("0.01/request", "%%pplx\nWhat is a coroutine?", "$0.0100"),
        ("0.01/request", "%%pplx_research --wait\nCompare asyncio and trio", "$0.0100"),
        ("0.001/request", "%%pplx_web asyncio TaskGroup", "$0.0010"),
    ],
    indirect=["budgeted"],
)
def test_a_magic_over_the_per_request_cap_says_so_and_sends_nothing(
    budgeted: InteractiveShell, sim_url: str, cell: str, cap: str
) -> None:
    said = _refusal(Run(budgeted, cell))
    assert f"over the per-request cap of {cap} (PPLX_NB_BUDGET). Nothing was sent." in said
    assert "Ask in a cheaper mode (%%pplx rather than %%pplx_research, or --effort low)" in said
    raise_it = r"raise the per-request cap above \$0\.\d{4} \(%env PPLX_NB_BUDGET=\.\.\.\)"
    assert re.search(raise_it, said), said
    billed = stats(sim_url)
    assert (billed["generations"], billed["searches"]) == (0, 0)


@pytest.mark.parametrize("budgeted", ["0.01/day"], indirect=True)
def test_a_follow_up_over_the_day_cap_says_when_it_resets(
    budgeted: InteractiveShell, sim_url: str
) -> None:
    store = get_researcher().store
    asked = store.create(
        [
            Message(role="system", content="You research."),
            Message(role="user", content="What is a coroutine?"),
            Message(role="assistant", content="A function that can pause."),
        ]
    )
    said = _refusal(Run(budgeted, f"%pplx_followup {asked.conversation_id} What is asyncio.run?"))
    assert "and $0.00 of today's (UTC) cap of $0.0100 is spent or reserved, leaving $0.0100" in said
    assert f"The day's cap resets at {_tomorrow()} (in " in said
    assert "Wait until then, raise the day's cap (%env PPLX_NB_BUDGET=...), or ask in" in said
    assert "%pplx_budget shows every cap." in said
    assert stats(sim_url)["generations"] == 0


@pytest.mark.parametrize("budgeted", [None], indirect=True)
def test_pplx_research_shows_the_estimate_before_it_queues_and_the_cost_when_it_ends(
    budgeted: InteractiveShell,
) -> None:
    run = Run(budgeted, "%%pplx_research\nCompare asyncio and trio")
    assert isinstance(run.result, JobStatus)
    estimated = run.outputs[0]["text/plain"]
    found = re.match(
        r"Estimated cost: about \$(0\.\d{4}), at most \$(0\.\d{4}) "
        r"\(prices from .* for medium\b.*; deep research: at most [\d,]+ tokens read",
        estimated,
    )
    assert found, estimated
    assert run.outputs[-1]["text/plain"].startswith("Research job ")

    researcher = get_researcher()
    estimate = researcher.estimate("Compare asyncio and trio", mode="research")
    monitor = JobMonitor(run.result.conversation_id, researcher, start=False, estimate=estimate)
    researcher.wait(run.result.conversation_id, timeout=60)
    assert monitor.refresh()
    report = researcher.history(run.result.conversation_id).messages[-1]
    assert report.cost is not None
    assert (
        f"Cost: ${report.cost.total_cost:.4f}; estimated before it ran: about "
        f"${found.group(1)}, at most ${found.group(2)}."
    ) in monitor.report.value


@pytest.mark.parametrize("budgeted", [None], indirect=True)
def test_pplx_research_wait_says_the_cost_under_the_report(budgeted: InteractiveShell) -> None:
    run = Run(budgeted, "%%pplx_research --wait\nCompare asyncio and trio")
    assert isinstance(run.result, Answer) and run.result.cost is not None
    assert run.outputs[0]["text/plain"].startswith("Estimated cost: about $")
    assert run.last["text/plain"].endswith(
        f"Cost: ${run.result.cost.total_cost:.4f}; estimated before it ran: about $"
        + run.outputs[0]["text/plain"].split("about $", 1)[1].split(" (")[0]
        + "."
    )


@pytest.mark.parametrize("budgeted", ["0.05/request"], indirect=True)
def test_a_queued_pplx_research_no_cap_has_room_for_is_refused_before_it_is_queued(
    budgeted: InteractiveShell, sim_url: str
) -> None:
    run = Run(budgeted, "%%pplx_research\nCompare asyncio and trio")
    assert run.outputs[0]["text/plain"].startswith("Estimated cost: about $")
    said = _refusal(run)
    assert "over the per-request cap of $0.0500 (PPLX_NB_BUDGET). Nothing was sent." in said
    researcher = get_researcher()
    assert researcher.conversations() == [], "a refused research stores no question"
    billed = stats(sim_url)
    assert (billed["generations"], billed["background_runs"]) == (0, 0)
