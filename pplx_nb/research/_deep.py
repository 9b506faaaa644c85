"""The deep-research job runner: what a Worker runs for each queued research job.

The API's background mode is used, with the remote id recorded first, so a job recovered after a
crash follows its run again instead of paying for the research twice; a paid submission whose
reply was lost is never sent again by itself (SUBMISSION_UNKNOWN). The run is followed through its
stream of events when the API offers one (the job's progress then says what the run is doing:
searching, reading results, fetching pages, writing), and polled otherwise or once that stream
cannot go on. Polls wait out outages until the run's deadline (PERPLEXITY_DEEP_RESEARCH_TIMEOUT
after submission), then cancel the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from contextlib import aclosing, suppress
from typing import TYPE_CHECKING, NoReturn

from pplx_nb._config import Settings
from pplx_nb._errors import (
    APIError,
    APITimeoutError,
    FilesystemError,
    InvalidInput,
    LeaseLost,
    NetworkError,
    PplxError,
    RemoteRunFailed,
    RunTimedOut,
    SubmissionUnknown,
)
from pplx_nb._logging import get_logger
from pplx_nb._models import Answer, JobParams, JobRequest, JobStatus, Message
from pplx_nb._options import SearchOptions
from pplx_nb.research._answers import assistant_message, priced
from pplx_nb.research._clients import ClientPool
from pplx_nb.research._guard import AnswerGuard
from pplx_nb.research._kept import KeptAnswers
from pplx_nb.research._progress import (
    FINALIZING,
    QUERYING,
    RunProgress,
    expected_research_seconds,
    research_progress,
)
from pplx_nb.research._runner import TurnRunner, submission_unknown, unknown_for
from pplx_nb.research._turns import (
    DEEP_RESEARCH_MODEL,
    build_request,
    fitted_messages,
    ts_options,
)

if TYPE_CHECKING:
    from pplx_nb.api import AsyncClient, Request
    from pplx_nb.jobs import Job, JobContext
    from pplx_nb.store import ConversationStore

__all__ = ["DeepResearchRunner", "related_questions_asked", "report_message", "stop_or_collect"]

logger = get_logger("pplx_nb.research")

_NOT_FOUND = 404


class DeepResearchRunner:
    """Runs one queued research job: submit, poll, store the report once (a ``JobRunner``).

    Args:
        settings: the deep-research deadline.
        store: where the job's conversation is.
        guard: stores the report only while the job's attempt still owns it.
        clients: makes one client per job.
        runner: counts the job's request.
        kept: where a report the store cannot take is kept until it can.
    """

    def __init__(
        self,
        settings: Settings,
        store: ConversationStore,
        guard: AnswerGuard,
        clients: ClientPool,
        runner: TurnRunner,
        kept: KeptAnswers,
    ) -> None:
        self._settings = settings
        self._store = store
        self._guard = guard
        self._clients = clients
        self._runner = runner
        self._kept = kept

    async def __call__(self, job: Job, ctx: JobContext) -> None:
        """Run ``job``; a job whose answer is already stored (a crash between storing and
        completing) is not run again, nor one whose report is kept outside a store that could
        not take it: that report is stored instead."""
        if self._has_report(job):
            return
        history, request = self._request_of(job)
        started = time.perf_counter()
        # One client per job: nothing stays bound to the worker's loop after it stops.
        async with self._clients.for_job() as client:
            try:
                remote_id, answer = await self._research(client, job, request, ctx)
            except (RemoteRunFailed, RunTimedOut):
                # The run ended unanswered (failed, cancelled, past its deadline): what it
                # cost is unknown, so its reservation stays spent.
                await _settle(client, job.job_id, None)
                raise
            await _settle(client, job.job_id, answer)
        message = report_message(answer, job.tool, job.request, job.job_id, job.params)
        self._store_report(job, ctx, message, answer, history, remote_id)
        self._runner.record(started, answer, ok=True)

    def _has_report(self, job: Job) -> bool:
        """Whether ``job``'s report is stored already, or was kept outside a store that could
        not take it and is stored now (the job completed with it)."""
        conversation = self._store.load(job.conversation_id)
        if any(m.job_id == job.job_id for m in conversation.messages):
            return True
        kept = self._kept.restore(job.conversation_id)
        return kept is not None and kept.job_id == job.job_id

    def _request_of(self, job: Job) -> tuple[list[Message], Request]:
        """The conversation's history and the API request that runs ``job``."""
        from pplx_nb import context

        # A job the TypeScript server queued has only its params; the question is stored.
        opts = _options(job.request, job.params)
        model = str(job.request.get("model") or DEEP_RESEARCH_MODEL)
        history = context.chain_messages(self._store, job.conversation_id)
        messages = fitted_messages(history, model, job.request.get("notes") or [])
        if messages and messages[-1]["role"] == "user" and job.request.get("searchQuery"):
            messages[-1] = {"role": "user", "content": str(job.request["searchQuery"])}
        return history, build_request(messages, model, opts)

    async def _research(
        self, client: AsyncClient, job: Job, request: Request, ctx: JobContext
    ) -> tuple[str, Answer]:
        """The job's run (submitted, or the one it already has) and its report.

        A job stopped meanwhile (cancelled, or its lease lost) does not leave its run billing
        for nobody: it is stopped, or handed over to the job's next attempt.
        """
        remote_id = ctx.remote_id
        try:
            remote_id = remote_id or await _collecting(job, ctx)
            if remote_id is None:
                await ctx.report(*QUERYING)
                remote_id = await self._submit(client, request, ctx)
            return remote_id, await self._poll(client, request, remote_id, ctx)
        except (LeaseLost, asyncio.CancelledError):
            # Stopped because the job was cancelled (or lost): a run nobody will read must
            # not go on being billed. The canceller asks too, when it knows the run's id.
            # A run that had finished already is paid for: its report is kept.
            if ctx.remote_id is not None and ctx.cancelled():
                related = request.return_related_questions
                _, report = await stop_or_collect(
                    client, ctx.remote_id, related=related, hold=job.job_id
                )
                if report is not None:
                    self.keep_report(job.conversation_id, job.job_id, job.tool, job.request, report)
            elif ctx.unrecorded_run is not None:
                # Followed from memory, its id never recorded: the next attempt takes it.
                await self._hand_over_run(client, ctx.unrecorded_run, ctx)
            raise

    def _store_report(
        self,
        job: Job,
        ctx: JobContext,
        message: Message,
        answer: Answer,
        history: list[Message],
        remote_id: str,
    ) -> None:
        """Store the job's report ``message`` while its attempt owns the job; a paid report
        the store cannot take, or that reached the job too late, is kept, never dropped."""
        try:
            self._guard.answer_job(job.conversation_id, message, ctx.check_owner)
        except FilesystemError as exc:
            # Paid for: kept outside the store, and stored by the job's next attempt (or a
            # retry, or a follow-up) once the store can take it.
            question = next(m for m in reversed(history) if m.role == "user")
            raise self._kept.keep(exc, job.conversation_id, question, message, answer) from exc
        except LeaseLost:
            # The job was cancelled, or this attempt's lease ran out, after the run finished
            # and before its report was stored: paid for, so handed over (stored once, by the
            # store's lock, if the job still wants it) rather than dropped.
            self._keep(job.conversation_id, job.job_id, message, remote_id)
            raise

    def keep_report(
        self,
        conversation_id: str,
        job_id: str,
        tool: str,
        request: JobRequest,
        report: Answer,
    ) -> JobStatus | None:
        """Store the report of cancelled job ``job_id``, whose run had finished before the
        cancel reached it, and return the job's status: ``completed`` once it is stored (by
        whoever brought it first). Never raises: a report that cannot be stored is logged
        with its run, which the API still holds."""
        message = report_message(report, tool, request, job_id)
        return self._keep(conversation_id, job_id, message)

    def _keep(
        self, conversation_id: str, job_id: str, message: Message, remote_id: str | None = None
    ) -> JobStatus | None:
        try:
            status = self._guard.answer_late(conversation_id, job_id, message)
        except PplxError as exc:
            status, why = None, str(exc)
        else:
            why = "the job or its conversation moved on"
        if status is None or status.status != "completed":
            run = remote_id or (status.remote_id if status else None) or "(see its status)"
            logger.error(
                "The research of %s finished, but its report reached no attempt owning the job "
                "and could not be stored (%s); read it at the API as run %s",
                conversation_id,
                why,
                run,
            )
        return status

    async def _submit(self, client: AsyncClient, request: Request, ctx: JobContext) -> str:
        """Start the job's background run once, recording its id before anything else.

        Never sent blindly a second time: an earlier attempt that began a submission and never
        learnt its outcome (its worker died while the reply was arriving), or a reply lost now,
        ends the job with SUBMISSION_UNKNOWN, unless that attempt handed its run over since.
        """
        conversation_id, job_id = ctx.job.conversation_id, ctx.job.job_id
        if ctx.submission_unfinished:
            handed_over = ctx.adopt_handed_over_run()
            if handed_over is not None:
                return handed_over
            raise submission_unknown(
                "The background run request",
                "an earlier attempt stopped while its reply was arriving",
                conversation_id,
            )
        await ctx.begin_submission()
        # Reserved under the job's id: whichever process reads the run's end settles it.
        submission = asyncio.ensure_future(client.submit_background(request, hold=job_id))
        try:
            remote_id = await asyncio.shield(submission)
        except asyncio.CancelledError:
            # Stopped mid-submission (the job cancelled, its lease lost, or the worker
            # stopping): the run may already exist and bill, so its reply is awaited rather
            # than dropped.
            with contextlib.suppress(PplxError):
                await self._hand_over_run(client, await submission, ctx)
            raise
        except SubmissionUnknown as exc:
            raise unknown_for(exc, conversation_id) from exc
        except PplxError:
            await ctx.end_submission()
            raise
        await self._record_run(client, remote_id, ctx)
        return remote_id

    async def _record_run(self, client: AsyncClient, remote_id: str, ctx: JobContext) -> None:
        """Record the id of the run just submitted, so that no attempt pays for another.

        A store that fails (Redis stopped, a full disk) is tried again, backing off, for one
        lease, while the run goes on at the API; then the run is followed from memory all the
        same, each progress report trying again until the run's deadline. Once a write goes
        through past the lease, it is refused as no longer this attempt's: the run is then
        handed over to the job's next attempt (LeaseLost is raised after).
        """
        conversation_id = ctx.job.conversation_id
        patience = time.monotonic() + ctx.lease_seconds
        pause = 0.5
        while True:
            try:
                await ctx.record_remote_id(remote_id)
                return
            except LeaseLost:
                await self._hand_over_run(client, remote_id, ctx)
                raise
            except PplxError as exc:
                if time.monotonic() + pause > patience:
                    logger.warning(
                        "Could not record run %s of %s (%s); following it anyway, and trying "
                        "again with each progress report",
                        remote_id,
                        conversation_id,
                        exc,
                    )
                    ctx.follow_unrecorded(remote_id)
                    return
                logger.warning(
                    "Could not record run %s of %s (%s); trying again in %g s",
                    remote_id,
                    conversation_id,
                    exc,
                    pause,
                )
            try:
                await asyncio.sleep(pause)
            except asyncio.CancelledError:
                await self._hand_over_run(client, remote_id, ctx)
                raise
            pause = min(pause * 2, 5.0)

    async def _hand_over_run(self, client: AsyncClient, remote_id: str, ctx: JobContext) -> None:
        """Give run ``remote_id``, which this attempt submitted and could not record as its
        own, to the job's next attempt. A run no attempt will follow (the job was cancelled,
        ended, or follows another run) is stopped instead, and its report kept if it had
        finished already."""
        job = ctx.job
        if not ctx.cancelled():
            try:
                if await ctx.hand_over_run(remote_id):
                    logger.warning(
                        "Run %s of %s is recorded for the job's next attempt to follow",
                        remote_id,
                        job.conversation_id,
                    )
                    return
            except PplxError as exc:
                logger.error(
                    "Run %s of %s could not be recorded (%s)", remote_id, job.conversation_id, exc
                )
        logger.info(
            "Stopping run %s: no attempt of the job of %s follows it",
            remote_id,
            job.conversation_id,
        )
        related = related_questions_asked(job.request)
        _, report = await stop_or_collect(client, remote_id, related=related)
        if report is not None:
            self.keep_report(job.conversation_id, job.job_id, job.tool, job.request, report)

    async def _poll(
        self, client: AsyncClient, request: Request, remote_id: str, ctx: JobContext
    ) -> Answer:
        """Follow (or poll) a background run until it ends, through outages, until its deadline.

        Transient failures (5xx, 429, 408/409, timeouts, broken connections) are waited out
        with backoff; only the run's end, a permanent error or PERPLEXITY_DEEP_RESEARCH_TIMEOUT
        after submission ends the attempt. At the deadline the run is cancelled (best effort).
        """
        loop = asyncio.get_running_loop()
        budget = self._budget
        deadline, started = _run_times(ctx, budget)
        expected = expected_research_seconds(self._settings)
        reported = QUERYING[0]
        if client.follows_runs:
            progress = RunProgress(expected, started)
            answer, reported = await self._follow(
                client, request, remote_id, ctx, deadline, progress
            )
            if answer is not None:
                await _finalizing(ctx)
                return answer
        delay = 0.1
        outage = 0
        failed: str | None = None  # why the last poll could not read the run
        while True:
            if loop.time() >= deadline:
                await self._time_out(client, remote_id, ctx, budget, failed)
            try:
                async with asyncio.timeout_at(deadline):
                    answer = await client.poll_background(
                        remote_id,
                        related=request.return_related_questions,
                        run_left=deadline - loop.time(),
                    )
            except InvalidInput as exc:
                if exc.status_code != _NOT_FOUND:
                    raise
                remote_id = await self._resubmit(client, request, remote_id, exc, ctx)
                deadline = loop.time() + budget
                continue
            except APIError as exc:
                await self._wait_out(client, exc, remote_id, outage, deadline - loop.time())
                outage += 1
                failed = exc.code if exc.status_code is None else f"HTTP {exc.status_code}"
                continue
            except TimeoutError:
                # The deadline passed mid-poll: cancelled at the top of the loop.
                failed = "no reply before the deadline"
                continue
            outage, failed = 0, None
            if answer is not None:
                await _finalizing(ctx)
                return answer
            percentage, message = research_progress(time.monotonic() - started, expected)
            if percentage > reported:
                reported = percentage
                await _report(ctx, percentage, message)
            await asyncio.sleep(min(delay, max(deadline - loop.time(), 0)))
            delay = min(delay * 1.5, 3.0)

    async def _follow(
        self,
        client: AsyncClient,
        request: Request,
        remote_id: str,
        ctx: JobContext,
        deadline: float,
        progress: RunProgress,
    ) -> tuple[Answer | None, int]:
        """The run's answer read from its event stream, reporting what the run does as the
        job's progress; ``None`` when the stream cannot be followed to the end (poll instead).

        Also returns the last percentage reported, which later progress never goes below.
        """
        loop = asyncio.get_running_loop()
        moved = asyncio.Event()

        async def read() -> Answer | None:
            items = client.follow_background(
                remote_id,
                related=request.return_related_questions,
                timeout=max(deadline - loop.time(), 0.001),
            )
            async with aclosing(items) as stream:
                async for item in stream:
                    if isinstance(item, Answer):
                        return item
                    progress.saw(item)
                    moved.set()
            return None

        try:
            async with asyncio.timeout_at(deadline):
                answer = await _reporting(asyncio.ensure_future(read()), moved, progress, ctx)
            return answer, progress.now()[0]
        except RemoteRunFailed:
            raise
        except APIError as exc:
            logger.info(
                "Run %s could not be followed by its events (%s); polling it",
                remote_id,
                exc.code if exc.status_code is None else f"HTTP {exc.status_code}",
            )
        except TimeoutError:
            await self._time_out(client, remote_id, ctx, self._budget)
        return None, progress.now()[0]

    @property
    def _budget(self) -> float:
        return self._settings.deep_research_timeout_ms / 1000

    async def _resubmit(
        self,
        client: AsyncClient,
        request: Request,
        unknown: str,
        error: InvalidInput,
        ctx: JobContext,
    ) -> str:
        """Submit again a run the API no longer knows (it expired or was never stored)."""
        logger.warning("Remote run %s is unknown to the API; starting over", unknown)
        remote_id = await self._submit(client, request, ctx)
        await ctx.note_error(
            InvalidInput(
                f"The background run {unknown} is unknown to the API (it expired or was "
                f"never stored: {error.message}); it was resubmitted as {remote_id}.",
                status_code=_NOT_FOUND,
            )
        )
        return remote_id

    @staticmethod
    async def _wait_out(
        client: AsyncClient, error: APIError, remote_id: str, outage: int, left: float
    ) -> None:
        """Back off after a failed poll worth waiting out; raise ``error`` if it is not one."""
        if not _transient(error):
            raise error
        pause = max(min(client.retry.delay(error, min(outage, 6)), left), 0)
        logger.warning(
            "Polling run %s failed (%s); trying again in %.1f s (until its deadline)",
            remote_id,
            error.code if error.status_code is None else f"HTTP {error.status_code}",
            pause,
        )
        await asyncio.sleep(pause)

    async def _time_out(
        self,
        client: AsyncClient,
        remote_id: str,
        ctx: JobContext,
        budget: float,
        failed: str | None = None,
    ) -> NoReturn:
        """Cancel a run past its deadline and end the job with TIMEOUT_ERROR (not retried).

        ``failed``: why the last poll could not read the run, when it could not (then whether
        the run was still running is not known, and the message says so)."""
        cancelled = await client.cancel_background(remote_id)
        conversation_id = ctx.job.conversation_id
        seen = "was still running"
        if failed is not None:
            seen = f"could not be read ({failed} on its last poll)"
        what = (
            "was cancelled"
            if cancelled
            else "may still be running: the API did not confirm the cancel sent for it"
        )
        raise RunTimedOut(
            f"The deep research of conversation {conversation_id} {seen} {budget:g} s after it "
            f"was submitted (PERPLEXITY_DEEP_RESEARCH_TIMEOUT); its run {remote_id} {what}. "
            "The conversation stays open: follow up to ask again, or allow more time with "
            "PERPLEXITY_DEEP_RESEARCH_TIMEOUT (milliseconds).",
            conversation_id=conversation_id,
            remote_id=remote_id,
            cancelled=cancelled,
        )


