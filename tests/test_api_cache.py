"""The response cache: LRU and TTL eviction, byte cap, statistics, and its use by the client."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pplx_nb import Settings
from pplx_nb._models import Answer, Source
from pplx_nb.api import AsyncClient, CacheStats, Request, ResponseCache
from pplx_nb.api.cache import cache_key
from pplx_nb.sim import stats

# Sonar-style tests need the simulator's Sonar mode (the live API answers them 403).
pytestmark = [pytest.mark.anyio, pytest.mark.sim_sonar]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def answer(text: str = "text") -> Answer:
    return Answer(text=text, sources=[Source(url="https://a.example/")])


def test_miss_then_hit_returns_a_copy_marked_cached() -> None:
    cache = ResponseCache(ttl=60, max_size=10)
    assert cache.get("k") is None
    cache.put("k", answer("one"), 100)
    hit = cache.get("k")
    assert hit is not None and hit.text == "one" and hit.cached is True
    assert cache.stats() == CacheStats(
        hits=1, misses=1, hit_rate=0.5, evictions=0, entries=1, bytes=100
    )


def test_callers_cannot_change_what_is_cached() -> None:
    cache = ResponseCache()
    original = answer("one")
    cache.put("k", original, 10)
    original.text = "changed"
    first = cache.get("k")
    assert first is not None and first.text == "one"
    first.sources.append(Source(url="https://b.example/"))
    first.conversation_id = "20250101-0000000000000"
    second = cache.get("k")
    assert second is not None and len(second.sources) == 1 and second.conversation_id is None


def test_entries_expire_after_ttl() -> None:
    clock = Clock()
    cache = ResponseCache(ttl=10, max_size=10, clock=clock)
    cache.put("k", answer(), 10)
    clock.now += 9.9
    assert cache.get("k") is not None
    clock.now += 0.2
    assert cache.get("k") is None
    assert cache.stats().entries == 0 and cache.stats().bytes == 0


def test_least_recently_used_is_evicted_first() -> None:
    cache = ResponseCache(ttl=60, max_size=2)
    cache.put("a", answer("a"), 1)
    cache.put("b", answer("b"), 1)
    assert cache.get("a") is not None
    cache.put("c", answer("c"), 1)
    assert cache.get("b") is None
    assert cache.get("a") is not None and cache.get("c") is not None
    assert cache.stats().evictions == 1


def test_byte_cap_evicts_and_oversized_entries_are_not_stored() -> None:
    cache = ResponseCache(ttl=60, max_size=100, max_bytes=1000)
    cache.put("a", answer(), 600)
    cache.put("b", answer(), 600)
    assert cache.get("a") is None and cache.get("b") is not None
    cache.put("huge", answer(), 5000)
    assert cache.get("huge") is None
    assert cache.stats().bytes == 600


def test_replacing_a_key_does_not_count_its_bytes_twice() -> None:
    cache = ResponseCache()
    cache.put("a", answer(), 100)
    cache.put("a", answer(), 300)
    assert cache.stats().bytes == 300 and len(cache) == 1


def test_zero_size_or_ttl_disables_caching() -> None:
    for cache in (ResponseCache(max_size=0), ResponseCache(ttl=0)):
        cache.put("a", answer(), 1)
        assert not cache.enabled and cache.get("a") is None


def test_key_depends_on_style_base_url_and_body() -> None:
    base = cache_key("agent", "http://x", "/v1/agent", b"{}")
    assert base == cache_key("agent", "http://x", "/v1/agent", b"{}")
    assert base != cache_key("sonar", "http://x", "/v1/agent", b"{}")
    assert base != cache_key("agent", "http://y", "/v1/agent", b"{}")
    assert base != cache_key("agent", "http://x", "/v1/agent", b'{"a":1}')


def test_concurrent_use_from_threads_keeps_counts_consistent() -> None:
    cache = ResponseCache(ttl=60, max_size=50)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for n in range(300):
                key = f"k{(worker * 7 + n) % 80}"
                if cache.get(key) is None:
                    cache.put(key, answer(key), 10)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = cache.stats()
    assert not errors
    assert result.hits + result.misses == 8 * 300
    assert result.entries <= 50 and result.bytes == result.entries * 10


def question(text: str = "What does json.dumps do?", **options: Any) -> Request:
    return Request(messages=[{"role": "user", "content": text}], **options)


@pytest.mark.parametrize("style", ["sonar", "agent"])
async def test_identical_requests_reach_the_api_once(
    settings: Settings, sim_url: str, style: str
) -> None:
    async with AsyncClient(settings.model_copy(update={"api_style": style})) as client:
        first = await client.ask(question())
        second = await client.ask(question())
        other = await client.ask(question("What does json.loads do?"))
        fresh = await client.ask(question(use_cache=False))
    assert not first.cached and second.cached and not other.cached and not fresh.cached
    assert second.text == first.text and second.sources == first.sources
    assert stats(sim_url)["generations"] == 3
    assert client.cache.stats().hits == 1


async def test_streaming_bypasses_the_cache(settings: Settings, sim_url: str) -> None:
    async with AsyncClient(settings) as client:
        await client.ask(question())
        async for _ in client.stream(question()):
            pass
    assert stats(sim_url)["generations"] == 2
    assert client.cache.stats().hits == 0


async def test_clients_can_share_one_cache(settings: Settings, sim_url: str) -> None:
    shared = ResponseCache(ttl=60, max_size=10)
    async with (
        AsyncClient(settings, cache=shared) as one,
        AsyncClient(settings, cache=shared) as two,
    ):
        await one.ask(question())
        assert (await two.ask(question())).cached
    assert stats(sim_url)["generations"] == 1


async def test_settings_size_the_default_cache(settings: Settings, sim_url: str) -> None:
    off = settings.model_copy(update={"cache_max_size": 0})
    async with AsyncClient(off) as client:
        await client.ask(question())
        assert not (await client.ask(question())).cached
    assert stats(sim_url)["generations"] == 2
