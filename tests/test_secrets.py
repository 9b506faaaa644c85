"""The API key never shows: not in logs (DEBUG, every library), errors, pickles or reprs."""

from __future__ import annotations

import asyncio
import io
import logging
import pickle
import traceback
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from support.redis_server import RedisServer
from support.waiting import attached

from pplx_nb import Settings
from pplx_nb._errors import PplxError
from pplx_nb.api import AsyncClient, Client, Request, RetryPolicy
from pplx_nb.backends import open_queue, open_store
from pplx_nb.sim import inject_faults, reset, serve

KEY = "pplx-LEAKCANARY-7f3a9c2e51d84b06"
CORE = "LEAKCANARY"


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    """Every log record of every logger at DEBUG, formatted with tracebacks."""
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    with attached(handler, logging.getLogger(), logging.DEBUG):
        yield sink


def question(**options: Any) -> Request:
    return Request(
        messages=[{"role": "user", "content": "What is functools.partial?"}],
        use_cache=False,
        **options,
    )


def error_views(error: BaseException) -> list[str]:
    views = [str(error), repr(error), "".join(traceback.format_exception(error))]
    views.append(pickle.dumps(error).decode("latin-1"))
    if isinstance(error, PplxError):
        views += [repr(error.details), repr(vars(error)), str(error.to_dict())]
        views.append(repr(pickle.loads(pickle.dumps(error))))
    return views


async def drive(client: AsyncClient, url: str, errors: list[BaseException]) -> list[str]:
    """Successes and every failure path of one client; returns what users would see."""
    seen: list[str] = []
    answer = await client.ask(question())
    seen.append(answer.model_dump_json())
    async for item in client.stream(question(return_related_questions=True)):
        seen.append(str(item))
    remote_id = await client.submit_background(question(model="sonar-deep-research"))
    seen.append(remote_id)
    failures: list[tuple[dict[str, Any], str]] = [
        ({"status": 429, "retry_after": 0.01, "times": 9}, "ask"),
        ({"status": 500, "times": 9}, "ask"),
        ({"status": 503, "times": 9}, "stream"),
        ({"html": True}, "ask"),
        ({"html": True}, "stream"),
        ({"status": 403}, "ask"),
        ({"hang": 3}, "ask"),
        ({"hang": 3}, "stream"),
        ({"disconnect_after": 3}, "stream"),
        ({"agent_failed": True}, "ask"),
        ({"agent_failed": True}, "stream"),
    ]
    for fault, how in failures:
        inject_faults(url, fault)
        try:
            if how == "ask":
                seen.append((await client.ask(question())).model_dump_json())
            else:
                async for item in client.stream(question()):
                    seen.append(str(item))
        except PplxError as exc:
            errors.append(exc)
        reset(url)
    for bad in (question(search_recency_filter="never"), question(temperature=9.0)):
        try:
            await client.ask(bad)
        except PplxError as exc:
            errors.append(exc)
    try:
        await client.poll_background("missing-run")
    except PplxError as exc:
        errors.append(exc)
    return seen


def _debug_settings(base_url: str, style: str) -> Settings:
    return Settings(
        api_key=KEY,
        base_url=base_url,
        api_style=style,
        timeout_ms=300,
        max_retries=1,
        log_level="debug",
        offline=False,
    )


def _drive_async(
    settings: Settings, retry: RetryPolicy, url: str, errors: list[BaseException]
) -> list[str]:
    """:func:`drive` with an AsyncClient of ``settings``; its repr and str come first."""
    seen: list[str] = []

    async def run() -> None:
        async with AsyncClient(settings, retry=retry) as client:
            seen.extend([repr(client), str(client)])
            seen.extend(await drive(client, url, errors))

    asyncio.run(run())
    return seen


