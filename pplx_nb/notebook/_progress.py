"""Blocking with a live progress bar: the call runs on a helper thread, the main thread paints.

Output published from other threads is fragile in ipykernel, so progress callbacks (which arrive
on the Researcher's loop thread) only enqueue; the kernel's main thread repaints the view.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pplx_nb._models import Progress
    from pplx_nb.notebook.display import ProgressView

__all__ = ["run_with_progress"]

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