async def _reporting(
    reader: asyncio.Future[Answer | None],
    moved: asyncio.Event,
    progress: RunProgress,
    ctx: JobContext,
) -> Answer | None:
    """What ``reader`` returns, reporting ``progress`` meanwhile: when an event moves it
    (``moved``) and, between events, as the time moves it. Reported from here, not from the
    reader, so a lost lease stops both; cancelling this cancels the reader."""
    reader.add_done_callback(lambda _: moved.set())
    last: tuple[int, str] | None = None
    try:
        while not reader.done():
            with suppress(TimeoutError):
                async with asyncio.timeout(progress.interval):
                    await moved.wait()
            moved.clear()
            step = progress.now()
            if step != last and not reader.done():
                last = step
                await _report(ctx, *step)
        return reader.result()
    finally:
        if not reader.done():
            reader.cancel()
            await asyncio.wait({reader})
            if not reader.cancelled():
                reader.exception()  # retrieved: this call's own exception is the one raised


def report_message(
    answer: Answer,
    tool: str,
    request: JobRequest,
    job_id: str,
    params: JobParams | None = None,
) -> Message:
    """The assistant turn that stores a job's report (priced; tagged with ``jobId``), from
    the job's queued ``request`` (or the TypeScript server's ``params``)."""
    opts = _options(request, params or {})
    model = str(request.get("model") or DEEP_RESEARCH_MODEL)
    priced(answer, model)
    return assistant_message(
        answer,
        tool=tool,
        model=model,
        notes=[str(note) for note in request.get("notes") or []],
        show_thinking=bool(opts.get("show_thinking")),
        job_id=job_id,
    )


