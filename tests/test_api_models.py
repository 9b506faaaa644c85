"""Model prices from ``GET /v1/models``: fetched once, cached on disk for a day, the static table
when the endpoint fails; used to estimate the cost of answers that report none."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from pplx_nb import Researcher, Settings
from pplx_nb._models import Usage
from pplx_nb._pricing import PRICES, Price, estimate_cost
from pplx_nb.api import AsyncClient, Request
from pplx_nb.api.models import FETCH_TIMEOUT, parse_prices, prices_path
from pplx_nb.sim import inject_faults, stats

pytestmark = pytest.mark.anyio

MODELS = "GET /v1/models"


def question() -> Request:
    return Request(messages=[{"role": "user", "content": "What is BM25?"}], use_cache=False)


@pytest.fixture
def priced(settings: Settings, tmp_path: Path) -> Settings:
    """Settings whose cache folder is the test's own."""
    return settings.model_copy(update={"cache_home": tmp_path / "cache"})


def no_cost_next(url: str, times: int = 1) -> None:
    """The next answers report usage with a null cost (the simulator's ``odd`` shapes)."""
    inject_faults(url, {"odd": True, "path": "/v1/agent", "times": times})


async def test_an_answer_without_cost_is_estimated_from_the_fetched_prices(
    priced: Settings, sim_url: str
) -> None:
    no_cost_next(sim_url, times=2)
    async with AsyncClient(priced) as client:
        first = await client.ask(question())
        second = await client.ask(question())
    assert stats(sim_url)["requests"].get(MODELS) == 1, "fetched once per client"
    for answer in (first, second):
        assert answer.cost is not None and answer.cost.estimated
        assert answer.cost.total_cost == estimate_cost(answer.model, answer.usage).total_cost
    cached = json.loads(prices_path(priced.cache_dir(), sim_url).read_text())
    assert "openai/gpt-5-mini" in parse_prices(cached["models"])


async def test_an_answer_with_its_cost_does_not_fetch_prices(
    priced: Settings, sim_url: str
) -> None:
    async with AsyncClient(priced) as client:
        answer = await client.ask(question())
    assert answer.cost is not None and not answer.cost.estimated
    assert MODELS not in stats(sim_url)["requests"]


def test_another_process_reads_the_disk_cache(priced: Settings, sim_url: str) -> None:
    script = (
        "import asyncio, json, sys\n"
        "from pplx_nb import Settings\n"
        "from pplx_nb.api import AsyncClient\n"
        "async def main():\n"
        "    async with AsyncClient(Settings.model_validate_json(sys.argv[1])) as client:\n"
        "        prices = await client.prices.get()\n"
        "    print(json.dumps({k: list(v) for k, v in prices.items()}))\n"
        "asyncio.run(main())\n"
    )
    config = priced.model_dump_json(include={"base_url", "offline", "cache_home"})
    runs = [
        subprocess.run(
            [sys.executable, "-c", script, config],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        for _ in range(2)
    ]
    first, second = (json.loads(run.stdout) for run in runs)
    assert first == second and "perplexity/sonar" in first
    assert stats(sim_url)["requests"][MODELS] == 1, "the second process read the disk cache"


async def test_cached_prices_price_the_estimate(priced: Settings, sim_url: str) -> None:
    listing = {
        "object": "list",
        "data": [{"id": "openai/gpt-5-mini", "pricing": {"input": 100.0, "output": 200.0}}],
    }
    path = prices_path(priced.cache_dir(), sim_url)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"fetchedAt": time.time(), "models": listing}))
    no_cost_next(sim_url)
    async with AsyncClient(priced) as client:
        answer = await client.ask(question())
    assert answer.usage is not None and answer.cost is not None
    tokens = answer.usage.prompt_tokens * 100.0 + answer.usage.completion_tokens * 200.0
    tools = sum((answer.cost.tool_costs or {}).values())
    assert answer.cost.total_cost == pytest.approx(tokens / 1e6 + tools, abs=2e-6)
    assert MODELS not in stats(sim_url)["requests"]


