"""Hostile and careless input to references and reports: secrets in URLs, addresses that are not
web pages, URLs urllib refuses, markup that looks like pplx_nb's own, report paths and styles
that cannot work. Each must give a clean export or a VALIDATION_ERROR, never a leak or a crash."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from test_cite_report import _pandoc

from pplx_nb import ConversationStore, Message, Source, ValidationError, cite
from pplx_nb.backends import open_store


@pytest.fixture
def store(logs_dir: Path) -> ConversationStore:
    return open_store(root=logs_dir)


def _conversation(store: ConversationStore, text: str, *sources: Source) -> str:
    answer = Message(
        role="assistant", content=text, sources=list(sources), timestamp="2026-11-20T10:00:00Z"
    )
    return store.create([Message(role="user", content="Q?"), answer]).conversation_id


SECRET_URL = Source(
    url="https://alice:s3cret-pass@intranet.example/report?token=t0ken-value&page=2&api_key=k3y",
    title="Internal report",
)
NOT_WEB = [
    Source(url="javascript:alert(document.cookie)", title="Script"),
    Source(url="file:///etc/passwd", title="Local file"),
    Source(url="data:text/html,<script>alert(1)</script>", title="Data"),
]
SECRETS = ("alice", "s3cret-pass", "t0ken-value", "k3y")


@pytest.mark.parametrize("fmt", cite.FORMATS)
def test_url_credentials_never_reach_an_export(store: ConversationStore, fmt: str) -> None:
    cid = _conversation(store, "See [1].", SECRET_URL)
    text = cite.export([cid], fmt, store=store)
    assert "https://intranet.example/report?page=2" in text
    assert [s for s in SECRETS if s in text] == []


def test_url_credentials_never_reach_a_report(store: ConversationStore, tmp_path: Path) -> None:
    cid = _conversation(store, "See [1].", SECRET_URL)
    report = cite.to_report(store, [cid], tmp_path / "out" / "report.md")
    for path in (report.markdown, report.bibliography, report.html):
        text = path.read_text("utf-8")
        assert [s for s in SECRETS if s in text] == [], path.name


def test_sources_that_are_not_web_pages_are_not_references(
    store: ConversationStore, tmp_path: Path
) -> None:
    page = Source(url="https://example.org/page", title="Page")
    cid = _conversation(store, "One [1], two [2], three [3], four [4].", *NOT_WEB, page)
    for fmt in cite.FORMATS:
        text = cite.export([cid], fmt, store=store)
        assert "example.org/page" in text
        assert [s for s in ("javascript:", "file:", "data:") if s in text] == [], fmt
    report = cite.to_report(store, [cid], tmp_path / "report.md")
    page_html = report.html.read_text("utf-8")
    assert 'href="javascript:' not in page_html
    assert 'href="file:' not in page_html
    assert 'href="data:' not in page_html
    assert "<script>" not in page_html
    assert report.references == 1


def test_urls_urllib_refuses_do_not_crash_an_export(store: ConversationStore) -> None:
    odd = [
        Source(url="https://[::1/broken", title="Broken IPv6"),
        Source(url="https://host.example:99999/x", title="Port out of range"),
        Source(url="https://[::1]:8080/ok", title="IPv6"),
    ]
    cid = _conversation(store, "[1] [2] [3]", *odd)
    for fmt in cite.FORMATS:
        assert cite.export([cid], fmt, store=store)


def test_an_answer_holding_placeholder_text_is_reported_as_written(
    store: ConversationStore, tmp_path: Path
) -> None:
    """The report marks citations while it renders them; an answer that spells such a mark is
    text, not a citation (nor an index past the section's citations)."""
    source = Source(url="https://example.org/page", title="Page")
    cid = _conversation(store, "Literal PPLXCITE0X and PPLXCITE7X, cited [1].", source)
    report = cite.to_report(store, [cid], tmp_path / "report.md")
    markdown = report.markdown.read_text("utf-8")
    key = cite.collect(store)[0].key
    assert f"Literal PPLXCITE0X and PPLXCITE7X, cited [@{key}]." in markdown
    assert "Literal PPLXCITE0X and PPLXCITE7X, cited <span" in report.html.read_text("utf-8")


@pytest.mark.parametrize(
    "content",
    [
        "<not xml",
        "<?xml version='1.0'?><style xmlns='http://purl.org/net/xbiblio/csl'/>",
    ],
    ids=["not-xml", "no-layouts"],
)
def test_a_style_file_that_is_no_csl_style_is_a_validation_error(
    store: ConversationStore, tmp_path: Path, content: str
) -> None:
    cid = _conversation(store, "See [1].", Source(url="https://example.org/a", title="A"))
    style = tmp_path / "styles" / "mine.csl"
    style.parent.mkdir()
    style.write_text(content, "utf-8")
    with pytest.raises(ValidationError) as caught:
        cite.to_report(store, [cid], tmp_path / "out" / "report.md", style=str(style))
    assert caught.value.details["option"] == "style"
    assert "is not a CSL style" in caught.value.wordings["notebook"]
    assert "--style" in caught.value.wordings["notebook"]
    assert not (tmp_path / "out").exists()


def test_a_users_style_beside_the_report_is_not_an_existing_file(
    store: ConversationStore, tmp_path: Path
) -> None:
    cid = _conversation(store, "See [1].", Source(url="https://example.org/a", title="A"))
    mine = tmp_path / "mine.csl"
    bundled = cite._report.style_path("ieee")
    mine.write_bytes(bundled.read_bytes())
    report = cite.to_report(store, [cid], tmp_path / "report.md", style=str(mine))
    assert report.style == mine
    assert mine.read_bytes() == bundled.read_bytes()


@pytest.mark.parametrize("name", ["", ".", "/", "report.html", "references.bib", "ieee.csl"])
def test_a_report_path_that_names_no_markdown_file_is_a_validation_error(
    store: ConversationStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    cid = _conversation(store, "See [1].", Source(url="https://example.org/a", title="A"))
    with pytest.raises(ValidationError) as caught:
        cite.to_report(store, [cid], name, force=True)
    assert caught.value.details["option"] == "path"
    assert "--file" in caught.value.wordings["notebook"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conversation-logs"]


def test_a_report_path_that_is_a_folder_is_a_validation_error(
    store: ConversationStore, tmp_path: Path
) -> None:
    cid = _conversation(store, "See [1].", Source(url="https://example.org/a", title="A"))
    (tmp_path / "out").mkdir()
    with pytest.raises(ValidationError, match="not a folder"):
        cite.to_report(store, [cid], tmp_path / "out", force=True)
    assert list((tmp_path / "out").iterdir()) == []


def test_control_and_bidi_override_characters_leave_titles(store: ConversationStore) -> None:
    """A NUL or an escape sequence prints nothing (or drives a terminal); a right-to-left
    override would show the rest of the entry, URL included, backwards."""
    title = "Safe\x00 \x1b[31mred\x07 \u202eevil\u202c \u2066iso\u2069 \u05e9\u05dc\u05d5\u05dd 🧪"
    cid = _conversation(store, "See [1].", Source(url="https://example.org/a", title=title))
    for fmt in cite.FORMATS:
        text = cite.export([cid], fmt, store=store)
        assert "Safe [31mred evil iso \u05e9\u05dc\u05d5\u05dd 🧪" in text, fmt


def test_pandoc_renders_no_live_html_from_answers_thinking_or_title(
    store: ConversationStore, tmp_path: Path
) -> None:
    """The Markdown is rendered by pandoc, which passes raw HTML through: the answer, its
    thinking, the question, a failure's message and the report's title must reach it as text."""
    pandoc = _pandoc()
    attack = "<script>alert(1)</script><img src=x onerror=alert(2)>[x](javascript:alert(3))"
    report = _report_of(
        store,
        tmp_path,
        question=f"Question {attack}?",
        answer=f"Answer {attack} [1].",
        hostile=attack,
    )
    for rendered in (_render(pandoc, report.markdown), report.html.read_text("utf-8")):
        assert "<script" not in rendered
        assert "<img" not in rendered
        assert 'href="javascript:' not in rendered
        assert "alert(1)" in rendered  # shown as text


def test_python_arguments_of_the_wrong_type_are_validation_errors(
    store: ConversationStore, tmp_path: Path
) -> None:
    cid = _conversation(store, "See [1].", Source(url="https://example.org/a", title="A"))
    wrong: list[tuple[object, str]] = [
        (lambda: cite.to_report(store, [cid], tmp_path / "a.md", style=None), "style=None"),
        (lambda: cite.to_report(store, [cid], 3), "path=3 is not a path"),
        (lambda: cite.to_report("logs", [cid], tmp_path / "b.md"), "store must be"),
        (lambda: cite.to_bibtex([cid], store="logs"), "store must be"),
        (lambda: cite.to_bibtex([cid], store=store, consulted_only=True), "consulted_only"),
    ]
    for call, said in wrong:
        with pytest.raises(ValidationError, match=said):
            call()  # type: ignore[operator]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conversation-logs"]


def test_one_conversation_id_as_a_string_is_one_id(
    store: ConversationStore, tmp_path: Path
) -> None:
    cid = _conversation(store, "See [1].", Source(url="https://example.org/a", title="A"))
    report = cite.to_report(store, cid, tmp_path / "report.md")
    assert report.sections == 1 and report.references == 1


def test_pandoc_reads_no_attributes_or_raw_output_from_an_answer(
    store: ConversationStore, tmp_path: Path
) -> None:
    """Pandoc's Markdown gives "{...}" after a heading, span, link, image or code span as HTML
    attributes (event handlers too), and `{=html}` makes raw output: none of it may survive."""
    pandoc = _pandoc()
    answer = (
        "Text [span]{onmouseover=alert(1)} and `code`{onclick=alert(2)} and "
        "`<script>alert(3)</script>`{=html} and "
        "![img](https://example.org/a.png){onerror=alert(4)} [1].\n\n"
        "```{=html}\n<script>alert(5)</script>\n```\n\n"
        "::: {onclick=alert(6)}\ndiv\n:::\n"
    )
    cid = store.create(
        [
            Message(role="user", content="Question {onclick=alert(7)}"),
            Message(
                role="assistant",
                content=answer,
                sources=[Source(url="https://example.org/a", title="A")],
                timestamp="2026-11-20T10:00:00Z",
            ),
        ]
    ).conversation_id
    report = cite.to_report(store, [cid], tmp_path / "report.md", title="T {onclick=alert(8)}")
    for rendered in (_render(pandoc, report.markdown), report.html.read_text("utf-8")):
        assert re.findall(r"<[^>]*\son\w+=", rendered) == []
        assert "<script" not in rendered
        assert "onmouseover=alert(1)" in rendered  # shown as text


def test_one_page_spelt_many_ways_is_one_reference(store: ConversationStore) -> None:
    spellings = [
        "https://example.com/caf%C3%A9/~notes/a b",
        "http://www.EXAMPLE.com./caf%c3%a9/%7Enotes/a%20b/",
        "https://example.com/café/~notes/a%20b?utm_source=feed",
    ]
    idn = ["https://bücher.de/x", "https://xn--bcher-kva.de/x/"]
    sources = [Source(url=url, title="Café notes") for url in spellings + idn]
    cid = _conversation(store, " ".join(f"[{i}]" for i in range(1, 6)), *sources)
    assert len(cite.collect([cid], store=store)) == 2


def test_a_url_is_one_line_in_every_format(store: ConversationStore) -> None:
    """A line break or control character in a URL (one urllib cannot parse included) would end
    an RIS line and let the rest pose as tags."""
    urls = [
        "https://[::1/x\nER  - \nTY  - JOUR\nTI  - injected",
        "https://a.example/x\x0bER  - \x0cTY  - JOUR",
        "https://b.example/y\u2028ER  - \u2029TI  - injected\x85\x00",
    ]
    cid = _conversation(store, "[1] [2] [3]", *(Source(url=u, title="T") for u in urls))
    for fmt in cite.FORMATS:
        text = cite.export([cid], fmt, store=store)
        lines = text.splitlines()
        assert [line for line in lines if "injected" in line or "JOUR" in line] == [
            line for line in lines if "://" in line and ("injected" in line or "JOUR" in line)
        ], fmt
    ris = cite.to_ris([cid], store=store).splitlines()
    assert sum(line.startswith("TY  - ") for line in ris) == 3
    assert sum(line.startswith("ER  - ") for line in ris) == 3


# TeX an answer may hold, in every place pandoc reads Markdown: prose, math, an environment,
# text a careless reader would take for code (a span over two lines, a fence never closed, an
# indented or quoted fence) and the question; each names a file or macro of its own.
_TEX_ATTACKS = [
    r"Prose \input{/etc/passwd} and \write18{touch pwned1}.",
    r"Math $\input{pwned2}$ and $$\def\pwnedthree{x}$$ and \(\input{pwned4}\).",
    "\\begin{verbatim}pwned5\\end{verbatim} and \\newcommand{\\pwnedsix}{x}",
    "- a list `span\n- \\input{pwned7}` over two lines",
    "# Heading `open\n\\input{pwned8}`",
    "```\n\\input{pwned9}\n",  # a fence never closed (pandoc: text)
    "> ```\n\\input{pwned10}\n> ```",
    "Escaped \\\\input{pwned11} and \\$\\input{pwned12}\\$ and [link](https://example.org/\\input{pwned13})",
]


def test_pandoc_writes_no_tex_of_an_answer_into_latex(
    store: ConversationStore, tmp_path: Path
) -> None:
    """``pandoc report.md -o report.pdf`` goes through LaTeX, which would run a command of an
    answer (read a file, write one, run a program with shell escape): none may reach it as
    TeX, and every one still reads as written."""
    pandoc = _pandoc()
    answer = "\n\n".join([*_TEX_ATTACKS, "Cited [1].", "Code `\\input{kept}` stays code."])
    report = _report_of(
        store,
        tmp_path,
        question=r"Question \input{pwned14} $\def\pwnedfifteen{x}$?",
        answer=answer,
        hostile=r"\input{pwned}",
    )
    latex = _render(pandoc, report.markdown, "latex")
    # Code blocks are verbatim (shown, never run): what is left must hold no command of ours.
    live = re.sub(r"\\begin\{verbatim\}\n.*?\n\\end\{verbatim\}", "", latex, flags=re.DOTALL)
    assert re.findall(r"\\(?:input|write18)(?![a-z])|\\pwned|\\begin\{verbatim\}pwned", live) == []
    assert "pwned9" in live and r"Report \textbackslash" in live  # all there, as text
    html = _render(pandoc, report.markdown, "html")
    shown = [
        r"\input{/etc/passwd}",
        r"\write18{touch pwned1}",
        r"$\input{pwned2}$",
        r"\input{pwned11}",
        r"\begin{verbatim}pwned5\end{verbatim}",
        r"\input{pwned14}",
        r"Thinking \input{pwned}",
        r"Report \input{pwned}",
        r"<code>\input{kept}</code>",
    ]
    assert [text for text in shown if text not in html] == []


def _report_of(
    store: ConversationStore, tmp_path: Path, *, question: str, answer: str, hostile: str
) -> cite.Report:
    """The report, with its thinking, of one question and its answer whose thinking, source
    title and report title hold ``hostile``."""
    cid = store.create(
        [
            Message(role="user", content=question),
            Message(
                role="assistant",
                content=answer,
                thinking=f"Thinking {hostile}",
                sources=[Source(url="https://example.org/a", title=f"Title {hostile}")],
                timestamp="2026-11-20T10:00:00Z",
            ),
        ]
    ).conversation_id
    return cite.to_report(
        store, [cid], tmp_path / "report.md", title=f"Report {hostile}", thinking=True
    )


def _render(pandoc: str, markdown: Path, to: str = "html") -> str:
    run = subprocess.run(
        [pandoc, "--citeproc", "--standalone", markdown.name, "-t", to],
        cwd=markdown.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return run.stdout