@pytest.mark.parametrize("style", ["sonar", "agent"])
def test_key_never_appears_anywhere(captured_logs: io.StringIO, style: str) -> None:
    errors: list[BaseException] = []
    seen: list[str] = []
    with serve(latency_ms=0, deep_research_seconds=0.2, api_key=KEY, sonar=True) as url:
        settings = _debug_settings(url, style)
        fast = RetryPolicy(1, base=0.01, cap=0.02)
        seen.extend(_drive_async(settings, fast, url, errors))
        with Client(settings, retry=fast) as sync_client:
            seen.extend([repr(sync_client), sync_client.ask(question()).text])
        wrong = Settings(
            api_key="pplx-some-other-key-0000", base_url=url, api_style=style, offline=False
        )
        with Client(wrong) as wrong_client:
            try:
                wrong_client.ask(question())
            except PplxError as exc:
                errors.append(exc)
    with Client(settings, retry=fast) as gone:
        try:
            gone.ask(question())  # the server has stopped: connection refused
        except PplxError as exc:
            errors.append(exc)
    seen += [repr(settings), str(settings), str(settings.redacted()), str(settings.model_dump())]
    assert len(errors) >= 14, [type(e).__name__ for e in errors]
    codes = {getattr(e, "code", None) for e in errors}
    assert {"API_KEY_INVALID", "API_SERVER_ERROR", "API_QUOTA_EXCEEDED", "TIMEOUT_ERROR"} <= codes
    assert {"NETWORK_ERROR", "INVALID_INPUT"} <= codes
    for error in errors:
        seen += error_views(error)
    logs = captured_logs.getvalue()
    assert "pplx_nb.api" in logs, "the client logged nothing at DEBUG"
    for text in [logs, *seen]:
        assert KEY not in text
        assert CORE not in text


def test_key_echoed_by_a_server_is_scrubbed_from_errors(captured_logs: io.StringIO) -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        echoed = request.headers["authorization"]
        return httpx2.Response(400, json={"error": {"message": f"bad request from {echoed}"}})

    settings = Settings(api_key=KEY, base_url="http://api.test", api_style="sonar", offline=False)
    client = Client(settings, transport=httpx2.MockTransport(handler))
    with pytest.raises(PplxError) as caught:
        client.ask(question())
    client.close()
    for text in [*error_views(caught.value), captured_logs.getvalue()]:
        assert KEY not in text and CORE not in text
    assert "bad request from" in caught.value.message


def test_a_transport_error_quoting_a_key_of_any_shape_is_scrubbed_down_the_chain() -> None:
    key = "opaque0token0Zq81hT4vW9"

    def handler(request: httpx2.Request) -> httpx2.Response:
        # What h11 says of a reply it cannot parse: it quotes the reply.
        echoed = request.headers["authorization"]
        raise httpx2.RemoteProtocolError(f"illegal status line: b'HTTP/1.1 {echoed} {key}'")

    settings = Settings(api_key=key, base_url="http://api.test", offline=False, max_retries=0)
    with (
        Client(settings, transport=httpx2.MockTransport(handler)) as client,
        pytest.raises(PplxError) as caught,
    ):
        client.ask(question())
    assert caught.value.code == "NETWORK_ERROR"
    assert isinstance(caught.value.__cause__, httpx2.RemoteProtocolError)
    for text in chain_views(caught.value):
        assert key not in text


PASSWORD = "hunter2-URLCANARY-b1e9"
PROXY_USER = "bob"


def _credential_leaks(text: str) -> bool:
    import base64

    basic = base64.b64encode(f"{PROXY_USER}:{PASSWORD}".encode()).decode()
    return PASSWORD in text or "URLCANARY" in text or basic in text


@pytest.mark.parametrize("style", ["sonar", "agent"])
def test_url_credentials_never_appear_anywhere(
    captured_logs: io.StringIO, tmp_path: Any, style: str
) -> None:
    from pplx_nb._errors import NetworkError

    errors: list[BaseException] = []
    seen: list[str] = []
    with serve(latency_ms=0, deep_research_seconds=0.2, sonar=True) as url:
        proxied = url.replace("http://", f"http://{PROXY_USER}:{PASSWORD}@")
        settings = _debug_settings(proxied, style)
        fast = RetryPolicy(1, base=0.01, cap=0.02)
        seen.extend(_drive_async(settings, fast, url, errors))
    with Client(settings, retry=fast) as gone:
        try:
            gone.ask(question())  # the server has stopped: connection refused
        except PplxError as exc:
            errors.append(exc)
    seen += [repr(settings), str(settings), str(settings.redacted())]
    assert "***@127.0.0.1" in settings.redacted()["base_url"]
    assert "NETWORK_ERROR" in {getattr(e, "code", None) for e in errors}

    # What a failed job keeps: the errors as status.json stores them, and a message that quotes
    # the URL itself.
    logs_dir = tmp_path / "logs"
    store, queue = open_store(root=logs_dir), open_queue(root=logs_dir)
    for error in [*errors, NetworkError(f"The proxy at {proxied} refused the connection.")]:
        cid = store.create([{"role": "user", "content": "q"}]).conversation_id
        queue.enqueue(cid, "perplexity_deep_research", {})
        job = queue.claim("w")
        assert job is not None
        queue.fail(job, error if isinstance(error, PplxError) else PplxError(str(error)))
        seen.append((logs_dir / cid / "status.json").read_text())
    for error in errors:
        seen += error_views(error)
    logs = captured_logs.getvalue()
    assert "pplx_nb.api" in logs and "***@127.0.0.1" in logs
    for text in [logs, *seen]:
        assert not _credential_leaks(text)


