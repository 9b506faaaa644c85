"""Teams and several machines: processes that share one Redis store and nothing on disk.

Each process below gets its own CONVERSATION_LOGS_DIR, as kernels, MCP servers and scripts on
different machines would; the only thing they share is ``PPLX_NB_STORE``. Answers come from the
in-process simulator, which counts what would be billed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import TEST_KEY
from support.mcp import ROOT, server_env
from test_mcp import McpClient

from pplx_nb import ConversationStore, PplxError, Researcher, Settings
from pplx_nb.backends import open_store
from pplx_nb.export import to_dataframe, to_markdown
from pplx_nb.sim import stats
from pplx_nb.store.__main__ import main as store_main

DATA = Path(__file__).parent / "data"
TS_ID = "20250124-1737724800123"
QUESTION = "How do I cancel an asyncio task?"
FOLLOW_UP = "What does pathlib.Path.glob return?"


def team_env(redis_url: str, sim_url: str, logs_dir: Path) -> dict[str, str]:
    """The environment of one team member's process: the shared store and API, its own folder."""
    return {
        **os.environ,
        "PPLX_NB_STORE": redis_url,
        "PERPLEXITY_BASE_URL": sim_url,
        "PERPLEXITY_API_KEY": TEST_KEY,
        "PPLX_NB_OFFLINE": "0",
        "CONVERSATION_LOGS_DIR": str(logs_dir),
        "PYTHONPATH": str(ROOT),
    }


