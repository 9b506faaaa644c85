"""The ``%%pplx`` family of IPython magics: thin adapters that parse, call the Researcher, render.

``%load_ext pplx_nb`` registers them (:mod:`.extension`); loading imports only IPython's magic
machinery — the Researcher, pandas and ipywidgets are imported the first time a magic runs. Each
kernel has one :class:`~pplx_nb.research.Researcher`, created on first use from the environment with
deep research queued as background jobs (unless ``PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH=false``).
:func:`set_researcher` replaces it (tests, or a Researcher configured in code)::

    from pplx_nb import Researcher, Settings
    from pplx_nb.notebook.magics import set_researcher
    set_researcher(Researcher(Settings(conversation_logs_dir="my-logs")))
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from IPython.core.magic import magics_class, no_var_expand
from traitlets import Bool, Float

from pplx_nb._errors import PplxError
from pplx_nb._sync import TICK, iterate_sync
from pplx_nb.notebook._cite import provenance_of, web_provenance
from pplx_nb.notebook._input import (
    argument,
    empty_cell_keeper,
    interpolate,
    magic_arguments,
    output_options,
    question_mark_keeper,
    search_options,
    search_opts,
    seconds,
    split_conversation_id,
    unquote,
    web_options,
    web_opts,
)
from pplx_nb.notebook._kernel import (
    AlreadyShown,
    CellMagics,
    Shown,
    forget,
    get_researcher,
    last_conversation_id,
    line_cell_magic,
    line_magic,
    remember,
    run_with_progress,
    set_researcher,
    show,
    show_widget,
    spelled,
    wait_served,
)
from pplx_nb.notebook._render import (
    cancel_bundle,
    cancelled_wait_bundle,
    jobs_frame,
    web_results_bundle,
)
from pplx_nb.notebook._spend import add_cost_line, estimate_bundle
from pplx_nb.notebook._views import ProgressView, StreamView
from pplx_nb.notebook.display import (
    answer_bundle,
    conversation_bundle,
    done_bundle,
    job_bundle,
    notice_bundle,
)

if TYPE_CHECKING:
    from pplx_nb._models import Answer, JobStatus, Progress
    from pplx_nb.notebook.widgets import JobMonitor
    from pplx_nb.research import CostEstimate, WebResults

__all__ = [
    "PplxMagics",
    "get_researcher",
    "last_conversation_id",
    "set_researcher",
]

T = TypeVar("T")

_SETTLE_SECONDS = 10.0
"""How long a magic waits for a job's live monitor to show how the job ended."""


