"""The ``%%pplx`` family of IPython magics: thin adapters that parse, call the Researcher, render.

``%load_ext pplx_nb`` registers them; loading imports only IPython's magic machinery — the
Researcher, pandas and ipywidgets are imported the first time a magic runs. Each kernel has one
:class:`~pplx_nb.research.Researcher`, created on first use from the environment with deep research
queued as background jobs (unless ``PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH=false``).
:func:`set_researcher` replaces it (tests, or a Researcher configured in code)::

    from pplx_nb import Researcher, Settings
    from pplx_nb.notebook.magics import set_researcher
    set_researcher(Researcher(Settings(conversation_logs_dir="my-logs")))
"""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from IPython.core import magic as _magic
from IPython.core.error import UsageError
from IPython.core.magic import Magics, magics_class, no_var_expand
from traitlets import Bool, Float

from pplx_nb.notebook._args import (
    argument,
    magic_arguments,
    output_options,
    parse_argstring,
    search_options,
    search_opts,
    split_conversation_id,
    unquote,
)
from pplx_nb.notebook._progress import run_with_progress, wait_served
from pplx_nb.notebook._session import (
    forget,
    get_researcher,
    last_conversation_id,
    register_exit,
    remember,
    set_researcher,
    switch,
)
from pplx_nb.notebook._transform import question_mark_keeper

if TYPE_CHECKING:
    from pplx_nb._models import Answer, JobStatus, Progress
    from pplx_nb.notebook.display import Bundle
    from pplx_nb.research import Researcher

