"""The offline simulator over real loopback HTTP: both protocols, faults, runs, corpus, CLI."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import platform
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx2
import pytest

from pplx_nb._errors import ValidationError
from pplx_nb.sim import inject_faults, reset, serve, shared_server_url, stats
from pplx_nb.sim._bm25 import BM25Index, tokenize
from pplx_nb.sim._corpus import directory_documents, load_corpus
from pplx_nb.sim._endpoints import Endpoints
from pplx_nb.sim._frozen import FROZEN_CORPUS, FROZEN_LICENSE, read_frozen
from pplx_nb.sim._http import Reply, Request
from pplx_nb.sim._options import SimOptions

pytestmark = pytest.mark.sim_sonar

OFFLINE_MARK = "*Offline simulator answer from the Python documentation.*"
QUESTION = "How do I cancel an asyncio task?"


def ask(question: str = QUESTION, **extra: Any) -> dict[str, Any]:
    """A chat-completions body with one user message."""
    return {"model": "sonar-pro", "messages": [{"role": "user", "content": question}], **extra}


@pytest.fixture
def client(sim_url: str) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=sim_url, timeout=10, trust_env=False) as http:
        yield http


def sse_payloads(response: httpx2.Response) -> list[Any]:
    """The JSON payloads (and the literal ``[DONE]``) of an SSE body, in order."""
    frames = []
    for line in response.text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            frames.append(data if data == "[DONE]" else json.loads(data))
    return frames


def poll_until(client: httpx2.Client, path: str, final: str) -> list[dict[str, Any]]:
    """Every state ``GET path`` returned until its status was ``final`` (for at most 5 s)."""
    states: list[dict[str, Any]] = []
    deadline = time.monotonic() + 5
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


# -- chat completions --------------------------------------------------------------------------


def test_chat_completion_cites_python_docs_with_matching_markers(client: httpx2.Client) -> None:
    body = client.post("/chat/completions", json=ask()).json()

    assert body["object"] == "chat.completion"
    content = body["choices"][0]["message"]["content"]
    assert content.startswith(OFFLINE_MARK)
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["search_results"][0]["title"] == "asyncio.Task.cancel"
    assert body["citations"] == [r["url"] for r in body["search_results"]]
    assert all(u.startswith("https://docs.python.org/3/") for u in body["citations"])
    markers = {int(n) for n in re.findall(r"\[(\d+)\]", content)}
    assert markers and max(markers) <= len(body["citations"])
    assert "related_questions" not in body


def test_chat_usage_is_plausible_and_priced(client: httpx2.Client) -> None:
    body = client.post("/v1/chat/completions", json=ask()).json()
    usage = body["usage"]
    words = len(body["choices"][0]["message"]["content"].split())

    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert abs(usage["completion_tokens"] - words * 1.3) <= 2
    expected_output = usage["completion_tokens"] * 15 / 1e6  # sonar-pro: $15 per 1M out
    assert usage["cost"]["output_tokens_cost"] == pytest.approx(expected_output, abs=1e-6)
    assert usage["cost"]["total_cost"] > usage["cost"]["output_tokens_cost"]


def test_same_question_gets_the_same_answer(client: httpx2.Client) -> None:
    first = client.post("/v1/sonar", json=ask()).json()
    second = client.post("/chat/completions", json=ask()).json()
    assert first["choices"][0]["message"] == second["choices"][0]["message"]
    assert first["id"] != second["id"]


def test_ranking_reads_only_the_last_user_message(client: httpx2.Client) -> None:
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "Call cancel() on the task."},
        {"role": "user", "content": "How do I sort a list?"},
    ]
    body = client.post("/chat/completions", json={"model": "sonar", "messages": history}).json()
    titles = [r["title"] for r in body["search_results"]]
    assert "list.sort" in titles
    assert not any("asyncio" in title for title in titles)


def test_related_questions_and_images_only_when_asked(client: httpx2.Client) -> None:
    body = client.post(
        "/chat/completions", json=ask(return_related_questions=True, return_images=True)
    ).json()
    assert len(body["related_questions"]) >= 2
    assert all(q.endswith("?") for q in body["related_questions"])
    assert body["images"] == []


def test_reasoning_model_starts_with_think_block(client: httpx2.Client) -> None:
    body = client.post("/chat/completions", json=ask(model="sonar-reasoning-pro")).json()
    content = body["choices"][0]["message"]["content"]
    assert content.startswith("<think>")
    assert OFFLINE_MARK in content.split("</think>", 1)[1]
    assert body["usage"]["reasoning_tokens"] > 0


def test_deep_research_returns_a_longer_sectioned_report(client: httpx2.Client) -> None:
    quick = client.post("/chat/completions", json=ask(model="sonar")).json()
    started = time.monotonic()
    deep = client.post("/chat/completions", json=ask(model="sonar-deep-research")).json()

    assert time.monotonic() - started >= 0.25  # the fixture's 0.3 s deep-research duration
    text = deep["choices"][0]["message"]["content"]
    assert text.startswith("<think>")
    assert len(re.findall(r"^## ", text, re.MULTILINE)) >= 3
    assert len(deep["search_results"]) > len(quick["search_results"])
    assert len(text) > 2 * len(quick["choices"][0]["message"]["content"])
    assert deep["usage"]["cost"]["search_queries_cost"] > 0


def test_max_tokens_truncates_with_finish_reason_length(client: httpx2.Client) -> None:
    body = client.post("/chat/completions", json=ask(max_tokens=12)).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] <= 13


def test_domain_filter_excluding_the_docs_finds_nothing(client: httpx2.Client) -> None:
    body = client.post(
        "/chat/completions", json=ask(search_domain_filter=["-docs.python.org"])
    ).json()
    assert body["search_results"] == [] and body["citations"] == []
    assert "no document" in body["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        ({"messages": []}, "non-empty"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
            "alternating",
        ),
        ({"messages": [{"role": "assistant", "content": "a"}]}, "alternating"),
        ({"search_recency_filter": "decade"}, "search_recency_filter"),
        ({"search_after_date_filter": "2025-01-01"}, "MM/DD/YYYY"),
        ({"model": "gpt-4"}, "Invalid model"),
        ({"temperature": 3}, "temperature"),
    ],
)
def test_invalid_chat_requests_get_the_400_envelope(
    client: httpx2.Client, patch: dict[str, Any], fragment: str
) -> None:
    response = client.post("/chat/completions", json={**ask(), **patch})
    assert response.status_code == 400
    error = error_of(response)
    assert fragment in error["message"]
    assert error["code"] == 400 and error["type"] == "invalid_request"


def test_malformed_json_is_a_400_not_a_crash(client: httpx2.Client) -> None:
    for path in ("/chat/completions", "/v1/agent", "/async/chat/completions"):
        response = client.post(path, content=b"{not json", headers={"content-type": "x"})
        assert response.status_code == 400
        assert "malformed JSON" in error_of(response)["message"]
        nested = client.post(path, content=b"[" * 100_000, headers={"content-type": "x"})
        assert nested.status_code == 400
        assert "nested too deeply" in error_of(nested)["message"]
    assert client.post("/chat/completions", json=ask()).status_code == 200


def test_streamed_completion_chunks_join_to_the_answer(client: httpx2.Client) -> None:
    whole = client.post("/chat/completions", json=ask())
    answer = whole.json()["choices"][0]["message"]["content"]
    frames = sse_payloads(client.post("/chat/completions", json=ask(stream=True)))

    assert frames[-1] == "[DONE]"
    chunks = frames[:-1]
    assert len(chunks) > 3
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == answer
    assert all(c["citations"] == whole.json()["citations"] for c in chunks)
    assert all(c["search_results"] for c in chunks)
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["cost"]["total_cost"] > 0
    assert chunks[0]["usage"]["cost"]["total_cost"] == 0


def test_deep_research_stream_arrives_over_the_duration(client: httpx2.Client) -> None:
    arrivals: list[float] = []
    started = time.monotonic()
    with client.stream(
        "POST", "/chat/completions", json=ask(model="sonar-deep-research", stream=True)
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                arrivals.append(time.monotonic() - started)
    assert len(arrivals) > 5
    assert arrivals[0] < 0.2 and arrivals[-1] >= 0.25


# -- Sonar async -------------------------------------------------------------------------------


def test_sonar_async_request_completes_with_a_full_response(client: httpx2.Client) -> None:
    created = client.post(
        "/async/chat/completions", json={"request": ask(model="sonar-deep-research")}
    ).json()
    assert created["status"] == "CREATED"
    assert "response" not in created

    states = poll_until(client, f"/async/chat/completions/{created['id']}", "COMPLETED")
    current = states[-1]
    seen = {created["status"], *(state["status"] for state in states)}
    assert seen >= {"CREATED", "IN_PROGRESS", "COMPLETED"}
    assert current["response"]["choices"][0]["message"]["content"].startswith("<think>")
    assert current["completed_at"] >= current["created_at"]

    listed = client.get("/async/chat/completions").json()
    assert [r["id"] for r in listed["requests"]] == [created["id"]]
    assert "response" not in listed["requests"][0]
    missing = client.get("/async/chat/completions/nope")
    assert missing.status_code == 404 and error_of(missing)["code"] == 404


# -- faults ------------------------------------------------------------------------------------


def test_rate_limit_fault_sends_retry_headers_then_recovers(client: httpx2.Client) -> None:
    url = str(client.base_url)
    inject_faults(url, {"status": 429, "retry_after": 2, "retry_after_ms": 1500, "times": 2})

    for _ in range(2):
        limited = client.post("/chat/completions", json=ask())
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "2"
        assert limited.headers["retry-after-ms"] == "1500"
        assert error_of(limited)["code"] == 429
    assert client.post("/chat/completions", json=ask()).status_code == 200
    counters = stats(url)
    assert counters["requests"]["POST /chat/completions"] == 3
    assert counters["generations"] == 1


def test_faults_are_consumed_in_order_only_by_matching_paths(client: httpx2.Client) -> None:
    url = str(client.base_url)
    inject_faults(url, {"status": 503, "path": "/v1/agent"}, {"status": 500})

    assert client.get("/_sim/stats").status_code == 200
    assert client.post("/chat/completions", json=ask()).status_code == 500
    assert client.post("/chat/completions", json=ask()).status_code == 200
    agent = client.post("/v1/agent", json={"model": "perplexity/sonar", "input": "x"})
    assert agent.status_code == 503 and error_of(agent)["type"] == "internal_error"


def test_html_fault_returns_sonar_401_page(client: httpx2.Client) -> None:
    inject_faults(str(client.base_url), {"html": True})
    response = client.post("/chat/completions", json=ask())
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("text/html")
    assert "401 Authorization Required" in response.text


def test_fault_from_request_header(client: httpx2.Client) -> None:
    response = client.post(
        "/chat/completions", json=ask(), headers={"X-Sim-Fault": json.dumps({"status": 502})}
    )
    assert response.status_code == 502
    assert client.post("/chat/completions", json=ask()).status_code == 200


def test_hang_outlasts_the_client_timeout_and_stops_promptly(sim_url: str) -> None:
    inject_faults(sim_url, {"hang": 30})
    with (
        httpx2.Client(base_url=sim_url, timeout=0.3) as http,
        pytest.raises(httpx2.ReadTimeout),
    ):
        http.post("/chat/completions", json=ask())
    with httpx2.Client(base_url=sim_url, timeout=5) as http:
        assert http.post("/chat/completions", json=ask()).status_code == 200


def test_disconnect_after_drops_the_stream_without_terminal(client: httpx2.Client) -> None:
    inject_faults(str(client.base_url), {"disconnect_after": 3})
    received: list[str] = []
    with (
        pytest.raises(httpx2.RemoteProtocolError),
        client.stream("POST", "/chat/completions", json=ask(stream=True)) as response,
    ):
        for line in response.iter_lines():
            if line.startswith("data: "):
                received.append(line)
    assert len(received) == 3
    assert not any("[DONE]" in line or '"stop"' in line for line in received)


def test_disconnect_fault_on_a_plain_request_drops_the_connection(
    client: httpx2.Client,
) -> None:
    inject_faults(str(client.base_url), {"disconnect_after": 0, "path": "/v1/agent"})
    with pytest.raises(httpx2.RemoteProtocolError):
        client.post("/v1/agent", json={"model": "perplexity/sonar", "input": "x"})
    assert client.post("/v1/agent", json={"model": "perplexity/sonar", "input": "x"}).is_success


def test_agent_failed_fault_reports_status_failed(client: httpx2.Client) -> None:
    url = str(client.base_url)
    inject_faults(url, {"agent_failed": True, "times": 2})
    body = client.post("/v1/agent", json={"model": "perplexity/sonar", "input": "x"})
    assert body.status_code == 200
    assert body.json()["status"] == "failed" and body.json()["error"]["message"]

    events = sse_payloads(
        client.post("/v1/agent", json={"model": "perplexity/sonar", "input": "x", "stream": True})
    )
    assert events[-1]["type"] == "response.failed"
    assert not any(e["type"] == "response.completed" for e in events)
    assert stats(url)["generations"] == 0


def test_reset_clears_faults_and_counters(client: httpx2.Client) -> None:
    url = str(client.base_url)
    client.post("/chat/completions", json=ask())
    inject_faults(url, {"status": 500})
    reset(url)
    assert stats(url) == {
        "requests": {},
        "generations": 0,
        "background_runs": 0,
        "cancels": 0,
        "searches": 0,
        "billed_usd": 0.0,
    }
    assert client.post("/chat/completions", json=ask()).status_code == 200


def test_billed_usd_adds_the_costs_reported_and_a_cost_fault_overrides_them(
    client: httpx2.Client,
) -> None:
    url = str(client.base_url)
    reset(url)
    first = client.post("/v1/agent", json={"model": "perplexity/sonar", "input": "asyncio"})
    reported = first.json()["usage"]["cost"]["total_cost"]
    assert stats(url)["billed_usd"] == reported > 0
    inject_faults(url, {"cost": 7.5, "path": "/v1/agent"})
    second = client.post("/v1/agent", json={"model": "perplexity/sonar", "input": "asyncio"})
    assert second.json()["usage"]["cost"]["total_cost"] == 7.5
    client.post("/search", json={"query": "asyncio"})
    assert stats(url)["billed_usd"] == round(reported + 7.5 + 0.005, 6)


def test_bad_faults_are_rejected(client: httpx2.Client) -> None:
    response = client.post("/_sim/faults", json={"faults": [{"sttaus": 500}]})
    assert response.status_code == 400
    assert "unknown fault keys" in error_of(response)["message"]


# -- auth --------------------------------------------------------------------------------------


def test_expected_key_is_enforced_per_protocol() -> None:
    with (
        serve(latency_ms=0, api_key="sekret", sonar=True) as url,
        httpx2.Client(base_url=url) as http,
    ):
        sonar = http.post("/chat/completions", json=ask())
        assert sonar.status_code == 401 and sonar.headers["content-type"].startswith("text/html")
        agent = http.post("/v1/agent", json={"model": "perplexity/sonar", "input": "x"})
        assert agent.status_code == 401 and error_of(agent)["code"] == 401
        good = {"Authorization": "Bearer sekret"}
        assert http.post("/chat/completions", json=ask(), headers=good).status_code == 200
        wrong = {"Authorization": "Bearer other"}
        assert http.post("/chat/completions", json=ask(), headers=wrong).status_code == 401


# -- servers -----------------------------------------------------------------------------------


def test_serve_starts_fast_with_a_warm_corpus() -> None:
    load_corpus()
    started = time.perf_counter()
    with serve(latency_ms=0) as url:
        elapsed = time.perf_counter() - started
        assert httpx2.get(url + "/v1/models").status_code == 200
    assert elapsed < 0.3


def test_shared_server_is_started_once_for_all_threads() -> None:
    urls: list[str] = []
    threads = [
        threading.Thread(target=lambda: urls.append(shared_server_url(latency_ms=0)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(urls)) == 1
    assert httpx2.get(urls[0] + "/v1/models").status_code == 200


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_cli_prints_url_first_answers_and_exits_cleanly(
    tmp_path: Path, stop: signal.Signals
) -> None:
    (tmp_path / "notes.md").write_text(
        "# Field notes\n\n## Sourdough starter\n\nFeed the sourdough starter flour and water "
        "every day. Keep it warm.\n\n## Compost\n\nTurn the compost heap weekly.\n"
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pplx_nb.sim",
            "--latency-ms",
            "0",
            "--corpus",
            str(tmp_path),
            "--api-key",
            "k1",
            "--sonar",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url)
        body = httpx2.post(
            url + "/chat/completions",
            json=ask("how often do I feed the sourdough starter"),
            headers={"Authorization": "Bearer k1"},
        ).json()
        assert body["search_results"][0]["title"] == "Sourdough starter"
        assert body["citations"][0].startswith("file://")
        assert "the local corpus" in body["choices"][0]["message"]["content"]
    finally:
        process.send_signal(stop)
        _, err = process.communicate(timeout=10)
    assert process.returncode == 0, err


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--port", "99999"], "--port: 99999 is out of range: use from 0 to 65535"),
        (["--port", "-1"], "--port: -1 is out of range"),
        (["--latency-ms", "-5"], "--latency-ms: -5 is out of range: use 0 or more"),
        (["--deep-research-seconds", "-0.5"], "--deep-research-seconds: -0.5 is out of range"),
        (["--deep-research-seconds", "nan"], "--deep-research-seconds: nan is out of range"),
        (["--latency-ms", "fast"], "--latency-ms: 'fast' is not a number"),
    ],
)
def test_cli_refuses_out_of_range_numbers_with_exit_2(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from pplx_nb.sim.__main__ import _parser

    with pytest.raises(SystemExit) as caught:
        _parser().parse_args(argv)  # what main() does first; a bad value must not start a server
    assert caught.value.code == 2
    captured = capsys.readouterr()
    assert complaint in captured.err and "Traceback" not in captured.err
    assert captured.out == ""


# -- corpus and ranking ------------------------------------------------------------------------


def test_stdlib_corpus_has_modules_classes_methods_and_topics() -> None:
    corpus = load_corpus()
    by_title = {doc.title: doc for doc in corpus.documents}
    assert len(corpus.documents) > 4000
    assert by_title["asyncio.Task.cancel"].url == (
        "https://docs.python.org/3/library/asyncio.html#asyncio.Task.cancel"
    )
    assert "list.sort" in by_title and "json.dumps" in by_title and "pathlib.Path" in by_title
    assert any("reference/" in doc.url for doc in corpus.documents)
    assert not any(part.startswith("_") for t in by_title for part in t.split("."))
    assert not any(t.startswith(("test.", "idlelib", "tkinter", "lib2to3")) for t in by_title)


def test_the_default_corpus_is_python_3_11_docs_frozen_in_the_package_on_every_python() -> None:
    corpus, frozen = load_corpus(), read_frozen()
    assert frozen.python.startswith("3.11.") and corpus.date == frozen.date
    assert corpus.documents == frozen.documents
    assert "PYTHON SOFTWARE FOUNDATION LICENSE" in FROZEN_LICENSE.read_text()


def test_build_corpus_freezes_this_pythons_docs_as_the_shipped_corpus(tmp_path: Path) -> None:
    shipped = read_frozen()
    output = tmp_path / "docs.json.gz"
    command = [sys.executable, "-m", "pplx_nb.sim.build_corpus", "--output", str(output)]
    done = subprocess.run(
        [*command, "--date", shipped.date], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    built = read_frozen(output)
    assert built.python == platform.python_version() and len(built.documents) > 4000
    assert "PYTHON SOFTWARE FOUNDATION LICENSE" in (tmp_path / FROZEN_LICENSE.name).read_text()
    if built.python != shipped.python:
        pytest.skip(f"the shipped corpus is Python {shipped.python}'s, this is {built.python}")
    assert output.read_bytes() == FROZEN_CORPUS.read_bytes(), "rebuild the shipped corpus"


@pytest.mark.parametrize(
    ("question", "title"),
    [
        ("how do I cancel an asyncio task", "asyncio.Task.cancel"),
        ("sort a list in place", "list.sort"),
        ("parse a JSON string", "json.loads"),
        ("what does the assert statement do", 'The "assert" statement (assert)'),
    ],
)
def test_bm25_ranks_the_obvious_document_first(question: str, title: str) -> None:
    corpus = load_corpus()
    assert corpus.search(question, 1)[0][0].title == title


def test_tokenizer_splits_identifiers_and_folds_plurals() -> None:
    assert tokenize("ThreadPoolExecutor run_until_complete tasks") == [
        "thread",
        "pool",
        "executor",
        "threadpoolexecutor",
        "run",
        "complete",
        "task",
    ]


def test_bm25_prefers_rarer_terms_and_breaks_ties_by_position() -> None:
    index = BM25Index.build([["apple", "pie"], ["apple", "tart"], ["apple", "pie"], ["plum"]])
    assert index.search("apple pie", 3) == sorted(index.search("apple pie", 3), key=lambda r: -r[1])
    assert [doc for doc, _ in index.search("apple pie", 3)] == [0, 2, 1]
    assert index.search("banana", 3) == []


def test_directory_corpus_is_cached_under_xdg_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Lighthouses guide ships along the coast at night.")
    (docs / "b.rst").write_text("Tide tables\n===========\n\nTides rise twice a day.")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    corpus = load_corpus(docs)
    best = corpus.search("tides", 1)[0][0]
    assert (best.title, best.url.rsplit("/", 1)[-1]) == ("Tide tables", "b.rst#tide-tables")
    assert [doc.title for doc in directory_documents(docs)] == ["a", "Tide tables"]
    assert list((tmp_path / "cache" / "pplx_nb").glob("dircorpus-*.pkl"))


def harbour_notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A one-document corpus folder; XDG_CACHE_HOME points at ``tmp_path / "cache"``."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Harbours\n\nBoats moor in harbours.")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return docs


def test_a_corpus_is_cached_in_the_folder_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_corpus(harbour_notes(tmp_path, monkeypatch), cache_dir=tmp_path / "given")
    assert list((tmp_path / "given").glob("dircorpus-*.pkl"))
    assert not (tmp_path / "cache").exists()


def test_cli_with_an_invalid_environment_exits_2_without_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "PERPLEXITY_TIMEOUT": "soon", "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pplx_nb.sim", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "PERPLEXITY_TIMEOUT" in done.stderr or "timeout_ms" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_or_empty_corpus_folder_is_refused_saying_why(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="does not exist"):
        load_corpus(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValidationError, match="holds no text files"):
        load_corpus(tmp_path / "empty")
    done = subprocess.run(
        [sys.executable, "-m", "pplx_nb.sim", "--corpus", str(tmp_path / "empty")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "holds no text files" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership and modes")
def test_a_cache_file_others_could_have_written_is_rebuilt_not_unpickled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = harbour_notes(tmp_path, monkeypatch)
    load_corpus(docs)
    (cached,) = (tmp_path / "cache" / "pplx_nb").glob("dircorpus-*.pkl")
    marker = tmp_path / "planted-code-ran"
    cached.write_bytes(pickle.dumps(_Planted(str(marker))))
    cached.parent.chmod(0o777)
    monkeypatch.setattr("pplx_nb.sim._corpus._loaded", {})

    corpus = load_corpus(docs)
    assert not marker.exists()
    assert corpus.search("harbours", 1)[0][0].title == "Harbours"


class _Planted:
    """A pickle that, once loaded, leaves a file behind: what a hostile cache file could do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (_touch, (self.path, ""))


