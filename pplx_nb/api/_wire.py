"""One client's HTTP: the pooled connection, each request's turn, retries, failures as PplxErrors.

:class:`Wire` sends a :class:`~pplx_nb.api._adapter.Call` and hands back its body
(:meth:`Wire.send`) or its server-sent events (:meth:`Wire.events`); it knows nothing of either
protocol. Every request first takes its turn from the throttle, every response's rate-limit
headers go back to it, and every HTTP status or transport error becomes a PplxError here.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import AsyncGenerator
from contextlib import aclosing
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx2

from pplx_nb._errors import APIError, APIServerError
from pplx_nb._logging import get_logger
from pplx_nb.api._adapter import Call
from pplx_nb.api._body import paced_lines, read_capped
from pplx_nb.api._failures import from_status, submission_unknown, transport_errors
from pplx_nb.api._sse import Event, events
from pplx_nb.api._throttle import Throttle
from pplx_nb.api.retry import RetryPolicy, outcome_unknown

__all__ = ["Wire", "split_credentials"]

logger = get_logger("pplx_nb.api")
_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=32)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle takes ≈35 ms; httpx2 would do it again for every client.
    return httpx2.create_ssl_context()


def split_credentials(url: str) -> tuple[str, httpx2.BasicAuth | None]:
    """``url`` without its ``user:password@``, and those credentials as Basic auth."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    bare = urlunsplit(parts._replace(netloc=host))
    return bare, httpx2.BasicAuth(unquote(parts.username or ""), unquote(parts.password or ""))


class Wire:
    """Sends calls to one base URL with the throttle's turns and the retry policy's retries.

    Args:
        base_url: where calls go, without credentials.
        headers: sent with every request (the API key's ``authorization`` among them).
        secret: the API key, kept out of every error a response could echo it into.
        idle_timeout: seconds; a stream without a new line for that long has stalled, and each
            request's own timeout by default.
        max_bytes: the largest body read.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str],
        throttle: Throttle,
        retry: RetryPolicy,
        secret: str | None,
        idle_timeout: float,
        max_bytes: int,
        auth: httpx2.BasicAuth | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url
        self.throttle = throttle
        self.retry = retry
        self._secret = secret
        self._idle = idle_timeout
        self._max_bytes = max_bytes
        self.http = httpx2.AsyncClient(
            base_url=base_url,
            auth=auth,
            headers=headers,
            transport=transport,
            timeout=idle_timeout,
            limits=_LIMITS,
            verify=_tls_context(),
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()

    def what(self, call: Call) -> str:
        """``call`` as errors and logs name it: method and URL."""
        return f"{call.method} {self.base_url}{call.path}"

    def may_resend(self, error: APIError, retries: int, *, paid: bool) -> bool:
        """Whether the policy allows another attempt after ``error`` (fewer for paid calls)."""
        if paid:
            return self.retry.should_resend_paid(error, retries)
        return self.retry.should_retry(error, retries)

    async def pause(self, call: Call, error: APIError, retries: int) -> None:
        """Wait the policy's delay before retry ``retries + 1`` of ``call``, and say so."""
        delay = self.retry.delay(error, retries)
        logger.info(
            "%s failed (%s); retry %d of %d in %.2f s",
            self.what(call),
            error.code if error.status_code is None else f"HTTP {error.status_code}",
            retries + 1,
            self.retry.max_retries,
            delay,
        )
        await asyncio.sleep(delay)

    async def send(
        self,
        call: Call,
        timeout: float,
        *,
        paid: bool = False,
        retry: bool = True,
        run_left: float | None = None,
    ) -> bytes:
        """The body of a successful response to ``call``, after the retries the policy allows.

        ``paid``: sent again only when it provably never reached the API; an unknown outcome
        raises SubmissionUnknown. ``retry=False``: one attempt. ``run_left``: ``call`` reads
        or stops a paid run with that many seconds left (see :meth:`Throttle.admit`).
        """
        what = self.what(call)
        loop = asyncio.get_running_loop()
        run_deadline = None if run_left is None else loop.time() + run_left
        retries = 0
        while True:
            left = None if run_deadline is None else run_deadline - loop.time()
            await self.throttle.admit(what, timeout, run_left=left)
            try:
                return await self._attempt(call, timeout, retries)
            except APIError as error:
                if paid and outcome_unknown(error):
                    raise submission_unknown(what, error) from error
                if not retry or not self.may_resend(error, retries, paid=paid):
                    raise
                await self.pause(call, error, retries)
                retries += 1

    async def _attempt(self, call: Call, timeout: float, retries: int) -> bytes:
        """One attempt of :meth:`send`: the body of a response below 300, else its error."""
        what = self.what(call)
        logger.debug("%s (attempt %d)", what, retries + 1)
        # httpx2's timeout bounds each read; a body that trickles in must not outlast the
        # whole request's timeout.
        with transport_errors(what, timeout, secret=self._secret):
            async with (
                asyncio.timeout(timeout),
                self.http.stream(call.method, call.path, content=call.body, timeout=timeout) as (
                    response
                ),
            ):
                body = await read_capped(response, self._max_bytes, what)
        await self.throttle.observe(response.status_code, response.headers)
        if response.status_code < 300:
            return body
        raise self._refusal(response, body, what, retries)

    def _refusal(self, response: httpx2.Response, body: bytes, what: str, retries: int) -> APIError:
        """The error for a response with an error status (``body``: what it said)."""
        return from_status(
            response.status_code,
            body,
            response.headers,
            what=what,
            retries=retries,
            secret=self._secret,
        )

    async def events(
        self, call: Call, deadline: float, retries: int, *, only_events: bool = False
    ) -> AsyncGenerator[Event, None]:
        """The events of one streamed response to ``call``; an error status raises.

        ``deadline`` (loop time) bounds the whole stream. ``only_events``: a reply that is not
        ``text/event-stream`` (a server that ignores ``stream=true``) raises APIServerError
        instead of being read.
        """
        what = self.what(call)
        loop = asyncio.get_running_loop()
        timeout = max(deadline - loop.time(), 0.001)
        logger.debug("%s, streamed (attempt %d)", what, retries + 1)
        # A run's stream answers at once even when the run itself is slow: a server that
        # keeps it waiting longer than PERPLEXITY_TIMEOUT has stalled.
        opened_by = min(deadline, loop.time() + self._idle) if only_events else deadline
        with transport_errors(what, timeout, secret=self._secret):
            async with asyncio.timeout_at(opened_by):
                response = await self.http.send(
                    self.http.build_request(
                        call.method,
                        call.path,
                        content=call.body,
                        headers={"accept": "text/event-stream"},
                        timeout=timeout,
                    ),
                    stream=True,
                )
            try:
                await self.throttle.observe(response.status_code, response.headers)
                if response.status_code >= 300:
                    async with asyncio.timeout_at(deadline):
                        body = await read_capped(response, self._max_bytes, what)
                    raise self._refusal(response, body, what, retries)
                kind = response.headers.get("content-type", "")
                if only_events and not kind.startswith("text/event-stream"):
                    raise APIServerError(
                        f"{what} answered with {kind or 'no content type'}, not an event "
                        "stream: this server does not stream runs."
                    )
                lines = paced_lines(response, what, deadline, self._idle, self._max_bytes)
                async with aclosing(lines):
                    async for event in events(lines):
                        yield event
            finally:
                await response.aclose()
