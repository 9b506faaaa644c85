"""ConversationStore on Redis (PPLX_NB_STORE): the store's contract, keys, corruption, concurrency.

The tests imported from ``test_store`` are the backend-independent part of the store's contract;
collected here, they run against this module's ``store`` fixture: a store on a real
``redis-server`` (a fresh database per test).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from test_store import (  # noqa: F401 - collected again here, on Redis
    test_a_late_report_is_put_back_when_its_step_fails_and_refused_when_misplaced,
    test_a_late_report_takes_the_place_of_its_cancelled_jobs_closing_turn,
    test_appended_conversation_behaves_like_a_loaded_one,
    test_create_assigns_a_dated_millisecond_id_and_stores_the_messages,
    test_empty_conversation_accepts_appends,
    test_fork_copies_the_messages_and_links_the_parent,
    test_invalid_messages_are_refused_and_nothing_is_stored,
    test_list_is_newest_first_and_filters,
    test_malformed_ids_are_refused_before_any_file_access,
    test_the_header_summary_stays_out_of_loaded_conversations,
    test_threads_appending_at_once_lose_nothing,
    test_unknown_conversation_says_how_to_start_one,
)

from pplx_nb import (
    ConversationCorrupted,
    ConversationNotFound,
    ConversationStore,
    FilesystemError,
    Message,
    Settings,
)
from pplx_nb._redis import RedisLock
from pplx_nb.backends import open_store
from pplx_nb.export import to_dataframe
from pplx_nb.store.__main__ import main as store_main
from pplx_nb.store._redis import RedisBackend

PARTS = ("meta", "messages")


def user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


@pytest.fixture
def store(redis_url: str, logs_dir: Path) -> ConversationStore:
    """A store on Redis; ``logs_dir`` is what CONVERSATION_LOGS_DIR would be (left empty)."""
    return open_store(Settings(store_url=redis_url, conversation_logs_dir=logs_dir))


@pytest.fixture
def db(redis_url: str) -> redis.Redis:
    """A plain client of the test's database, to look at (or damage) what the store wrote."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def sizes(redis_url: str) -> list[int]:
    """How many keys each of the server's databases holds."""
    base = redis_url.rsplit("/", 1)[0]
    info = redis.Redis.from_url(f"{base}/0").info("keyspace")
    return [int(info.get(f"db{n}", {}).get("keys", 0)) for n in range(64)]


def test_with_store_url_set_the_store_is_on_redis_and_the_folder_stays_empty(
    store: ConversationStore, redis_url: str, logs_dir: Path
) -> None:
    assert isinstance(store.backend, RedisBackend)
    assert store.location == redis_url
    assert repr(store) == f"ConversationStore(location={redis_url!r})"
    cid = store.create([user("What is the GIL?")]).conversation_id
    store.append(cid, Message(role="assistant", content="A lock."))
    store.list()
    store.delete(store.fork(cid).conversation_id)
    assert list(logs_dir.iterdir()) == []
    explicit = open_store(Settings(store_url=redis_url), root=logs_dir)
    assert explicit.location == str(logs_dir)  # an explicit folder wins over the setting


def test_each_conversations_keys_contain_its_id_and_no_other_database_is_written(
    store: ConversationStore, redis_url: str, db: redis.Redis
) -> None:
    before = sizes(redis_url)
    first = store.create([user("first")]).conversation_id
    second = store.create([user("second")]).conversation_id
    store.append(first, Message(role="assistant", content="an answer"))
    keys = sorted(key.decode() for key in db.keys("*"))
    assert keys == sorted(
        ["pplx_nb:conversations"]
        + [f"pplx_nb:conv:{cid}:{part}" for cid in (first, second) for part in PARTS]
    )
    assert store.conversation_location(first) == f"{redis_url} pplx_nb:conv:{first}"
    number = int(redis_url.rsplit("/", 1)[1])
    after = sizes(redis_url)
    assert [n for n in range(64) if after[n] != before[n]] == [number]
    store.delete(first)
    assert sorted(key.decode() for key in db.keys("*")) == sorted(
        ["pplx_nb:conversations"] + [f"pplx_nb:conv:{second}:{part}" for part in PARTS]
    )


