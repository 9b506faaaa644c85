"""What the budget check costs a request: on a logs folder, and shared through Redis.

Times the ledger's two steps of one request — the check (:meth:`BudgetGuard.reserve`, which
refuses or reserves) and the settlement after the answer (:meth:`BudgetGuard.settle`) — on the
file ledger (a locked read-modify-write of ``.budget/ledger.json``) and the Redis one (one
script call each), counts the Redis round trips of whole requests, then times whole requests to
a simulator in another process (zero added latency) without caps and with each ledger, so the
check's cost sits next to the request it guards. Redis is Debian's ``redis-server`` on a free
loopback port, started here; without it the Redis rows say so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from bench._util import median, redis_server, round_trips, scratch, simulator, table
from pplx_nb import Settings
from pplx_nb.api import AsyncClient, Request
from pplx_nb.budget import BudgetGuard, CostEstimate, FileLedger, RedisLedger, parse_caps

TITLE = "Budget: the cost of the check per request"

RUNS = 5
STEPS = 500
REQUESTS = 200
_CAPS = parse_caps("1000000/day,1000000/month")
_ESTIMATE = CostEstimate(0.001, 0.004, 0.02, ("bench",))


def _steps(guard: BudgetGuard) -> tuple[float, float, float, float]:
    """Seconds per check and per settlement, over :data:`STEPS` requests one after another,
    and the Redis round trips of each (counting adds a call per command sent: noise)."""
    checking = settling = 0.0
    checks = settlements = 0
    with round_trips() as sent:
        for _ in range(STEPS):
            before = sent[0]
            start = time.perf_counter()
            hold = guard.reserve(_ESTIMATE, "search:low")
            checked = time.perf_counter()
            middle = sent[0]
            guard.settle(hold, 0.0026)
            settled = time.perf_counter()
            checks += middle - before
            settlements += sent[0] - middle
            checking += checked - start
            settling += settled - checked
    return checking / STEPS, settling / STEPS, checks / STEPS, settlements / STEPS


async def _requests(settings: Settings, guard: BudgetGuard | None, trips: list[int]) -> float:
    question = Request(messages=[{"role": "user", "content": "asyncio.TaskGroup"}], use_cache=False)
    async with AsyncClient(settings, budget=guard) as client:
        await client.ask(question)  # prices fetched, history read, scripts loaded
        with round_trips() as sent:
            start = time.perf_counter()
            for _ in range(REQUESTS):
                await client.ask(question)
            took = (time.perf_counter() - start) / REQUESTS
        trips.append(sent[0])
        return took


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def run() -> str:
    with scratch("bench-budget-") as folder, redis_server() as url, simulator() as sim:
        guards: dict[str, Callable[[], BudgetGuard | None]] = {
            "no caps (the default)": lambda: None,
            "logs folder (file ledger)": lambda: BudgetGuard(_CAPS, FileLedger(Path(folder))),
        }
        if url is not None:
            guards["Redis (one script per step)"] = lambda: BudgetGuard(_CAPS, RedisLedger(url))
        settings = Settings(base_url=sim, api_key="pplx-bench", offline=False, api_style="agent")
        steps: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n in guards}
        requests: dict[str, list[float]] = {name: [] for name in guards}
        trips: dict[str, list[int]] = {name: [] for name in guards}
        for _ in range(RUNS):
            for name, make in guards.items():
                guard = make()
                if guard is not None:
                    steps[name].append(_steps(guard))
                requests[name].append(asyncio.run(_requests(settings, guard, trips[name])))
    base = median(requests["no caps (the default)"])
    rows = []
    for name in guards:
        per_request = median(requests[name])
        cells = ["—", "—", "0 / 0"]
        if steps[name]:
            check, settle, check_trips, settle_trips = (
                median([run[n] for run in steps[name]]) for n in range(4)
            )
            cells = [_us(check), _us(settle), f"{check_trips:g} / {settle_trips:g}"]
        rows.append(
            [
                name,
                *cells,
                f"{median(trips[name]) / REQUESTS:.2f}",
                f"{per_request * 1e3:.2f} ms",
                f"{(per_request - base) * 1e3:+.2f} ms",
            ]
        )
    if url is None:
        rows.append(["Redis", "redis-server not installed", "", "", "", "", ""])
    header = [
        "ledger",
        "the check (reserve)",
        "the settlement",
        "Redis round trips: check / settlement",
        "Redis round trips per request, whole",
        "one request to the simulator",
        "vs no caps",
    ]
    return (
        f"Median of {RUNS} interleaved runs: {STEPS:,} checks each followed by its settlement, "
        f"called directly; then {REQUESTS} sequential answers from a simulator in another "
        "process with no added latency (a real API answers in seconds), through "
        "`AsyncClient(budget=…)`.\n\n" + table(header, rows) + "\n\n"
        "On a logs folder the check is one locked read of `.budget/ledger.jsonl` (a snapshot "
        "and the steps since) and one appended line; on Redis one `EVALSHA` (targets: ≤ 1 ms, "
        "≤ 1 round trip). The settlement after the answer is one more of each; a kind's cost "
        "history, which narrows estimates, is read once a minute. Without caps nothing is "
        "read or written."
    )
