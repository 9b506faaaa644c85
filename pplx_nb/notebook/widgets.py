"""Live widgets: :class:`JobMonitor` for background research jobs and :class:`RelatedQuestions`.

Widgets here change only traits (``value``, ``bar_style``, ``description``) — never ``Output``
widgets written from threads, which ipywidgets does not support reliably. A JobMonitor polls the
job's status from a daemon thread, so the bar moves and the report appears while the kernel is idle.
"""

from __future__ import annotations

import html
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from pplx_nb._cancel import cancel_facts
from pplx_nb._errors import redact
from pplx_nb._markdown import close_markdown
from pplx_nb.notebook._cite import provenance_of
from pplx_nb.notebook._icons import IconName, icon
from pplx_nb.notebook._render import markdown_to_html
from pplx_nb.notebook._spend import cost_words
from pplx_nb.notebook.display import answer_html, error_bundle, status_line

if TYPE_CHECKING:
    from pplx_nb._models import Answer, JobStatus
    from pplx_nb.research import CostEstimate, Researcher

__all__ = ["JobMonitor", "RelatedQuestions"]

_BAR_STYLES = {"completed": "success", "failed": "danger", "cancelled": "warning"}
_STATE_ICONS: dict[str, IconName] = {
    "pending": "pending",
    "in_progress": "waiting",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}


def _researcher(researcher: Researcher | None) -> Researcher:
    if researcher is not None:
        return researcher
    from pplx_nb.notebook._kernel import get_researcher

    return get_researcher()