def _touch(path: str, text: str) -> None:
    Path(path).write_text(text)


# -- HTTP/1.1 details --------------------------------------------------------------------------


def raw_exchange(url: str, payload: bytes) -> bytes:
    """Send raw bytes to the simulator and read until it closes the connection."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(payload)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def test_pipelined_keep_alive_requests_answer_in_order(sim_url: str) -> None:
    body = json.dumps(ask("sort a list")).encode()
    request = (
        b"POST /chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    closing = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    received = raw_exchange(sim_url, request + request + closing)
    assert received.count(b"HTTP/1.1 200 OK") == 3
    assert received.index(b"list.sort") < received.rindex(b'"object":"list"')


def test_chunked_request_body_is_read(sim_url: str) -> None:
    body = json.dumps(ask("sort a list")).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    received = raw_exchange(
        sim_url,
        b"POST /chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n" + chunked,
    )
    assert received.startswith(b"HTTP/1.1 200 OK") and b"list.sort" in received


def test_garbage_request_line_gets_400_and_close(sim_url: str) -> None:
    assert raw_exchange(sim_url, b"HELLO\r\n\r\n").startswith(b"HTTP/1.1 400")


def test_http10_request_is_answered_and_closed(sim_url: str) -> None:
    received = raw_exchange(sim_url, b"GET /v1/models HTTP/1.0\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 200 OK") and b"sonar-pro" in received


def test_unknown_path_and_wrong_method(client: httpx2.Client) -> None:
    missing = client.get("/v2/nothing")
    assert missing.status_code == 404 and error_of(missing)["type"] == "not_found"
    wrong = client.get("/chat/completions")
    assert wrong.status_code == 405


def test_expect_continue_gets_an_interim_100(sim_url: str) -> None:
    body = json.dumps(ask("sort a list")).encode()
    host, port = sim_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(
            b"POST /chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert received.startswith(b"HTTP/1.1 200 OK") and b"list.sort" in received


def test_huge_prompts_are_answered_alike_but_not_kept_in_the_caches() -> None:
    async def no_wait(seconds: float) -> bool:
        return False

    endpoints = Endpoints(load_corpus(), SimOptions(latency_ms=0), no_wait)

    def answer(question: str) -> dict[str, Any]:
        body = json.dumps(ask(question)).encode()
        reply = asyncio.run(
            endpoints.chat(Request("POST", "/chat/completions", "", {}, body), None)
        )
        assert isinstance(reply, Reply) and reply.status == 200
        return cast(dict[str, Any], json.loads(reply.body))

    huge = QUESTION + " padding" * 5_000
    first, second = answer(huge), answer(huge)
    assert first["choices"] == second["choices"] and first["search_results"]
    assert (len(endpoints._answers), len(endpoints._bodies)) == (0, 0)
    answer(QUESTION)
    assert (len(endpoints._answers), len(endpoints._bodies)) == (1, 1)


def test_an_answered_question_leaves_a_small_run_behind_not_its_prompt_or_body() -> None:
    # Offline, the MCP server runs the simulator in its own process for as long as it serves.
    async def no_wait(seconds: float) -> bool:
        return False

    endpoints = Endpoints(load_corpus(), SimOptions(latency_ms=0), no_wait)
    history = [
        {"role": "user", "content": "What is asyncio?"},
        {"role": "assistant", "content": "asyncio runs coroutines on an event loop. " * 100},
    ]

    async def ask_many(first: int, count: int) -> None:
        for n in range(first, first + count):
            question = {"role": "user", "content": f"How do I use asyncio tasks (case {n})?"}
            body = {
                "preset": "low",
                "instructions": "Answer with sources.",
                "input": [*history, question],
                "tools": [{"type": "web_search"}],
            }
            request = Request("POST", "/v1/agent", "", {}, json.dumps(body).encode())
            reply = await endpoints.agent(request, None)
            assert isinstance(reply, Reply) and reply.status == 200

    asked = 300
    sim = [tracemalloc.Filter(True, "*/pplx_nb/sim/*")]
    tracemalloc.start()
    try:
        asyncio.run(ask_many(0, 300))  # past the size of the memos of repeated requests
        before = tracemalloc.take_snapshot().filter_traces(sim)
        asyncio.run(ask_many(300, asked))
        after = tracemalloc.take_snapshot().filter_traces(sim)
    finally:
        tracemalloc.stop()
    kept = sum(stat.size_diff for stat in after.compare_to(before, "filename")) / asked
    assert len(endpoints.runs) == 600  # still there for GET and cancel
    assert kept < 2_500, f"{kept:.0f} bytes kept per answered question"