async def test_a_stale_cache_is_fetched_again(priced: Settings, sim_url: str) -> None:
    path = prices_path(priced.cache_dir(), sim_url)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"fetchedAt": time.time() - 2 * 86400, "models": {}}))
    async with AsyncClient(priced) as client:
        assert "perplexity/sonar" in await client.prices.get()
    assert stats(sim_url)["requests"][MODELS] == 1
    assert json.loads(path.read_text())["fetchedAt"] > time.time() - 60


@pytest.mark.parametrize("fault", [{"status": 503, "times": 5}, {"hang": 30.0}])
async def test_when_the_endpoint_fails_the_static_table_prices_it_without_delay(
    priced: Settings, sim_url: str, fault: dict[str, Any]
) -> None:
    inject_faults(sim_url, {**fault, "path": "/v1/models"})
    no_cost_next(sim_url)
    started = time.monotonic()
    async with AsyncClient(priced) as client:
        answer = await client.ask(question())
    elapsed = time.monotonic() - started
    assert answer.cost is not None and answer.cost.estimated
    assert answer.cost.total_cost == estimate_cost(answer.model, answer.usage).total_cost
    assert stats(sim_url)["requests"][MODELS] == 1, "one attempt, never retried"
    assert elapsed < FETCH_TIMEOUT + 10
    assert not prices_path(priced.cache_dir(), sim_url).exists()


def test_listed_prices_are_read_per_million_tokens() -> None:
    body = {
        "data": [
            {"id": "a/m", "pricing": {"unit": "1M tokens", "input": 1, "output": 2}},
            {"id": "b/m", "pricing": {"unit": "1K tokens", "input": 0.001, "output": 0.002}},
            {"id": "c/m", "pricing": {"unit": "image", "input": 1, "output": 1}},
            {"id": "d/m", "object": "model"},
            {"id": "e/m", "pricing": {"input": "free", "output": 1}},
        ]
    }
    prices = parse_prices(body)
    assert prices == {"a/m": Price(1.0, 2.0), "b/m": Price(1.0, 2.0)}
    assert parse_prices([]) == {} and parse_prices({"data": "x"}) == {}
    assert PRICES["perplexity/sonar"].input_per_m == 0.25


def test_listed_prices_that_are_not_finite_numbers_are_left_out() -> None:
    body = json.loads(
        '{"data": ['
        '{"id": "inf/m", "pricing": {"input": 1e999, "output": 2}},'
        '{"id": "nan/m", "pricing": {"input": NaN, "output": 2}},'
        '{"id": "huge/m", "pricing": {"unit": "token", "input": 1e308, "output": 1}},'
        '{"id": "bigint/m", "pricing": {"input": 1' + "0" * 400 + ', "output": 1}},'
        '{"id": "unit/m", "pricing": {"unit": ["1M tokens"], "input": 1, "output": 1}},'
        '{"id": "cache/m", "pricing": {"input": 1, "output": 2, "cache_read": -Infinity}},'
        "null, 5, []]}"
    )
    assert parse_prices(body) == {"cache/m": Price(1.0, 2.0)}


DAMAGED_CACHES = {
    "no models": lambda now: json.dumps({"fetchedAt": now}),
    "models null": lambda now: json.dumps({"fetchedAt": now, "models": None}),
    "models a list": lambda now: json.dumps({"fetchedAt": now, "models": [1, 2]}),
    "an infinite price": lambda now: (
        f'{{"fetchedAt": {now}, "models": {{"data": [{{"id": "openai/gpt-5-mini", '
        '"pricing": {"input": 1e999, "output": 2}}]}}'
    ),
    "a price that overflows once scaled": lambda now: json.dumps(
        {
            "fetchedAt": now,
            "models": {
                "data": [
                    {
                        "id": "openai/gpt-5-mini",
                        "pricing": {"unit": "token", "input": 1e308, "output": 1},
                    }
                ]
            },
        }
    ),
    "fetched at infinity": lambda now: (
        '{"fetchedAt": Infinity, "models": {"data": [{"id": "openai/gpt-5-mini", '
        '"pricing": {"input": 100, "output": 200}}]}}'
    ),
    "fetched in the future": lambda now: json.dumps(
        {
            "fetchedAt": now + 86400 * 365,
            "models": {
                "data": [{"id": "openai/gpt-5-mini", "pricing": {"input": 100, "output": 200}}]
            },
        }
    ),
    "not an object": lambda now: "[1, 2, 3]",
}


