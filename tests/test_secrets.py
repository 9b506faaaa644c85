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

from pplx_nb import Settings
from pplx_nb._errors import PplxError
from pplx_nb.api import AsyncClient, Client, Request, RetryPolicy
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
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield sink
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


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
        views += [repr(error.details), str(error.to_dict())]
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


@pytest.mark.parametrize("style", ["sonar", "agent"])
def test_key_never_appears_anywhere(captured_logs: io.StringIO, style: str) -> None:
    errors: list[BaseException] = []
    seen: list[str] = []
    with serve(latency_ms=0, deep_research_seconds=0.2, api_key=KEY, sonar=True) as url:
        settings = Settings(
            api_key=KEY,
            base_url=url,
            api_style=style,
            timeout_ms=300,
            max_retries=1,
            log_level="debug",
            offline=False,
        )
        fast = RetryPolicy(1, base=0.01, cap=0.02)

        async def run() -> None:
            async with AsyncClient(settings, retry=fast) as client:
                seen.extend([repr(client), str(client)])
                seen.extend(await drive(client, url, errors))

        asyncio.run(run())
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
