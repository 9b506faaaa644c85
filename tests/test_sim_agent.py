"""The simulator as the live API is today: Agent API, runs and cancel, Search API, models, 403s."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from pplx_nb.sim import inject_faults, serve, stats
from pplx_nb.sim._catalog import MODELS, PRESETS
from pplx_nb.sim._runs import frame_times

OFFLINE_MARK = "*Offline simulator answer from the Python documentation.*"
QUESTION = "How do I cancel an asyncio task?"
DEEP = {"preset": "medium", "input": QUESTION}


@pytest.fixture
def client(sim_url: str) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=sim_url, timeout=10, trust_env=False) as http:
        yield http


def frames(response: httpx2.Response) -> list[tuple[str, dict[str, Any]]]:
    """Each SSE frame as (its ``event:`` name, its JSON data)."""
    parsed = []
    for block in response.text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            parsed.append((lines.get("event", ""), json.loads(lines["data"])))
    return parsed


def events(response: httpx2.Response) -> list[dict[str, Any]]:
    return [data for _, data in frames(response)]


def poll_until(client: httpx2.Client, path: str, final: str) -> list[dict[str, Any]]:
    """Every state ``GET path`` returned until its status was ``final`` (for at most 10 s)."""
    states: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states.append(client.get(path).json())
        if states[-1]["status"] == final:
            break
        time.sleep(0.02)
    return states


def error_of(response: httpx2.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    return error


def message_text(response: dict[str, Any]) -> str:
    message = response["output"][-1]
    assert message["type"] == "message"
    return str(message["content"][0]["text"])


# -- retired Sonar -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/chat/completions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/sonar"),
        ("POST", "/async/chat/completions"),
        ("GET", "/async/chat/completions"),
        ("GET", "/async/chat/completions/abc"),
    ],
)
def test_sonar_endpoints_answer_403_as_the_live_api(
    client: httpx2.Client, method: str, path: str
) -> None:
    body = {"model": "sonar", "messages": [{"role": "user", "content": QUESTION}]}
    response = client.request(method, path, json=body if method == "POST" else None)
    assert response.status_code == 403
    error = error_of(response)
    assert error["type"] == "chat_completions_not_available" and error["code"] == 403
    assert "/v1/agent" in error["message"] and "--sonar" in error["message"]
    assert stats(str(client.base_url))["generations"] == 0


def test_sonar_mode_serves_chat_completions() -> None:
    body = {"model": "sonar", "messages": [{"role": "user", "content": QUESTION}]}
    with serve(latency_ms=0, sonar=True) as url:
        completion = httpx2.post(url + "/chat/completions", json=body).json()
        ids = [m["id"] for m in httpx2.get(url + "/v1/models").json()["data"]]
    assert completion["object"] == "chat.completion"
    assert "sonar-pro" in ids and "perplexity/sonar" in ids


# -- Agent API ---------------------------------------------------------------------------------


def test_agent_answer_has_search_results_then_message(client: httpx2.Client) -> None:
    body = client.post("/v1/agent", json={"model": "perplexity/sonar", "input": QUESTION}).json()

    assert body["object"] == "response" and body["status"] == "completed"
    assert body["id"].startswith("resp_") and "citations" not in body
    assert body["model"] == "perplexity/sonar" and body["store"] is True
    results, message = body["output"]
    assert results["type"] == "search_results"
    assert results["results"][0]["title"] == "asyncio.Task.cancel"
    assert [r["id"] for r in results["results"]] == list(range(1, len(results["results"]) + 1))
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", r["date"]) for r in results["results"])
    assert message["type"] == "message" and message["role"] == "assistant"
    part = message["content"][0]
    assert part["type"] == "output_text" and part["text"].startswith(OFFLINE_MARK)
    assert part["annotations"] == []
    usage = body["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    cost = usage["cost"]
    assert cost["currency"] == "USD" and cost["total_cost"] > 0
    searches = usage["tool_calls_details"]["search_web"]
    assert searches["invocation"] == 1 and cost["tool_calls_cost"] == searches["cost_usd"]
    assert cost["total_cost"] == pytest.approx(
        cost["input_cost"] + cost["output_cost"] + cost["tool_calls_cost"], abs=2e-6
    )


def test_a_stored_answer_can_be_retrieved_by_id(client: httpx2.Client) -> None:
    body = client.post("/v1/agent", json={"model": "perplexity/sonar", "input": QUESTION}).json()
    again = client.get(f"/v1/responses/{body['id']}").json()
    assert again["status"] == "completed" and message_text(again) == message_text(body)


def test_agent_rejects_unknown_fields_like_the_real_api(client: httpx2.Client) -> None:
    response = client.post(
        "/v1/responses", json={"model": "perplexity/sonar", "input": "x", "search_mode": "web"}
    )
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": 'invalid request body: json: unknown field "search_mode"',
            "type": "invalid_request",
            "code": 400,
            "param": "search_mode",
        }
    }


def test_unknown_fields_inside_a_web_search_tool_are_400_too(client: httpx2.Client) -> None:
    tool = {"type": "web_search", "filters": {"search_domain_filter": ["a.org"], "country": "US"}}
    response = client.post(
        "/v1/agent", json={"model": "perplexity/sonar", "input": "x", "tools": [tool]}
    )
    assert response.status_code == 400 and error_of(response)["param"] == "country"


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ({"model": "perplexity/sonar", "input": ""}, "invalid_request"),
        ({"model": "perplexity/sonar", "input": []}, "invalid_request"),
        ({"input": "x"}, "invalid_request"),
        ({"preset": "turbo", "input": "x"}, "invalid_request"),
        ({"effort": "turbo", "input": "x"}, "invalid_request"),
        ({"preset": {"name": "low"}, "input": "x"}, "invalid_request"),
        ({"models": [], "input": "x"}, "invalid_request"),
        ({"model": "perplexity/sonar", "input": [{"role": "robot", "content": "x"}]}, None),
        ({"model": "sonar", "input": "x"}, "invalid_model"),
        ({"model": "perplexity/sonar-pro", "input": "x"}, "invalid_model"),
        ({"models": ["openai/gpt-5.1", "sonar-pro"], "input": "x"}, "invalid_model"),
        (
            {
                "model": "perplexity/sonar",
                "input": "x",
                "tools": [{"type": "web_search", "filters": {"search_recency_filter": "decade"}}],
            },
            "invalid_request",
        ),
    ],
)
def test_invalid_agent_requests_are_400(
    client: httpx2.Client, body: dict[str, Any], kind: str | None
) -> None:
    response = client.post("/v1/agent", json=body)
    assert response.status_code == 400
    assert error_of(response)["type"] == (kind or "invalid_request")


@pytest.mark.parametrize(
    "choice",
    ["sometimes", {"type": "teleport"}, {"type": "function"}, {"type": "fetch_url"}],
)
def test_a_tool_choice_the_api_refuses_is_a_400(client: httpx2.Client, choice: object) -> None:
    body = {"effort": "low", "input": "json dumps", "tools": [{"type": "web_search"}]}
    response = client.post("/v1/agent", json={**body, "tool_choice": choice})
    assert response.status_code == 400 and error_of(response)["param"] == "tool_choice"


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_resolves_to_a_model_the_catalog_sells(
    client: httpx2.Client, preset: str
) -> None:
    body = client.post("/v1/agent", json={"preset": preset, "input": "json dumps"}).json()
    assert body["model"] == PRESETS[preset] and body["model"] in MODELS
    assert body["preset"] == preset


def test_effort_wins_over_preset_and_a_model_wins_over_both(client: httpx2.Client) -> None:
    both = client.post(
        "/v1/agent", json={"preset": "fast", "effort": "low", "input": "json dumps"}
    ).json()
    assert both["model"] == PRESETS["low"] and both["effort"] == "low"
    chain = client.post(
        "/v1/agent",
        json={"models": ["openai/gpt-5.2", "openai/gpt-5.1"], "preset": "low", "input": "x"},
    ).json()
    assert chain["model"] == "openai/gpt-5.2"


def test_agent_accepts_message_lists_instructions_and_tools(client: httpx2.Client) -> None:
    body = client.post(
        "/v1/agent",
        json={
            "preset": "low",
            "instructions": "End with a list titled 'Related questions:'.",
            "input": [
                {"role": "user", "content": "How do I cancel an asyncio task?"},
                {"role": "assistant", "content": "Use Task.cancel()."},
                {"role": "user", "content": [{"type": "input_text", "text": "json dumps"}]},
            ],
            "tools": [{"type": "web_search", "filters": {"search_domain_filter": ["python.org"]}}],
            "max_output_tokens": 2000,
            "store": True,
        },
    ).json()
    titles = [r["title"] for r in body["output"][0]["results"]]
    assert "json.dumps" in titles[:3] and not any("asyncio" in t for t in titles)
    assert "\n\nRelated questions:\n- " in message_text(body)


# -- streams -----------------------------------------------------------------------------------


def test_stream_frames_carry_event_lines_naming_their_type(client: httpx2.Client) -> None:
    request = {"model": "perplexity/sonar", "input": QUESTION, "stream": True}
    parsed = frames(client.post("/v1/agent", json=request))
    final = client.post("/v1/agent", json={**request, "stream": False}).json()

    assert all(name == data["type"] for name, data in parsed)
    stream = [data for _, data in parsed]
    numbers = [e["sequence_number"] for e in stream]
    assert numbers == list(range(len(stream)))
    assert [e["type"] for e in stream[:3]] == [
        "response.created",
        "response.in_progress",
        "response.reasoning.started",
    ]
    terminals = [e for e in stream if e["type"] in {"response.completed", "response.failed"}]
    assert terminals == [stream[-1]] and stream[-1]["type"] == "response.completed"
    deltas = "".join(e["delta"] for e in stream if e["type"] == "response.output_text.delta")
    assert deltas == message_text(final) == message_text(stream[-1]["response"])


def test_reasoning_events_come_in_the_order_a_researcher_works(client: httpx2.Client) -> None:
    stream = events(client.post("/v1/responses", json={**DEEP, "stream": True}))
    kinds = [e["type"] for e in stream]
    reasoning = [k.removeprefix("response.reasoning.") for k in kinds if ".reasoning." in k]
    rounds = reasoning.count("search_queries")
    assert rounds >= 3
    assert reasoning == [
        "started",
        *["search_queries", "search_results"] * rounds,
        "fetch_url_queries",
        "fetch_url_results",
        "stopped",
    ]
    assert kinds.index("response.reasoning.stopped") < kinds.index("response.output_item.added")
    found = [r for e in stream if e["type"].endswith("search_results") for r in e["results"]]
    final = stream[-1]["response"]
    assert found == final["output"][0]["results"]
    fetched = next(e for e in stream if e["type"].endswith("fetch_url_results"))["contents"]
    assert [item["type"] for item in final["output"]] == [
        "search_results",
        "fetch_url_results",
        "message",
    ]
    assert final["output"][1]["contents"] == fetched
    assert final["usage"]["tool_calls_details"]["fetch_url"]["invocation"] == len(fetched)
    assert "## Overview" in message_text(final) and "## Conclusion" in message_text(final)


def test_a_failed_stream_ends_with_response_failed_carrying_only_the_error(
    client: httpx2.Client,
) -> None:
    request = {"model": "perplexity/sonar", "input": "x", "stream": True}
    stream = events(
        client.post("/v1/agent", json=request, headers={"X-Sim-Fault": '{"agent_failed": true}'})
    )
    assert stream[-1]["type"] == "response.failed"
    assert set(stream[-1]) == {"type", "error", "sequence_number"}
    assert stats(str(client.base_url))["generations"] == 0


# -- background runs and cancel ----------------------------------------------------------------


def test_background_run_goes_queued_in_progress_completed(client: httpx2.Client) -> None:
    created = client.post("/v1/responses", json={**DEEP, "background": True, "store": True})
    created_body = created.json()
    assert created_body["status"] == "queued" and created_body["output"] == []

    *running, current = poll_until(client, f"/v1/responses/{created_body['id']}", "completed")
    statuses = [state["status"] for state in (*running, current)]
    assert "in_progress" in statuses and statuses[-1] == "completed"
    assert all(state["output"] == [] and "usage" not in state for state in running)
    assert message_text(current).count("## ") >= 3
    same = client.get(f"/v1/agent/{created_body['id']}").json()
    assert same["output"] == current["output"]
    assert stats(str(client.base_url))["background_runs"] == 1


def test_quick_background_run_finishes_at_once(client: httpx2.Client) -> None:
    created = client.post(
        "/v1/agent", json={"model": "perplexity/sonar", "input": "x", "background": True}
    ).json()
    assert created["status"] == "queued"
    assert client.get(f"/v1/agent/{created['id']}").json()["status"] == "completed"


def test_unknown_response_id_is_a_404_envelope(client: httpx2.Client) -> None:
    response = client.get("/v1/responses/resp_missing")
    assert response.status_code == 404
    error = error_of(response)
    assert error["type"] == "not_found" and error["code"] == 404
    assert "'resp_missing'" in error["message"] and "expired" in error["message"]


def test_only_the_newest_runs_are_kept_older_ones_expire(
    client: httpx2.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pplx_nb.sim._handlers._CACHE_SIZE", 3)
    body = {"preset": "fast", "input": QUESTION, "background": True}
    ids = [client.post("/v1/responses", json=body).json()["id"] for _ in range(4)]
    assert client.get(f"/v1/responses/{ids[0]}").status_code == 404
    assert [client.get(f"/v1/responses/{i}").status_code for i in ids[1:]] == [200, 200, 200]


def test_a_run_not_stored_is_billed_but_never_found(client: httpx2.Client) -> None:
    created = client.post("/v1/agent", json={**DEEP, "background": True, "store": False}).json()
    assert created["status"] == "queued" and created["store"] is False
    response = client.get(f"/v1/responses/{created['id']}")
    assert response.status_code == 404 and error_of(response)["type"] == "not_found"
    assert "store: false" in error_of(response)["message"]
    counters = stats(str(client.base_url))
    assert counters["background_runs"] == 1 and counters["generations"] == 1


def test_cancel_answers_cancelling_then_the_run_ends_cancelled_without_usage() -> None:
    with (
        serve(latency_ms=0, deep_research_seconds=30, cancel_seconds=0.3) as url,
        httpx2.Client(base_url=url, timeout=10) as client,
    ):
        run = client.post("/v1/responses", json={**DEEP, "background": True}).json()
        answer = client.post(f"/v1/responses/{run['id']}/cancel")
        right_after = client.get(f"/v1/responses/{run['id']}").json()
        states = poll_until(client, f"/v1/agent/{run['id']}", "cancelled")
        again = client.post(f"/v1/agent/{run['id']}/cancel")
        counters = stats(url)

    assert answer.status_code == 200
    assert answer.json() == {"response_id": run["id"], "status": "cancelling"}
    assert right_after["status"] in ("queued", "in_progress")
    final = states[-1]
    assert final["status"] == "cancelled" and final["output"] == [] and "usage" not in final
    assert again.status_code == 400 and "already ended (cancelled)" in error_of(again)["message"]
    assert counters["cancels"] == 1
    assert counters["requests"]["POST /v1/responses/{id}/cancel"] == 1
    assert counters["requests"]["POST /v1/agent/{id}/cancel"] == 1


def test_cancelling_a_finished_or_unknown_run_is_refused(client: httpx2.Client) -> None:
    done = client.post("/v1/agent", json={"model": "perplexity/sonar", "input": "x"}).json()
    finished = client.post(f"/v1/responses/{done['id']}/cancel")
    assert finished.status_code == 400
    assert "already ended (completed)" in error_of(finished)["message"]
    assert client.post("/v1/responses/resp_missing/cancel").status_code == 404
    assert stats(str(client.base_url))["cancels"] == 0


def test_a_stream_whose_run_is_cancelled_stops_with_response_cancelled() -> None:
    with (
        serve(latency_ms=0, deep_research_seconds=20, cancel_seconds=0) as url,
        httpx2.Client(base_url=url, timeout=30) as client,
        client.stream("POST", "/v1/agent", json={**DEEP, "stream": True}) as response,
    ):
        seen: list[dict[str, Any]] = []
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            seen.append(json.loads(line[len("data: ") :]))
            if len(seen) == 1:
                ident = seen[0]["response"]["id"]
                assert client.post(f"/v1/agent/{ident}/cancel").status_code == 200
        final = client.get(f"/v1/responses/{ident}").json()

    assert seen[-1]["type"] == "response.cancelled"
    assert seen[-1]["sequence_number"] == len(seen) - 1
    assert not any(e["type"] == "response.completed" for e in seen)
    assert final["status"] == "cancelled"


def test_a_background_stream_resumes_after_a_sequence_number(client: httpx2.Client) -> None:
    first = events(client.post("/v1/responses", json={**DEEP, "background": True, "stream": True}))
    ident = first[0]["response"]["id"]
    rest = events(
        client.get(f"/v1/responses/{ident}", params={"stream": "true", "starting_after": 4})
    )
    assert rest == first[5:]
    refused = client.get(f"/v1/responses/{ident}", params={"stream": "true"})
    assert refused.status_code == 400 and error_of(refused)["param"] == "starting_after"


def test_a_fault_can_add_headers_to_answers_and_errors(client: httpx2.Client) -> None:
    url = str(client.base_url)
    limits = {"X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "0"}
    inject_faults(url, {"headers": limits}, {"status": 429, "retry_after": 2, "headers": limits})
    body = {"model": "perplexity/sonar", "input": "x"}
    answered = client.post("/v1/agent", json=body)
    limited = client.post("/v1/agent", json=body)
    assert answered.status_code == 200 and answered.headers["x-ratelimit-remaining"] == "0"
    assert limited.status_code == 429 and limited.headers["retry-after"] == "2"
    assert limited.headers["x-ratelimit-limit"] == "50"
    assert error_of(limited)["type"] == "request_rate_limit_exceeded"
    refused = client.post("/_sim/faults", json={"faults": [{"headers": {"Bad Name": "x"}}]})
    assert refused.status_code == 400 and "'headers'" in error_of(refused)["message"]


# -- citations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("style", "marker"),
    [
        ("numbered", r"\[(\d+)\]"),
        ("web", r"\[web:(\d+)\]"),
        ("link", r"\[[^\]]+\]\((https://[^)]+)\)"),
    ],
)
def test_each_citation_style_points_at_the_results(style: str, marker: str) -> None:
    with serve(latency_ms=0, citations=style) as url:  # type: ignore[arg-type]
        body = httpx2.post(url + "/v1/agent", json={"preset": "fast", "input": QUESTION}).json()
    results = body["output"][0]["results"]
    cited = re.findall(marker, message_text(body))
    assert len(cited) >= 2
    if style == "numbered":
        assert {int(n) for n in cited} <= {r["id"] for r in results}
    elif style == "web":
        assert {int(n) for n in cited} <= set(range(len(results)))
        assert "[1]" not in message_text(body)
    else:
        assert set(cited) <= {r["url"] for r in results}


# -- Search API and models ---------------------------------------------------------------------


def test_search_returns_ranked_pages_with_dates_and_is_counted(client: httpx2.Client) -> None:
    response = client.post("/search", json={"query": "json dumps", "max_results": 3})
    body = response.json()
    assert response.status_code == 200 and body["id"]
    titles = [r["title"] for r in body["results"]]
    assert len(titles) == 3 and "json.dumps" in titles
    for result in body["results"]:
        assert set(result) >= {"url", "title", "snippet", "date"}
        assert isinstance(result["date"], str) and result["snippet"]
    counters = stats(str(client.base_url))
    assert counters["searches"] == 1 and counters["generations"] == 0


def test_search_filters_are_top_level_and_strict(client: httpx2.Client) -> None:
    kept = client.post(
        "/search",
        json={
            "query": ["json dumps", "asyncio task"],
            "search_domain_filter": ["-docs.python.org"],
            "search_recency_filter": "month",
        },
    ).json()
    assert kept["results"] == []
    nested = client.post("/search", json={"query": "x", "filters": {"search_mode": "web"}})
    assert nested.status_code == 400 and error_of(nested)["param"] == "filters"
    assert client.post("/search", json={"query": ""}).status_code == 400
    assert client.post("/search", json={"query": "x", "max_results": 50}).status_code == 400
    assert stats(str(client.base_url))["searches"] == 1


def test_models_lists_only_real_slugs_with_prices(client: httpx2.Client) -> None:
    data = client.get("/v1/models").json()["data"]
    ids = [m["id"] for m in data]
    assert "perplexity/sonar" in ids and "perplexity/sonar-pro" not in ids
    assert all("/" in i for i in ids) and set(ids) == set(MODELS)
    assert set(PRESETS.values()) <= set(ids)
    assert all(m["pricing"]["input"] > 0 and m["owned_by"] == m["id"].split("/")[0] for m in data)


# -- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize(("environment", "chat_status"), [("1", 200), ("0", 403)])
def test_cli_serves_sonar_when_the_environment_asks_and_writes_chosen_citations(
    environment: str, chat_status: int
) -> None:
    env = {**os.environ, "PPLX_NB_SIM_SONAR": environment}
    command = [sys.executable, "-m", "pplx_nb.sim", "--latency-ms", "0", "--citations", "web"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        chat = {"model": "sonar", "messages": [{"role": "user", "content": QUESTION}]}
        status = httpx2.post(url + "/chat/completions", json=chat, timeout=30).status_code
        agent = httpx2.post(
            url + "/v1/agent", json={"preset": "fast", "input": QUESTION}, timeout=30
        )
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert status == chat_status
    assert "[web:0]" in message_text(agent.json())


def test_a_deep_run_researches_over_three_quarters_of_its_time_and_writes_in_the_last() -> None:
    # 12 frames up to response.reasoning.stopped, then 24 of output (items and text deltas).
    due = frame_times(36, 12, 20.0)
    assert due == sorted(due) and len(due) == 36
    assert 2.0 < due[0] < 4.0, "after the run's queued tenth"
    assert due[11] == pytest.approx(15.0), "the research ends three quarters of the way in"
    assert due[12] > 15.0 and due[-1] == pytest.approx(20.0)
    assert frame_times(4, 0, 2.0) == [0.5, 1.0, 1.5, 2.0], "nothing to research: evenly"
