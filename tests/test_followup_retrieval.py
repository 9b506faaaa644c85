"""Follow-ups retrieve the right source once reformulated, over real HTTP against the simulator.

Each dialogue of ``tests/data/followup_dialogues.json`` is played through the client: the first
question is asked, its answer (with sources) becomes the history, and the context-dependent second
question is asked twice — as typed, and reformulated by :func:`pplx_nb.context.reformulate`. The
share of second turns whose top source is the expected one must reach 0.8 with reformulation and
beat the unreformulated share by at least 0.3.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from pplx_nb import Message, Settings, context
from pplx_nb.api import AsyncClient, Request
from pplx_nb.context import _rewrite
from pplx_nb.sim import inject_faults, stats

DIALOGUES = Path(__file__).parent / "data" / "followup_dialogues.json"


def _dialogues() -> list[dict[str, Any]]:
    data = json.loads(DIALOGUES.read_text(encoding="utf-8"))
    return list(data["dialogues"])


async def _top_url(client: AsyncClient, messages: list[Message]) -> str | None:
    wire = [{"role": m.role, "content": m.content} for m in messages]
    answer = await client.ask(Request(messages=wire, model="sonar", use_cache=False))
    return answer.sources[0].url if answer.sources else None


async def _play(settings: Settings, dialogue: dict[str, Any]) -> tuple[bool, bool, str]:
    async with AsyncClient(settings) as client:
        first = Message(role="user", content=dialogue["first"])
        wire = [{"role": "user", "content": first.content}]
        answer = await client.ask(Request(messages=wire, model="sonar", use_cache=False))
        reply = Message(role="assistant", content=answer.text, sources=answer.sources)
        history = [first, reply]
        second = dialogue["second"]
        assert context.is_follow_up(second, history), second
        rewritten = context.reformulate(second, history)
        plain = await _top_url(client, [*history, Message(role="user", content=second)])
        helped = await _top_url(client, [*history, Message(role="user", content=rewritten)])
    expected = dialogue["expected_url"]
    return plain == expected, helped == expected, rewritten


def test_dialogue_set_is_large_varied_and_hand_written() -> None:
    dialogues = _dialogues()
    assert len(dialogues) >= 40
    assert len({d["topic"] for d in dialogues}) >= 25
    assert len({d["second"] for d in dialogues}) == len(dialogues)
    for dialogue in dialogues:
        assert dialogue["expected_url"].startswith("https://docs.python.org/3/library/")
        assert dialogue["second"] != dialogue["standalone"]


def test_reformulated_follow_ups_find_the_expected_source(settings: Settings) -> None:
    async def run_all() -> list[tuple[bool, bool, str]]:
        return list(await asyncio.gather(*(_play(settings, d) for d in _dialogues())))

    results = asyncio.run(run_all())
    plain = sum(r[0] for r in results) / len(results)
    helped = sum(r[1] for r in results) / len(results)
    misses = [r[2] for r in results if not r[1]]
    assert helped >= 0.8, f"share with reformulation {helped:.2f}; missed: {misses}"
    assert helped - plain >= 0.3, f"with {helped:.2f} vs without {plain:.2f}"


def _history() -> list[Message]:
    dialogue = _dialogues()[0]
    return [
        Message(role="user", content=dialogue["first"]),
        Message(role="assistant", content="...", sources=[]),
    ]


def _reformulate_with(settings: Settings, *, use_model: bool, **client_opts: Any) -> str:
    async def run() -> str:
        async with AsyncClient(settings, **client_opts) as client:
            return await context.areformulate(
                "How can I check whether it was cancelled?", _history(), client, use_model=use_model
            )

    return asyncio.run(run())


def test_areformulate_offline_uses_the_heuristic_without_asking(settings: Settings) -> None:
    before = stats(settings.base_url)["generations"]
    rewritten = _reformulate_with(settings, use_model=False)
    assert rewritten == context.reformulate("How can I check whether it was cancelled?", _history())
    assert stats(settings.base_url)["generations"] == before


def test_areformulate_rejects_an_answer_in_place_of_a_query(settings: Settings) -> None:
    # The simulator answers the question (several lines, citations) instead of rewriting it.
    rewritten = _reformulate_with(settings, use_model=True)
    assert rewritten == context.reformulate("How can I check whether it was cancelled?", _history())


@pytest.fixture
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> float:
    """The model's deadline for a rewrite cut to 0.5 s, so a test waits that long, not 5 s."""
    assert _rewrite._MODEL_DEADLINE_MS <= 5_000, "a follow-up would wait too long for its query"
    monkeypatch.setattr(_rewrite, "_MODEL_DEADLINE_MS", 500)
    return 0.5


def test_areformulate_falls_back_fast_when_the_model_call_fails(
    settings: Settings, caplog: pytest.LogCaptureFixture, short_deadline: float
) -> None:
    # The client would retry three times, waiting the 8 s the server asks for before each.
    inject_faults(settings.base_url, {"status": 500, "retry_after": 8, "times": 10})
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pplx_nb.context"):
        rewritten = _reformulate_with(settings, use_model=True)
    assert time.monotonic() - started < short_deadline + 5  # not after the first 8 s pause
    assert rewritten == context.reformulate("How can I check whether it was cancelled?", _history())
    assert "reformulation by model failed" in caplog.text


def test_areformulate_falls_back_when_the_model_call_hangs(
    settings: Settings, short_deadline: float
) -> None:
    slow = settings.model_copy(update={"timeout_ms": 60_000})
    inject_faults(settings.base_url, {"hang": 60, "times": 10})
    started = time.monotonic()
    rewritten = _reformulate_with(slow, use_model=True)
    assert time.monotonic() - started < short_deadline + 5  # not when the 60 s hang ends
    assert rewritten == context.reformulate("How can I check whether it was cancelled?", _history())


def test_areformulate_uses_the_model_query_when_it_is_one_line(settings: Settings) -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        body = {
            "id": "r1",
            "model": "sonar",
            "object": "chat.completion",
            "created": 0,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "Is an asyncio.Task cancelled?"},
                }
            ],
        }
        return httpx2.Response(200, json=body)

    sonar = settings.model_copy(update={"api_style": "sonar"})
    rewritten = _reformulate_with(sonar, use_model=True, transport=httpx2.MockTransport(handler))
    assert rewritten == "Is an asyncio.Task cancelled?"
    assert seen[0]["model"] == "sonar"
    assert seen[0]["max_tokens"] <= 60
    assert "it was cancelled" in seen[0]["messages"][-1]["content"]
