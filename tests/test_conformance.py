"""The official ``perplexityai`` and ``openai`` SDKs against the simulator, endpoint by endpoint.

The Perplexity client validates every body strictly against the SDK's own models
(``perplexity/generated/api.py``), so a field of the wrong type or a missing one fails here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from perplexity import BadRequestError, NotFoundError, PermissionDeniedError, Perplexity
from perplexity.generated.api import (
    ApiSearchResponseOutput,
    MessageOutputItemOutput,
    ModelListOutput,
    ResponsesCancelResponseOutput,
    ResponsesResponseOutput,
    SearchResultsOutputItemOutput,
)

from pplx_nb.sim import stats

QUESTION = "How do I cancel an asyncio task?"
MESSAGES = [{"role": "user", "content": QUESTION}]


@pytest.fixture
def pplx(sim_url: str) -> Iterator[Perplexity]:
    with Perplexity(
        api_key="test-key", base_url=sim_url, max_retries=0, _strict_response_validation=True
    ) as client:
        yield client


def wait_for(read: Callable[[], ResponsesResponseOutput], status: str) -> ResponsesResponseOutput:
    """``read()`` until the run reports ``status`` (at most 10 s)."""
    deadline = time.monotonic() + 10
    current = read()
    while current.status != status and time.monotonic() < deadline:
        time.sleep(0.05)
        current = read()
    return current


# -- Agent API ---------------------------------------------------------------------------------


def test_responses_create_parses_into_the_sdk_models(pplx: Perplexity) -> None:
    response = pplx.responses.create(model="perplexity/sonar", input=QUESTION)

    assert isinstance(response, ResponsesResponseOutput) and response.status == "completed"
    assert response.model == "perplexity/sonar"
    search, message = response.output
    assert isinstance(search, SearchResultsOutputItemOutput)
    assert isinstance(message, MessageOutputItemOutput)
    assert search.results[0].url.endswith("#asyncio.Task.cancel") and search.results[0].id == 1
    assert "asyncio.Task.cancel" in response.output_text
    assert response.usage is not None and response.usage.cost is not None
    assert response.usage.tool_calls_details is not None
    assert response.usage.tool_calls_details["search_web"].invocation == 1


def test_responses_stream_yields_every_event_as_its_sdk_type(pplx: Perplexity) -> None:
    events = list(
        pplx.responses.create(preset="medium", input=QUESTION, stream=True)  # deep: all kinds
    )
    kinds = [type(event).__name__ for event in events]

    assert kinds[:3] == [
        "ResponseCreatedEventOutput",
        "ResponseInProgressEventOutput",
        "ReasoningStartedEventOutput",
    ]
    for kind in (
        "SearchQueriesEventOutput",
        "SearchResultsEventOutput",
        "FetchUrlQueriesEventOutput",
        "FetchUrlResultsEventOutput",
        "ReasoningStoppedEventOutput",
        "OutputItemAddedEventOutput",
        "OutputItemDoneEventOutput",
        "TextDeltaEventOutput",
        "TextDoneEventOutput",
    ):
        assert kind in kinds
    assert kinds[-1] == "ResponseCompletedEventOutput" and kinds.count(kinds[-1]) == 1
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response  # type: ignore[union-attr]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final is not None and deltas == final.output_text


def test_background_run_is_retrieved_until_completed(pplx: Perplexity) -> None:
    queued = pplx.responses.create(preset="medium", input=QUESTION, background=True, store=True)
    assert queued.status == "queued" and queued.output == [] and queued.store is True

    current = wait_for(lambda: pplx.responses.retrieve(queued.id), "completed")
    assert current.status == "completed" and "## Overview" in current.output_text
    with pytest.raises(NotFoundError):
        pplx.responses.retrieve("resp_missing")


def test_background_stream_resumes_through_retrieve(pplx: Perplexity) -> None:
    first = list(
        pplx.responses.create(
            preset="medium", input=QUESTION, background=True, store=True, stream=True
        )
    )
    ident = first[0].response.id  # type: ignore[union-attr]
    rest = list(pplx.responses.retrieve(ident, stream=True, starting_after=2))
    assert [e.sequence_number for e in rest] == [e.sequence_number for e in first[3:]]
    assert rest[-1].type == "response.completed"


def test_cancel_answers_cancelling_and_the_run_ends_cancelled(pplx: Perplexity) -> None:
    url = str(pplx.base_url).rstrip("/")
    queued = pplx.responses.create(preset="high", input=QUESTION, background=True, store=True)
    answer = pplx.responses.cancel(queued.id)
    assert isinstance(answer, ResponsesCancelResponseOutput)
    assert answer.response_id == queued.id and answer.status == "cancelling"

    final = wait_for(lambda: pplx.responses.retrieve(queued.id), "cancelled")
    assert final.status == "cancelled" and final.usage is None
    with pytest.raises(BadRequestError):
        pplx.responses.cancel(queued.id)
    assert stats(url)["cancels"] == 1


def test_effort_pinned_or_not_is_echoed_with_the_deprecated_preset(pplx: Perplexity) -> None:
    pinned = pplx.responses.create(effort="fast@2026-10-16.0", input=QUESTION)
    assert (pinned.effort, pinned.preset) == ("fast@2026-10-16.0", "fast@2026-10-16.0")
    assert pinned.model == "perplexity/sonar"
    both = pplx.responses.create(preset="fast", effort="low", input=QUESTION)
    assert both.effort == "low" and both.model == "openai/gpt-5-mini"
    with pytest.raises(BadRequestError):
        pplx.responses.create(effort="fast-search", input=QUESTION)


def test_a_run_that_requires_action_parses_billed_once_with_its_cost(pplx: Perplexity) -> None:
    url = str(pplx.base_url).rstrip("/")
    fault = {"X-Sim-Fault": '{"requires_action": true}'}
    waiting = pplx.responses.create(model="perplexity/sonar", input=QUESTION, extra_headers=fault)
    assert waiting.status == "requires_action" and waiting.usage is not None
    assert waiting.usage.cost.total_cost > 0
    events = list(
        pplx.responses.create(
            model="perplexity/sonar", input=QUESTION, stream=True, extra_headers=fault
        )
    )
    last = events[-1]
    assert last.type == "response.completed" and last.response.status == "requires_action"  # type: ignore[union-attr]
    queued = pplx.responses.create(
        preset="medium", input=QUESTION, background=True, store=True, extra_headers=fault
    )
    final = wait_for(lambda: pplx.responses.retrieve(queued.id), "requires_action")
    assert final.status == "requires_action" and final.usage is not None
    assert stats(url)["generations"] == 3 and stats(url)["background_runs"] == 1


def test_a_requested_skill_is_loaded_with_its_sdk_event(pplx: Perplexity) -> None:
    events = list(
        pplx.responses.create(
            model="perplexity/sonar",
            input=QUESTION,
            stream=True,
            skills=[{"type": "builtin", "name": "office/pdf"}],
        )
    )
    loaded = [e for e in events if type(e).__name__ == "ResponseSkillLoadedEventOutput"]
    assert [e.name for e in loaded] == ["office/pdf"]  # type: ignore[union-attr]
    assert events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_tool_choice_is_validated_as_the_api_does(pplx: Perplexity) -> None:
    required = pplx.responses.create(
        model="perplexity/sonar",
        input=QUESTION,
        tools=[{"type": "web_search"}],
        tool_choice="required",
    )
    assert required.status == "completed"
    assert any(item.type == "search_results" for item in required.output)
    bare = pplx.responses.create(
        model="openai/gpt-5.1", input=QUESTION, tools=[{"type": "web_search"}], tool_choice="none"
    )
    assert not any(item.type == "search_results" for item in bare.output)
    with pytest.raises(BadRequestError, match="requires a tool"):
        pplx.responses.create(model="openai/gpt-5.1", input=QUESTION, tool_choice="required")


# -- Search API, models, retired endpoints -----------------------------------------------------


def test_search_create_parses_into_the_sdk_model(pplx: Perplexity) -> None:
    found = pplx.search.create(
        query="asyncio task cancel", max_results=5, search_domain_filter=["docs.python.org"]
    )
    assert isinstance(found, ApiSearchResponseOutput) and len(found.results) == 5
    assert all(r.url.startswith("https://docs.python.org/") and r.date for r in found.results)
    assert stats(str(pplx.base_url).rstrip("/"))["searches"] == 1


def test_models_list_parses_and_names_only_real_slugs(pplx: Perplexity) -> None:
    models = pplx.models.list()
    assert isinstance(models, ModelListOutput)
    ids = [m.id for m in models.data]
    assert "perplexity/sonar" in ids and not any(i.startswith("sonar") for i in ids)


def test_chat_completions_are_403_by_default(pplx: Perplexity) -> None:
    with pytest.raises(PermissionDeniedError) as raised:
        pplx.chat.completions.create(model="sonar-pro", messages=MESSAGES)
    body: Any = raised.value.body
    assert body["error"]["type"] == "chat_completions_not_available"
    with pytest.raises(PermissionDeniedError):
        pplx.async_.chat.completions.create(request={"model": "sonar", "messages": MESSAGES})


def test_openai_sdk_responses_and_chat(sim_url: str) -> None:
    with openai.OpenAI(api_key="test-key", base_url=sim_url + "/v1", max_retries=0) as client:
        response = client.responses.create(model="perplexity/sonar", input=QUESTION)
        events = list(
            client.responses.create(model="perplexity/sonar", input=QUESTION, stream=True)
        )
        same = client.responses.retrieve(response.id)
        with pytest.raises(openai.PermissionDeniedError):
            client.chat.completions.create(model="sonar", messages=MESSAGES)  # type: ignore[arg-type]

    assert response.status == "completed" and "asyncio.Task.cancel" in response.output_text
    assert response.output[-1].type == "message"
    assert events[-1].type == "response.completed"
    assert same.output_text == response.output_text


# -- Sonar mode: the retired protocol for OpenAI-compatible-server testing ---------------------


@pytest.mark.sim_sonar
def test_sonar_mode_chat_completion_and_stream(pplx: Perplexity) -> None:
    completion = pplx.chat.completions.create(model="sonar-pro", messages=MESSAGES)
    chunks = list(pplx.chat.completions.create(model="sonar", messages=MESSAGES, stream=True))

    content = completion.choices[0].message.content
    assert isinstance(content, str) and "[1]" in content
    assert completion.search_results is not None
    assert completion.search_results[0].title == "asyncio.Task.cancel"
    assert completion.citations == [r.url for r in completion.search_results]
    assert completion.usage is not None and completion.usage.cost.total_cost > 0
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert "asyncio.Task.cancel" in text and chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.sim_sonar
def test_sonar_mode_async_chat_completions(pplx: Perplexity) -> None:
    request = {"model": "sonar-deep-research", "messages": MESSAGES}
    created = pplx.async_.chat.completions.create(request=request)
    deadline = time.monotonic() + 10
    current = pplx.async_.chat.completions.get(created.id)
    while current.status != "COMPLETED" and time.monotonic() < deadline:
        time.sleep(0.05)
        current = pplx.async_.chat.completions.get(created.id)
    listed = pplx.async_.chat.completions.list()

    assert created.status == "CREATED"
    assert current.status == "COMPLETED" and current.response is not None
    assert current.response.search_results
    assert [r.id for r in listed.requests] == [created.id]


@pytest.mark.sim_sonar
def test_sonar_mode_openai_chat_completions(sim_url: str) -> None:
    with openai.OpenAI(api_key="test-key", base_url=sim_url, max_retries=0) as client:
        completion = client.chat.completions.create(model="sonar", messages=MESSAGES)  # type: ignore[arg-type]
    content = completion.choices[0].message.content
    assert content is not None and "asyncio.Task.cancel" in content
    extra = completion.model_extra or {}
    assert extra["search_results"][0]["title"] == "asyncio.Task.cancel"