def test_read_gives_the_same_document_bytes_as_the_file_store(
    store: ConversationStore, logs_dir: Path
) -> None:
    files = open_store(root=logs_dir / "files")
    messages = [user("q ünïcode"), {"role": "assistant", "content": "a", "tool": "t", "score": 0.5}]
    on_redis = store.create(messages[:1], parent_conversation_id="20250124-1706102400123")
    on_disk = files.create(messages[:1], parent_conversation_id="20250124-1706102400123")
    store.append(on_redis.conversation_id, messages[1])
    files.append(on_disk.conversation_id, messages[1])
    redis_doc = store.read_raw(on_redis.conversation_id)
    file_doc = files.read_raw(on_disk.conversation_id)
    for volatile in ("conversationId", "createdAt", "updatedAt"):
        redis_doc.pop(volatile)
        file_doc.pop(volatile)
    assert redis_doc == file_doc
    assert store.list()[0].model_dump(
        exclude={"conversation_id", "created_at", "updated_at", "path"}
    ) == (
        files.list()[0].model_dump(exclude={"conversation_id", "created_at", "updated_at", "path"})
    )


def test_an_append_whose_follow_up_action_fails_is_undone(
    store: ConversationStore, db: redis.Redis
) -> None:
    cid = store.create([user("first")]).conversation_id
    before = store.read_raw(cid)

    def enqueue_fails() -> None:
        raise FilesystemError("The job could not be queued.")

    with pytest.raises(FilesystemError):
        store.append(cid, user("a question for a job"), then=enqueue_fails)
    assert store.read_raw(cid) == before
    assert store.list()[0].message_count == 1
    assert store.append(cid, user("again")).message_count == 2
    assert db.llen(f"pplx_nb:conv:{cid}:messages") == 2


@pytest.mark.parametrize(
    "damage",
    ["message-not-json", "meta-field-missing", "meta-value-not-json", "message-not-a-message"],
)
def test_a_corrupted_value_is_corrupted_for_that_conversation_only(
    store: ConversationStore,
    db: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    damage: str,
) -> None:
    healthy = store.create([user("healthy")]).conversation_id
    broken = store.create([user("broken")]).conversation_id
    if damage == "message-not-json":
        db.rpush(f"pplx_nb:conv:{broken}:messages", b'{"role": "assistant", "content": ')
    elif damage == "meta-field-missing":
        db.hdel(f"pplx_nb:conv:{broken}:meta", "createdAt")
    elif damage == "meta-value-not-json":
        db.hset(f"pplx_nb:conv:{broken}:meta", "updatedAt", b"yesterday")
    else:
        db.rpush(f"pplx_nb:conv:{broken}:messages", b'{"role": "robot"}')
    with pytest.raises(ConversationCorrupted) as caught:
        store.load(broken)
    assert caught.value.code == "CONVERSATION_CORRUPTED"
    assert broken in str(caught.value)
    with pytest.raises(ConversationCorrupted):
        store.read_raw(broken)
    with caplog.at_level(logging.WARNING, logger="pplx_nb.store"):
        listed = store.list(text="e")  # reads every conversation whole
    assert [s.conversation_id for s in listed] == [healthy]
    assert [getattr(e, "details", {}).get("conversation_id") for e in store.last_skipped] == [
        broken
    ]
    assert store.load(healthy).messages[0].content == "healthy"
    store.append(healthy, user("still writable"))


@pytest.mark.parametrize("part", PARTS)
def test_a_key_of_another_type_is_corrupted_for_that_conversation_only(
    store: ConversationStore,
    db: redis.Redis,
    redis_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    part: str,
) -> None:
    healthy = store.create([user("healthy")]).conversation_id
    broken = store.create([user("broken")]).conversation_id
    key = f"pplx_nb:conv:{broken}:{part}"
    db.delete(key)
    if part == "meta":
        db.set(key, "a string")
    else:
        db.sadd(key, "a set")
    with pytest.raises(ConversationCorrupted, match=key):
        store.load(broken)
    with pytest.raises(ConversationCorrupted):
        store.append(broken, user("refused"))
    with caplog.at_level(logging.WARNING, logger="pplx_nb.store"):
        listed = store.list(text="e")
    assert [s.conversation_id for s in listed] == [healthy]
    assert [e.details["conversation_id"] for e in store.last_skipped] == [broken]
    assert healthy in [s.conversation_id for s in store.list()]
    assert [type(d).__name__ for _, d in store.documents()] == ["ConversationCorrupted", "dict"]
    assert to_dataframe(store)["conversation_id"].tolist() == [healthy]
    assert store_main(["migrate", redis_url, str(tmp_path / "copy")]) == 1
    assert open_store(root=tmp_path / "copy").ids() == [healthy]
    store.delete(broken)
    assert db.keys(f"*{broken}*") == []


