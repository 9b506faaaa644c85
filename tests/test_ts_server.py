"""pplx_nb and the TypeScript perplexity-mcp-server on one conversation-logs folder.

People migrating from that server point both at the same folder. These tests run the real
server (built from ``../shared/ts-server``, see ``support/ts_server.py``) against the simulator in
Sonar mode, which is what that server speaks, while pplx_nb talks to the same simulator through
the Agent API. Money is counted at the simulator: a job must be paid for once, by one side.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from support.folder import alternates, document, failed_follow_up, job_status, turns
from support.ts_server import TEN_MINUTES, TSServer, build
from support.waiting import poll_until

from pplx_nb import Researcher, Settings
from pplx_nb._errors import PplxError
from pplx_nb.backends import open_queue
from pplx_nb.export import to_markdown
from pplx_nb.sim import inject_faults, serve, stats

pytestmark = pytest.mark.sim_sonar

QUESTION = "How does asyncio.TaskGroup cancel its tasks when one of them fails?"
FOLLOW_UP = "How do I shield a task from cancellation?"


@pytest.fixture(scope="module", autouse=True)
def ts_build() -> Path:
    """The built server (skips the module without node, npm or the tarball)."""
    return build()


def assert_alternates(doc: dict[str, Any]) -> None:
    assert alternates(doc), turns(doc)


def assert_closed(doc: dict[str, Any], state: str) -> dict[str, Any]:
    """The last turn is an assistant turn marked as not answering its question (``state``)."""
    assert_alternates(doc)
    last = doc["messages"][-1]
    assert last["role"] == "assistant", doc["messages"][-1]
    marker: dict[str, Any] = last.get("unanswered") or {}
    assert marker.get("state") == state, last
    assert last["content"].strip(), "the closing turn says why the question has no answer"
    return marker


def ts_follow_up_succeeds(logs_dir: Path, url: str, conversation_id: str) -> None:
    """The TypeScript server's follow-up on the conversation gets an answer."""
    before = stats(url)["requests"].get("POST /chat/completions", 0)
    with TSServer(logs_dir, url) as server:
        result = server.call(
            "perplexity_search_followup", {"conversationId": conversation_id, "query": FOLLOW_UP}
        )
        assert not result.get("isError"), server.text(result)
    assert stats(url)["requests"]["POST /chat/completions"] == before + 1
    doc = document(logs_dir, conversation_id)
    assert_alternates(doc)
    assert doc["messages"][-2:][0] == {"role": "user", "content": FOLLOW_UP}
    assert doc["messages"][-1]["role"] == "assistant"


# -- an unanswered question closes its turn, whatever failed -----------------------------------


def test_after_a_failed_follow_up_the_ts_server_can_follow_up(
    researcher: Researcher, sim_url: str, logs_dir: Path
) -> None:
    conversation_id, _ = failed_follow_up(researcher, sim_url, QUESTION)

    marker = assert_closed(document(logs_dir, conversation_id), "failed")
    assert marker["code"] == "INVALID_INPUT"
    ts_follow_up_succeeds(logs_dir, sim_url, conversation_id)


def test_after_a_failed_job_the_ts_server_can_follow_up(
    settings: Settings, sim_url: str, logs_dir: Path
) -> None:
    inject_faults(sim_url, {"status": 400, "path": "/v1/", "times": 5})
    with Researcher(settings, async_deep_research=True) as researcher:
        queued = researcher.deep_research(QUESTION)
        conversation_id = queued.conversation_id
        with pytest.raises(PplxError):
            researcher.wait(conversation_id, timeout=60)

    assert job_status(logs_dir, conversation_id)["status"] == "failed"
    marker = assert_closed(document(logs_dir, conversation_id), "failed")
    assert marker["code"] == "INVALID_INPUT"
    ts_follow_up_succeeds(logs_dir, sim_url, conversation_id)


def test_after_a_cancelled_job_the_ts_server_can_follow_up(
    researcher: Researcher, settings: Settings, sim_url: str, logs_dir: Path
) -> None:
    queued = researcher.deep_research(QUESTION, wait=False)
    conversation_id = queued.conversation_id

    open_queue(settings).cancel(conversation_id)

    assert job_status(logs_dir, conversation_id)["status"] == "cancelled"
    assert_closed(document(logs_dir, conversation_id), "cancelled")
    assert stats(sim_url)["generations"] == 0
    ts_follow_up_succeeds(logs_dir, sim_url, conversation_id)


# -- the TypeScript server's stall recovery leaves a live pplx_nb job alone ---------------------


