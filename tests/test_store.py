"""ConversationStore: ids, atomic appends, concurrency, corruption, permissions, TS-server files."""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerProcess
from pathlib import Path
from typing import Any

import pytest
from support import writers

import pplx_nb
from pplx_nb import (
    ConversationCorrupted,
    ConversationNotFound,
    ConversationStore,
    FilesystemError,
    Message,
    Source,
    Usage,
    ValidationError,
)
from pplx_nb._models import JobState, closing_turn
from pplx_nb.backends import open_backends, open_queue, open_store
from pplx_nb.jobs import JobContext
from pplx_nb.store import FileBackend

DATA = Path(__file__).parent / "data"
TS_FIXTURE = DATA / "ts_server_conversation.json"
TS_ID = "20250124-1737724800123"


def user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: str, **meta: Any) -> Message:
    return Message(role="assistant", content=content, **meta)


@pytest.fixture
def store(logs_dir: Path) -> ConversationStore:
    return open_store(root=logs_dir)


def conversation_file(store: ConversationStore, conversation_id: str) -> Path:
    return store.path(conversation_id) / "conversation.json"


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under root with its size and mtime: any write or creation changes it."""
    return {
        str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in [root, *root.rglob("*")]
    }


def install_ts_conversation(store: ConversationStore, **extra: Any) -> dict[str, Any]:
    """Put the TypeScript-server fixture (plus ``extra`` top-level keys) into the store."""
    document = json.loads(TS_FIXTURE.read_text())
    document.update(extra)
    directory = Path(store.location) / TS_ID
    directory.mkdir()
    (directory / "conversation.json").write_text(json.dumps(document, indent=2))
    return document


# -- creating, loading, appending -------------------------------------------------------------


def test_store_is_exported_from_the_package() -> None:
    assert pplx_nb.ConversationStore is ConversationStore


def test_default_root_is_the_configured_logs_dir(
    logs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = pplx_nb.Settings(conversation_logs_dir=logs_dir)
    assert Path(open_store(settings).location) == logs_dir.resolve()
    monkeypatch.setenv("CONVERSATION_LOGS_DIR", str(logs_dir / "from-env"))
    assert Path(open_store().location) == (logs_dir / "from-env").resolve()


def test_create_assigns_a_dated_millisecond_id_and_stores_the_messages(
    store: ConversationStore,
) -> None:
    before_ms = int(time.time() * 1000)
    conversation = store.create([{"role": "system", "content": "Be brief."}, user("What is GIL?")])

    assert re.fullmatch(r"\d{8}-\d{13}", conversation.conversation_id)
    day, unix_ms = conversation.conversation_id.split("-")
    created = datetime.fromtimestamp(int(unix_ms) / 1000, UTC)
    assert int(unix_ms) >= before_ms
    assert day == created.strftime("%Y%m%d")
    assert conversation.created_at == created.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert conversation.path == store.conversation_location(conversation.conversation_id)
    assert conversation.message_count == 2
    loaded = store.load(conversation.conversation_id)
    assert [m.content for m in loaded.messages] == ["Be brief.", "What is GIL?"]
    assert loaded.path == conversation.path
    assert store.exists(conversation.conversation_id)


def test_append_adds_messages_with_their_metadata(store: ConversationStore) -> None:
    conversation = store.create([user("How do I cancel a task?")])
    answer = assistant(
        "Call task.cancel() [1].",
        tool="perplexity_search",
        model="sonar-pro",
        timestamp="2025-01-24T15:00:00.000Z",
        sources=[Source(url="https://docs.python.org/3/library/asyncio-task.html", title="Tasks")],
        usage=Usage(prompt_tokens=12, completion_tokens=30, total_tokens=42),
    )

    updated = store.append(conversation.conversation_id, answer, user("And with a timeout?"))

    assert updated.message_count == 3
    assert updated.updated_at >= conversation.updated_at
    loaded = store.load(conversation.conversation_id)
    assert loaded.messages[1] == answer
    assert loaded.messages[1].sources is not None
    assert loaded.messages[1].sources[0].title == "Tasks"
    assert loaded.messages[2].content == "And with a timeout?"
    on_disk = json.loads(conversation_file(store, conversation.conversation_id).read_bytes())
    assert on_disk["messageCount"] == 3
    assert on_disk["messages"][1]["usage"] == {
        "promptTokens": 12,
        "completionTokens": 30,
        "totalTokens": 42,
    }


def test_appended_conversation_behaves_like_a_loaded_one(store: ConversationStore) -> None:
    conversation = store.create([user("q"), assistant("a", sources=[Source(url="https://a.b")])])
    cid = conversation.conversation_id

    def first_use(operation: Any) -> tuple[Any, Any]:
        """Apply ``operation`` first thing to a fresh append result and to a fresh load."""
        appended = store.append(cid, user("follow-up"))
        return operation(appended), operation(store.load(cid))

    appended = store.append(cid, user("follow-up"))
    assert isinstance(appended, pplx_nb.Conversation)
    assert appended.message_count == len(store.load(cid).messages)
    assert appended.path == store.conversation_location(cid)
    assert appended == store.load(cid)
    ours, theirs = first_use(lambda c: c.to_json_dict())
    assert ours == theirs == store.read_raw(cid)
    ours, theirs = first_use(lambda c: c.model_dump_json())
    assert ours == theirs
    ours, theirs = first_use(lambda c: pickle.loads(pickle.dumps(c)))
    assert ours == theirs
    ours, theirs = first_use(repr)
    assert ours.split("(", 1)[1] == theirs.split("(", 1)[1]
    ours, theirs = first_use(lambda c: c.messages[1].sources)
    assert ours == theirs == [Source(url="https://a.b")]
    ours, theirs = first_use(lambda c: c.model_copy(deep=True))
    assert ours == theirs


def test_empty_conversation_accepts_appends(store: ConversationStore) -> None:
    conversation = store.create([])
    assert conversation.messages == []
    store.append(conversation.conversation_id, user("first words"))
    store.append(conversation.conversation_id, user("second words"))
    loaded = store.load(conversation.conversation_id)
    assert [m.content for m in loaded.messages] == ["first words", "second words"]
    assert store.list()[0].first_query == "first words"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="names fds through /proc")
def test_durable_store_syncs_the_file_and_its_directory(
    logs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    store = open_store(root=logs_dir, durable=True)
    conversation = store.create([user("keep me")])
    monkeypatch.setattr(os, "fsync", recording_fsync)
    store.append(conversation.conversation_id, user("after a power cut too"))
    monkeypatch.undo()

    directory = str(store.path(conversation.conversation_id))
    assert directory in synced
    assert any(p.startswith(f"{directory}/.conversation.json.") for p in synced)
    assert store.load(conversation.conversation_id).message_count == 2


def test_create_keeps_metadata_in_camel_case(store: ConversationStore) -> None:
    parent = store.create([user("first")])
    child = store.create([user("second")], parent_conversation_id=parent.conversation_id)
    document = json.loads(conversation_file(store, child.conversation_id).read_bytes())
    assert document["parentConversationId"] == parent.conversation_id
    assert child.parent_conversation_id == parent.conversation_id


def test_invalid_messages_are_refused_and_nothing_is_stored(store: ConversationStore) -> None:
    with pytest.raises(ValidationError, match="role"):
        store.create([{"role": "robot", "content": "beep"}])
    with pytest.raises(ValidationError):
        store.create(["just a string"])  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        store.create([user("ok")], message_count=3)
    assert store.ids() == []
    conversation = store.create([user("ok")])
    with pytest.raises(ValidationError):
        store.append(conversation.conversation_id)
    assert store.load(conversation.conversation_id).message_count == 1


def test_files_are_private_to_the_user(tmp_path: Path) -> None:
    store = open_store(root=tmp_path / "fresh" / "conversation-logs")
    assert store.list() == []
    assert not (tmp_path / "fresh").exists()  # reading never creates directories
    conversation = store.create([user("private?")])
    store.append(conversation.conversation_id, user("yes"))

    directory = Path(conversation.path or "")
    assert Path(store.location).stat().st_mode & 0o777 == 0o700
    assert directory.stat().st_mode & 0o777 == 0o700
    names = sorted(p.name for p in directory.iterdir())
    assert names == [".lock", "conversation.json"]
    for path in directory.iterdir():
        assert path.stat().st_mode & 0o777 == 0o600, path.name


def test_unknown_conversation_says_how_to_start_one(store: ConversationStore) -> None:
    missing = "20250124-1706102400999"
    with pytest.raises(ConversationNotFound) as caught:
        store.load(missing)
    assert caught.value.code == "CONVERSATION_NOT_FOUND"
    assert "perplexity_search" in str(caught.value)
    assert isinstance(caught.value, KeyError)
    with pytest.raises(ConversationNotFound):
        store.append(missing, user("hello?"))
    with pytest.raises(ConversationNotFound):
        store.delete(missing)
    assert not store.exists(missing)
    assert not (Path(store.location) / missing).exists()


@pytest.mark.parametrize(
    "bad_id",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "20250124-170610240012",
        "",
        "2" * 10_240,
        "20250124-1706102400123/..",
        "../20250124-1706102400123",
        "2025012a-1706102400123",
        "\uff12\uff10\uff12\uff15\uff10\uff11\uff12\uff14-1706102400123",
        "20250124-\u0661\u0667\u0660\u0666\u0661\u0660\u0662\u0664\u0660\u0660\u0661\u0662\u0663",
    ],
    ids=[
        "traversal",
        "absolute",
        "12-digits",
        "empty",
        "10kB",
        "suffix",
        "prefix",
        "letter",
        "full-width-digits",
        "arabic-indic-digits",
    ],
)
def test_malformed_ids_are_refused_before_any_file_access(
    store: ConversationStore, tmp_path: Path, bad_id: str
) -> None:
    store.create([user("a neighbour that must stay untouched")])
    before = tree(tmp_path)
    operations = [
        lambda: store.load(bad_id),
        lambda: store.append(bad_id, user("x")),
        lambda: store.exists(bad_id),
        lambda: store.path(bad_id),
        lambda: store.delete(bad_id),
        lambda: store.fork(bad_id),
        lambda: store.read_raw(bad_id),
    ]
    for operation in operations:
        with pytest.raises(ValidationError) as caught:
            operation()
        assert caught.value.code == "VALIDATION_ERROR"
    assert tree(tmp_path) == before


# -- corruption and disk errors ---------------------------------------------------------------


def test_truncated_conversation_is_reported_as_corrupted(store: ConversationStore) -> None:
    conversation = store.create([user("a question"), assistant("a long answer " * 50)])
    path = conversation_file(store, conversation.conversation_id)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    with pytest.raises(ConversationCorrupted) as caught:
        store.load(conversation.conversation_id)
    assert caught.value.code == "CONVERSATION_CORRUPTED"
    assert str(path) in str(caught.value)
    assert "not valid JSON" in str(caught.value)
    with pytest.raises(ConversationCorrupted):
        store.append(conversation.conversation_id, user("more"))


def test_json_nested_too_deeply_is_corrupted_everywhere_it_is_read(
    store: ConversationStore,
) -> None:
    conversation = store.create([user("about to be overwritten")])
    cid = conversation.conversation_id
    for name in ("conversation.json", "status.json"):
        (store.path(cid) / name).write_bytes(b"[" * 100_000)
    for read in (store.load, store.read_raw, lambda c: store.append(c, user("more"))):
        with pytest.raises(ConversationCorrupted, match="not valid JSON"):
            read(cid)
    assert store.list() == [] and len(store.last_skipped) == 1
    with pytest.raises(ConversationCorrupted, match="not valid JSON"):
        open_queue(root=Path(store.location)).status(cid)


def test_schema_violation_is_reported_as_corrupted(store: ConversationStore) -> None:
    conversation = store.create([user("fine")])
    path = conversation_file(store, conversation.conversation_id)
    path.write_text(json.dumps({"conversationId": conversation.conversation_id, "messages": []}))
    with pytest.raises(ConversationCorrupted, match="createdAt"):
        store.load(conversation.conversation_id)


def test_list_skips_a_corrupted_conversation_with_a_warning(
    store: ConversationStore, caplog: pytest.LogCaptureFixture
) -> None:
    good = store.create([user("still fine")])
    bad = store.create([user("about to break")])
    path = conversation_file(store, bad.conversation_id)
    path.write_bytes(path.read_bytes()[:-10])

    with caplog.at_level(logging.WARNING, logger="pplx_nb.store"):
        listed = store.list()

    assert [s.conversation_id for s in listed] == [good.conversation_id]
    assert [e.details["conversation_id"] for e in store.last_skipped] == [bad.conversation_id]
    assert bad.conversation_id in caplog.text
    assert "corrupted" in caplog.text


def test_store_under_a_regular_file_is_a_filesystem_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    store = open_store(root=blocker / "conversation-logs")

    with pytest.raises(FilesystemError) as caught:
        store.create([user("where do I go?")])
    assert caught.value.code == "FILESYSTEM_ERROR"
    assert isinstance(caught.value, OSError)
    assert str(blocker) in str(caught.value)
    assert "Not a directory" in str(caught.value)
    with pytest.raises(FilesystemError):
        store.list()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores modes")
def test_read_only_store_is_a_filesystem_error(store: ConversationStore) -> None:
    conversation = store.create([user("read only soon")])
    directory = store.path(conversation.conversation_id)
    directory.chmod(0o500)
    try:
        with pytest.raises(FilesystemError, match="Permission denied"):
            store.append(conversation.conversation_id, user("denied"))
    finally:
        directory.chmod(0o700)


# -- TypeScript-server files ------------------------------------------------------------------


def test_ts_server_file_loads_and_round_trips(store: ConversationStore) -> None:
    original = install_ts_conversation(store)
    conversation = store.load(TS_ID)
    assert conversation.message_count == 5
    assert conversation.first_query() == (
        "How does asyncio.TaskGroup cancel its tasks when one of them fails?"
    )
    assert all(m.timestamp is None and m.sources is None for m in conversation.messages)
    assert conversation.to_json_dict() == original


def test_a_file_naming_another_id_than_its_folder_is_corrupted_and_left_unchanged(
    store: ConversationStore,
) -> None:
    install_ts_conversation(store, conversationId="20240101-1704067200000")
    before = (Path(store.location) / TS_ID / "conversation.json").read_bytes()
    for action in (lambda: store.load(TS_ID), lambda: store.append(TS_ID, user("refused"))):
        with pytest.raises(ConversationCorrupted, match="20240101-1704067200000"):
            action()
    assert (Path(store.location) / TS_ID / "conversation.json").read_bytes() == before


def test_ts_server_file_accepts_appends_and_keeps_unknown_keys(store: ConversationStore) -> None:
    original = install_ts_conversation(store, title="TS notes")
    original["messages"][1]["annotations"] = [{"kind": "flag"}]
    (Path(store.location) / TS_ID / "conversation.json").write_text(json.dumps(original, indent=2))

    store.append(TS_ID, assistant("Use the @decorator syntax.", tool="perplexity_search"))
    store.append(TS_ID, user("Thanks"))

    document = json.loads((Path(store.location) / TS_ID / "conversation.json").read_bytes())
    assert document["title"] == "TS notes"
    assert document["messages"][:5] == original["messages"]
    assert document["messageCount"] == 7
    assert document["createdAt"] == original["createdAt"]
    loaded = store.load(TS_ID)
    assert loaded.model_extra == {"title": "TS notes"}
    assert loaded.messages[1].model_extra == {"annotations": [{"kind": "flag"}]}
    assert [s.tools for s in store.list()] == [["perplexity_search"]]


# -- listing ----------------------------------------------------------------------------------


def test_list_is_newest_first_and_filters(store: ConversationStore) -> None:
    first = store.create([user("asyncio timeouts"), assistant("x", tool="perplexity_search")])
    second = store.create(
        [user("pathlib globbing"), assistant("Use Path.glob", model="sonar-deep-research")]
    )
    third = store.create([user("dataclass slots")], parent_conversation_id=first.conversation_id)

    listed = store.list()
    assert [s.conversation_id for s in listed] == [
        third.conversation_id,
        second.conversation_id,
        first.conversation_id,
    ]
    assert listed[0].parent_conversation_id == first.conversation_id
    assert listed[1].first_query == "pathlib globbing"
    assert listed[1].message_count == 2
    assert [s.conversation_id for s in store.list(tool="perplexity_search")] == [
        first.conversation_id
    ]
    assert [s.conversation_id for s in store.list(model="sonar-deep-research")] == [
        second.conversation_id
    ]
    assert [s.conversation_id for s in store.list(text="PATH.GLOB")] == [second.conversation_id]
    assert [s.conversation_id for s in store.list(limit=1)] == [third.conversation_id]
    assert [s.conversation_id for s in store.list(since=second.created_at)] == [
        third.conversation_id,
        second.conversation_id,
    ]
    until = datetime.fromisoformat(second.created_at.replace("Z", "+00:00"))
    assert [s.conversation_id for s in store.list(until=until)] == [
        second.conversation_id,
        first.conversation_id,
    ]
    with pytest.raises(ValidationError):
        store.list(since="yesterday")


def test_list_reads_the_job_status(store: ConversationStore) -> None:
    conversation = store.create([user("deep question")])
    status = {"conversationId": conversation.conversation_id, "status": "in_progress"}
    (store.path(conversation.conversation_id) / "status.json").write_text(json.dumps(status))
    assert store.list()[0].job_status == "in_progress"


def test_list_sees_changes_written_behind_its_back(store: ConversationStore) -> None:
    conversation = store.create([user("first")])
    assert store.list()[0].tools == []
    path = conversation_file(store, conversation.conversation_id)
    document = json.loads(path.read_bytes())
    document["messages"].append({"role": "assistant", "content": "hi", "tool": "other_tool"})
    path.write_text(json.dumps(document, indent=2))

    assert store.list()[0].tools == ["other_tool"]
    assert store.list(tool="other_tool")[0].conversation_id == conversation.conversation_id


def test_an_append_whose_follow_up_action_fails_is_undone(store: ConversationStore) -> None:
    conversation = store.create([user("first")])
    cid = conversation.conversation_id
    before = conversation_file(store, cid).read_bytes()

    def enqueue_fails() -> None:
        raise FilesystemError("No space left on device while writing job.json.")

    with pytest.raises(FilesystemError):
        store.append(cid, user("a question for a job"), then=enqueue_fails)
    assert conversation_file(store, cid).read_bytes() == before
    assert store.append(cid, user("again")).message_count == 2


def _header_line(path: Path) -> dict[str, Any]:
    head = path.read_bytes().split(b"\n", 1)[0]
    fields: dict[str, Any] = json.loads(head.removesuffix(b', "messages": [') + b"}")
    return fields


def test_list_reads_the_summary_from_the_header_line(store: ConversationStore) -> None:
    conversation = store.create([user("first")])
    store.append(conversation.conversation_id, assistant("an answer", tool="perplexity_search"))
    path = conversation_file(store, conversation.conversation_id)
    assert _header_line(path)["pplxSummary"] == {
        "messageCount": 2,
        "firstQuery": "first",
        "tools": ["perplexity_search"],
        "models": [],
    }
    # list() reads one line per conversation (and checks the file's ending, so a file cut short
    # is skipped): a body damaged between an intact header and ending is load()'s to report.
    head, _ = path.read_bytes().split(b"\n", 1)
    path.write_bytes(head + b"\nnot the messages\n]}\n")
    [summary] = store.list()
    assert summary.first_query == "first" and summary.tools == ["perplexity_search"]
    with pytest.raises(ConversationCorrupted):
        store.load(conversation.conversation_id)


def test_a_stale_header_summary_is_recomputed(store: ConversationStore) -> None:
    conversation = store.create([user("first")])
    cid = conversation.conversation_id
    path = conversation_file(store, cid)
    fields = _header_line(path)
    # Another writer keeps the keys it does not know and appends a message in the same layout.
    fields["messageCount"] = 2
    reply = {"role": "assistant", "content": "hi", "tool": "other_tool"}
    lines = [json.dumps(fields)[:-1] + ', "messages": [', json.dumps(user("first")) + ","]
    path.write_text("\n".join([*lines, json.dumps(reply), "]}", ""]))

    [summary] = store.list()
    assert summary.message_count == 2 and summary.tools == ["other_tool"]
    store.append(cid, user("more"))
    assert _header_line(path)["pplxSummary"] == {
        "messageCount": 3,
        "firstQuery": "first",
        "tools": ["other_tool"],
        "models": [],
    }


def test_the_header_summary_stays_out_of_loaded_conversations(store: ConversationStore) -> None:
    conversation = store.create([user("first")])
    cid = conversation.conversation_id
    appended = store.append(cid, assistant("an answer"))
    for loaded in (conversation, appended, store.load(cid)):
        assert "pplxSummary" not in loaded.model_dump_json(by_alias=True)
    assert "pplxSummary" not in store.read_raw(cid)
    with pytest.raises(ValidationError, match="set by the store"):
        store.create([user("x")], pplx_summary={"tools": []})


def test_a_late_report_takes_the_place_of_its_cancelled_jobs_closing_turn(
    store: ConversationStore,
) -> None:
    """The job's question was closed when it was cancelled and the conversation moved on; the
    report its run delivered after all replaces the notice, in place, once."""
    cid = store.create([user("Compare trio and asyncio")]).conversation_id
    assert store.close_question(cid, closing_turn("cancelled", job_id="job-1"))
    store.append(cid, user("What is trio?"), assistant("A library.", tool="perplexity_search"))
    report = assistant(
        "The report.", tool="perplexity_deep_research", model="m/deep", jobId="job-1"
    )
    seen: list[bytes] = []
    assert store.answer_closed(cid, report, "job-1", check=seen.append)
    assert b"closesJob" in seen[0]
    loaded = store.load(cid)
    assert [m.content for m in loaded.messages] == [
        "Compare trio and asyncio",
        "The report.",
        "What is trio?",
        "A library.",
    ]
    assert loaded.messages[1].job_id == "job-1" and loaded.message_count == 4
    (summary,) = store.list()
    assert summary.message_count == 4 and "m/deep" in summary.models
    assert set(summary.tools) == {"perplexity_search", "perplexity_deep_research"}
    assert not store.answer_closed(cid, report, "job-1"), "stored once"
    assert len(store.load(cid).messages) == 4


def test_a_turns_job_tags_are_typed_fields_stored_under_their_keys(
    store: ConversationStore,
) -> None:
    """``jobId`` and ``closesJob`` read as ``job_id`` / ``closes_job``, are written last under
    the same keys, and are left out of a turn that has none."""
    cid = store.create([user("Compare trio and asyncio")]).conversation_id
    store.close_question(cid, closing_turn("cancelled", job_id="job-1"))
    store.append(cid, user("And now?"), assistant("The report.", job_id="job-2"))
    stored = store.read_raw(cid)["messages"]
    assert list(stored[1])[-1] == "closesJob" and stored[1]["closesJob"] == "job-1"
    assert list(stored[3])[-1] == "jobId" and stored[3]["jobId"] == "job-2"
    assert "jobId" not in stored[0] and "closesJob" not in stored[3]
    messages = store.load(cid).messages
    assert (messages[1].closes_job, messages[3].job_id) == ("job-1", "job-2")
    assert not any(m.model_extra for m in messages), "declared, not passed through"


def test_a_late_report_is_put_back_when_its_step_fails_and_refused_when_misplaced(
    store: ConversationStore,
) -> None:
    cid = store.create([user("Compare trio and asyncio")]).conversation_id
    store.close_question(cid, closing_turn("cancelled", job_id="job-1"))
    report = assistant("The report.", jobId="job-1")

    def fails() -> None:
        raise FilesystemError("the job side refused")

    with pytest.raises(FilesystemError):
        store.answer_closed(cid, report, "job-1", then=fails)
    with pytest.raises(ValidationError):
        store.answer_closed(cid, report, "job-1", check=lambda _: fails_check())
    closing = store.load(cid).messages[-1]
    assert closing.unanswered is not None and closing.closes_job == "job-1"
    assert not store.answer_closed(cid, report, "another-job"), "not its closing turn"
    other = store.create([user("Is the question still open?")]).conversation_id
    assert store.answer_closed(other, report, "job-1"), "an open question takes it"
    assert [m.content for m in store.load(other).messages][-1] == "The report."
    third = store.create([user("Being answered?")]).conversation_id
    with store.locked(third):
        store.mark_answering(third, 60)
    assert not store.answer_closed(third, report, "job-1"), "another answer is on its way"
    assert len(store.load(third).messages) == 1


def fails_check() -> None:
    raise ValidationError("refused")


def test_a_summary_file_of_earlier_versions_is_removed_on_the_next_write(
    store: ConversationStore,
) -> None:
    conversation = store.create([user("first")])
    old = store.path(conversation.conversation_id) / "summary.json"
    old.write_text('{"of": [1, 2, 3], "summary": {}}')
    assert store.list()[0].first_query == "first"
    store.append(conversation.conversation_id, assistant("an answer"))
    assert not old.exists()


def test_list_ignores_directories_that_are_not_conversations(store: ConversationStore) -> None:
    (Path(store.location) / ".jobs").mkdir()
    (Path(store.location) / "20250124-1706102400777").mkdir()  # a conversation being created
    (Path(store.location) / "notes.txt").write_text("x")
    conversation = store.create([user("real")])
    assert [s.conversation_id for s in store.list()] == [conversation.conversation_id]
    assert store.last_skipped == []


# -- fork, delete, prune ----------------------------------------------------------------------


def test_fork_copies_the_messages_and_links_the_parent(store: ConversationStore) -> None:
    parent = store.create([user("q"), assistant("a", tool="perplexity_search")])
    child = store.fork(parent.conversation_id)
    store.append(child.conversation_id, user("branching question"))

    assert child.conversation_id != parent.conversation_id
    assert child.parent_conversation_id == parent.conversation_id
    assert child.messages == parent.messages
    assert store.load(parent.conversation_id).message_count == 2
    assert store.load(child.conversation_id).message_count == 3


def test_delete_removes_the_conversation(store: ConversationStore) -> None:
    keep = store.create([user("keep")])
    gone = store.create([user("gone")])
    store.delete(gone.conversation_id)
    assert not store.exists(gone.conversation_id)
    assert sorted(p.name for p in Path(store.location).iterdir()) == [keep.conversation_id]
    with pytest.raises(ConversationNotFound):
        store.load(gone.conversation_id)


def test_prune_deletes_only_old_idle_conversations(store: ConversationStore) -> None:
    def old(unix_ms: int, *, status: str | None = None, broken: bool = False) -> str:
        conversation_id = f"20250124-{unix_ms}"
        directory = Path(store.location) / conversation_id
        directory.mkdir()
        document = json.loads(TS_FIXTURE.read_text()) | {"conversationId": conversation_id}
        text = json.dumps(document)
        (directory / "conversation.json").write_text(text[:20] if broken else text)
        if status:
            (directory / "status.json").write_text(json.dumps({"status": status}))
        return conversation_id

    idle = old(1706102400001)
    running = old(1706102400002, status="in_progress")
    broken = old(1706102400003, broken=True)
    unreadable = old(1706102400004)
    (Path(store.location) / unreadable / "conversation.json").unlink()
    (Path(store.location) / unreadable / "conversation.json").mkdir()
    fresh = store.create([user("recent")])

    assert store.prune(timedelta(days=30)) == 1
    assert not store.exists(idle)
    assert all(store.exists(c) for c in (running, broken, fresh.conversation_id))
    assert (Path(store.location) / unreadable).is_dir()
    time.sleep(0.002)  # the fresh one must be at least a millisecond old
    assert store.prune(timedelta(0)) == 1
    assert not store.exists(fresh.conversation_id)
    with pytest.raises(ValidationError):
        store.prune(30)  # type: ignore[arg-type]


# -- concurrency ------------------------------------------------------------------------------


def test_threads_appending_at_once_lose_nothing(store: ConversationStore) -> None:
    conversation = store.create([user("shared")])

    def writer(tag: int) -> None:
        for n in range(25):
            store.append(conversation.conversation_id, user(f"t{tag}-{n}"))

    threads = [threading.Thread(target=writer, args=(tag,)) for tag in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    contents = [m.content for m in store.load(conversation.conversation_id).messages[1:]]
    assert sorted(contents) == sorted(f"t{t}-{n}" for t in range(8) for n in range(25))
    assert store.list()[0].message_count == 201


def test_a_held_lock_times_out_with_a_filesystem_error(store: ConversationStore) -> None:
    from pplx_nb._fs import locked

    conversation = store.create([user("locked")])
    directory = store.path(conversation.conversation_id)
    with locked(directory):
        started = time.monotonic()
        with pytest.raises(FilesystemError, match="Could not lock"), locked(directory, timeout=0.1):
            pass
        assert 0.1 <= time.monotonic() - started < 2
    with locked(directory, timeout=0.1):
        pass  # released when the holder leaves


def _finish(started: list[tuple[ForkServerProcess, Connection]]) -> list[str]:
    """The acknowledgements of writers started together, once each has ended well."""
    lines = []
    for process, acks in started:
        lines += writers.received(acks)
        process.join(60)
        assert process.exitcode == 0
    return lines


@pytest.mark.slow
def test_append_from_eight_processes_loses_nothing(store: ConversationStore) -> None:
    conversation = store.create([user("shared by eight processes")])
    started = [
        writers.start(
            writers.append, str(store.location), conversation.conversation_id, f"p{tag}", 100
        )
        for tag in range(8)
    ]
    acknowledged = [line for line in _finish(started) if line != "ready"]

    path = conversation_file(store, conversation.conversation_id)
    document = json.loads(path.read_bytes())
    contents = [m["content"] for m in document["messages"][1:]]
    assert len(acknowledged) == 800
    assert sorted(contents) == sorted(acknowledged)
    assert document["messageCount"] == 801
    for tag in range(8):
        mine = [c for c in contents if c.startswith(f"p{tag}-")]
        assert mine == [f"p{tag}-{n}" for n in range(100)]


def test_a_burst_of_creates_does_not_retry_the_ids_it_already_took(
    store: ConversationStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pplx_nb.store._file import FileBackend

    attempts: list[Path] = []
    claim = FileBackend._claim

    def counted(self: FileBackend, directory: Path) -> bool:
        attempts.append(directory)
        return claim(self, directory)

    monkeypatch.setattr(FileBackend, "_claim", counted)
    # A tight loop creates several conversations per millisecond, so ids run ahead of the clock.
    ids = [store.create([{"role": "user", "content": f"q{i}"}]).conversation_id for i in range(300)]
    assert len(set(ids)) == 300 and ids == sorted(ids)
    assert len(attempts) == 300  # each id found at the first try, not after walking the burst


@pytest.mark.slow
def test_create_from_eight_processes_gives_distinct_ids(store: ConversationStore) -> None:
    ids = _finish([writers.start(writers.create, str(store.location), 200) for _ in range(8)])
    assert len(ids) == 1600
    assert len(set(ids)) == 1600
    assert sorted(store.ids()) == sorted(ids)
    assert all(store.load(i).message_count == 1 for i in ids[::50])


@pytest.mark.slow
def test_writer_killed_mid_write_never_corrupts_or_loses_acknowledged_appends(
    store: ConversationStore,
) -> None:
    padding = "a long answer that makes every rewrite take a while " * 40
    conversation = store.create([assistant(padding) for _ in range(200)])
    conversation_id = conversation.conversation_id
    acknowledged: list[str] = []
    rng = random.Random(1234)
    for round_ in range(50):
        process, acks = writers.start(
            writers.append, str(store.location), conversation_id, f"r{round_}", 1_000_000
        )
        assert acks.poll(60) and acks.recv_bytes() == b"ready"
        # Killed at a random point of the appends after its first: a forked writer's first
        # append is slower than an interpreter's (its pages are copied as it touches them).
        assert acks.poll(60)
        acknowledged.append(acks.recv_bytes().decode())
        time.sleep(rng.uniform(0.0, 0.04))
        process.kill()
        process.join(60)
        assert process.exitcode == -signal.SIGKILL
        acknowledged += writers.received(acks, timeout=60)

        document = json.loads(conversation_file(store, conversation_id).read_bytes())
        contents = {m["content"] for m in document["messages"]}
        assert document["messageCount"] == len(document["messages"])
        missing = [a for a in acknowledged if a not in contents]
        assert missing == [], f"round {round_} lost acknowledged appends"

    loaded = store.append(conversation_id, user("after the last kill"))
    assert loaded.message_count >= 200 + len(acknowledged) + 1
    assert store.list()[0].message_count == loaded.message_count
    assert len(acknowledged) > 50
    left = sorted(p.name for p in store.path(conversation_id).iterdir())
    assert left == [".lock", "conversation.json"]  # dead writers' temp files swept


def test_deleted_directory_during_listing_is_not_an_error(store: ConversationStore) -> None:
    conversations = [store.create([user(f"q{n}")]) for n in range(3)]
    shutil.rmtree(store.path(conversations[1].conversation_id))
    assert len(store.list()) == 2
    assert store.last_skipped == []


def test_append_to_a_conversation_with_a_damaged_header_writes_nothing(
    store: ConversationStore,
) -> None:
    cid = store.create([user("fine")]).conversation_id
    path = conversation_file(store, cid)
    for damaged in (
        path.read_bytes().replace(b'"createdAt": "', b'"createdAt": 5, "was": "', 1),
        json.dumps({"conversationId": cid, "createdAt": 5, "messages": []}, indent=2).encode(),
    ):
        path.write_bytes(damaged)
        for _ in range(2):
            with pytest.raises(ConversationCorrupted, match="createdAt"):
                store.append(cid, user("retried"))
        assert path.read_bytes() == damaged


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ((b'"role": "user"', b'"role": "robot"'), "message 0"),
        ((b'"content": "answer"', b'"content": "answer", "sources": 5'), "sources"),
    ],
)
@pytest.mark.parametrize("writer", ["the same store", "another process"])
def test_append_to_a_conversation_whose_history_does_not_validate_writes_nothing(
    store: ConversationStore, damage: tuple[bytes, bytes], says: str, writer: str
) -> None:
    cid = store.create([user("question"), assistant("answer")]).conversation_id
    store.append(cid, user("follow-up"))  # its history is known to validate
    path = conversation_file(store, cid)
    damaged = path.read_bytes().replace(*damage, 1)
    path.write_bytes(damaged)
    appender = store if writer == "the same store" else open_store(root=Path(store.location))
    for _ in range(2):
        with pytest.raises(ConversationCorrupted, match=says):
            appender.append(cid, user("retried"))
    assert path.read_bytes() == damaged


def test_a_message_line_holding_more_than_one_message_is_corrupted(
    store: ConversationStore,
) -> None:
    cid = store.create([user("question"), assistant("answer")]).conversation_id
    path = conversation_file(store, cid)
    head, first, last, tail = path.read_bytes().split(b"\n", 3)
    for spliced in (b'], "x": [1', b', {"role": "user", "content": "two"}'):
        damaged = b"\n".join((head, first, last + spliced, tail))
        path.write_bytes(damaged)
        for read in (store.load, store.read_raw, lambda c: store.append(c, user("hidden"))):
            with pytest.raises(ConversationCorrupted, match="one message each"):
                read(cid)
        assert path.read_bytes() == damaged


def _outcome(data: bytes) -> object:
    from pplx_nb.store._document import parse

    try:
        return json.dumps(parse(data, "20250124-1706102400123", "the document"))  # key order too
    except ConversationCorrupted as exc:
        return str(exc)


def test_a_document_decoded_once_reads_as_one_decoded_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A canonical document's header line and messages are decoded once each, not the whole
    document and then its header again: whatever the bytes, the same document or error."""
    from pplx_nb.store import _document

    cid = "20250124-1706102400123"
    answer = {
        "role": "assistant",
        "content": "a [1] \U0001f600",
        "sources": [{"url": "https://a.b/"}],
    }
    messages = [user('q \u00e9 \\ "x"'), answer]
    good = _document.new_document(cid, "2025-01-24T15:00:00Z", messages, {})
    head, rest = good.split(b"\n", 1)
    cases = [good[:cut] for cut in range(len(good))]
    for snippet in (b"]", b",", b"}", b"{", b'"', b"\n", b" ", b"\\", b'], "x": [1', b"\xff"):
        cases += [good[:at] + snippet + good[at:] for at in range(len(good))]
    cases += [
        good.replace(b'"messageCount": 2', b'"messageCount": 3'),
        good.replace(b"{", b"{, ", 1),
        b'{, "messages": [\n' + rest,
        good.replace(b"{", b'{"messages": 1, ', 1),
        good.replace(b"{", b'{"messag\\u0065s": 1, ', 1),
        good.replace(head, head.replace(b", ", b" , ")),
        b'{"messages": [' + b"\n" + rest,
        b'{"messages": [\n]}\n',
        b'{"a": {"b": 1, "messages": [\n1]}, "messages": [2\n]}\n',
        good.decode().encode("utf-16"),
        good.replace(b"q ", b"\\ud800 "),
        b"{" + b"[" * 100_000 + b', "messages": [\n]}\n',
    ]
    once = [_outcome(case) for case in cases]
    monkeypatch.setattr(_document, "_decoded_once", lambda data: None)
    assert once == [_outcome(case) for case in cases]
    assert sum(o.startswith("{") for o in once) > len(good)  # many damaged ones still parse


