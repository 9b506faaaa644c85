"""One process spending against a shared budget: ``python -m support.spender``.

Settings come from the environment (the simulator's URL, ``PPLX_NB_BUDGET``, the logs folder or
``PPLX_NB_STORE``), as in any kernel or MCP server. Four loops run at once — searches, deep
research answered on the spot, deep research queued as a job (run by this process's worker) and
Search API requests — each until a cap refuses it three times in a row. Prints one JSON object:
per kind, the calls answered, the calls refused (BUDGET_EXCEEDED), other errors (``code:
message``) and the sum of the costs of the answers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from pplx_nb import Answer, BudgetExceeded, PplxError, Researcher, Settings

REFUSALS_IN_A_ROW = 3
MAX_CALLS = 200


async def _loop(kind: str, call: Callable[[int], Awaitable[float]]) -> dict[str, Any]:
    tally: dict[str, Any] = {"kind": kind, "answered": 0, "refused": 0, "errors": [], "cost": 0}
    in_a_row = 0
    for n in range(MAX_CALLS):
        try:
            tally["cost"] += round(await call(n) * 1e6)
        except BudgetExceeded:
            tally["refused"] += 1
            in_a_row += 1
            if in_a_row == REFUSALS_IN_A_ROW:
                break
            continue
        except PplxError as exc:
            tally["errors"].append(f"{exc.code}: {exc}")
            continue
        tally["answered"] += 1
        in_a_row = 0
    return tally


def _cost(answer: Answer) -> float:
    assert answer.cost is not None, "the simulator reports every answer's cost"
    return answer.cost.total_cost


async def main() -> None:
    """Spend until the caps stop every kind of request; print the tallies."""
    researcher = Researcher(Settings.from_env(), async_deep_research=True)
    topics = ["asyncio tasks", "pathlib globbing", "json decoding", "itertools groupby"]

    async def search(n: int) -> float:
        return _cost(await researcher.asearch(f"How do {topics[n % 4]} work? ({n})"))

    async def research(n: int) -> float:
        answer = await researcher.adeep_research(f"Explain {topics[n % 4]} ({n})", wait=True)
        assert isinstance(answer, Answer)
        return _cost(answer)

    async def job(n: int) -> float:
        queued = await researcher.adeep_research(f"Survey {topics[n % 4]} ({n})", wait=False)
        assert not isinstance(queued, Answer)
        return _cost(await researcher.await_job(queued.conversation_id, timeout=120))

    async def web(n: int) -> float:
        await researcher.aweb_search(f"{topics[n % 4]} {n}")
        return 0.005

    loops = [("search", search), ("research", research), ("job", job), ("web", web)]
    tallies = await asyncio.gather(*(_loop(kind, call) for kind, call in loops))
    print(json.dumps({tally.pop("kind"): tally for tally in tallies}))
    researcher.close()


if __name__ == "__main__":
    asyncio.run(main())
