"""A misbehaving API server for tests: the simulator behind a proxy that fails on purpose.

:class:`Misbehaving` listens on 127.0.0.1 and forwards every request to an upstream simulator,
so billed work is still counted where it happens (the simulator's ``generations`` and
``background_runs``). Its attributes turn on the failures a real network and a real API
produce, which the simulator's own fault injection cannot (it answers or refuses, but never
drops a reply it has already acted on)::

    with serve(latency_ms=0) as sim, Misbehaving(sim) as bad:
        bad.poll_outage = 4.0           # polls of a run fail for 4 s (503s, drops, stalls)
        bad.drop_submission_replies = 1 # the next background submission runs, its reply is lost
        bad.never_ending = True         # runs look in_progress forever (cancel still forwarded)
        bad.stream = "ping"             # streams send keep-alive comments only ("drip": text)
        bad.refuse_streams = True       # a run's event stream is refused (an expired cursor)
        bad.huge_body_mib = 300         # answers are a 300 MiB body, generated as it is sent
        bad.submission_reply = "huge"   # a background submission runs; its reply is unreadable
        bad.poll_retry_after = 5000     # the first poll of a run: 429, Retry-After 5000 s
        bad.echo_key = "failed_run"     # runs fail with a message quoting the Authorization header
        bad.on_submission = pause_redis # called once a submission ran, before its reply goes
        bad.on_report = pause_redis     # called before a run's finished state (its report) goes
        bad.before_answer = fill_disk  # called as an answer is asked for (its question stored)

Plain asyncio streams, HTTP/1.1 with keep-alive, on a daemon thread: enough for httpx2.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx2

__all__ = ["Misbehaving"]

_CHUNK = 1 << 20
_GARBAGE = b"<html><body>Service temporarily unavailable</body></html>"
_ANSWER_HEAD = (
    b'{"id": "resp_huge", "status": "completed", "output": [{"type": "message", '
    b'"content": [{"type": "output_text", "text": "'
)


class Misbehaving:
    """A proxy in front of ``upstream`` (a simulator URL) that misbehaves as its attributes say.

    Attributes:
        poll_outage: seconds, from the first poll of a run, during which every
            ``GET /v1/responses/{id}`` fails (503, 502, a dropped connection or a stalled
            reply, in turn); polls after that are forwarded.
        drop_submission_replies: how many background submissions (``POST /v1/agent`` with
            ``background``) are forwarded, so the run starts upstream, and then answered by
            closing the connection: the client cannot know the outcome.
        refuse_submissions: how many background submissions are answered 503 without being
            forwarded (provably not started).
        drop_answer_replies: how many answers asked on the spot (``POST /v1/agent`` without
            ``background``, streamed or not) are forwarded, then their connection closed
            before a byte of the reply.
        never_ending: runs polled report ``in_progress`` forever (cancels are forwarded).
        refuse_streams: ``GET /v1/responses/{id}?stream=true`` answers 400, as the API does
            for an expired cursor; plain polls are forwarded.
        stream: ``"ping"`` answers a streamed request with keep-alive comments only;
            ``"drip"`` with a text delta every ``drip_every`` seconds, forever;
            ``"in_progress"`` with a ``response.in_progress`` event every ``drip_every``
            seconds, forever (events, not pings: each one is progress), and so are polls and
            event streams of runs (``GET /v1/responses/{id}``).
        bill_streams: a streamed answer is first forwarded (the simulator bills it), then
            answered as ``stream`` says.
        huge_body_mib: answer a non-streamed ``POST /v1/agent`` with this many MiB of JSON.
        huge_declared: whether that body's length is announced (``content-length``); without
            it the body simply runs until the connection closes.
        submission_reply: how every background submission is answered once it has been
            forwarded (so its run started upstream and is billed): ``"huge"`` (a JSON body of
            ``huge_body_mib`` MiB, its length announced as ``huge_declared`` says),
            ``"garbage"`` (a 200 that is not JSON), ``"truncated"`` (half the reply, then the
            connection closed) or ``"no_id"`` (the reply without the run's id); ``None``: as
            the simulator answered.
        garbage_polls: answer every ``GET /v1/responses/{id}`` (a poll or a run's event stream)
            with a 200 that is not JSON while it is true.
        poll_retry_after: answer the first ``GET /v1/responses/{id}`` (a poll or a run's event
            stream) 429 with this ``Retry-After`` (seconds); later ones are forwarded.
        echo_key: answer every run request (``POST /v1/agent``, polls and run streams of
            ``/v1/responses``) without forwarding it, quoting its Authorization header and the
            key in it, as a careless proxy does: ``"failed_run"`` (a run that failed, as JSON
            or a ``response.failed`` event), ``"error_event"`` (an ``error`` event; ``{"error":
            ...}`` unstreamed) or ``"not_json"`` (an HTML page with status 200, as the body or
            as an event's data).
        on_submission: called (on a thread of its own) once a background submission was
            forwarded, so the run exists upstream, and before its reply is sent: e.g. to stop
            the store or the worker while the reply is on its way.
        on_report: the same, before a poll (or a run's event stream) that carries the run
            finished, and so its report, is answered.
        before_answer: called (on a thread of its own) when an answer asked on the spot
            arrives, before it is forwarded: its question is stored by then, and the answer
            is about to be paid for.
        requests: how many requests each ``METHOD path-prefix`` received.
        stream_started: when (``time.monotonic``) the first endless stream began, if one did.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.poll_outage = 0.0
        self.drop_submission_replies = 0
        self.refuse_submissions = 0
        self.drop_answer_replies = 0
        self.never_ending = False
        self.stream: str | None = None
        self.refuse_streams = False
        self.drip_every = 0.2
        self.bill_streams = False
        self.huge_body_mib = 0
        self.huge_declared = True
        self.submission_reply: str | None = None
        self.poll_retry_after = 0
        self.garbage_polls = False
        self.echo_key: str | None = None
        self.on_submission: Callable[[], None] | None = None
        self.on_report: Callable[[], None] | None = None
        self.before_answer: Callable[[], None] | None = None
        self.requests: Counter[str] = Counter()
        self.bytes_sent = 0
        self.stream_started: float | None = None
        self._outage_started: float | None = None
        self._outage_turn = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.url = ""

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Misbehaving:
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the misbehaving server did not start")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        loop, server = self._loop, self._server
        if loop is not None and server is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(server.close)
                loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._upstream = httpx2.AsyncClient(base_url=self.upstream, timeout=60)
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            self._server.close()
            await self._upstream.aclose()

    # -- HTTP ------------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {
                    name.strip().lower(): value.strip()
                    for name, _, value in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                keep = await self._handle(_Request(method, target, headers, body), writer)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
                await writer.wait_closed()

    async def _handle(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False closes the connection."""
        method, path = request.method, request.target.split("?", 1)[0]
        route = f"{method} {'/v1/responses' if path.startswith('/v1/responses/') else path}"
        self.requests[route] += 1
        payload = _json(request.body)
        runs = path in ("/v1/agent", "/v1/responses") or path.startswith("/v1/responses/")
        if self.echo_key and runs:
            streamed = bool(payload.get("stream")) or "stream=true" in request.target
            await self._echo(request.headers.get("authorization", ""), streamed, writer)
            return not streamed
        if method == "POST" and path in ("/v1/agent", "/v1/responses"):
            if payload.get("background"):
                return await self._submission(request, writer)
            if self.before_answer is not None:
                await asyncio.to_thread(self.before_answer)
            if payload.get("stream") and self.stream:
                if self.bill_streams:
                    await self._forward(request)
                await self._endless_stream(writer)
                return False
            if self.huge_body_mib:
                await self._huge(writer)
                return self.huge_declared
            if self.drop_answer_replies > 0:
                self.drop_answer_replies -= 1
                await self._forward(request)
                return False
        if method == "GET" and path.startswith("/v1/responses/"):
            if self.stream == "in_progress":
                await self._endless_stream(writer)
                return False
            return await self._poll(request, writer)
        await self._reply(writer, *await self._forward(request))
        return True

    async def _submission(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        if self.refuse_submissions > 0:
            self.refuse_submissions -= 1
            await self._reply(writer, 503, b'{"error": {"message": "overloaded"}}')
            return True
        status, content, reply_headers = await self._forward(request)
        if self.on_submission is not None:
            await asyncio.to_thread(self.on_submission)
        if self.drop_submission_replies > 0:
            self.drop_submission_replies -= 1
            return False  # the run started upstream; its reply is never sent
        if self.submission_reply is not None and status == 200:
            return await self._unreadable(writer, content)
        await self._reply(writer, status, content, reply_headers)
        return True

    async def _unreadable(self, writer: asyncio.StreamWriter, content: bytes) -> bool:
        """Answer a submission the upstream accepted (``content``) in a way nobody can read."""
        kind = self.submission_reply
        if kind == "huge":
            run = _json(content)
            head = json.dumps({"id": run.get("id"), "status": run.get("status")})[:-1]
            await self._huge(writer, head.encode() + b', "filler": "', b'"}')
            return self.huge_declared
        if kind == "truncated":
            writer.write(
                f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                f"content-length: {len(content)}\r\n\r\n".encode()
                + content[: len(content) // 2]
            )
            await writer.drain()
            return False
        if kind == "no_id":
            run = _json(content)
            run.pop("id", None)
            await self._reply(writer, 200, json.dumps(run).encode())
            return True
        await self._reply(writer, 200, _GARBAGE)
        return True

    async def _poll(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        if self.refuse_streams and "stream=true" in request.target:
            error = (
                b'{"error": {"message": "starting_after is too old", "type": "invalid_request"}}'
            )
            await self._reply(writer, 400, error)
            return True
        if self.garbage_polls:
            await self._reply(writer, 200, _GARBAGE)
            return True
        if self.poll_retry_after:
            retry_after, self.poll_retry_after = self.poll_retry_after, 0
            error = b'{"error": {"message": "rate limited", "type": "rate_limit_exceeded"}}'
            await self._reply(
                writer,
                429,
                error,
                {"content-type": "application/json", "retry-after": str(retry_after)},
            )
            return True
        if self.poll_outage > 0:
            now = time.monotonic()
            if self._outage_started is None:
                self._outage_started = now
            if now - self._outage_started < self.poll_outage:
                self._outage_turn += 1
                kind = self._outage_turn % 4
                if kind == 0:
                    return False  # dropped without a reply
                if kind == 1:
                    # Stalled: no reply until the outage is over, then dropped.
                    await asyncio.sleep(max(self._outage_started + self.poll_outage - now, 0))
                    return False
                code = 503 if kind == 2 else 502
                await self._reply(writer, code, b'{"error": {"message": "outage"}}')
                return True
        status, content, reply_headers = await self._forward(request)
        if self.never_ending and status == 200:
            run = _json(content)
            run["status"] = "in_progress"
            run["output"] = []
            content = json.dumps(run).encode()
        if self.on_report is not None and status == 200 and b'"completed"' in content:
            await asyncio.to_thread(self.on_report)
        await self._reply(writer, status, content, reply_headers)
        return True

    async def _endless_stream(self, writer: asyncio.StreamWriter) -> None:
        if self.stream_started is None:
            self.stream_started = time.monotonic()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\nconnection: close\r\n\r\n"
        )
        await writer.drain()
        created = {
            "type": "response.created",
            "response": {"id": "resp_endless", "status": "in_progress"},
        }
        writer.write(f"event: response.created\ndata: {json.dumps(created)}\n\n".encode())
        in_progress = {**created, "type": "response.in_progress"}
        while not self._stop.is_set():
            if self.stream == "drip":
                delta = {"type": "response.output_text.delta", "delta": "more "}
                frame = f"event: response.output_text.delta\ndata: {json.dumps(delta)}\n\n"
            elif self.stream == "in_progress":
                frame = f"event: response.in_progress\ndata: {json.dumps(in_progress)}\n\n"
            else:
                frame = ": ping\n\n"
            writer.write(frame.encode())
            self.bytes_sent += len(frame)
            await writer.drain()
            await asyncio.sleep(self.drip_every)

    async def _echo(self, authorization: str, streamed: bool, writer: asyncio.StreamWriter) -> None:
        said = f"upstream refused {authorization} (key {authorization.partition(' ')[2]})"
        run = {"id": "resp_echo", "object": "response", "status": "failed", "output": []}
        if self.echo_key == "not_json":
            page = f"<html><body>Proxy error: {said}</body></html>"
            if not streamed:
                await self._reply(writer, 200, page.encode())
                return
            frames = [("response.created", page)]
        elif self.echo_key == "error_event":
            error = {"type": "error", "error": {"message": said, "type": "proxy"}}
            if not streamed:
                await self._reply(writer, 200, json.dumps({"error": error["error"]}).encode())
                return
            frames = [("error", json.dumps(error))]
        else:
            failed = {**run, "error": {"code": "proxy", "message": said}}
            if not streamed:
                await self._reply(writer, 200, json.dumps(failed).encode())
                return
            created = {"type": "response.created", "response": {**run, "status": "in_progress"}}
            frames = [
                ("response.created", json.dumps({**created, "sequence_number": 1})),
                (
                    "response.failed",
                    json.dumps(
                        {"type": "response.failed", "response": failed, "sequence_number": 2}
                    ),
                ),
            ]
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        for name, data in frames:
            writer.write(f"event: {name}\ndata: {data}\n\n".encode())
        await writer.drain()

    async def _huge(
        self, writer: asyncio.StreamWriter, prefix: bytes = _ANSWER_HEAD, suffix: bytes = b'"}]}]}'
    ) -> None:
        """A 200 whose JSON is ``prefix``, ``huge_body_mib`` MiB of filler, then ``suffix``."""
        size = self.huge_body_mib * _CHUNK
        filler = b"x" * _CHUNK
        total = len(prefix) + size + len(suffix)
        length = f"content-length: {total}" if self.huge_declared else "connection: close"
        writer.write(
            f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{length}\r\n\r\n".encode()
        )
        writer.write(prefix)
        for _ in range(self.huge_body_mib):
            writer.write(filler)
            self.bytes_sent += len(filler)
            await writer.drain()
        writer.write(suffix)
        await writer.drain()

    async def _forward(self, request: _Request) -> tuple[int, bytes, dict[str, str]]:
        wanted = ("authorization", "content-type", "accept")
        keep = {k: v for k, v in request.headers.items() if k in wanted}
        response = await self._upstream.request(
            request.method, request.target, content=request.body, headers=keep
        )
        kept = {
            k: v
            for k, v in response.headers.items()
            if k.lower() in ("content-type", "retry-after", "retry-after-ms")
        }
        return response.status_code, response.content, kept

    async def _reply(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        content: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        lines = [f"HTTP/1.1 {status} X", f"content-length: {len(content)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {"content-type": "application/json"}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + content)
        self.bytes_sent += len(content)
        await writer.drain()


@dataclass(frozen=True)
class _Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


def _json(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body) if body else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