def test_a_bulk_read_gives_each_damaged_conversation_the_error_of_reading_it_alone(
    store: ConversationStore,
) -> None:
    damages = [
        (b"\n]}\n", b"\n]"),
        (b'"role": "user"', b'"role": "robot"'),
        (b'"answer"}', b'"answer"}, {"role": "user", "content": "two"}'),
        (b'"answer"}', b'"answer"}], "x": [1'),
        (b'"conversationId": "', b'"conversationId": "20240101-1704067200000", "was": "'),
    ]
    ids = []
    for damage in damages:
        cid = store.create([user("question"), assistant("answer")]).conversation_id
        path = conversation_file(store, cid)
        path.write_bytes(path.read_bytes().replace(*damage, 1))
        ids.append(cid)
    fine = store.create([user("question"), assistant("answer")]).conversation_id
    read = dict(store.documents())
    assert read[fine] == store.read_raw(fine)
    for cid in ids:
        with pytest.raises(ConversationCorrupted) as caught:
            store.read_raw(cid)
        assert str(read[cid]) == str(caught.value)
        assert str(conversation_file(store, cid)) in str(read[cid])


def test_messages_that_do_not_validate_on_first_use_are_corrupted() -> None:
    from pplx_nb.store._lazy import LazyConversation

    cid = "20250124-1706102400123"
    stamp = "2025-01-24T15:00:00Z"
    fields = {"conversationId": cid, "createdAt": stamp, "updatedAt": stamp, "messageCount": 1}
    document = json.dumps({**fields, "messages": [{"role": "robot", "content": "x"}]}).encode()
    lazy = LazyConversation.from_header(fields, document, None, "the document")
    with pytest.raises(ConversationCorrupted, match=r"the document: messages\.0\.role"):
        _ = lazy.messages


