"""The job state machine as pure functions: no folder, no file, no clock (``now`` is passed in)."""

from __future__ import annotations

import pytest

from pplx_nb._errors import (
    APIKeyInvalid,
    APIServerError,
    LeaseLost,
    PplxError,
    RemoteRunFailed,
    RunTimedOut,
    SubmissionUnknown,
    error_from_code,
)
from pplx_nb._models import JobRecord, JobStatus
from pplx_nb.jobs import Job
from pplx_nb.jobs import _transitions as t
from pplx_nb.jobs._codec import encode, parse_status

CID = "20250124-1706102400123"
T0, T1, T2, T3 = (f"2025-01-24T15:00:0{n}.000Z" for n in range(4))


def queued(priority: int = 0) -> JobStatus:
    record = JobRecord(
        job_id="job-1",
        conversation_id=CID,
        tool_name="perplexity_deep_research",
        request={"searchQuery": "q", "opts": {"model": None}},
        priority=priority,
        enqueued_at=T0,
        queue_key="marker-1",
    )
    return t.new_status(record, T0)


def claimed(worker: str = "w1") -> tuple[JobStatus, Job]:
    status = t.start_attempt(queued(), worker, T1)
    job = Job(
        job_id="job-1",
        conversation_id=CID,
        tool="perplexity_deep_research",
        request={},
        priority=0,
        attempt=status.attempts,
        enqueued_at=T0,
        worker_id=worker,
        marker="marker-1",
    )
    return status, job


def test_a_new_job_is_pending_with_its_request_and_no_attempt() -> None:
    status = queued(priority=3)
    assert (status.status, status.attempts, status.priority) == ("pending", 0, 3)
    assert (status.job_id, status.queue_key, status.started_at) == ("job-1", "marker-1", T0)
    assert status.error_history == [] and status.worker_id is None
    # The request round-trips as stored, None values included (a deliberate retry reuses it).
    assert status.to_json_dict()["request"] == {"searchQuery": "q", "opts": {"model": None}}


def test_request_and_result_are_typed_fields_that_round_trip_byte_for_byte() -> None:
    """``request`` and ``result`` read as declared fields, and a status.json goes back to the
    same bytes: keys as written, ``null`` kept inside them, keys a newer writer added kept."""
    raw = (
        b'{"conversationId":"20250124-1706102400123","status":"cancelled",'
        b'"toolName":"perplexity_deep_research","startedAt":"2025-01-24T15:00:00.000Z",'
        b'"updatedAt":"2025-01-24T15:00:03.000Z","attempts":1,'
        b'"completedAt":"2025-01-24T15:00:03.000Z","errorHistory":[],"priority":0,'
        b'"remoteId":"resp_1","jobId":"job-1",'
        b'"request":{"model":"medium","opts":{"search_mode":"academic","model":null},'
        b'"searchQuery":"q","collectRunId":"resp_0","addedLater":[1]},'
        b'"result":{"cost":null,"costUnknown":true},"metadata":{"from":"elsewhere"}}'
    )
    status = parse_status(raw, "status.json")
    assert status.request is not None and status.request["searchQuery"] == "q"
    assert status.request["collectRunId"] == "resp_0"
    assert status.result == {"cost": None, "costUnknown": True}
    assert status.model_extra == {"metadata": {"from": "elsewhere"}}, "only foreign keys"
    assert encode(status) == raw
    assert "result" not in t.cancel(queued(), T1).to_json_dict(), "absent while unset"


def test_starting_an_attempt_counts_it_and_names_the_worker() -> None:
    before = queued()
    status = t.start_attempt(before, "w1", T1)
    assert (status.status, status.attempts, status.worker_id) == ("in_progress", 1, "w1")
    assert status.heartbeat_at == status.updated_at == T1
    assert status.progress is not None
    assert (status.progress.percentage, status.progress.attempt) == (25, 1)
    assert before.status == "pending" and before.attempts == 0  # the argument is untouched


def test_only_the_owning_attempt_may_write() -> None:
    status, job = claimed("w1")
    assert t.check_owner(status, job) is status
    other = t.start_attempt(t.release(status, T2), "w2", T2)
    with pytest.raises(LeaseLost, match="under another worker"):
        t.check_owner(other, job)
    with pytest.raises(LeaseLost, match="it is cancelled"):
        t.check_owner(t.cancel(status, T2), job)
    with pytest.raises(LeaseLost, match="it is gone"):
        t.check_owner(None, job)


