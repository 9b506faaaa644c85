"""Every citation form the Agent API writes, from the simulator through the Researcher to what
the notebook, the exports and the MCP tools show."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TEST_KEY

from pplx_nb import Researcher, Settings, export
from pplx_nb._markdown import cited_sources
from pplx_nb.mcp._render import answer_result
from pplx_nb.notebook import display
from pplx_nb.sim import serve

MARKERS = {
    "numbered": re.compile(r"\[\d+\]"),
    "web": re.compile(r"\[web:\d+\]"),
    "link": re.compile(r"\[[^\]]+\]\(https://[^)]+\)"),
}


@pytest.fixture(params=sorted(MARKERS))
def cited(request: pytest.FixtureRequest, logs_dir: Path) -> Iterator[tuple[str, Researcher]]:
    """A Researcher over a simulator that marks citations in one form."""
    with serve(latency_ms=0, citations=request.param) as url:
        settings = Settings(
            api_key=TEST_KEY, base_url=url, offline=False, conversation_logs_dir=logs_dir
        )
        with Researcher(settings) as researcher:
            yield request.param, researcher


def test_each_form_is_kept_as_written_and_shown_linked_with_its_sources(
    cited: tuple[str, Researcher],
) -> None:
    form, researcher = cited
    answer = researcher.search("How do I cancel an asyncio task?")
    assert MARKERS[form].search(answer.text), answer.text
    stored = json.loads(Path(answer.conversation_path or "", "conversation.json").read_text())
    assert stored["messages"][-1]["content"] == answer.text  # the API's text, as it came
    assert all(source.ids for source in answer.sources)  # [n] names these ids
    used = cited_sources(answer.text, answer.sources)
    assert used, answer.text
    markdown = display.answer_markdown(answer)
    mcp_text = answer_result(answer, followup=False, show_thinking=False).content[0].text  # type: ignore[union-attr]
    conversation = export.to_markdown(researcher.history(answer.conversation_id or ""))
    for shown in (markdown, mcp_text, conversation, answer.to_markdown()):
        for index in used:
            assert f"({answer.sources[index].url}" in shown
        assert "[web:" not in shown  # shown as the number the Sources list gives it
    if form != "link":
        first = used[0]
        assert f"[[{first + 1}]]({answer.sources[first].url}" in markdown
    never = [s for i, s in enumerate(answer.sources) if i not in used]
    for surface in (markdown, mcp_text, conversation):
        if never:
            consulted = surface.split("**Also consulted**", 1)[1]
            assert all(s.url in consulted for s in never)
        else:
            assert "Also consulted" not in surface