def test_a_write_that_fails_on_a_full_disk_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from pplx_nb import _fs

    store = open_store(root=tmp_path / "conversation-logs", durable=True)
    cid = store.create([user("written before the disk filled up")]).conversation_id
    directory = store.path(cid)

    def files() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in directory.iterdir() if p.name != ".lock"}

    before = files()

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_fs.os, "fsync", disk_full)
    with pytest.raises(FilesystemError) as caught:
        store.append(cid, user("lost to ENOSPC"))
    monkeypatch.undo()
    assert caught.value.code == "FILESYSTEM_ERROR"
    assert caught.value.details["path"] == str(directory / "conversation.json")
    assert caught.value.details["reason"] == os.strerror(errno.ENOSPC)
    assert "disk is not full" in str(caught.value)
    assert files() == before
    assert [m.content for m in store.load(cid).messages] == ["written before the disk filled up"]


def test_numbers_that_are_not_json_are_refused_and_nothing_is_stored(
    store: ConversationStore,
) -> None:
    with pytest.raises(ValidationError, match="finite numbers") as caught:
        store.create([user("scored")], score=float("nan"))
    assert caught.value.code == "VALIDATION_ERROR"
    assert store.ids() == []
    cid = store.create([user("fine")]).conversation_id
    store.append(cid, {"role": "assistant", "content": "x", "score": float("inf")})

    def strict(constant: str) -> None:
        raise AssertionError(f"bare {constant} in conversation.json")

    json.loads(conversation_file(store, cid).read_bytes(), parse_constant=strict)
    assert os.listdir(Path(store.location)) == [cid]


