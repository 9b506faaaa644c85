"""Reading a run that is under way by its id: followed through its events, else polled.

Nothing here ever submits: a run is paid for once, when it is started, and read back as often as
it takes — after a background submission, or when the stream of a paid answer broke after the
API named its run. Every wait ends at the run's deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing

from pplx_nb._errors import (
    APIError,
    APITimeoutError,
    NetworkError,
    RemoteRunFailed,
    SubmissionUnknown,
)
from pplx_nb._logging import get_logger
from pplx_nb._models import Answer
from pplx_nb.api._activity import Activity
from pplx_nb.api._adapter import Call
from pplx_nb.api._failures import submission_unknown, unread_words
from pplx_nb.api._wire import Wire
from pplx_nb.api.agent import AgentAdapter, AgentStream

__all__ = ["ActivityCallback", "Poller", "Pricer", "RunReader"]

ActivityCallback = Callable[[Activity], object]
"""Told what a run is doing each time its reasoning events change it."""
Pricer = Callable[[Answer, str], Awaitable[Answer]]
"""Sets an answer's cost from its usage when the API left it out (the model as second argument)."""
Poller = Callable[[str, bool, float], Awaitable[Answer | None]]
"""One poll of a run: its id, whether it asked for related questions, seconds left before its
deadline; ``None`` while it is still running."""

logger = get_logger("pplx_nb.api")


def _resumable(error: APIError) -> bool:
    """Whether a broken run stream is worth opening again: a dropped or silent connection, or
    a server error; not a refusal (the server cannot stream this run)."""
    status = error.status_code
    if status is None:
        return isinstance(error, NetworkError | APITimeoutError)
    return status in (408, 429) or status >= 500


def _described(error: APIError) -> str:
    return error.code if error.status_code is None else f"HTTP {error.status_code}"


