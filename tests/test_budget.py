"""Spend caps (``PPLX_NB_BUDGET``): the caps, the ledger on each backend, and the money counted
at the simulator — nothing is sent past a cap, whatever the processes sharing the store do."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_KEY
from support.mcp import ROOT
from support.redis_server import RedisServer

from pplx_nb import BudgetExceeded, FilesystemError, PplxError, Researcher, SearchOptions, Settings
from pplx_nb.backends import open_backends
from pplx_nb.budget import (
    BudgetGuard,
    Caps,
    CostEstimate,
    FileLedger,
    MemoryLedger,
    RedisLedger,
    parse_caps,
)
from pplx_nb.sim import inject_faults, serve, stats

NOON = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def _estimate(high: float) -> CostEstimate:
    return CostEstimate(high / 4, high / 2, high, ("a test",))


# -- caps -----------------------------------------------------------------------------------


def test_caps_read_per_request_day_and_month_in_usd() -> None:
    assert parse_caps("2/request,10/day,100/month") == Caps(2.0, 10.0, 100.0)
    assert parse_caps(" $0.5 / day ") == Caps(day=0.5)
    assert parse_caps(None) == Caps() and not parse_caps("")
    assert str(parse_caps("1/day,2/request")) == "2/request,1/day"


@pytest.mark.parametrize("text", ["10", "10/week", "-1/day", "0/day", "1/day,2/day", "x/day"])
def test_a_malformed_budget_is_refused_naming_the_variable_and_an_example(text: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="PPLX_NB_BUDGET") as caught:
        Settings(budget=text)
    assert "2/request,10/day,100/month" in str(caught.value)


def test_budget_exceeded_carries_its_figures_across_processes() -> None:
    guard = BudgetGuard(parse_caps("1/day"), MemoryLedger(), clock=lambda: NOON)
    guard.reserve(_estimate(0.75), "search:low")
    with pytest.raises(BudgetExceeded) as caught:
        guard.reserve(_estimate(0.5), "search:low")
    error = pickle.loads(pickle.dumps(caught.value))
    assert (error.code, error.period, error.cap) == ("BUDGET_EXCEEDED", "day", 1.0)
    assert (error.spent, error.estimate) == (0.75, 0.5)
    assert error.resets_at == datetime(2026, 11, 29, tzinfo=UTC)
    assert "$0.7500" in error.message and "2026-11-29 00:00 UTC" in error.message
    assert "PPLX_NB_BUDGET" in error.message and "cheaper" in error.message


def test_a_request_over_the_per_request_cap_is_refused_before_the_ledger() -> None:
    ledger = MemoryLedger()
    guard = BudgetGuard(parse_caps("0.10/request"), ledger, clock=lambda: NOON)
    with pytest.raises(BudgetExceeded) as caught:
        guard.reserve(_estimate(0.11), "research:medium")
    assert (caught.value.period, caught.value.resets_at) == ("request", None)
    assert guard.standing()[0].left == 0.10


# -- the ledger, on each backend --------------------------------------------------------------


@pytest.fixture(params=["memory", "files", "redis"])
def guard(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer
) -> Iterator[BudgetGuard]:
    caps = parse_caps("1/day,3/month")
    if request.param == "memory":
        yield BudgetGuard(caps, MemoryLedger(), clock=lambda: NOON)
    elif request.param == "files":
        yield BudgetGuard(caps, FileLedger(tmp_path), clock=lambda: NOON)
    else:
        redis_server.flush(63)
        yield BudgetGuard(caps, RedisLedger(redis_server.url(63)), clock=lambda: NOON)


def test_holds_settle_to_their_cost_keep_an_unknown_one_and_release(guard: BudgetGuard) -> None:
    a = guard.reserve(_estimate(0.4), "search:low")
    b = guard.reserve(_estimate(0.3), "search:low")
    c = guard.reserve(_estimate(0.2), "search:low")
    day = guard.standing()[0]
    assert (day.spent, day.reserved, day.left) == (0.0, 0.9, 0.1)
    with pytest.raises(BudgetExceeded):
        guard.reserve(_estimate(0.11), "search:low")
    guard.settle(a, 0.123456)  # the reported cost
    guard.settle(b, None)  # unknown: its reservation stays spent
    guard.release(c)  # provably never sent
    guard.settle(a, 5.0)  # settled once: a second word changes nothing
    day, month = guard.standing()
    assert (day.spent, day.reserved) == (0.423456, 0.0)
    assert (month.spent, month.cap, month.resets_at) == (
        0.423456,
        3.0,
        datetime(2026, 12, 1, tzinfo=UTC),
    )
    assert guard.history("search:low").runs == 2 and guard.history("search:low").most == 300_000


def test_a_job_reserving_again_under_its_id_keeps_the_first_run_as_spent(
    guard: BudgetGuard,
) -> None:
    guard.reserve(_estimate(0.25), "research:medium", "job-1")
    guard.reserve(_estimate(0.25), "research:medium", "job-1")  # its run submitted again
    day = guard.standing()[0]
    assert (day.spent, day.reserved) == (0.25, 0.25)
    guard.settle("job-1", 0.01)
    assert guard.standing()[0].spent == 0.26


def test_the_file_ledger_replays_its_steps_and_ignores_a_line_cut_short(tmp_path: Path) -> None:
    ledger = FileLedger(tmp_path)
    guard = BudgetGuard(parse_caps("1/day"), ledger, clock=lambda: NOON)
    for _ in range(FileLedger.COMPACT_AFTER + 10):  # past a compaction
        guard.settle(guard.reserve(_estimate(0.002), "search:low"), 0.001)
    open_hold = guard.reserve(_estimate(0.3), "research:medium", "job-7")
    path = tmp_path / ".budget" / "ledger.jsonl"
    lines = path.read_bytes().splitlines()
    assert 1 < len(lines) <= FileLedger.COMPACT_AFTER  # a snapshot, then the steps since
    with path.open("ab") as file:  # a process died while appending its step
        file.write(b'["settle","job-7",10')
    day = BudgetGuard(parse_caps("1/day"), FileLedger(tmp_path), clock=lambda: NOON).standing()
    assert (day[0].spent, day[0].reserved) == (0.074, 0.3)
    guard.settle(open_hold, 0.2)  # the next step starts a fresh snapshot
    assert path.read_bytes().count(b"\n") == 1
    assert (guard.standing()[0].spent, guard.standing()[0].reserved) == (0.274, 0.0)
    path.write_bytes(b"{not json\n")  # damaged: refused rather than counted from zero
    with pytest.raises(FilesystemError, match="damaged"):
        guard.reserve(_estimate(0.01), "search:low")


# -- with the simulator ---------------------------------------------------------------------


def _budgeted(settings: Settings, budget: str, **changes: object) -> Settings:
    return settings.model_copy(update={"budget": budget, **changes})


def test_no_caps_no_ledger_no_key_and_no_change(
    settings: Settings, logs_dir: Path, redis_url: str, sim_url: str
) -> None:
    with Researcher(settings) as researcher:
        researcher.search("What does asyncio.gather do?")
        assert researcher.budget() == []
        assert researcher.estimate("What is a coroutine?").high > 0
    assert not (logs_dir / ".budget").exists()
    on_redis = settings.model_copy(update={"store_url": redis_url})
    with Researcher(on_redis) as researcher:
        researcher.search("What does asyncio.gather do?")
        researcher.web_search("asyncio gather")
    import redis

    assert redis.Redis.from_url(redis_url).keys("pplx_nb:budget:*") == []
    assert stats(sim_url)["generations"] == 2


def test_the_estimate_covers_what_the_simulator_bills(settings: Settings, sim_url: str) -> None:
    question = "How do asyncio tasks get cancelled?"
    kinds = [("search", None), ("search", "high"), ("research", None), ("research", "xhigh")]
    with Researcher(settings, async_deep_research=False) as researcher:
        for mode, effort in kinds:
            opts: SearchOptions = {"effort": effort} if effort else {}
            estimate = researcher.estimate(question, mode=mode, **opts)
            before = stats(sim_url)["billed_usd"]
            if mode == "search":
                answer = researcher.search(question, **opts)
            else:
                answer = researcher.deep_research(question, **opts)
            billed = stats(sim_url)["billed_usd"] - before
            assert answer.cost is not None and answer.cost.total_cost == pytest.approx(billed)
            assert estimate.low <= estimate.expected <= estimate.high
            assert billed <= estimate.high, (mode, effort, estimate)
            assert any("prices" in line for line in estimate.basis)
        before = stats(sim_url)["billed_usd"]
        researcher.web_search("asyncio cancel")
        assert stats(sim_url)["billed_usd"] - before == pytest.approx(0.005)


def test_a_run_costing_more_than_its_estimate_counts_in_full_and_stops_the_next(
    settings: Settings, sim_url: str
) -> None:
    with Researcher(_budgeted(settings, "1/day")) as researcher:
        estimate = researcher.estimate("What is asyncio.TaskGroup?")
        inject_faults(sim_url, {"cost": 1.25, "path": "/v1/agent"})
        answer = researcher.search("What is asyncio.TaskGroup?")
        assert answer.cost is not None and answer.cost.total_cost == 1.25 > estimate.high
        day = researcher.budget()[0]
        assert (day.spent, day.reserved, day.left) == (1.25, 0.0, 0.0)
        sent = stats(sim_url)
        with pytest.raises(BudgetExceeded) as caught:
            researcher.search("What is asyncio.timeout?")
        with pytest.raises(BudgetExceeded):
            researcher.web_search("asyncio timeout")
        assert (caught.value.spent, caught.value.cap, caught.value.period) == (1.25, 1.0, "day")
        after = stats(sim_url)
        assert after["requests"] == sent["requests"]  # nothing sent
        assert after["billed_usd"] == 1.25
        assert len(researcher.conversations()) == 1  # nothing stored


def test_a_cancelled_research_releases_its_reservation(settings: Settings, tmp_path: Path) -> None:
    with serve(latency_ms=0, deep_research_seconds=60) as url:
        slow = _budgeted(settings, "1/day", base_url=url)
        with Researcher(slow, async_deep_research=True) as researcher:
            queued = researcher.deep_research("Explain asyncio event loops in depth")
            assert not isinstance(queued, type(None))
            conversation_id = queued.conversation_id
            deadline = time.monotonic() + 60
            while (status := researcher.status(conversation_id)) is None or not status.remote_id:
                assert time.monotonic() < deadline, "the job never submitted its run"
                time.sleep(0.02)
            reserved = researcher.budget()[0]
            assert reserved.reserved > 0.1 and reserved.spent == 0.0
            assert researcher.cancel(conversation_id).status == "cancelled"
            deadline = time.monotonic() + 60
            while researcher.budget()[0].reserved:
                assert time.monotonic() < deadline, "the reservation was never released"
                time.sleep(0.02)
            day = researcher.budget()[0]
            assert (day.spent, day.reserved, day.left) == (0.0, 0.0, 1.0)
            counted = stats(url)
            assert (counted["background_runs"], counted["cancels"]) == (1, 1)
            assert counted["billed_usd"] == 0.0


def test_a_research_job_settles_its_hold_to_the_report_cost(
    settings: Settings, sim_url: str
) -> None:
    with Researcher(_budgeted(settings, "1/day"), async_deep_research=True) as researcher:
        queued = researcher.deep_research("What does asyncio.shield protect against?")
        answer = researcher.wait(queued.conversation_id, timeout=60)
        day = researcher.budget()[0]
        assert answer.cost is not None
        assert (day.spent, day.reserved) == (answer.cost.total_cost, 0.0)
        assert day.spent == stats(sim_url)["billed_usd"]


def test_memory_backends_keep_a_ledger_in_memory(settings: Settings) -> None:
    backends = open_backends(_budgeted(settings, "1/day"), memory=True)
    assert backends.budget is not None and isinstance(backends.budget.ledger, MemoryLedger)
    assert open_backends(settings, memory=True).budget is None


# -- three processes on one store ---------------------------------------------------------------

KINDS = ("search", "research", "job", "web")


def _spend_in_three_processes(env: dict[str, str], homes: list[Path]) -> list[dict[str, Any]]:
    """Run three :mod:`support.spender` processes at once (one logs folder each in ``homes``,
    which may be the same); their tallies."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "support.spender"],
            env={**env, "CONVERSATION_LOGS_DIR": str(home), "XDG_STATE_HOME": str(home / "st")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent,
        )
        for home in homes
    ]
    tallies = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        tallies.append(json.loads(out))
    return tallies


