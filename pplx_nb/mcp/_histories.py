"""Several conversations at once, and waiting for their research jobs to end.

``get_conversation_histories`` and ``await_conversation_histories`` read through here: each
conversation becomes a :class:`HistoryEntry` (its job state, progress and latest report, or the
error that kept it from being read). While waiting, only the small job statuses are polled; the
conversations are read once, at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import anyio

from pplx_nb._errors import PplxError
from pplx_nb._models import Progress
from pplx_nb.mcp._backend import Backend
from pplx_nb.mcp._schemas import HistoriesResult, HistoryEntry

if TYPE_CHECKING:
    from pplx_nb.research import Researcher

__all__ = ["POLL_SECONDS", "await_histories", "read_histories"]

POLL_SECONDS = 0.5
_RUNNING = ("pending", "in_progress")


def _entry(researcher: Researcher, conversation_id: str, include_system: bool) -> HistoryEntry:
    try:
        # The status first: a job stores its answer before it is marked completed, so a
        # status read as completed is never paired with the turns from before its answer.
        status = researcher.status(conversation_id)
        conversation = researcher.history(conversation_id, include_system=include_system)
    except PplxError as exc:
        return HistoryEntry(status="error", error={"code": exc.code, "message": exc.message})
    state = status.status if status is not None else "answered"
    answer = conversation.last_answer()
    done = answer is not None and state in ("completed", "answered")
    report = answer.answer_text if answer is not None and done else None
    data = conversation.to_json_dict()
    data["messageCount"] = len(conversation.messages)
    return HistoryEntry(
        status=state,
        conversation=data,
        job=status.to_json_dict() if status is not None else None,
        progress=status.progress.to_json_dict() if status and status.progress else None,
        report=report,
    )


def _read(
    researcher: Researcher, ids: Sequence[str], include_system: bool, waited: float = 0.0
) -> HistoriesResult:
    entries = {cid: _entry(researcher, cid, include_system) for cid in ids}
    return HistoriesResult(
        conversations=entries,
        count=len(entries),
        pending=[cid for cid, entry in entries.items() if entry.status in _RUNNING],
        waitedSeconds=round(waited, 1),
    )


async def read_histories(
    backend: Backend, ids: Sequence[str], include_system: bool
) -> HistoriesResult:
    """Each listed conversation as it is now (duplicates once, in the order given)."""
    unique = list(dict.fromkeys(ids))
    return await backend.read(lambda researcher: _read(researcher, unique, include_system))


def _overall(researcher: Researcher, ids: Sequence[str]) -> tuple[list[str], Progress]:
    """The conversations still running, and the mean progress over all of them."""
    running: list[str] = []
    total = 0
    latest = ""
    for cid in ids:
        try:
            status = researcher.status(cid)
        except PplxError:
            status = None
        if status is None or status.status not in _RUNNING:
            total += 100
            continue
        running.append(cid)
        if status.progress is not None:
            total += status.progress.percentage
            latest = f"; {cid}: {status.progress.message}"
    done = len(ids) - len(running)
    message = f"{done} of {len(ids)} job(s) finished{latest}"
    return running, Progress(percentage=total // max(len(ids), 1), message=message)


async def await_histories(
    backend: Backend,
    ids: Sequence[str],
    include_system: bool,
    timeout: float,
    on_progress: Callable[[Progress], object],
) -> HistoriesResult:
    """Wait until no listed conversation has a pending or running job, or ``timeout`` passes."""
    unique = list(dict.fromkeys(ids))
    started = time.monotonic()
    deadline = started + timeout
    while True:
        running, progress = await backend.read(lambda researcher: _overall(researcher, unique))
        on_progress(progress)
        left = deadline - time.monotonic()
        if not running or left <= 0:
            break
        await anyio.sleep(min(POLL_SECONDS, left))
    waited = time.monotonic() - started
    result = await backend.read(
        lambda researcher: _read(researcher, unique, include_system, waited)
    )
    result.timedOut = bool(result.pending)
    return result
