"""The Search API client (``POST /search``): the request it sends, what it reads, its errors."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from perplexity.generated.api import ApiSearchRequestInput

from pplx_nb import Settings
from pplx_nb._errors import APIKeyInvalid, APIServerError, ValidationError
from pplx_nb.api import AsyncClient, Client
from pplx_nb.api.search import search_call

pytestmark = pytest.mark.anyio


def _mocked(reply: Any, status: int = 200, seen: list[dict[str, Any]] | None = None) -> AsyncClient:
    def handler(request: httpx2.Request) -> httpx2.Response:
        assert (request.method, request.url.path) == ("POST", "/search")
        if seen is not None:
            seen.append(json.loads(request.content))
        return httpx2.Response(status, json=reply)

    settings = Settings(
        api_key="pplx-k-123456789", base_url="http://api.test", offline=False, max_retries=0
    )
    return AsyncClient(settings, transport=httpx2.MockTransport(handler))


def test_the_request_is_what_the_official_sdk_defines_with_filters_at_the_top() -> None:
    call = search_call(
        "asyncio TaskGroup",
        max_results=5,
        search_domain_filter=["docs.python.org", "-example.com"],
        search_recency_filter="month",
        search_after_date_filter="01/31/2025",
        last_updated_before_filter="12/31/2025",
        search_mode="academic",
        country="gb",
        search_language_filter=["en"],
        max_tokens_per_page=512,
        search_context_size="low",
        search_before_date_filter=None,
    )
    body = json.loads(call.body or b"")
    assert (call.method, call.path) == ("POST", "/search")
    assert body["query"] == "asyncio TaskGroup" and body["max_results"] == 5
    assert body["country"] == "GB" and "search_before_date_filter" not in body
    parsed = ApiSearchRequestInput.model_validate(body)
    assert parsed.model_dump(exclude_none=True) == body
    several = json.loads(search_call([" gather ", "wait"], max_results=1).body or b"")
    assert several["query"] == ["gather", "wait"]


def test_a_web_address_in_the_domain_filter_is_sent_as_its_site() -> None:
    call = search_call(
        "q",
        search_domain_filter=["https://Docs.Python.org/3/library/", " -www.pinterest.com/pin/1 "],
        search_language_filter=["EN"],
    )
    body = json.loads(call.body or b"")
    assert body["search_domain_filter"] == ["docs.python.org", "-www.pinterest.com"]
    assert body["search_language_filter"] == ["en"]


@pytest.mark.parametrize(
    ("query", "options", "hint"),
    [
        ("", {}, "query"),
        (["a"] * 6, {}, "1 to 5"),
        ("q", {"max_results": 0}, "max_results"),
        ("q", {"max_results": True}, "max_results"),
        ("q", {"max_results": 21}, "1 to 20"),
        ("q", {"search_recency_filter": "decade"}, "hour"),
        ("q", {"search_domain_filter": "python.org"}, "list of domains"),
        ("q", {"last_updated_after_filter": "2025-01-31"}, "MM/DD/YYYY"),
        ("q", {"country": "GBR"}, "two-letter"),
        ("q", {"search_language_filter": "en"}, "ISO 639-1"),
        ("q", {"search_language_filter": ["en", None]}, "None in search_language_filter"),
        ("q", {"search_language_filter": ["en", 5]}, "5 in search_language_filter"),
        ("q", {"search_language_filter": ["english"]}, "not a language code"),
        ("q", {"search_domain_filter": ["-"]}, "'-' in search_domain_filter is not a domain"),
        ("q", {"search_domain_filter": ["javascript:alert(1)"]}, "is not a domain"),
        (
            "q",
            {"last_updated_after_filter": "02/01/2025", "last_updated_before_filter": "1/31/2025"},
            "last_updated_after_filter='02/01/2025' is later than last_updated_before_filter",
        ),
        ("q", {"max_tokens": -1}, "max_tokens"),
        ("q", {"search_context_size": "huge"}, "low, medium, high"),
        ("q", {"model": "sonar"}, "Unknown search filter"),
    ],
)
def test_bad_queries_and_filters_are_refused_with_the_fix(
    query: Any, options: dict[str, Any], hint: str
) -> None:
    with pytest.raises(ValidationError, match=hint):
        search_call(query, **options)


async def test_results_become_sources_in_rank_order_once_each_and_without_url_less_ones() -> None:
    page = {"title": "A", "url": "https://a.example/1", "snippet": "first", "date": "2025-01-02"}
    reply = {
        "id": "s-1",
        "results": [
            page,
            {"title": "no url", "url": None, "snippet": "x"},
            {"title": "B", "url": "https://b.example/", "snippet": "second", "date": None},
            {**page, "title": "A again"},
        ],
        "server_time": "2025-01-02T00:00:00Z",
    }
    seen: list[dict[str, Any]] = []
    async with _mocked(reply, seen=seen) as client:
        results = await client.web_search("q", max_results=3)
    assert [(s.title, s.url, s.date) for s in results] == [
        ("A", "https://a.example/1", "2025-01-02"),
        ("B", "https://b.example/", None),
    ]
    assert results.query == "q" and results.conversation_id is None
    assert seen == [{"query": "q", "max_results": 3}]


async def test_errors_are_coded_and_an_unreadable_reply_says_so() -> None:
    async with _mocked({"error": {"message": "bad key", "code": 401}}, status=401) as client:
        with pytest.raises(APIKeyInvalid):
            await client.web_search("q")
    async with _mocked({"id": "s-1"}) as client:
        with pytest.raises(APIServerError, match="search results"):
            await client.web_search("q")


def test_the_sync_client_searches_the_simulator(settings: Settings) -> None:
    with Client(settings) as client:
        results = client.web_search("json dumps", max_results=2)
    assert 1 <= len(results) <= 2 and all(s.url.startswith("https://") for s in results)
