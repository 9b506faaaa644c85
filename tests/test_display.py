"""Rendering: answers with linked citations, sources, thinking, errors, progress, live views."""

from __future__ import annotations

import re
import time
from typing import get_args

import pytest

from pplx_nb._errors import APIKeyInvalid, ConversationNotFound
from pplx_nb._models import (
    Answer,
    Conversation,
    Cost,
    ErrorInfo,
    JobStatus,
    Message,
    Progress,
    Source,
    Usage,
)
from pplx_nb.notebook import display
from pplx_nb.notebook._icons import IconName, icon
from pplx_nb.notebook._render import cancel_bundle, markdown_to_html, web_results_bundle

CID = "20261122-1763794800000"
TASK_URL = "https://docs.python.org/3/library/asyncio-task.html#asyncio.Task.cancel"


def make_answer(**changes: object) -> Answer:
    fields: dict[str, object] = {
        "text": "Call `Task.cancel()` [1]; then await it [2]. Unknown marker [7].",
        "sources": [
            Source(url=TASK_URL, title="asyncio.Task.cancel", date="2025-01-02"),
            Source(url="https://www.example.org/guide", title=None),
        ],
        "related_questions": ["How do I wait for [cancelled] tasks?"],
        "model": "sonar-pro",
        "usage": Usage(prompt_tokens=10, completion_tokens=20, total_tokens=30),
        "cost": Cost(total_cost=0.0061, estimated=True),
        "conversation_id": CID,
    }
    fields.update(changes)
    return Answer.model_validate(fields)