# -- the seams between the store and the job side ------------------------------------------------


class _JobStates:
    """A job side kept in memory: what ConversationStore asks, and what it was asked."""

    def __init__(self, states: dict[str, JobState]) -> None:
        self.states = states
        self.forgotten: list[tuple[str, bool]] = []
        self.root: Path | None = None

    def job_state(self, conversation_id: str) -> JobState | None:
        return self.states.get(conversation_id)

    def job_states(self, conversation_ids: Sequence[str]) -> list[JobState | None]:
        return [self.states.get(conversation_id) for conversation_id in conversation_ids]

    def forget(self, conversation_id: str) -> None:
        assert self.root is not None
        # Called under the conversation's lock, before the folder goes.
        self.forgotten.append((conversation_id, (self.root / conversation_id).is_dir()))


def test_the_store_asks_its_job_side_for_job_states_and_never_reads_them(
    logs_dir: Path,
) -> None:
    jobs = _JobStates({})
    store = ConversationStore(FileBackend(logs_dir), jobs=jobs)
    jobs.root = logs_dir
    running, idle = (store.create([user(q)]).conversation_id for q in ("deep", "plain"))
    jobs.states[running] = "in_progress"
    # A status.json the job side does not report is not the store's business.
    (store.path(idle) / "status.json").write_text(json.dumps({"status": "pending"}))
    assert {s.conversation_id: s.job_status for s in store.list()} == {
        running: "in_progress",
        idle: None,
    }
    assert store.job_state(running) == "in_progress" and store.job_state(idle) is None
    store.delete(idle)
    assert jobs.forgotten == [(idle, True)]


def test_the_job_side_asks_the_store_for_a_jobs_answer(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    queue = open_backends(root=logs_dir).job_queue(store)
    cid = store.create([user("Describe the json module")]).conversation_id
    queue.enqueue(cid, "perplexity_deep_research", {})
    job = queue.claim("w")
    assert job is not None
    answer = assistant("the report", usage=Usage(total_tokens=42), jobId=job.job_id)
    store.append(cid, answer, check=JobContext(queue, job).check_owner)
    stored = store.job_answer(cid, job.job_id)
    assert stored is not None and stored.content == "the report"
    assert store.job_answer(cid, "another-job") is None
    status = queue.complete(job)
    assert status.result == {"tokens": 42}
