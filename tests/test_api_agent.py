"""The Agent adapter: strict field mapping, related questions, run statuses and stream events."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx2
import pytest

from pplx_nb import Settings
from pplx_nb._config import DEFAULT_MODEL
from pplx_nb._errors import (
    APIKeyInvalid,
    APIServerError,
    InvalidInput,
    NetworkError,
    RemoteRunFailed,
    RunRequiresAction,
)
from pplx_nb._models import Answer
from pplx_nb.api import AsyncClient, Request, RetryPolicy
from pplx_nb.api._names import _warn_renamed
from pplx_nb.api._sse import Event
from pplx_nb.api._text import RELATED_INSTRUCTION, DeltaFilter, split_related
from pplx_nb.api.agent import AgentAdapter, agent_target
from pplx_nb.api.sonar import SonarAdapter
from pplx_nb.sim import stats

pytestmark = pytest.mark.anyio

ADAPTER = AgentAdapter()
AGENT_FIELDS = {
    "input",
    "instructions",
    "model",
    "effort",
    "tools",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "reasoning",
    "response_format",
    "background",
    "store",
    "previous_response_id",
    "metadata",
    "max_steps",
}


def question(**options: Any) -> Request:
    return Request(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is asyncio?"},
            {"role": "assistant", "content": "A library."},
            {"role": "user", "content": "How do I cancel a task?"},
        ],
        use_cache=False,
        **options,
    )


def sent(request: Request, model: str = "sonar-pro", *, stream: bool = False) -> dict[str, Any]:
    call = ADAPTER.chat(request, model, stream=stream)
    assert (call.method, call.path) == ("POST", "/v1/agent")
    assert call.body is not None
    body: dict[str, Any] = json.loads(call.body)
    return body


ALL_OPTIONS: dict[str, Any] = {
    "search_domain_filter": ["docs.python.org"],
    "search_recency_filter": "year",
    "search_after_date_filter": "01/01/2020",
    "search_before_date_filter": "12/31/2030",
    "search_mode": "academic",
    "return_related_questions": True,
    "return_images": True,
    "reasoning_effort": "low",
    "search_context_size": "medium",
    "max_tokens": 800,
    "temperature": 0.3,
}


@pytest.mark.parametrize(
    ("model", "target"),
    [
        ("sonar", {"model": "perplexity/sonar"}),
        ("sonar-pro", {"effort": "low"}),
        ("sonar-reasoning-pro", {"effort": "low"}),
        ("sonar-deep-research", {"effort": "medium"}),
        ("high", {"effort": "high"}),
        ("fast@2026-10-16.0", {"effort": "fast@2026-10-16.0"}),
        ("pro-search", {"effort": "low"}),
        ("openai/gpt-5", {"model": "openai/gpt-5"}),
        ("perplexity/sonar", {"model": "perplexity/sonar"}),
        ("r1-1776", {"model": "r1-1776"}),
    ],
)
def test_model_names_map_to_agent_models_or_presets(model: str, target: dict[str, str]) -> None:
    assert agent_target(model) == target


def test_a_retired_sonar_name_is_mapped_with_one_warning_per_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _warn_renamed.cache_clear()
    with caplog.at_level(logging.WARNING, logger="pplx_nb.api"):
        for _ in range(3):
            assert sent(question(), "sonar-pro")["effort"] == "low"
        assert sent(question(), "sonar-deep-research")["effort"] == "medium"
        assert sent(question(), "low")["effort"] == "low"
        assert sent(question(), "perplexity/sonar")["model"] == "perplexity/sonar"
    warned = [r.getMessage() for r in caplog.records if "retired Sonar name" in r.getMessage()]
    assert len(warned) == 2
    assert "'sonar-pro'" in warned[0] and "effort 'low'" in warned[0]
    assert "'sonar-deep-research'" in warned[1] and "effort 'medium'" in warned[1]


def test_an_effort_is_sent_as_effort_over_one_named_as_the_model_and_never_as_preset() -> None:
    assert sent(question(effort="fast@2026-10-16.0"), "high")["effort"] == "fast@2026-10-16.0"
    slug = sent(question(effort="xhigh"), "openai/gpt-5.1")
    assert (slug["model"], slug["effort"]) == ("openai/gpt-5.1", "xhigh")
    for model in ("fast", "pro-search", "sonar-deep-research", "medium@2026-10-16.0"):
        assert "preset" not in sent(question(), model)
    deep = sent(question(effort="medium"), "fast", stream=True)
    assert deep["store"] is True, "an effort that runs deep research makes a paid stream"


def test_a_grounded_question_requires_the_search_tool() -> None:
    for model in ("low", "openai/gpt-5.1", "fast@2026-10-16.0"):
        body = sent(question(tool_choice="required"), model)
        assert body["tool_choice"] == "required" and body["tools"] == [{"type": "web_search"}]
    assert "tool_choice" not in sent(question(), "low")
    bare = sent(question(tool_choice="required", disable_search=True), "openai/gpt-5.1")
    assert "tool_choice" not in bare and "tools" not in bare


def test_the_answer_says_whether_its_run_searched() -> None:
    searched = ADAPTER.parse(json.dumps(response()).encode(), question(), "sonar")
    assert searched.searched is True
    alone = response()
    alone["output"] = alone["output"][1:]
    assert ADAPTER.parse(json.dumps(alone).encode(), question(), "sonar").searched is False
    del alone["usage"]
    assert ADAPTER.parse(json.dumps(alone).encode(), question(), "sonar").searched is None


def test_the_answer_reports_the_effort_and_preset_the_run_went_with() -> None:
    body = {
        "id": "resp_1",
        "status": "completed",
        "effort": "low@2026-10-16.0",
        "preset": "low@2026-10-16.0",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi."}]}],
    }
    answer = ADAPTER.parse(json.dumps(body).encode(), question(), "low")
    assert (answer.effort, answer.preset) == ("low@2026-10-16.0", "low@2026-10-16.0")
    del body["effort"], body["preset"]
    answer = ADAPTER.parse(json.dumps(body).encode(), question(effort="high"), "low")
    assert (answer.effort, answer.preset) == ("high", None), "as asked when not reported"


@pytest.mark.parametrize(
    ("model", "sent_as"),
    [
        ("low", "sonar-pro"),
        ("fast", "sonar"),
        ("perplexity/sonar", "sonar"),
        ("medium", "sonar-deep-research"),
        ("sonar-reasoning-pro", "sonar-reasoning-pro"),
        ("my-local-llm", "my-local-llm"),
    ],
)
def test_the_sonar_style_sends_sonar_names_for_agent_presets(model: str, sent_as: str) -> None:
    call = SonarAdapter().chat(question(), model, stream=False)
    assert json.loads(call.body or b"")["model"] == sent_as


async def test_answers_are_labelled_with_the_model_the_api_reports(
    settings: Settings, sim_url: str
) -> None:
    assert Settings.model_fields["model"].default == DEFAULT_MODEL == "low"
    client = AsyncClient(settings.model_copy(update={"api_style": "agent", "model": DEFAULT_MODEL}))
    async with client:
        preset = await client.ask(question())
        slug = await client.ask(question(model="perplexity/sonar"))
        streamed = [item async for item in client.stream(question(model="high"))][-1]
    assert preset.model == "openai/gpt-5-mini"
    assert slug.model == "perplexity/sonar"
    assert isinstance(streamed, Answer) and streamed.model == "anthropic/claude-sonnet-4-5"


@pytest.mark.sim_sonar
async def test_the_default_model_reaches_a_sonar_server_as_a_sonar_name(
    settings: Settings, sim_url: str
) -> None:
    client = AsyncClient(settings.model_copy(update={"api_style": "sonar", "model": DEFAULT_MODEL}))
    async with client:
        answer = await client.ask(question())
    assert answer.model == "sonar-pro"


def test_only_agent_fields_are_sent_even_with_every_option() -> None:
    body = sent(question(**ALL_OPTIONS), "sonar", stream=True)
    assert set(body) <= AGENT_FIELDS
    assert body["model"] == "perplexity/sonar"
    assert body["tools"] == [
        {
            "type": "web_search",
            "filters": {
                "search_domain_filter": ["docs.python.org"],
                "search_recency_filter": "year",
                "search_after_date_filter": "01/01/2020",
                "search_before_date_filter": "12/31/2030",
            },
            "search_context_size": "medium",
        }
    ]
    assert body["max_output_tokens"] == 800
    assert body["temperature"] == 0.3
    assert body["reasoning"] == {"effort": "low"}
    assert body["stream"] is True


def test_system_goes_to_instructions_and_history_to_input() -> None:
    body = sent(question(), "sonar-pro")
    assert body == {
        "effort": "low",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "What is asyncio?"},
            {"role": "assistant", "content": "A library."},
            {"role": "user", "content": "How do I cancel a task?"},
        ],
    }


def test_single_question_is_sent_as_a_string() -> None:
    request = Request(messages=[{"role": "user", "content": "Hi?"}])
    assert sent(request, "sonar") == {
        "model": "perplexity/sonar",
        "input": "Hi?",
        "tools": [{"type": "web_search"}],
    }


def test_related_questions_are_asked_for_in_instructions() -> None:
    body = sent(question(return_related_questions=True))
    assert body["instructions"].endswith(RELATED_INSTRUCTION)


def test_split_related_cuts_the_list_off() -> None:
    text = "Answer [1].\n\n**Related questions:**\n- First?\n* Second?\n3. Third?\n"
    assert split_related(text) == ("Answer [1].", ["First?", "Second?", "Third?"])
    assert split_related("No list here.") == ("No list here.", [])


def test_delta_filter_holds_back_the_related_list() -> None:
    pieces = ["Answer", " [1].\n\nRel", "ated questions:\n- One?", "\n- Two?"]
    delta_filter = DeltaFilter(related=True)
    shown = "".join(delta_filter.feed(piece) for piece in pieces) + delta_filter.flush()
    assert shown.strip() == "Answer [1]."
    delta_filter = DeltaFilter(related=True)
    shown = delta_filter.feed("Line one\nRelativity matters.") + delta_filter.flush()
    assert shown == "Line one\nRelativity matters."


def response(status: str = "completed", text: str = "Done [1].", **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "status": status,
        "model": "perplexity/sonar",
        "output": [
            {
                "type": "search_results",
                "queries": ["q"],
                "results": [{"id": 1, "url": "https://a.example/", "title": "A", "snippet": "s"}],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            },
        ],
        "usage": {
            "input_tokens": 4,
            "output_tokens": 6,
            "total_tokens": 10,
            "cost": {
                "input_cost": 0.1,
                "output_cost": 0.2,
                "tool_calls_cost": 0.3,
                "total_cost": 0.6,
            },
        },
        **extra,
    }


def test_completed_response_maps_text_sources_usage_and_cost() -> None:
    raw = json.dumps(response(text="Done [1].\n\nRelated questions:\n- Next?")).encode()
    answer = ADAPTER.parse(raw, question(return_related_questions=True), "sonar")
    assert answer.text == "Done [1]."
    assert answer.related_questions == ["Next?"]
    assert [s.url for s in answer.sources] == ["https://a.example/"]
    assert answer.usage is not None and answer.usage.prompt_tokens == 4
    assert answer.cost is not None and answer.cost.total_cost == 0.6
    assert answer.cost.request_cost == 0.3 and answer.cost.estimated is False


def test_sources_keep_every_search_result_id_they_were_found_under() -> None:
    rounds = [
        [
            {"id": 1, "url": "https://a.example/1", "title": "A1", "snippet": "s"},
            {"id": 2, "url": "https://a.example/2", "title": "A2", "snippet": "s"},
        ],
        [
            {"id": 3, "url": "https://a.example/1", "title": "A1 again", "snippet": "s"},
            {"id": 4, "url": "https://b.example/4", "title": "B4", "snippet": "s"},
            {"id": "5", "url": "https://c.example/5", "title": "odd id", "snippet": "s"},
            {"url": "https://d.example/6", "title": "no id", "snippet": "s"},
        ],
    ]
    body = response(text="Claim from B4 [4]. Claim from A2 [2].")
    body["output"][:1] = [
        {"type": "search_results", "queries": [f"q{n}"], "results": results}
        for n, results in enumerate(rounds)
    ]
    answer = ADAPTER.parse(json.dumps(body).encode(), question(), "sonar")
    assert [(s.title, s.ids) for s in answer.sources] == [
        ("A1", [1, 3]),
        ("A2", [2]),
        ("B4", [4]),
        ("odd id", None),
        ("no id", None),
    ]
    assert answer.sources[0].to_json_dict().get("id") is None


def test_detailed_usage_is_read_into_usage_and_cost() -> None:
    usage = {
        "input_tokens": 400,
        "output_tokens": 90,
        "total_tokens": 490,
        "input_tokens_details": {"cache_read_input_tokens": 300, "cache_creation_input_tokens": 50},
        "output_tokens_details": {"reasoning_tokens": 40},
        "tool_calls_details": {
            "search_web": {"invocation": 2, "cost_usd": 0.005},
            "fetch_url": {"invocation": 3, "cost_usd": 0.0015},
        },
        "cost": {
            "currency": "USD",
            "input_cost": 0.0001,
            "output_cost": 0.0009,
            "cache_read_cost": 0.00003,
            "cache_creation_cost": 0.00002,
            "total_cost": 0.00755,
        },
    }
    answer = ADAPTER.parse(json.dumps(response(usage=usage)).encode(), question(), "low")
    assert answer.usage is not None and answer.cost is not None
    assert answer.usage.reasoning_tokens == 40
    assert answer.usage.cache_read_input_tokens == 300
    assert answer.usage.cache_creation_input_tokens == 50
    assert answer.usage.tool_calls == {"search_web": 2, "fetch_url": 3}
    assert answer.usage.num_search_queries == 2
    assert answer.cost.tool_costs == {"search_web": 0.005, "fetch_url": 0.0015}
    # No tool_calls_cost given: the sum of the tools' own costs.
    assert answer.cost.tool_calls_cost == pytest.approx(0.0065)
    assert answer.cost.request_cost == pytest.approx(0.0065)
    assert (answer.cost.cache_read_cost, answer.cost.cache_creation_cost) == (0.00003, 0.00002)
    assert answer.cost.total_cost == 0.00755


def test_a_response_without_usage_has_no_usage_and_no_cost() -> None:
    answer = ADAPTER.parse(json.dumps(response(usage=None)).encode(), question(), "low")
    assert answer.usage is None and answer.cost is None


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_http_200_failed_or_cancelled_run_raises(status: str) -> None:
    payload = response(status, output=[], error={"message": "model overloaded"})
    with pytest.raises(
        APIServerError, match="cancelled" if status == "cancelled" else "overloaded"
    ):
        ADAPTER.parse(json.dumps(payload).encode(), question(), "sonar")


def test_incomplete_without_text_raises_and_with_text_is_truncated() -> None:
    empty = response("incomplete", output=[], incomplete_details={"reason": "max_steps"})
    with pytest.raises(APIServerError, match="incomplete"):
        ADAPTER.parse(json.dumps(empty).encode(), question(), "sonar")
    cut = response("incomplete", incomplete_details={"reason": "max_output_tokens"})
    answer = ADAPTER.parse(json.dumps(cut).encode(), question(), "sonar")
    assert answer.finish_reason == "length" and answer.text == "Done [1]."


def events(*payloads: dict[str, Any]) -> list[Event]:
    return [Event("", json.dumps(p)) for p in payloads]


def test_stream_ignores_unknown_events_and_ends_on_its_terminal() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    shown = [
        parser.feed(event)
        for event in events(
            {"type": "response.created", "response": {"status": "in_progress", "output": []}},
            {"type": "response.reasoning.search_queries", "queries": ["x"]},
            {"type": "response.brand_new_event", "whatever": [1, 2]},
            {"type": "response.output_text.delta", "delta": "Done "},
            {"type": "response.output_text.delta", "delta": "[1]."},
            {"type": "response.completed", "response": response()},
        )
    ]
    assert "".join(shown) == "Done [1]."
    answer = parser.finish()
    assert answer.text == "Done [1]." and answer.sources


@pytest.mark.parametrize("asked", [False, True])
def test_related_list_is_split_off_only_when_it_was_asked_for(asked: bool) -> None:
    text = "Main answer.\n\nRelated questions:\n- a?\n- b?"
    request = question(return_related_questions=asked)
    parser = ADAPTER.stream_parser(request, "sonar")
    shown = "".join(
        parser.feed(event)
        for event in events(
            {"type": "response.output_text.delta", "delta": text},
            {"type": "response.completed", "response": response(text=text)},
        )
    )
    streamed = parser.finish()
    whole = ADAPTER.parse(json.dumps(response(text=text)).encode(), request, "sonar")
    for answer in (streamed, whole):
        assert answer.text.strip() == shown.strip()
        assert answer.related_questions == (["a?", "b?"] if asked else [])


@pytest.mark.parametrize("terminal", ["response.failed", "response.cancelled"])
def test_stream_failure_terminals_raise(terminal: str) -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    parser.feed(events({"type": "response.output_text.delta", "delta": "Partial"})[0])
    with pytest.raises(APIServerError):
        parser.feed(events({"type": terminal, "response": response(terminal.split(".")[1])})[0])


def test_a_run_that_requires_action_raises_with_the_cost_it_reported() -> None:
    waiting = response("requires_action")
    with pytest.raises(RunRequiresAction, match="requires_action") as raised:
        ADAPTER.parse(json.dumps(waiting).encode(), question(), "sonar")
    error = raised.value
    assert error.code == "RUN_REQUIRES_ACTION" and error.request_id == "resp_1"
    assert (
        error.cost is not None and error.cost.total_cost == waiting["usage"]["cost"]["total_cost"]
    )
    assert error.usage is not None and error.usage.total_tokens == 10
    assert isinstance(error, RemoteRunFailed), "final: polling it again cannot help"
    with pytest.raises(RunRequiresAction):
        ADAPTER.polled(json.dumps(waiting).encode())
    for terminal in ("response.in_progress", "response.completed"):
        parser = ADAPTER.stream_parser(question(), "sonar")
        with pytest.raises(RunRequiresAction):
            for event in events({"type": terminal, "response": waiting}):
                parser.feed(event)
            parser.finish()


def test_a_loaded_skill_is_shown_as_the_runs_activity() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    for event in events(
        {"type": "response.reasoning.started"},
        {"type": "response.skill.loaded", "name": "office/pdf", "sequence_number": 3},
    ):
        assert parser.feed(event) == ""
    assert parser.activity is not None
    assert (parser.activity.stage, parser.activity.skill) == ("skill", "office/pdf")


def test_stream_error_event_raises_and_missing_terminal_is_network_error() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    with pytest.raises(APIServerError, match="busy"):
        parser.feed(events({"type": "error", "message": "busy"})[0])
    parser = ADAPTER.stream_parser(question(), "sonar")
    parser.feed(events({"type": "response.output_text.delta", "delta": "Partial"})[0])
    with pytest.raises(NetworkError):
        parser.finish()


def test_error_event_with_a_plain_string_error_raises_its_message() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    with pytest.raises(APIServerError, match="boom"):
        parser.feed(events({"type": "error", "error": "boom"})[0])


def test_streamed_text_stands_when_the_completed_event_is_minimal() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    parser.feed(events({"type": "response.output_text.delta", "delta": "Hello world"})[0])
    parser.feed(events({"type": "response.completed", "response": {"id": "r1"}})[0])
    assert parser.finish().text == "Hello world"


@pytest.mark.parametrize("asked", [False, True])
def test_a_background_report_keeps_its_closing_questions_unless_related_were_asked(
    asked: bool,
) -> None:
    text = "Report.\n\nRelated questions:\n- a?\n- b?"
    answer = ADAPTER.polled(json.dumps(response(text=text)).encode(), related=asked)
    assert answer is not None
    assert answer.related_questions == (["a?", "b?"] if asked else [])
    assert ("Related questions:" in answer.text) is not asked


def test_background_submit_and_poll_states() -> None:
    call = ADAPTER.submit(question(), "sonar-deep-research")
    assert call.body is not None
    body = json.loads(call.body)
    assert body["background"] is True and body["effort"] == "medium"
    assert body["store"] is True, "a run that is not stored cannot be polled"
    for model, stored in (("sonar-deep-research", True), ("sonar-pro", False)):
        streamed = json.loads(ADAPTER.chat(question(), model, stream=True).body or b"")
        assert streamed.get("store", False) is stored, "a paid stream can be read back by id"
    assert ADAPTER.submitted(json.dumps(response("queued", output=[])).encode()) == "resp_1"
    assert ADAPTER.poll("resp_1").path == "/v1/responses/resp_1"
    assert ADAPTER.polled(json.dumps(response("in_progress", output=[])).encode()) is None
    answer = ADAPTER.polled(json.dumps(response()).encode())
    assert answer is not None and answer.text == "Done [1]."


async def test_strict_server_accepts_every_option_for_every_model(
    settings: Settings, sim_url: str
) -> None:
    client = AsyncClient(settings.model_copy(update={"api_style": "agent"}))
    async with client:
        for model in ("sonar", "sonar-pro", "sonar-reasoning-pro"):
            answer = await client.ask(question(model=model, **ALL_OPTIONS))
            assert answer.sources and all(s.domain == "docs.python.org" for s in answer.sources)
            assert len(answer.related_questions) == 3
    assert stats(sim_url)["requests"]["POST /v1/agent"] == 3


async def test_strict_server_rejection_is_invalid_input(settings: Settings) -> None:
    client = AsyncClient(settings.model_copy(update={"api_style": "agent"}))
    async with client:
        with pytest.raises(InvalidInput, match="temperature") as caught:
            await client.ask(question(temperature=5.0))
    assert caught.value.status_code == 400


def test_disable_search_drops_the_web_search_tool() -> None:
    assert sent(question(), "sonar")["tools"][0]["type"] == "web_search"
    assert "tools" not in sent(question(disable_search=True), "sonar")


# -- what a run is doing: reasoning events, and following a background run ----------------------


def test_reasoning_events_become_the_runs_activity_with_running_totals() -> None:
    parser = ADAPTER.stream_parser(question(), "sonar")
    seen = []
    for n, payload in enumerate(
        [
            {"type": "response.created", "response": {"status": "in_progress", "output": []}},
            {"type": "response.reasoning.started", "thought": "Planning."},
            {"type": "response.reasoning.search_queries", "queries": ["a", "b"]},
            {"type": "response.reasoning.search_results", "results": [{"id": 1}] * 5},
            {"type": "response.reasoning.image_search_queries", "queries": ["c"], "call_id": "x"},
            {"type": "response.reasoning.fetch_url_queries", "urls": ["https://a.example/"]},
            {"type": "response.reasoning.fetch_url_results", "contents": []},
            {"type": "response.reasoning.brand_new", "anything": {"at": "all"}},
            {"type": "response.reasoning.stopped"},
            {"type": "response.output_text.delta", "delta": "Done "},
            {"type": "response.output_text.delta", "delta": "[1]."},
        ]
    ):
        parser.feed(Event("", json.dumps({**payload, "sequence_number": n})))
        seen.append(parser.activity)
    assert seen[0] is None
    assert seen[1] is not None and seen[1].stage == "planning"
    assert seen[2] is not None and (seen[2].stage, seen[2].queries, seen[2].query) == (
        "searching",
        2,
        "b",
    )
    assert seen[3] is not None and (seen[3].stage, seen[3].results) == ("reading", 5)
    assert seen[4] is not None and seen[4].queries == 3
    assert seen[5] is not None and (seen[5].stage, seen[5].urls) == ("fetching", 1)
    assert seen[7] == seen[5], "unknown reasoning events change nothing"
    final = seen[-1]
    assert final is not None and final.stage == "writing" and final.chars == len("Done [1].")
    assert parser.sequence == 10


def test_events_sent_again_after_a_resume_are_skipped() -> None:
    parser = ADAPTER.follow_parser(related=False)
    frames = [
        {"type": "response.output_text.delta", "delta": "Done ", "sequence_number": 4},
        {"type": "response.output_text.delta", "delta": "Done ", "sequence_number": 4},
        {"type": "response.reasoning.search_queries", "queries": ["x"], "sequence_number": 3},
        {"type": "response.output_text.delta", "delta": "[1].", "sequence_number": 5},
        {"type": "response.completed", "response": response(), "sequence_number": 6},
    ]
    shown = "".join(parser.feed(event) for event in events(*frames))
    assert shown == "Done [1]." and parser.finish().text == "Done [1]."
    assert parser.activity is not None and parser.activity.queries == 0
    assert ADAPTER.follow("resp_1", 6).path == "/v1/responses/resp_1?stream=true&starting_after=6"


async def test_a_followed_run_resumes_after_a_drop_from_the_last_event_seen(
    settings: Settings,
) -> None:
    from pplx_nb.sim import serve

    with serve(latency_ms=0, deep_research_seconds=1.0) as url:
        upstream = httpx2.AsyncClient(base_url=url)
        cursors: list[str] = []

        async def forward(request: httpx2.Request) -> httpx2.Response:
            reply = await upstream.send(
                upstream.build_request(
                    request.method,
                    request.url.raw_path.decode(),
                    content=request.content,
                    headers={"authorization": request.headers.get("authorization", "")},
                )
            )
            body = reply.content
            if request.url.params.get("stream") == "true":
                cursors.append(request.url.params["starting_after"])
                if len(cursors) == 1:
                    # The first stream breaks after eight events, mid-run.
                    body = b"".join(f + b"\n\n" for f in body.split(b"\n\n")[:8])
            return httpx2.Response(reply.status_code, headers=reply.headers, content=body)

        tuned = settings.model_copy(update={"base_url": url})
        client = AsyncClient(
            tuned,
            transport=httpx2.MockTransport(forward),
            retry=RetryPolicy(3, base=0.01, cap=0.05),
        )
        async with client, upstream:
            remote_id = await client.submit_background(question(model="sonar-deep-research"))
            items = [i async for i in client.follow_background(remote_id)]
        counters = stats(url)
    activities, answer = items[:-1], items[-1]
    assert isinstance(answer, Answer) and answer.text and answer.sources
    assert cursors[0] == "0" and len(cursors) == 2 and int(cursors[1]) >= 7
    assert [a.stage for a in activities].count("searching") >= 1
    assert activities[-1].stage == "writing"
    assert counters["background_runs"] == 1 and counters["generations"] == 1


async def test_a_server_that_does_not_stream_runs_is_told_apart_from_a_failed_run() -> None:
    def json_only(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json=response("in_progress", output=[]))

    settings = Settings(
        api_key="pplx-k-123456789", base_url="http://api.test", api_style="agent", offline=False
    )
    async with AsyncClient(settings, transport=httpx2.MockTransport(json_only)) as client:
        assert client.follows_runs
        with pytest.raises(APIServerError, match="not an event stream") as caught:
            async for _ in client.follow_background("resp_1"):
                pass
    assert not isinstance(caught.value, RemoteRunFailed)


async def test_the_sonar_style_against_todays_api_says_to_use_the_agent_style(
    settings: Settings, sim_url: str
) -> None:
    client = AsyncClient(settings.model_copy(update={"api_style": "sonar"}))
    async with client:
        with pytest.raises(InvalidInput) as asked:
            await client.ask(question())
        with pytest.raises(InvalidInput) as streamed:
            async for _ in client.stream(question()):
                pass
    for caught in (asked, streamed):
        error = caught.value
        assert error.code == "INVALID_INPUT" and error.status_code == 403
        assert "no longer serves Sonar chat completions" in error.message
        assert "PERPLEXITY_API_STYLE" in error.message and "agent" in error.message
        assert settings.api_key is not None
        assert settings.api_key.get_secret_value() not in error.message
    # Refused for good: never sent again.
    assert stats(sim_url)["requests"]["POST /chat/completions"] == 2


async def test_a_plain_403_is_still_a_refused_key() -> None:
    def forbidden(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(403, json={"error": {"message": "Forbidden", "type": "forbidden"}})

    settings = Settings(api_key="pplx-k-123456789", base_url="http://api.test", offline=False)
    async with AsyncClient(settings, transport=httpx2.MockTransport(forbidden)) as client:
        with pytest.raises(APIKeyInvalid):
            await client.ask(question())