def _options(request: JobRequest, params: JobParams) -> SearchOptions:
    return request.get("opts") or ts_options(params)


def related_questions_asked(request: JobRequest) -> bool:
    """Whether a job's queued ``request`` asked for related questions (its run's answer then
    ends with a list to split off)."""
    return bool(_options(request, {}).get("return_related_questions"))


async def stop_or_collect(
    client: AsyncClient, remote_id: str, *, related: bool, hold: str | None = None
) -> tuple[bool, Answer | None]:
    """Ask the API to stop the run of a cancelled job; when it will not (the run had ended
    already, or no reply came), read the run. Returns whether the run is known to have stopped
    or ended, and its report when it had finished: that report is paid for, never dropped.
    Bounded: never hangs.

    ``hold``: the job's budget hold (its id), settled here: to the report's cost, released when
    the API stopped the run (a cancelled run reports no cost), kept as spent otherwise."""
    stopped, answer = await _stop_or_collect(client, remote_id, related)
    if hold is not None:
        if answer is not None:
            await _settle(client, hold, answer)
        elif stopped:
            await _release(client, hold)
        else:
            await _settle(client, hold, None)
    return stopped, answer


async def _stop_or_collect(
    client: AsyncClient, remote_id: str, related: bool
) -> tuple[bool, Answer | None]:
    try:
        async with asyncio.timeout(client.settings.timeout_ms / 1000 * 3):
            if await client.cancel_background(remote_id, retry=True):
                return True, None
            answer = await client.poll_background(remote_id, related=related)
    except RemoteRunFailed:
        return True, None  # it ended without an answer: failed, or cancelled already
    except (PplxError, TimeoutError) as exc:
        logger.warning("Run %s could not be read after its cancel: %s", remote_id, exc)
        return False, None
    return answer is not None, answer