def test_a_ts_server_started_during_a_long_job_leaves_it_alone(logs_dir: Path) -> None:
    # The TypeScript server resets, when it starts, every in_progress job whose updatedAt is
    # ten minutes old. Its clock runs ten minutes minus `margin` ahead, so that means `margin`
    # seconds here; the job's first poll hangs for 20 s, so its progress stays where it is
    # for longer than that, while its worker heartbeats every second.
    margin = 5.0
    with serve(latency_ms=0, deep_research_seconds=22, sonar=True) as url:
        settings = Settings(
            api_key="pplx-test-key",
            base_url=url,
            offline=False,
            conversation_logs_dir=logs_dir,
            timeout_ms=60_000,
            job_lease_seconds=3,
        )
        inject_faults(url, {"hang": 20, "path": "/v1/responses/"})
        with Researcher(settings, async_deep_research=True) as researcher:
            conversation_id = researcher.deep_research(QUESTION).conversation_id
            poll_until(
                lambda: job_status(logs_dir, conversation_id).get("remoteId") is not None,
                30,
                0.1,
                what="the background run's submission",
            )
            time.sleep(2 * margin)  # the progress plateau: the API has not answered the poll
            with TSServer(logs_dir, url, async_jobs=True, clock_offset=TEN_MINUTES - margin) as ts:
                poll_until(
                    lambda: "Background worker started" in ts.log(), 30, 0.1, what="its worker"
                )
                time.sleep(2.5)  # its stall recovery has run, and one worker poll
                during = job_status(logs_dir, conversation_id) or {}
            answer = researcher.wait(conversation_id, timeout=60)

        counted = stats(url)
    assert during.get("status") == "in_progress" and during.get("workerId"), during
    final = job_status(logs_dir, conversation_id) or {}
    assert final["status"] == "completed" and final["attempts"] == 1, final
    assert counted["generations"] == 1 and counted["background_runs"] == 1, counted
    assert "POST /chat/completions" not in counted["requests"]
    doc = document(logs_dir, conversation_id)
    assert turns(doc) == ["user", "assistant"]
    assert doc["messages"][-1]["content"] == answer.text


# -- each side's worker runs the other side's queued jobs -----------------------------------------


def test_a_job_queued_by_pplx_nb_is_completed_by_the_ts_worker(
    researcher: Researcher, sim_url: str, logs_dir: Path
) -> None:
    queued = researcher.deep_research(QUESTION, wait=False)  # no pplx_nb worker runs
    conversation_id = queued.conversation_id

    with TSServer(logs_dir, sim_url, async_jobs=True) as server:
        poll_until(
            lambda: job_status(logs_dir, conversation_id).get("status") == "completed",
            60,
            0.1,
            what=f"the TypeScript worker's run of the job\n{server.log()}",
        )
    answer = researcher.wait(conversation_id, timeout=10)

    counted = stats(sim_url)
    assert counted["requests"].get("POST /chat/completions") == 1
    assert counted["background_runs"] == 0 and counted["generations"] == 1
    assert not (logs_dir / conversation_id / "job.json").exists()
    assert turns(document(logs_dir, conversation_id)) == ["user", "assistant"]
    assert answer.text and "<think>" not in answer.text and "</think>" not in answer.text
    assert answer.thinking and "Searching the offline corpus" in answer.thinking


def _ts_queued_job(logs_dir: Path, url: str) -> str:
    """A deep research queued by the TypeScript server, which then stops before running it."""
    for _ in range(3):
        with TSServer(logs_dir, url, async_jobs=True) as server:
            result = server.call("perplexity_deep_research", {"query": QUESTION})
            server.kill()
        conversation_id = str(result["structuredContent"]["conversationId"])
        if job_status(logs_dir, conversation_id).get("status") == "pending":
            return conversation_id
        # Its worker (polling every 2 s) took the job in the moment before it stopped.
    pytest.fail("the TypeScript server ran every job it queued before it could be stopped")


def test_a_job_queued_by_the_ts_server_is_completed_by_the_pplx_nb_worker(
    settings: Settings, sim_url: str, logs_dir: Path
) -> None:
    conversation_id = _ts_queued_job(logs_dir, sim_url)
    ts_runs = stats(sim_url)["requests"].get("POST /chat/completions", 0)

    with Researcher(settings, async_deep_research=True) as researcher:
        researcher.ensure_worker()
        answer = researcher.wait(conversation_id, timeout=60)

    counted = stats(sim_url)
    assert counted["background_runs"] == 1
    assert counted["requests"].get("POST /chat/completions", 0) == ts_runs
    final = job_status(logs_dir, conversation_id) or {}
    assert final["status"] == "completed" and final["attempts"] == 1, final
    assert not (logs_dir / conversation_id / "job.json").exists()
    doc = document(logs_dir, conversation_id)
    assert turns(doc) == ["user", "assistant"]
    assert doc["messages"][1]["content"] == QUESTION
    assert doc["messages"][-1]["content"] == answer.text
    ts_follow_up_succeeds(logs_dir, sim_url, conversation_id)


# -- what the TypeScript server writes, read by pplx_nb ------------------------------------------


def test_a_ts_conversation_with_think_blocks_reads_as_thinking_and_answer(
    researcher: Researcher, sim_url: str, logs_dir: Path
) -> None:
    with TSServer(logs_dir, sim_url) as server:
        result = server.call("perplexity_search", {"query": QUESTION})
    conversation_id = str(result["structuredContent"]["conversationId"])
    raw = document(logs_dir, conversation_id)["messages"][-1]["content"]
    assert raw.startswith("<think>"), "the server stores the reasoning inside the answer"

    answer = researcher.wait(conversation_id, timeout=10)
    assert answer.text == raw.split("</think>", 1)[1].strip()
    assert answer.thinking and answer.thinking in raw
    history = researcher.history(conversation_id)
    rendered = to_markdown(history)
    assert "<think>" not in rendered and "</think>" not in rendered
    assert answer.text in rendered

    followed = researcher.followup(conversation_id, FOLLOW_UP)
    assert "<think>" not in followed.text
    assert_alternates(document(logs_dir, conversation_id))
