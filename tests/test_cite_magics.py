"""``%pplx_cite`` and ``%pplx_report`` in a real IPython shell, on answers from the simulator."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from bibtexparser.entrypoint import parse_string
from IPython.core.interactiveshell import InteractiveShell
from support.ipython import Run, loaded_shell

from pplx_nb import Answer, Researcher


@pytest.fixture
def shell(async_researcher: Researcher) -> Iterator[InteractiveShell]:
    with loaded_shell(async_researcher, "refs", "report") as shell:
        yield shell


def test_cite_gives_the_last_answers_references_in_each_format(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    answer = Run(shell, "%%pplx\nHow do I cancel an asyncio task?").result
    assert isinstance(answer, Answer) and answer.sources
    bibtex = Run(shell, "%pplx_cite -o refs")
    assert "(bibtex)" in bibtex.last["text/plain"]
    entries = parse_string(shell.user_ns["refs"]).entries
    assert entries and all(e["url"].startswith("https://docs.python.org/") for e in entries)
    Run(shell, f"%pplx_cite {answer.conversation_id} --format csl-json -o refs")
    items = json.loads(shell.user_ns["refs"])
    assert [item["id"] for item in items] == [entry.key for entry in entries]
    target = tmp_path / "refs.ris"
    Run(shell, f"%pplx_cite --all --format ris --file {target}")
    assert target.read_text().startswith("TY  - ELEC")
    again = Run(shell, f"%pplx_cite --format ris --file {target}")
    assert "already exists" in again.last["text/plain"] and "--force" in again.last["text/plain"]


def test_cite_refuses_an_unknown_format_in_the_magics_words(shell: InteractiveShell) -> None:
    Run(shell, "%%pplx\nWhat is asyncio.gather?")
    run = Run(shell, "%pplx_cite --format endnote")
    assert "--format endnote is not a citation format" in run.last["text/plain"]
    assert "VALIDATION_ERROR" in run.last["text/plain"]


def test_report_writes_markdown_bib_and_html_for_two_questions(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    first = Run(shell, "%%pplx\nHow do I cancel an asyncio task?").result
    second = Run(shell, "%%pplx\nHow do I read a file line by line?").result
    path = tmp_path / "out" / "report.md"
    cids = f"{first.conversation_id} {second.conversation_id}"
    run = Run(shell, f"%pplx_report {cids} --style ieee --file {path} -o report")
    assert "Report written: 2 sections" in run.last["text/plain"]
    text = path.read_text()
    assert "## How do I cancel an asyncio task?" in text
    assert "[@python" in text
    assert (path.parent / "references.bib").exists()
    assert (path.parent / "ieee.csl").exists()
    assert 'class="csl-entry"' in path.with_suffix(".html").read_text()
    refused = Run(shell, f"%pplx_report {cids} --file {path}")
    assert "already exist" in refused.last["text/plain"]
    assert "--force" in refused.last["text/plain"]


def test_cite_refuses_all_with_ids_and_a_folder_as_file(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    answer = Run(shell, "%%pplx\nHow do I cancel an asyncio task?").result
    both = Run(shell, f"%pplx_cite --all {answer.conversation_id}")
    assert "VALIDATION_ERROR: Pass conversation IDs or --all, not both." in both.last["text/plain"]
    folder = tmp_path / "refs"
    folder.mkdir()
    refused = Run(shell, f"%pplx_cite --file {folder} --force")
    said = refused.last["text/plain"]
    assert said.startswith("VALIDATION_ERROR") and f"--file {folder} is a folder" in said
    assert list(folder.iterdir()) == []
    nested = tmp_path / "new" / "folder" / "refs.bib"
    Run(shell, f"%pplx_cite --file {nested}")
    assert nested.read_text().startswith("@online{")


def test_report_links_in_the_notebook_are_paths_whatever_the_file_is_called(
    shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Run(shell, "%%pplx\nHow do I cancel an asyncio task?")
    run = Run(shell, "%pplx_report --file javascript:alert(1)#x.md")
    links = re.findall(r'href="([^"]*)"', run.last["text/html"])
    assert links == [
        "./javascript%3Aalert%281%29%23x.html",
        "./javascript%3Aalert%281%29%23x.md",
        "./references.bib",
    ]


def test_every_answer_output_records_where_it_came_from(
    shell: InteractiveShell, async_researcher: Researcher
) -> None:
    from pplx_nb.provenance import check_records, records_of

    class Output:
        def __init__(self, metadata: dict[str, object]) -> None:
            self.metadata = metadata

    def records(run: Run) -> list[dict[str, object]]:
        return [found for _, found in records_of(Output(m) for m in run.metadata)]

    asked = Run(shell, "%%pplx\nHow do I cancel an asyncio task?")
    followed = Run(shell, "%pplx_followup and how do I wait for it?")
    researched = Run(shell, "%%pplx_research --wait\nHow does asyncio schedule callbacks?")
    web = Run(shell, "%%pplx_web -n 3 --save\nasyncio TaskGroup")
    found = [records(run) for run in (asked, followed, researched)]
    assert [len(r) for r in found] == [1, 1, 1], found
    first, second, third = (r[0] for r in found)
    assert first["conversationId"] == second["conversationId"] == asked.result.conversation_id
    assert (first["turn"], second["turn"]) == (2, 4)  # after the system prompt
    assert first["query"] == "How do I cancel an asyncio task?"
    assert second["reformulatedQuery"]
    assert first["sources"] == [s.url for s in asked.result.sources]
    assert first["model"] == asked.result.model and first["version"]
    store = async_researcher.store
    checked = check_records(enumerate([first, second, third], 1), store)
    assert [c.status for c in checked] == ["matching"] * 3
    web_record = [m["pplx_nb"] for m in web.metadata if "pplx_nb" in m]
    assert web_record and web_record[0]["query"] == "asyncio TaskGroup"
    assert web_record[0]["conversationId"] == web.result.conversation_id