async def _settle(client: AsyncClient, hold: str, answer: Answer | None) -> None:
    """Settle a job's budget hold to ``answer``'s cost (``None``, or no cost reported: its
    reservation stays spent), in whichever process learnt the run's end."""
    guard = client.budget
    if guard is not None:
        cost = answer.cost.total_cost if answer is not None and answer.cost is not None else None
        await asyncio.to_thread(guard.settle, hold, cost)


async def _release(client: AsyncClient, hold: str) -> None:
    """Release a job's budget hold: its run was stopped before it cost anything."""
    if client.budget is not None:
        await asyncio.to_thread(client.budget.release, hold)


async def _collecting(job: Job, ctx: JobContext) -> str | None:
    """The run a retried question already started (its report is read by id before anything
    is paid for again), recorded as the job's run; ``None`` when there is none. Only on the
    first attempt: a later one follows a run that failed, or was unknown and resubmitted."""
    run = job.request.get("collectRunId")
    if not isinstance(run, str) or not run or ctx.attempt != 1:
        return None
    logger.info("Reading run %s, started earlier for %s, by its id", run, job.conversation_id)
    try:
        await ctx.record_remote_id(run)
    except LeaseLost:
        raise
    except PplxError as exc:
        logger.warning("Could not record run %s of %s (%s)", run, job.conversation_id, exc)
    return run