def _assert_nothing_past_the_cap(
    tallies: list[dict[str, Any]], url: str, settings: Settings
) -> None:
    counted = stats(url)
    errors = [e for t in tallies for kind in KINDS for e in t[kind]["errors"]]
    assert errors == []  # every call was answered or refused with BUDGET_EXCEEDED
    assert all(t[kind]["refused"] >= 3 for t in tallies for kind in KINDS)  # the cap was reached
    answered = {kind: sum(t[kind]["answered"] for t in tallies) for kind in KINDS}
    # A refused call sent nothing: the simulator saw exactly the calls that were answered.
    assert counted["generations"] == answered["search"] + answered["research"] + answered["job"]
    assert counted["background_runs"] == answered["job"]
    assert counted["searches"] == answered["web"]
    billed = round(counted["billed_usd"] * 1e6)
    assert billed == sum(t[kind]["cost"] for t in tallies for kind in KINDS)
    assert billed <= 1_000_000  # the cap: $1 a day
    with Researcher(settings) as researcher:
        day = researcher.budget()[0]
        assert (round(day.spent * 1e6), day.reserved) == (billed, 0.0)
        with pytest.raises(BudgetExceeded) as refused:  # a dear run no cap has room for
            researcher.deep_research("What is asyncio.Runner?", wait=True, effort="xhigh")
        assert (refused.value.spent, refused.value.cap) == (day.spent, 1.0)
    after = stats(url)
    assert (after["generations"], after["billed_usd"]) == (counted["generations"], billed / 1e6)


