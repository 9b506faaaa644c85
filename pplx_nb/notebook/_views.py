"""Live display areas: an answer while it streams, a progress bar while a call blocks.

Each is a display that is updated in place (a notebook) or a status line the outcome replaces
(IPython in a terminal); the outcome is displayed once, as an output of its own, with its
metadata (where an answer came from). What they show is rendered by :mod:`.display`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pplx_nb.notebook._terminal import StatusLine, print_bundle
from pplx_nb.notebook.display import (
    Bundle,
    answer_bundle,
    error_bundle,
    progress_bundle,
    streaming_bundle,
)

if TYPE_CHECKING:
    from pplx_nb._models import Answer, Progress

__all__ = [
    "BLANK",
    "Metadata",
    "ProgressView",
    "Publisher",
    "StreamView",
    "terminal_publisher",
]


Metadata = dict[str, Any]
"""An output's metadata: ``{"pplx_nb": {...}}``, where an answer came from (see
:mod:`pplx_nb._provenance`); JupyterLab saves it with the output."""


class Publisher(Protocol):
    """Shows ``bundle``: in place of ``display_id`` (``update``), or as a new output."""

    def __call__(
        self,
        bundle: Bundle,
        display_id: str | None,
        update: bool,
        metadata: Metadata | None = None,
    ) -> None: ...


BLANK: Bundle = {"text/html": ""}


def _publish(
    bundle: Bundle, display_id: str | None, update: bool, metadata: Metadata | None = None
) -> None:
    from IPython.display import display, update_display

    if update:
        update_display(bundle, raw=True, display_id=display_id, metadata=metadata)  # type: ignore[no-untyped-call]
    elif display_id:
        display(bundle, raw=True, display_id=display_id, metadata=metadata)  # type: ignore[no-untyped-call]
    else:
        display(bundle, raw=True, metadata=metadata)  # type: ignore[no-untyped-call]


class _TerminalPublisher:
    """Live views in a terminal, which cannot update an output in place: of a live area only
    its first words ("Searching…") show, on a line the outcome replaces; the outcome is printed
    rendered for the terminal (:func:`._terminal.print_bundle`).
    """

    def __init__(self) -> None:
        self.status = StatusLine()

    def __call__(
        self,
        bundle: Bundle,
        display_id: str | None,
        update: bool,
        metadata: Metadata | None = None,
    ) -> None:
        if display_id is None:
            self.status.clear()
            print_bundle(bundle)
        elif bundle.get("text/plain"):
            self.status.show(bundle["text/plain"])
        else:
            self.status.clear()


def terminal_publisher() -> Publisher:
    """A :data:`Publisher` for plain IPython in a terminal (see :class:`_TerminalPublisher`)."""
    return _TerminalPublisher()


class _View:
    """A live display area: blank when first displayed and again at the end, outcome below it.

    Front ends that apply display updates (JupyterLab, nbclient, papermill) and test runners that
    ignore them (nbval keeps only the first version of a display) thus end with the same outputs:
    a blank live area and the outcome, displayed once.
    """

    def __init__(self, *, publish: Publisher | None = None) -> None:
        import uuid

        self.display_id = uuid.uuid4().hex
        self._publish = publish or _publish
        self.closed = False
        self.started = time.monotonic()
        self._publish(dict(BLANK), self.display_id, False)

    @property
    def elapsed(self) -> float:
        """Seconds since the view was created."""
        return time.monotonic() - self.started

    def show(self, bundle: Mapping[str, str]) -> None:
        """Replace what the live area shows."""
        self._publish(dict(bundle), self.display_id, True)

    def close(
        self, outcome: Mapping[str, str] | None = None, metadata: Metadata | None = None
    ) -> None:
        """Display ``outcome`` (if any, with ``metadata``) as an output of its own, then blank
        the live area.

        In that order the cell never shows nothing between the live view and the outcome.
        """
        if outcome is not None:
            if metadata:
                self._publish(dict(outcome), None, False, metadata)
            else:
                self._publish(dict(outcome), None, False)
        if not self.closed:
            self.closed = True
            self._publish(dict(BLANK), self.display_id, True)

    def fail(self, error: BaseException, *, debug: bool = False) -> None:
        """Close the view with the styled error."""
        self.close(error_bundle(error, debug=debug))


class StreamView(_View):
    """A cell's answer while it streams: updated at most every ``interval`` seconds.

    The first text is shown as soon as it arrives; later text is batched so a fast stream does not
    flood the front end. Call :meth:`feed` with each delta, :meth:`tick` while no delta comes (so
    held text and the elapsed clock keep moving), then :meth:`finish` with the answer.
    """

    def __init__(
        self,
        *,
        interval: float = 0.1,
        label: str = "Searching",
        publish: Publisher | None = None,
    ) -> None:
        super().__init__(publish=publish)
        self.interval = interval
        self.label = label
        self.text = ""
        self.updates = 0
        self.first_text_at: float | None = None
        self.status: str | None = None
        """What the run last reported doing, shown instead of the label."""
        self._last = 0.0
        self._pending = False
        self.show(streaming_bundle("", label=label))

    def activity(self, progress: Progress) -> None:
        """Note what the run reports doing; shown at the next repaint.

        Safe to call from any thread: it only records the message.
        """
        self.status = progress.message.rstrip(".")

    def feed(self, delta: str) -> None:
        """Add a text delta; repaint if the last repaint is at least ``interval`` old."""
        self.text += delta
        now = time.monotonic()
        if self.first_text_at is None or now - self._last >= self.interval:
            self._repaint(now)
        else:
            self._pending = True

    def flush(self) -> None:
        """Repaint now if text arrived since the last repaint."""
        if self._pending:
            self._repaint(time.monotonic())

    def tick(self) -> None:
        """Repaint held text and the elapsed clock if the last repaint is at least ``interval`` old.

        Call it while waiting for the next delta: before the first byte the "Searching" line
        counts the seconds, and text held back by batching shows even if the stream pauses.
        """
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._repaint(now)

    def _repaint(self, now: float) -> None:
        label = self.status or self.label
        self.show(streaming_bundle(self.text, elapsed=now - self.started, label=label))
        if self.first_text_at is None and self.text:
            self.first_text_at = time.monotonic()
        self.updates += 1
        self._last = now
        self._pending = False

    def finish(
        self,
        answer: Answer,
        *,
        related: bool = True,
        research: bool = False,
        branch_of: str | None = None,
        metadata: Metadata | None = None,
    ) -> None:
        """Replace the streamed text with the rendered answer (``metadata``: where it came
        from)."""
        self.close(
            answer_bundle(
                answer,
                related=related,
                elapsed=self.elapsed,
                research=research,
                branch_of=branch_of,
            ),
            metadata,
        )


class ProgressView(_View):
    """A progress bar for a blocking wait, repainted when the step changes or once a second."""

    def __init__(self, label: str = "", *, publish: Publisher | None = None) -> None:
        super().__init__(publish=publish)
        self.label = label
        self.progress: Progress | None = None
        self._painted: tuple[int, str, int] | None = None
        self.paints = 0
        self.show(progress_bundle(None, 0.0, label))

    def update(self, progress: Progress | None) -> None:
        """Record the newest progress (``None`` keeps the last one) and repaint if it is due."""
        if progress is not None:
            self.progress = progress
        p = self.progress
        key = (p.percentage if p else 0, p.message if p else "", int(self.elapsed))
        if key != self._painted:
            self._painted = key
            self.paints += 1
            self.show(progress_bundle(self.progress, self.elapsed, self.label))