@magics_class
class PplxMagics(CellMagics):
    """``%%pplx``, ``%%pplx_research``, ``%pplx_followup`` and the job magics; the display hook.

    The magics that look back (``%pplx_history`` ...) are :class:`PplxLookbackMagics`.

    Per-kernel options, IPython style: ``%config PplxMagics`` lists them,
    ``%config PplxMagics.related_buttons = False`` sets one.
    """

    stream_interval = Float(
        0.1, help="Seconds between repaints of a streaming answer (at most)."
    ).tag(config=True)
    monitor_interval = Float(
        0.5, help="Seconds between the status reads of a research job's live monitor."
    ).tag(config=True)
    related_buttons = Bool(
        True, help="Show related questions as buttons that ask them (False: as a list)."
    ).tag(config=True)

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.shown = Shown()
        self.monitors: dict[str, JobMonitor] = {}
        """Jobs a live JobMonitor in this kernel follows: their report shows there."""
        self.keep_question_marks = question_mark_keeper(self.magics["line"])
        self.keep_empty_cells = empty_cell_keeper(self.magics["cell"])

    # -- showing answers and jobs ---------------------------------------------------------------

    def _stream(
        self,
        ask: Callable[[Callable[[Progress], object]], AsyncIterator[str | Answer]],
        label: str,
        *,
        debug: bool,
        branch_of: str | None = None,
    ) -> Answer:
        """Show the deltas of ``ask(on_activity)`` as they arrive (at most every 100 ms), then
        the rendered answer.

        While no delta comes (before the first byte, or in a pause) the view still repaints
        every 100 ms: its clock counts, text held back by batching shows, and its status line
        says what the run reports doing ("Searching: 2 queries", "Read 8 results", ...).
        """
        from pplx_nb._models import Answer

        view = StreamView(
            label=label, publish=self._publisher(), interval=float(self.stream_interval)
        )
        answer: Answer | None = None
        items = ask(view.activity)
        try:
            for item in iterate_sync(items, tick=view.interval):
                if item is TICK:
                    view.tick()
                elif isinstance(item, str):
                    view.feed(item)
                elif isinstance(item, Answer):
                    answer = item
            if answer is None:
                raise PplxError("The answer stream ended without an answer; run the cell again.")
        except BaseException as exc:
            view.flush()
            view.fail(exc, debug=debug)
            raise AlreadyShown(exc) from exc
        live = self._buttons(answer)
        view.finish(answer, related=not live, branch_of=branch_of, metadata=self._origin(answer))
        if live:
            self._related_buttons(answer)
        return answer

    def _buttons(self, answer: Answer) -> bool:
        """Whether ``answer``'s related questions show as buttons (else as a list)."""
        return self.widgets_live and bool(self.related_buttons) and bool(answer.related_questions)

    def _related_buttons(self, answer: Answer) -> None:
        from pplx_nb.notebook.widgets import RelatedQuestions

        show_widget(
            RelatedQuestions(
                answer, self.researcher, on_answer=lambda a: remember(a.conversation_id)
            )
        )

    def _finish(self, args: argparse.Namespace, value: T) -> T:
        self.shown.add(value)
        self._store(args, value)
        self._thinking_notice(args, value)
        return value

    def _thinking_notice(self, args: argparse.Namespace, value: object) -> None:
        """Say why ``--thinking`` showed nothing, rather than drop the option without a word."""
        from pplx_nb._models import Answer

        if getattr(args, "thinking", False) and isinstance(value, Answer) and not value.thinking:
            show(
                notice_bundle(
                    "NO_THINKING",
                    f"{value.model or 'The model'} returned no reasoning with this answer: only "
                    "reasoning models show it (e.g. `-m sonar-reasoning-pro`, which returns its "
                    "reasoning under PERPLEXITY_API_STYLE=sonar).",
                )
            )

    def _queued_job(self, status: JobStatus, estimate: CostEstimate | None = None) -> None:
        if self.widgets_live:
            from pplx_nb.notebook.widgets import JobMonitor

            monitor = JobMonitor(
                status.conversation_id,
                self.researcher,
                interval=float(self.monitor_interval),
                status=status,
                estimate=estimate,
            )
            show_widget(monitor)
            self.monitors[status.conversation_id] = monitor
        else:
            show(job_bundle(status))

    def _settle(self, conversation_id: str) -> None:
        """Have the job's live monitor, if any, show how the job ended, and publish it from
        this cell: nbclient (nbconvert, papermill) applies only the updates of the cell it runs,
        so the notebook it saves then holds the job's last state, not "pending"."""
        monitor = self.monitors.get(conversation_id)
        if monitor is not None:
            monitor.join(_SETTLE_SECONDS)
            monitor.publish()

    def _blocking(
        self,
        label: str,
        call: Callable[[Callable[[Progress], object]], Answer | JobStatus],
        *,
        debug: bool,
        interrupted: str = "Stopped. Run the cell again to retry.",
        report_above: bool = False,
        estimate: CostEstimate | None = None,
    ) -> Answer | JobStatus:
        """Block on ``call`` with a progress bar; on Ctrl-C say ``interrupted`` (what goes on).

        ``report_above``: a live monitor above shows the report, so only a line says it is done.
        ``estimate``: what the run was expected to cost, said under the report beside its cost.
        """
        from pplx_nb._models import Answer

        view = ProgressView(label, publish=self._publisher())
        try:
            result = run_with_progress(call, view)
        except KeyboardInterrupt as exc:
            view.close(notice_bundle("INTERRUPTED", interrupted))
            raise AlreadyShown(exc) from exc
        except BaseException as exc:
            view.fail(exc, debug=debug)
            raise AlreadyShown(exc) from exc
        if not isinstance(result, Answer):
            view.close()
        elif report_above:
            view.close(done_bundle(result, elapsed=view.elapsed), self._origin(result))
        else:
            answered = answer_bundle(result, elapsed=view.elapsed, research=True)
            if estimate is not None:
                answered = add_cost_line(answered, result, estimate)
            view.close(answered, self._origin(result))
        return result

    def _origin(self, answer: Answer) -> dict[str, Any] | None:
        """Where ``answer`` came from, saved with its output (see :mod:`pplx_nb.provenance`)."""
        return provenance_of(answer, self.researcher)

    # -- asking -------------------------------------------------------------------------------

    @no_var_expand
    @magic_arguments()
    @argument("words", nargs="*", help="the question (or write it in the cell)")
    @search_options
    @line_cell_magic
    def pplx(self, line: str, cell: str | None = None) -> Answer | None:
        """Ask a question with web search; the cell is the question. Starts a NEW conversation.

        The answer streams in, then shows with linked citations, its sources and the line to
        follow up. {name} in the question is replaced by the value of the variable name.

        Examples:
          %%pplx --related
          How do I cancel an asyncio task?

          %pplx -m medium --recency month -o answer what is new in asyncio?

        %pplx_help lists every magic.
        """
        __tracebackhide__ = True
        with self._guard(line, spelled("pplx", cell)):
            args = self._parse(self.pplx, line)
            forget()
            query = self._question(args.words, cell, args.raw)
            answer = self._stream(
                lambda on_activity: self.researcher.astream_search(
                    query, files=args.file, on_activity=on_activity, **search_opts(args)
                ),
                "Searching",
                debug=args.debug,
            )
            remember(answer.conversation_id)
            return self._finish(args, answer)
        return None

    @no_var_expand
    @magic_arguments()
    @argument("words", nargs="*", help="the question (or write it in the cell)")
    @argument("--wait", action="store_true", help="block with a progress bar until the report")
    @search_options
    @line_cell_magic
    def pplx_research(self, line: str, cell: str | None = None) -> Answer | JobStatus | None:
        """Deep research on the cell's question. Starts a NEW conversation.

        In notebooks it is queued as a background job by default: a live monitor shows its
        progress and then the report while you keep working. --wait blocks instead.

        Examples:
          %%pplx_research -o job
          Compare asyncio, trio and curio for structured concurrency

          %pplx_wait          (later: block until the report, for notebooks run top to bottom)

        %pplx_help lists every magic.
        """
        __tracebackhide__ = True
        with self._guard(line, spelled("pplx_research", cell)):
            args = self._parse(self.pplx_research, line)
            forget()
            query = self._question(args.words, cell, args.raw)
            estimate = self._estimate(query, search_opts(args))
            result = self._research(
                args,
                lambda wait, on_progress: self.researcher.deep_research(
                    query, wait=wait, files=args.file, on_progress=on_progress, **search_opts(args)
                ),
                estimate,
            )
            return self._finish(args, result)
        return None

    def _estimate(self, query: str, opts: dict[str, Any]) -> CostEstimate | None:
        """Show what a deep research on ``query`` may cost before it is queued; ``None`` when
        it cannot be told (the question's own error, if any, comes when it is asked)."""
        try:
            estimate = self.researcher.estimate(query, mode="research", **opts)
        except PplxError:
            return None
        show(estimate_bundle(estimate))
        return estimate

    def _research(
        self,
        args: argparse.Namespace,
        ask: Callable[[bool, Callable[[Progress], object] | None], Answer | JobStatus],
        estimate: CostEstimate | None = None,
    ) -> Answer | JobStatus:
        """Ask for deep research, blocking or queued; with ``estimate``, what it was expected
        to cost shows beside what it cost once it ends here."""
        from pplx_nb._models import JobStatus

        if args.wait or not self.researcher.async_deep_research:
            result = self._blocking(
                "Researching",
                lambda on_progress: ask(True, on_progress),
                debug=args.debug,
                estimate=estimate,
            )
        else:
            result = ask(False, None)
            if isinstance(result, JobStatus):
                self._queued_job(result, estimate)
        remember(result.conversation_id)
        return result

    @no_var_expand
    @magic_arguments()
    @argument("words", nargs="*", help="[ID] question (ID: default the last conversation)")
    @argument("--research", action="store_true", help="continue with deep research")
    @argument("--fork", action="store_true", help="continue in a new branch of the conversation")
    @argument("--wait", action="store_true", help="with --research: block until the report")
    @search_options
    @line_cell_magic
    def pplx_followup(self, line: str, cell: str | None = None) -> Answer | JobStatus | None:
        """Continue a conversation with its whole history as context.

        %pplx_followup [ID] question, or a %%pplx_followup [ID] cell. Without an ID it
        continues this kernel's last conversation. --fork branches into a new conversation and
        leaves the original as it was; --research switches to deep research.

        Examples:
          %pplx_followup how do I wait for it to finish?
          %pplx_followup 20250124-1737734400000 --fork what about trio?

          %%pplx_followup --research --wait
          Compare the cancellation semantics in depth

        %pplx_help lists every magic.
        """
        __tracebackhide__ = True
        with self._guard(line, spelled("pplx_followup", cell)):
            args = self._parse(self.pplx_followup, line)
            words = list(args.words)
            if words and words[0].startswith("{"):
                words[0] = interpolate(words[0], self.namespace)
            given, words = split_conversation_id(words)
            cid = self._conversation(given)
            query = self._question(words, cell, args.raw)
            opts = search_opts(args)
            result: Answer | JobStatus
            if args.research:
                result = self._research(
                    args,
                    lambda wait, on_progress: self.researcher.followup(
                        cid,
                        query,
                        mode="research",
                        fork=args.fork,
                        wait=wait,
                        files=args.file,
                        on_progress=on_progress,
                        **opts,
                    ),
                )
            else:
                result = self._stream(
                    lambda on_activity: self.researcher.astream_followup(
                        cid, query, fork=args.fork, files=args.file, on_activity=on_activity, **opts
                    ),
                    "Following up",
                    debug=args.debug,
                    branch_of=cid if args.fork else None,
                )
                remember(result.conversation_id)
            return self._finish(args, result)
        return None

    @no_var_expand
    @magic_arguments()
    @argument("words", nargs="*", help="what to search for (or write it in the cell)")
    @web_options
    @line_cell_magic
    def pplx_web(self, line: str, cell: str | None = None) -> WebResults | None:
        """Search the web with the Search API: a table of ranked results, no answer.

        Billed per request, not per token, and nothing is stored unless --save, which keeps
        the query and the results as a conversation that %pplx_followup continues. -o VAR
        stores the results as a pandas DataFrame; the magic's value is the list of sources.

        Examples:
          %pplx_web -n 5 --domain docs.python.org asyncio TaskGroup

          %%pplx_web --recency month -o df
          structured concurrency in Python
        """
        __tracebackhide__ = True
        with self._guard(line, spelled("pplx_web", cell)):
            args = self._parse(self.pplx_web, line)
            query = self._question(args.words, cell, args.raw)
            results = self.researcher.web_search(query, **web_opts(args))
            show(web_results_bundle(results), web_provenance(results))
            self.shown.add(results)
            remember(results.conversation_id)
            self._store(args, results.to_dataframe())
            return results
        return None

    # -- jobs ---------------------------------------------------------------------------------

    @no_var_expand
    @magic_arguments()
    @argument("id", nargs="?", help="conversation ID (default: the last one)")
    @argument("--timeout", type=seconds, metavar="S", help="give up waiting after S seconds")
    @output_options
    @line_magic
    def pplx_wait(self, line: str) -> Answer | None:
        """Block with a progress bar until a research job ends, then show its report.

        What a notebook run top to bottom (nbval, papermill) needs after %%pplx_research.
        This kernel runs the job if no other worker has it; when no worker can serve the
        folder the job is in, it says so within seconds instead of waiting forever.

        Examples:
          %pplx_wait
          %pplx_wait {job.conversation_id} --timeout 600 -o report
        """
        __tracebackhide__ = True
        with self._guard(line, "%pplx_wait"):
            args = self._parse(self.pplx_wait, line)
            cid = self._conversation(unquote(args.id) if args.id else None)
            label = f"Job {cid}"
            researcher = self.researcher
            status = researcher.status(cid)
            if status is not None and status.status == "cancelled":
                # The user cancelled it: how it ended, not an error box.
                show(cancelled_wait_bundle(cid, status))
                return None
            result = self._blocking(
                label,
                lambda on_progress: wait_served(
                    researcher, cid, timeout=args.timeout, on_progress=on_progress
                ),
                debug=args.debug,
                interrupted=f"Stopped waiting; the job goes on in the background. "
                f"`%pplx_wait {cid}` waits again.",
                report_above=self._monitored(cid),
            )
            self._settle(cid)
            return self._finish(args, result)  # type: ignore[return-value]
        return None

    def _monitored(self, conversation_id: str) -> bool:
        """Whether a live JobMonitor in this kernel shows (or will show) this job's report."""
        return self.widgets_live and conversation_id in self.monitors

    @no_var_expand
    @magic_arguments()
    @argument("id", nargs="?", help="conversation ID (default: the last one)")
    @argument("--wait", action="store_true", help="block with a progress bar until the report")
    @output_options
    @line_magic
    def pplx_retry(self, line: str) -> Answer | JobStatus | None:
        """Ask a conversation's unanswered research question again: this pays for a new run.

        For a deep research that ended with SUBMISSION_UNKNOWN (check your Perplexity usage
        first: the lost run may have been billed), a timeout or a failure. Queued like
        ``%%pplx_research``; ``--wait`` blocks instead. An answer that was paid for and kept
        because the store could not take it (FILESYSTEM_ERROR) is stored instead, for free.

        Examples:
          %pplx_retry
          %pplx_retry 20250124-1737712800000 --wait
        """
        __tracebackhide__ = True
        with self._guard(line, "%pplx_retry"):
            args = self._parse(self.pplx_retry, line)
            cid = self._conversation(unquote(args.id) if args.id else None)
            result = self._research(
                args,
                lambda wait, on_progress: self.researcher.retry(
                    cid, wait=wait, on_progress=on_progress
                ),
            )
            return self._finish(args, result)
        return None

    @no_var_expand
    @magic_arguments()
    @argument("id", nargs="?", help="conversation ID (default: the last one)")
    @output_options
    @line_magic
    def pplx_cancel(self, line: str) -> JobStatus | None:
        """Cancel a queued or running deep research, and its run at Perplexity.

        A queued job leaves the queue (nothing billed); a running one stops, its run too (a
        cancelled run reports no usage: its cost is unknown). The conversation stays open for
        follow-ups. Without an ID: this kernel's last conversation.

        Examples:
          %pplx_cancel
          %pplx_cancel 20250124-1737712800000
        """
        __tracebackhide__ = True
        with self._guard(line, "%pplx_cancel"):
            args = self._parse(self.pplx_cancel, line)
            cid = self._conversation(unquote(args.id) if args.id else None)
            status = self.researcher.cancel(cid)
            self._settle(cid)
            show(cancel_bundle(cid, status))
            if status is not None:
                self.shown.add(status)
            self._store(args, status)
            return status
        return None

    @no_var_expand
    @magic_arguments()
    @argument("--watch", action="store_true", help="also show a live monitor per unfinished job")
    @output_options
    @line_magic
    def pplx_jobs(self, line: str) -> Any:
        """A snapshot of the research jobs: a DataFrame read from disk when the magic runs.

        It survives kernel restarts but does not update itself; run it again for a fresh one.
        --watch adds a live monitor per unfinished job.
        """
        with self._guard(line, "%pplx_jobs"):
            args = self._parse(self.pplx_jobs, line)
            statuses = self.researcher.jobs()
            if any(not s.done for s in statuses) and self.researcher.async_deep_research:
                self.researcher.ensure_worker()
            if args.watch:
                for status in statuses:
                    if not status.done:
                        self._queued_job(status)
            frame = jobs_frame(statuses)
            self._store(args, frame)
            return frame
        return None

    # -- display hook -------------------------------------------------------------------------

    def display_result(self, value: Any) -> None:
        """Render an Answer, JobStatus, Conversation or web results richly, unless a magic just
        showed it."""
        if self.shown.take(value):
            return
        from pplx_nb._models import Answer, Conversation
        from pplx_nb.research import WebResults

        if isinstance(value, Answer):
            live = self._buttons(value)
            show(answer_bundle(value, related=not live), self._origin(value))
            if live:
                self._related_buttons(value)
        elif isinstance(value, Conversation):
            show(conversation_bundle(value))
        elif isinstance(value, WebResults):
            show(web_results_bundle(value), web_provenance(value))
        else:
            show(job_bundle(value))