class JobMonitor(widgets.VBox):  # type: ignore[misc]
    """A live view of one research job: progress bar, status, elapsed time, attempt and errors.

    ``JobMonitor(conversation_id)`` starts polling the job's status (every ``interval`` seconds)
    on a daemon thread and keeps going while the kernel is idle. When the job completes the
    report replaces the status line; when it fails the error history is listed; a cancelled job
    keeps the progress it reached and says what it cost.

    Displayed, it is an output that :meth:`publish` updates: the ``text/plain`` saved with the
    notebook (what a reopened notebook shows) is the job's last state.

    Args:
        conversation_id: the conversation whose job to follow.
        researcher: the Researcher to read from (default: this kernel's, see ``magics``).
        interval: seconds between status reads.
        start: start polling now (tests pass False and call :meth:`refresh`).
        status: the job's status already known (as it was queued), shown until the first read.
        estimate: what the job was estimated to cost when it was queued, shown beside what it
            cost once it completes.
    """

    def __init__(
        self,
        conversation_id: str,
        researcher: Researcher | None = None,
        *,
        interval: float = 0.5,
        start: bool = True,
        status: JobStatus | None = None,
        estimate: CostEstimate | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.estimate = estimate
        self.researcher = _researcher(researcher)
        self.interval = interval
        self.status: JobStatus | None = None
        self.answer: Answer | None = None
        self.error: BaseException | None = None
        self.cancelled = False
        self.display_id = uuid.uuid4().hex
        self._displayed = False
        self.metadata: dict[str, Any] | None = None
        """Where the report came from, once it is shown (saved with the output)."""
        self.bar = widgets.IntProgress(
            value=0,
            min=0,
            max=100,
            description="0%",
            bar_style="info",
            layout=widgets.Layout(width="320px"),
        )
        self.title = widgets.HTML(
            f"{icon('job')} <b>Research job</b> <code>{html.escape(conversation_id)}</code>"
        )
        self.state = widgets.HTML("Reading status…")
        self.report = widgets.HTML("")
        super().__init__(
            [self.title, widgets.HBox([self.bar, self.state]), self.report],
            layout=widgets.Layout(padding="2px 0"),
        )
        self.add_class("pplx-job-monitor")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if status is not None:
            self.status = status
            self._show_status(status)
        if start:
            self.start()

    def __repr__(self) -> str:
        # Also the text/plain of the widget's output: what nbconvert, nbval and papermill keep,
        # and what a notebook shows where its widgets cannot render (reopened, not yet trusted).
        if self.status is None:
            state = "reading status"
        elif self.cancelled:
            state = _cancelled_line(self.status, self.bar.value)
        else:
            state = status_line(self.status)
        return f"Research job {self.conversation_id}: {state}"

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(  # type: ignore[no-untyped-call]
            self._repr_mimebundle_(), raw=True, display_id=self.display_id, metadata=self.metadata
        )
        self._displayed = True

    def publish(self) -> None:
        """Update the monitor's outputs with what it shows now, its ``text/plain`` included.

        A widget's output keeps the text it was displayed with; without this a saved notebook
        would say "pending" of a job that completed long ago.
        """
        if self._displayed:
            from IPython.display import update_display

            update_display(  # type: ignore[no-untyped-call]
                self._repr_mimebundle_(),
                raw=True,
                display_id=self.display_id,
                metadata=self.metadata,
            )

    # -- polling ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start polling on a daemon thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._poll, name=f"pplx-job-monitor-{self.conversation_id}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop polling; the widget keeps what it shows."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for polling to end (the job ended or :meth:`stop`); True if it has."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    @property
    def done(self) -> bool:
        """Whether the job has ended and the monitor shows its outcome."""
        return self.answer is not None or self.error is not None or self.cancelled

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                if self.refresh():
                    break
            except Exception as exc:
                self._show_error(exc)
                break
            self._stop.wait(self.interval)
        if self.done:
            self.publish()

    def refresh(self) -> bool:
        """Read the status once and update the widget; True once the job has ended."""
        status = self.researcher.status(self.conversation_id)
        self.status = status
        if status is None:
            # No job ever ran here: the conversation already holds its answer.
            self._finish()
            return True
        if not status.done and self.researcher.async_deep_research:
            self.researcher.ensure_worker()
        self._show_status(status)
        if status.status == "cancelled":
            self._show_cancelled(status)
            return True
        if status.done:
            self._finish()
            return True
        return False

    # -- rendering ----------------------------------------------------------------------------

    def _show_status(self, status: JobStatus) -> None:
        percentage = status.progress.percentage if status.progress else 0
        if status.status == "completed":
            percentage = 100
        elif status.done and status.progress is None:
            percentage = self.bar.value  # an ended job keeps no progress: show what it reached
        self.bar.value = percentage
        self.bar.description = f"{percentage}%"
        self.bar.bar_style = _BAR_STYLES.get(status.status, "info")
        state = _STATE_ICONS.get(status.status)
        mark = icon(state) if state else ""
        self.state.value = (
            f"{mark} {html.escape(status_line(status, percentage=False))} "
            f'<span style="opacity:0.7">· {_elapsed(status):.0f} s</span>'
        )

    def _show_cancelled(self, status: JobStatus) -> None:
        """A cancel the user asked for: a neutral bar at the progress reached, what it cost."""
        self.cancelled = True
        self.bar.bar_style = ""
        mark = icon(_STATE_ICONS["cancelled"])
        self.state.value = (
            f"{mark} {html.escape(_cancelled_line(status, self.bar.value))} "
            f'<span style="opacity:0.7">· {_elapsed(status):.0f} s</span>'
        )
        self.report.value = (
            '<span style="opacity:0.7">The conversation takes follow-ups: '
            "<code>%pplx_followup --research</code> asks again.</span>"
        )

    def _finish(self) -> None:
        try:
            answer = self.researcher.wait(self.conversation_id, timeout=10)
        except Exception as exc:
            self._show_error(exc)
            return
        self.answer = answer
        self.metadata = provenance_of(answer, self.researcher)
        self.bar.value = 100
        self.bar.description = "100%"
        self.bar.bar_style = "success"
        self.report.value = answer_html(answer, research=True)
        if self.estimate is not None:
            said = html.escape(cost_words(answer, self.estimate))
            self.report.value += f'<p style="opacity:0.7"><small>{said}</small></p>'

    def _show_error(self, error: BaseException) -> None:
        self.error = error
        self.bar.bar_style = "danger"
        history = self.status.error_history if self.status else []
        items = "".join(
            f"<li>attempt {e.attempt or '?'}: <b>{html.escape(e.code)}</b> "
            f"{html.escape(redact(e.message))}</li>"
            for e in history
        )
        listing = f"<details open><summary>Error history</summary><ol>{items}</ol></details>"
        self.report.value = error_bundle(error)["text/html"] + (listing if items else "")


def _cancelled_line(status: JobStatus, percentage: int) -> str:
    """``cancelled at 51% · what it cost``: a cancelled job in a few words."""
    reached = f" at {percentage}%" if percentage else ""
    if cancel_facts(status)["costUnknown"]:
        cost = "cost unknown: a cancelled run reports no usage"
    else:
        cost = "nothing billed: no run had started"
    return f"cancelled{reached} · {cost}"


def _elapsed(status: JobStatus) -> float:
    """Seconds since the job started, to now or to its end: a clock that moves with every poll.

    (The progress' own ``elapsedMs`` moves only when the worker reports, every few seconds.)
    """
    end = status.completed_at if status.done and status.completed_at else None
    try:
        started = datetime.fromisoformat(status.started_at)
        finished = datetime.fromisoformat(end) if end else datetime.now(UTC)
    except ValueError:
        return 0.0
    return max(0.0, (finished - started).total_seconds())


class RelatedQuestions(widgets.VBox):  # type: ignore[misc]
    """The related questions of an answer as buttons; a click asks that follow-up.

    The follow-up streams into an ``HTML`` widget below the buttons (click handlers run on the
    kernel's main thread), then shows its own related questions in turn.

    Args:
        answer: the answer whose ``related_questions`` become buttons.
        researcher: the Researcher to ask with (default: this kernel's).
        on_answer: called with each follow-up answer (the magics use it to track the last
            conversation of the kernel).
    """

    def __init__(
        self,
        answer: Answer,
        researcher: Researcher | None = None,
        *,
        on_answer: Callable[[Answer], object] | None = None,
    ) -> None:
        self.source_answer = answer
        self.researcher = _researcher(researcher)
        self.on_answer = on_answer
        self.answer: Answer | None = None
        self.buttons = [
            widgets.Button(
                description=question,
                tooltip=f"Ask: {question}",
                icon="search",
                layout=widgets.Layout(width="auto", max_width="100%", align_self="flex-start"),
            )
            for question in answer.related_questions
        ]
        for button in self.buttons:
            button.on_click(self._clicked)
        self.result = widgets.HTML("")
        self.more = widgets.VBox([])
        label = widgets.HTML("<b>Related</b> <span style='opacity:0.7'>(click to ask)</span>")
        super().__init__([label, *self.buttons, self.result, self.more])
        self.add_class("pplx-related")

    def __repr__(self) -> str:
        return "Related questions: " + " | ".join(self.source_answer.related_questions)

    def _clicked(self, button: Any) -> None:
        self.ask(str(button.description))

    def ask(self, question: str, *, interval: float = 0.1) -> Answer | None:
        """Ask ``question`` as a follow-up of the answer's conversation, streaming the reply."""
        for button in self.buttons:
            button.disabled = True
        cid = self.source_answer.conversation_id
        text = ""
        last = 0.0
        try:
            if cid is None:
                raise ValueError("This answer is not stored, so it cannot be followed up.")
            for item in self.researcher.stream_followup(
                cid, question, return_related_questions=True
            ):
                if isinstance(item, str):
                    text += item
                    now = time.monotonic()
                    if now - last >= interval:
                        last = now
                        self.result.value = (
                            f"<i>{icon('waiting')} {html.escape(question)}</i>"
                            + markdown_to_html(close_markdown(text, "▌"))
                        )
                else:
                    self.answer = item
        except Exception as exc:
            self.result.value = error_bundle(exc)["text/html"]
            return None
        finally:
            for button in self.buttons:
                button.disabled = False
        if self.answer is None:
            return None
        self.result.value = f"<h4>{html.escape(question)}</h4>" + answer_html(self.answer)
        if self.answer.related_questions:
            self.more.children = [
                RelatedQuestions(self.answer, self.researcher, on_answer=self.on_answer)
            ]
        if self.on_answer is not None:
            self.on_answer(self.answer)
        return self.answer
