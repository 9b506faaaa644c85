"""Attacks on the files pplx_nb reads and writes: each test plays one, then checks it fails safely.

Store and job files that are FIFOs, links to ``/dev/zero`` or oversized; symbolic links planted in
the logs folder; byte order marks.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.waiting import FakeClock

from pplx_nb import Settings
from pplx_nb._errors import ConversationCorrupted, ConversationNotFound
from pplx_nb.backends import open_queue, open_store
from pplx_nb.jobs import JobQueue
from pplx_nb.store import ConversationStore

pytestmark = pytest.mark.skipif(os.name != "posix", reason="FIFOs and symlinks as POSIX has them")


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``'s result, failing the test if it takes longer than ``seconds`` (or hangs)."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s (blocked or reading forever)"
    if errors:
        raise errors[0]
    assert time.monotonic() - started < seconds
    return result[0]


def _conversation(store: ConversationStore, text: str = "What does functools.partial do?") -> str:
    return store.create([{"role": "user", "content": text}]).conversation_id


def _replace_with(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_fifo_or_dev_zero_conversation_file_is_skipped_by_list(logs_dir: Path, kind: str) -> None:
    store = open_store(root=logs_dir)
    good, bad = _conversation(store), _conversation(store)
    _replace_with(logs_dir / bad / "conversation.json", kind)

    listed = _within(5, store.list)

    assert [s.conversation_id for s in listed] == [good]
    assert len(store.last_skipped) == 1
    assert isinstance(store.last_skipped[0], ConversationCorrupted)
    assert bad in str(store.last_skipped[0].details["path"])
    with pytest.raises(ConversationCorrupted, match="not an entry pplx_nb wrote"):
        _within(5, lambda: store.load(bad))
    with pytest.raises(ConversationCorrupted):
        _within(5, lambda: store.append(bad, {"role": "assistant", "content": "x"}))


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_fifo_or_dev_zero_status_file_is_skipped_by_the_job_listing(
    logs_dir: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(root=logs_dir)
    queue = open_queue(root=logs_dir)
    good, bad = _conversation(store), _conversation(store)
    queue.enqueue(good, "perplexity_deep_research", {})
    queue.enqueue(bad, "perplexity_deep_research", {})
    _replace_with(logs_dir / bad / "status.json", kind)

    jobs = _within(5, queue.jobs)
    listed = _within(5, store.list)

    assert [job.conversation_id for job in jobs] == [good]
    assert any(bad in r.getMessage() and "Skipping" in r.getMessage() for r in caplog.records)
    assert {s.conversation_id: s.job_status for s in listed} == {good: "pending", bad: None}
    claimed = _within(5, lambda: queue.claim("w"))
    assert claimed is not None and claimed.conversation_id == good
    assert _within(5, lambda: queue.claim("w")) is None


def test_a_file_over_the_size_limit_is_reported_not_read(logs_dir: Path) -> None:
    settings = Settings(conversation_logs_dir=logs_dir, max_file_bytes=4096, offline=True)
    store = open_store(settings)
    small = _conversation(store)
    big = _conversation(store, "x" * 5000)

    assert [s.conversation_id for s in store.list()] == [small]
    assert "4,096-byte limit" in str(store.last_skipped[0])
    with pytest.raises(ConversationCorrupted, match="PPLX_NB_MAX_FILE_BYTES"):
        store.load(big)
    assert Settings(_env_file=None, offline=True).max_file_bytes == 32 << 20


def test_the_file_size_limit_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PPLX_NB_MAX_FILE_BYTES", "1000")
    assert Settings.from_env().max_file_bytes == 1000


def test_a_conversation_folder_that_is_a_symlink_is_never_followed(
    logs_dir: Path, tmp_path: Path
) -> None:
    store = open_store(root=logs_dir)
    good = _conversation(store)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # A genuine-looking conversation outside the logs folder, linked in under a fresh id.
    original = _conversation(store, "planted")
    os.rename(logs_dir / original, elsewhere / original)
    before = {p.name: p.read_bytes() for p in (elsewhere / original).iterdir()}
    (logs_dir / original).symlink_to(elsewhere / original, target_is_directory=True)

    assert [s.conversation_id for s in store.list()] == [good]
    assert "a symbolic link" in str(store.last_skipped[0])
    with pytest.raises(ConversationCorrupted, match="symbolic link"):
        store.load(original)
    with pytest.raises(ConversationCorrupted, match="symbolic link"):
        store.append(original, {"role": "assistant", "content": "written through the link"})
    queue = open_queue(root=logs_dir)
    with pytest.raises(ConversationNotFound):
        queue.enqueue(original, "perplexity_deep_research", {})
    assert queue.jobs() == []

    store.delete(original)

    assert not (logs_dir / original).exists() and not (logs_dir / original).is_symlink()
    assert sorted(p.name for p in logs_dir.iterdir()) == sorted([good])
    assert {p.name: p.read_bytes() for p in (elsewhere / original).iterdir()} == before


def test_a_dangling_lock_symlink_creates_nothing_outside(logs_dir: Path, tmp_path: Path) -> None:
    store = open_store(root=logs_dir)
    cid = _conversation(store)
    outside = tmp_path / "created-outside"
    (logs_dir / cid / ".lock").symlink_to(outside)

    with pytest.raises(ConversationCorrupted, match="symbolic link"):
        store.append(cid, {"role": "assistant", "content": "answer"})
    with pytest.raises(ConversationCorrupted, match="symbolic link"):
        open_queue(root=logs_dir).enqueue(cid, "perplexity_deep_research", {})

    assert not outside.exists()
    assert len(store.load(cid).messages) == 1


def test_a_planted_link_in_the_job_index_is_refused(logs_dir: Path, tmp_path: Path) -> None:
    store = open_store(root=logs_dir)
    cid = _conversation(store)
    outside = tmp_path / "outside-index"
    outside.mkdir()
    (logs_dir / ".jobs").symlink_to(outside, target_is_directory=True)

    with pytest.raises(ConversationCorrupted, match="symbolic link"):
        open_queue(root=logs_dir).enqueue(cid, "perplexity_deep_research", {})
    assert list(outside.iterdir()) == []


def test_delete_leaves_no_trash_behind(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    ids = [_conversation(store) for _ in range(3)]
    for cid in ids:
        store.delete(cid)
    assert list(logs_dir.iterdir()) == []


def test_a_conversation_file_with_a_byte_order_mark_reads_the_same_everywhere(
    logs_dir: Path,
) -> None:
    store = open_store(root=logs_dir)
    cid = _conversation(store)
    path = logs_dir / cid / "conversation.json"
    document = json.loads(path.read_bytes())
    document.pop("pplxSummary")
    # As an editor on Windows saves it: indented, with a BOM.
    path.write_bytes(codecs.BOM_UTF8 + json.dumps(document, indent=2).encode())

    assert [s.conversation_id for s in store.list()] == [cid]
    assert store.last_skipped == []
    assert store.load(cid).messages[0].content == "What does functools.partial do?"
    assert store.read_raw(cid)["conversationId"] == cid
    store.append(cid, {"role": "assistant", "content": "It freezes arguments."})
    assert len(store.load(cid).messages) == 2
    assert not path.read_bytes().startswith(codecs.BOM_UTF8)


def test_a_status_file_with_a_byte_order_mark_reads_as_without(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    queue = open_queue(root=logs_dir)
    cid = _conversation(store)
    queue.enqueue(cid, "perplexity_deep_research", {})
    path = logs_dir / cid / "status.json"
    path.write_bytes(codecs.BOM_UTF8 + path.read_bytes())

    status = queue.status(cid)
    assert status is not None and status.status == "pending"
    assert store.list()[0].job_status == "pending"
    assert [job.conversation_id for job in queue.jobs()] == [cid]


# -- attachments -------------------------------------------------------------------------------


_SWAPPER = """
import os, sys, time
real, spare, kind, target, deadline = sys.argv[1:4] + [sys.argv[4], time.monotonic() + 60]
made = real + ".made"
n = 0
while time.monotonic() < deadline and not os.path.exists(real + ".stop"):
    os.rename(real, spare)  # the real one aside, a link or a FIFO in its place
    if kind == "fifo":
        os.mkfifo(made)
    else:
        os.symlink(target, made)
    os.rename(made, real)
    os.unlink(real)  # a folder cannot be renamed over a link
    os.rename(spare, real)
    n += 1
