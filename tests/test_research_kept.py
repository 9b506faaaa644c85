"""A store that fails after an answer was paid for keeps the answer: outside the store, stored
later without paying again.

The stores here are real — a small tmpfs filled up the moment the answer is asked for, a real
``redis-server`` at ``maxmemory`` with ``noeviction`` — and the API is
:class:`support.misbehaving.Misbehaving` in front of the simulator, so billed work is counted
where it happens: the simulator's ``generations`` (answers) and ``background_runs`` (deep
research runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import TEST_KEY
from support import redis_server as redis_support
from support.misbehaving import Misbehaving

from pplx_nb import Researcher, Settings
from pplx_nb._errors import FilesystemError, StoreUnavailable
from pplx_nb._models import Answer, JobStatus
from pplx_nb.sim import stats

QUESTION = "How do I cancel an asyncio task?"


class Disk:
    """A small tmpfs mounted for one test: :meth:`fill` it up and :meth:`free` it again, or
    :meth:`remount` it read-only and back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._filler = path / "filler"

    def fill(self) -> None:
        """Write until the file system has not a byte left."""
        with self._filler.open("ab", buffering=0) as filler:
            for size in (1 << 16, 1 << 10, 1):
                with contextlib.suppress(OSError):
                    while filler.write(b"\0" * size):
                        pass

    def free(self) -> None:
        """Remove what :meth:`fill` wrote."""
        self._filler.unlink(missing_ok=True)

    def remount(self, mode: str) -> None:
        """Mount it again ``ro`` or ``rw``."""
        subprocess.run(["mount", "-o", f"remount,{mode}", str(self.path)], check=True)

    def fail(self, how: str) -> None:
        """Make every write fail: ``full``, or ``read-only``."""
        if how == "full":
            self.fill()
        else:
            self.remount("ro")

    def mend(self, how: str) -> None:
        """Undo :meth:`fail`."""
        if how == "full":
            self.free()
        else:
            self.remount("rw")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    """A 4 MiB tmpfs (the tests run as root); skipped, saying why, where mounting is refused."""
    path = tmp_path / "disk"
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield Disk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def _settings(bad: Misbehaving, tmp_path: Path, **update: object) -> Settings:
    return Settings(
        api_key=TEST_KEY,
        base_url=bad.url,
        offline=False,
        state_home=tmp_path / "state",
        max_retries=3,
        timeout_ms=5_000,
        job_lease_seconds=2,
        **update,
    )


@pytest.fixture
def on_disk(disk: Disk, bad: Misbehaving, tmp_path: Path) -> Settings:
    """Settings storing conversations on ``disk``, asking through ``bad``."""
    return _settings(bad, tmp_path, conversation_logs_dir=disk.path / "logs")


def _billed(sim_url: str) -> tuple[int, int]:
    counters = stats(sim_url)
    return counters["generations"], counters["background_runs"]


def _once(action: Callable[[], object]) -> Callable[[], None]:
    """``action`` the first time it is called, nothing after."""
    done: list[bool] = []

    def call() -> None:
        if not done:
            done.append(True)
            action()

    return call


def _roles(r: Researcher, cid: str) -> list[str]:
    """The conversation's turns: ``answer`` for an answer, ``closed`` for a "not answered" turn."""
    return [
        m.role if m.role != "assistant" else ("closed" if m.unanswered else "answer")
        for m in r.history(cid, include_system=True).messages
    ]


def _kept_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "state").rglob("*.json"))


def _fails_keeping_the_answer(ask: Callable[[], object]) -> FilesystemError:
    with pytest.raises(FilesystemError) as caught:
        ask()
    error = caught.value
    assert error.code == "FILESYSTEM_ERROR"
    assert error.answer is not None and error.answer.text
    assert "paid for" in error.message and "retry(" in error.message
    return error