def run(script: str, env: dict[str, str], *args: str) -> str:
    """Run ``script`` in a fresh interpreter; its stdout, stripped."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def nothing_under(*folders: Path) -> bool:
    """Whether none of ``folders`` holds anything (a missing folder holds nothing)."""
    return all(not folder.exists() or not any(folder.iterdir()) for folder in folders)


def team_settings(redis_url: str, sim_url: str, logs_dir: Path) -> Settings:
    """What :func:`team_env` says, as Settings for a Researcher in this process."""
    return Settings(
        api_key=TEST_KEY,
        base_url=sim_url,
        offline=False,
        conversation_logs_dir=logs_dir,
        store_url=redis_url,
        timeout_ms=10_000,
    )


@pytest.fixture
def researcher(redis_url: str, sim_url: str, logs_dir: Path) -> Iterator[Researcher]:
    found = Researcher(team_settings(redis_url, sim_url, logs_dir))
    yield found
    found.close()


def test_a_search_in_one_process_a_follow_up_in_another_and_an_mcp_server_see_both_turns(
    redis_url: str, sim_url: str, tmp_path: Path
) -> None:
    folders = [tmp_path / name / "conversation-logs" for name in ("kernel", "laptop", "claude")]
    searched = run(
        "import sys\nfrom pplx_nb import Researcher\n"
        "print(Researcher().search(sys.argv[1]).conversation_id)",
        team_env(redis_url, sim_url, folders[0]),
        QUESTION,
    )
    answer = run(
        "import sys\nfrom pplx_nb import Researcher\n"
        "print(Researcher().followup(sys.argv[1], sys.argv[2]).text[:40])",
        team_env(redis_url, sim_url, folders[1]),
        searched,
        FOLLOW_UP,
    )
    assert answer
    env = server_env(folders[2], PPLX_NB_STORE=redis_url)
    with McpClient(env, tmp_path / "mcp.log") as mcp:
        history = mcp.call("get_conversation_history", {"conversationId": searched})
        listed = mcp.call("list_conversations", {})
    assert not history.is_error, history.content
    turns = [
        (m["role"], m["content"])
        for m in (history.structured_content or {})["messages"]
        if m["role"] != "system"
    ]
    assert [role for role, _ in turns] == ["user", "assistant", "user", "assistant"]
    assert turns[0][1] == QUESTION and turns[2][1] == FOLLOW_UP
    assert turns[3][1].startswith(answer)
    assert searched in json.dumps(listed.structured_content)
    assert stats(sim_url)["generations"] == 2  # one search, one follow-up: nothing twice
    assert nothing_under(*folders)


def test_history_export_and_list_work_on_redis_and_nothing_is_written_to_the_folder(
    researcher: Researcher, logs_dir: Path, redis_url: str
) -> None:
    store = researcher.store
    assert store.location == redis_url
    first = researcher.search(QUESTION)
    assert first.conversation_path == f"{redis_url} pplx_nb:conv:{first.conversation_id}"
    cid = first.conversation_id or ""
    researcher.followup(cid, FOLLOW_UP)
    second = researcher.search("What is a dataclass?")
    history = researcher.history(cid)
    assert [m.role for m in history.messages][-4:] == ["user", "assistant"] * 2
    listed = researcher.conversations()
    assert [s.conversation_id for s in listed] == [second.conversation_id, cid]
    assert listed[1].message_count == len(researcher.history(cid, include_system=True).messages)
    frame = to_dataframe(store)
    assert set(frame["conversation_id"]) == {cid, second.conversation_id}
    assert len(frame) == sum(s.message_count for s in listed)
    assert len(to_dataframe([history], level="conversations")) == 1
    assert QUESTION in to_markdown(history)
    store.delete(second.conversation_id or "")
    assert [s.conversation_id for s in researcher.conversations()] == [cid]
    assert nothing_under(logs_dir)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_store_is_a_clear_error_within_seconds_and_nothing_is_paid(
    sim_url: str, logs_dir: Path
) -> None:
    port = _closed_port()
    url = f"redis://team:hunter2secret@127.0.0.1:{port}/3"
    researcher = Researcher(team_settings(url, sim_url, logs_dir))
    try:
        for action in (
            researcher.conversations,
            lambda: researcher.search(QUESTION),
            lambda: researcher.followup("20250124-1706102400123", FOLLOW_UP),
            lambda: researcher.history("20250124-1706102400123"),
        ):
            started = time.monotonic()
            with pytest.raises(PplxError) as caught:
                action()
            assert time.monotonic() - started < 10
            message = str(caught.value)
            assert f"127.0.0.1:{port}/3" in message and "hunter2secret" not in message
            assert caught.value.code == "FILESYSTEM_ERROR"
    finally:
        researcher.close()
    billed = stats(sim_url)
    assert billed["generations"] == 0 and not any(
        count for route, count in billed["requests"].items() if not route.startswith("GET")
    )
    assert nothing_under(logs_dir)


# -- migrate ----------------------------------------------------------------------------------


def _fill(store: ConversationStore, count: int) -> None:
    """``count`` conversations of every shape the store keeps: metadata, branches, long ones."""
    parent = None
    for n in range(count):
        messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
        messages += [{"role": "user", "content": f"question {n} ünïcode"}]
        meta = {"parent_conversation_id": parent} if n % 7 == 3 and parent else {}
        conversation = store.create(messages, **meta)
        for turn in range(n % 4):
            store.append(
                conversation.conversation_id,
                {
                    "role": "assistant",
                    "content": f"answer {turn}",
                    "tool": "perplexity_search",
                    "model": "sonar-pro",
                    "sources": [{"url": f"https://docs.python.org/3/{n}", "title": "t"}],
                    "usage": {"promptTokens": 3, "completionTokens": n, "totalTokens": n + 3},
                },
                {"role": "user", "content": f"more {turn}"},
            )
        parent = conversation.conversation_id


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _keys(redis_url: str) -> dict[bytes, Any]:
    client = redis.Redis.from_url(redis_url)
    try:
        return {key: client.dump(key) for key in client.keys("*")}
    finally:
        client.close()


def test_migrate_round_trips_fifty_conversations_and_a_second_run_adds_nothing(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = open_store(root=tmp_path / "before")
    _fill(source, 49)
    # One written by the TypeScript server: indented, no metadata, its own key order.
    (Path(source.location) / TS_ID).mkdir()
    shutil.copy(
        DATA / "ts_server_conversation.json", Path(source.location) / TS_ID / "conversation.json"
    )
    status = {"conversationId": source.ids()[0], "status": "completed", "attempts": 1}
    (source.path(source.ids()[0]) / "status.json").write_text(json.dumps(status))
    before = _tree(Path(source.location))

    assert store_main(["migrate", str(Path(source.location)), redis_url]) == 0
    assert capsys.readouterr().out.strip() == (
        "migrated 50, skipped 0, conflicts 0, job statuses 1"
    )
    on_redis = _keys(redis_url)
    assert store_main(["migrate", str(Path(source.location)), redis_url]) == 0
    assert capsys.readouterr().out.strip() == (
        "migrated 0, skipped 50, conflicts 0, job statuses 0"
    )
    assert _keys(redis_url) == on_redis  # no key added, none changed
    assert _tree(Path(source.location)) == before

    after = tmp_path / "after"
    command = [sys.executable, "-m", "pplx_nb.store", "migrate", redis_url, str(after)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "migrated 50, skipped 0, conflicts 0, job statuses 1"
    assert "50/50 conversations" in done.stderr
    copy = open_store(root=after)
    assert copy.ids() == source.ids()
    for conversation_id in source.ids():
        assert copy.read_raw(conversation_id) == source.read_raw(conversation_id)
        assert copy.load(conversation_id).messages == source.load(conversation_id).messages
    assert json.loads((copy.path(source.ids()[0]) / "status.json").read_text()) == status
    assert [s.model_dump(exclude={"path"}) for s in copy.list()] == [
        s.model_dump(exclude={"path"}) for s in source.list()
    ]
    written = _tree(after)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.strip() == "migrated 0, skipped 50, conflicts 0, job statuses 0"
    assert _tree(after) == written


def test_migrate_reports_a_conflict_and_never_overwrites_it(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = open_store(root=tmp_path / "source")
    _fill(source, 3)
    target = tmp_path / "target"
    assert store_main(["migrate", str(Path(source.location)), str(target)]) == 0
    taken = source.ids()[1]
    open_store(root=target).append(taken, {"role": "assistant", "content": "only here"})
    kept = (target / taken / "conversation.json").read_bytes()
    capsys.readouterr()
    assert store_main(["migrate", str(Path(source.location)), str(target)]) == 1
    captured = capsys.readouterr()
    assert captured.out.strip() == "migrated 0, skipped 2, conflicts 1, job statuses 0"
    assert f"conflict {taken}" in captured.err
    assert (target / taken / "conversation.json").read_bytes() == kept


@pytest.mark.parametrize("leftover", ["messages-list", "messages-string", "status"])
def test_migrate_reports_a_leftover_key_at_the_target_as_a_conflict_and_writes_nothing(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], leftover: str
) -> None:
    source = open_store(root=tmp_path / "source")
    _fill(source, 2)
    taken = source.ids()[0]
    client = redis.Redis.from_url(redis_url)
    try:
        if leftover == "messages-list":
            client.rpush(f"pplx_nb:conv:{taken}:messages", b'{"role": "user", "content": "old"}')
        elif leftover == "messages-string":
            client.set(f"pplx_nb:conv:{taken}:messages", b"junk")
        else:
            client.set(f"pplx_nb:conv:{taken}:status", b'{"status": "pending"}')
    finally:
        client.close()
    before = {key: value for key, value in _keys(redis_url).items() if taken.encode() in key}

    for _ in range(2):
        assert store_main(["migrate", str(Path(source.location)), redis_url]) == 1
        captured = capsys.readouterr()
        assert f"conflict {taken}" in captured.err
        assert captured.out.strip().endswith("conflicts 1, job statuses 0")
        assert {k: v for k, v in _keys(redis_url).items() if taken.encode() in k} == before
    target = open_store(Settings(store_url=redis_url))
    assert [s.conversation_id for s in target.list()] == [source.ids()[1]]


def test_migrate_counts_the_messages_of_a_file_whose_count_is_stale(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads((DATA / "ts_server_conversation.json").read_text())
    document["messageCount"] = 9
    (tmp_path / "source" / TS_ID).mkdir(parents=True)
    (tmp_path / "source" / TS_ID / "conversation.json").write_text(json.dumps(document))

    for summary in ("migrated 1, skipped 0", "migrated 0, skipped 1"):
        assert store_main(["migrate", str(tmp_path / "source"), redis_url]) == 0
        assert capsys.readouterr().out.startswith(summary)
    target = open_store(Settings(store_url=redis_url))
    assert target.load(TS_ID).message_count == len(document["messages"]) == 5


def test_migrate_leaves_behind_job_statuses_that_name_no_state_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = open_store(root=tmp_path / "source")
    _fill(source, 4)
    statuses = [b'{"status": ["completed"]}', b"[" * 100_000 + b"]" * 100_000, b'"completed"']
    odd, ended = source.ids()[:3], source.ids()[3]
    for conversation_id, status in zip(odd, statuses, strict=True):
        (source.path(conversation_id) / "status.json").write_bytes(status)
    (source.path(ended) / "status.json").write_text('{"status": "completed"}')
    target = tmp_path / "target"

    assert store_main(["migrate", str(Path(source.location)), str(target)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == "migrated 4, skipped 0, conflicts 0, job statuses 1"
    assert [f"job status of {c} not copied" in captured.err for c in odd] == [True] * 3
    assert "Traceback" not in captured.err
    assert sorted(p.name for p in target.glob("*/status.json")) == ["status.json"]
    assert (target / ended / "status.json").is_file()


@pytest.mark.parametrize(
    ("source", "target", "says"),
    [
        ("{tmp}/missing", "{redis}", "SOURCE {tmp}/missing does not exist"),
        ("{tmp}/file", "{redis}", "is a file"),
        ("{redis}", "{redis}", "the same store"),
        ("redis://127.0.0.1:{closed}/0", "{tmp}/out", "127.0.0.1:{closed}/0"),
        ("{tmp}", "http://example.com/", "neither a folder nor a redis:// URL"),
    ],
)
def test_migrate_says_what_is_wrong_with_a_source_or_target(
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    source: str,
    target: str,
    says: str,
) -> None:
    (tmp_path / "file").write_text("not a folder")
    values = {"tmp": str(tmp_path), "redis": redis_url, "closed": str(_closed_port())}
    started = time.monotonic()
    assert store_main(["migrate", source.format(**values), target.format(**values)]) == 2
    assert time.monotonic() - started < 10
    assert says.format(**values) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_magics_built_from_the_environment_keep_everything_in_redis(
    redis_url: str, sim_url: str, logs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from pplx_nb.notebook import magics

    for name, value in team_env(redis_url, sim_url, logs_dir).items():
        monkeypatch.setenv(name, value)
    shell = InteractiveShell.instance()
    magics.set_researcher(None)
    shell.run_line_magic("load_ext", "pplx_nb")
    try:
        answer = shell.run_cell_magic("pplx", "", QUESTION)
        cid = answer.conversation_id
        shell.run_cell_magic("pplx_followup", cid, FOLLOW_UP)
        researcher = magics.get_researcher()
        assert researcher.store.location.startswith("redis://")
        assert len(researcher.history(cid).messages) == 4
    finally:
        shell.run_line_magic("unload_ext", "pplx_nb")
        magics.get_researcher(reread=False).close()
        magics.set_researcher(None)
    assert nothing_under(logs_dir)
