"""Blocking with a live progress bar: the call runs on a helper thread, the main thread paints.

Output published from other threads is fragile in ipykernel, so progress callbacks (which arrive
on the Researcher's loop thread) only enqueue; the kernel's main thread repaints the view.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pplx_nb._models import Answer, Progress
    from pplx_nb.notebook.display import ProgressView
    from pplx_nb.research import Researcher

__all__ = ["run_with_progress", "wait_served"]

T = TypeVar("T")


def run_with_progress(call: Callable[[Callable[[Progress], object]], T], view: ProgressView) -> T:
    """Run ``call(on_progress)`` on a helper thread while this (main) thread repaints ``view``.

    Returns what ``call`` returns or raises what it raised. Ctrl-C stops the waiting only.
    """
    updates: queue.SimpleQueue[Progress] = queue.SimpleQueue()
    outcome: list[Any] = []
    failure: list[BaseException] = []
    done = threading.Event()

    def target() -> None:
        try:
            outcome.append(call(updates.put))
        except BaseException as exc:
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=target, name="pplx-wait", daemon=True).start()
    while not done.is_set():
        try:
            view.update(updates.get(timeout=0.1))
        except queue.Empty:
            view.update(None)
    while not updates.empty():
        view.update(updates.get_nowait())
    if failure:
        raise failure[0]
    result: T = outcome[0]
    return result


_SERVED_CHECK_SECONDS = 5.0
"""How often a wait looks whether a worker serves the job's folder."""


def wait_served(
    researcher: Researcher,
    conversation_id: str,
    *,
    timeout: float | None = None,
    on_progress: Callable[[Progress], object] | None = None,
) -> Answer:
    """``researcher.wait`` that has this kernel run the job, and never waits on nobody.

    The kernel's worker serves the folder the job is in (the Researcher follows the settings in
    use). Every few seconds the wait looks again: a pending job that no running worker can take
    ends the wait with a TIMEOUT_ERROR that says so, instead of a bar that never moves.
    """
    from pplx_nb._errors import APITimeoutError

    status = researcher.status(conversation_id)
    worker = researcher.ensure_worker() if status is not None and not status.done else None
    started = time.monotonic()
    while True:
        step = _SERVED_CHECK_SECONDS
        if timeout is not None:
            step = max(0.0, min(step, started + timeout - time.monotonic()))
        try:
            return researcher.wait(conversation_id, timeout=step, on_progress=on_progress)
        except APITimeoutError:
            status = researcher.status(conversation_id)
            if status is None or status.done:
                raise  # the job itself ended with a timeout
        waited = time.monotonic() - started
        if status.status == "pending" and (worker is None or not worker.running):
            raise APITimeoutError(
                f"No worker serves {researcher.store.location}: the job of conversation "
                f"{conversation_id} has been pending for {waited:.0f} s. Run "
                "`python -m pplx_nb.worker` with CONVERSATION_LOGS_DIR set to that folder, "
                f"or restart the kernel and `%pplx_wait {conversation_id}` again.",
                conversation_id=conversation_id,
            )
        if timeout is not None and waited >= timeout:
            raise APITimeoutError(
                f"The job of conversation {conversation_id} is still "
                f"{status.status.replace('_', ' ')} after {timeout:.0f} s. It goes on in the "
                f"background: `%pplx_wait {conversation_id}` waits again.",
                conversation_id=conversation_id,
            )
