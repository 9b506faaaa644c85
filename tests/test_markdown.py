"""One Markdown rendering for every surface: Answer, export, the notebook and the MCP tools."""

from __future__ import annotations

from pplx_nb import export
from pplx_nb._markdown import (
    CITATION,
    escape,
    link_citations,
    related_markdown,
    source_references,
    sources_markdown,
)
from pplx_nb._models import Answer, Conversation, Message, Source
from pplx_nb.mcp._render import answer_result
from pplx_nb.notebook import display

SOURCES = [
    Source(
        url="https://docs.python.org/3/library/asyncio.html",
        title="asyncio.wait_for",
        date="2024-05-01",
    ),
    Source(url="https://example.org/a_(b)", title="[Draft] *new* <b>"),
]
TEXT = "Use wait_for [1], or see [2]; [3] names no source."


def test_the_sources_list_is_the_same_markdown_everywhere() -> None:
    listed = sources_markdown(SOURCES)
    assert listed.splitlines() == [
        "**Sources**",
        "",
        "1. [asyncio.wait\\_for](https://docs.python.org/3/library/asyncio.html)"
        " — docs.python.org · 2024-05-01",
        "2. [\\[Draft\\] \\*new\\* \\<b\\>](https://example.org/a_(b)) — example.org",
    ]
    answer = Answer(text=TEXT, sources=SOURCES, conversation_id="20250124-1706102400123")
    conversation = Conversation(
        conversation_id="20250124-1706102400123",
        created_at="2025-01-24T10:00:00.000Z",
        updated_at="2025-01-24T10:00:00.000Z",
        messages=[
            Message(role="user", content="How?"),
            Message(role="assistant", content=TEXT, sources=SOURCES),
        ],
    )
    assert listed in answer.to_markdown()
    assert listed in answer._repr_markdown_()
    assert listed in export.to_markdown(conversation)
    assert listed in display.answer_markdown(answer)
    assert listed in display.conversation_bundle(conversation)["text/markdown"]


def test_citations_link_to_their_source_and_unknown_numbers_stay() -> None:
    plain = link_citations(TEXT, SOURCES)
    assert "[[1]](https://docs.python.org/3/library/asyncio.html)" in plain
    assert "[3] names no source" in plain
    assert Answer(text=TEXT, sources=SOURCES).linked_text() == plain
    titled = link_citations(
        '"quoted" [1]', [Source(url="https://x.org", title='say "hi"')], titles=True
    )
    assert titled == '"quoted" [[1]](https://x.org "say \'hi\'")'
    assert [m.group(1) for m in CITATION.finditer(TEXT)] == ["1", "2", "3"]
    assert not CITATION.search("[1234] and [a]")


def test_the_mcp_text_keeps_the_seed_servers_reference_lines() -> None:
    references = source_references(SOURCES)
    assert references.splitlines() == [
        "[1] asyncio.wait_for (2024-05-01): https://docs.python.org/3/library/asyncio.html",
        "[2] [Draft] *new* <b>: https://example.org/a_(b)",
    ]
    answer = Answer(text=TEXT, sources=SOURCES, conversation_id="20250124-1706102400123")
    result = answer_result(answer, followup=False, show_thinking=False)
    assert f"**Sources**\n{references}" in result.content[0].text  # type: ignore[union-attr]
    plain = display.answer_bundle(answer)["text/plain"]
    assert source_references(SOURCES, titles=False) in plain
    assert "[2] https://example.org/a_(b)" in plain


def test_web_text_is_escaped_so_it_cannot_open_markup() -> None:
    assert escape("a_b [c] *d* `e` <f>") == "a\\_b \\[c\\] \\*d\\* \\`e\\` \\<f\\>"
    related = related_markdown(["What is __init__?", "<script>"])
    assert related == "**Related**\n\n- What is \\_\\_init\\_\\_?\n- \\<script\\>"
    answer = Answer(text="x", related_questions=["<script>"])
    assert (
        related
        in Answer(text="x", related_questions=["What is __init__?", "<script>"]).to_markdown()
    )
    assert "<script>" not in answer.to_markdown()
    assert sources_markdown([]) == "" and related_markdown([]) == ""
