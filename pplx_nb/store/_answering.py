"""A question being answered right now: the ``.answering`` marker of a conversation folder.

A question answered on the spot (a search, or deep research in blocking mode) is stored, asked,
and its answer stored; another question stored in between would split the pair. So the question
is stored together with an ``.answering`` marker in the conversation's folder, the answer removes
it in the same locked step, and meanwhile the answer guard (``pplx_nb.research``) refuses other
questions of the conversation, as it does while a job of it is pending or running.

The marker is JSON: ``token`` (whose marker it is), ``pid`` and ``host`` (who writes the answer),
``startedAt`` (ISO 8601, when the question was asked) and ``deadline`` (Unix seconds), plus
``remoteId`` once the API named the paid run answering it: whoever closes a question whose
answerer died reads it there. Processes of earlier versions read and write the same file in the
same folders, so its format only grows.

A marker is live until its deadline (the longest the request can take, retries included; a long
stream renews it as text arrives) and, on the machine that wrote it, only while the process that
wrote it exists: a kernel killed mid-call blocks its conversation no longer than that. Windows
offers no cheap liveness check, so there only the deadline counts. Every function here expects
the caller to hold the conversation lock, except :func:`live`, which only reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pplx_nb._errors import PplxError
from pplx_nb._fs import atomic_write_json, read_bytes
from pplx_nb._layout import ANSWERING_FILE
from pplx_nb._models import now_iso

__all__ = [
    "AnsweringMarker",
    "clear",
    "fields",
    "live",
    "live_marker",
    "mark",
    "marked_run",
    "recorded_run",
    "renew",
]


@dataclass(frozen=True)
class AnsweringMarker:
    """A live ``.answering`` marker: a question of the conversation is being answered now.

    Attributes:
        started_at: when the question was asked (ISO 8601), or ``None`` if the marker does not
            say.
    """

    started_at: str | None


def mark(directory: Path, seconds: float) -> str:
    """Record that this process is answering a question of ``directory``; returns its token."""
    token = uuid.uuid4().hex
    _write(directory, token, now_iso(), seconds)
    return token


def renew(directory: Path, token: str, seconds: float, remote_id: str | None = None) -> None:
    """Push the marker's deadline ``seconds`` ahead, if it is still the one ``token`` names,
    recording ``remote_id`` (the paid run answering it) when given."""
    current = _read(directory)
    if current is not None and current.get("token") == token:
        atomic_write_json(directory / ANSWERING_FILE, renewed(current, token, seconds, remote_id))


def renewed(
    current: dict[str, Any], token: str, seconds: float, remote_id: str | None
) -> dict[str, Any]:
    """The fields of marker ``current`` pushed ``seconds`` ahead; its run kept or recorded."""
    started = str(current.get("startedAt") or now_iso())
    run = remote_id or marked_run(current)
    return fields(token, started, seconds, run)


def _write(directory: Path, token: str, started_at: str, seconds: float) -> None:
    atomic_write_json(directory / ANSWERING_FILE, fields(token, started_at, seconds))


def fields(
    token: str, started_at: str, seconds: float, remote_id: str | None = None
) -> dict[str, Any]:
    """The marker's JSON fields, written by this process, live for ``seconds`` from now."""
    data: dict[str, Any] = {
        "token": token,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "startedAt": started_at,
        "deadline": time.time() + seconds,
    }
    if remote_id is not None:
        data["remoteId"] = remote_id
    return data


def recorded_run(directory: Path) -> str | None:
    """The paid run the marker names, live or not: a process that died while it answered
    leaves it for whoever closes the question."""
    current = _read(directory)
    return None if current is None else marked_run(current)


def marked_run(marker: dict[str, Any]) -> str | None:
    """The paid run the fields ``marker`` name (``remoteId``), or ``None``."""
    run = marker.get("remoteId")
    return run if isinstance(run, str) and run else None


def clear(directory: Path, token: str) -> None:
    """Remove the marker if it is still the one ``token`` names (a newer one stays).

    Never raises: it runs in the step that stores a paid answer, and a marker that cannot be
    removed only blocks the conversation until its deadline.
    """
    with contextlib.suppress(OSError, PplxError):
        current = _read(directory)
        if current is not None and current.get("token") == token:
            (directory / ANSWERING_FILE).unlink(missing_ok=True)


def live(directory: Path) -> AnsweringMarker | None:
    """The marker of a question still being answered, or ``None`` (none, expired, or orphaned)."""
    return live_marker(_read(directory))


def live_marker(marker: dict[str, Any] | None) -> AnsweringMarker | None:
    """The marker whose fields are ``marker`` if it is still live (see the module docstring)."""
    if marker is None:
        return None
    deadline = marker.get("deadline")
    if not isinstance(deadline, int | float) or deadline < time.time():
        return None
    if marker.get("host") == socket.gethostname() and not _alive(marker.get("pid")):
        return None
    return AnsweringMarker(started_at=str(marker.get("startedAt") or "") or None)


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
