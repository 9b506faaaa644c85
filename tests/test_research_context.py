"""Researcher and context together: attached files, forks, the history budget, notes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pplx_nb import Answer, Researcher, Settings, ValidationError


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding ``notes.md``, made the current one."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.md").write_text("Our service cancels tasks with TaskGroup on shutdown.\n")
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def extra(tmp_path: Path) -> Path:
    """A folder outside the working directory, holding ``shared.md``."""
    folder = tmp_path / "extra"
    folder.mkdir()
    (folder / "shared.md").write_text("The shared style guide asks for asyncio.timeout.\n")
    return folder


@pytest.fixture
def researcher(settings: Settings, extra: Path) -> Iterator[Researcher]:
    r = Researcher(settings.model_copy(update={"file_roots": (extra,)}))
    yield r
    r.close()


def test_file_roots_add_to_the_working_directory(
    researcher: Researcher, workdir: Path, extra: Path
) -> None:
    answer = researcher.search(
        "How should we cancel tasks?", files=["notes.md", extra / "shared.md"]
    )
    question = researcher.history(answer.conversation_id or "").messages[0]
    assert "TaskGroup on shutdown" in question.content
    assert "asyncio.timeout" in question.content


def test_a_refused_file_names_the_working_directory_and_the_roots(
    researcher: Researcher, workdir: Path, extra: Path, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere.md").write_text("not allowed\n")
    with pytest.raises(ValidationError) as refused:
        researcher.search("What is this?", files=[tmp_path / "elsewhere.md"])
    message = str(refused.value)
    assert str(workdir) in message and str(extra) in message
    assert "PPLX_NB_FILE_ROOTS" in message


def test_without_the_working_directory_only_the_roots_count(
    researcher: Researcher, workdir: Path, extra: Path
) -> None:
    researcher.attach_from_working_directory = False
    with pytest.raises(ValidationError, match="outside the allowed folders"):
        researcher.search("What is this?", files=["notes.md"])
    assert researcher.search("What is this?", files=[extra / "shared.md"]).text


@pytest.mark.parametrize(
    ("query", "files"),
    [("Show it", ["../../etc/shadow"]), ("Show it", ["missing.md"]), ("   ", None)],
)
def test_a_refused_fork_leaves_no_branch_behind(
    researcher: Researcher, workdir: Path, query: str, files: list[str] | None
) -> None:
    first = researcher.search("How do I cancel an asyncio task?")
    with pytest.raises(ValidationError):
        researcher.followup(first.conversation_id or "", query, fork=True, files=files)
    assert [c.conversation_id for c in researcher.conversations()] == [first.conversation_id]


def test_a_fork_continues_from_its_parent(researcher: Researcher, workdir: Path) -> None:
    first = researcher.search("How do I cancel an asyncio task?")
    branch = researcher.followup(
        first.conversation_id or "", "How do I wait for it?", fork=True, files=["notes.md"]
    )
    assert isinstance(branch, Answer) and branch.conversation_id != first.conversation_id
    child = researcher.history(branch.conversation_id or "")
    assert child.parent_conversation_id == first.conversation_id
    assert [m.role for m in child.messages] == ["user", "assistant", "user", "assistant"]
    assert "TaskGroup on shutdown" in child.messages[2].content
    assert len(researcher.history(first.conversation_id or "").messages) == 2