def test_invalid_url_settings_do_not_echo_the_credentials() -> None:
    from pydantic import ValidationError as PydanticValidationError

    for bad in (f"ftp://bob:{PASSWORD}@proxy/", f"https://bob:{PASSWORD}@proxy:port/"):
        with pytest.raises(PydanticValidationError) as caught:
            Settings(base_url=bad)
        assert "PERPLEXITY_BASE_URL" in str(caught.value)
        assert not _credential_leaks(str(caught.value))
    with pytest.raises(PydanticValidationError) as caught:
        Settings(api_key=12345678901234567890)
    assert "12345678901234567890" not in str(caught.value)


def test_every_pplx_nb_log_line_is_redacted_whoever_configured_logging(
    captured_logs: io.StringIO,
) -> None:
    import pplx_nb.api.client
    import pplx_nb.jobs._queue
    import pplx_nb.store._store  # noqa: F401 - each module's logger redacts from import on

    for name in ("pplx_nb.api", "pplx_nb.jobs", "pplx_nb.store"):
        logging.getLogger(name).warning(
            "sent %s with %s via %s",
            "Authorization: Token abcdef0123456789",
            "api key pplx-abcdef0123456789",
            f"https://{PROXY_USER}:{PASSWORD}@proxy.example/",
        )
    logs = captured_logs.getvalue()
    assert logs.count("Authorization: Token ***") == 3
    assert "abcdef0123456789" not in logs and not _credential_leaks(logs)


_MCP_LIKE = """
from pplx_nb._config import Settings
from pplx_nb._logging import configure_logging
from pplx_nb.mcp.server import create_server
from pplx_nb.research import Researcher

settings = Settings.from_env()
configure_logging(settings)
server = create_server(settings)  # what python -m pplx_nb.mcp does before serving
researcher = Researcher(settings)
print(researcher.search("What is functools.partial?").text[:40])
researcher.close()
"""


