"""AsyncClient and Client over real HTTP against the simulator: retries, failures, sync use."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from pplx_nb import Settings
from pplx_nb._config import DEFAULT_BASE_URL
from pplx_nb._errors import (
    APIError,
    APIKeyInvalid,
    APIQuotaExceeded,
    APIServerError,
    APITimeoutError,
    InvalidInput,
    NetworkError,
    SubmissionUnknown,
)
from pplx_nb._models import Answer
from pplx_nb.api import AsyncClient, Client, Request, RetryPolicy
from pplx_nb.sim import inject_faults, serve, stats

STYLES = ["sonar", "agent"]
CHAT_PATH = {"sonar": "POST /chat/completions", "agent": "POST /v1/agent"}
# Sonar-style tests need the simulator's Sonar mode (the live API answers them 403).
pytestmark = [pytest.mark.anyio, pytest.mark.sim_sonar]


def question(text: str = "How does asyncio.gather work?", **options: Any) -> Request:
    return Request(messages=[{"role": "user", "content": text}], use_cache=False, **options)


def client_for(settings: Settings, style: str, **changes: Any) -> AsyncClient:
    tuned = settings.model_copy(update={"api_style": style, **changes})
    return AsyncClient(tuned, retry=RetryPolicy(tuned.max_retries, base=0.01, cap=0.05))


def mocked(
    handler: Callable[[httpx2.Request], httpx2.Response], style: str = "sonar", **changes: Any
) -> AsyncClient:
    """A client whose requests go to ``handler`` instead of the network."""
    settings = Settings(
        api_key="pplx-k-123456789",
        base_url="http://api.test",
        api_style=style,
        offline=False,
        **changes,
    )
    return AsyncClient(settings, transport=httpx2.MockTransport(handler))


async def collect(client: AsyncClient, request: Request) -> tuple[list[str], Answer]:
    deltas: list[str] = []
    final: list[Answer] = []
    async for item in client.stream(request):
        if isinstance(item, str):
            assert not final, "text arrived after the final answer"
            deltas.append(item)
        else:
            final.append(item)
    assert len(final) == 1
    return deltas, final[0]


async def outcome(client: AsyncClient, request: Request, streamed: bool) -> Answer:
    if streamed:
        return (await collect(client, request))[1]
    return await client.ask(request)


def chat_requests(url: str, style: str) -> int:
    return int(stats(url)["requests"].get(CHAT_PATH[style], 0))


@pytest.mark.parametrize("style", STYLES)
async def test_ask_returns_cited_answer(settings: Settings, style: str) -> None:
    async with client_for(settings, style) as client:
        answer = await client.ask(question())
    assert "asyncio.gather" in answer.text
    assert answer.sources and answer.sources[0].url.startswith("https://docs.python.org/")
    assert answer.usage is not None and answer.usage.total_tokens > 0
    assert answer.cost is not None and not answer.cost.estimated and answer.cost.total_cost > 0
    assert answer.response_id


@pytest.mark.parametrize("style", STYLES)
async def test_stream_yields_deltas_then_one_answer_with_same_text(
    settings: Settings, style: str
) -> None:
    async with client_for(settings, style) as client:
        deltas, answer = await collect(client, question())
    assert len(deltas) > 3
    assert "".join(deltas).strip() == answer.text.strip()
    assert answer.sources


@pytest.mark.parametrize("style", STYLES)
async def test_reasoning_model_thinking_is_kept_out_of_text(settings: Settings, style: str) -> None:
    async with client_for(settings, style) as client:
        answer = await client.ask(question(model="sonar-reasoning-pro"))
        deltas, streamed = await collect(client, question(model="sonar-reasoning-pro"))
    for text in (answer.text, streamed.text, "".join(deltas)):
        assert "<think>" not in text and "</think>" not in text
    if style == "sonar":
        assert answer.thinking and "Searching the offline corpus" in answer.thinking
        assert streamed.thinking == answer.thinking


@pytest.mark.parametrize("style", STYLES)
async def test_related_questions_come_back_as_a_list(settings: Settings, style: str) -> None:
    async with client_for(settings, style) as client:
        answer = await client.ask(question(return_related_questions=True))
        deltas, streamed = await collect(client, question(return_related_questions=True))
    assert len(answer.related_questions) == 3
    assert streamed.related_questions == answer.related_questions
    for text in (answer.text, streamed.text, "".join(deltas)):
        assert "Related questions" not in text


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("style", STYLES)
async def test_429_with_retry_after_is_waited_out(
    settings: Settings, sim_url: str, style: str, streamed: bool
) -> None:
    inject_faults(sim_url, {"status": 429, "retry_after": 0.2})
    async with client_for(settings, style) as client:
        started = time.monotonic()
        answer = await outcome(client, question(), streamed)
    assert answer.text
    assert time.monotonic() - started >= 0.2
    assert chat_requests(sim_url, style) == 2


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("style", STYLES)
async def test_503_twice_then_success(
    settings: Settings, sim_url: str, style: str, streamed: bool
) -> None:
    inject_faults(sim_url, {"status": 503, "times": 2})
    async with client_for(settings, style) as client:
        answer = await outcome(client, question(), streamed)
    assert answer.sources
    assert chat_requests(sim_url, style) == 3


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("style", STYLES)
async def test_persistent_500_gives_server_error_after_max_retries(
    settings: Settings, sim_url: str, style: str, streamed: bool
) -> None:
    inject_faults(sim_url, {"status": 500, "times": 50})
    async with client_for(settings, style, max_retries=2) as client:
        with pytest.raises(APIServerError) as caught:
            await outcome(client, question(), streamed)
    assert caught.value.code == "API_SERVER_ERROR"
    assert caught.value.status_code == 500
    assert "after 2 retries" in caught.value.message
    assert ".." not in caught.value.message, caught.value.message
    assert chat_requests(sim_url, style) == 3


async def test_429_after_retries_is_quota_exceeded(settings: Settings, sim_url: str) -> None:
    inject_faults(sim_url, {"status": 429, "retry_after_ms": 10, "times": 10})
    async with client_for(settings, "agent", max_retries=1) as client:
        with pytest.raises(APIQuotaExceeded) as caught:
            await client.ask(question())
    assert caught.value.code == "API_QUOTA_EXCEEDED"
    assert chat_requests(sim_url, "agent") == 2


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("style", STYLES)
async def test_401_html_page_is_an_invalid_key_with_instructions(
    settings: Settings, sim_url: str, style: str, streamed: bool
) -> None:
    inject_faults(sim_url, {"html": True})
    async with client_for(settings, style) as client:
        with pytest.raises(APIKeyInvalid) as caught:
            await outcome(client, question(), streamed)
    assert caught.value.code == "API_KEY_INVALID"
    assert caught.value.status_code == 401
    assert "PERPLEXITY_API_KEY" in caught.value.message
    assert "<html" not in caught.value.message.lower()
    assert chat_requests(sim_url, style) == 1


@pytest.mark.parametrize("style", STYLES)
async def test_wrong_key_is_refused_by_a_keyed_server(style: str) -> None:
    with serve(latency_ms=0, api_key="pplx-the-right-key-000", sonar=True) as url:
        wrong = Settings(
            api_key="pplx-the-wrong-key-111", base_url=url, api_style=style, offline=False
        )
        async with AsyncClient(wrong) as client:
            with pytest.raises(APIKeyInvalid):
                await client.ask(question())
        right = Settings(
            api_key="pplx-the-right-key-000", base_url=url, api_style=style, offline=False
        )
        async with AsyncClient(right) as client:
            assert (await client.ask(question())).text


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("style", STYLES)
async def test_hang_times_out_within_the_timeout(
    settings: Settings, sim_url: str, style: str, streamed: bool
) -> None:
    inject_faults(sim_url, {"hang": 5})
    async with client_for(settings, style, timeout_ms=400) as client:
        started = time.monotonic()
        with pytest.raises(APITimeoutError) as caught:
            await outcome(client, question(), streamed)
    assert caught.value.code == "TIMEOUT_ERROR"
    assert 0.35 <= time.monotonic() - started < 1.5
    assert "PERPLEXITY_TIMEOUT" in caught.value.message


@pytest.mark.parametrize("style", STYLES)
async def test_a_trickling_body_times_out_within_the_whole_request_timeout(
    settings: Settings, sim_url: str, style: str
) -> None:
    inject_faults(sim_url, {"trickle": 0.3})
    async with client_for(settings, style, timeout_ms=1_000) as client:
        started = time.monotonic()
        with pytest.raises(APITimeoutError):
            await client.ask(question())
        elapsed = time.monotonic() - started
    assert elapsed < 1.8
    assert chat_requests(sim_url, style) == 1


async def test_request_timeout_overrides_settings(settings: Settings, sim_url: str) -> None:
    inject_faults(sim_url, {"hang": 5})
    async with client_for(settings, "sonar", timeout_ms=60_000) as client:
        started = time.monotonic()
        with pytest.raises(APITimeoutError):
            await client.ask(question(timeout_ms=300))
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize("style", STYLES)
async def test_stream_cut_midway_is_a_network_error_not_a_short_answer(
    settings: Settings, sim_url: str, style: str
) -> None:
    # Cut after some text went out (sonar: 3 chunks; agent: 10 events), so no retry may hide it.
    inject_faults(sim_url, {"disconnect_after": 3 if style == "sonar" else 10})
    deltas: list[str] = []
    async with client_for(settings, style) as client:
        with pytest.raises(NetworkError) as caught:
            async for item in client.stream(question()):
                assert isinstance(item, str), "a truncated answer was returned"
                deltas.append(item)
    assert deltas
    assert caught.value.code == "NETWORK_ERROR"
    assert chat_requests(sim_url, style) == 1


@pytest.mark.parametrize("style", STYLES)
async def test_stream_cut_before_any_text_is_retried(
    settings: Settings, sim_url: str, style: str
) -> None:
    inject_faults(sim_url, {"disconnect_after": 0})
    async with client_for(settings, style) as client:
        deltas, answer = await collect(client, question())
    assert "".join(deltas).strip() == answer.text.strip()
    assert chat_requests(sim_url, style) == 2


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("streamed", [False, True])
async def test_unusual_but_legal_response_shapes_are_read(
    settings: Settings, sim_url: str, style: str, streamed: bool
) -> None:
    async with client_for(settings, style) as client:
        plain = await outcome(client, question(), streamed)
        inject_faults(sim_url, {"odd": True})
        odd = await outcome(client, question(), streamed)
    assert odd.text == plain.text and odd.text
    assert [s.url for s in odd.sources] == [s.url for s in plain.sources]
    assert odd.usage is not None


@pytest.mark.parametrize("streamed", [False, True])
async def test_agent_failed_run_with_http_200_is_an_error(
    settings: Settings, sim_url: str, streamed: bool
) -> None:
    inject_faults(sim_url, {"agent_failed": True})
    async with client_for(settings, "agent") as client:
        with pytest.raises(APIServerError) as caught:
            await outcome(client, question(), streamed)
    assert "failed" in caught.value.message
    assert chat_requests(sim_url, "agent") == 1


@pytest.mark.parametrize("style", STYLES)
async def test_background_run_polls_to_an_answer(settings: Settings, style: str) -> None:
    async with client_for(settings, style) as client:
        remote_id = await client.submit_background(question(model="sonar-deep-research"))
        assert await client.poll_background(remote_id) is None
        for _ in range(100):
            answer = await client.poll_background(remote_id)
            if answer is not None:
                break
            await asyncio.sleep(0.05)
    assert answer is not None and len(answer.sources) >= 5
    assert "<think>" not in answer.text


@pytest.mark.parametrize("style", STYLES)
async def test_failed_background_run_raises_on_poll(
    settings: Settings, sim_url: str, style: str
) -> None:
    inject_faults(sim_url, {"agent_failed": True})
    async with client_for(settings, style) as client:
        remote_id = await client.submit_background(question(model="sonar-deep-research"))
        with pytest.raises(APIServerError):
            for _ in range(100):
                await client.poll_background(remote_id)
                await asyncio.sleep(0.05)


@pytest.mark.parametrize("style", STYLES)
async def test_unknown_background_id_is_invalid_input_404(settings: Settings, style: str) -> None:
    async with client_for(settings, style) as client:
        with pytest.raises(InvalidInput) as caught:
            await client.poll_background("no-such-run")
    assert caught.value.status_code == 404
    assert caught.value.code == "INVALID_INPUT"


@pytest.mark.parametrize("style", STYLES)
async def test_bad_option_is_invalid_input_with_the_api_message(
    settings: Settings, sim_url: str, style: str
) -> None:
    async with client_for(settings, style) as client:
        with pytest.raises(InvalidInput) as caught:
            await client.ask(question(search_recency_filter="fortnight"))
    assert caught.value.status_code == 400
    assert "search_recency_filter" in caught.value.message
    assert chat_requests(sim_url, style) == 1


async def test_connection_refused_is_a_network_error_after_retries() -> None:
    with serve(latency_ms=0) as url:
        pass
    settings = Settings(api_key="pplx-any-key-00000000", base_url=url, max_retries=1, offline=False)
    async with AsyncClient(settings, retry=RetryPolicy(1, base=0.01)) as client:
        with pytest.raises(NetworkError) as caught:
            await client.ask(question())
    assert "PERPLEXITY_BASE_URL" in caught.value.message
    assert isinstance(caught.value.__cause__, httpx2.ConnectError)


def test_missing_key_fails_early_with_instructions() -> None:
    with pytest.raises(APIKeyInvalid) as caught:
        AsyncClient(Settings(api_key=None, base_url=DEFAULT_BASE_URL, offline=False))
    assert "PERPLEXITY_API_KEY" in caught.value.message


def test_deep_research_models_get_the_long_timeout(settings: Settings) -> None:
    client = AsyncClient(settings.model_copy(update={"deep_research_timeout_ms": 123_000}))
    assert client._timeout(question(), "sonar-pro") == 5.0
    assert client._timeout(question(), "sonar-deep-research") == 123.0
    assert client._timeout(question(), "medium") == 123.0
    assert client._timeout(question(timeout_ms=700), "sonar-deep-research") == 0.7


def test_sync_client_works_while_the_calling_thread_runs_a_loop(settings: Settings) -> None:
    async def kernel_cell() -> tuple[Answer, list[str | Answer], str]:
        # Like a Jupyter cell: a loop is running in this thread, and the code calls sync APIs.
        with Client(settings.model_copy(update={"api_style": "agent"})) as client:
            answer = client.ask(question())
            items = list(client.stream(question()))
        return answer, items, threading.current_thread().name

    answer, items, thread = asyncio.run(kernel_cell())
    assert thread == threading.main_thread().name
    assert answer.sources
    assert all(isinstance(item, str) for item in items[:-1])
    final = items[-1]
    assert isinstance(final, Answer) and final.text == answer.text


def test_sync_stream_consumer_stops_early(settings: Settings, sim_url: str) -> None:
    with Client(settings.model_copy(update={"api_style": "sonar"})) as client:
        stream = client.stream(question())
        first = next(stream)
        stream.close()
        assert isinstance(first, str)
        assert client.ask(question()).text


async def test_unknown_extra_response_fields_are_ignored() -> None:
    body = (
        b'{"id":"r1","model":"sonar","brand_new_field":{"x":[1,2]},"choices":[{"index":0,'
        b'"finish_reason":"stop","logprobs":null,"message":{"role":"assistant","content":"Hi [1]",'
        b'"extra":true}}],"search_results":[{"url":"https://a.example/","title":"A",'
        b'"rank":1,"score":0.9}],"usage":{"prompt_tokens":1,"completion_tokens":2,'
        b'"total_tokens":3,"future_tokens":9}}'
    )

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=body, headers={"content-type": "application/json"})

    async with mocked(handler) as client:
        answer = await client.ask(question())
    assert answer.text == "Hi [1]"
    assert [s.url for s in answer.sources] == ["https://a.example/"]
    assert answer.usage is not None and answer.usage.total_tokens == 3
    # No cost in the response: estimated from the usage.
    assert answer.cost is not None and answer.cost.estimated


async def test_a_redirect_to_a_login_page_says_to_check_the_base_url() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(302, headers={"location": "https://sso.example/login"})

    async with mocked(handler) as client:
        with pytest.raises(NetworkError) as caught:
            await client.ask(question())
    assert caught.value.status_code == 302
    assert "Unexpected HTTP 302" in str(caught.value) and "PERPLEXITY_BASE_URL" in str(caught.value)


DESIGN_CODES = {
    "CONVERSATION_NOT_FOUND",
    "CONVERSATION_CORRUPTED",
    "FILESYSTEM_ERROR",
    "VALIDATION_ERROR",
    "JOB_IN_PROGRESS",
    "API_KEY_INVALID",
    "API_QUOTA_EXCEEDED",
    "API_SERVER_ERROR",
    "INVALID_INPUT",
    "TIMEOUT_ERROR",
    "NETWORK_ERROR",
    "CACHE_ERROR",
}


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (301, NetworkError),
        (307, NetworkError),
        (402, InvalidInput),
        (405, InvalidInput),
        (410, InvalidInput),
        (418, InvalidInput),
        (451, InvalidInput),
    ],
)
async def test_every_unusual_status_gets_a_stable_code_without_retries(
    settings: Settings, sim_url: str, status: int, kind: type[APIError]
) -> None:
    inject_faults(sim_url, {"status": status})
    async with client_for(settings, "sonar") as client:
        with pytest.raises(kind) as caught:
            await client.ask(question())
    assert caught.value.code in DESIGN_CODES
    assert caught.value.status_code == status
    assert chat_requests(sim_url, "sonar") == 1


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("body", [b"{}", b'{"choices":[],"output":[]}'])
async def test_a_success_without_an_answer_is_an_error_and_not_cached(
    style: str, body: bytes
) -> None:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, content=body, headers={"content-type": "application/json"})

    async with mocked(handler, style) as client:
        for _ in range(2):
            with pytest.raises(APIServerError, match=r"held no answer.*PERPLEXITY_BASE_URL"):
                await client.ask(Request(messages=[{"role": "user", "content": "Hi?"}]))
    assert len(seen) == 2


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_body_that_cannot_be_decoded_is_a_network_error(streamed: bool) -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-encoding": "gzip", "content-type": "application/json"}
        return httpx2.Response(200, content=b"not gzip at all", headers=headers)

    async with mocked(handler, max_retries=0) as client:
        with pytest.raises(NetworkError, match="decompressing") as caught:
            await outcome(client, question(), streamed)
    assert isinstance(caught.value.__cause__, httpx2.DecodingError)


@pytest.mark.parametrize("body", [b"<html>Bad Gateway</html>", b"[" * 100_000])
async def test_an_unreadable_error_body_still_gives_the_status_error(body: bytes) -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(502, content=body)

    async with mocked(handler, "agent", max_retries=0) as client:
        with pytest.raises(APIServerError, match=r"HTTP 502\)\. This is usually temporary"):
            await client.ask(question())


def test_sync_bridge_uses_one_loop_thread_and_cancels_abandoned_producers() -> None:
    from pplx_nb._sync import iterate_sync, run_sync

    closed = threading.Event()

    async def numbers() -> Any:
        try:
            for n in range(1000):
                await asyncio.sleep(0)
                yield n, threading.current_thread().name
        finally:
            closed.set()

    stream = iterate_sync(numbers())
    first, producer_thread = next(stream)
    stream.close()
    assert first == 0 and producer_thread == "pplx_nb-loop"
    assert closed.wait(2)

    async def thread_name() -> str:
        return threading.current_thread().name

    async def fail() -> None:
        raise InvalidInput("bad", status_code=400)

    assert run_sync(thread_name()) == "pplx_nb-loop"
    with pytest.raises(InvalidInput):
        run_sync(fail())
    assert [t.name for t in threading.enumerate()].count("pplx_nb-loop") == 1


async def test_reachable_says_whether_the_api_answers_without_retrying(
    settings: Settings, sim_url: str
) -> None:
    async with client_for(settings, "agent") as client:
        assert await client.reachable()
    inject_faults(sim_url, {"status": 503, "times": 1})
    async with client_for(settings, "agent") as client:
        assert not await client.reachable()
        assert await client.reachable()
    closed = Settings(api_key="pplx-k-123456789", base_url="http://127.0.0.1:9", offline=False)
    with Client(closed) as sync:
        assert not sync.reachable(timeout=5)


@pytest.mark.parametrize("body", [b"<html>busy</html>", b'{"id": "resp_1", "status": "compl'])
async def test_a_paid_answer_that_cannot_be_read_is_submission_unknown_and_sent_once(
    body: bytes,
) -> None:
    sent: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.url.path)
        return httpx2.Response(200, content=body, headers={"content-type": "application/json"})

    async with mocked(handler, "agent") as client:
        with pytest.raises(SubmissionUnknown, match="could not be read") as caught:
            await client.ask(question(model="medium"))
    assert "API_SERVER_ERROR" not in str(caught.value)
    assert sent == ["/v1/agent"]