def _until(condition: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the deadline"
        time.sleep(0.05)


# -- a full or read-only disk ---------------------------------------------------------------------


@pytest.mark.parametrize(("how", "reason"), [("full", "No space"), ("read-only", "Read-only")])
def test_an_answer_paid_as_the_disk_fails_is_kept_and_retry_stores_it_without_paying(
    on_disk: Settings,
    disk: Disk,
    bad: Misbehaving,
    sim_url: str,
    tmp_path: Path,
    how: str,
    reason: str,
) -> None:
    bad.before_answer = _once(lambda: disk.fail(how))
    with Researcher(on_disk) as r:
        error = _fails_keeping_the_answer(lambda: r.search(QUESTION))
        assert error.answer is not None
        cid = error.answer.conversation_id or ""
        assert _billed(sim_url) == (1, 0)
        assert _roles(r, cid) == ["system", "user"]

        [kept] = _kept_files(tmp_path)
        assert str(kept) in error.message
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
        assert TEST_KEY not in kept.read_text() and "pplx-" not in kept.read_text()
        assert kept.is_relative_to(tmp_path / "state" / "pplx_nb")

        if how == "full":
            disk.fill()  # what the failed write had taken is free again: fill that too
        with pytest.raises(FilesystemError, match=reason):
            r.retry(cid)  # the store still cannot take it: kept, nothing paid
        assert _kept_files(tmp_path) == [kept]

        disk.mend(how)
        answer = r.retry(cid)
        assert answer.text == error.answer.text and answer.conversation_id == cid
        assert _roles(r, cid) == ["system", "user", "answer"]
        assert r.history(cid).messages[-1].content == error.answer.text
        assert _kept_files(tmp_path) == []
    assert _billed(sim_url) == (1, 0), "storing the kept answer paid nothing"


def test_a_follow_up_stores_the_kept_answer_first_instead_of_closing_the_question(
    on_disk: Settings, disk: Disk, bad: Misbehaving, sim_url: str, tmp_path: Path
) -> None:
    with Researcher(on_disk) as r:
        cid = r.search(QUESTION).conversation_id or ""
        bad.before_answer = _once(disk.fill)
        error = _fails_keeping_the_answer(
            lambda: list(r.stream_followup(cid, "What does asyncio.shield do?"))
        )
        assert _billed(sim_url) == (2, 0)
        disk.free()

        r.followup(cid, "What is asyncio.timeout?")

        assert _roles(r, cid) == ["system", "user", "answer", "user", "answer", "user", "answer"]
        assert error.answer is not None
        assert r.history(cid, include_system=True).messages[4].content == error.answer.text
        assert _kept_files(tmp_path) == []
    assert _billed(sim_url) == (3, 0), "one answer for each question, none bought twice"


@pytest.mark.parametrize("retries", [2, 0], ids=["next-attempt", "retry-after-it-failed"])
def test_a_queued_report_the_disk_cannot_take_is_stored_later_and_completes_its_job(
    on_disk: Settings,
    disk: Disk,
    bad: Misbehaving,
    sim_url: str,
    tmp_path: Path,
    retries: int,
) -> None:
    settings = on_disk.model_copy(update={"max_job_retries": retries})
    with Researcher(settings, async_deep_research=True) as r:
        queued = r.deep_research("Describe the json module", wait=False)
        assert isinstance(queued, JobStatus)
        cid = queued.conversation_id
        bad.on_submission = _once(disk.fill)
        r.ensure_worker(concurrency=1)
        _until(lambda: bool(_kept_files(tmp_path)))
        assert _billed(sim_url) == (1, 1)
        [kept] = _kept_files(tmp_path)
        report = json.loads(kept.read_text())["answer"]["content"]

        disk.free()
        if retries == 0:
            # No attempt is left: the job fails once its lease is found expired, its question
            # closed as not answered; retry stores the kept report in that turn's place.
            _until(lambda: (r.status(cid) or queued).status == "failed")
            # The closing turn is written after the status says failed.
            _until(lambda: _roles(r, cid) == ["system", "user", "closed"])
            assert r.retry(cid).text == report
        _until(lambda: (r.status(cid) or queued).status == "completed")

        assert _roles(r, cid) == ["system", "user", "answer"]
        assert r.history(cid).messages[-1].content == report
        assert _kept_files(tmp_path) == []
    assert _billed(sim_url) == (1, 1), "the report was stored without a second run"


def test_a_question_left_open_without_a_kept_answer_is_closed_as_possibly_paid(
    settings: Settings,
) -> None:
    with Researcher(settings) as r:
        # Whatever was answering it stopped: it may have been paid for.
        conversation = r.store.create(
            [{"role": "system", "content": "You help."}, {"role": "user", "content": QUESTION}]
        )
        cid = conversation.conversation_id
        r.followup(cid, "What does asyncio.shield do?")
        closing = r.history(cid).messages[1]
    assert closing.unanswered is not None and closing.unanswered.cost_unknown is True


# -- Redis at maxmemory -------------------------------------------------------------------------


@pytest.fixture
def small_redis() -> Iterator[redis_support.RedisServer]:
    """A ``redis-server`` of this test's own: its memory limit is changed mid-test."""
    with redis_support.start() as server:
        yield server


def test_an_answer_paid_as_redis_reaches_maxmemory_is_kept_and_retry_stores_it_without_paying(
    small_redis: redis_support.RedisServer, bad: Misbehaving, sim_url: str, tmp_path: Path
) -> None:
    import redis

    admin = redis.Redis.from_url(small_redis.url(0), socket_timeout=10)
    admin.config_set("maxmemory-policy", "noeviction")

    def memory_full() -> None:
        admin.config_set("maxmemory", 1)

    settings = _settings(bad, tmp_path, store_url=small_redis.url(0))
    bad.before_answer = _once(memory_full)
    try:
        with Researcher(settings) as r:
            error = _fails_keeping_the_answer(lambda: r.search(QUESTION))
            assert isinstance(error, StoreUnavailable) and "maxmemory" in error.message
            assert error.answer is not None
            cid = error.answer.conversation_id or ""
            assert _billed(sim_url) == (1, 0)

            admin.config_set("maxmemory", 0)
            assert _roles(r, cid) == ["system", "user"]
            answer = r.retry(cid)
            assert answer.text == error.answer.text
            assert _roles(r, cid) == ["system", "user", "answer"]
            assert r.answering_since(cid) is None, "the question's mark ended with it"
            assert _kept_files(tmp_path) == []
            r.followup(cid, "What does asyncio.shield do?")
            assert _roles(r, cid)[-2:] == ["user", "answer"]
    finally:
        admin.close()
    assert _billed(sim_url) == (2, 0), "the kept answer was stored without paying again"


def test_in_a_notebook_the_error_says_how_and_pplx_retry_stores_the_kept_answer_for_free(
    on_disk: Settings, disk: Disk, bad: Misbehaving, sim_url: str
) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from pplx_nb.notebook import magics

    bad.before_answer = _once(disk.fill)
    with Researcher(on_disk) as r:
        shell = InteractiveShell.instance()
        magics.set_researcher(r)
        shell.run_line_magic("load_ext", "pplx_nb")
        try:
            with capture_output() as failed:
                shell.run_cell(f"%%pplx\n{QUESTION}")
            [cid] = [summary.conversation_id for summary in r.conversations()]
            disk.free()
            with capture_output():
                kept = shell.run_cell(f"%pplx_retry {cid}").result
        finally:
            shell.run_line_magic("unload_ext", "pplx_nb")
            magics.set_researcher(None)
        shown = "\n".join(str(v) for output in failed.outputs for v in output.data.values())
        shown += failed.stdout + failed.stderr
        assert "FILESYSTEM_ERROR" in shown and "paid for" in shown
        assert f"%pplx_retry {cid}" in shown and "%%pplx_followup" in shown
        assert "perplexity_search_followup" not in shown
        assert isinstance(kept, Answer) and _roles(r, cid) == ["system", "user", "answer"]
    assert _billed(sim_url) == (1, 0)
