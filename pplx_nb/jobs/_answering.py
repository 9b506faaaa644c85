"""Follow-ups being answered right now: a marker file while a stored question waits for its answer.

A follow-up that is answered on the spot (a search, or deep research in blocking mode) stores its
question, asks the API, then stores the answer. Another follow-up stored in between would split
the pair: question 1, question 2, answer 1, answer 2. So the question is stored together with an
``.answering`` marker in the conversation directory, the answer removes it in the same locked
step, and :meth:`JobQueue.check_idle` refuses other follow-ups while a live marker exists, as it
does while a job is pending or running.

A marker is live until its deadline (the longest the request can take, retries included; a long
stream renews it as text arrives) and, on the machine that wrote it, only while the process that
wrote it exists: a kernel killed mid-call blocks its conversation no longer than that. Windows
offers no cheap liveness check, so there only the deadline counts. Every function here expects
the caller to hold the conversation lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from pplx_nb._errors import PplxError
from pplx_nb._fs import atomic_write_json, read_bytes
from pplx_nb._layout import ANSWERING_FILE
from pplx_nb._models import now_iso

__all__ = ["ANSWERING_FILE", "clear", "live", "mark", "renew"]


def mark(directory: Path, seconds: float) -> str:
    """Record that this process is answering a question of ``directory``; returns its token."""
    token = uuid.uuid4().hex
    _write(directory, token, now_iso(), seconds)
    return token


def renew(directory: Path, token: str, seconds: float) -> None:
    """Push the marker's deadline ``seconds`` ahead, if it is still the one ``token`` names."""
    current = _read(directory)
    if current is not None and current.get("token") == token:
        _write(directory, token, str(current.get("startedAt") or now_iso()), seconds)


def _write(directory: Path, token: str, started_at: str, seconds: float) -> None:
    atomic_write_json(
        directory / ANSWERING_FILE,
        {
            "token": token,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "startedAt": started_at,
            "deadline": time.time() + seconds,
        },
    )


def clear(directory: Path, token: str) -> None:
    """Remove the marker if it is still the one ``token`` names (a newer one stays).

    Never raises: it runs in the step that stores a paid answer, and a marker that cannot be
    removed only blocks the conversation until its deadline.
    """
    with contextlib.suppress(OSError, PplxError):
        current = _read(directory)
        if current is not None and current.get("token") == token:
            (directory / ANSWERING_FILE).unlink(missing_ok=True)


def live(directory: Path) -> dict[str, Any] | None:
    """The marker of a question still being answered, or ``None`` (none, expired, or orphaned)."""
    marker = _read(directory)
    if marker is None:
        return None
    deadline = marker.get("deadline")
    if not isinstance(deadline, int | float) or deadline < time.time():
        return None
    if marker.get("host") == socket.gethostname() and not _alive(marker.get("pid")):
        return None
    return marker


def _read(directory: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(read_bytes(directory / ANSWERING_FILE))
    except (FileNotFoundError, ValueError, RecursionError):
        # A damaged marker guards nothing: treat it as absent rather than block the conversation.
        return None
    return data if isinstance(data, dict) else None


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid() or sys.platform == "win32":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, under another user
    return True