@pytest.mark.parametrize("damage", list(DAMAGED_CACHES))
def test_a_damaged_price_cache_neither_fails_nor_loses_the_paid_answer(
    priced: Settings, sim_url: str, damage: str
) -> None:
    """The answer reports usage but no cost, so it is priced from the cache: whatever the
    cache holds, the answer is stored once, priced as the static table (and the simulator's
    listing) price it, and no second request is paid for."""
    path = prices_path(priced.cache_dir(), sim_url)
    path.parent.mkdir(parents=True)
    path.write_text(DAMAGED_CACHES[damage](time.time()))
    no_cost_next(sim_url)
    with Researcher(priced) as researcher:
        answer = researcher.search("What is BM25?", use_cache=False)
        stored = researcher.history(answer.conversation_id or "").messages
    assert answer.cost is not None and answer.cost.estimated
    assert answer.cost.total_cost == estimate_cost(answer.model, answer.usage).total_cost
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[-1].cost is not None and stored[-1].cost.total_cost == answer.cost.total_cost
    assert stats(sim_url)["generations"] == 1


def test_an_infinite_listed_price_or_reported_cost_leaves_a_storable_cost(
    settings: Settings,
) -> None:
    """``GET /v1/models`` lists 1e999 (infinity once parsed) for the model; the first answer
    reports usage and no cost, the next a cost of 1e999: both are stored, estimated from the
    static table."""
    answers = [
        b'{"id": "resp_1", "object": "response", "created_at": 0, "status": "completed", '
        b'"model": "openai/gpt-5-mini", "output": [{"type": "message", "role": "assistant", '
        b'"content": [{"type": "output_text", "text": "BM25 ranks [1].", "annotations": []}]}],'
        b' "usage": {"input_tokens": 1000, "output_tokens": 100, "total_tokens": 1100%s}}' % cost
        for cost in (b"", b', "cost": {"currency": "USD", "total_cost": 1e999}')
    ]
    models = (
        b'{"object": "list", "data": [{"id": "openai/gpt-5-mini", "object": "model", '
        b'"created": 0, "owned_by": "openai", "pricing": {"input": 1e999, "output": 2}}]}'
    )
    asked: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        # Every answer after the first (a follow-up's rewrite too) reports the infinite cost.
        asked.append(request.url.path)
        body = models if request.url.path == "/v1/models" else answers[min(len(asked) - 1, 1)]
        return httpx2.Response(200, content=body, headers={"content-type": "application/json"})

    tuned = settings.model_copy(update={"cache_home": settings.logs_dir().parent / "cache"})
    client = AsyncClient(tuned, transport=httpx2.MockTransport(handler))
    expected = estimate_cost("openai/gpt-5-mini", Usage(prompt_tokens=1000, completion_tokens=100))
    with Researcher(tuned, client=client) as researcher:
        first = researcher.search("What is BM25?", use_cache=False)
        second = researcher.followup(first.conversation_id or "", "And BM25F?", use_cache=False)
        stored = researcher.history(first.conversation_id or "").messages
    for answer in (first, second):
        assert answer.cost is not None and answer.cost.estimated
        assert answer.cost.total_cost == expected.total_cost
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert all(m.cost == expected for m in stored if m.role == "assistant")
