"""The official ``perplexityai`` and ``openai`` SDKs parse the simulator's answers."""

from __future__ import annotations

import time

import pytest
from openai import NotFoundError, OpenAI
from perplexity import Perplexity

QUESTION = "How do I cancel an asyncio task?"
MESSAGES = [{"role": "user", "content": QUESTION}]


def test_perplexity_chat_completion(sim_url: str) -> None:
    with Perplexity(api_key="test-key", base_url=sim_url, max_retries=0) as client:
        completion = client.chat.completions.create(model="sonar-pro", messages=MESSAGES)

    content = completion.choices[0].message.content
    assert isinstance(content, str) and "[1]" in content
    assert completion.search_results is not None
    assert completion.search_results[0].title == "asyncio.Task.cancel"
    assert completion.search_results[0].url.startswith("https://docs.python.org/3/")
    assert completion.citations == [r.url for r in completion.search_results]
    assert completion.usage is not None and completion.usage.cost.total_cost > 0


def test_perplexity_chat_completion_stream(sim_url: str) -> None:
    with Perplexity(api_key="test-key", base_url=sim_url, max_retries=0) as client:
        chunks = list(client.chat.completions.create(model="sonar", messages=MESSAGES, stream=True))

    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert "asyncio.Task.cancel" in text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].search_results and chunks[-1].usage is not None
    assert chunks[-1].usage.cost.total_cost > 0


def test_perplexity_responses_create_and_stream(sim_url: str) -> None:
    with Perplexity(api_key="test-key", base_url=sim_url, max_retries=0) as client:
        response = client.responses.create(model="perplexity/sonar", input=QUESTION)
        events = list(client.responses.create(preset="fast", input=QUESTION, stream=True))

    assert response.status == "completed"
    assert "asyncio.Task.cancel" in response.output_text
    assert [item.type for item in response.output] == ["search_results", "message"]
    assert response.output[0].results[0].url.endswith("#asyncio.Task.cancel")
    assert response.usage is not None and response.usage.cost is not None
    assert events[-1].type == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == response.output_text


def test_perplexity_async_chat_completions(sim_url: str) -> None:
    request = {"model": "sonar-deep-research", "messages": MESSAGES}
    with Perplexity(api_key="test-key", base_url=sim_url, max_retries=0) as client:
        created = client.async_.chat.completions.create(request=request)
        deadline = time.monotonic() + 5
        current = client.async_.chat.completions.get(created.id)
        while current.status != "COMPLETED" and time.monotonic() < deadline:
            time.sleep(0.05)
            current = client.async_.chat.completions.get(created.id)
        listed = client.async_.chat.completions.list()

    assert created.status == "CREATED"
    assert current.status == "COMPLETED" and current.response is not None
    assert current.response.search_results
    assert [r.id for r in listed.requests] == [created.id]


def test_openai_responses_create(sim_url: str) -> None:
    with OpenAI(api_key="test-key", base_url=sim_url + "/v1", max_retries=0) as client:
        response = client.responses.create(model="perplexity/sonar", input=QUESTION)
        events = list(
            client.responses.create(model="perplexity/sonar", input=QUESTION, stream=True)
        )

    assert response.status == "completed"
    assert "asyncio.Task.cancel" in response.output_text
    message = response.output[-1]
    assert message.type == "message"
    annotations = message.content[0].annotations
    assert annotations and annotations[0].url.startswith("https://docs.python.org/")
    assert events[-1].type == "response.completed"


def test_openai_chat_completions(sim_url: str) -> None:
    with OpenAI(api_key="test-key", base_url=sim_url, max_retries=0) as client:
        completion = client.chat.completions.create(model="sonar", messages=MESSAGES)
        chunks = list(client.chat.completions.create(model="sonar", messages=MESSAGES, stream=True))

    content = completion.choices[0].message.content
    assert content is not None and "asyncio.Task.cancel" in content
    extra = completion.model_extra or {}
    assert extra["search_results"][0]["title"] == "asyncio.Task.cancel"
    assert extra["citations"][0].startswith("https://docs.python.org/")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == content


def test_background_runs_through_both_sdks(sim_url: str) -> None:
    with (
        Perplexity(api_key="test-key", base_url=sim_url, max_retries=0) as pplx,
        OpenAI(api_key="test-key", base_url=sim_url + "/v1", max_retries=0) as oai,
    ):
        queued = pplx.responses.create(preset="medium", input=QUESTION, background=True)
        assert queued.status == "queued" and queued.output == []
        deadline = time.monotonic() + 5
        current = pplx.responses.retrieve(queued.id)
        while current.status != "completed" and time.monotonic() < deadline:
            time.sleep(0.05)
            current = pplx.responses.retrieve(queued.id)
        same = oai.responses.retrieve(queued.id)
        with pytest.raises(NotFoundError):
            oai.responses.retrieve("resp_missing")
        cancelled = oai.responses.cancel(
            oai.responses.create(
                model="perplexity/sonar-deep-research", input=QUESTION, background=True
            ).id
        )
        models = [m.id for m in oai.models.list().data]

    assert "## Overview" in current.output_text
    assert same.output_text == current.output_text
    assert cancelled.status == "cancelled"
    assert "sonar-deep-research" in models