def test_a_mark_of_another_type_guards_nothing_and_a_new_one_replaces_it(
    store: ConversationStore, db: redis.Redis
) -> None:
    cid = store.create([user("marked by something else")]).conversation_id
    db.hset(f"pplx_nb:conv:{cid}:answering", "not", "a mark")
    assert store.answering(cid) is None
    with store.locked(cid):
        store.mark_answering(cid, 60)
    assert store.answering(cid) is not None


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("robot", "message 0"),
        ("spliced", "one message each"),
        ("two-lines", "spans several lines"),
        ("list-gone", "messageCount 2, its messages list holds 0"),
    ],
)
def test_damaged_messages_are_corrupted_and_an_append_writes_nothing(
    store: ConversationStore, db: redis.Redis, damage: str, says: str
) -> None:
    cid = store.create([user("question"), user("second")]).conversation_id
    store.append(cid, Message(role="assistant", content="an answer"))
    key = f"pplx_nb:conv:{cid}:messages"
    if damage == "robot":
        db.lset(key, 0, b'{"role": "robot", "content": "q"}')
    elif damage == "spliced":
        db.lset(key, 2, b'{"role": "assistant", "content": "a"}], "x": [1')
    elif damage == "two-lines":
        db.lset(key, 0, b'{"role": "user",\n"content": "q"}')
    else:
        db.delete(key)
        db.hset(f"pplx_nb:conv:{cid}:meta", "messageCount", b"2")
    before = _keys_of(db, cid)
    for read in (store.load, store.read_raw, lambda c: store.append(c, user("hidden"))):
        with pytest.raises(ConversationCorrupted, match=says):
            read(cid)
    assert _keys_of(db, cid) == before


def _keys_of(db: redis.Redis, cid: str) -> dict[bytes, Any]:
    return {key: db.dump(key) for key in db.keys(f"*{cid}*")}


def test_a_listing_skips_index_entries_that_are_not_conversations(
    store: ConversationStore, db: redis.Redis
) -> None:
    cid = store.create([user("real")]).conversation_id
    db.zadd("pplx_nb:conversations", {"../etc/passwd": 1, "20250124-1706102400123": 2})
    assert store.ids() == [cid, "20250124-1706102400123"]
    assert [s.conversation_id for s in store.list()] == [cid]
    assert store.last_skipped == []


def test_the_lock_is_the_shared_key_and_delete_waits_for_it(
    store: ConversationStore, redis_url: str
) -> None:
    cid = store.create([user("locked")]).conversation_id
    backend = RedisBackend(redis_url, lock_timeout=0.2)
    with RedisLock(redis_url, f"pplx_nb:conv:{cid}:lock"):
        started = time.monotonic()
        with pytest.raises(FilesystemError, match=f"pplx_nb:conv:{cid}:lock"):
            backend.append(cid, [user("blocked")])
        assert time.monotonic() - started < 5
    with store.locked(cid):
        store.mark_answering(cid, 60)
    assert store.answering(cid) is not None
    with pytest.raises(ConversationNotFound), store.locked("20250124-1706102400123"):
        pass
    store.delete(cid)
    assert not store.exists(cid)


