"""Widgets against the simulator: a JobMonitor follows a real job from a background thread."""

from __future__ import annotations

import threading
from typing import Any

from pplx_nb import Answer, JobStatus, Researcher
from pplx_nb.notebook._icons import icon
from pplx_nb.notebook.widgets import JobMonitor, RelatedQuestions
from pplx_nb.sim import inject_faults


def _queue(researcher: Researcher, question: str) -> JobStatus:
    status = researcher.deep_research(question, wait=False)
    assert isinstance(status, JobStatus)
    return status


def test_job_monitor_moves_the_bar_from_a_background_thread_and_shows_the_report(
    async_researcher: Researcher,
) -> None:
    status = _queue(async_researcher, "Compare asyncio.gather and asyncio.TaskGroup")
    seen: list[tuple[int, str]] = []
    monitor = JobMonitor(status.conversation_id, async_researcher, interval=0.02, start=False)
    monitor.bar.observe(
        lambda change: seen.append((change["new"], threading.current_thread().name)), "value"
    )
    monitor.start()
    assert monitor.join(timeout=60), "the monitor did not see the job end"

    assert monitor.answer is not None and monitor.error is None
    assert monitor.bar.value == 100
    assert monitor.bar.bar_style == "success"
    assert 'href="https://docs.python.org/' in monitor.report.value
    assert status.conversation_id in monitor.report.value
    values = [value for value, _ in seen]
    assert values == sorted(values), "the bar never goes backwards"
    assert any(0 < value < 100 for value in values), f"no intermediate progress: {values}"
    assert all(name != threading.main_thread().name for _, name in seen)
    assert "completed" in monitor.state.value
    assert repr(monitor) == f"Research job {status.conversation_id}: completed"


def test_job_monitor_lists_the_error_history_when_the_job_fails(
    async_researcher: Researcher, sim_url: str
) -> None:
    inject_faults(sim_url, {"status": 401, "times": 50})
    status = _queue(async_researcher, "Why does asyncio.run fail?")
    monitor = JobMonitor(status.conversation_id, async_researcher, interval=0.02)
    assert monitor.join(timeout=60)

    assert monitor.answer is None
    assert monitor.bar.bar_style == "danger"
    assert "API_KEY_INVALID" in monitor.report.value
    assert "Error history" in monitor.report.value
    assert "failed" in monitor.state.value


def test_job_monitor_of_a_plain_conversation_shows_its_answer(async_researcher: Researcher) -> None:
    answer = async_researcher.search("What does asyncio.sleep do?")
    assert answer.conversation_id is not None
    monitor = JobMonitor(answer.conversation_id, async_researcher, start=False)
    assert monitor.refresh() is True
    assert monitor.done
    assert monitor.bar.value == 100
    assert "asyncio" in monitor.report.value


def test_related_question_button_asks_the_follow_up_in_the_same_conversation(
    async_researcher: Researcher,
) -> None:
    answer = async_researcher.search(
        "How do I cancel an asyncio task?", return_related_questions=True
    )
    assert answer.related_questions, "the simulator returns related questions when asked"
    asked: list[Answer] = []
    widget = RelatedQuestions(answer, async_researcher, on_answer=asked.append)
    assert [b.description for b in widget.buttons] == answer.related_questions
    assert repr(widget) == "Related questions: " + " | ".join(answer.related_questions)

    shown: list[str] = []
    widget.result.observe(lambda change: shown.append(change["new"]), names="value")
    widget.buttons[0].click()

    assert len(asked) == 1
    streamed = [value for value in shown if "▌" in value]
    assert streamed and "<em>Offline simulator answer" in streamed[0], shown
    assert not [value for value in streamed if "*" in value], "Markdown shown raw while streaming"
    follow_up = asked[0]
    assert follow_up.conversation_id == answer.conversation_id
    assert 'href="https://docs.python.org/' in widget.result.value
    assert answer.related_questions[0] in widget.result.value
    assert all(not b.disabled for b in widget.buttons)
    questions = [
        m.content
        for m in async_researcher.history(str(answer.conversation_id)).messages
        if m.role == "user"
    ]
    assert questions[-1].startswith(answer.related_questions[0])