def test_heartbeats_and_reports_keep_the_job_running() -> None:
    status, _ = claimed()
    beat = t.heartbeat(status, T2, elapsed_ms=1500)
    assert beat.status == "in_progress" and beat.heartbeat_at == T2
    assert beat.updated_at == T2  # readers that judge staleness by updatedAt see it live
    assert beat.progress is not None and beat.progress.elapsed_ms == 1500
    reported = t.report(beat, 140, "Processing response...", 2000, T3)
    assert reported.progress is not None
    assert (reported.progress.percentage, reported.progress.message) == (
        100,
        "Processing response...",
    )
    assert reported.updated_at == reported.heartbeat_at == T3


def test_a_submission_is_recorded_before_and_after_it_is_sent() -> None:
    status, _ = claimed()
    sending = t.begin_submission(status, T1)
    assert sending.submitting_at == T1 and sending.remote_id is None
    sent = t.record_remote_id(sending, "run-1", T2)
    assert (sent.remote_id, sent.submitted_at, sent.submitting_at) == ("run-1", T1, None)
    assert t.end_submission(sending, T2).submitting_at is None
    # Without a recorded start, the run counts from when its id was recorded.
    assert t.record_remote_id(status, "run-2", T3).submitted_at == T3


def test_completion_ends_the_job_with_its_result() -> None:
    status, _ = claimed()
    done = t.complete(status, 4200, {"tokens": 120, "cost": 0.01}, T3)
    assert done.done and done.status == "completed" and done.completed_at == T3
    assert done.progress is not None and done.progress.percentage == 100
    assert done.result == {"tokens": 120, "cost": 0.01}
    assert t.cancel(done, T3) is done  # an ended job stays as it is


def test_failures_are_retried_until_the_attempts_run_out() -> None:
    status, _ = claimed()
    for attempt in (1, 2):
        status, retry = t.fail_or_retry(status, APIServerError(f"boom {attempt}"), 2, T2)
        assert retry and status.status == "pending" and status.worker_id is None
        assert status.progress is None and status.attempts == attempt
        status = t.start_attempt(status, "w1", T2)
    status, retry = t.fail_or_retry(status, APIServerError("boom 3"), 2, T3)
    assert not retry and status.status == "failed" and status.attempts == 3
    assert [e.message for e in status.error_history] == ["boom 1", "boom 2", "boom 3"]
    assert status.error is not None and status.error.code == "API_SERVER_ERROR"
    assert status.completed_at == T3


@pytest.mark.parametrize(
    "error",
    [
        APIKeyInvalid("bad key"),
        SubmissionUnknown("reply lost"),
        RunTimedOut("past its deadline"),
    ],
)
def test_errors_that_cannot_succeed_again_fail_at_once(error: PplxError) -> None:
    status, _ = claimed()
    failed, retry = t.fail_or_retry(status, error, 5, T2)
    assert not retry and failed.status == "failed" and failed.attempts == 1
    assert failed.error is not None and failed.error.code == error.code


def test_a_failed_remote_run_is_forgotten_so_the_next_attempt_submits_anew() -> None:
    status, _ = claimed()
    running = t.record_remote_id(status, "run-1", T1)
    requeued, retry = t.fail_or_retry(running, RemoteRunFailed("the run failed"), 2, T2)
    assert retry and requeued.remote_id is None and requeued.submitted_at is None
    assert requeued.error_history[-1].message.endswith("submits a new background run.")
    kept, _ = t.fail_or_retry(running, APIServerError("a blip"), 2, T2)
    assert kept.remote_id == "run-1"


def test_secrets_never_reach_the_error_history() -> None:
    status, _ = claimed()
    failed, _ = t.fail_or_retry(status, APIServerError("sent pplx-abcdefghijklmnop"), 2, T2)
    assert "pplx-abcdefghijklmnop" not in failed.to_json_dict().__repr__()
    noted = t.note_error(status, ValueError("odd"), T2)
    assert noted.status == "in_progress"
    assert (noted.error_history[-1].code, noted.error_history[-1].message) == (
        "PPLX_ERROR",
        "ValueError: odd",
    )


def test_release_gives_the_job_back_without_counting_the_attempt() -> None:
    status, _ = claimed()
    released = t.release(status, T2)
    assert (released.status, released.attempts, released.worker_id) == ("pending", 0, None)


def test_an_expired_lease_costs_an_attempt_and_fails_the_job_at_the_last() -> None:
    status, _ = claimed()
    requeued, retry = t.expire_lease(status, 75.0, 60.0, 1, T2)
    assert retry and requeued.status == "pending" and requeued.attempts == 1
    assert requeued.error_history[-1].code == "JOB_LEASE_EXPIRED"
    assert "75 s (lease 60 s)" in requeued.error_history[-1].message
    last = t.start_attempt(requeued, "w2", T2)
    failed, retry = t.expire_lease(last, 61.0, 60.0, 1, T3)
    assert not retry and failed.status == "failed" and failed.error is not None
    # The stored code comes back as the same error class, not a plain PPLX_ERROR.
    rebuilt = error_from_code(failed.error.code, failed.error.message)
    assert isinstance(rebuilt, LeaseLost) and rebuilt.code == "JOB_LEASE_EXPIRED"


