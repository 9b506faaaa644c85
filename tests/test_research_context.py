"""Researcher and context together: attached files, forks, the history budget, notes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pplx_nb import Researcher, Settings, ValidationError


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