print(n)
"""


@contextlib.contextmanager
def _swapping(real: Path, kind: str, target: Path | None = None) -> Iterator[list[int]]:
    """Another process swapping ``real`` for a link to ``target`` (or a FIFO) and back, nonstop.

    A process, not a thread: the race needs both sides running at once, on two cores.
    """
    spare = real.with_name(real.name + ".spare")
    swaps: list[int] = []
    with subprocess.Popen(
        [sys.executable, "-c", _SWAPPER, str(real), str(spare), kind, str(target)],
        stdout=subprocess.PIPE,
        text=True,
    ) as swapper:
        try:
            time.sleep(0.2)
            yield swaps
        finally:
            Path(str(real) + ".stop").touch()
            out, _ = swapper.communicate(timeout=30)
            swaps.append(int(out or 0))


def _attach_repeatedly(name: str, seconds: float, tries: int) -> tuple[list[str], int]:
    """The texts ``prepare_files`` embedded over ``tries`` attempts, and how many were refused."""
    from pplx_nb._errors import ValidationError
    from pplx_nb.context import prepare_files

    texts, refused = [], 0
    deadline = time.monotonic() + seconds
    for _ in range(tries):
        if time.monotonic() > deadline:
            break
        try:
            texts.append(prepare_files([name], []).text)
        except ValidationError:
            refused += 1
    return texts, refused


@pytest.mark.parametrize("swapped", ["file", "folder"])
def test_swapping_an_attachment_for_a_link_never_embeds_the_target(
    workdir: Path, tmp_path: Path, swapped: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.md").write_text("TOP-SECRET outside the allowed folders\n")
    (workdir / "sub").mkdir()
    (workdir / "sub" / "notes.md").write_text("harmless notes\n")
    real = workdir / ("sub" if swapped == "folder" else "sub/notes.md")
    target = outside if swapped == "folder" else outside / "notes.md"

    with _swapping(real, "link", target) as swaps:
        texts, refused = _attach_repeatedly("sub/notes.md", seconds=8, tries=20_000)

    assert swaps[0] > 100
    assert not [text for text in texts if "TOP-SECRET" in text]
    assert texts or refused


def test_swapping_an_attachment_for_a_fifo_never_blocks(workdir: Path) -> None:
    with _swapping(workdir / "notes.md", "fifo") as swaps:
        texts, refused = _within(30, lambda: _attach_repeatedly("notes.md", 8, 20_000))
    assert swaps[0] > 100
    assert all("TaskGroup" in text for text in texts)
    assert texts or refused


def test_a_root_holding_the_home_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pplx_nb._errors import ValidationError
    from pplx_nb.context._files import allowed_roots

    homes = tmp_path / "home"
    (homes / "someone" / "project").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(homes / "someone"))
    for wide in (homes, homes / "someone", Path("/")):
        with pytest.raises(ValidationError, match="too wide"):
            allowed_roots([wide], working_directory=False)
    assert allowed_roots([homes / "someone" / "project"], working_directory=False) == [
        (homes / "someone" / "project").resolve()
    ]


# -- odd input -------------------------------------------------------------------------------


def test_a_lone_surrogate_is_a_validation_error_that_says_so(settings: Settings) -> None:
    from pplx_nb import Researcher
    from pplx_nb._errors import ValidationError

    researcher = Researcher(settings)
    try:
        cid = researcher.search("What does functools.partial do?").conversation_id
        for ask in (
            lambda: researcher.search("What is \ud83d asyncio?"),
            lambda: researcher.followup(cid, "And \udfff its keywords?"),
            lambda: researcher.deep_research("Survey \ud800 asyncio", wait=True),
        ):
            with pytest.raises(ValidationError, match="lone surrogate at character") as caught:
                ask()
            assert "finite numbers" not in str(caught.value)
        assert len(researcher.history(cid).messages) == 2  # nothing stored by the refusals
    finally:
        researcher.close()
    store = open_store(root=settings.conversation_logs_dir)
    with pytest.raises(ValidationError, match="A message holds a lone surrogate"):
        store.create([{"role": "user", "content": "broken \ud800 text"}])


def test_a_key_pasted_into_a_question_is_neither_stored_nor_sent(settings: Settings) -> None:
    from pplx_nb import Researcher

    pasted = "pplx-PASTEDKEY0123456789abcdef"
    researcher = Researcher(settings)
    try:
        answer = researcher.search(f"Why does the key {pasted} give a 401 from urllib.request?")
        follow = researcher.followup(
            answer.conversation_id, f"Is it the header Authorization: Bearer {pasted}?"
        )
        queued = researcher.deep_research(f"Survey keys like {pasted} in urllib", wait=False)
        folder = settings.conversation_logs_dir / queued.conversation_id
        on_disk = "".join(p.read_text() for p in folder.iterdir() if p.is_file())
        assert "PASTEDKEY" not in on_disk and "keys like ***" in on_disk  # job.json too
    finally:
        researcher.close()
    for result in (answer, follow):
        assert any("Your question holds API-key-shaped text" in note for note in result.notes)
        assert "PASTEDKEY" not in result.text  # the simulator quotes the question it received
    stored = (Path(answer.conversation_path) / "conversation.json").read_text()
    assert "PASTEDKEY" not in stored
    assert "Why does the key *** give a 401" in stored


def test_prune_with_the_largest_timedelta_deletes_nothing(logs_dir: Path) -> None:
    from datetime import timedelta

    store = open_store(root=logs_dir)
    cid = _conversation(store)
    assert store.prune(timedelta.max) == 0
    assert store.prune(timedelta(days=365 * 9000)) == 0
    assert store.ids() == [cid]
    time.sleep(0.01)
    assert store.prune(timedelta(0)) == 1


# -- leases across skewed clocks -------------------------------------------------------------


@contextlib.contextmanager
def _clock_off_by(seconds: float, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Stamps the job queue writes in the block come from a clock ``seconds`` off."""
    from datetime import UTC, datetime, timedelta

    from pplx_nb._models import now_iso
    from pplx_nb.jobs import _queue

    with monkeypatch.context() as patch:
        patch.setattr(
            _queue, "now_iso", lambda: now_iso(datetime.now(UTC) + timedelta(seconds=seconds))
        )
        yield