class RunReader:
    """Reads runs back over ``wire``: ``price`` costs the answers, ``poll`` reads a run's state."""

    def __init__(self, wire: Wire, price: Pricer, poll: Poller) -> None:
        self._wire = wire
        self._price = price
        self._poll = poll

    async def follow(
        self, adapter: AgentAdapter, remote_id: str, parser: AgentStream, deadline: float
    ) -> AsyncGenerator[str | Activity | Answer, None]:
        """Run ``remote_id``'s events after ``parser.sequence``, fed to ``parser``: its text
        deltas and each new Activity as they come, then its Answer. A stream that breaks is
        opened again after the last event seen, as often in a row without a new event as the
        retry policy allows; any other failure raises (RemoteRunFailed when the run failed)."""
        wire = self._wire
        loop = asyncio.get_running_loop()
        seen = parser.activity
        failures = 0
        while True:
            before = parser.sequence
            call = adapter.follow(remote_id, before if before is not None else 0)
            left = deadline - loop.time()
            await wire.throttle.admit(wire.what(call), left, run_left=left)
            try:
                opened = wire.events(call, deadline, failures, only_events=True)
                async with aclosing(opened) as stream:
                    async for event in stream:
                        delta = parser.feed(event)
                        if delta:
                            yield delta
                        if parser.activity is not None and parser.activity != seen:
                            seen = parser.activity
                            yield seen
                answer = await self._price(parser.finish(), "")
            except RemoteRunFailed:
                raise
            except APIError as error:
                if parser.sequence != before:
                    failures = 0
                retry = _resumable(error) and wire.retry.should_retry(error, failures)
                if not retry or loop.time() >= deadline:
                    raise
                await wire.pause(call, error, failures)
                failures += 1
                continue
            yield answer
            return

    async def read_back(
        self,
        adapter: AgentAdapter,
        call: Call,
        parser: AgentStream,
        related: bool,
        deadline: float,
        cut: APIError,
        on_activity: ActivityCallback | None,
    ) -> AsyncGenerator[str | Answer, None]:
        """The rest of the run whose stream (``call``) broke with ``cut`` after ``parser`` saw
        its id: its events after the last one seen, else (the API does not stream it again)
        its state, polled until it ends or ``deadline``. SubmissionUnknown, naming the run,
        when it cannot be read (not stored, expired, unreachable): it may still be billed, and
        nothing is sent again."""
        remote_id = parser.response_id
        assert remote_id is not None  # read back only once the API named the run
        logger.warning(
            "The stream of run %s broke (%s); reading the run back by its id",
            remote_id,
            _described(cut),
        )
        seen = parser.activity
        try:
            async with aclosing(self.follow(adapter, remote_id, parser, deadline)) as items:
                async for item in items:
                    if isinstance(item, Activity):
                        if on_activity is not None and item != seen:
                            seen = item
                            on_activity(item)
                        continue
                    yield item
            return
        except RemoteRunFailed:
            raise
        except APIError as error:
            logger.info(
                "Run %s cannot be streamed again (%s); polling it", remote_id, _described(error)
            )
        yield await self._polled_until(call, remote_id, related, deadline, cut)

    async def _polled_until(
        self, call: Call, remote_id: str, related: bool, deadline: float, cut: APIError
    ) -> Answer:
        """The answer of run ``remote_id`` once it ends, polled with backoff until ``deadline``;
        transient failures are waited out. SubmissionUnknown (naming the run, and what cut its
        stream when that was a reply it could not read) when the run cannot be read: unknown to
        the API (404: not stored, or expired), a lasting failure, the deadline."""
        loop = asyncio.get_running_loop()
        what = self._wire.what(call)
        before = unread_words(cut, "its stream")

        def lost(happened: str) -> SubmissionUnknown:
            cause = f"its run {remote_id} {happened}"
            return submission_unknown(
                what,
                f"{before}; {cause}" if before else cause,
                remote_id=remote_id,
                unreadable=bool(before),
            )

        pause, failures = 0.5, 0
        while True:
            try:
                answer = await self.poll_before(remote_id, related, deadline)
            except RemoteRunFailed:
                raise
            except APIError as error:
                if error.status_code == 404 or not _resumable(error) or failures >= 6:
                    raise lost(f"could not be read back: {error.code}") from error
                failures += 1
                await asyncio.sleep(
                    min(self._wire.retry.delay(error, failures), max(deadline - loop.time(), 0))
                )
                answer = None
            except TimeoutError as error:  # the deadline, mid-poll (not an APITimeoutError)
                raise lost("was still running at the deadline") from error
            if answer is not None:
                return answer
            if loop.time() >= deadline:
                raise lost("was still running at the deadline")
            await asyncio.sleep(min(pause, max(deadline - loop.time(), 0)))
            pause = min(pause * 1.5, 3.0)

    async def poll_until(self, remote_id: str, related: bool, deadline: float) -> Answer:
        """The answer of run ``remote_id``, polled with backoff until it ends; APITimeoutError
        when it is still running at ``deadline`` (loop time), any APIError of a poll as it is."""
        loop = asyncio.get_running_loop()
        pause = 0.5
        while loop.time() < deadline:
            try:
                answer = await self.poll_before(remote_id, related, deadline)
            except APIError:  # an APITimeoutError too: the poll's own, not the deadline
                raise
            except TimeoutError:  # the deadline, mid-poll
                break
            if answer is not None:
                return answer
            await asyncio.sleep(min(pause, max(deadline - loop.time(), 0)))
            pause = min(pause * 1.5, 3.0)
        raise APITimeoutError(
            f"Run {remote_id} was still running at the end of the request's timeout "
            "(PERPLEXITY_DEEP_RESEARCH_TIMEOUT for deep research). It goes on at the API: "
            "retry later to read its report, or allow more time (milliseconds).",
            reason="deadline",
            request_id=remote_id,
        )

    async def poll_before(self, remote_id: str, related: bool, deadline: float) -> Answer | None:
        """One poll of a run whose deadline is ``deadline`` (loop time): its own timeout
        (PERPLEXITY_TIMEOUT) never carries the wait past it (TimeoutError)."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout_at(deadline):
            return await self._poll(remote_id, related, deadline - loop.time())