@pytest.fixture
def spend_sim() -> Iterator[str]:
    with serve(latency_ms=0, deep_research_seconds=0.05) as url:
        yield url


def _spender_env(url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PERPLEXITY_BASE_URL": url,
        "PERPLEXITY_API_KEY": TEST_KEY,
        "PPLX_NB_OFFLINE": "0",
        "PPLX_NB_BUDGET": "1/day",
        "PYTHONPATH": str(ROOT),
    }


@pytest.mark.slow
def test_three_processes_on_one_logs_folder_never_spend_past_the_cap(
    spend_sim: str, settings: Settings, logs_dir: Path
) -> None:
    tallies = _spend_in_three_processes(_spender_env(spend_sim), [logs_dir] * 3)
    shared = _budgeted(settings, "1/day", base_url=spend_sim)
    _assert_nothing_past_the_cap(tallies, spend_sim, shared)


@pytest.mark.slow
def test_three_processes_on_one_redis_never_spend_past_the_cap(
    spend_sim: str, settings: Settings, redis_url: str, tmp_path: Path
) -> None:
    env = {**_spender_env(spend_sim), "PPLX_NB_STORE": redis_url}
    homes = [tmp_path / f"machine-{n}" for n in range(3)]
    tallies = _spend_in_three_processes(env, homes)
    shared = _budgeted(settings, "1/day", base_url=spend_sim, store_url=redis_url)
    _assert_nothing_past_the_cap(tallies, spend_sim, shared)
    assert all(not (home / ".budget").exists() for home in homes)


def test_a_refused_request_is_released_and_a_lost_reply_keeps_its_reservation(
    settings: Settings, sim_url: str
) -> None:
    with Researcher(_budgeted(settings, "1/day")) as researcher:
        estimate = researcher.estimate("What is asyncio.Queue?")
        inject_faults(sim_url, {"status": 400, "path": "/v1/agent"})
        with pytest.raises(PplxError) as refused:
            researcher.search("What is asyncio.Queue?")
        assert refused.value.code == "INVALID_INPUT"
        day = researcher.budget()[0]
        assert (day.spent, day.reserved) == (0.0, 0.0)  # the API refused it: nothing billed
        inject_faults(sim_url, {"disconnect_after": 0, "path": "/v1/agent", "times": 10})
        with pytest.raises(PplxError) as lost:
            researcher.search("What is asyncio.Queue?")
        assert lost.value.code == "NETWORK_ERROR"
        day = researcher.budget()[0]
        assert (day.spent, day.reserved) == (estimate.high, 0.0)  # it may have been billed