def _run_times(ctx: JobContext, budget: float) -> tuple[float, float]:
    """The deadline of the job's run (event-loop time), ``budget`` seconds after it was
    submitted (maybe by an earlier attempt), and that submission (``time.monotonic``)."""
    submitted = ctx.submitted_at or time.time()
    deadline = asyncio.get_running_loop().time() + (submitted + budget - time.time())
    return deadline, time.monotonic() - max(time.time() - submitted, 0.0)


async def _finalizing(ctx: JobContext) -> None:
    """Report that the run's report is being stored. A lease lost by now is left to that
    store's own fence, which hands the paid report over rather than dropping it."""
    with contextlib.suppress(LeaseLost):
        await _report(ctx, *FINALIZING)


async def _report(ctx: JobContext, percentage: int, message: str) -> None:
    """Report a paid run's progress; a store that cannot record it is logged, not a reason to
    give up the run (its report is kept if the store still fails when it arrives)."""
    try:
        await ctx.report(percentage, message)
    except FilesystemError as exc:
        logger.warning("Progress of %s not recorded: %s", ctx.job.conversation_id, exc)


def _transient(error: APIError) -> bool:
    """Whether a failed poll is worth waiting out: 5xx, 429, 408/409, timeouts, broken links."""
    status = error.status_code
    if status is None:
        return isinstance(error, NetworkError) or (
            isinstance(error, APITimeoutError) and not isinstance(error, RunTimedOut)
        )
    return status in (408, 409, 429) or status >= 500
