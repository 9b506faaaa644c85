"""API client throughput: pplx_nb's AsyncClient against raw httpx2 and the two official SDKs.

Each contender sends the same Sonar chat-completions request 500 times, 16 at a time, to a
zero-latency simulator running in its OWN process (``python -m pplx_nb.sim --latency-ms 0``), and
reads the answer: text and sources. Within each run the 500 requests go in 5 batches of 100 and
the contenders take turns batch by batch, so drift on this shared machine hits all of them
alike. The table shows the median req/s of the runs and the median of the per-run ratios
(pplx_nb against each contender in the same run), which noise affects least.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2

from bench._util import median, simulator, table

TITLE = "API client throughput (500 requests, concurrency 16)"

REQUESTS = 500
CONCURRENCY = 16
RUNS = 11  # the paired ratio moves ±5% between runs on this 2-core box
BATCHES = 5
WARMUP = 32
KEY = "pplx-bench-key-0000000000"
MODEL = "sonar-pro"
MESSAGES = [{"role": "user", "content": "How do I run coroutines concurrently with asyncio?"}]

OURS = "pplx_nb AsyncClient"

Ask = Callable[[], Awaitable[Any]]


async def _seconds(ask: Ask, count: int) -> float:
    """Wall-clock seconds for ``count`` calls of ``ask``, CONCURRENCY at a time."""
    remaining = count

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await ask()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return time.perf_counter() - started


async def _contenders(url: str) -> tuple[dict[str, Ask], list[Callable[[], Awaitable[Any]]]]:
    from openai import AsyncOpenAI
    from perplexity import AsyncPerplexity

    from pplx_nb import Settings
    from pplx_nb.api import AsyncClient, Request

    settings = Settings(
        api_key=KEY, base_url=url, api_style="sonar", cache_max_size=0, model=MODEL, offline=False
    )
    ours = AsyncClient(settings)
    request = Request(messages=MESSAGES, model=MODEL, use_cache=False)
    raw = httpx2.AsyncClient(base_url=url, headers={"authorization": f"Bearer {KEY}"})
    openai_sdk = AsyncOpenAI(base_url=url, api_key=KEY)
    pplx_sdk = AsyncPerplexity(base_url=url, api_key=KEY)

    async def pplx_nb_ask() -> Any:
        answer = await ours.ask(request)
        return answer.text, answer.sources

    async def raw_ask() -> Any:
        response = await raw.post("/chat/completions", json={"model": MODEL, "messages": MESSAGES})
        response.raise_for_status()
        data = response.json()
        return data["choices"][0]["message"]["content"], data["search_results"]

    async def openai_ask() -> Any:
        completion = await openai_sdk.chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]
        extra = completion.model_extra or {}
        return completion.choices[0].message.content, extra.get("search_results")

    async def pplx_sdk_ask() -> Any:
        completion = await pplx_sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
        return completion.choices[0].message.content, completion.search_results

    asks: dict[str, Ask] = {
        OURS: pplx_nb_ask,
        "raw httpx2.AsyncClient": raw_ask,
        "openai AsyncOpenAI": openai_ask,
        "perplexityai AsyncPerplexity": pplx_sdk_ask,
    }
    closers: list[Callable[[], Awaitable[Any]]] = [
        ours.aclose,
        raw.aclose,
        openai_sdk.close,
        pplx_sdk.close,
    ]
    return asks, closers


async def _measure(url: str) -> dict[str, list[float]]:
    asks, closers = await _contenders(url)
    results: dict[str, list[float]] = {name: [] for name in asks}
    try:
        for ask in asks.values():
            for _ in range(WARMUP):
                await ask()
        for run in range(RUNS):
            spent = dict.fromkeys(asks, 0.0)
            for batch in range(BATCHES):
                order = list(asks.items())
                shift = (run + batch) % len(order)
                for name, ask in order[shift:] + order[:shift]:
                    spent[name] += await _seconds(ask, REQUESTS // BATCHES)
            for name, seconds in spent.items():
                results[name].append(REQUESTS / seconds)
    finally:
        for close in closers:
            await close()
    return results


def run() -> str:
    """Measure every contender; the Markdown section for RESULTS.md."""
    with simulator() as url:
        results = asyncio.run(_measure(url))
    ours_runs = results[OURS]
    medians = {name: median(values) for name, values in results.items()}
    paired = {
        name: median([a / b for a, b in zip(ours_runs, values, strict=True)])
        for name, values in results.items()
    }
    rows = [
        (
            f"**{name}**" if name == OURS else name,
            f"{value:,.0f}",
            f"{min(results[name]):,.0f}–{max(results[name]):,.0f}",
            f"{paired[name]:.2f}×",
        )
        for name, value in sorted(medians.items(), key=lambda item: -item[1])
    ]
    raw = paired["raw httpx2.AsyncClient"]
    sdk = min(paired["openai AsyncOpenAI"], paired["perplexityai AsyncPerplexity"])
    verdict = (
        f"pplx_nb does **{raw:.2f}×** the throughput of raw httpx2 (target ≥ 0.90×) and at least "
        f"**{sdk:.2f}×** that of either SDK (target ≥ 1.00×), while also mapping sources, usage "
        "and cost into typed models and handling retries."
    )
    return "\n\n".join(
        [
            f"Simulator in its own process, zero latency; {REQUESTS} requests at concurrency "
            f"{CONCURRENCY} (in {BATCHES} batches, contenders taking turns); median of {RUNS} "
            "runs; cache off.",
            table(["client", "req/s (median)", "range", "pplx_nb ÷ it (median of runs)"], rows),
            "Absolute req/s swing with the load other processes put on the machine (see the "
            "ranges); the ratio column compares contenders within each run, so it is the figure "
            "to read.",
            verdict,
        ]
    )