def _two_workers(
    logs_dir: Path, lease: float, reader_clock: FakeClock
) -> tuple[JobQueue, JobQueue, str]:
    """Two workers' queues over ``logs_dir`` (the reader's judging leases by ``reader_clock``)
    and the conversation of the one job queued."""
    cid = _conversation(open_store(root=logs_dir))
    writer, reader = (
        open_queue(root=logs_dir, lease_seconds=lease),
        open_queue(root=logs_dir, lease_seconds=lease, clock=reader_clock),
    )
    writer.enqueue(cid, "perplexity_deep_research", {})
    return writer, reader, cid


@pytest.mark.parametrize("writer_clock", [-120, +120])
def test_a_heartbeating_job_is_never_taken_over_whatever_the_clocks_say(
    logs_dir: Path, monkeypatch: pytest.MonkeyPatch, writer_clock: float
) -> None:
    clock = FakeClock()
    worker, reader, _ = _two_workers(logs_dir, 60, clock)
    with _clock_off_by(writer_clock, monkeypatch):
        job = worker.claim("healthy")
    assert job is not None
    for beat in range(10):  # four leases, a heartbeat every 0.4 of one
        # The writer's wall clock moves on as the reader's does, so each stamp is new.
        with _clock_off_by(writer_clock + 24 * beat, monkeypatch):
            worker.heartbeat(job)
        assert reader.recover_stale() == 0
        clock.advance(24)
        assert reader.recover_stale() == 0
    with _clock_off_by(writer_clock, monkeypatch):
        assert worker.complete(job).attempts == 1


@pytest.mark.parametrize("writer_clock", [-3600, +3600])
def test_a_dead_workers_job_is_recovered_one_lease_after_the_reader_first_saw_it(
    logs_dir: Path, monkeypatch: pytest.MonkeyPatch, writer_clock: float
) -> None:
    clock = FakeClock()
    dead, reader, cid = _two_workers(logs_dir, 60, clock)
    with _clock_off_by(writer_clock, monkeypatch):
        assert dead.claim("dead") is not None
    assert reader.recover_stale() == 0  # the first look
    clock.advance(60)
    assert reader.recover_stale() == 0, "one lease since the first look: not yet past it"
    clock.advance(0.001)
    assert reader.recover_stale() == 1
    status = reader.status(cid)
    assert status is not None and status.status == "pending"
    assert [e.code for e in status.error_history] == ["JOB_LEASE_EXPIRED"]