def test_the_mcp_server_at_debug_logs_only_pplx_nb_and_no_credentials(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys

    with serve(latency_ms=0) as url:
        env = {
            **os.environ,
            "PERPLEXITY_BASE_URL": url.replace("http://", f"http://{PROXY_USER}:{PASSWORD}@"),
            "PERPLEXITY_API_KEY": KEY,
            "PPLX_NB_OFFLINE": "0",
            "LOG_LEVEL": "debug",
            "CONVERSATION_LOGS_DIR": str(tmp_path / "logs"),
        }
        done = subprocess.run(
            [sys.executable, "-c", _MCP_LIKE],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    assert done.stdout.strip(), done.stderr
    assert "DEBUG pplx_nb.api" in done.stderr  # pplx_nb's own loggers do follow LOG_LEVEL
    assert "httpcore" not in done.stderr and "receive_response_headers" not in done.stderr
    assert not _credential_leaks(done.stderr) and KEY not in done.stderr


@pytest.mark.parametrize("form", ["query", "userinfo"])
def test_a_store_password_is_hidden_wherever_the_store_is_named(
    redis_server: RedisServer, redis_url: str, form: str
) -> None:
    from pplx_nb._redis import client

    user, password = f"tester_{form}", "Top@URLCANARY-99"
    where = redis_url.removeprefix("redis://")
    host, db = where.split("/")
    urls = {
        "query": f"redis://{host}/{db}?username={user}&password={password}",
        "userinfo": f"redis://{user}:{password}@{host}/{db}",
    }
    admin = client(redis_server.url(0))
    admin.acl_setuser(
        user, enabled=True, passwords=[f"+{password}"], keys=["*"], commands=["+@all"]
    )
    seen: list[str] = []
    try:
        settings = Settings(store_url=urls[form])
        store = open_store(settings)
        conversation = store.create([{"role": "user", "content": "q"}])
        queue = open_queue(settings)
        seen += [repr(settings), str(settings.redacted()), repr(store), store.location]
        seen += [str(conversation.path), repr(queue), queue.location]
        wrong = open_store(Settings(store_url=urls[form].replace("99", "11")))
        for failing in (lambda: store.load("20200101-1577836800000"), wrong.ids):
            with pytest.raises(PplxError) as caught:
                failing()
            seen += error_views(caught.value)
    finally:
        admin.acl_deluser(user)
    assert f"{host}/{db}" in store.location
    for text in seen:
        assert "URLCANARY" not in text and "Top@" not in text, text


PROXY_KEY = "sk-proxy-Zq81hT4vW9xLm2Pq"
"""A key not shaped like Perplexity's (a proxy's): only knowing it can hide it."""


def chain_views(error: BaseException) -> list[str]:
    """``error_views`` of ``error``, and the str and repr of every exception in its chain."""
    views, pending, seen = error_views(error), [error], set()
    while pending:
        current = pending.pop()
        if id(current) not in seen:
            seen.add(id(current))
            views += [str(current), repr(current)]
            pending += [e for e in (current.__cause__, current.__context__) if e is not None]
    return views


def _mcp_result(settings: Settings) -> list[str]:
    """What ``perplexity_deep_research`` returns to an MCP client (text and structured content),
    and every stored conversation read as a resource."""
    import json

    from mcp import Client as McpClient

    from pplx_nb.mcp.server import create_server

    async def call() -> tuple[Any, list[str]]:
        async with McpClient(create_server(settings)) as client:
            result = await client.call_tool(
                "perplexity_deep_research", {"query": "What is asyncio.TaskGroup?"}
            )
            listed = await client.list_resources()
            uris = [r.uri for r in listed.resources if r.uri.startswith("pplx://conversations/")]
            reads = [await client.read_resource(uri) for uri in uris]
            return result, [read.model_dump_json() for read in reads]

    result, resources = asyncio.run(call())
    assert result.is_error and resources
    texts = [getattr(item, "text", "") for item in result.content]
    return [
        *texts,
        json.dumps(result.structured_content),
        result.model_dump_json(),
        repr(result),
        *resources,
    ]


def _notebook_output(settings: Settings) -> list[str]:
    """What ``%pplx_research --debug`` shows in a notebook (blocking), traceback included."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from pplx_nb.notebook import magics
    from pplx_nb.research import Researcher

    shell = InteractiveShell.instance()
    with Researcher(settings, async_deep_research=False) as researcher:
        magics.set_researcher(researcher)
        shell.run_line_magic("load_ext", "pplx_nb")
        try:
            with capture_output() as captured:
                shell.run_cell("%pplx_research --debug What is asyncio.TaskGroup?")
        finally:
            shell.run_line_magic("unload_ext", "pplx_nb")
            magics.set_researcher(None)
    shown = [value for output in captured.outputs for value in output.data.values()]
    assert any("Traceback" in value for value in shown)  # --debug shows the whole chain
    return [*shown, captured.stdout, captured.stderr]


@pytest.mark.parametrize("echo", ["failed_run", "error_event", "not_json"])
def test_a_key_of_any_shape_echoed_by_a_proxy_shows_nowhere(
    captured_logs: io.StringIO, tmp_path: Any, echo: str
) -> None:
    from support.misbehaving import Misbehaving

    from pplx_nb.research import Researcher

    logs_dir = tmp_path / "logs"
    seen: list[str] = []
    with serve(latency_ms=0, deep_research_seconds=0.2) as url, Misbehaving(url) as proxy:
        proxy.echo_key = echo
        settings = Settings(
            api_key=PROXY_KEY,
            base_url=proxy.url,
            offline=False,
            conversation_logs_dir=logs_dir,
            max_retries=0,
            max_job_retries=0,
            timeout_ms=5_000,
            log_level="debug",
        )
        with (
            Researcher(settings, async_deep_research=False) as researcher,
            pytest.raises(PplxError) as blocking,
        ):
            researcher.deep_research("What is asyncio.TaskGroup?")
        with Researcher(settings, async_deep_research=True) as researcher:
            status = researcher.deep_research("What is asyncio.TaskGroup?", wait=False)
            with pytest.raises(PplxError) as queued:
                researcher.wait(status.conversation_id, timeout=60)
        seen += chain_views(blocking.value) + chain_views(queued.value)
        seen += _mcp_result(settings) + _notebook_output(settings)
    assert proxy.requests["POST /v1/agent"] >= 4  # each surface reached the proxy
    stored = [path.read_text() for path in logs_dir.rglob("*") if path.is_file()]
    assert any(path.name == "status.json" for path in logs_dir.rglob("*"))
    logs = captured_logs.getvalue()
    for text in [logs, *stored, *seen]:
        assert PROXY_KEY not in text
        assert "Zq81hT4vW9xLm2Pq" not in text
    if echo != "not_json":  # the proxy's words are kept, the key within them is not
        assert "upstream refused" in str(blocking.value)
