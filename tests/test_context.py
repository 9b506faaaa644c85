"""Context: follow-up detection and rewriting, the history budget, attached files, branch chains."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pplx_nb import (
    ConversationCorrupted,
    Message,
    Source,
    ValidationError,
    context,
)
from pplx_nb.backends import open_store
from pplx_nb.context import CONTEXT_WINDOWS, MAX_CHAIN_DEPTH

DOCS = "https://docs.python.org/3/library/"


def _answer(*titles: str) -> Message:
    sources = [Source(url=f"{DOCS}{t.split('.')[0]}.html#{t}", title=t) for t in titles]
    return Message(role="assistant", content="An answer [1].", sources=sources)


def _asyncio_history() -> list[Message]:
    return [
        Message(role="system", content="Be brief."),
        Message(role="user", content="How do I cancel an asyncio task?"),
        _answer("asyncio.Task.cancel", "asyncio.Task.cancelling", "asyncio.Task.uncancel"),
    ]


# -- follow-ups ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "How do I cancel it?",
        "Tell me more",
        "What about timeouts?",
        "Can you compare this one with threads?",
        "Does the same work in a thread?",
        "And combinations?",
        "How do I wait for them?",
    ],
)
def test_contextual_questions_after_a_turn_are_follow_ups(query: str) -> None:
    assert context.is_follow_up(query, _asyncio_history())


@pytest.mark.parametrize(
    "query",
    [
        "How do I parse JSON with json.loads?",
        "What does functools.partial do?",
        "Explain Python's descriptor protocol",
        "How do I merge two dicts into one?",
        "Is that file valid UTF-8?",
        "Is it true that Rust has no garbage collector?",
        "What is the difference between a list and a tuple?",
        "Explain how SQLite handles transactions and their isolation",
        "Is it possible to read a file lazily with pathlib?",
        "Can you compare Go and Rust?",
        "Tell me more about SQLite",
        "How do I read a key and its value from a dict?",
    ],
)
def test_standalone_questions_are_not_follow_ups(query: str) -> None:
    assert not context.is_follow_up(query, _asyncio_history())
    assert context.reformulate(query, _asyncio_history()) == query


@pytest.mark.parametrize(
    ("query", "rewritten"),
    [
        (
            "Is it true that it can be cancelled twice?",
            "Is it true that asyncio task can be cancelled twice?",
        ),
        (
            "Is it possible to cancel it from a thread?",
            "Is it possible to cancel asyncio task from a thread?",
        ),
        ("Tell me more about cancellation", "Tell me more about cancellation (asyncio)"),
        (
            "What is the difference between it and a thread?",
            "What is the difference between asyncio task and a thread?",
        ),
    ],
)
def test_a_follow_up_about_the_same_topic_is_still_rewritten(query: str, rewritten: str) -> None:
    assert context.reformulate(query, _asyncio_history()) == rewritten


def test_nothing_is_a_follow_up_without_an_earlier_question() -> None:
    assert not context.is_follow_up("How do I cancel it?", [])
    assert not context.is_follow_up("Tell me more", [Message(role="system", content="Be brief.")])


def test_reformulate_replaces_the_pronoun_with_the_subject() -> None:
    rewritten = context.reformulate("How do I cancel it?", _asyncio_history())
    assert rewritten == "How do I cancel asyncio task?"


def test_reformulate_keeps_the_determiner_of_this_one_and_which_one() -> None:
    history = _asyncio_history()
    assert context.reformulate("Which one is faster?", history) == "Which asyncio task is faster?"


def test_reformulate_leaves_a_standalone_question_alone() -> None:
    query = "How do I merge two dicts into one?"
    assert context.reformulate(query, _asyncio_history()) == query


def test_reformulate_names_the_module_the_sources_share() -> None:
    history = [
        Message(role="user", content="How do I read a text file with pathlib?"),
        _answer("pathlib.Path.read_text", "pathlib.Path.read_bytes", "pathlib.Path.open"),
    ]
    assert context.reformulate("And how do I write to it?", history) == (
        "And how do I write to text file in pathlib?"
    )


@pytest.mark.parametrize(
    ("first", "sources", "second", "rewritten"),
    [
        (
            "How do I run a subprocess with a timeout?",
            ("subprocess.run", "subprocess.TimeoutExpired", "subprocess.Popen.wait"),
            "how do I cancel it?",
            "how do I cancel subprocess?",
        ),
        (
            "How do I connect to a socket with a timeout?",
            ("socket.create_connection", "socket.socket.settimeout", "socket.socket.connect"),
            "How do I close it?",
            "How do I close socket?",
        ),
        (
            "How do I schedule a callback after a delay with asyncio?",
            ("asyncio.loop.call_later", "asyncio.loop.call_at", "asyncio.TimerHandle.cancel"),
            "How do I cancel it before it runs?",
            "How do I cancel callback in asyncio before it runs?",
        ),
        (
            "How do I parse a date string into a datetime?",
            ("datetime.datetime.strptime", "datetime.datetime.fromisoformat", "datetime.date"),
            "How do I add a day to it?",
            "How do I add a day to datetime?",
        ),
    ],
)
def test_the_pronoun_stands_for_the_object_not_the_circumstance(
    first: str, sources: tuple[str, ...], second: str, rewritten: str
) -> None:
    # "with a timeout" says how the subprocess runs; "it" is the subprocess. A phrase the
    # object turns into ("into a datetime") is what the next question handles.
    history = [Message(role="user", content=first), _answer(*sources)]
    assert context.reformulate(second, history) == rewritten


def test_reformulate_appends_only_the_module_when_the_query_names_its_own_object() -> None:
    history = [
        Message(role="user", content="How do I get all permutations of a list with itertools?"),
        _answer("itertools.permutations", "itertools.islice", "itertools.tee"),
    ]
    assert context.reformulate("And combinations?", history) == "And combinations (itertools)?"


def test_reformulate_uses_identifiers_of_the_question_when_sources_are_missing() -> None:
    history = [
        Message(role="user", content="What does functools.lru_cache do?"),
        Message(role="assistant", content="It memoises."),
    ]
    assert (
        context.reformulate("How do I clear it?", history) == "How do I clear functools.lru_cache?"
    )


def test_prose_page_titles_leave_the_subject_to_the_question() -> None:
    history = [
        Message(role="user", content="How do I cancel an asyncio task?"),
        Message(
            role="assistant",
            content="Call cancel() [1].",
            sources=[
                Source(url="https://example.org/a", title="How to cancel a task - Q&A site"),
                Source(url="https://example.org/b", title="Cancelling tasks | A blog"),
            ],
        ),
    ]
    assert context.reformulate("Can I undo it?", history) == "Can I undo asyncio task?"


def _three_turns(rewrite: str | None) -> list[Message]:
    return [
        *_asyncio_history()[1:],
        Message(
            role="user",
            content="How do I catch the exception it raises?",
            reformulated_query=rewrite,
        ),
        _answer("asyncio.CancelledError", "asyncio.Task.cancel"),
    ]


@pytest.mark.parametrize(
    "rewrite",
    [
        "How do I catch the exception asyncio task raises?",
        "Which exception does asyncio.Task.cancel raise, and how is it caught?",
        None,
    ],
)
def test_a_chain_of_follow_ups_keeps_the_subject_of_the_question_it_started_from(
    rewrite: str | None,
) -> None:
    history = _three_turns(rewrite)
    assert context.subject_of(history) == "asyncio task"
    assert context.reformulate("And how do I give it a timeout?", history) == (
        "And how do I give asyncio task a timeout?"
    )


def test_a_follow_up_rewrite_lends_its_subject_when_the_first_question_is_gone() -> None:
    history = _three_turns("How do I catch the exception asyncio task raises?")[2:]
    assert context.subject_of(history) == "asyncio task"


@pytest.mark.parametrize(
    ("first", "titles", "second", "rewritten"),
    [
        (
            "Should I use pickle or json to store data?",
            ("json.JSONEncoder.encode", "json.JSONDecoder.raw_decode", "pickletools"),
            "Which one is safe for untrusted data?",
            "Which of pickle and json is safe for untrusted data?",
        ),
        (
            "Compare asyncio.gather, asyncio.wait and asyncio.TaskGroup for running tasks",
            ("asyncio.TaskGroup", "asyncio.TaskGroup.create_task", "asyncio.gather"),
            "Which of the three cancels the other tasks when one of them fails?",
            "Which of asyncio.gather, asyncio.wait and asyncio.TaskGroup cancels the other "
            "tasks when one of them fails?",
        ),
        (
            "What is the difference between heapq and bisect?",
            ("heapq.heappush", "bisect.insort_right"),
            "Which one keeps a sorted list?",
            "Which of heapq and bisect keeps a sorted list?",
        ),
        # A lone "it" could be either of the two: searched as typed.
        (
            "Should I use pickle or json to store data?",
            ("json.JSONEncoder.encode", "pickletools"),
            "Is it fast?",
            "Is it fast?",
        ),
        # The top sources share no module and the user named none: no module is guessed.
        (
            "How do I walk a directory tree?",
            ("email.iterators.walk", "ast.walk", "traceback.walk_tb", "traceback.walk_stack"),
            "What about symlinks?",
            "What about symlinks?",
        ),
    ],
)
def test_rewrites_keep_the_meaning_or_leave_the_question_as_typed(
    first: str, titles: tuple[str, ...], second: str, rewritten: str
) -> None:
    history = [Message(role="user", content=first), _answer(*titles)]
    assert context.is_follow_up(second, history)
    assert context.reformulate(second, history) == rewritten


def test_them_after_a_plural_noun_of_the_question_points_inside_it() -> None:
    history = _asyncio_history()
    query = "How do I wait for the other tasks when one of them fails?"
    assert context.reformulate(query, history) == query


def test_reformulate_leaves_a_query_alone_without_history_or_when_explicit() -> None:
    assert context.reformulate("How do I cancel it?", []) == "How do I cancel it?"
    explicit = "How do I cancel an asyncio task with a message?"
    assert context.reformulate(explicit, _asyncio_history()) == explicit


def test_reformulate_is_deterministic_and_short() -> None:
    history = _asyncio_history()
    results = {context.reformulate("Tell me more about it", history) for _ in range(5)}
    assert len(results) == 1
    assert len(results.pop()) < 80


# -- the history budget ----------------------------------------------------------------------------


def _turn(n: int, chars: int = 40) -> list[Message]:
    return [
        Message(role="user", content=f"q{n}".ljust(chars, "x")),
        Message(role="assistant", content=f"a{n}".ljust(chars, "y")),
    ]


def _conversation(turns: int) -> list[Message]:
    messages = [Message(role="system", content="s" * 40)]
    for n in range(turns):
        messages.extend(_turn(n))
    messages.append(Message(role="user", content="latest question".ljust(40, "z")))
    return messages


def test_estimate_tokens_is_a_quarter_of_the_characters_rounded_up() -> None:
    assert context.estimate_tokens("") == 0
    assert context.estimate_tokens("abcd") == 1
    assert context.estimate_tokens("abcde") == 2


def test_history_that_exactly_fits_is_kept_whole() -> None:
    messages = _conversation(3)
    needed = sum(context.estimate_tokens(m.content) + 4 for m in messages)
    fitted = context.fit_history(messages, "sonar", window=needed, reserve_tokens=0)
    assert fitted.messages == messages
    assert fitted.dropped_turns == 0
    assert fitted.note is None


def test_one_token_over_drops_the_oldest_turn_and_says_so() -> None:
    messages = _conversation(3)
    needed = sum(context.estimate_tokens(m.content) + 4 for m in messages)
    fitted = context.fit_history(messages, "sonar", window=needed + 100, reserve_tokens=101)
    assert fitted.dropped_turns == 1
    assert fitted.messages == [messages[0], *messages[3:]]
    assert fitted.note == "1 earlier turn was left out to fit the context window."


def test_system_prompt_and_newest_question_survive_any_budget() -> None:
    messages = _conversation(4)
    fitted = context.fit_history(messages, "sonar", window=10, reserve_tokens=0)
    assert fitted.messages == [messages[0], messages[-1]]
    assert fitted.dropped_turns == 4
    assert fitted.note == "4 earlier turns were left out to fit the context window."


def test_default_reserve_leaves_room_for_the_answer() -> None:
    messages = _conversation(2)
    needed = sum(context.estimate_tokens(m.content) + 4 for m in messages)
    assert context.fit_history(messages, "sonar", window=needed).dropped_turns > 0
    assert context.fit_history(messages, "sonar").dropped_turns == 0


def test_context_windows_come_from_one_table() -> None:
    assert context.context_window("sonar-pro") == CONTEXT_WINDOWS["sonar-pro"] == 200_000
    assert context.context_window("perplexity/sonar") == CONTEXT_WINDOWS["sonar"]
    assert context.context_window("some-new-model") == CONTEXT_WINDOWS["default"]


def test_a_reserve_as_large_as_the_window_is_refused() -> None:
    with pytest.raises(ValidationError, match="reserve"):
        context.fit_history(_conversation(1), "sonar", window=100, reserve_tokens=100)


# -- attached files --------------------------------------------------------------------------------


def _user(prepared: context.PreparedFiles, tool: str) -> Message:
    return Message(role="user", content="q", tool=tool, files=prepared.records)


def test_a_file_is_embedded_with_its_path_and_recorded(workdir: Path) -> None:
    prepared = context.prepare_files(["notes.md"], [])
    assert "File: notes.md\n```md\n# Notes" in prepared.text
    (record,) = prepared.records
    assert record["path"] == str(workdir / "notes.md")
    assert record["bytes"] == len((workdir / "notes.md").read_bytes())
    assert len(record["sha256"]) == 64
    assert prepared.notes == []


def test_a_file_already_in_the_history_is_not_embedded_again(workdir: Path) -> None:
    first = context.prepare_files(["notes.md"], [])
    history = [_user(first, "perplexity_search"), Message(role="assistant", content="ok")]
    again = context.prepare_files([workdir / "notes.md"], history)
    assert again.text == ""
    assert again.records == []
    assert again.notes == ["notes.md is already in the conversation history."]


def test_dedup_holds_across_a_mode_switch_through_the_store(workdir: Path, logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    first = context.prepare_files(["notes.md"], [])
    created = store.create(
        [_user(first, "perplexity_search"), Message(role="assistant", content="ok")]
    )
    history = context.chain_messages(store, created.conversation_id)
    research = context.prepare_files(["./notes.md"], history)
    assert research.records == []
    assert research.notes == ["notes.md is already in the conversation history."]


def test_a_changed_file_is_embedded_anew(workdir: Path) -> None:
    first = context.prepare_files(["notes.md"], [])
    (workdir / "notes.md").write_text("# Notes\nnow about threads.\n")
    again = context.prepare_files(["notes.md"], [_user(first, "perplexity_search")])
    assert "now about threads" in again.text
    assert again.records[0]["sha256"] != first.records[0]["sha256"]
    assert "changed" in again.notes[0]


def test_a_single_path_is_taken_as_one_file(workdir: Path) -> None:
    assert len(context.prepare_files("notes.md", []).records) == 1


def test_the_same_file_twice_in_one_call_is_embedded_once(workdir: Path) -> None:
    prepared = context.prepare_files(["notes.md", "./notes.md"], [])
    assert len(prepared.records) == 1
    assert prepared.text.count("File: notes.md") == 1


def test_traversal_outside_the_working_directory_is_refused(workdir: Path) -> None:
    with pytest.raises(ValidationError, match="outside the allowed folders"):
        context.prepare_files(["../../etc/shadow"], [])
    (workdir.parent / "secret.txt").write_text("secret")
    with pytest.raises(ValidationError, match="PPLX_NB_FILE_ROOTS"):
        context.prepare_files(["../secret.txt"], [])


def test_a_symlink_pointing_outside_the_roots_is_refused(workdir: Path) -> None:
    (workdir.parent / "secret.txt").write_text("secret")
    os.symlink(workdir.parent / "secret.txt", workdir / "link.txt")
    with pytest.raises(ValidationError, match="outside the allowed folders"):
        context.prepare_files(["link.txt"], [])


def test_roots_widen_where_files_may_come_from(workdir: Path) -> None:
    (workdir.parent / "shared.txt").write_text("shared")
    prepared = context.prepare_files(["../shared.txt"], [], roots=[workdir.parent])
    assert "shared" in prepared.text


@pytest.mark.parametrize("hidden", [".env", ".ssh/id_ed25519", "pkg/.git/config"])
def test_dot_files_and_files_in_dot_folders_are_refused(workdir: Path, hidden: str) -> None:
    (workdir / hidden).parent.mkdir(parents=True, exist_ok=True)
    (workdir / hidden).write_text("TOKEN=very-secret\n")
    with pytest.raises(ValidationError, match="hidden"):
        context.prepare_files([hidden], [])
    os.symlink(workdir / hidden, workdir / "innocent.txt")
    with pytest.raises(ValidationError, match="hidden"):
        context.prepare_files(["innocent.txt"], [])


def test_a_dot_folder_given_as_a_root_is_not_hidden_under_it(workdir: Path) -> None:
    notes = workdir / ".notes"
    notes.mkdir()
    (notes / "plan.md").write_text("the plan\n")
    with pytest.raises(ValidationError, match="hidden"):
        context.prepare_files([".notes/plan.md"], [])
    prepared = context.prepare_files([".notes/plan.md"], [], roots=[notes])
    assert "the plan" in prepared.text
    (notes / ".env").write_text("TOKEN=very-secret\n")
    with pytest.raises(ValidationError, match="hidden"):
        context.prepare_files([".notes/.env"], [], roots=[notes])


@pytest.mark.parametrize("root", ["/", "~"])
def test_the_filesystem_root_or_home_as_a_root_is_refused(workdir: Path, root: str) -> None:
    with pytest.raises(ValidationError, match=r"too wide.*PPLX_NB_FILE_ROOTS"):
        context.prepare_files(["notes.md"], [], roots=[Path(root)])


def test_working_from_the_filesystem_root_refuses_files_without_roots(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir("/")
    with pytest.raises(ValidationError, match=r"working directory is '/'.*PPLX_NB_FILE_ROOTS"):
        context.prepare_files(["/etc/passwd"], [])
    assert context.prepare_files([workdir / "notes.md"], [], roots=[workdir]).records


@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n\x00\x00", b"caf\xe9 latin-1"])
def test_binary_files_are_refused(workdir: Path, data: bytes) -> None:
    (workdir / "blob.bin").write_bytes(data)
    with pytest.raises(ValidationError, match="not a UTF-8 text file"):
        context.prepare_files(["blob.bin"], [])


def test_an_oversize_file_is_refused_with_the_cap_in_the_message(workdir: Path) -> None:
    (workdir / "big.txt").write_text("x" * 1001)
    with pytest.raises(ValidationError, match="1,000-byte limit"):
        context.prepare_files(["big.txt"], [], max_bytes=1000)
    assert context.prepare_files(["big.txt"], [], max_bytes=1001).records


def test_missing_files_and_folders_are_refused(workdir: Path) -> None:
    with pytest.raises(ValidationError, match="does not exist"):
        context.prepare_files(["nope.md"], [])
    (workdir / "sub").mkdir()
    with pytest.raises(ValidationError, match="not a regular file"):
        context.prepare_files(["sub"], [])


def test_fences_grow_around_content_that_holds_backticks(workdir: Path) -> None:
    (workdir / "code.md").write_text("```python\nprint(1)\n```\n")
    prepared = context.prepare_files(["code.md"], [])
    assert "````md\n```python" in prepared.text


def test_an_api_key_in_an_attached_file_is_neither_sent_nor_stored(workdir: Path) -> None:
    key = "pplx-" + "k3y" * 12
    (workdir / "settings.env").write_text(f"PERPLEXITY_API_KEY={key}\nLOG_LEVEL=debug\n")
    prepared = context.prepare_files(["settings.env"], [])
    assert key not in prepared.text and "PERPLEXITY_API_KEY=***" in prepared.text
    assert "LOG_LEVEL=debug" in prepared.text
    assert prepared.notes == [
        "settings.env holds API-key-shaped text; it was sent and stored as ***."
    ]
    (record,) = prepared.records
    assert key not in json.dumps(record)


# -- branch chains ---------------------------------------------------------------------------------


def _exchange(n: int) -> list[Message]:
    return [
        Message(role="user", content=f"question {n}", timestamp=f"2026-01-01T00:00:0{n}.000Z"),
        Message(role="assistant", content=f"answer {n}", timestamp=f"2026-01-01T00:00:0{n}.500Z"),
    ]


_PARENT_THEN_CHILD = ["Be brief.", "question 1", "answer 1", "question 2", "answer 2"]


def test_a_fork_continues_its_parent_without_repeating_turns(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    parent = store.create([Message(role="system", content="Be brief."), *_exchange(1)])
    child = store.fork(parent.conversation_id)
    store.append(child.conversation_id, *_exchange(2))
    store.append(parent.conversation_id, *_exchange(3))
    history = context.chain_messages(store, child.conversation_id)
    assert [m.content for m in history] == _PARENT_THEN_CHILD


def test_a_child_holding_only_its_own_turns_follows_its_parent(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    parent = store.create([Message(role="system", content="Be brief."), *_exchange(1)])
    child = store.create(
        [Message(role="system", content="Be brief."), *_exchange(2)],
        parent_conversation_id=parent.conversation_id,
    )
    history = context.chain_messages(store, child.conversation_id)
    assert [m.content for m in history] == _PARENT_THEN_CHILD


def test_a_cycle_written_into_the_files_is_refused_cleanly(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    first = store.create(_exchange(1))
    second = store.create(_exchange(2), parent_conversation_id=first.conversation_id)
    path = store.path(first.conversation_id) / "conversation.json"
    document = json.loads(path.read_text())
    document["parentConversationId"] = second.conversation_id
    path.write_text(json.dumps(document))
    with pytest.raises(ConversationCorrupted, match="cycle") as caught:
        context.chain_messages(store, second.conversation_id)
    assert first.conversation_id in str(caught.value)
    assert "parentConversationId" in str(caught.value)


def test_a_conversation_naming_itself_as_parent_is_a_cycle(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    lone = store.create(_exchange(1))
    path = store.path(lone.conversation_id) / "conversation.json"
    document = json.loads(path.read_text())
    document["parentConversationId"] = lone.conversation_id
    path.write_text(json.dumps(document))
    with pytest.raises(ConversationCorrupted, match="cycle"):
        context.chain_messages(store, lone.conversation_id)


def test_long_chains_stop_at_the_depth_limit(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    ids = [store.create([Message(role="user", content="root")]).conversation_id]
    for n in range(MAX_CHAIN_DEPTH + 4):
        child = store.create(
            [Message(role="user", content=f"level {n}")], parent_conversation_id=ids[-1]
        )
        ids.append(child.conversation_id)
    history = context.chain_messages(store, ids[-1])
    assert len(history) == MAX_CHAIN_DEPTH + 1
    assert history[-1].content == f"level {MAX_CHAIN_DEPTH + 3}"
    assert history[0].content != "root"


def test_a_deleted_ancestor_ends_the_chain(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    parent = store.create(_exchange(1))
    child = store.create(_exchange(2), parent_conversation_id=parent.conversation_id)
    store.delete(parent.conversation_id)
    history = context.chain_messages(store, child.conversation_id)
    assert [m.content for m in history] == ["question 2", "answer 2"]
