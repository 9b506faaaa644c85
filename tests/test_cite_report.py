"""Reports: Markdown that Debian's ``pandoc --citeproc`` renders with every citation resolved, a
``.bib`` with the cited references only, and self-contained HTML rendered by citeproc-py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from bibtexparser.entrypoint import parse_string

from pplx_nb import ConversationStore, Message, Source, ValidationError, cite
from pplx_nb._models import Unanswered
from pplx_nb.backends import open_store

TASKS = Source(
    url="https://docs.python.org/3/library/asyncio-task.html",
    title="Coroutines & <Tasks>",
    date="2024-05-17",
)
STUDY = Source(url="https://doi.org/10.1145/3368089.3409741", title="A study {of} 50% _x_")
PAPER = Source(url="https://arxiv.org/abs/2101.00001", title="Attention")
QUEUES = Source(url="https://docs.python.org/3/library/asyncio-queue.html", title="Queues")
UNCITED = Source(url="https://example.org/only-consulted", title="Consulted only")


def _reply(text: str, *sources: Source) -> Message:
    return Message(
        role="assistant", content=text, sources=list(sources), timestamp="2026-11-20T10:00:00Z"
    )


@pytest.fixture
def store(logs_dir: Path) -> ConversationStore:
    return open_store(root=logs_dir)


@pytest.fixture
def three(store: ConversationStore) -> list[str]:
    """Three conversations: citations in order, side by side, none at all, a failed question,
    thinking, and a source only consulted."""
    first = store.create(
        [
            Message(role="user", content="How do I cancel a task?"),
            _reply(
                "<think>The user wants cancel().</think>Call `task.cancel()` [1]; see [2]. "
                "<script>alert(1)</script>",
                TASKS,
                STUDY,
                UNCITED,
            ),
        ]
    )
    second = store.create(
        [
            Message(role="user", content="What is attention?"),
            _reply("Attention [1][2].", PAPER, TASKS),
            Message(role="user", content="And queues?"),
            _reply("Queues are FIFO.", QUEUES),
        ]
    )
    third = store.create(
        [
            Message(role="user", content="A question that failed"),
            Message(
                role="assistant",
                content="",
                unanswered=Unanswered(state="failed", code="API_ERROR", message="The API failed."),
            ),
        ]
    )
    return [first.conversation_id, second.conversation_id, third.conversation_id]


def _pandoc() -> str:
    found = shutil.which("pandoc")
    if found is None:
        if os.environ.get("PPLX_NB_REQUIRE_PANDOC"):
            pytest.fail("pandoc is not installed (Debian: apt-get install pandoc)")
        pytest.skip("pandoc is not installed")
    return found


def test_pandoc_renders_a_report_of_three_conversations_with_every_citation_resolved(
    store: ConversationStore, three: list[str], tmp_path: Path
) -> None:
    report = cite.to_report(store, three, tmp_path / "out" / "report.md", style="ieee")
    assert report.sections == 3  # the failed question is left out
    markdown = report.markdown.read_text("utf-8")
    keys = set(re.findall(r"@([a-z0-9-]+)", markdown))
    assert len(keys) == 4  # tasks, study, paper, queues: the consulted-only page is not cited
    bib = parse_string(report.bibliography.read_text("utf-8"))
    assert {entry.key for entry in bib.entries} == keys
    run = subprocess.run(
        [_pandoc(), "--citeproc", "-t", "html", report.markdown.name],
        cwd=report.markdown.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "WARNING" not in run.stderr, run.stderr
    entries = re.findall(r'<div id="ref-([a-z0-9-]+)" class="csl-entry"', run.stdout)
    assert sorted(entries) == sorted(keys)
    shown = re.sub(r"<[^>]+>", "", run.stdout)
    assert "Attention [1], [3]." in shown  # "[1][2]" became one citation of two sources
    assert "<script>" not in run.stdout


def test_thinking_failed_questions_and_consulted_sources_stay_out_unless_asked(
    store: ConversationStore, three: list[str], tmp_path: Path
) -> None:
    plain = cite.to_report(store, three, tmp_path / "plain.md")
    text = plain.markdown.read_text("utf-8")
    assert "cancel()." not in text.split("Call")[0]  # no thinking before the answer
    assert "failed" not in text
    assert "Consulted only" not in plain.bibliography.read_text("utf-8")
    full = cite.to_report(
        store, three, tmp_path / "full" / "r.md", thinking=True, failed=True, consulted=True
    )
    text = full.markdown.read_text("utf-8")
    assert "> **Thinking**" in text
    assert "## A question that failed" in text
    assert "The API failed." in text
    assert "Also consulted: [@example" in text
    assert full.references == 5


@pytest.mark.parametrize("style", ["apa", "chicago-author-date", "ieee"])
def test_the_html_report_is_rendered_in_the_style_and_escapes_web_text(
    store: ConversationStore, three: list[str], tmp_path: Path, style: str
) -> None:
    report = cite.to_report(store, three, tmp_path / "r.md", style=style)
    page = report.html.read_text("utf-8")
    assert page.count('class="csl-entry"') == 4
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert "Coroutines &amp; &lt;Tasks&gt;" in page or "Coroutines &amp; &lt;tasks&gt;" in page
    assert '<a href="https://docs.python.org/3/library/asyncio-task.html">' in page
    assert report.style.name == f"{style}.csl"
    assert "http" not in page.split("<body>")[0].replace('content="width', "")  # self-contained


def test_a_report_never_overwrites_without_force(
    store: ConversationStore, three: list[str], tmp_path: Path
) -> None:
    path = tmp_path / "report.md"
    path.write_text("my notes\n")
    with pytest.raises(ValidationError, match=r"report\.md already exists.*force=True"):
        cite.to_report(store, three, path)
    assert path.read_text() == "my notes\n"
    assert not (tmp_path / "references.bib").exists()
    cite.to_report(store, three, path, force=True)
    assert path.read_text().startswith("---\n")


def test_an_unknown_style_or_id_is_a_clear_error(
    store: ConversationStore, three: list[str], tmp_path: Path
) -> None:
    with pytest.raises(ValidationError, match="style='mla' is not a citation style"):
        cite.to_report(store, three, tmp_path / "r.md", style="mla")
    with pytest.raises(ValidationError):
        cite.to_report(store, ["not-an-id"], tmp_path / "r.md")
    assert not (tmp_path / "r.md").exists()
