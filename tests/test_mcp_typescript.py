"""The MCP server as the official TypeScript SDK client meets it, over stdio and over HTTP.

Claude Desktop, Claude Code and the MCP Inspector are built on that client, and it is stricter
than the Python one: it validates every structured result against the tool's output schema
(and throws ``-32602`` when one does not match). ``tests/node/drive.mjs`` calls every tool with
valid and invalid input, and also checks each structured result with ajv. The HTTP tests cover
the bearer token and the Host/Origin checks on a loopback and a non-loopback bind. The MCP
Inspector's CLI checks in ``--strict`` mode that every tool schema is portable (no type arrays,
which clients mapping a schema onto one type per field reject).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.mcp import INITIALIZE, ROOT, TOOLS, UNKNOWN_ID, http_server, server_env
from support.node import drive, inspect

TOKEN = "test-token-0123456789abcdef-SECRET"


def _env(logs: Path, **extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "")}
    return {**env, **server_env(logs, LOG_LEVEL="warning"), **extra}


# (tool, arguments, the error code its result text starts with); every tool has one or more.
INVALID = [
    ("perplexity_search", {"query": ""}, "VALIDATION_ERROR"),
    ("perplexity_search", {"query": "q", "showThinking": "yes"}, "VALIDATION_ERROR"),
    ("perplexity_search", {"query": "q", "unknown": 1}, "VALIDATION_ERROR"),
    ("perplexity_deep_research", {}, "VALIDATION_ERROR"),
    ("perplexity_deep_research", {"query": "q", "reasoning_effort": "max"}, "VALIDATION_ERROR"),
    (
        "perplexity_search_followup",
        {"conversationId": UNKNOWN_ID, "query": "hi"},
        "CONVERSATION_NOT_FOUND",
    ),
    (
        "perplexity_deep_research_followup",
        {"conversationId": "../etc", "query": "hi"},
        "VALIDATION_ERROR",
    ),
    ("get_conversation_history", {"conversationId": UNKNOWN_ID}, "CONVERSATION_NOT_FOUND"),
    ("get_conversation_histories", {"conversationIds": []}, "VALIDATION_ERROR"),
    ("await_conversation_histories", {"conversationIds": ["x"]}, "VALIDATION_ERROR"),
    ("list_conversations", {"limit": "5"}, "VALIDATION_ERROR"),
    ("perplexity_web_search", {"query": "q", "max_results": 50}, "VALIDATION_ERROR"),
    ("cancel_deep_research", {"conversationId": UNKNOWN_ID}, "CONVERSATION_NOT_FOUND"),
    ("get_references", {}, "VALIDATION_ERROR"),
    ("get_references", {"all": True, "format": "endnote"}, "VALIDATION_ERROR"),
]


def _valid_calls(async_mode: bool) -> list[dict[str, Any]]:
    return [
        {"name": "perplexity_search", "arguments": {"query": "What is a coroutine?"}, "save": "a"},
        {
            "name": "perplexity_search_followup",
            "arguments": {"conversationId": "${a}", "query": "How is it awaited?"},
        },
        {
            "name": "perplexity_deep_research",
            "arguments": {"query": "How does asyncio schedule tasks?", "reasoning_effort": "low"},
            "save": "b",
        },
        {
            "name": "perplexity_deep_research_followup",
            "arguments": {"conversationId": "${a}", "query": "Compare trio and asyncio"},
        },
        {"name": "get_conversation_history", "arguments": {"conversationId": "${a}"}},
        {
            "name": "await_conversation_histories",
            "arguments": {"conversationIds": ["${a}", "${b}"], "timeoutSeconds": 60},
        },
        {
            "name": "get_conversation_histories",
            "arguments": {"conversationIds": ["${a}", "${b}", UNKNOWN_ID]},
        },
        {"name": "list_conversations", "arguments": {"limit": 10, "text": "coroutine"}},
        {
            "name": "perplexity_web_search",
            "arguments": {"query": "asyncio gather", "max_results": 3, "save": True},
        },
        {
            "name": "perplexity_deep_research",
            "arguments": {"query": "How do asyncio tasks get cancelled?"},
            "save": "c",
        },
        {"name": "cancel_deep_research", "arguments": {"conversationId": "${c}"}},
        {"name": "get_references", "arguments": {"conversationIds": ["${a}"], "format": "ris"}},
    ]


def _plan_calls(async_mode: bool) -> list[dict[str, Any]]:
    invalid = [{"name": name, "arguments": args} for name, args, _ in INVALID]
    invalid.append({"name": "perplexity_search", "arguments": {"query": "q", "files": ["a.txt"]}})
    invalid.append({"name": "no_such_tool", "arguments": {}})
    return _valid_calls(async_mode) + invalid


def _text(result: dict[str, Any]) -> str:
    block = result["content"][0]
    assert block["type"] == "text"
    return str(block["text"])


def _check_report(report: dict[str, Any], *, async_mode: bool, attachments: bool) -> None:
    assert report["connectError"] is None, report["connectError"]
    assert report["capabilities"]["resources"]["listChanged"] is True
    tools = {tool["name"]: tool for tool in report["tools"]}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool["inputSchema"]["additionalProperties"] is False, tool["name"]
        assert tool["outputSchema"]["type"] == "object", tool["name"]
    assert ("files" in tools["perplexity_search"]["inputSchema"]["properties"]) is attachments

    results = report["results"]
    valid = results[: len(_valid_calls(async_mode))]
    for entry in valid:
        assert entry["error"] is None, (entry["name"], entry["error"])
        result = entry["result"]
        assert not result.get("isError"), (entry["name"], _text(result))
        assert result["structuredContent"], entry["name"]
        assert entry["schemaErrors"] is None, (entry["name"], entry["schemaErrors"])

    search, _, research, _, _, awaited, batch, listed, web, _, cancel, cited = (
        e["result"] for e in valid
    )
    first, second = (r["structuredContent"]["conversationId"] for r in (search, research))
    # Four calls start a conversation (a search, two deep researches, the saved web search; five
    # with the search that attaches a file): each is announced, and every result that names
    # conversations links to them.
    assert report["listChanged"] == 4 + attachments
    for entry in valid:
        links = [b["uri"] for b in entry["result"]["content"] if b["type"] == "resource_link"]
        named = entry["result"]["structuredContent"].get("conversationId")
        if named:
            assert links == [f"pplx://conversations/{named}"], entry["name"]
    links = [b.get("uri") for b in batch["content"][1:]]
    assert links == [f"pplx://conversations/{first}", f"pplx://conversations/{second}"]
    assert listed["content"][1:] == []
    if async_mode:
        assert research["structuredContent"]["status"] == "pending"
        assert _text(research).startswith("🆕 **New Conversation Started**")
    else:
        assert valid[2]["progress"], "blocking deep research sends progress notifications"
    waited = awaited["structuredContent"]
    assert waited["timedOut"] is False and waited["pending"] == []
    assert waited["conversations"][second]["status"] in ("completed", "answered")
    assert waited["conversations"][second]["report"]
    entries = batch["structuredContent"]["conversations"]
    assert entries[first]["conversation"]["messageCount"] == 6
    assert entries[UNKNOWN_ID]["error"]["code"] == "CONVERSATION_NOT_FOUND"
    assert first in [c["conversationId"] for c in listed["structuredContent"]["conversations"]]
    found = web["structuredContent"]
    assert 1 <= found["count"] <= 3 and found["conversationId"]
    assert all(r["url"].startswith("https://") for r in found["results"])
    references = cited["structuredContent"]
    assert references["format"] == "ris" and references["count"] >= 1
    assert references["text"].startswith("TY  - ELEC")
    assert [item["id"] for item in references["references"]] == re.findall(
        r"^ID  - (\S+)$", references["text"], re.MULTILINE
    )
    stopped = cancel["structuredContent"]
    if async_mode:  # queued a moment ago: cancelled, unless it already finished
        assert stopped["status"] in ("cancelled", "completed"), stopped
    else:  # answered on the spot: there was never a job
        assert "status" not in stopped and stopped["cancelled"] is False

    invalid = results[len(valid) :]
    files_call = invalid.pop(len(INVALID))
    expected = [code for _, _, code in INVALID]
    for entry, code in zip(invalid, expected, strict=False):
        assert entry["error"] is None, (entry["name"], entry["error"])
        result = entry["result"]
        assert result["isError"] is True, entry["name"]
        assert "structuredContent" not in result, entry["name"]
        assert _text(result).startswith(f"{code}: "), (entry["name"], _text(result))
    attached = files_call["result"]
    if attachments:
        assert not attached.get("isError"), _text(attached)
        assert files_call["schemaErrors"] is None
    else:
        assert attached["isError"] is True and "structuredContent" not in attached
        assert _text(attached).startswith("VALIDATION_ERROR: ")
        assert "PPLX_NB_FILE_ROOTS" in _text(attached)
    unknown = invalid[-1]
    assert unknown["result"] is None and unknown["error"]["code"] == -32602
    assert "Unknown tool: no_such_tool" in unknown["error"]["message"]


def _stdio_plan(tmp_path: Path, calls: list[dict[str, Any]], **env: str) -> dict[str, Any]:
    """A plan for ``python -m pplx_nb.mcp`` over stdio, storing in ``tmp_path``."""
    return {
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-m", "pplx_nb.mcp"],
        "env": _env(tmp_path / "conversation-logs", **env),
        "cwd": str(tmp_path),
        "calls": calls,
    }


def test_every_tool_over_stdio_with_the_typescript_client(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("notes\n")
    plan = _stdio_plan(tmp_path, _plan_calls(async_mode=False), PPLX_NB_FILE_ROOTS=str(tmp_path))
    report = drive(plan, tmp_path)
    _check_report(report, async_mode=False, attachments=True)


@contextmanager
def _http_server(tmp_path: Path, *args: str, host: str = "127.0.0.1", **env: str) -> Iterator[int]:
    log = tmp_path / "http.log"
    with http_server(tmp_path / "conversation-logs", *args, host=host, log=log, **env) as port:
        yield port


def test_every_tool_over_http_with_the_token_and_async_research(tmp_path: Path) -> None:
    with _http_server(
        tmp_path,
        PPLX_NB_MCP_TOKEN=TOKEN,
        PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH="true",
    ) as port:
        url = f"http://127.0.0.1:{port}/mcp"
        plan = {
            "transport": "http",
            "url": url,
            "headers": {"Authorization": f"Bearer {TOKEN}"},
            "calls": _plan_calls(async_mode=True),
        }
        report = drive(plan, tmp_path)
        refused = drive({"transport": "http", "url": url, "calls": []}, tmp_path)
    _check_report(report, async_mode=True, attachments=False)
    assert refused["connectError"] is not None and refused["connectError"]["code"] == 401
    assert "PPLX_NB_MCP_TOKEN" in refused["connectError"]["message"]


CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "list_conversations", "arguments": {}},
}


def _post(
    port: int,
    message: dict[str, Any],
    headers: dict[str, str],
    address: str = "127.0.0.1",
    path: str = "/mcp",
) -> tuple[int, str, dict[str, str]]:
    connection = http.client.HTTPConnection(address, port, timeout=30)
    try:
        base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        connection.request("POST", path, json.dumps(message), {**base, **headers})
        response = connection.getresponse()
        return response.status, response.read().decode(), dict(response.getheaders())
    finally:
        connection.close()


def _session(port: int, headers: dict[str, str]) -> dict[str, str]:
    status, body, reply = _post(port, INITIALIZE, headers)
    assert status == 200, body
    return {
        **headers,
        "mcp-session-id": reply["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }


def test_http_needs_the_token_when_one_is_set(tmp_path: Path) -> None:
    with _http_server(tmp_path, PPLX_NB_MCP_TOKEN=TOKEN) as port:
        status, body, headers = _post(port, INITIALIZE, {})
        assert status == 401 and "PPLX_NB_MCP_TOKEN" in body
        assert headers["www-authenticate"].startswith("Bearer")
        assert _post(port, INITIALIZE, {"Authorization": "Bearer wrong"})[0] == 401
        assert _post(port, INITIALIZE, {"Authorization": TOKEN})[0] == 401
        good = {"Authorization": f"Bearer {TOKEN}"}
        session = _session(port, good)
        status, body, _ = _post(port, CALL, session)
        assert status == 200 and '"result"' in body
        without = {key: value for key, value in session.items() if key != "Authorization"}
        status, body, _ = _post(port, CALL, without)
        assert status == 401 and '"result"' not in body
    assert TOKEN not in (tmp_path / "http.log").read_text()


def test_the_bearer_scheme_is_matched_in_any_case(tmp_path: Path) -> None:
    with _http_server(tmp_path, PPLX_NB_MCP_TOKEN=TOKEN) as port:
        for scheme in ("bearer", "BEARER", "beaRer"):
            status, body, _ = _post(port, INITIALIZE, {"Authorization": f"{scheme} {TOKEN}"})
            assert status == 200, (scheme, status, body)
        for refused in (f"Basic {TOKEN}", f"bearer {TOKEN.lower()}", f"bearer{TOKEN}", "bearer"):
            assert _post(port, INITIALIZE, {"Authorization": refused})[0] == 401, refused


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
def test_host_names_match_in_any_case_and_the_bound_address_is_allowed(
    tmp_path: Path, host: str
) -> None:
    with _http_server(tmp_path, host=host) as port:
        for name in (f"LOCALHOST:{port}", "LocalHost", f"{host}:{port}", f"[::1]:{port}"):
            status, body, _ = _post(port, INITIALIZE, {"Host": name}, address=host)
            assert status == 200, (name, status, body)
        for name in ("evil.example", f"localhost.evil.example:{port}", "localhost:x"):
            status, body, _ = _post(port, INITIALIZE, {"Host": name}, address=host)
            assert status == 421 and '"result"' not in body, (name, status, body)
        origin = {"Host": f"localhost:{port}", "Origin": f"HTTP://LOCALHOST:{port}"}
        assert _post(port, INITIALIZE, origin, address=host)[0] == 200


def test_the_access_log_shows_neither_query_strings_nor_the_token(tmp_path: Path) -> None:
    with _http_server(tmp_path, PPLX_NB_MCP_TOKEN=TOKEN, LOG_LEVEL="info") as port:
        assert _post(port, INITIALIZE, {}, path=f"/mcp?token={TOKEN}")[0] == 401
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert _post(port, INITIALIZE, good, path=f"/mcp?token={TOKEN}&x=1")[0] == 200
        assert _post(port, INITIALIZE, {"Host": "evil.example", **good})[0] == 421
    log = (tmp_path / "http.log").read_text()
    assert '"POST /mcp HTTP/1.1" 401' in log and '"POST /mcp HTTP/1.1" 200' in log, log
    assert '"POST /mcp HTTP/1.1" 421' in log, log
    assert "token=" not in log and "?" not in log and TOKEN not in log, log


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_lone_surrogate_in_an_argument_is_the_same_result_on_both_transports(
    tmp_path: Path, transport: str
) -> None:
    calls = [
        {"name": "perplexity_search", "arguments": {"query": "\ud800 asyncio"}},
        {"name": "list_conversations", "arguments": {"text": "ok \udfff"}},
        {"name": "list_conversations", "arguments": {"limit": 3}},
    ]
    if transport == "stdio":
        report = drive(_stdio_plan(tmp_path, calls), tmp_path)
    else:
        with _http_server(tmp_path) as port:
            plan = {"transport": "http", "url": f"http://127.0.0.1:{port}/mcp", "calls": calls}
            report = drive(plan, tmp_path)
    assert report["connectError"] is None, report["connectError"]
    search, listed, after = report["results"]
    for entry, argument in ((search, "query"), (listed, "text")):
        assert entry["error"] is None, entry["error"]
        assert entry["result"]["isError"] is True
        assert _text(entry["result"]).startswith(
            f"VALIDATION_ERROR: The argument {argument} holds a lone surrogate at character"
        ), _text(entry["result"])
    assert after["error"] is None and not after["result"].get("isError"), after
    assert after["result"]["structuredContent"]["count"] == 0, "nothing was asked or stored"


def test_an_unknown_prompt_and_an_unknown_conversation_are_reported_as_such(
    tmp_path: Path,
) -> None:
    calls = [
        {"prompt": "no_such_prompt", "arguments": {}},
        {
            "name": "await_conversation_histories",
            "arguments": {"conversationIds": [UNKNOWN_ID], "timeoutSeconds": 30},
        },
    ]
    report = drive(_stdio_plan(tmp_path, calls), tmp_path)
    assert report["connectError"] is None, report["connectError"]
    prompt, awaited = report["results"]
    assert prompt["result"] is None and prompt["error"]["code"] == -32602, prompt
    assert "no_such_prompt" in prompt["error"]["message"]
    assert awaited["error"] is None and awaited["schemaErrors"] is None, awaited
    text = _text(awaited["result"])
    assert "finished" not in text.split("---")[0], text
    assert "1 of 1 conversation(s) could not be read" in text, text
    assert "CONVERSATION_NOT_FOUND" in text
    entry = awaited["result"]["structuredContent"]["conversations"][UNKNOWN_ID]
    assert entry["status"] == "error" and entry["error"]["code"] == "CONVERSATION_NOT_FOUND"


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_an_evil_host_or_origin_gets_no_tool_result_on_any_bind(tmp_path: Path, host: str) -> None:
    with _http_server(tmp_path, host=host, PPLX_NB_MCP_TOKEN=TOKEN) as port:
        good = {"Authorization": f"Bearer {TOKEN}"}
        session = _session(port, good)
        for evil in ({"Host": "evil.example"}, {"Origin": "http://evil.example"}):
            status, body, _ = _post(port, INITIALIZE, {**good, **evil})
            assert status in (403, 421) and '"result"' not in body, (evil, status, body)
            status, body, _ = _post(port, CALL, {**session, **evil})
            assert status in (403, 421) and '"result"' not in body, (evil, status, body)
        status, body, _ = _post(port, CALL, session)
        assert status == 200 and '"result"' in body


def test_a_listed_host_and_origin_are_let_in(tmp_path: Path) -> None:
    with _http_server(
        tmp_path,
        PPLX_NB_MCP_ALLOWED_HOSTS="MCP.example.org:*",
        PPLX_NB_MCP_ALLOWED_ORIGINS="https://app.example.org",
    ) as port:
        named = {"Host": f"mcp.example.org:{port}", "Origin": "https://app.example.org"}
        assert _post(port, INITIALIZE, named)[0] == 200
        shouted = {"Host": f"MCP.EXAMPLE.ORG:{port}", "Origin": "HTTPS://App.Example.Org"}
        assert _post(port, INITIALIZE, shouted)[0] == 200
        assert _post(port, INITIALIZE, {"Host": f"127.0.0.1:{port}"})[0] == 421


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "example.org"])
def test_a_non_loopback_host_without_a_token_refuses_to_start(tmp_path: Path, host: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pplx_nb.mcp", "--transport", "http", "--host", host],
        cwd=ROOT,
        env={**os.environ, **_env(tmp_path / "logs")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "PPLX_NB_MCP_TOKEN" in done.stderr and "--allow-unauthenticated" in done.stderr
    assert not (tmp_path / "logs").exists()


def test_allow_unauthenticated_serves_a_trusted_network(tmp_path: Path) -> None:
    with _http_server(tmp_path, "--allow-unauthenticated", host="0.0.0.0") as port:
        session = _session(port, {})
        status, body, _ = _post(port, CALL, session)
        assert status == 200 and '"result"' in body


def test_the_inspector_finds_every_tool_schema_portable_in_strict_mode(tmp_path: Path) -> None:
    env = server_env(tmp_path / "conversation-logs", PPLX_NB_FILE_ROOTS=str(tmp_path))
    done = inspect(
        [sys.executable, "-m", "pplx_nb.mcp"],
        "--strict",
        "--method",
        "tools/list",
        "--format",
        "json",
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    findings = [line for line in done.stderr.splitlines() if line.startswith(("Warning", "Error"))]
    assert not findings, done.stderr
    listed = json.loads(done.stdout)
    assert "schemaFindings" not in listed, listed["schemaFindings"]
    tools = {tool["name"]: tool for tool in listed["result"]["tools"]}
    assert set(tools) == TOOLS
    assert "files" in tools["perplexity_search"]["inputSchema"]["properties"]
    assert all(tool["title"] and tool["outputSchema"] for tool in tools.values())


def test_a_search_result_links_its_conversation_as_a_resource_the_client_reads(
    tmp_path: Path,
) -> None:
    template = {"type": "ref/resource", "uri": "pplx://conversations/{id}"}
    calls: list[dict[str, Any]] = [
        {"request": "resources/templates/list", "params": {}},
        {
            "name": "perplexity_search",
            "arguments": {"query": "What is a coroutine?"},
            "save": "a",
            "saveLink": "link",
        },
        {"request": "resources/read", "params": {"uri": "${link}"}},
        {
            "request": "completion/complete",
            "params": {"ref": template, "argument": {"name": "id", "value": "${a}"}},
        },
        {
            "request": "completion/complete",
            "params": {"ref": template, "argument": {"name": "id", "value": "1999"}},
        },
        {
            "name": "perplexity_search_followup",
            "arguments": {"conversationId": "${a}", "query": "How is it awaited?"},
        },
        {"name": "perplexity_web_search", "arguments": {"query": "asyncio", "save": True}},
        {"request": "resources/list", "params": {}},
        {
            "request": "completion/complete",
            "params": {"ref": template, "argument": {"name": "id", "value": ""}},
        },
        {"request": "resources/read", "params": {"uri": f"pplx://conversations/{UNKNOWN_ID}"}},
        {"request": "resources/read", "params": {"uri": "pplx://conversations/20250101-1"}},
    ]
    report = drive(_stdio_plan(tmp_path, calls), tmp_path)
    assert report["connectError"] is None, report["connectError"]
    assert "completions" in report["capabilities"]
    for entry in report["results"][:-2]:
        assert entry["error"] is None, (entry["name"], entry["error"])
    templates, search, read, completed, none, followup, web, listed, every, unknown, bad = report[
        "results"
    ]
    assert [t["uriTemplate"] for t in templates["result"]["resourceTemplates"]] == [
        "pplx://conversations/{id}"
    ]

    cid = search["result"]["structuredContent"]["conversationId"]
    links = [b for b in search["result"]["content"] if b["type"] == "resource_link"]
    assert links == [
        {
            "type": "resource_link",
            "uri": f"pplx://conversations/{cid}",
            "name": cid,
            "title": f"Conversation {cid}",
            "mimeType": "text/markdown",
        }
    ]
    (contents,) = read["result"]["contents"]
    assert contents["uri"] == links[0]["uri"] and contents["mimeType"] == "text/markdown"
    assert contents["text"].startswith("# What is a coroutine?")
    assert "## Assistant" in contents["text"] and "docs.python.org" in contents["text"]
    assert completed["result"]["completion"]["values"] == [cid]
    assert none["result"]["completion"]["values"] == []

    # A new conversation is announced once; a follow-up continues one and adds none.
    assert search["listChanged"] == 1 and followup["listChanged"] == 1
    saved = web["result"]["structuredContent"]["conversationId"]
    assert web["listChanged"] == 2 and report["listChanged"] == 2
    uris = [r["uri"] for r in listed["result"]["resources"]]
    assert uris == [
        "pplx://health",
        f"pplx://conversations/{saved}",
        f"pplx://conversations/{cid}",
    ]
    assert listed["result"]["resources"][2]["title"] == "What is a coroutine?"
    assert every["result"]["completion"] == {"values": [saved, cid], "total": 2, "hasMore": False}
    assert unknown["result"] is None and unknown["error"]["code"] == -32602
    assert f"CONVERSATION_NOT_FOUND: Conversation {UNKNOWN_ID}" in unknown["error"]["message"]
    assert bad["result"] is None and bad["error"]["code"] == -32602
    assert "VALIDATION_ERROR" in bad["error"]["message"], bad["error"]


def test_a_tool_refused_by_the_budget_is_an_is_error_result_with_the_figures(
    tmp_path: Path, sim_url: str
) -> None:
    from pplx_nb.sim import stats

    calls = [
        {"name": "perplexity_search", "arguments": {"query": "What is a coroutine?"}, "save": "a"},
        {"name": "perplexity_deep_research", "arguments": {"query": "Compare asyncio and trio"}},
        {"name": "perplexity_search", "arguments": {"query": "How do I cancel a task?"}},
        {
            "name": "perplexity_search_followup",
            "arguments": {"conversationId": "${a}", "query": "How is it awaited?"},
        },
    ]
    plan = _stdio_plan(
        tmp_path,
        calls,
        PPLX_NB_OFFLINE="0",
        PERPLEXITY_API_KEY="pplx-budget-test-key",
        PERPLEXITY_BASE_URL=sim_url,
        PPLX_NB_BUDGET="0.05/request,0.02/day",
    )
    report = drive(plan, tmp_path)

    assert report["connectError"] is None, report["connectError"]
    answered, research, search, followup = (entry["result"] for entry in report["results"])
    assert not answered.get("isError"), _text(answered)
    first = answered["structuredContent"]["cost"]["totalCost"]
    billed = stats(sim_url)["billed_usd"]
    assert first <= billed <= 0.02

    for refused in (research, search, followup):
        assert refused["isError"] is True and "structuredContent" not in refused
    said = _text(research)
    assert re.match(
        r"BUDGET_EXCEEDED: `perplexity_deep_research` was refused: it could cost up to "
        r"\$0\.\d{4}, over the per-request cap of \$0\.0500 \(PPLX_NB_BUDGET\)\. Nothing was "
        r"sent\. Use perplexity_search rather than deep research",
        said,
    ), said
    # What the ledger had counted when it refused is what the simulator billed before then:
    # the first answer, and for the follow-up also its question's rewrite.
    for tool, refused, spent in (
        ("perplexity_search", search, first),
        ("perplexity_search_followup", followup, billed),
    ):
        said = _text(refused)
        assert said.startswith(f"BUDGET_EXCEEDED: `{tool}` was refused: it could cost up to $")
        assert f"and ${spent:.4f} of today's (UTC) cap of $0.0200 is spent or reserved" in said
        assert f"leaving ${0.02 - spent:.4f}" in said
        assert re.search(
            r"The day's cap resets at \d{4}-\d{2}-\d{2} 00:00 UTC \(in [^)]+\)\.", said
        )
        assert "Wait until then, or ask the user to raise the day's cap in PPLX_NB_BUDGET" in said
