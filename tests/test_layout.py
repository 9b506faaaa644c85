"""The conversation-logs layout: each on-disk name is spelled in pplx_nb/_layout.py only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pplx_nb
from pplx_nb import _layout
from pplx_nb._layout import Layout

PACKAGE = Path(pplx_nb.__file__).parent
NAMES = (
    _layout.CONVERSATION_FILE,
    _layout.STATUS_FILE,
    _layout.JOB_FILE,
    _layout.LOCK_FILE,
    _layout.ANSWERING_FILE,
    _layout.OLD_SUMMARY_FILE,
    _layout.INDEX_DIR,
)
PREFIXES = (_layout.TRASH_PREFIX, _layout.PROBE_PREFIX)


def _spelled(text: str) -> list[str]:
    """The layout names ``text`` spells as a path component (a logger name is not one)."""
    parts = re.split(r"[/\\]", text)
    return [n for n in NAMES if n in parts] + [
        p for p in PREFIXES if any(part.startswith(p) for part in parts)
    ]


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module's code: docstrings and other bare strings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
    ]


def test_each_on_disk_name_is_spelled_only_in_the_layout_module() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_layout.py" and path.parent == PACKAGE:
            continue
        for line, text in _code_strings(path):
            found += [f"{path.relative_to(PACKAGE)}:{line}: {name!r}" for name in _spelled(text)]
    assert found == []


def test_the_layout_names_every_place_of_a_conversation(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    cid = "20250124-1706102400123"
    folder = tmp_path / cid
    assert layout.folder(cid) == folder and layout.folder_str(cid) == str(folder)
    assert layout.conversation_file(cid) == folder / "conversation.json"
    assert layout.status_file(cid) == str(folder / "status.json")
    assert layout.job_file(cid) == str(folder / "job.json")
    assert layout.answering_file(cid) == folder / ".answering"
    assert (layout.pending, layout.claimed) == (
        tmp_path / ".jobs" / "pending",
        tmp_path / ".jobs" / "claimed",
    )
    assert layout.trash(cid, "7-1").name == f".deleted-{cid}-7-1"
    temp = _layout.temp_name("status.json", "7.1")
    assert _layout.is_temp_of(temp, ("status.json",))
    assert not _layout.is_temp_of(temp, ("conversation.json",))


def _mentions(package: str, names: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted((PACKAGE / package).rglob("*.py")) if package else [PACKAGE / "export.py"]:
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(PACKAGE)}: {name}" for name in names if name in text]
    return found


def test_each_layer_reads_only_its_own_files() -> None:
    # The store asks the job side (JobStates) and the job side asks the store (AnswerLookup).
    job_files = ("STATUS_FILE", "JOB_FILE", "status_file", "job_file")
    assert _mentions("store", job_files) == []
    conversation_files = ("CONVERSATION_FILE", "conversation_file")
    assert _mentions("", (*job_files, *conversation_files, "store._file")) == []
    assert _mentions("jobs", (*conversation_files, "pplx_nb.store._")) == []
    # The .answering marker is the store's (the answer guard sets it through the store).
    marker = ("ANSWERING_FILE", "answering_file", "._answering", "import _answering")
    assert _mentions("jobs", marker) == [] and _mentions("research", marker) == []
