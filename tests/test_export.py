"""pplx_nb.export: DataFrames at three levels with exact dtypes, Markdown transcripts, JSON."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pplx_nb import (
    Conversation,
    ConversationCorrupted,
    ConversationStore,
    Cost,
    Message,
    Researcher,
    Settings,
    Source,
    Usage,
    ValidationError,
)
from pplx_nb._models import closing_turn
from pplx_nb.backends import open_store
from pplx_nb.export import to_dataframe, to_json, to_markdown
from pplx_nb.sim import stats

DATA = Path(__file__).parent / "data"
TS_ID = "20250124-1737724800123"

MESSAGE_COLUMNS = [
    "conversation_id",
    "turn",
    "role",
    "content",
    "tool",
    "model",
    "timestamp",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "n_sources",
    "parent_conversation_id",
    "reasoning_tokens",
    "cached_input_tokens",
    "web_searches",
    "tool_calls",
    "tool_calls_cost_usd",
    "cache_cost_usd",
    "cost_unknown",
    "cost_estimated",
]
CONVERSATION_COLUMNS = [
    "conversation_id",
    "created_at",
    "updated_at",
    "message_count",
    "first_query",
    "tools",
    "total_tokens",
    "total_cost_usd",
    "job_status",
    "known_cost_usd",
    "unknown_costs",
]
SOURCE_COLUMNS = ["conversation_id", "turn", "url", "domain", "title", "date"]


def answer(text: str, *, tokens: int, cost: float, urls: list[str]) -> Message:
    return Message(
        role="assistant",
        content=text,
        timestamp="2025-01-24T15:00:01.500Z",
        tool="perplexity_search",
        model="sonar-pro",
        sources=[
            Source(url=url, title=f"Title {n}", date="2024-05-01") for n, url in enumerate(urls, 1)
        ],
        usage=Usage(prompt_tokens=tokens, completion_tokens=tokens, total_tokens=2 * tokens),
        cost=Cost(total_cost=cost),
    )


@pytest.fixture
def store(logs_dir: Path) -> ConversationStore:
    return open_store(root=logs_dir)


@pytest.fixture
def researched(store: ConversationStore) -> Conversation:
    """A conversation with metadata: system prompt, question, cited answer, follow-up, answer."""
    conversation = store.create(
        [
            Message(role="system", content="Cite sources."),
            Message(role="user", content="How do I cancel a task?", timestamp="2025-01-24T15:00Z"),
            answer(
                "Call task.cancel() [1], or use a timeout [2].",
                tokens=10,
                cost=0.25,
                urls=[
                    "https://www.docs.python.org/3/library/asyncio-task.html",
                    "https://peps.python.org/pep-0789/",
                ],
            ),
        ]
    )
    return store.append(
        conversation.conversation_id,
        Message(role="user", content="And a timeout?"),
        answer("Use asyncio.timeout() [1].", tokens=5, cost=0.5, urls=["https://a.example/x"]),
    )


@pytest.fixture
def plain(store: ConversationStore) -> str:
    """A conversation written by the TypeScript server: no metadata at all."""
    directory = Path(store.location) / TS_ID
    directory.mkdir()
    (directory / "conversation.json").write_bytes(
        (DATA / "ts_server_conversation.json").read_bytes()
    )
    return TS_ID


def test_messages_level_has_one_row_per_message_with_exact_dtypes(
    store: ConversationStore, researched: Conversation, plain: str
) -> None:
    frame = to_dataframe(store, level="messages")

    assert list(frame.columns) == MESSAGE_COLUMNS
    assert len(frame) == 5 + 5
    assert isinstance(frame["role"].dtype, pd.CategoricalDtype)
    assert list(frame["role"].cat.categories) == ["system", "user", "assistant"]
    assert frame["timestamp"].dtype == pd.DatetimeTZDtype("ns", "UTC")
    assert frame["turn"].dtype == "int64"
    assert frame["n_sources"].dtype == "int64"
    assert frame["prompt_tokens"].dtype == "Int64"
    assert frame["completion_tokens"].dtype == "Int64"
    assert frame["cost_usd"].dtype == "float64"
    assert frame["cost_unknown"].dtype == "bool" and not frame["cost_unknown"].any()
    for column in ("conversation_id", "content", "tool", "model", "parent_conversation_id"):
        assert pd.api.types.is_string_dtype(frame[column].dtype), column

    ours = frame[frame["conversation_id"] == researched.conversation_id]
    assert ours["turn"].tolist() == [0, 1, 2, 3, 4]
    assert ours["role"].tolist() == ["system", "user", "assistant", "user", "assistant"]
    assert ours["n_sources"].tolist() == [0, 0, 2, 0, 1]
    assert ours["prompt_tokens"].iloc[2] == 10
    assert ours["prompt_tokens"].isna().tolist() == [True, True, False, True, False]
    assert ours["cost_usd"].iloc[4] == 0.5
    assert ours["timestamp"].iloc[2] == pd.Timestamp("2025-01-24T15:00:01.500Z")
    assert ours["timestamp"].isna().tolist() == [True, False, False, True, False]
    theirs = frame[frame["conversation_id"] == plain]
    assert theirs["tool"].isna().all()
    assert theirs["cost_usd"].isna().all()


def test_detailed_usage_reaches_the_stored_message_and_the_messages_frame(
    settings: Settings, sim_url: str
) -> None:
    with Researcher(settings) as researcher:
        quick = researcher.search("How do I cancel an asyncio task?")
        deep = researcher.search("How do I cancel an asyncio task?", model="medium")
        store = researcher.store
    billed = stats(sim_url)["requests"]["POST /v1/agent"]
    assert billed == 2
    stored = store.read_raw(deep.conversation_id or "")["messages"][-1]
    assert stored["model"] == deep.model == "openai/gpt-5.1"
    assert stored["usage"]["toolCalls"] == {"search_web": 3, "fetch_url": 3}
    assert stored["usage"]["reasoningTokens"] > 0
    assert stored["cost"]["toolCosts"] == {"search_web": 0.0075, "fetch_url": 0.0015}
    assert stored["cost"]["toolCallsCost"] == 0.009

    frame = to_dataframe(store).set_index("conversation_id")
    rows = {a.model: frame.loc[a.conversation_id].iloc[-1] for a in (quick, deep)}
    fast, slow = rows["openai/gpt-5-mini"], rows["openai/gpt-5.1"]
    assert (fast["web_searches"], fast["tool_calls"]) == (1, 1)
    assert (slow["web_searches"], slow["tool_calls"]) == (3, 6)
    assert slow["reasoning_tokens"] == stored["usage"]["reasoningTokens"]
    assert slow["tool_calls_cost_usd"] == pytest.approx(0.009)
    assert slow["cached_input_tokens"] == 0 and slow["cache_cost_usd"] == 0.0
    assert slow["cost_usd"] == pytest.approx(deep.cost.total_cost if deep.cost else -1)
    for column, kind in [("reasoning_tokens", "Int64"), ("tool_calls_cost_usd", "float64")]:
        assert frame[column].dtype == kind
    questions = frame[frame["role"] == "user"]
    assert questions["tool_calls"].isna().all() and questions["cache_cost_usd"].isna().all()


def test_conversations_level_sums_tokens_and_cost_and_reads_job_status(
    store: ConversationStore, researched: Conversation, plain: str
) -> None:
    status = {"conversationId": researched.conversation_id, "status": "completed"}
    (store.path(researched.conversation_id) / "status.json").write_text(json.dumps(status))

    frame = to_dataframe(store, level="conversations").set_index("conversation_id", drop=False)

    assert list(frame.columns) == CONVERSATION_COLUMNS
    assert frame["created_at"].dtype == pd.DatetimeTZDtype("ns", "UTC")
    assert frame["updated_at"].dtype == pd.DatetimeTZDtype("ns", "UTC")
    assert frame["message_count"].dtype == "int64"
    assert frame["total_tokens"].dtype == "Int64"
    assert frame["total_cost_usd"].dtype == "float64"
    assert isinstance(frame["job_status"].dtype, pd.CategoricalDtype)
    assert frame["tools"].dtype == object
    assert pd.api.types.is_string_dtype(frame["first_query"].dtype)

    ours = frame.loc[researched.conversation_id]
    assert ours["message_count"] == 5
    assert ours["first_query"] == "How do I cancel a task?"
    assert ours["tools"] == ["perplexity_search"]
    assert ours["total_tokens"] == 30
    assert ours["total_cost_usd"] == pytest.approx(0.75)
    assert ours["known_cost_usd"] == pytest.approx(0.75) and ours["unknown_costs"] == 0
    assert ours["job_status"] == "completed"
    assert ours["updated_at"] >= ours["created_at"]
    theirs = frame.loc[plain]
    assert theirs["created_at"] == pd.Timestamp("2025-01-24T13:20:00.123Z")
    assert pd.isna(theirs["total_tokens"])
    assert pd.isna(theirs["total_cost_usd"])
    assert pd.isna(theirs["job_status"])


def test_a_run_whose_cost_is_unknown_leaves_the_total_unknown_and_is_counted(
    store: ConversationStore,
) -> None:
    cancelled = store.create(
        [
            Message(role="system", content="Cite sources."),
            Message(role="user", content="Compare asyncio and trio"),
            closing_turn("cancelled", cost_unknown=True),
            Message(role="user", content="What is asyncio.gather?"),
            answer("It runs awaitables concurrently.", tokens=5, cost=0.25, urls=[]),
        ]
    )
    lost = store.create(
        [
            Message(role="user", content="Compare asyncio and curio"),
            closing_turn("failed", "SUBMISSION_UNKNOWN", "The reply was lost."),
        ]
    )
    unpaid = store.create(
        [
            Message(role="user", content="Compare trio and curio"),
            closing_turn("cancelled"),
            Message(role="user", content="What is a nursery?"),
            answer("A scope for tasks.", tokens=5, cost=0.5, urls=[]),
        ]
    )

    rows = to_dataframe(store, level="conversations").set_index("conversation_id")
    assert rows["known_cost_usd"].dtype == "float64" and rows["unknown_costs"].dtype == "int64"
    first = rows.loc[cancelled.conversation_id]
    assert pd.isna(first["total_cost_usd"])
    assert first["known_cost_usd"] == pytest.approx(0.25) and first["unknown_costs"] == 1
    second = rows.loc[lost.conversation_id]
    assert pd.isna(second["total_cost_usd"]) and pd.isna(second["known_cost_usd"])
    assert second["unknown_costs"] == 1
    third = rows.loc[unpaid.conversation_id]
    assert third["total_cost_usd"] == pytest.approx(0.5) and third["unknown_costs"] == 0
    messages = to_dataframe(store, level="messages")
    flagged = messages[messages["cost_unknown"]]
    assert sorted(flagged["conversation_id"]) == sorted(
        [cancelled.conversation_id, lost.conversation_id]
    )
    assert (flagged["role"] == "assistant").all() and flagged["cost_usd"].isna().all()


def test_sources_level_has_one_row_per_cited_source(
    store: ConversationStore, researched: Conversation
) -> None:
    frame = to_dataframe(store, level="sources")

    assert list(frame.columns) == SOURCE_COLUMNS
    assert frame["turn"].dtype == "int64"
    for column in ("conversation_id", "url", "domain", "title", "date"):
        assert pd.api.types.is_string_dtype(frame[column].dtype), column
    assert frame["turn"].tolist() == [2, 2, 4]
    assert frame["domain"].tolist() == ["docs.python.org", "peps.python.org", "a.example"]
    assert frame["title"].tolist() == ["Title 1", "Title 2", "Title 1"]
    assert set(frame["conversation_id"]) == {researched.conversation_id}


def test_a_source_url_that_does_not_parse_keeps_its_row_without_a_domain(
    store: ConversationStore,
) -> None:
    cited = Message(
        role="assistant",
        content="a [1]",
        sources=[Source(url="http://[bad-ipv6/x", title="t"), Source(url="https://www.a.example/")],
    )
    store.create([Message(role="user", content="q"), cited])

    frame = to_dataframe(store, level="sources")

    assert frame["url"].tolist() == ["http://[bad-ipv6/x", "https://www.a.example/"]
    assert frame["domain"].tolist() == ["", "a.example"]


def test_ids_read_from_the_default_store_and_conversations_directly(
    store: ConversationStore,
    researched: Conversation,
    plain: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONVERSATION_LOGS_DIR", str(Path(store.location)))
    by_id = to_dataframe([plain, researched.conversation_id])
    by_object = to_dataframe([store.load(plain), researched])
    single = to_dataframe(researched, level="conversations")

    assert by_id["conversation_id"].tolist() == [plain] * 5 + [researched.conversation_id] * 5
    pd.testing.assert_frame_equal(by_id, by_object)
    assert single["conversation_id"].tolist() == [researched.conversation_id]


def test_empty_source_gives_empty_frames_with_the_same_dtypes(store: ConversationStore) -> None:
    frame = to_dataframe(store)
    assert frame.empty
    assert list(frame.columns) == MESSAGE_COLUMNS
    assert frame["timestamp"].dtype == pd.DatetimeTZDtype("ns", "UTC")
    assert frame["prompt_tokens"].dtype == "Int64"
    assert isinstance(frame["role"].dtype, pd.CategoricalDtype)
    assert list(to_dataframe([], level="sources").columns) == SOURCE_COLUMNS


def test_corrupted_conversation_is_skipped_with_a_warning(
    store: ConversationStore, researched: Conversation, caplog: pytest.LogCaptureFixture
) -> None:
    broken = store.create([Message(role="user", content="soon broken")])
    path = store.path(broken.conversation_id) / "conversation.json"
    path.write_bytes(path.read_bytes()[:25])

    with caplog.at_level(logging.WARNING, logger="pplx_nb.export"):
        frame = to_dataframe(store, level="conversations")

    assert frame["conversation_id"].tolist() == [researched.conversation_id]
    assert broken.conversation_id in caplog.text


def test_a_folder_copied_under_a_new_id_is_listed_and_exported_once_and_reported(
    settings: Settings,
    store: ConversationStore,
    researched: Conversation,
    caplog: pytest.LogCaptureFixture,
) -> None:
    original = researched.conversation_id
    copy = f"{original[:9]}{int(original[9:]) + 1}"
    shutil.copytree(store.path(original), store.path(copy))

    with Researcher(settings) as researcher, caplog.at_level(logging.WARNING):
        with pytest.raises(ConversationCorrupted, match="copied"):
            researcher.history(copy)
        listed = [summary.conversation_id for summary in researcher.conversations()]
        messages = to_dataframe(store)
        conversations = to_dataframe(store, level="conversations")

    assert listed == [original]
    assert messages["conversation_id"].tolist() == [original] * 5
    assert conversations["conversation_id"].tolist() == [original]
    assert conversations["total_cost_usd"].sum() == pytest.approx(0.75)
    reports = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(reports) == 3  # the listing and each export say so
    assert all(str(store.path(copy)) in report and original in report for report in reports)


def test_bad_arguments_are_validation_errors(store: ConversationStore) -> None:
    with pytest.raises(ValidationError, match="level"):
        to_dataframe(store, level="turns")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        to_dataframe("20250124-1706102400123")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        to_dataframe([42])  # type: ignore[list-item]


def test_markdown_transcript_links_citations_to_sources(researched: Conversation) -> None:
    text = to_markdown(researched)

    assert text.startswith("# How do I cancel a task?\n")
    assert researched.conversation_id in text
    assert "Cite sources." not in text
    assert "[[1]](https://www.docs.python.org/3/library/asyncio-task.html)" in text
    assert "[[2]](https://peps.python.org/pep-0789/)" in text
    assert "1. [Title 1](https://www.docs.python.org/3/library/asyncio-task.html)" in text
    assert "docs.python.org · 2024-05-01" in text
    assert text.index("## User") < text.index("## Assistant · sonar-pro · perplexity_search")
    assert "Cite sources." in to_markdown(researched, include_system=True)


def test_json_export_is_the_stored_shape(
    store: ConversationStore, researched: Conversation
) -> None:
    text = to_json(researched)
    assert json.loads(text) == store.read_raw(researched.conversation_id)
    assert Conversation.model_validate_json(text).messages == researched.messages


def test_importing_export_does_not_import_pandas() -> None:
    code = "import sys, pplx_nb.export; print('pandas' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr
