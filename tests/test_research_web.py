"""Researcher.web_search: the Search API's ranked results, no answer, nothing stored unless asked;
counted at the simulator."""

from __future__ import annotations

import re

import pytest

from pplx_nb import Researcher, Settings, export
from pplx_nb._errors import ValidationError
from pplx_nb._models import Answer, Conversation, Message, Source
from pplx_nb.mcp._render import web_search_result
from pplx_nb.notebook import display
from pplx_nb.notebook._render import web_results_bundle
from pplx_nb.research import WebResults
from pplx_nb.research._web import results_message
from pplx_nb.sim import inject_faults, stats


def test_results_come_ranked_with_their_fields_and_nothing_is_stored(
    settings: Settings, sim_url: str
) -> None:
    with Researcher(settings) as r:
        results = r.web_search("asyncio task cancel", max_results=5)
        metrics = r.metrics()
        stored = r.conversations()
    assert isinstance(results, WebResults) and isinstance(results, list)
    assert 1 <= len(results) <= 5 and results.conversation_id is None
    assert all(isinstance(s, Source) and s.url.startswith("https://") for s in results)
    assert all(s.title and s.snippet and s.date for s in results)
    assert len({s.url for s in results}) == len(results)
    assert "cancel" in (results[0].title or "").lower()
    assert stored == []
    billed = stats(sim_url)
    assert billed["searches"] == 1 and billed["generations"] == 0
    assert metrics["api"]["calls"] == 1 and metrics["api"]["cost"] == pytest.approx(0.005)


def test_filters_reach_the_api_and_bad_ones_are_refused_before_anything_is_billed(
    settings: Settings, sim_url: str
) -> None:
    with Researcher(settings) as r:
        kept = r.web_search(
            "json encoder", max_results=3, search_domain_filter=["docs.python.org"], country="us"
        )
        assert kept and all(s.domain == "docs.python.org" for s in kept)
        refused = [
            {"max_results": 0},
            {"max_results": 21},
            {"search_recency_filter": "fortnight"},
            {"search_after_date_filter": "2025-01-31"},
            {"country": "United States"},
            {"answer_length": 3},
            {"search_language_filter": ["en", None, 5]},
            {"search_language_filter": ["english"]},
            {"search_domain_filter": ["-"]},
            {"search_domain_filter": ["javascript:alert(1)"]},
            {"search_after_date_filter": "01/01/2025", "search_before_date_filter": "01/01/2024"},
            {"last_updated_after_filter": "03/01/2025", "last_updated_before_filter": "02/01/2025"},
        ]
        for bad in refused:
            with pytest.raises(ValidationError):
                r.web_search("json encoder", **bad)
        with pytest.raises(ValidationError, match="empty"):
            r.web_search("   ")
    assert stats(sim_url)["searches"] == 1


def test_a_list_of_queries_is_searched_in_one_request(settings: Settings, sim_url: str) -> None:
    with Researcher(settings) as r:
        results = r.web_search(["json encoder", "pathlib glob"], max_results=2, save=True)
        assert results.query == "json encoder · pathlib glob"
        assert {"json", "pathlib"} <= {s.url.split("/")[-1].split(".")[0] for s in results}
        assert results.conversation_id is not None
        asked = r.history(results.conversation_id).messages[0].content
        assert asked == "json encoder · pathlib glob"
        for bad, hint in [
            ([], "empty"),
            (["a"] * 6, "at most 5"),
            (["json", None], "Query 2 of the list is None"),
            (["json", "  "], "Query 2 of the list is '  '"),
        ]:
            with pytest.raises(ValidationError, match=hint):
                r.web_search(bad)
    assert stats(sim_url)["searches"] == 1


