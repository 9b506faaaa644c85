"""``python -m pplx_nb.provenance``: a notebook's answers checked against the store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from pplx_nb import ConversationStore, Message, Source, ValidationError
from pplx_nb._provenance import METADATA_KEY, answer_hash, find_turn, record, web_record
from pplx_nb.backends import open_store
from pplx_nb.provenance import check_notebook


def _stored(store: ConversationStore, answer: str) -> tuple[str, int]:
    conversation = store.create(
        [
            Message(
                role="user", content="How do I cancel a task?", reformulated_query="cancel task"
            ),
            Message(
                role="assistant",
                content=answer,
                model="sonar-pro",
                timestamp="2026-11-28T01:00:00Z",
                sources=[Source(url="https://docs.python.org/3/library/asyncio-task.html")],
            ),
        ]
    )
    turn = find_turn(conversation, answer)
    assert turn == 1
    return conversation.conversation_id, turn


def _notebook(path: Path, store: ConversationStore, *answers: tuple[str, int]) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_markdown_cell("Notes"))
    for cid, turn in answers:
        meta = {METADATA_KEY: record(store.load(cid), turn, response_id="resp_1", effort="low")}
        output = nbformat.v4.new_output(
            "display_data", data={"text/plain": "answer"}, metadata=meta
        )
        notebook.cells.append(nbformat.v4.new_code_cell("%%pplx\nq", outputs=[output]))
    nbformat.write(notebook, path)


def test_the_record_says_where_the_answer_came_from(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    cid, turn = _stored(store, "Call task.cancel() [1].")
    found = record(store.load(cid), turn, response_id="resp_1", effort="low")
    assert found == {
        "conversationId": cid,
        "turn": 1,
        "answerSha256": answer_hash("Call task.cancel() [1]."),
        "createdAt": "2026-11-28T01:00:00Z",
        "model": "sonar-pro",
        "query": "How do I cancel a task?",
        "reformulatedQuery": "cancel task",
        "costUsd": None,
        "sources": ["https://docs.python.org/3/library/asyncio-task.html"],
        "version": found["version"],
        "responseId": "resp_1",
        "effort": "low",
    }
    json.dumps(found)  # what JupyterLab saves


def test_matching_changed_and_missing(logs_dir: Path, tmp_path: Path) -> None:
    store = open_store(root=logs_dir)
    kept = _stored(store, "Kept as shown.")
    edited = _stored(store, "Edited later.")
    deleted = _stored(store, "Deleted later.")
    path = tmp_path / "analysis.ipynb"
    _notebook(path, store, kept, edited, deleted)
    assert [c.status for c in check_notebook(path, store)] == ["matching"] * 3

    document = store.path(edited[0]) / "conversation.json"
    data = json.loads(document.read_text())
    data["messages"][1]["content"] = "Edited later, by hand."
    document.write_text(json.dumps(data))
    store.delete(deleted[0])
    checked = check_notebook(path, store)
    assert [(c.cell, c.status) for c in checked] == [
        (2, "matching"),
        (3, "changed"),
        (4, "missing"),
    ]


@pytest.mark.parametrize(("edit", "code"), [(False, 0), (True, 1)])
def test_the_command_line_says_it_and_exits_accordingly(
    logs_dir: Path, tmp_path: Path, edit: bool, code: int
) -> None:
    store = open_store(root=logs_dir)
    answer = _stored(store, "An answer.")
    path = tmp_path / "n.ipynb"
    _notebook(path, store, answer)
    if edit:
        document = store.path(answer[0]) / "conversation.json"
        document.write_text(document.read_text().replace("An answer.", "Another."))
    run = subprocess.run(
        [sys.executable, "-m", "pplx_nb.provenance", str(path), "--store", str(logs_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == code, run.stderr
    assert f"{answer[0]} turn 1" in run.stdout
    assert ("changed" if edit else "matching") in run.stdout


def test_a_file_that_is_not_a_notebook_is_a_clear_error(logs_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "n.ipynb"
    path.write_text("{not json")
    run = subprocess.run(
        [sys.executable, "-m", "pplx_nb.provenance", str(path), "--store", str(logs_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "VALIDATION_ERROR" in run.stderr and "is not a notebook" in run.stderr


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"\xff\xfe{", "not UTF-8 JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"", "not JSON"),
    ],
    ids=["not-utf8", "deep", "empty"],
)
def test_bytes_that_are_no_notebook_are_a_validation_error(
    logs_dir: Path, tmp_path: Path, content: bytes, said: str
) -> None:
    path = tmp_path / "n.ipynb"
    path.write_bytes(content)
    with pytest.raises(ValidationError, match=said):
        check_notebook(path, open_store(root=logs_dir))


@pytest.mark.parametrize("name", ["missing.ipynb", "folder.ipynb"])
def test_a_path_that_is_no_file_is_a_validation_error(
    logs_dir: Path, tmp_path: Path, name: str
) -> None:
    (tmp_path / "folder.ipynb").mkdir()
    with pytest.raises(ValidationError, match="is not a file"):
        check_notebook(tmp_path / name, open_store(root=logs_dir))


def test_outputs_of_the_wrong_shape_carry_no_record(logs_dir: Path, tmp_path: Path) -> None:
    """A hand-edited notebook: outputs that are not objects, metadata that is not a mapping,
    a turn that is a string or a boolean, an id that is a path."""
    store = open_store(root=logs_dir)
    cid, turn = _stored(store, "An answer.")
    good = {"metadata": {METADATA_KEY: record(store.load(cid), turn)}}
    document = {
        "cells": [
            "not a cell",
            {"outputs": {"not": "a list"}},
            {"outputs": ["text", 3, {"metadata": [1]}, {"metadata": "x"}, good]},
            {"outputs": [{"metadata": {METADATA_KEY: {"conversationId": cid, "turn": True}}}]},
            {"outputs": [{"metadata": {METADATA_KEY: {"conversationId": "../etc", "turn": 1}}}]},
        ]
    }
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(document))
    checked = check_notebook(path, store)
    assert [(c.cell, c.conversation_id, c.turn, c.status) for c in checked] == [
        (3, cid, 1, "matching"),
        (4, cid, -1, "missing"),
        (5, "../etc", 1, "missing"),
    ]


def test_the_record_carries_no_url_credentials(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    conversation = store.create(
        [
            Message(role="user", content="Q?"),
            Message(
                role="assistant",
                content="A [1].",
                sources=[Source(url="https://bob:hunter2-pass@intranet.example/p?token=t0k3n")],
            ),
        ]
    )
    saved = json.dumps(record(conversation, 1))
    assert "intranet.example/p" in saved
    assert "hunter2-pass" not in saved and "t0k3n" not in saved and "bob" not in saved


def test_a_corrupted_conversation_is_changed_and_the_others_still_checked(
    logs_dir: Path, tmp_path: Path
) -> None:
    store = open_store(root=logs_dir)
    broken, kept = _stored(store, "An answer."), _stored(store, "Another answer.")
    path = tmp_path / "n.ipynb"
    _notebook(path, store, broken, kept)
    (store.path(broken[0]) / "conversation.json").write_text("{broken")
    checked = check_notebook(path, store)
    assert [(c.conversation_id, c.status) for c in checked] == [
        (broken[0], "changed"),
        (kept[0], "matching"),
    ]
    assert "corrupted" in checked[0].detail


def test_a_web_record_carries_no_url_credentials() -> None:
    found = web_record("q", ["https://bob:hunter2-pass@intranet.example/p?token=t0k3n"], None)
    saved = json.dumps(found)
    assert "intranet.example/p" in saved
    assert "hunter2-pass" not in saved and "t0k3n" not in saved
