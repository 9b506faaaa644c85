"""The Sonar adapter: the request it sends, and how completions, chunks and async runs are read."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx2
import pytest

from pplx_nb import Settings
from pplx_nb._errors import APIServerError, NetworkError
from pplx_nb.api import AsyncClient, Request
from pplx_nb.api._sse import Event
from pplx_nb.api._text import DeltaFilter, split_think
from pplx_nb.api.sonar import SonarAdapter

# Sonar-style tests need the simulator's Sonar mode (the live API answers them 403).
pytestmark = [pytest.mark.anyio, pytest.mark.sim_sonar]

ADAPTER = SonarAdapter()


def question(**options: Any) -> Request:
    return Request(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is BM25?"},
        ],
        use_cache=False,
        **options,
    )


def sent(request: Request, model: str = "sonar-pro", *, stream: bool = False) -> dict[str, Any]:
    call = ADAPTER.chat(request, model, stream=stream)
    assert call.method == "POST" and call.path == "/chat/completions"
    assert call.body is not None
    body: dict[str, Any] = json.loads(call.body)
    return body


def completion(content: str, **extra: Any) -> bytes:
    payload = {
        "id": "c1",
        "model": "sonar-pro",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"content": content}}],
        **extra,
    }
    return json.dumps(payload).encode()


def test_minimal_request_sends_only_model_and_messages() -> None:
    assert sent(question()) == {
        "model": "sonar-pro",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is BM25?"},
        ],
    }


def test_every_option_maps_to_its_sonar_field() -> None:
    body = sent(
        question(
            search_domain_filter=["python.org", "-example.com"],
            search_recency_filter="month",
            search_after_date_filter="01/01/2024",
            search_before_date_filter="12/31/2025",
            search_mode="academic",
            return_related_questions=True,
            return_images=True,
            reasoning_effort="high",
            search_context_size="high",
            max_tokens=300,
            temperature=0.2,
        ),
        stream=True,
    )
    assert body["search_domain_filter"] == ["python.org", "-example.com"]
    assert body["search_recency_filter"] == "month"
    assert body["search_after_date_filter"] == "01/01/2024"
    assert body["search_before_date_filter"] == "12/31/2025"
    assert body["search_mode"] == "academic"
    assert body["return_related_questions"] is True
    assert body["return_images"] is True
    assert body["reasoning_effort"] == "high"
    assert body["web_search_options"] == {"search_context_size": "high"}
    assert body["max_tokens"] == 300
    assert body["temperature"] == 0.2
    assert body["stream"] is True
    assert "use_cache" not in body and "timeout_ms" not in body


def test_equal_requests_encode_to_equal_bytes() -> None:
    first = ADAPTER.chat(question(temperature=0.5), "sonar", stream=False).body
    second = ADAPTER.chat(question(temperature=0.5), "sonar", stream=False).body
    assert first == second


def test_completion_maps_sources_usage_and_api_cost() -> None:
    raw = completion(
        "Okapi BM25 ranks documents [1].",
        search_results=[
            {
                "title": "BM25",
                "url": "https://en.wikipedia.org/wiki/Okapi_BM25",
                "date": "2024-01-02",
            }
        ],
        citations=["https://ignored.example/"],
        related_questions=["What is TF-IDF?"],
        usage={
            "prompt_tokens": 5,
            "completion_tokens": 7,
            "total_tokens": 12,
            "num_search_queries": 1,
            "cost": {"input_tokens_cost": 0.1, "output_tokens_cost": 0.2, "total_cost": 0.35},
        },
    )
    answer = ADAPTER.parse(raw, question(), "sonar-pro")
    assert answer.text == "Okapi BM25 ranks documents [1]."
    assert [s.url for s in answer.sources] == ["https://en.wikipedia.org/wiki/Okapi_BM25"]
    assert answer.sources[0].date == "2024-01-02"
    assert answer.related_questions == ["What is TF-IDF?"]
    assert answer.usage is not None and answer.usage.total_tokens == 12
    assert answer.cost is not None and answer.cost.total_cost == 0.35
    assert answer.cost.estimated is False
    assert answer.finish_reason == "stop"


def test_citations_are_the_fallback_when_search_results_are_missing() -> None:
    answer = ADAPTER.parse(
        completion("See [1].", citations=["https://a.example/x"]), question(), "sonar"
    )
    assert [s.url for s in answer.sources] == ["https://a.example/x"]
    assert answer.cost is None


def test_think_block_goes_to_thinking_not_text() -> None:
    raw = completion("<think>\nLet me look.\n</think>\n\nThe answer [1].")
    answer = ADAPTER.parse(raw, question(), "sonar-reasoning-pro")
    assert answer.text == "The answer [1]."
    assert answer.thinking == "Let me look."


def test_split_think_leaves_plain_text_alone() -> None:
    assert split_think("No tags <think> here") == ("No tags <think> here", None)
    assert split_think("<think>unfinished") == ("", "unfinished")


def test_delta_filter_handles_tags_split_across_deltas() -> None:
    pieces = ["<th", "ink>\nplan", "ning</thi", "nk>", "\n\nHello", " world"]
    delta_filter = DeltaFilter()
    shown = "".join(delta_filter.feed(piece) for piece in pieces) + delta_filter.flush()
    assert shown == "Hello world"
    assert delta_filter.thinking == "planning"


def test_delta_filter_reads_a_long_think_block_in_linear_time() -> None:
    pieces = ["<think>", *["one reasoning step; "] * 30_000, "</th", "ink>", "\n\nThe answer."]
    delta_filter = DeltaFilter()
    started = time.perf_counter()
    shown = "".join(delta_filter.feed(piece) for piece in pieces) + delta_filter.flush()
    assert time.perf_counter() - started < 1.0
    assert shown == "The answer."
    assert delta_filter.thinking == ("one reasoning step; " * 30_000).strip()


def test_delta_filter_passes_text_that_only_looks_like_a_tag_start() -> None:
    delta_filter = DeltaFilter()
    assert delta_filter.feed("<") == ""
    assert delta_filter.feed("b>bold") == "<b>bold"


def chunk(content: str | None, finish: str | None = None, **extra: Any) -> Event:
    choice = {"index": 0, "finish_reason": finish, "delta": {"content": content}}
    return Event("", json.dumps({"id": "c1", "choices": [choice], **extra}))


def test_stream_ends_with_finish_reason_even_without_done_marker() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    shown = [parser.feed(chunk("Hello ")), parser.feed(chunk("world [1]."))]
    parser.feed(chunk("", "stop", citations=["https://a.example/"]))
    answer = parser.finish()
    assert "".join(shown) == "Hello world [1]."
    assert answer.text == "Hello world [1]."
    assert [s.url for s in answer.sources] == ["https://a.example/"]


def test_stream_keeps_sources_and_usage_from_earlier_chunks() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    parser.feed(chunk("Hi [1].", search_results=[{"url": "https://a.example/", "title": "A"}]))
    parser.feed(chunk("", "stop", usage={"prompt_tokens": 1, "total_tokens": 4}))
    answer = parser.finish()
    assert [s.url for s in answer.sources] == ["https://a.example/"]
    assert answer.usage is not None and answer.usage.total_tokens == 4


def test_stream_whose_text_comes_only_in_the_final_message() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    final = {"index": 0, "finish_reason": "stop", "message": {"content": "All at once."}}
    assert parser.feed(Event("", json.dumps({"choices": [final]}))) == "All at once."
    assert parser.finish().text == "All at once."


def test_stream_done_object_and_done_marker_both_end_it() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    parser.feed(chunk("Hi"))
    parser.feed(Event("", json.dumps({"object": "chat.completion.done", "choices": []})))
    assert parser.finish().text == "Hi"
    parser = ADAPTER.stream_parser(question(), "sonar")
    parser.feed(chunk("Hi"))
    parser.feed(Event("", "[DONE]"))
    assert parser.finish().text == "Hi"


def test_stream_without_an_ending_is_a_network_error() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    parser.feed(chunk("Hello "))
    with pytest.raises(NetworkError):
        parser.finish()


def test_error_frame_raises() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    with pytest.raises(APIServerError, match="overloaded"):
        parser.feed(Event("error", json.dumps({"error": {"message": "overloaded"}})))


def test_async_run_states() -> None:
    assert ADAPTER.submitted(b'{"id":"a1","status":"CREATED"}') == "a1"
    assert ADAPTER.polled(b'{"id":"a1","status":"IN_PROGRESS"}') is None
    done = {"id": "a1", "status": "COMPLETED", "response": json.loads(completion("Report."))}
    answer = ADAPTER.polled(json.dumps(done).encode())
    assert answer is not None and answer.text == "Report."
    with pytest.raises(APIServerError, match="quota"):
        ADAPTER.polled(b'{"id":"a1","status":"FAILED","error_message":"quota"}')
    call = ADAPTER.submit(question(), "sonar-deep-research")
    assert call.path == "/async/chat/completions"
    assert call.body is not None
    assert json.loads(call.body)["request"]["model"] == "sonar-deep-research"


def test_unreadable_body_is_a_server_error_naming_the_settings() -> None:
    with pytest.raises(APIServerError, match="PERPLEXITY_API_STYLE"):
        ADAPTER.parse(b'{"choices": "not a list"}', question(), "sonar")


async def test_openai_compatible_server_without_perplexity_fields() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        body = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "llama",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Local."}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }
        return httpx2.Response(200, json=body)

    settings = Settings(base_url="http://localhost:8000/v1", api_style="sonar", offline=False)
    async with AsyncClient(settings, transport=httpx2.MockTransport(handler)) as client:
        answer = await client.ask(question(model="llama"))
    assert answer.text == "Local." and answer.sources == [] and answer.model == "llama"
    assert seen[0] == {"model": "llama", "messages": question().messages}


async def test_sim_accepts_every_option(settings: Settings) -> None:
    client = AsyncClient(settings.model_copy(update={"api_style": "sonar"}))
    async with client:
        answer = await client.ask(
            question(
                search_domain_filter=["docs.python.org"],
                search_recency_filter="year",
                search_mode="web",
                return_images=True,
                reasoning_effort="low",
                search_context_size="low",
                max_tokens=500,
                temperature=0.1,
            )
        )
    assert answer.sources and all(s.domain == "docs.python.org" for s in answer.sources)


def test_disable_search_is_sent_only_when_asked() -> None:
    assert sent(question(disable_search=True))["disable_search"] is True
    assert "disable_search" not in sent(question())