def test_a_date_range_that_ends_before_it_starts_is_refused_naming_both_options(
    settings: Settings, sim_url: str
) -> None:
    with Researcher(settings) as r, pytest.raises(ValidationError) as refused:
        r.web_search(
            "json encoder",
            last_updated_after_filter="03/01/2025",
            last_updated_before_filter="02/01/2025",
        )
    assert str(refused.value) == (
        "last_updated_after_filter='03/01/2025' is later than "
        "last_updated_before_filter='02/01/2025': no page is published after the first and "
        "before the second. Swap the dates, or drop one."
    )
    assert stats(sim_url)["searches"] == 0


def test_language_codes_must_be_two_letter_strings(settings: Settings, sim_url: str) -> None:
    with Researcher(settings) as r:
        with pytest.raises(ValidationError, match=r"None in search_language_filter"):
            r.web_search("json encoder", search_language_filter=["en", None, 5])
        assert stats(sim_url)["searches"] == 0
        assert r.web_search("json encoder", search_language_filter=["EN", "fr"])


def test_saved_results_become_a_conversation_that_takes_follow_ups(
    settings: Settings, sim_url: str
) -> None:
    with Researcher(settings) as r:
        results = r.web_search("pathlib glob", max_results=3, save=True)
        cid = results.conversation_id
        assert cid is not None
        turns = r.history(cid).messages
        assert [m.role for m in turns] == ["user", "assistant"]
        assert turns[0].content == "pathlib glob"
        saved = turns[1]
        assert saved.tool == "perplexity_web_search" and saved.unanswered is None
        assert [s.url for s in saved.sources or []] == [s.url for s in results]
        assert saved.cost is not None and saved.cost.estimated
        assert all(s.url in saved.content for s in results)
        followup = r.followup(cid, "Which of these matches files recursively?")
    assert isinstance(followup, Answer) and followup.text
    assert stats(sim_url)["searches"] == 1


def test_a_server_error_is_retried_since_a_search_generates_nothing(
    settings: Settings, sim_url: str
) -> None:
    inject_faults(sim_url, {"status": 503, "path": "/search"})
    with Researcher(settings) as r:
        results = r.web_search("asyncio gather")
    assert results
    assert stats(sim_url)["requests"]["POST /search"] == 2


def test_web_text_in_results_is_shown_as_text_on_every_surface_and_stored_as_sent() -> None:
    snippet = "Intro <img src=x onerror=alert(1)> <script>alert(2)</script> a|b &amp; end"
    results = WebResults(
        [
            Source(url="https://a.example/1", title="<b>T</b>", date="2025-01-01", snippet=snippet),
            Source(url="javascript:alert(3)", title="Click", snippet="s"),
            Source(url="https://evil.example/x)<img src=x>", title="T3"),
        ],
        query="anything",
    )
    saved = results_message(results)
    conversation = Conversation(
        conversation_id="20250124-1706102400123",
        created_at="2025-01-24T10:00:00.000Z",
        updated_at="2025-01-24T10:00:00.000Z",
        messages=[Message(role="user", content="anything"), saved],
    )
    mcp = web_search_result(results, None).content[0]
    surfaces = {
        "table": web_results_bundle(results)["text/markdown"],
        "list": results.to_list(),
        "mcp": mcp.text,  # type: ignore[union-attr]
        "history": display.conversation_bundle(conversation)["text/markdown"],
        "export": export.to_markdown(conversation),
    }
    for name, shown in surfaces.items():
        # The table's own icon is an <img> of ours; the results' text brings none.
        ours = re.sub(r'<img [^>]*class="pplx-icon"[^>]*>', "", shown)
        assert "<img" not in ours.replace("\\<img", ""), name
        assert "<script" not in shown.replace("\\<script", ""), name
        assert "(javascript:" not in shown and "](https://evil.example/x)" not in shown, name
        assert "\\<b\\>T\\</b\\>" in shown and "\\&amp;" in shown, name
    assert "1. [\\<b\\>T\\</b\\>](https://a.example/1) (2025-01-01)" in results.to_list()
    assert "| 2 | Click | " in surfaces["table"] and "a\\|b" in surfaces["table"]
    assert saved.sources is not None and saved.sources[0].snippet == snippet