def test_related_question_errors_render_in_the_widget(async_researcher: Researcher) -> None:
    answer = async_researcher.search(
        "How do I cancel an asyncio task?", return_related_questions=True
    )
    gone: Any = answer.model_copy(update={"conversation_id": "20000101-0000000000000"})
    widget = RelatedQuestions(gone, async_researcher)
    assert widget.ask("anything?") is None
    assert "CONVERSATION_NOT_FOUND" in widget.result.value


def _submitted(researcher: Researcher, status: JobStatus) -> bool:
    now = researcher.status(status.conversation_id)
    return now is not None and now.remote_id is not None


def test_a_cancelled_job_keeps_its_progress_and_is_not_an_error(settings: Any) -> None:
    import time

    from pplx_nb.sim import serve, stats

    with serve(latency_ms=0, deep_research_seconds=60) as url:
        slow = settings.model_copy(update={"base_url": url})
        with Researcher(slow, async_deep_research=True) as researcher:
            status = _queue(researcher, "Write a history of asyncio")
            monitor = JobMonitor(status.conversation_id, researcher, interval=0.02)
            deadline = time.monotonic() + 60
            while monitor.bar.value == 0 or not _submitted(researcher, status):
                assert time.monotonic() < deadline, monitor.state.value
                time.sleep(0.02)
            cancelled = researcher.cancel(status.conversation_id)
            assert cancelled is not None and cancelled.status == "cancelled"
            assert monitor.join(timeout=60), "the monitor did not see the cancel"
            reached = monitor.bar.value
            assert stats(url)["background_runs"] == 1

    assert reached > 0, "the bar dropped to 0 % at the cancel"
    assert monitor.cancelled and monitor.done
    assert monitor.error is None and monitor.answer is None
    assert monitor.bar.bar_style == "", "a cancel the user asked for is neutral, not a warning"
    assert "PPLX_ERROR" not in monitor.report.value and "⚠" not in monitor.report.value
    assert f"cancelled at {reached}%" in monitor.state.value
    assert "cost unknown: a cancelled run reports no usage" in monitor.state.value
    assert repr(monitor) == (
        f"Research job {status.conversation_id}: cancelled at {reached}% · cost unknown: a "
        "cancelled run reports no usage"
    )


def test_a_job_cancelled_before_it_ran_says_nothing_was_billed(
    async_researcher: Researcher,
) -> None:
    async_researcher.ensure_worker().stop()  # nobody takes the job: it stays queued
    status = _queue(async_researcher, "Write a history of asyncio")
    async_researcher.cancel(status.conversation_id)
    monitor = JobMonitor(status.conversation_id, async_researcher, start=False, status=status)
    assert "pending" in repr(monitor), "the state known when queued, not 'reading status'"
    assert monitor.refresh() is True
    assert monitor.bar.value == 0 and monitor.bar.bar_style == ""
    assert repr(monitor).endswith(": cancelled · nothing billed: no run had started")
    # The state shows the cancelled icon, not its name before the words that say it.
    assert monitor.state.value.startswith(f"{icon('cancelled')} cancelled")


def test_a_displayed_monitor_publishes_its_last_state_as_its_saved_text(
    async_researcher: Researcher,
) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    status = _queue(async_researcher, "Compare asyncio.gather and asyncio.TaskGroup")
    with capture_output() as captured:
        monitor = JobMonitor(status.conversation_id, async_researcher, interval=0.02, start=False)
        monitor._ipython_display_()
        monitor.start()
        assert monitor.join(timeout=60)
    first, *updates = captured.outputs
    assert first.data["text/plain"] == f"Research job {status.conversation_id}: reading status"
    assert updates and all(update.update for update in updates)
    ids = {(output.transient or {}).get("display_id") for output in captured.outputs}
    assert ids == {monitor.display_id}, "updates go to the monitor's own output"
    assert updates[-1].data["text/plain"] == f"Research job {status.conversation_id}: completed"
    assert "application/vnd.jupyter.widget-view+json" in updates[-1].data