class Recorder:
    """Collects what a view publishes: (bundle, display_id, update)."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, str], str | None, bool]] = []

    def __call__(self, bundle: dict[str, str], display_id: str | None, update: bool) -> None:
        self.calls.append((bundle, display_id, update))


def test_citation_markers_link_to_their_sources_with_titles() -> None:
    markdown = display.answer_markdown(make_answer())
    assert f'[[1]]({TASK_URL} "asyncio.Task.cancel")' in markdown
    assert '[[2]](https://www.example.org/guide "example.org")' in markdown
    assert "[7]" in markdown and "[[7]]" not in markdown


def test_sources_list_shows_title_domain_and_date() -> None:
    markdown = display.answer_markdown(make_answer())
    assert f"1. [asyncio.Task.cancel]({TASK_URL}) — docs.python.org · 2025-01-02" in markdown
    assert "2. [https://www.example.org/guide](https://www.example.org/guide) — example.org" in (
        markdown
    )


def test_header_names_the_conversation_and_the_follow_up_line() -> None:
    markdown = display.answer_markdown(make_answer())
    first = markdown.splitlines()[0]
    assert CID in first
    assert f"%pplx_followup {CID}" in first
    research = display.answer_markdown(make_answer(), research=True)
    assert f"%pplx_followup --research {CID}" in research


def test_thinking_is_collapsed_and_related_questions_are_escaped() -> None:
    markdown = display.answer_markdown(make_answer(thinking="step one\nstep two"))
    assert "<details><summary>Thinking</summary>" in markdown
    assert "<details open" not in markdown
    assert "> step one\n> step two" in markdown
    assert "- How do I wait for \\[cancelled\\] tasks?" in markdown
    assert "Related" not in display.answer_markdown(make_answer(), related=False)


def test_footer_shows_model_tokens_estimated_cost_and_cached() -> None:
    markdown = display.answer_markdown(make_answer(cached=True), elapsed=1.25)
    assert "<sub>sonar-pro · 30 tokens · ≈$0.0061 · 1.2 s · cached</sub>" in markdown


def test_plain_text_lists_source_urls_for_terminals() -> None:
    plain = display.answer_bundle(make_answer())["text/plain"]
    assert f"[1] {TASK_URL}" in plain
    assert f"Conversation {CID}" in plain


def test_answer_html_is_self_contained_and_links_sources() -> None:
    page = display.answer_html(make_answer(thinking="<script>x</script>"))
    assert f'href="{TASK_URL}"' in page
    assert 'title="asyncio.Task.cancel"' in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<ol><li>" in page


IMAGES = [
    {
        "image_url": "https://img.example.org/a (1).png",
        "origin_url": "https://example.org/page?a=1&b=2",
        "title": "A [diagram]\nof *tasks*",
        "width": 640,
        "height": 480,
    },
    {"image_url": "https://img.example.org/b.png"},
    {"image_url": "javascript:alert(1)", "origin_url": "https://example.org/x"},
    {"title": "no address"},
]


def test_images_follow_the_sources_as_linked_escaped_thumbnails() -> None:
    markdown = display.answer_markdown(make_answer(images=IMAGES))
    thumbs = markdown.index("**Images**")
    assert markdown.index("**Sources**") < thumbs < markdown.index("**Related**")
    assert (
        "[![A \\[diagram\\] of \\*tasks\\*](https://img.example.org/a%20%281%29.png)]"
        "(https://example.org/page?a=1&b=2)"
    ) in markdown
    assert "[![img.example.org](https://img.example.org/b.png)](https://img.example.org/b.png)" in (
        markdown
    ), "an image without a page links to itself, titled by its host"
    assert "javascript:" not in markdown and "no address" not in markdown
    assert "**Images**" not in display.answer_markdown(make_answer())


def test_answer_html_shows_image_thumbnails_safely() -> None:
    page = display.answer_html(make_answer(images=IMAGES))
    assert '<a href="https://example.org/page?a=1&amp;b=2" target="_blank"' in page
    assert '<img src="https://img.example.org/a%20%281%29.png" alt="A [diagram] of *tasks*"' in page
    thumbnails = page.count('<img src="https://')
    assert thumbnails == 2 and page.count("<img ") == 3 and "javascript:" not in page
    assert page.index("<ol><li>") < page.index('<img src="https://')


def test_streaming_bundle_shows_text_with_cursor_and_hides_think_block() -> None:
    bundle = display.streaming_bundle("Partial answer", elapsed=0.5)
    assert bundle["text/markdown"].endswith("Partial answer▌")
    assert "Searching… · 0.5 s" in bundle["text/markdown"]
    thinking = display.streaming_bundle("<think>\nplanning the search")
    assert "Thinking…" in thinking["text/markdown"]
    assert "planning" not in thinking["text/markdown"]
    after = display.streaming_bundle("<think>plan</think>\n\nThe answer")
    assert after["text/markdown"].endswith("The answer▌")


def test_streaming_text_renders_as_it_will_with_what_it_leaves_open_closed() -> None:
    shown = display.streaming_bundle("*Offline simulator answer from ")["text/markdown"]
    assert shown.endswith("\n\n*Offline simulator answer from* ▌")
    html = markdown_to_html(shown.split("\n\n", 1)[1])
    assert html == "<p><em>Offline simulator answer from</em> ▌</p>"


def test_streaming_text_shows_raw_html_as_text() -> None:
    bundle = display.streaming_bundle("Partial <img src=x onerror=alert(1)> [x](javascript:y)")
    shown = "Partial \\<img src=x onerror=alert(1)> [x\\](javascript:y)▌"
    assert bundle["text/markdown"].endswith(shown)


def test_the_widget_html_shows_hostile_answers_as_text_and_links_only_web_pages() -> None:
    answer = make_answer(
        text="A <b>tag</b> [1] [2], `a[1]` and [x](javascript:alert(1)).",
        sources=[
            Source(url="javascript:alert(2)", title="bad"),
            Source(url="https://ok.example/x)<b>", title='say "hi"'),
        ],
    )
    page = display.answer_html(answer)
    assert 'A &lt;b&gt;tag&lt;/b&gt; [1] <a href="https://ok.example/x%29%3Cb%3E"' in page
    assert 'title="say &#x27;hi&#x27;"' in page
    assert "<code>a[1]</code>" in page and "[x](javascript:alert(1))" in page
    assert "javascript:alert(2)" not in page and 'href="javascript' not in page


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Binary marker \x009\x00 in the file [1].", "Binary marker \ufffd9\ufffd in the file"),
        ("Use `\x000\x00` as the separator.", "<code>\ufffd0\ufffd</code>"),
        ("**\x000\x00** [x](https://a.example/\x001\x00)", "<strong>\ufffd0\ufffd</strong>"),
    ],
)
def test_nul_characters_in_text_cannot_pose_as_the_converters_placeholders(
    text: str, shown: str
) -> None:
    assert shown in markdown_to_html(text)
    assert shown in display.answer_html(make_answer(text=text))


def test_error_is_one_styled_line_with_code_and_next_step() -> None:
    error = ConversationNotFound(f"Conversation {CID} does not exist. Start one with %%pplx.")
    bundle = display.error_bundle(error)
    assert "<b>CONVERSATION_NOT_FOUND</b>" in bundle["text/html"]
    assert "Start one with %%pplx." in bundle["text/html"]
    assert "Traceback" not in bundle["text/html"]
    assert bundle["text/plain"].startswith("CONVERSATION_NOT_FOUND: ")


def test_error_with_debug_shows_the_traceback_and_never_the_key() -> None:
    key = "pplx-abcdefghijklmnop1234"
    try:
        raise APIKeyInvalid(f"The key {key} was refused. Check PERPLEXITY_API_KEY.")
    except APIKeyInvalid as exc:
        bundle = display.error_bundle(exc, debug=True)
    assert "Traceback" in bundle["text/html"]
    assert "test_error_with_debug" in bundle["text/plain"]
    assert key not in bundle["text/html"] and key not in bundle["text/plain"]


def test_unexpected_errors_say_they_are_bugs() -> None:
    bundle = display.error_bundle(ZeroDivisionError("division by zero"))
    assert "<b>ZeroDivisionError</b>" in bundle["text/html"]
    assert "--debug" in bundle["text/plain"]


def test_progress_bundle_has_a_bar_step_elapsed_and_attempt() -> None:
    progress = Progress(percentage=50, message="Processing response...", attempt=2)
    bundle = display.progress_bundle(progress, 12.4, "Researching")
    assert '<progress value="50" max="100"' in bundle["text/html"]
    assert "Processing response..." in bundle["text/html"]
    assert "12 s · attempt 2" in bundle["text/html"]
    assert bundle["text/plain"].startswith("[##########..........] 50%")
    waiting = display.progress_bundle(None, 0.0)
    assert '<progress value="0"' in waiting["text/html"]


def make_status(**changes: object) -> JobStatus:
    fields: dict[str, object] = {
        "conversation_id": CID,
        "status": "failed",
        "tool_name": "perplexity_deep_research",
        "started_at": "2026-11-22T07:00:00.000Z",
        "updated_at": "2026-11-22T07:00:05.000Z",
    }
    return JobStatus.model_validate(fields | changes)


def test_job_bundle_says_how_to_wait_and_status_line_shows_failure() -> None:
    status = make_status(
        attempts=3,
        error=ErrorInfo(code="API_SERVER_ERROR", message="The API failed; retry later."),
    )
    bundle = display.job_bundle(status)
    assert f"%pplx_wait {CID}" in bundle["text/markdown"]
    line = display.status_line(status)
    assert line == "failed · attempt 3 · API_SERVER_ERROR: The API failed; retry later."


def test_conversation_bundle_shows_turns_sources_and_parent() -> None:
    conversation = Conversation(
        conversation_id=CID,
        created_at="2026-11-22T07:00:00.000Z",
        updated_at="2026-11-22T07:00:01.000Z",
        message_count=2,
        parent_conversation_id="20261122-1763794700000",
        messages=[
            Message(role="user", content="How do I cancel a task?"),
            Message(
                role="assistant",
                content="Use cancel [1].",
                model="sonar-pro",
                sources=[Source(url=TASK_URL, title="asyncio.Task.cancel")],
            ),
            Message.model_validate(
                {
                    "role": "assistant",
                    "content": "Here is a picture.",
                    "images": [{"imageUrl": "https://img.example.org/c.png", "title": "C"}],
                }
            ),
        ],
    )
    markdown = display.conversation_bundle(conversation)["text/markdown"]
    assert "[![C](https://img.example.org/c.png)](https://img.example.org/c.png)" in markdown
    assert "---\n\n---" not in markdown, "no empty sections"
    assert "forked from `20261122-1763794700000`" in markdown
    assert "> How do I cancel a task?" in markdown
    assert f'Use cancel [[1]]({TASK_URL} "asyncio.Task.cancel")' in markdown


def test_stream_view_shows_first_text_at_once_then_at_most_every_interval() -> None:
    recorder = Recorder()
    view = display.StreamView(interval=0.05, publish=recorder)
    assert recorder.calls[0] == (display.BLANK, view.display_id, False)
    assert "Searching…" in recorder.calls[1][0]["text/plain"]
    view.feed("first")
    assert view.first_text_at is not None
    assert recorder.calls[-1][0]["text/plain"] == "first"
    for _ in range(50):
        view.feed(".")
    assert len(recorder.calls) == 3
    time.sleep(0.06)
    view.feed("!")
    assert len(recorder.calls) == 4
    assert recorder.calls[-1][0]["text/plain"].endswith(".!")
    assert {call[1] for call in recorder.calls} == {view.display_id}
    assert all(call[2] for call in recorder.calls[1:])


def test_stream_view_tick_repaints_the_clock_and_held_text_at_most_every_interval() -> None:
    recorder = Recorder()
    view = display.StreamView(interval=0.05, publish=recorder)
    time.sleep(0.06)
    view.tick()
    assert "> Searching… · 0." in recorder.calls[-1][0]["text/markdown"], "the clock moves"
    view.tick()
    assert len(recorder.calls) == 3, "no second repaint within the interval"
    view.feed("first")
    view.feed(" held")
    assert recorder.calls[-1][0]["text/plain"] == "first"
    time.sleep(0.06)
    view.tick()
    assert recorder.calls[-1][0]["text/plain"] == "first held", "held text shows in a pause"


def test_stream_view_shows_the_answer_then_blanks_the_live_area() -> None:
    recorder = Recorder()
    view = display.StreamView(interval=10, publish=recorder)
    view.feed("a")
    view.feed("b")
    view.flush()
    assert recorder.calls[-1][0]["text/plain"] == "ab"
    view.finish(make_answer())
    final, blank = recorder.calls[-2:]
    # The answer comes first: the cell never shows nothing between the stream and the answer.
    assert final[1] is None and final[2] is False
    assert CID in final[0]["text/markdown"]
    assert blank == (display.BLANK, view.display_id, True)
    view.fail(ConversationNotFound("gone"))
    assert recorder.calls[-2] == blank, "the live area is blanked once"
    assert "CONVERSATION_NOT_FOUND" in recorder.calls[-1][0]["text/html"]


def test_progress_view_repaints_only_when_something_changed() -> None:
    recorder = Recorder()
    view = display.ProgressView("Job", publish=recorder)
    step = Progress(percentage=25, message="Querying")
    view.update(step)
    view.update(step)
    view.update(None)
    assert view.paints == 1
    view.update(Progress(percentage=50, message="Processing"))
    assert view.paints == 2
    assert '<progress value="50"' in recorder.calls[-1][0]["text/html"]
    assert all(call[1] == view.display_id for call in recorder.calls)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("# Title", "<h1>Title</h1>"),
        ("**bold** and *it*", "<p><strong>bold</strong> and <em>it</em></p>"),
        ("- a\n- b", "<ul><li>a</li><li>b</li></ul>"),
        ("1. a\n2. b", "<ol><li>a</li><li>b</li></ol>"),
        ("```\n<b>{x}</b>\n```", "<pre><code>&lt;b&gt;{x}&lt;/b&gt;</code></pre>"),
        ("`a<b`", "<p><code>a&lt;b</code></p>"),
        ("> quoted", "<blockquote><p>quoted</p></blockquote>"),
        ("\\[1\\] snake\\_case", "<p>[1] snake_case</p>"),
        ("[x](javascript:alert(1))", "<p>[x](javascript:alert(1))</p>"),
        ("<img src=x onerror=alert(1)>", "<p>&lt;img src=x onerror=alert(1)&gt;</p>"),
    ],
)
def test_markdown_to_html_covers_answers_and_escapes_everything_else(
    source: str, expected: str
) -> None:
    assert markdown_to_html(source) == expected


def test_markdown_headings_can_be_demoted_for_widgets() -> None:
    assert markdown_to_html("## Overview", heading_offset=2) == "<h4>Overview</h4>"
    assert markdown_to_html("##### Deep", heading_offset=2) == "<h6>Deep</h6>"
    assert "<h4>Overview</h4>" in display.answer_html(make_answer(text="## Overview\n\nText [1]."))


def test_markdown_links_keep_titles_and_code_inside() -> None:
    html = markdown_to_html('[`Task`](https://docs.python.org/x "The *title*")')
    assert html == (
        '<p><a href="https://docs.python.org/x" title="The *title*" target="_blank" '
        'rel="noopener"><code>Task</code></a></p>'
    )


def test_dunder_names_show_as_code_not_bold_and_links_stay_intact() -> None:
    text = (
        "Define __getattr__ or object.__init_subclass__() [1]. See "
        "[the docs](https://docs.python.org/3/reference/datamodel.html#object.__getattr__) "
        "and `__slots__`."
    )
    shown = display.answer_text(text)
    assert "`__getattr__`" in shown and "`object.__init_subclass__()`" in shown
    assert "#object.__getattr__)" in shown, "a URL is left alone"
    assert "`__slots__`" in shown and "``" not in shown
    assert "<strong>getattr</strong>" not in markdown_to_html(shown)


def test_report_headings_go_two_levels_down_outside_code() -> None:
    shown = display.answer_text("## Overview\ntext\n```\n## not a heading\n```\n# Title")
    assert shown.startswith("#### Overview")
    assert "\n## not a heading\n" in shown and "\n### Title" in shown


def test_history_shows_readable_times_and_counts_what_it_shows() -> None:
    conversation = Conversation(
        conversation_id=CID,
        created_at="2026-11-22T07:00:00.000Z",
        updated_at="2026-11-22T07:05:09.123Z",
        message_count=5,
        messages=[
            Message(role="system", content="Be brief."),
            Message(role="user", content="q1", timestamp="2026-11-22T07:00:00.000Z"),
            Message(role="assistant", content="a1"),
            Message(role="user", content="q2"),
            Message(role="assistant", content="a2"),
        ],
    )
    markdown = display.conversation_bundle(conversation)["text/markdown"]
    assert "2 questions, 4 messages" in markdown
    assert "updated 2026-11-22 07:05 UTC" in markdown and "T07:" not in markdown


def test_error_boxes_show_commands_as_code_and_name_magics() -> None:
    error = ConversationNotFound(
        f"Conversation {CID} does not exist (looked in /logs). Start a new conversation with "
        "`perplexity_search` (or `%%pplx` in a notebook) and follow up with the id it returns.",
        conversation_id=CID,
        root="/logs",
    )
    bundle = display.error_bundle(error)
    assert "<code>%pplx_conversations</code>" in bundle["text/html"]
    assert "`" not in bundle["text/html"] + bundle["text/plain"]
    assert "perplexity_search" not in bundle["text/plain"]
    assert error.code == "CONVERSATION_NOT_FOUND" and "perplexity_search" in error.message


def test_a_fork_says_it_is_a_branch_of_its_parent() -> None:
    parent = "20261122-1763794800001"
    bundle = display.answer_bundle(make_answer(), branch_of=parent)
    assert f"{icon('branch')} **Branch** `{CID}` of `{parent}`" in bundle["text/markdown"]
    assert f"a branch of {parent}" in bundle["text/plain"]


# Pictographs that need a colour-emoji font (U+1F000 on, dingbats, misc. symbols and technical,
# the emoji variation selector): without one they render as empty boxes.
EMOJI = re.compile("[\U0001f000-\U0001faff\u2300-\u23ff\u2600-\u27bf\u2b00-\u2bff\ufe0f]")


def test_no_notebook_output_needs_an_emoji_font() -> None:
    from pplx_nb._web_results import WebResults

    status = make_status(status="cancelled")
    conversation = Conversation(
        conversation_id=CID,
        created_at="2026-11-22T07:00:00.000Z",
        updated_at="2026-11-22T07:00:01.000Z",
        messages=[Message(role="user", content="q?"), Message(role="assistant", content="a")],
    )
    bundles = [
        display.answer_bundle(make_answer()),
        display.answer_bundle(make_answer(), branch_of="20261122-1763794800001"),
        {"text/html": display.answer_html(make_answer())},
        display.done_bundle(make_answer()),
        display.streaming_bundle("Partial", elapsed=1.0),
        display.conversation_bundle(conversation),
        display.job_bundle(status),
        display.error_bundle(ConversationNotFound(CID)),
        display.error_bundle(KeyboardInterrupt()),
        cancel_bundle(CID, status),
        cancel_bundle(CID, None),
        web_results_bundle(WebResults([Source(url=TASK_URL, title="Task")], query="q")),
    ]
    for bundle in bundles:
        for mime, text in bundle.items():
            assert not EMOJI.search(text), f"{EMOJI.findall(text)} in {mime}: {text[:200]}"
    assert all(icon("completed") in b["text/markdown"] for b in bundles[3:4])


def test_icons_are_svg_images_inlined_in_the_page() -> None:
    import base64
    from xml.etree import ElementTree

    for name in get_args(IconName):
        tag = icon(name)
        uri = re.fullmatch(r'<img src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)" [^<>]*>', tag)
        assert uri is not None, tag
        svg = ElementTree.fromstring(base64.b64decode(uri.group(1)))
        assert svg.tag == "{http://www.w3.org/2000/svg}svg" and len(svg) >= 1, name
