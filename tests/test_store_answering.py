"""The store's ``.answering`` marker: its file format, who counts as alive, and the lock it is set
under. Processes of earlier versions share the folder, so the format is pinned here."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pplx_nb import ConversationNotFound, ValidationError
from pplx_nb._layout import ANSWERING_FILE
from pplx_nb.backends import open_store
from pplx_nb.store import AnsweringMarker, ConversationStore

QUESTION = {"role": "user", "content": "How do I cancel an asyncio task?"}


@pytest.fixture
def store(logs_dir: Path) -> ConversationStore:
    return open_store(root=logs_dir)


@pytest.fixture
def cid(store: ConversationStore) -> str:
    return store.create([QUESTION]).conversation_id


def _marker(store: ConversationStore, cid: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((store.path(cid) / ANSWERING_FILE).read_text())
    return data


def _write(store: ConversationStore, cid: str, **fields: Any) -> None:
    (store.path(cid) / ANSWERING_FILE).write_text(json.dumps(fields))


def _dead_pid() -> int:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


def test_the_marker_keeps_the_format_earlier_versions_read_and_write(
    store: ConversationStore, cid: str
) -> None:
    before = time.time()
    with store.locked(cid):
        token = store.mark_answering(cid, 600)
    marker = _marker(store, cid)
    assert set(marker) == {"token", "pid", "host", "startedAt", "deadline"}
    assert (marker["token"], marker["pid"], marker["host"]) == (
        token,
        os.getpid(),
        socket.gethostname(),
    )
    assert before + 600 <= marker["deadline"] <= time.time() + 600
    assert store.answering(cid) == AnsweringMarker(started_at=marker["startedAt"])

    # One written by another process of an earlier version: as live, and not ours to end.
    _write(
        store,
        cid,
        token="0" * 32,
        pid=os.getpid(),
        host=socket.gethostname(),
        startedAt="2025-01-24T15:00:00.000Z",
        deadline=time.time() + 600,
    )
    assert store.answering(cid) == AnsweringMarker(started_at="2025-01-24T15:00:00.000Z")
    with store.locked(cid):
        store.clear_answering(cid, token)
    assert store.answering(cid) is not None
    with store.locked(cid):
        store.clear_answering(cid, "0" * 32)
    assert store.answering(cid) is None and not (store.path(cid) / ANSWERING_FILE).exists()


def test_renewing_moves_the_deadline_and_keeps_when_the_question_was_asked(
    store: ConversationStore, cid: str
) -> None:
    with store.locked(cid):
        token = store.mark_answering(cid, 1)
    first = _marker(store, cid)
    with store.locked(cid):
        store.renew_answering(cid, token, 600)
    renewed = _marker(store, cid)
    assert renewed["deadline"] >= first["deadline"] + 598
    assert {k: v for k, v in renewed.items() if k != "deadline"} == {
        k: v for k, v in first.items() if k != "deadline"
    }
    with store.locked(cid):
        store.renew_answering(cid, "not-" + token, 6000)  # another answer's token: no effect
    assert _marker(store, cid) == renewed


def test_a_marker_without_a_time_still_counts_and_says_so(
    store: ConversationStore, cid: str
) -> None:
    _write(store, cid, token="t", pid=os.getpid(), host=socket.gethostname(), deadline=2e10)
    assert store.answering(cid) == AnsweringMarker(started_at=None)


def test_another_machines_marker_counts_until_its_deadline(
    store: ConversationStore, cid: str
) -> None:
    fields = {"token": "t", "pid": _dead_pid(), "host": "another-" + socket.gethostname()}
    _write(store, cid, **fields, startedAt="2025-01-24T15:00:00.000Z", deadline=time.time() + 600)
    assert store.answering(cid) is not None  # its process cannot be checked from here
    _write(store, cid, **fields, startedAt="2025-01-24T15:00:00.000Z", deadline=time.time() - 1)
    assert store.answering(cid) is None


def test_on_windows_only_the_deadline_counts(
    store: ConversationStore, cid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = {"token": "t", "pid": _dead_pid(), "host": socket.gethostname()}
    _write(store, cid, **fields, startedAt="2025-01-24T15:00:00.000Z", deadline=time.time() + 600)
    assert store.answering(cid) is None  # here a dead process's marker blocks nothing
    with monkeypatch.context() as patch:
        patch.setattr(sys, "platform", "win32")
        assert store.answering(cid) == AnsweringMarker(started_at="2025-01-24T15:00:00.000Z")


def test_the_marker_is_set_under_the_lock_appends_take(store: ConversationStore, cid: str) -> None:
    appended = threading.Event()

    def append() -> None:
        store.append(cid, {"role": "assistant", "content": "With task.cancel()."})
        appended.set()

    with store.locked(cid):
        token = store.mark_answering(cid, 600)
        writer = threading.Thread(target=append)
        writer.start()
        assert not appended.wait(0.3)  # held: the append waits, whatever the machine's speed
    assert appended.wait(30)
    writer.join()
    with store.locked(cid):
        store.clear_answering(cid, token)
    assert [m.role for m in store.load(cid).messages] == ["user", "assistant"]


def test_the_lock_of_a_missing_or_malformed_conversation_is_refused(
    store: ConversationStore,
) -> None:
    with pytest.raises(ConversationNotFound), store.locked("20250124-1706102400123"):
        pass
    with pytest.raises(ValidationError), store.locked("../elsewhere"):
        pass
    with pytest.raises(ValidationError):
        store.answering("../elsewhere")
