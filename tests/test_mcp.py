"""The MCP server driven over stdio with the official ``mcp`` client, against the offline simulator.

Two servers are shared by the module (blocking and async deep research) to keep the file fast;
each runs as ``python -m pplx_nb.mcp`` in its own process, exactly as an assistant would start it.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent
from support.mcp import INITIALIZE, ROOT, TOOLS, UNKNOWN_ID, http_server, server_env

from pplx_nb import Researcher, Settings
from pplx_nb._markdown import link_citations
from pplx_nb._models import Progress, Source
from pplx_nb.backends import open_store
from pplx_nb.mcp._progress import ProgressRelay


class McpClient:
    """One server process and one client session, driven from sync tests through a portal."""

    def __init__(self, env: dict[str, str], errlog: Path, cwd: Path = ROOT) -> None:
        self._env = env
        self._cwd = cwd
        self._stack = ExitStack()
        self.errlog = errlog
        self.portal: BlockingPortal

    def __enter__(self) -> McpClient:
        self.portal = self._stack.enter_context(start_blocking_portal())
        errors = self._stack.enter_context(self.errlog.open("w"))
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "pplx_nb.mcp"], env=self._env, cwd=str(self._cwd)
        )
        streams: AbstractContextManager[Any] = self.portal.wrap_async_context_manager(
            stdio_client(params, errlog=errors)
        )
        read, write = self._stack.enter_context(streams)
        self.session: ClientSession = self._stack.enter_context(
            self.portal.wrap_async_context_manager(ClientSession(read, write))
        )
        self.portal.call(self.session.initialize)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        progress: list[float] | None = None,
        messages: list[str] | None = None,
    ) -> CallToolResult:
        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            if progress is not None:
                progress.append(value)
            if messages is not None and message is not None:
                messages.append(message)

        async def call() -> CallToolResult:
            return await self.session.call_tool(
                name, arguments, read_timeout_seconds=60, progress_callback=on_progress
            )

        return self.portal.call(call)

    def alive(self) -> bool:
        self.portal.call(self.session.send_ping)
        return True


def _text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def _data(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, _text(result)
    return result.structured_content


@pytest.fixture(scope="module")
def logs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One conversation-logs directory shared by the servers and the test process."""
    return tmp_path_factory.mktemp("mcp") / "conversation-logs"


@pytest.fixture(scope="module")
def client(logs_dir: Path) -> Iterator[McpClient]:
    """A server in blocking mode (the MCP default)."""
    env = server_env(logs_dir, PPLX_NB_FILE_ROOTS=str(logs_dir.parent))
    with McpClient(env, logs_dir.parent / "blocking.log") as mcp:
        yield mcp


@pytest.fixture(scope="module")
def async_client(logs_dir: Path) -> Iterator[McpClient]:
    """A server with PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH=true, running the worker. Its runs
    take 3 s: long enough that a call made right after queueing meets the job under way, even
    on a loaded machine."""
    env = server_env(
        logs_dir,
        PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH="true",
        PPLX_NB_SIM_DEEP_RESEARCH_SECONDS="3",
    )
    with McpClient(env, logs_dir.parent / "async.log") as mcp:
        yield mcp


