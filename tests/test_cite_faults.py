"""Hostile and careless input to references and reports: secrets in URLs, addresses that are not
web pages, URLs urllib refuses, markup that looks like pplx_nb's own, report paths and styles
that cannot work. Each must give a clean export or a VALIDATION_ERROR, never a leak or a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from pplx_nb import ConversationStore, Message, Source, ValidationError, cite


@pytest.fixture
def store(logs_dir: Path) -> ConversationStore:
    return ConversationStore(logs_dir)


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