def test_the_answering_mark_ends_with_its_token_or_its_deadline(
    store: ConversationStore, db: redis.Redis
) -> None:
    cid = store.create([user("being answered")]).conversation_id
    with store.locked(cid):
        token = store.mark_answering(cid, 0.5)
    marker = store.answering(cid)
    assert marker is not None and marker.started_at
    with store.locked(cid):
        store.clear_answering(cid, "someone-else")
    assert store.answering(cid) is not None
    with store.locked(cid):
        store.renew_answering(cid, token, 60)
    assert 0.5 < db.pttl(f"pplx_nb:conv:{cid}:answering") / 1000 <= 60
    with store.locked(cid):
        store.clear_answering(cid, token)
    assert store.answering(cid) is None
    with store.locked(cid):
        store.mark_answering(cid, 0.2)
    deadline = time.monotonic() + 10
    while store.answering(cid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.answering(cid) is None
    assert db.exists(f"pplx_nb:conv:{cid}:answering") == 0


def test_a_mark_left_by_a_process_that_is_gone_is_not_live(
    store: ConversationStore, redis_url: str
) -> None:
    cid = store.create([user("asked by a kernel that died")]).conversation_id
    script = (
        "import sys\nfrom pplx_nb import Settings\nfrom pplx_nb.backends import open_store\n"
        "store = open_store(Settings(store_url=sys.argv[1]))\n"
        "with store.locked(sys.argv[2]):\n    store.mark_answering(sys.argv[2], 600)\n"
    )
    subprocess.run([sys.executable, "-c", script, redis_url, cid], check=True, timeout=60)
    assert store.answering(cid) is None


APPENDER = """
import sys
from pplx_nb import Settings
from pplx_nb.backends import open_store
store = open_store(Settings(store_url=sys.argv[1]))
conversation_id, tag, count = sys.argv[2], sys.argv[3], int(sys.argv[4])
for n in range(count):
    store.append(conversation_id, {"role": "user", "content": f"{tag}-{n}"})
    print(f"{tag}-{n}", flush=True)
for _ in range(count):
    print(store.create([{"role": "user", "content": tag}]).conversation_id, flush=True)
"""


@pytest.mark.slow
def test_processes_appending_and_creating_at_once_lose_nothing(
    store: ConversationStore, redis_url: str
) -> None:
    cid = store.create([user("shared by six processes")]).conversation_id
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, redis_url, cid, f"p{tag}", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in range(6)
    ]
    lines: list[str] = []
    for process in processes:
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, err
        lines += out.split()
    acknowledged = [line for line in lines if line.startswith("p")]
    created = [line for line in lines if not line.startswith("p")]
    document = store.read_raw(cid)
    contents = [m["content"] for m in document["messages"][1:]]
    assert sorted(contents) == sorted(acknowledged) and len(acknowledged) == 360
    assert document["messageCount"] == 361 == store.list(limit=len(created) + 1)[-1].message_count
    for tag in range(6):
        assert [c for c in contents if c.startswith(f"p{tag}-")] == [
            f"p{tag}-{n}" for n in range(60)
        ]
    assert len(set(created)) == len(created) == 360
    assert sorted(store.ids()) == sorted([cid, *created])


def test_a_burst_of_creates_takes_consecutive_ids(store: ConversationStore) -> None:
    ids = [store.create([user(f"q{i}")]).conversation_id for i in range(200)]
    assert len(set(ids)) == 200 and ids == sorted(ids)
    assert store.ids() == ids[::-1]


def test_the_stored_values_are_what_other_tools_can_read(
    store: ConversationStore, db: redis.Redis
) -> None:
    cid = store.create([user("plain JSON")]).conversation_id
    store.append(cid, Message(role="assistant", content="yes", model="sonar"))
    meta = {k.decode(): json.loads(v) for k, v in db.hgetall(f"pplx_nb:conv:{cid}:meta").items()}
    assert meta["conversationId"] == cid and meta["messageCount"] == 2
    messages = [json.loads(m) for m in db.lrange(f"pplx_nb:conv:{cid}:messages", 0, -1)]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert db.zscore("pplx_nb:conversations", cid) == int(cid[9:])


def test_the_url_credentials_never_show_in_locations_reprs_or_errors(logs_dir: Path) -> None:
    url = "redis://team:hunter2secret@127.0.0.1:1/2"
    store = open_store(Settings(store_url=url, conversation_logs_dir=logs_dir))
    cid = "20250124-1706102400123"
    shown = [repr(store), store.location, store.conversation_location(cid), repr(store._backend)]
    with pytest.raises(FilesystemError) as caught:
        store.load(cid)
    shown += [str(caught.value), repr(caught.value), repr(caught.value.details)]
    assert all("hunter2secret" not in text for text in shown)
    assert store.conversation_location(cid) == f"redis://***@127.0.0.1:1/2 pplx_nb:conv:{cid}"