__all__ = [
    "PplxMagics",
    "get_researcher",
    "last_conversation_id",
    "load_ipython_extension",
    "set_researcher",
    "unload_ipython_extension",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def _line_magic(func: F) -> F:
    """IPython's ``@line_magic`` marker, typed."""
    return cast(F, _magic.line_magic(func))


def _line_cell_magic(func: F) -> F:
    """IPython's ``@line_cell_magic`` marker, typed."""
    return cast(F, _magic.line_cell_magic(func))


class _Shown:
    """Results a magic has already rendered, so the display hook does not show them twice."""

    def __init__(self) -> None:
        self.ids: set[int] = set()

    def add(self, value: object) -> None:
        self.ids.add(id(value))

    def take(self, value: object) -> bool:
        if id(value) in self.ids:
            self.ids.discard(id(value))
            return True
        return False

    def clear(self, *_: object) -> None:
        self.ids.clear()


def _show(bundle: Bundle) -> None:
    from IPython.display import display

    display(bundle, raw=True)  # type: ignore[no-untyped-call]


def _show_widget(widget: Any) -> None:
    from IPython.display import display

    display(widget)  # type: ignore[no-untyped-call]


@magics_class
class PplxMagics(Magics):
    """``%%pplx``, ``%%pplx_research``, ``%pplx_followup`` and the magics that look back.

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
        self.shown = _Shown()
        self.monitors: set[str] = set()
        """Jobs a live JobMonitor in this kernel follows: their report shows there."""
        self.keep_question_marks = question_mark_keeper(self.magics["line"])

    # -- plumbing -----------------------------------------------------------------------------

    @property
    def researcher(self) -> Researcher:
        """This kernel's Researcher (the settings are read again when a magic starts)."""
        return get_researcher(reread=False)

    @property
    def namespace(self) -> dict[str, Any]:
        """The user's variables."""
        assert self.shell is not None
        namespace: dict[str, Any] = self.shell.user_ns
        return namespace

    @property
    def widgets_live(self) -> bool:
        """Whether a front end can show widgets (a kernel, not a plain IPython shell)."""
        return getattr(self.shell, "kernel", None) is not None

    @property
    def in_terminal(self) -> bool:
        """Whether this is IPython in a terminal, which prints every display it is given."""
        return _is_terminal(self.shell)

    def _publisher(self) -> Any:
        """How live views publish: in place in a notebook, a line and the outcome in a terminal."""
        if not self.in_terminal:
            return None
        from pplx_nb.notebook.display import terminal_publisher

        return terminal_publisher()

    @contextlib.contextmanager
    def _guard(self, line: str, magic: str) -> Iterator[None]:
        """Render any failure as one styled line (with the traceback under ``--debug``).

        ``magic`` is the magic as the user wrote it (``%%pplx``, ``%pplx_export``): a usage
        error names its ``?`` help.
        An interrupt is shown, then raised again: as with any interrupted cell, the cell fails
        and "Run All" stops there.
        """
        __tracebackhide__ = True
        from pplx_nb.notebook.display import error_bundle

        try:
            yield
        except _AlreadyShown as shown:
            if isinstance(shown.error, KeyboardInterrupt):
                # A fresh one: the traceback of where the wait was interrupted is noise here.
                raise KeyboardInterrupt from None
        except UsageError as exc:
            from pplx_nb._errors import ValidationError

            error = ValidationError(f"{exc}. `{magic}?` lists the options.")
            _show(error_bundle(error, debug="--debug" in line))
        except Exception as exc:
            _show(error_bundle(exc, debug="--debug" in line))
        except KeyboardInterrupt as exc:
            _show(error_bundle(exc))
            raise KeyboardInterrupt from None

    def _question(self, words: list[str], cell: str | None, raw: bool) -> str:
        from pplx_nb._errors import ValidationError

        text = " ".join(unquote(w) if len(words) == 1 else w for w in words)
        if cell and cell.strip():
            text = f"{text}\n{cell}" if text else cell
        text = text.strip()
        if not text:
            raise ValidationError(
                "No question: write it in the cell below the magic (or after it on the line)."
            )
        if raw:
            return text
        from pplx_nb.notebook._interpolate import interpolate

        return interpolate(text, self.namespace)

    def _parse(self, magic: Callable[..., Any], line: str) -> argparse.Namespace:
        """Parse ``line`` and refuse, before anything is asked or billed, what cannot work."""
        from pplx_nb._errors import ValidationError

        args = parse_argstring(magic, line)
        _output_name(args)
        # Before anything else: the settings may have changed since the last magic.
        researcher = get_researcher()
        if getattr(args, "images", False) and researcher.settings.api_style == "agent":
            raise ValidationError(
                "--images needs the Sonar API style; the Agent API returns no images. Set "
                "PERPLEXITY_API_STYLE=sonar (`%env PERPLEXITY_API_STYLE=sonar`) and ask again."
            )
        return args

    def _store(self, args: argparse.Namespace, value: object) -> None:
        name = _output_name(args)
        if name:
            self.namespace[name] = value

    def _conversation(self, given: str | None) -> str:
        from pplx_nb._errors import ValidationError

        if given:
            from pplx_nb.notebook._interpolate import interpolate

            # `%pplx_wait {job.conversation_id}`: IDs take the same {name} fields as questions.
            given = interpolate(given, self.namespace)
        cid = given or last_conversation_id()
        if cid is None:
            raise ValidationError(
                "No conversation to continue in this kernel: none was answered yet, or the "
                "last question got no answer. Pass an ID (`%pplx_conversations` lists them) "
                "or ask with `%%pplx` first."
            )
        return cid

    def _stream(
        self,
        items: AsyncIterator[str | Answer],
        label: str,
        *,
        debug: bool,
        branch_of: str | None = None,
    ) -> Answer:
        """Show the deltas as they arrive (at most every 100 ms), then the rendered answer.

        While no delta comes (before the first byte, or in a pause) the view still repaints
        every 100 ms: its clock counts and text held back by batching shows.
        """
        from pplx_nb._errors import PplxError
        from pplx_nb._models import Answer
        from pplx_nb._sync import TICK, iterate_sync
        from pplx_nb.notebook.display import StreamView

        view = StreamView(
            label=label, publish=self._publisher(), interval=float(self.stream_interval)
        )
        answer: Answer | None = None
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
            raise _AlreadyShown(exc) from exc
        live = self._buttons(answer)
        view.finish(answer, related=not live, branch_of=branch_of)
        if live:
            self._related_buttons(answer)
        return answer

    def _buttons(self, answer: Answer) -> bool:
        """Whether ``answer``'s related questions show as buttons (else as a list)."""
        return self.widgets_live and bool(self.related_buttons) and bool(answer.related_questions)

    def _related_buttons(self, answer: Answer) -> None:
        from pplx_nb.notebook.widgets import RelatedQuestions

        _show_widget(
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
            from pplx_nb.notebook.display import notice_bundle

            _show(
                notice_bundle(
                    "NO_THINKING",
                    f"{value.model or 'The model'} returned no reasoning with this answer: only "
                    "reasoning models show it (e.g. `-m sonar-reasoning-pro`, which returns its "
                    "reasoning under PERPLEXITY_API_STYLE=sonar).",
                )
            )

    def _queued_job(self, status: JobStatus) -> None:
        if self.widgets_live:
            from pplx_nb.notebook.widgets import JobMonitor

            _show_widget(
                JobMonitor(
                    status.conversation_id,
                    self.researcher,
                    interval=float(self.monitor_interval),
                )
            )
            self.monitors.add(status.conversation_id)
        else:
            from pplx_nb.notebook.display import job_bundle

            _show(job_bundle(status))

    def _blocking(
        self,
        label: str,
        call: Callable[[Callable[[Progress], object]], Answer | JobStatus],
        *,
        debug: bool,
        interrupted: str = "Stopped. Run the cell again to retry.",
        report_above: bool = False,
    ) -> Answer | JobStatus:
        """Block on ``call`` with a progress bar; on Ctrl-C say ``interrupted`` (what goes on).

        ``report_above``: a live monitor above shows the report, so only a line says it is done.
        """
        from pplx_nb._models import Answer
        from pplx_nb.notebook.display import (
            ProgressView,
            answer_bundle,
            done_bundle,
            notice_bundle,
        )

        view = ProgressView(label, publish=self._publisher())
        try:
            result = run_with_progress(call, view)
        except KeyboardInterrupt as exc:
            view.close(notice_bundle("INTERRUPTED", interrupted))
            raise _AlreadyShown(exc) from exc
        except BaseException as exc:
            view.fail(exc, debug=debug)
            raise _AlreadyShown(exc) from exc
        if not isinstance(result, Answer):
            view.close()
        elif report_above:
            view.close(done_bundle(result, elapsed=view.elapsed))
        else:
            view.close(answer_bundle(result, elapsed=view.elapsed, research=True))
        return result

    # -- asking -------------------------------------------------------------------------------

    @no_var_expand
    @magic_arguments()
    @argument("words", nargs="*", help="the question (or write it in the cell)")
    @search_options
    @_line_cell_magic
    def pplx(self, line: str, cell: str | None = None) -> Answer | None:
        """Ask a question with web search; the cell is the question. Starts a NEW conversation.

        The answer streams in, then shows with linked citations, its sources and the line to
        follow up. {name} in the question is replaced by the value of the variable name.

        Examples:
          %%pplx --related
          How do I cancel an asyncio task?

          %pplx -m sonar-pro --recency month -o answer what is new in asyncio?

        %pplx_help lists every magic.
        """
        __tracebackhide__ = True
        with self._guard(line, _spelled("pplx", cell)):
            args = self._parse(self.pplx, line)
            forget()
            query = self._question(args.words, cell, args.raw)
            items = self.researcher.astream_search(query, files=args.file, **search_opts(args))
            answer = self._stream(items, "Searching", debug=args.debug)
            remember(answer.conversation_id)
            return self._finish(args, answer)
        return None

    @no_var_expand
    @magic_arguments()
    @argument("words", nargs="*", help="the question (or write it in the cell)")
    @argument("--wait", action="store_true", help="block with a progress bar until the report")
    @search_options
    @_line_cell_magic
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
        with self._guard(line, _spelled("pplx_research", cell)):
            args = self._parse(self.pplx_research, line)
            forget()
            query = self._question(args.words, cell, args.raw)
            result = self._research(
                args,
                lambda wait, on_progress: self.researcher.deep_research(
                    query, wait=wait, files=args.file, on_progress=on_progress, **search_opts(args)
                ),
            )
            return self._finish(args, result)
        return None

    def _research(
        self,
        args: argparse.Namespace,
        ask: Callable[[bool, Callable[[Progress], object] | None], Answer | JobStatus],
    ) -> Answer | JobStatus:
        from pplx_nb._models import JobStatus

        if args.wait or not self.researcher.async_deep_research:
            result = self._blocking(
                "Researching", lambda on_progress: ask(True, on_progress), debug=args.debug
            )
        else:
            result = ask(False, None)
            if isinstance(result, JobStatus):
                self._queued_job(result)
        remember(result.conversation_id)
        return result

    @no_var_expand
    @magic_arguments()
    @argument("words", nargs="*", help="[ID] question (ID: default the last conversation)")
    @argument("--research", action="store_true", help="continue with deep research")
    @argument("--fork", action="store_true", help="continue in a new branch of the conversation")
    @argument("--wait", action="store_true", help="with --research: block until the report")
    @search_options
    @_line_cell_magic
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
        with self._guard(line, _spelled("pplx_followup", cell)):
            args = self._parse(self.pplx_followup, line)
            words = list(args.words)
            if words and words[0].startswith("{"):
                from pplx_nb.notebook._interpolate import interpolate

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
                items = self.researcher.astream_followup(
                    cid, query, fork=args.fork, files=args.file, **opts
                )
                result = self._stream(
                    items, "Following up", debug=args.debug, branch_of=cid if args.fork else None
                )
                remember(result.conversation_id)
            return self._finish(args, result)
        return None

    # -- jobs ---------------------------------------------------------------------------------

    @no_var_expand
    @magic_arguments()
    @argument("id", nargs="?", help="conversation ID (default: the last one)")
    @argument("--timeout", type=float, metavar="S", help="give up waiting after S seconds")
    @output_options
    @_line_magic
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
    @_line_magic
    def pplx_retry(self, line: str) -> Answer | JobStatus | None:
        """Ask a conversation's unanswered research question again: this pays for a new run.

        For a deep research that ended with SUBMISSION_UNKNOWN (check your Perplexity usage
        first: the lost run may have been billed), a timeout or a failure. Queued like
        ``%%pplx_research``; ``--wait`` blocks instead.

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
    @argument("--watch", action="store_true", help="also show a live monitor per unfinished job")
    @output_options
    @_line_magic
    def pplx_jobs(self, line: str) -> Any:
        """A snapshot of the research jobs: a DataFrame read from disk when the magic runs.

        It survives kernel restarts but does not update itself; run it again for a fresh one.
        --watch adds a live monitor per unfinished job.
        """
        with self._guard(line, "%pplx_jobs"):
            args = self._parse(self.pplx_jobs, line)
            from pplx_nb.notebook._tables import jobs_frame

            statuses = self.researcher.jobs()
            if any(not s.done for s in statuses) and self.researcher.async_deep_research:
                self.researcher.start_worker()
            if args.watch:
                for status in statuses:
                    if not status.done:
                        self._queued_job(status)
            frame = jobs_frame(statuses)
            self._store(args, frame)
            return frame
        return None

    # -- looking back -------------------------------------------------------------------------

    @no_var_expand
    @magic_arguments()
    @argument("id", nargs="?", help="conversation ID (default: the last one)")
    @argument("--system", action="store_true", help="include the system prompt")
    @output_options
    @_line_magic
    def pplx_history(self, line: str) -> Any:
        """Show a stored conversation, turn by turn, with each answer's sources."""
        with self._guard(line, "%pplx_history"):
            args = self._parse(self.pplx_history, line)
            cid = self._conversation(unquote(args.id) if args.id else None)
            conversation = self.researcher.history(cid, include_system=args.system)
            self._store(args, conversation)
            return conversation
        return None

    @no_var_expand
    @magic_arguments()
    @argument("--text", help="only conversations containing TEXT")
    @argument("--tool", help="only conversations that used TOOL (e.g. perplexity_search)")
    @argument("--model", help="only conversations answered by MODEL")
    @argument("--since", help="only conversations updated since this ISO date/time")
    @argument("--until", help="only conversations updated until this ISO date/time")
    @argument("--limit", type=int, help="at most N conversations (newest first)")
    @output_options
    @_line_magic
    def pplx_conversations(self, line: str) -> Any:
        """Stored conversations as a pandas DataFrame, newest first."""
        with self._guard(line, "%pplx_conversations"):
            args = self._parse(self.pplx_conversations, line)
            from pplx_nb.notebook._tables import conversations_frame

            filters = {
                key: unquote(value) if isinstance(value, str) else value
                for key in ("text", "tool", "model", "since", "until", "limit")
                if (value := getattr(args, key)) is not None
            }
            frame = conversations_frame(self.researcher.conversations(**filters))
            self._store(args, frame)
            return frame
        return None

    @no_var_expand
    @magic_arguments()
    @argument("id", nargs="?", help="conversation ID (default: the last one)")
    @argument("--all", action="store_true", help="export every stored conversation")
    @argument("--system", action="store_true", help="with --level messages: keep system prompts")
    @argument(
        "--level",
        choices=("messages", "conversations", "sources"),
        default="messages",
        help="one row per message (default), conversation or cited source",
    )
    @output_options
    @_line_magic
    def pplx_export(self, line: str) -> Any:
        """Export conversations to a pandas DataFrame (see pplx_nb.export.to_dataframe).

        Examples:
          %pplx_export -o df
          %pplx_export --all --level sources -o cited
        """
        with self._guard(line, "%pplx_export"):
            args = self._parse(self.pplx_export, line)
            from pplx_nb.export import to_dataframe

            if args.all:
                source: Any = self.researcher.store
            else:
                cid = self._conversation(unquote(args.id) if args.id else None)
                source = self.researcher.history(cid, include_system=True)
            frame = to_dataframe(source, level=args.level)
            if args.level == "messages" and not args.system and "role" in frame:
                frame = frame[frame["role"] != "system"].reset_index(drop=True)
            self._store(args, frame)
            return frame
        return None

    @no_var_expand
    @magic_arguments()
    @argument("--offline", action="store_true", help="answer from the built-in simulator")
    @argument("--online", action="store_true", help="use the real API (needs PERPLEXITY_API_KEY)")
    @output_options
    @_line_magic
    def pplx_config(self, line: str) -> None:
        """Show the settings in use (the API key is never shown); switch offline/online."""
        with self._guard(line, "%pplx_config"):
            args = self._parse(self.pplx_config, line)
            from pplx_nb._errors import ValidationError
            from pplx_nb.notebook._tables import settings_bundle

            if args.offline and args.online:
                raise ValidationError("Pick one of --offline and --online.")
            if args.offline or args.online:
                self._switch(offline=bool(args.offline))
            settings = self.researcher.settings
            self._store(args, settings)
            _show(settings_bundle(settings.redacted()))

    def _switch(self, *, offline: bool) -> None:
        from pplx_nb._errors import ValidationError

        if not offline and self.researcher.settings.api_key is None:
            raise ValidationError(
                "PERPLEXITY_API_KEY is not set, so the real API would refuse every request. "
                "Set it (`%env PERPLEXITY_API_KEY=...`) and switch again, or stay offline."
            )
        switch(offline=offline)

    @_line_magic
    def pplx_help(self, line: str = "") -> None:
        """Every pplx_nb magic with an example, and where the answers come from."""
        from pplx_nb.notebook._help import help_bundle

        _show(help_bundle(get_researcher().settings))

    # -- display hook -------------------------------------------------------------------------

    def display_result(self, value: Any) -> None:
        """Render an Answer, JobStatus or Conversation richly, unless a magic just showed it."""
        if self.shown.take(value):
            return
        from pplx_nb._models import Answer, Conversation
        from pplx_nb.notebook.display import answer_bundle, conversation_bundle, job_bundle

        if isinstance(value, Answer):
            live = self._buttons(value)
            _show(answer_bundle(value, related=not live))
            if live:
                self._related_buttons(value)
        elif isinstance(value, Conversation):
            _show(conversation_bundle(value))
        else:
            _show(job_bundle(value))


def _spelled(name: str, cell: str | None) -> str:
    """A line-cell magic as the user wrote it: ``%%name`` for a cell, ``%name`` for a line."""
    return f"%%{name}" if cell is not None else f"%{name}"


class _AlreadyShown(Exception):
    """An error a live view has already rendered; the guard must not render it again."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _output_name(args: argparse.Namespace) -> str | None:
    """The variable ``-o`` names, if any; a name that cannot be one is refused."""
    from pplx_nb._errors import ValidationError

    name = getattr(args, "output", None)
    if not name:
        return None
    name = unquote(name)
    if not name.isidentifier():
        raise ValidationError(f"`-o {name}`: give a Python variable name, like `-o answer`.")
    return str(name)


def _is_terminal(shell: object) -> bool:
    """Whether ``shell`` is IPython in a terminal (checked by name: no prompt_toolkit import)."""
    return any(cls.__name__ == "TerminalInteractiveShell" for cls in type(shell).__mro__)


_DISPLAYED_TYPES = ("Answer", "Conversation", "JobStatus")


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics and the rich display of results on ``ipython``; say who answers."""
    magics = PplxMagics(ipython)
    ipython.register_magics(magics)
    register_exit()
    if _is_terminal(ipython):
        _quiet_after_magics(ipython)
    formatter = ipython.display_formatter.ipython_display_formatter
    for name in _DISPLAYED_TYPES:
        formatter.for_type_by_name("pplx_nb._models", name, magics.display_result)
    ipython.events.register("pre_run_cell", magics.shown.clear)
    ipython.input_transformers_cleanup.append(magics.keep_question_marks)
    from pplx_nb.notebook._help import loaded_bundle

    with contextlib.suppress(Exception):
        _show(loaded_bundle())


_MAGIC_CALL = re.compile(r"^get_ipython\(\)\.run_(?:line|cell)_magic\('pplx\w*'")


def _quiet_after_magics(ipython: Any) -> None:
    """In a terminal, no ``Out[n]:`` for a magic's result: the magic has shown it already.

    IPython prints the prompt for any value a cell ends with, even one that displays nothing
    more; a cell whose last line is a pplx magic call is made quiet instead (as with ``;``).
    """
    hook = ipython.displayhook
    if getattr(hook, "_pplx_quiet", None) is not None:
        return
    original = hook.quiet

    def quiet() -> bool:
        try:
            cell = ipython.history_manager.input_hist_parsed[-1]
        except (IndexError, AttributeError):
            cell = ""
        lines = [line for line in cell.splitlines() if line.strip()]
        return bool(lines and _MAGIC_CALL.match(lines[-1].strip())) or bool(original())

    hook._pplx_quiet = original
    hook.quiet = quiet


def unload_ipython_extension(ipython: Any) -> None:
    """Remove what :func:`load_ipython_extension` registered."""
    magics = ipython.magics_manager.registry.pop("PplxMagics", None)
    for kind in ("line", "cell"):
        table = ipython.magics_manager.magics[kind]
        for name in [n for n in table if n.startswith("pplx")]:
            del table[name]
    formatter = ipython.display_formatter.ipython_display_formatter
    for name in _DISPLAYED_TYPES:
        formatter.deferred_printers.pop(("pplx_nb._models", name), None)
        formatter.type_printers = {
            cls: fn
            for cls, fn in formatter.type_printers.items()
            if not (cls.__module__ == "pplx_nb._models" and cls.__name__ == name)
        }
    if magics is not None:
        with contextlib.suppress(ValueError):
            ipython.events.unregister("pre_run_cell", magics.shown.clear)
    if magics is not None:
        with contextlib.suppress(ValueError):
            ipython.input_transformers_cleanup.remove(magics.keep_question_marks)
    hook = ipython.displayhook
    original = getattr(hook, "_pplx_quiet", None)
    if original is not None:
        hook.quiet = original
        del hook._pplx_quiet