def test_tools_list_has_every_tool_with_bounded_closed_schemas(client: McpClient) -> None:
    tools = {tool.name: tool for tool in client.portal.call(client.session.list_tools).tools}
    assert set(tools) == TOOLS

    search = tools["perplexity_search"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["query"]["minLength"] == 1
    assert search["properties"]["query"]["maxLength"] == 10_000
    domains = search["properties"]["search_domain_filter"]["anyOf"][0]
    assert domains["maxItems"] == 20
    for name in ("search_recency_filter", "search_after_date_filter", "showThinking", "files"):
        assert name in search["properties"]

    followup = tools["perplexity_deep_research_followup"].input_schema
    assert set(followup["required"]) == {"conversationId", "query"}
    assert followup["properties"]["conversationId"]["pattern"] == r"^\d{8}-\d{13}$"
    assert "reasoning_effort" in followup["properties"]

    history = tools["get_conversation_history"].input_schema["properties"]
    assert history["includeSystemPrompt"]["default"] is False

    for name, tool in tools.items():
        assert tool.annotations is not None
        assert tool.input_schema["additionalProperties"] is False, name
        read_only = name not in (
            "perplexity_search",
            "perplexity_deep_research",
            "perplexity_search_followup",
            "perplexity_deep_research_followup",
            "perplexity_web_search",  # with save: true it stores a conversation
            "cancel_deep_research",
        )
        assert tool.annotations.read_only_hint is read_only
        assert tool.output_schema is not None
        assert tool.title, name
        # An optional field is left out, never null: one type each, no anyOf (cheaper for
        # clients to validate) and no type array (which Gemini's declarations reject).
        assert '"null"' not in json.dumps(tool.output_schema), name
        assert "anyOf" not in json.dumps(tool.output_schema), name
    ask = tools["perplexity_search"].output_schema or {}
    assert ask["properties"]["model"] == {"title": "Model", "type": "string"}
    assert "model" not in ask["required"]
    assert "NEW conversation" in (tools["perplexity_search"].description or "")
    assert "Cross-Mode" in (tools["perplexity_deep_research_followup"].description or "")


def test_search_then_followups_in_both_modes_show_every_turn_in_order(client: McpClient) -> None:
    started = client.call("perplexity_search", {"query": "How do I cancel an asyncio task?"})
    assert not started.is_error, _text(started)
    data = _data(started)
    cid = data["conversationId"]
    text = _text(started)
    assert text.startswith("🔗 **Conversation Started**\n")
    assert f"Conversation ID: `{cid}`" in text
    assert f"Location: `{data['conversationPath']}`" in text
    assert "• Quick search: Use `perplexity_search_followup`" in text
    assert "• Deep dive: Use `perplexity_deep_research_followup`" in text
    sources = [Source.model_validate(s) for s in data["sources"]]
    assert data["answer"] and link_citations(data["answer"], sources) in text
    assert data["sources"] and data["sources"][0]["url"].startswith("https://docs.python.org/")
    assert data["usage"]["totalTokens"] > 0 and data["cost"]["totalCost"] >= 0
    assert data["usage"]["toolCalls"]["search_web"] >= 1
    # The default preset 'low' answers as the model it resolves to.
    assert data["model"] == "openai/gpt-5-mini" and "_Answered by openai/gpt-5-mini_" in text
    assert Path(data["conversationPath"], "conversation.json").is_file()

    quick = client.call(
        "perplexity_search_followup",
        {"conversationId": cid, "query": "What does asyncio.shield do?"},
    )
    assert not quick.is_error, _text(quick)
    assert _text(quick).startswith("🔗 **Conversation Continued**")
    assert _data(quick)["conversationId"] == cid

    progress: list[float] = []
    deep = client.call(
        "perplexity_deep_research_followup",
        {"conversationId": cid, "query": "Compare asyncio.wait_for and asyncio.timeout"},
        progress=progress,
    )
    assert not deep.is_error, _text(deep)
    assert _data(deep)["status"] == "completed" and _data(deep)["answer"]
    assert progress and progress == sorted(set(progress))

    history = client.call("get_conversation_history", {"conversationId": cid})
    assert not history.is_error, _text(history)
    turns = _data(history)["messages"]
    assert [m["role"] for m in turns] == ["user", "assistant"] * 3
    assert [m["content"] for m in turns[::2]] == [
        "How do I cancel an asyncio task?",
        "What does asyncio.shield do?",
        "Compare asyncio.wait_for and asyncio.timeout",
    ]
    assert [m["tool"] for m in turns[1::2]] == [
        "perplexity_search",
        "perplexity_search_followup",
        "perplexity_deep_research_followup",
    ]
    assert "job" not in _data(history)
    assert _text(history).index("What does asyncio.shield do?") < _text(history).index(
        "Compare asyncio.wait_for"
    )

    with_system = client.call(
        "get_conversation_history", {"conversationId": cid, "includeSystemPrompt": True}
    )
    assert _data(with_system)["messages"][0]["role"] == "system"

    def listed(**filters: Any) -> list[str]:
        result = client.call("list_conversations", {"limit": 50, **filters})
        assert not result.is_error, _text(result)
        return [c["conversationId"] for c in _data(result)["conversations"]]

    assert cid in listed()
    assert cid in listed(tool="perplexity_deep_research_followup", text="asyncio.shield")
    assert cid not in listed(text="no conversation mentions this phrase")
    assert listed(since="2999-01-01T00:00:00Z") == []
    bad = client.call("list_conversations", {"since": "yesterday-ish"})
    assert bad.is_error and _text(bad).startswith("VALIDATION_ERROR: ")


def test_blocking_deep_research_returns_the_report_with_progress(client: McpClient) -> None:
    progress: list[float] = []
    result = client.call(
        "perplexity_deep_research",
        {"query": "How do asyncio event loops run callbacks?", "reasoning_effort": "low"},
        progress=progress,
    )
    assert not result.is_error, _text(result)
    data = _data(result)
    assert data["status"] == "completed" and data["answer"] and data["sources"]
    assert _text(result).startswith("🔗 **Conversation Started**")
    assert progress and progress == sorted(set(progress))


def test_attached_files_reach_the_conversation_and_outside_files_are_refused(
    client: McpClient, logs_dir: Path
) -> None:
    notes = logs_dir.parent / "notes.txt"
    notes.write_text("Our service cancels asyncio tasks on shutdown.\n")
    result = client.call(
        "perplexity_search", {"query": "Is this shutdown approach sound?", "files": [str(notes)]}
    )
    assert not result.is_error, _text(result)
    cid = _data(result)["conversationId"]
    history = _data(client.call("get_conversation_history", {"conversationId": cid}))
    question = history["messages"][0]
    assert "cancels asyncio tasks on shutdown" in question["content"]
    assert question["files"] and question["files"][0]["sha256"]
    again = client.call(
        "perplexity_search_followup",
        {"conversationId": cid, "query": "And with a timeout?", "files": [str(notes)]},
    )
    assert not again.is_error, _text(again)
    assert _data(again)["notes"] == ["notes.txt is already in the conversation history."]
    assert "already in the conversation history" in _text(again)

    outside = client.call(
        "perplexity_search", {"query": "What is this?", "files": ["/etc/hostname"]}
    )
    assert outside.is_error and _text(outside).startswith("VALIDATION_ERROR: ")

    in_working_directory = client.call(
        "perplexity_search", {"query": "What is this?", "files": [str(ROOT / "README.md")]}
    )
    assert in_working_directory.is_error, "the server's working directory is not a file root"
    assert _text(in_working_directory).startswith("VALIDATION_ERROR: ")

    (logs_dir.parent / ".env").write_text("TOKEN=very-secret\n")
    hidden = client.call(
        "perplexity_search", {"query": "What is this?", "files": [str(logs_dir.parent / ".env")]}
    )
    assert hidden.is_error and _text(hidden).startswith("VALIDATION_ERROR: ")
    assert "hidden" in _text(hidden)


def test_a_server_started_from_the_filesystem_root_attaches_no_files(tmp_path: Path) -> None:
    logs = tmp_path / "conversation-logs"
    with McpClient(server_env(logs), tmp_path / "root.log", cwd=Path("/")) as mcp:
        result = mcp.call(
            "perplexity_search", {"query": "What is in here?", "files": ["/etc/passwd"]}
        )
        assert result.is_error
        text = _text(result)
        assert text.startswith("VALIDATION_ERROR: ") and "PPLX_NB_FILE_ROOTS" in text
        listed = _data(mcp.call("list_conversations", {}))
    assert listed["count"] == 0
    assert not logs.exists() or not any(logs.iterdir())


@pytest.mark.parametrize("root", ["/", str(Path.home())])
def test_a_root_or_home_file_root_stops_the_server_at_start_up(tmp_path: Path, root: str) -> None:
    env = {**os.environ, **server_env(tmp_path / "logs", PPLX_NB_FILE_ROOTS=root)}
    done = subprocess.run(
        [sys.executable, "-m", "pplx_nb.mcp"],
        env=env,
        cwd=ROOT,
        input=b"",
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == b""
    assert b"VALIDATION_ERROR: PPLX_NB_FILE_ROOTS holds" in done.stderr


INVALID, NOT_FOUND = "VALIDATION_ERROR", "CONVERSATION_NOT_FOUND"
ID_FORMAT, DATE_FORMAT = "yyyymmdd", "use MM/DD/YYYY, e.g. 01/31/2025"
BAD_CALLS = [
    ("perplexity_search_followup", {"conversationId": "../etc", "query": "hi"}, INVALID, ID_FORMAT),
    ("get_conversation_history", {"conversationId": "x" * 20}, INVALID, ID_FORMAT),
    (
        "perplexity_search_followup",
        {"conversationId": UNKNOWN_ID, "query": "hi"},
        NOT_FOUND,
        "perplexity_search",
    ),
    ("get_conversation_history", {"conversationId": UNKNOWN_ID}, NOT_FOUND, "perplexity_search"),
    ("perplexity_search", {"query": ""}, INVALID, "query"),
    ("perplexity_search", {"query": "   "}, INVALID, "query"),
    ("perplexity_search", {"query": "x" * 10_001}, INVALID, "query"),
    ("perplexity_search", {"query": "q", "search_domain_filter": ["a.com"] * 21}, INVALID, "20"),
    ("perplexity_deep_research", {}, INVALID, "query"),
    (
        "perplexity_search",
        {"query": "q", "search_after_date_filter": "13/45/2025"},
        INVALID,
        DATE_FORMAT,
    ),
    (
        "perplexity_search",
        {"query": "q", "search_before_date_filter": "2025-01-01"},
        INVALID,
        DATE_FORMAT,
    ),
    ("perplexity_search", {"query": "q", "search_recency_filter": "decade"}, INVALID, "'hour'"),
    (
        "perplexity_search",
        {"query": "q", "conversationId": UNKNOWN_ID},
        INVALID,
        "does not take conversationId",
    ),
    ("perplexity_search", {"query": "q", "showThinking": "yes"}, INVALID, "valid boolean"),
    ("perplexity_search", {"query": "q", "return_related_questions": "true"}, INVALID, "boolean"),
    ("list_conversations", {"limit": "5"}, INVALID, "limit: Input should be a valid integer"),
    ("cancel_deep_research", {"conversationId": "../x"}, INVALID, "conversation ID format"),
    ("cancel_deep_research", {"conversationId": UNKNOWN_ID}, "CONVERSATION_NOT_FOUND", ""),
    ("perplexity_web_search", {"query": "q", "max_results": 21}, INVALID, "max_results"),
    ("perplexity_web_search", {"query": "q", "country": "USA"}, INVALID, "country"),
    ("perplexity_web_search", {"query": "q", "max_results": 3.5}, INVALID, "max_results"),
    (
        "perplexity_search",
        {"query": "q", "search_domain_filter": ["docs.python.org", "-"]},
        INVALID,
        '"-" in search_domain_filter is not a domain',
    ),
    (
        "perplexity_web_search",
        {
            "query": "q",
            "search_after_date_filter": "02/01/2025",
            "search_before_date_filter": "01/31/2025",
        },
        INVALID,
        'search_after_date_filter="02/01/2025" is later than '
        'search_before_date_filter="01/31/2025"',
    ),
    (
        "perplexity_deep_research_followup",
        {
            "conversationId": UNKNOWN_ID,
            "query": "q",
            "search_after_date_filter": "02/01/2025",
            "search_before_date_filter": "01/31/2025",
        },
        INVALID,
        'search_after_date_filter="02/01/2025" is later than',
    ),
    ("perplexity_search", {"query": 5}, INVALID, "query: Input should be a valid string"),
    ("get_conversation_histories", {"conversationIds": []}, INVALID, "conversationIds"),
    ("get_conversation_histories", {"conversationIds": ["../x"]}, INVALID, "conversationIds"),
    (
        "await_conversation_histories",
        {"conversationIds": [UNKNOWN_ID], "timeoutSeconds": 0},
        INVALID,
        "timeoutSeconds",
    ),
]


@pytest.mark.parametrize(("tool", "arguments", "code", "hint"), BAD_CALLS)
def test_bad_calls_are_coded_error_results_and_the_server_lives_on(
    client: McpClient, tool: str, arguments: dict[str, Any], code: str, hint: str
) -> None:
    before = len(_data(client.call("list_conversations", {"limit": 200}))["conversations"])
    result = client.call(tool, arguments)
    assert result.is_error
    text = _text(result)
    assert text.startswith(f"{code}: ")
    assert hint in text
    assert result.structured_content is None, "strict clients validate it against the schema"
    after = len(_data(client.call("list_conversations", {"limit": 200}))["conversations"])
    assert after == before
    assert client.alive()


def test_an_unknown_tool_is_a_jsonrpc_error_naming_the_tools(client: McpClient) -> None:
    from mcp.shared.exceptions import MCPError

    with pytest.raises(MCPError) as caught:
        client.call("no_such_tool", {"query": "q"})
    assert caught.value.code == -32602
    assert "Unknown tool: no_such_tool" in caught.value.message
    assert all(name in caught.value.message for name in TOOLS)
    assert client.alive()


def test_a_whole_number_sent_as_a_float_counts_as_an_integer(client: McpClient) -> None:
    found = client.call("perplexity_web_search", {"query": "asyncio gather", "max_results": 3.0})
    assert not found.is_error, _text(found)
    assert 1 <= _data(found)["count"] <= 3
    listed = client.call("list_conversations", {"limit": 2.0})
    assert not listed.is_error, _text(listed)


def test_a_string_that_looks_like_json_stays_a_string(client: McpClient) -> None:
    for text in ("2024", "null", "[1]"):
        result = client.call("list_conversations", {"text": text})
        assert not result.is_error, _text(result)


def test_histories_read_several_conversations_and_report_errors_per_id(
    client: McpClient,
) -> None:
    first = _data(client.call("perplexity_search", {"query": "What is a generator?"}))
    second = _data(client.call("perplexity_search", {"query": "What is a decorator?"}))
    ids = [first["conversationId"], UNKNOWN_ID, second["conversationId"], UNKNOWN_ID]
    result = client.call("get_conversation_histories", {"conversationIds": ids})
    assert not result.is_error, _text(result)
    data = _data(result)
    assert list(data["conversations"]) == [ids[0], UNKNOWN_ID, ids[2]]
    assert data["count"] == 3 and data["pending"] == [] and data["timedOut"] is False
    found = data["conversations"][ids[0]]
    assert found["status"] == "answered" and found["report"] == first["answer"]
    assert [m["role"] for m in found["conversation"]["messages"]] == ["user", "assistant"]
    missing = data["conversations"][UNKNOWN_ID]
    assert missing["status"] == "error"
    assert missing["error"]["code"] == "CONVERSATION_NOT_FOUND"
    assert f"CONVERSATION_NOT_FOUND: Conversation {UNKNOWN_ID}" in _text(result)


def test_health_resource_reports_status_and_metrics(client: McpClient) -> None:
    result = client.portal.call(client.session.read_resource, "pplx://health")
    report = json.loads(result.contents[0].text)  # type: ignore[union-attr]
    assert report["status"] in ("healthy", "degraded", "unhealthy")
    assert report["checks"]["store"] is True
    assert "requests" in json.dumps(report["metrics"])


def _wait_for_job(mcp: McpClient, cid: str) -> CallToolResult:
    """Poll get_conversation_history until the job is no longer pending or running."""
    deadline = time.monotonic() + 30
    while True:
        history = mcp.call("get_conversation_history", {"conversationId": cid})
        job = _data(history)["job"]
        assert job is not None and job["status"] in ("pending", "in_progress", "completed")
        if job["status"] == "completed" or time.monotonic() > deadline:
            return history
        time.sleep(0.2)


class _CompletingAsRead:
    """A conversation whose queued follow-up completes between the first read and the second:
    the first read of either sees it running, the second its new answer stored."""

    def __init__(self) -> None:
        self.completed = False

    def _after_first_read(self) -> bool:
        completed, self.completed = self.completed, True
        return completed

    def status(self, conversation_id: str) -> Any:
        state = "completed" if self._after_first_read() else "in_progress"
        return SimpleNamespace(status=state, progress=None, to_json_dict=lambda: {"status": state})

    def history(self, conversation_id: str, include_system: bool = False) -> Any:
        text = "the follow-up's report" if self._after_first_read() else "the first report"
        answer = SimpleNamespace(answer_text=text)
        return SimpleNamespace(
            messages=[answer], last_answer=lambda: answer, to_json_dict=lambda: {}
        )


def test_a_history_read_as_its_job_completes_never_shows_the_earlier_report_as_done() -> None:
    from pplx_nb.mcp._histories import _entry

    entry = _entry(cast(Researcher, _CompletingAsRead()), "c1", False)
    assert (entry.status, entry.report) != ("completed", "the first report")
    assert entry.status == "in_progress" and entry.report is None


def test_async_deep_research_answers_at_once_and_history_shows_it_completed(
    async_client: McpClient,
) -> None:
    queued = async_client.call(
        "perplexity_deep_research", {"query": "How does asyncio schedule callbacks?"}
    )
    assert not queued.is_error, _text(queued)
    text = _text(queued)
    assert text.startswith("🆕 **New Conversation Started**\n")
    assert "queued for background processing" in text and "`get_conversation_history`" in text
    cid = _data(queued)["conversationId"]
    # Answered before the job ran: the result says it is still pending (a wall-clock bound
    # here failed on a loaded machine, which proves nothing about waiting).
    assert _data(queued)["status"] == "pending"

    blocked = async_client.call(
        "perplexity_search_followup", {"conversationId": cid, "query": "and in trio?"}
    )
    assert blocked.is_error and _text(blocked).startswith("JOB_IN_PROGRESS: ")

    history = _wait_for_job(async_client, cid)
    assert _data(history)["job"]["status"] == "completed"
    assert "completed" in _text(history)
    messages = _data(history)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["tool"] == "perplexity_deep_research" and messages[1]["content"]

    again = async_client.call(
        "perplexity_deep_research_followup",
        {"conversationId": cid, "query": "How do call_soon and call_later differ?"},
    )
    assert not again.is_error, _text(again)
    assert "follow-up has been queued" in _text(again)
    assert _data(again)["status"] == "pending" and _data(again)["conversationId"] == cid
    messages = _data(_wait_for_job(async_client, cid))["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 2
    assert messages[3]["tool"] == "perplexity_deep_research_followup"
    assert "Async deep research: enabled" in async_client.errlog.read_text()


def test_conversation_from_a_researcher_continues_through_the_mcp_server(
    client: McpClient, logs_dir: Path
) -> None:
    settings = Settings(
        offline=True, sim_latency_ms=0, conversation_logs_dir=logs_dir, api_key=None
    )
    with Researcher(settings) as researcher:
        answer = researcher.search("What is a context manager?")
    assert answer.conversation_id is not None

    result = client.call(
        "perplexity_search_followup",
        {"conversationId": answer.conversation_id, "query": "How does contextlib help?"},
    )
    assert not result.is_error, _text(result)
    history = client.call("get_conversation_history", {"conversationId": answer.conversation_id})
    contents = [m["content"] for m in _data(history)["messages"]]
    assert contents[0] == "What is a context manager?"
    assert contents[1] == answer.text
    assert contents[2] == "How does contextlib help?"
    assert len(contents) == 4


def _raw_lines(process: subprocess.Popen[bytes]) -> queue.Queue[bytes]:
    lines: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        try:
            for line in process.stdout:
                lines.put(line)
        except ValueError:
            return  # the test closed the pipe while this thread was still reading

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _response(lines: queue.Queue[bytes], request_id: int, seen: list[bytes]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        seen.append(line)
        message: dict[str, Any] = json.loads(line)
        if message.get("id") == request_id and ("result" in message or "error" in message):
            return message
    raise AssertionError(f"no response to request {request_id}")


MALFORMED = [
    b"{",
    b"not json at all",
    b"[1, 2, 3]",
    b'{"jsonrpc": "2.0"}',
    b'{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}',
    b'{"jsonrpc": "2.0", "id": {"nested": 1}, "method": "tools/list"}',
    b'{"jsonrpc": "2.0", "method": 42}',
    b"\xff\xfe\x00 binary",
    b"null",
    b'"a string"',
]


# The server as `python -m pplx_nb.mcp` runs it, with library code that prints to stdout during a
# tool call, on the event loop and from a thread: those lines must land on stderr.
NOISY_SERVER = """
import sys, threading
from pplx_nb.research import Researcher

ask = Researcher.asearch

async def noisy(self, *args, **kwargs):
    print("stray print during a call")
    thread = threading.Thread(target=print, args=("stray print from a thread",))
    thread.start()
    thread.join()
    return await ask(self, *args, **kwargs)

Researcher.asearch = noisy
from pplx_nb.mcp.__main__ import main
sys.exit(main())
"""


def test_malformed_jsonrpc_lines_do_not_stop_the_server_and_stdout_is_only_jsonrpc(
    tmp_path: Path,
) -> None:
    env = {**os.environ, **server_env(tmp_path / "logs")}
    stderr = tmp_path / "stderr.txt"
    with stderr.open("wb") as errors:
        process = subprocess.Popen(
            [sys.executable, "-c", NOISY_SERVER],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
        )
    assert process.stdin is not None
    lines = _raw_lines(process)
    seen: list[bytes] = []

    def send(message: dict[str, Any] | bytes) -> None:
        assert process.stdin is not None
        raw = message if isinstance(message, bytes) else json.dumps(message).encode()
        process.stdin.write(raw + b"\n")
        process.stdin.flush()

    try:
        send(INITIALIZE)
        assert "result" in _response(lines, 1, seen)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for index in range(200):
            send(MALFORMED[index % len(MALFORMED)])
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = _response(lines, 2, seen)["result"]["tools"]
        assert {tool["name"] for tool in tools} == TOOLS
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "perplexity_search", "arguments": {"query": "What is a coroutine?"}},
        }
        send(call)
        result = _response(lines, 3, seen)["result"]
        assert result.get("isError") is not True, result
        assert result["structuredContent"]["answer"]
    finally:
        process.stdin.close()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    assert process.returncode == 0
    while not lines.empty():
        seen.append(lines.get())
    for line in seen:
        message = json.loads(line)
        assert isinstance(message, dict) and message["jsonrpc"] == "2.0", line
    logged = stderr.read_text()
    assert "stray print during a call" in logged and "stray print from a thread" in logged
    assert "Async deep research: disabled" in logged


def test_a_request_holding_a_lone_surrogate_gets_a_reply_over_stdio(tmp_path: Path) -> None:
    env = {**os.environ, **server_env(tmp_path / "logs")}
    process = subprocess.Popen(
        [sys.executable, "-m", "pplx_nb.mcp"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None
    lines = _raw_lines(process)
    seen: list[bytes] = []

    def send(line: str) -> None:
        assert process.stdin is not None
        process.stdin.write(line.encode() + b"\n")
        process.stdin.flush()

    def call(request_id: int, arguments: str) -> str:
        return (
            f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":'
            f'{{"name":"perplexity_web_search","arguments":{arguments}}}}}'
        )

    try:
        send(json.dumps(INITIALIZE))
        assert "result" in _response(lines, 1, seen)
        send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        send(call(2, '{"query":"\\ud800 asyncio"}'))
        send(call(3, '{"query":"asyncio","search_domain_filter":["python.org","\\udc00.org"]}'))
        send(call(4, '{"query":"asyncio","\\ud800":1}'))
        send('{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"\\ud800"}}')
        send('{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"x":"\\ud800"}}')
        send(call(6, '{"query":"asyncio"}'))
        replies = {n: _response(lines, n, seen) for n in range(2, 7)}
    finally:
        process.stdin.close()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    texts = {
        n: reply["result"]["content"][0]["text"]
        for n, reply in replies.items()
        if reply.get("result", {}).get("isError")
    }
    assert texts[2].startswith(
        "VALIDATION_ERROR: The argument query holds a lone surrogate at character 0"
    )
    assert "The argument search_domain_filter[1] holds a lone surrogate" in texts[3]
    assert "An argument's name holds a lone surrogate" in texts[4]
    assert replies[5]["error"]["code"] == -32602
    assert "params.uri holds a lone surrogate" in replies[5]["error"]["message"]
    assert not replies[6]["result"].get("isError") and replies[6]["result"]["structuredContent"]
    answered = [json.loads(line).get("id") for line in seen]
    assert sorted(i for i in answered if i is not None) == [1, 2, 3, 4, 5, 6], "one reply each"


def test_progress_relay_sends_a_heartbeat_that_always_increases() -> None:
    sent: list[tuple[float, float | None, str | None]] = []

    async def sink(progress: float, total: float | None = None, message: str | None = None) -> None:
        sent.append((progress, total, message))

    async def run() -> None:
        relay = ProgressRelay(sink, heartbeat=0.05)
        async with relay.running():
            relay(Progress(percentage=25, message="Querying Perplexity API..."))
            await anyio.sleep(0.18)
            relay(Progress(percentage=50, message="Processing response..."))
            await anyio.sleep(0.02)

    anyio.run(run)
    values = [value for value, _, _ in sent]
    assert len(sent) >= 4
    assert values == sorted(set(values))
    assert values[0] == 25 and values[-1] == 50
    assert sent[1][2] is not None and sent[1][2].startswith("Querying Perplexity API...")
    assert all(total == 100 for _, total, _ in sent)


def test_progress_relay_advances_a_repeated_step_by_exact_hundredths() -> None:
    sent: list[float] = []

    async def sink(progress: float, total: float | None = None, message: str | None = None) -> None:
        sent.append(progress)

    async def run() -> None:
        relay = ProgressRelay(sink, heartbeat=3600)
        async with relay.running():
            for percentage in (0,) * 8 + (94,) * 4:
                before = len(sent)
                relay(Progress(percentage=percentage, message="Searching"))
                with anyio.fail_after(30):
                    while len(sent) == before:
                        await anyio.sleep(0.001)

    anyio.run(run)
    assert sent == [0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 94, 94.01, 94.02, 94.03]


def test_http_transport_serves_the_same_tools(tmp_path: Path) -> None:
    async def tool_names(port: int) -> set[str]:
        async with (
            streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return {tool.name for tool in (await session.list_tools()).tools}

    with http_server(tmp_path / "logs") as port:
        assert anyio.run(tool_names, port) == TOOLS


def test_a_refused_key_is_a_coded_error_and_never_shown(tmp_path: Path) -> None:
    from pplx_nb.sim import serve

    wrong_key = "pplx-wrong-SECRET-0123456789abcdef"
    with serve(latency_ms=0, api_key="pplx-the-right-one-0123456789") as url:
        env = server_env(
            tmp_path / "logs",
            PPLX_NB_OFFLINE="0",
            PERPLEXITY_BASE_URL=url,
            PERPLEXITY_API_KEY=wrong_key,
            LOG_LEVEL="debug",
        )
        with McpClient(env, tmp_path / "server.log") as mcp:
            result = mcp.call("perplexity_search", {"query": "What is a coroutine?"})
            health = mcp.portal.call(mcp.session.read_resource, "pplx://health")
    assert result.is_error
    assert _text(result).startswith("API_KEY_INVALID: ")
    shown = [_text(result), json.dumps(result.structured_content), str(health)]
    shown.append((tmp_path / "server.log").read_text())
    assert "Tool perplexity_search failed: API_KEY_INVALID" in shown[-1]
    assert not any("SECRET-0123456789" in text for text in shown)


def test_a_researcher_handed_to_the_server_is_not_changed_and_files_need_its_roots(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pplx_nb.mcp.server import create_server

    work, shared = tmp_path / "work", tmp_path / "shared"
    for folder in (work, shared):
        folder.mkdir()
        (folder / "notes.md").write_text(f"Notes kept in {folder.name}.\n")
    monkeypatch.chdir(work)
    researcher = Researcher(settings.model_copy(update={"file_roots": (shared,)}))
    try:
        server = create_server(researcher=researcher)

        async def calls() -> list[CallToolResult]:
            results = [
                await server.call_tool(
                    "perplexity_search", {"query": "What do the notes say?", "files": [str(path)]}
                )
                for path in (work / "notes.md", shared / "notes.md")
            ]
            await researcher.aclose()
            return results

        refused, accepted = anyio.run(calls)
        assert refused.is_error and _text(refused).startswith("VALIDATION_ERROR: ")
        assert not accepted.is_error, _text(accepted)
        assert researcher.attach_from_working_directory
        answer = researcher.search("And here?", files=["notes.md"])
        assert answer.conversation_id
    finally:
        researcher.close()


def test_history_says_when_a_followup_is_still_being_answered_and_followups_wait(
    client: McpClient,
) -> None:
    from pplx_nb._layout import ANSWERING_FILE

    first = client.call("perplexity_search", {"query": "How do I cancel an asyncio task?"})
    cid, path = _data(first)["conversationId"], Path(_data(first)["conversationPath"])
    store = open_store(root=path.parent)
    # What a search follow-up in flight leaves (this process is alive, so the marker is live).
    with store.locked(cid):
        token = store.mark_answering(cid, 600)
    since = json.loads((path / ANSWERING_FILE).read_text())["startedAt"]
    try:
        history = client.call("get_conversation_history", {"conversationId": cid})
        assert _data(history)["answeringSince"] == since
        assert f"The follow-up asked at {since} is still being answered" in _text(history)
        blocked = client.call(
            "perplexity_search_followup", {"conversationId": cid, "query": "and with a timeout?"}
        )
        assert blocked.is_error and _text(blocked).startswith("JOB_IN_PROGRESS: ")
        assert "still answering" in _text(blocked)
    finally:
        with store.locked(cid):
            store.clear_answering(cid, token)
    history = client.call("get_conversation_history", {"conversationId": cid})
    assert "answeringSince" not in _data(history)
    assert "still being answered" not in _text(history)
    answered = client.call(
        "perplexity_search_followup", {"conversationId": cid, "query": "and with a timeout?"}
    )
    assert not answered.is_error, _text(answered)


def test_a_call_waiting_on_a_conversation_lock_does_not_stall_other_calls(
    client: McpClient,
) -> None:
    from pplx_nb._fs import locked

    started = _data(client.call("perplexity_search", {"query": "What is a lock?"}))
    cid, path = started["conversationId"], Path(started["conversationPath"])
    outcome: list[CallToolResult] = []
    with locked(path):
        waiting = threading.Thread(
            target=lambda: outcome.append(
                client.call(
                    "perplexity_search_followup", {"conversationId": cid, "query": "And RLock?"}
                )
            )
        )
        waiting.start()
        time.sleep(1.0)  # the follow-up is now waiting for the lock this test holds
        assert waiting.is_alive()
        took = []
        for _ in range(3):
            begin = time.perf_counter()
            listed = client.call("list_conversations", {"limit": 5})
            took.append(time.perf_counter() - begin)
            assert not listed.is_error, _text(listed)
        history = client.call("get_conversation_history", {"conversationId": cid})
        assert _data(history)["messageCount"] == 2
        assert waiting.is_alive(), "the follow-up cannot have finished while the lock is held"
    waiting.join(timeout=60)
    assert max(took) < 1.5, took
    assert outcome and not outcome[0].is_error, _text(outcome[0])
    history = client.call("get_conversation_history", {"conversationId": cid})
    assert _data(history)["messageCount"] == 4


def test_await_histories_waits_for_queued_research_with_moving_progress(
    async_client: McpClient,
) -> None:
    ids = [
        _data(async_client.call("perplexity_deep_research", {"query": query}))["conversationId"]
        for query in ("How do asyncio locks work?", "How do asyncio queues work?")
    ]
    early = async_client.call(
        "await_conversation_histories", {"conversationIds": ids, "timeoutSeconds": 0.2}
    )
    assert not early.is_error, _text(early)
    if _data(early)["timedOut"]:
        assert _data(early)["pending"] and "call `await_conversation_histories` again" in _text(
            early
        )
    progress: list[float] = []
    done = async_client.call(
        "await_conversation_histories",
        {"conversationIds": ids, "timeoutSeconds": 60},
        progress=progress,
    )
    assert not done.is_error, _text(done)
    data = _data(done)
    assert data["timedOut"] is False and data["pending"] == []
    for cid in ids:
        entry = data["conversations"][cid]
        assert entry["status"] == "completed" and entry["job"]["status"] == "completed"
        assert entry["report"] and entry["report"] in _text(done)
    assert progress and progress == sorted(set(progress))


def test_blocking_deep_research_notifications_say_what_the_run_is_doing(tmp_path: Path) -> None:
    env = server_env(tmp_path / "logs", PPLX_NB_SIM_DEEP_RESEARCH_SECONDS="3")
    with McpClient(env, tmp_path / "server.log") as mcp:
        progress: list[float] = []
        messages: list[str] = []
        result = mcp.call(
            "perplexity_deep_research",
            {"query": "How do asyncio tasks work?"},
            progress=progress,
            messages=messages,
        )
    assert not result.is_error, _text(result)
    assert progress == sorted(set(progress))
    assert any(m.startswith("Searching: ") for m in messages), messages
    assert any(m.startswith("Writing the report...") for m in messages), messages


def test_a_queued_research_job_reports_progress_that_moves(tmp_path: Path) -> None:
    env = server_env(
        tmp_path / "logs",
        PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH="true",
        PPLX_NB_SIM_DEEP_RESEARCH_SECONDS="4",
    )
    with McpClient(env, tmp_path / "server.log") as mcp:
        queued = mcp.call("perplexity_deep_research", {"query": "How do asyncio tasks work?"})
        cid = _data(queued)["conversationId"]
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job = _data(mcp.call("get_conversation_history", {"conversationId": cid}))["job"]
            if job["status"] == "completed":
                break
            if job.get("progress"):
                seen.append(job["progress"]["percentage"])
            time.sleep(0.2)
    running = [value for value in seen if value > 25]
    assert len(set(running)) >= 3, seen
    assert running == sorted(running) and max(running) < 100


def test_a_queued_research_jobs_percentage_moves_on_most_polls_and_waits_to_say_85(
    tmp_path: Path,
) -> None:
    seconds = 10.0
    env = server_env(
        tmp_path / "logs",
        PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH="true",
        PPLX_NB_SIM_DEEP_RESEARCH_SECONDS=str(seconds),
    )
    with McpClient(env, tmp_path / "server.log") as mcp:
        # The first search builds the Researcher and loads the simulator's corpus, which on a
        # busy machine takes seconds that would otherwise pass before the first poll.
        assert not mcp.call("perplexity_search", {"query": "What is asyncio?"}).is_error
        started = time.monotonic()
        queued = mcp.call("perplexity_deep_research", {"query": "How do asyncio tasks work?"})
        cid = _data(queued)["conversationId"]
        polls: list[tuple[float, int]] = []
        deadline = started + 120
        while time.monotonic() < deadline:
            waited = mcp.call(
                "await_conversation_histories", {"conversationIds": [cid], "timeoutSeconds": 0.5}
            )
            entry = _data(waited)["conversations"][cid]
            if entry["status"] not in ("pending", "in_progress"):
                break
            if entry["progress"]:
                polls.append((time.monotonic() - started, entry["progress"]["percentage"]))
        assert entry["status"] == "completed", entry
    percentages = [p for _, p in polls]
    assert len(polls) >= 6, polls
    assert percentages == sorted(percentages) and max(percentages) < 100, polls
    moved = sum(later != earlier for earlier, later in pairwise(percentages))
    assert moved / (len(polls) - 1) > 0.5, polls
    # The clock starts before the job is queued, so the run is never further on than this.
    assert all(p < 85 for elapsed, p in polls if elapsed < seconds / 2), polls


def test_loop_pool_runs_a_blocking_call_beside_others_and_cancels_on_request() -> None:
    from pplx_nb.mcp._offload import LoopPool

    pool = LoopPool(size=2)
    ended: list[str] = []

    async def blocking() -> str:
        time.sleep(1.0)  # a lock wait: blocks its own loop only
        return "blocked"

    async def quick() -> str:
        return "quick"

    async def endless() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append("cancelled")

    async def scenario() -> tuple[list[str], float]:
        results: list[str] = []
        async with anyio.create_task_group() as group:

            async def slow() -> None:
                results.append(await pool.run(blocking()))

            group.start_soon(slow)
            await anyio.sleep(0.1)
            begin = time.perf_counter()
            results.append(await pool.run(quick()))
            took = time.perf_counter() - begin
        with anyio.move_on_after(0.3):
            await pool.run(endless())
        deadline = time.monotonic() + 5
        while not ended and time.monotonic() < deadline:
            await anyio.sleep(0.01)
        results.append(await pool.run(quick()))
        return results, took

    try:
        results, took = anyio.run(scenario)
        assert len(pool.loops) == 2, "a loop per call running at once, reused after"
    finally:
        pool.close()
    assert results == ["quick", "blocked", "quick"]
    assert took < 0.5
    assert ended == ["cancelled"]


def test_web_search_returns_results_as_data_and_stores_them_only_when_saved(
    client: McpClient,
) -> None:
    def count() -> int:
        return len(_data(client.call("list_conversations", {"limit": 200}))["conversations"])

    before = count()
    result = client.call(
        "perplexity_web_search",
        {"query": "asyncio gather", "max_results": 3, "search_domain_filter": ["docs.python.org"]},
    )
    assert not result.is_error, _text(result)
    data = _data(result)
    assert 1 <= data["count"] == len(data["results"]) <= 3
    assert all(
        r["url"].startswith("https://docs.python.org/") and r["title"] for r in data["results"]
    )
    assert "conversationId" not in data and count() == before
    assert data["results"][0]["url"] in _text(result)

    saved = _data(client.call("perplexity_web_search", {"query": "asyncio gather", "save": True}))
    cid = saved["conversationId"]
    assert cid and saved["conversationPath"] and count() == before + 1
    messages = _data(client.call("get_conversation_history", {"conversationId": cid}))["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["tool"] == "perplexity_web_search"
    followup = client.call(
        "perplexity_search_followup",
        {"conversationId": cid, "query": "Which of these waits for every awaitable?"},
    )
    assert not followup.is_error, _text(followup)


def test_cancel_deep_research_stops_a_running_job_and_the_conversation_goes_on(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "conversation-logs"
    env = server_env(
        logs,
        PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH="true",
        PPLX_NB_SIM_DEEP_RESEARCH_SECONDS="60",
    )
    with McpClient(env, tmp_path / "cancel.log") as mcp:
        queued = _data(mcp.call("perplexity_deep_research", {"query": "Compare trio and asyncio"}))
        cid = queued["conversationId"]
        deadline = time.monotonic() + 30
        while not (
            _data(mcp.call("get_conversation_history", {"conversationId": cid}))["job"] or {}
        ).get("remoteId"):
            assert time.monotonic() < deadline, "the job never submitted its run"
            time.sleep(0.1)
        result = mcp.call("cancel_deep_research", {"conversationId": cid})
        assert not result.is_error, _text(result)
        data = _data(result)
        assert data["status"] == "cancelled" and data["cancelled"] is True
        assert data["remoteId"] and data["remoteCancelled"] is True and data["costUnknown"]
        assert _text(result).startswith("🚫 **Research cancelled**")
        assert "perplexity_deep_research_followup" in _text(result)
        history = _data(mcp.call("get_conversation_history", {"conversationId": cid}))
        assert history["job"]["status"] == "cancelled"
        assert history["messages"][-1]["unanswered"]["state"] == "cancelled"
        followup = mcp.call(
            "perplexity_search_followup", {"conversationId": cid, "query": "What is trio?"}
        )
        assert not followup.is_error, _text(followup)
        repeated = mcp.call("cancel_deep_research", {"conversationId": cid})
        again = _data(repeated)
        assert again["status"] == "cancelled" and "remoteCancelled" not in again
        assert again["cancelled"] is False and "was already cancelled at" in again["message"]
        assert _text(repeated).startswith("ℹ️ **Nothing to cancel**")
        assert "asked to stop" not in again["message"]
        plain = _data(mcp.call("perplexity_search", {"query": "What is a coroutine?"}))
        none = mcp.call("cancel_deep_research", {"conversationId": plain["conversationId"]})
        assert not none.is_error and "status" not in _data(none)
        assert _text(none).startswith("ℹ️ **Nothing to cancel**")


def test_resources_list_the_newest_hundred_and_ids_complete_newest_first(tmp_path: Path) -> None:
    from mcp import Client
    from mcp_types import ResourceTemplateReference

    from pplx_nb.mcp.server import create_server

    settings = Settings(offline=True, conversation_logs_dir=tmp_path / "logs")
    store = open_store(settings)
    made = [
        store.create([{"role": "user", "content": f"q{n}"}]).conversation_id for n in range(105)
    ]
    newest = sorted(made, reverse=True)
    template = ResourceTemplateReference(type="ref/resource", uri="pplx://conversations/{id}")

    async def ask() -> tuple[list[str], list[Any]]:
        async with Client(create_server(settings)) as client:
            listed = await client.list_resources()
            completions = [
                (await client.complete(template, {"name": "id", "value": value})).completion
                for value in ("", newest[0], "2019")
            ]
            return [str(r.uri) for r in listed.resources], completions

    uris, (every, one, none) = asyncio.run(ask())
    assert uris == ["pplx://health"] + [f"pplx://conversations/{cid}" for cid in newest[:100]]
    assert every.values == newest[:100] and every.total == 105 and every.has_more is True
    assert one.values == [newest[0]] and one.total == 1 and not one.has_more
    assert none.values == [] and none.total == 0


def test_get_references_returns_the_sources_as_references_in_the_format_asked(
    client: McpClient,
) -> None:
    from bibtexparser.entrypoint import parse_string

    asked = _data(client.call("perplexity_search", {"query": "How do I cancel an asyncio task?"}))
    cid = asked["conversationId"]
    result = client.call("get_references", {"conversationIds": [cid]})
    assert not result.is_error, _text(result)
    found = _data(result)
    assert found["format"] == "bibtex" and found["count"] >= 1
    entries = parse_string(found["text"]).entries
    assert [entry.key for entry in entries] == [item["id"] for item in found["references"]]
    assert {item["URL"] for item in found["references"]} <= {s["url"] for s in asked["sources"]}
    assert found["text"] in _text(result)
    everything = _data(client.call("get_references", {"all": True, "format": "csl-json"}))
    assert {i["id"] for i in found["references"]} <= {i["id"] for i in everything["references"]}
    neither = client.call("get_references", {})
    assert neither.is_error and _text(neither).startswith("VALIDATION_ERROR: Pass conversationIds")
    wrong = client.call("get_references", {"all": True, "format": "endnote"})
    assert wrong.is_error and "format" in _text(wrong)
