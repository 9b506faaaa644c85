"""One Markdown rendering for every surface: Answer, export, the notebook and the MCP tools."""

from __future__ import annotations

import re

import pytest

from pplx_nb import export
from pplx_nb._markdown import (
    CITATION,
    cited_sources,
    close_markdown,
    defuse,
    escape,
    link_citations,
    related_markdown,
    source_references,
    sources_markdown,
)
from pplx_nb._models import Answer, Conversation, Message, Source
from pplx_nb.mcp._render import answer_result, history_result
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


def _conversation(*messages: Message) -> Conversation:
    """A stored conversation holding ``messages``."""
    return Conversation(
        conversation_id="20250124-1706102400123",
        created_at="2025-01-24T10:00:00.000Z",
        updated_at="2025-01-24T10:00:00.000Z",
        messages=list(messages),
    )


def test_the_sources_list_is_the_same_markdown_everywhere() -> None:
    listed = sources_markdown(SOURCES)
    assert listed.splitlines() == [
        "**Sources**",
        "",
        "1. [asyncio.wait\\_for](https://docs.python.org/3/library/asyncio.html)"
        " — docs.python.org · 2024-05-01",
        "2. [\\[Draft\\] \\*new\\* \\<b\\>](https://example.org/a_%28b%29) — example.org",
    ]
    answer = Answer(text=TEXT, sources=SOURCES, conversation_id="20250124-1706102400123")
    conversation = _conversation(
        Message(role="user", content="How?"),
        Message(role="assistant", content=TEXT, sources=SOURCES),
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
    assert [m.group("number") for m in CITATION.finditer(TEXT)] == ["1", "2", "3"]
    assert not CITATION.search("[1234] and [a]")


def test_the_mcp_text_keeps_the_seed_servers_reference_lines() -> None:
    references = source_references(SOURCES)
    assert references.splitlines() == [
        "[1] asyncio.wait_for (2024-05-01): https://docs.python.org/3/library/asyncio.html",
        "[2] [Draft] *new* \\<b>: https://example.org/a_(b)",  # MCP clients render Markdown
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


THREE = [
    Source(url="https://docs.python.org/3/library/asyncio-task.html", title="asyncio tasks"),
    Source(url="https://docs.python.org/3/library/asyncio-sync.html", title="asyncio locks"),
    Source(url="https://docs.python.org/3/library/asyncio-queue.html", title="asyncio queues"),
]
"""Three results as the API numbers them: ids 1, 2, 3 at positions 0, 1, 2."""

CITED_EACH_WAY = {
    "numbered": "Cancel a task [1] and guard it with a lock [2].",
    "web": "Cancel a task [web:0] and guard it with a lock [web:1].",
    "link": (
        "Cancel a [task](https://docs.python.org/3/library/asyncio-task.html) and guard it with a "
        "[lock](https://docs.python.org/3/library/asyncio-sync.html#asyncio.Lock)."
    ),
}


@pytest.mark.parametrize("form", sorted(CITED_EACH_WAY))
def test_every_citation_form_names_the_same_sources(form: str) -> None:
    text = CITED_EACH_WAY[form]
    assert cited_sources(text, THREE) == [0, 1]
    linked = link_citations(text, THREE)
    assert THREE[0].url in linked and "asyncio-sync.html" in linked
    if form != "link":
        # [web:0] is shown as the first source's number, as the Sources list numbers it.
        assert "[[1]](https://docs.python.org/3/library/asyncio-task.html)" in linked
        assert "[[2]](https://docs.python.org/3/library/asyncio-sync.html)" in linked
    else:
        assert linked == text  # already links


@pytest.mark.parametrize("form", sorted(CITED_EACH_WAY))
def test_sources_never_cited_are_listed_apart_on_every_surface(form: str) -> None:
    text = CITED_EACH_WAY[form]
    listed = sources_markdown(THREE, text)
    cited, _, rest = listed.partition("**Also consulted**")
    assert "asyncio tasks" in cited and "asyncio locks" in cited and "queues" not in cited
    assert "- **3.** [asyncio queues](https://docs.python.org/3/library/asyncio-queue.html)" in rest
    references = source_references(THREE, text=text)
    assert references.splitlines()[-2:] == [
        "**Also consulted**",
        "[3] asyncio queues: https://docs.python.org/3/library/asyncio-queue.html",
    ]
    answer = Answer(text=text, sources=THREE, conversation_id="20250124-1706102400123")
    assert listed in answer.to_markdown() and listed in display.answer_markdown(answer)
    mcp_text = answer_result(answer, followup=False, show_thinking=False).content[0].text  # type: ignore[union-attr]
    assert f"**Sources**\n{references}" in mcp_text
    assert link_citations(text, THREE) in mcp_text


def test_markers_out_of_range_or_of_unknown_pages_stay_text_and_cite_nothing() -> None:
    text = "See [4], [web:3], [0] and [elsewhere](https://example.org/x)."
    assert cited_sources(text, THREE) == []
    assert link_citations(text, THREE) == text
    # Nothing cited: every source is simply a source.
    assert "Also consulted" not in sources_markdown(THREE, text)
    assert [m.group(0) for m in CITATION.finditer("[1][web:2][a](https://x.org/a_(b))")] == [
        "[1]",
        "[web:2]",
        "[a](https://x.org/a_(b))",
    ]


RAW_HTML = re.compile(
    r"(?<!\\)(?:\\\\)*<(?:img(?! src=\"data:image/svg\+xml;base64,)|script|javascript|T>)"
)
"""Hostile HTML the tests send that is not escaped (an even run of backslashes escapes nothing);
the notebook's own icons are images from ``data:`` URIs."""
LIVE_SCRIPT_LINK = re.compile(r"(?<!\\)(?:\\\\)*\](?:\(\s*<?|:\s*)javascript")
"""A link or link definition to a ``javascript:`` URL that would still be one."""

HOSTILE = [
    Source(url="javascript:alert(document.cookie)", title="Click me", date="2025-01-01"),
    Source(url="https://evil.example/x)<img src=x onerror=alert(2)>", title='T2 "quoted"'),
    Source(url="https://ok.example/a b", title="x\\<img src=x onerror=alert(3)>"),
]


def _stored(answer: Answer) -> Conversation:
    """A conversation holding ``answer`` as its one reply."""
    return _conversation(
        Message(role="user", content="How?"),
        Message(
            role="assistant",
            content=answer.text,
            sources=answer.sources or None,
            thinking=answer.thinking,
        ),
    )


def _surfaces(answer: Answer) -> dict[str, str]:
    """Every Markdown rendering of ``answer``: Answer, notebook, MCP text, export transcript."""
    conversation = _stored(answer)
    mcp = answer_result(answer, followup=False, show_thinking=True).content[0]
    return {
        "to_markdown": answer.to_markdown(),
        "notebook": display.answer_markdown(answer),
        "mcp": mcp.text,  # type: ignore[union-attr]
        "export": export.to_markdown(conversation),
        "history": display.conversation_bundle(conversation)["text/markdown"],
    }


def test_only_http_sources_become_links_and_their_urls_cannot_end_the_link() -> None:
    answer = Answer(text="See [1], [2] and [3].", sources=HOSTILE)
    for name, shown in _surfaces(answer).items():
        assert not RAW_HTML.search(shown) and not LIVE_SCRIPT_LINK.search(shown), name
        assert "(javascript:" not in shown, name
    shown = display.answer_markdown(answer)
    assert "See [1], [[2]](https://evil.example/x%29%3Cimg%20src=x%20onerror=alert%282%29%3E" in (
        shown
    )
    assert "\"T2 'quoted'\")" in shown
    assert "[[3]](https://ok.example/a%20b" in shown
    assert "1. Click me — 2025-01-01" in sources_markdown(HOSTILE)
    # A backslash in a title cannot undo the escape of the "<" after it.
    assert "x\\\\\\<img" in sources_markdown(HOSTILE)


def test_answer_html_and_links_that_are_not_http_show_as_text_and_markdown_stays() -> None:
    text = (
        "**Answer** <img src=x onerror=alert(1)> [1], [x](javascript:alert(2)), "
        "[y](<javascript:alert(3)>), <javascript:alert(4)> and [z][bad].\n\n"
        "[bad]: javascript:alert(5)\n\n"
        "Kept: [docs](https://docs.python.org/3/), <https://ok.example/> and `a <b> c`:\n\n"
        "```html\n<b>code</b>\n```"
    )
    answer = Answer(text=text, sources=THREE, thinking="plan <img src=x onerror=alert(6)>")
    for name, shown in _surfaces(answer).items():
        assert not RAW_HTML.search(shown) and not LIVE_SCRIPT_LINK.search(shown), name
        assert "**Answer** \\<img src=x onerror=alert(1)>" in shown, name
        assert "[docs](https://docs.python.org/3/)" in shown, name
        assert "<https://ok.example/>" in shown and "`a <b> c`" in shown, name
        assert "```html\n<b>code</b>\n```" in shown, name
    assert "plan \\<img" in display.answer_markdown(answer)
    history = history_result(_stored(answer), "", None).content[0].text  # type: ignore[union-attr]
    assert not RAW_HTML.search(history) and not LIVE_SCRIPT_LINK.search(history)
    assert defuse("[a](#x) [b](/y) [c](HTTPS://ok.example/)") == (
        "[a\\](#x) [b\\](/y) [c](HTTPS://ok.example/)"
    )
    # Already escaped: left as it is, so defusing twice changes nothing.
    assert defuse(defuse(text)) == defuse(text)
    assert defuse("a\\\\<b>") == "a\\\\\\<b>"


def test_a_conversation_without_sources_is_exported_without_raw_html() -> None:
    conversation = _conversation(
        Message(role="user", content="What is <T>?"),
        Message(role="assistant", content="Hi <img src=x onerror=alert(1)>"),
    )
    for shown in (
        export.to_markdown(conversation),
        display.conversation_bundle(conversation)["text/markdown"],
    ):
        assert not RAW_HTML.search(shown)


CODE = (
    "Index a list from zero [1]:\n\n```python\nitems = ['a', 'b', 'c']\nsecond = items[1]\n"
    "last = items[2]\n```\n\n~~~\nitems[web:2]\n~~~\n\nOr use `items[3]` or ``x[`1`]``, which "
    "raise IndexError [2]."
)


def test_citation_markers_in_code_stay_code_and_cite_nothing() -> None:
    assert cited_sources(CODE, THREE) == [0, 1]
    linked = link_citations(CODE, THREE)
    assert "second = items[1]\nlast = items[2]\n" in linked and "items[web:2]" in linked
    assert "`items[3]`" in linked and "``x[`1`]``" in linked
    assert linked.count("](https://") == 2
    answer = Answer(text=CODE, sources=THREE)
    for name, shown in _surfaces(answer).items():
        assert "second = items[1]\n" in shown and "`items[3]`" in shown, name
        assert "asyncio queues" in shown.split("Also consulted", 1)[1], name
    widget = display.answer_html(answer)
    assert "second = items[1]" in widget and "<code>items[3]</code>" in widget
    assert widget.count('href="https://docs.python.org/3/library/asyncio-task.html"') == 2


def test_a_code_block_still_streaming_in_is_code() -> None:
    assert link_citations("See [1].\n\n```\nx = a[1]", THREE).endswith("```\nx = a[1]")


STREAMED = (
    "*Offline simulator answer from the Python documentation.*\n\n"
    "Call **`Task.cancel()`** on the task, then *await it* to let it finish "
    "([the __asyncio__ docs](https://docs.python.org/3/library/asyncio-task.html)) [1].\n\n"
    "```python\ntask.cancel()\n```\n\n"
    "See _snake_case_names_ and `a * b` too."
)


@pytest.mark.parametrize(
    ("partial", "shown"),
    [
        ("*Offline simulator answer from ", "*Offline simulator answer from* ▌"),
        ("Call **`Task.can", "Call **`Task.can`**▌"),
        ("then *await it* to **", "then *await it* to ▌"),
        ("see ([the *docs*](https://docs.pyth", "see (the *docs*▌"),
        ("```python\ntask.can", "```python\ntask.can▌\n```"),
        ("2 * 3 and snake_ca", "2 * 3 and snake_ca▌"),
        ("__strong _both", "__strong _both___▌"),
    ],
)
def test_a_partial_text_is_closed_where_it_leaves_markdown_open(partial: str, shown: str) -> None:
    assert close_markdown(partial, "▌") == shown


def test_every_prefix_of_a_streamed_answer_renders_without_markup_characters() -> None:
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark")
    for end in range(1, len(STREAMED) + 1):
        rendered = parser.render(close_markdown(STREAMED[:end], "▌"))
        text = re.sub(r"<code[^>]*>.*?</code>|<[^>]+>", "", rendered, flags=re.S)
        for mark in ("*", "`", "](", "__"):
            assert mark not in text, f"{mark!r} shows in {STREAMED[:end]!r}: {rendered}"
        assert text.count("▌") == 1 or "<pre>" in rendered, rendered


def test_markers_inside_a_links_text_are_not_linked_again() -> None:
    text = "[see [1]](https://docs.python.org/3/library/asyncio-sync.html) and [[1]](https://x.org)"
    assert link_citations(text, THREE) == text
    assert cited_sources(text, THREE) == [1]


CROSSED = [
    Source(url="https://a.example/1", title="A1", ids=[1, 3]),
    Source(url="https://a.example/2", title="A2", ids=[2]),
    Source(url="https://b.example/4", title="B4", ids=[4]),
]
"""Two search rounds as the API numbers them: ids 1-2 then 3-4, id 3 finding A1 again."""


def test_markers_name_search_result_ids_not_positions() -> None:
    text = "Claim from B4 [4]. Claim from A2 [2]. A1 again [3]; [web:3] is B4, [5] nothing."
    assert cited_sources(text, CROSSED) == [2, 1, 0]
    linked = link_citations(text, CROSSED)
    assert "B4 [[3]](https://b.example/4)" in linked
    assert "A2 [[2]](https://a.example/2)" in linked
    assert "again [[1]](https://a.example/1)" in linked
    assert "[web:3]" not in linked and "[5] nothing" in linked
    assert "Also consulted" not in sources_markdown(CROSSED, text)
    only_b4 = sources_markdown(CROSSED, "Claim from B4 [4].")
    assert only_b4.split("**Also consulted**")[0].count("](") == 1
    assert "- **3.** [B4](https://b.example/4)" in only_b4


def test_sources_stored_without_ids_are_numbered_by_position_as_before() -> None:
    stored = Conversation.model_validate(
        {
            "conversationId": "20250124-1706102400123",
            "createdAt": "2025-01-24T10:00:00.000Z",
            "updatedAt": "2025-01-24T10:00:00.000Z",
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": "Two [2] and three [3].",
                    "sources": [{"url": s.url, "title": s.title} for s in CROSSED],
                },
            ],
        }
    )
    message = stored.messages[1]
    assert message.sources is not None and message.sources[0].ids is None
    assert cited_sources(message.content, message.sources) == [1, 2]
    assert "three [[3]](https://b.example/4)" in export.to_markdown(stored)
    # One id on two pages cannot be trusted either: positions again.
    clash = [CROSSED[0], Source(url="https://c.example/", ids=[1])]
    assert cited_sources("[2]", clash) == [1]
    # Ids are kept when an answer is stored, and read back.
    kept = Message(role="assistant", content="x", sources=CROSSED).to_json_dict()
    assert kept["sources"][0]["ids"] == [1, 3]
    assert Message.model_validate(kept).sources == CROSSED