def test_a_lost_request_fails_the_job_saying_how_to_ask_again() -> None:
    status, _ = claimed()
    failed = t.lost_request(t.release(status, T1), T2)
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.code == "FILESYSTEM_ERROR" and "follow-up" in failed.error.message


def test_cancelling_ends_pending_and_running_jobs() -> None:
    status, _ = claimed()
    for active in (queued(), status):
        cancelled = t.cancel(active, T3)
        assert cancelled.status == "cancelled" and cancelled.completed_at == T3
        assert cancelled.progress is None
        assert cancelled.result is None, "no run: nothing was billed"


def test_a_job_cancelled_after_its_run_was_submitted_records_its_cost_as_unknown() -> None:
    status, _ = claimed()
    for submitted in (
        t.begin_submission(status, T2),
        t.record_remote_id(t.begin_submission(status, T2), "resp_1", T2),
    ):
        cancelled = t.cancel(submitted, T3)
        assert cancelled.status == "cancelled"
        assert cancelled.result == {"cost": None, "costUnknown": True}
        assert cancelled.remote_id == submitted.remote_id  # the canceller stops that run


def test_a_cancelled_job_whose_run_had_finished_completes_with_its_result() -> None:
    status, _ = claimed()
    submitted = t.record_remote_id(t.begin_submission(status, T1), "resp_1", T1)
    cancelled = t.cancel(submitted, T2)
    finished = t.finish_cancelled(cancelled, {"tokens": 15, "cost": 0.0126}, T3)
    assert finished.status == "completed" and finished.completed_at == T3
    assert finished.result == {
        "tokens": 15,
        "cost": 0.0126,
        "finishedBeforeCancel": True,
    }
    assert finished.progress is not None and finished.progress.elapsed_ms == 3000
    assert finished.remote_id == "resp_1"
    for other in (status, queued(), finished):
        assert t.finish_cancelled(other, {"cost": 1.0}, T3) is other


def test_a_report_handed_over_after_a_lost_lease_completes_a_running_or_failed_job() -> None:
    status, _ = claimed()
    requeued, _ = t.expire_lease(t.begin_submission(status, T1), 9.0, 3.0, 2, T2)
    finished = t.finish_late(requeued, {"tokens": 15}, T3)
    assert finished.status == "completed" and finished.completed_at == T3
    assert finished.result == {"tokens": 15, "handedOver": True}
    assert [e.code for e in finished.error_history] == ["JOB_LEASE_EXPIRED"]
    failed, _ = t.fail_or_retry(status, SubmissionUnknown("reply lost"), 2, T2)
    assert failed.status == "failed"
    answered = t.finish_late(failed, {}, T3)
    assert answered.status == "completed" and answered.error is None
    cancelled = t.finish_late(t.cancel(status, T2), {}, T3)
    assert cancelled.result == {"finishedBeforeCancel": True}
    assert t.finish_late(finished, {"cost": 1.0}, T3) is finished


def test_a_run_handed_over_is_recorded_only_for_its_job_while_it_runs_no_other() -> None:
    status, _ = claimed()
    requeued, _ = t.expire_lease(t.begin_submission(status, T1), 9.0, 3.0, 2, T2)
    handed = t.hand_over_run(requeued, "job-1", "resp_1", T3)
    assert handed is not None and handed.status == "pending"
    assert (handed.remote_id, handed.submitted_at, handed.submitting_at) == ("resp_1", T1, None)
    assert handed.heartbeat_at == requeued.heartbeat_at, "not a heartbeat: the lease stays"
    assert t.hand_over_run(handed, "job-1", "resp_1", T3) is not None
    assert t.hand_over_run(handed, "job-1", "resp_2", T3) is None
    assert t.hand_over_run(requeued, "job-2", "resp_1", T3) is None
    assert t.hand_over_run(t.cancel(requeued, T3), "job-1", "resp_1", T3) is None


def test_the_retry_policy_counts_retries_after_the_first_attempt() -> None:
    error = APIServerError("x")
    assert [t.retryable(error, attempt, 2) for attempt in (1, 2, 3)] == [True, True, False]
    assert not t.retryable(APIKeyInvalid("x"), 1, 2)
    assert not t.retryable(RunTimedOut("x"), 1, 2)
