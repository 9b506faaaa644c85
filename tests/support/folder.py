"""Reading a conversation-logs folder as another program would: the raw files, no pplx_nb code."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["alternates", "document", "job_status", "rewrite_in_place", "turns", "wait_until"]


def document(logs_dir: Path, conversation_id: str) -> dict[str, Any]:
    """conversation.json as stored."""
    path = logs_dir / conversation_id / "conversation.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def job_status(logs_dir: Path, conversation_id: str) -> dict[str, Any]:
    """status.json as stored (empty when no job ever ran)."""
    path = logs_dir / conversation_id / "status.json"
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    return data


def turns(doc: dict[str, Any]) -> list[str]:
    """The roles after the system message(s)."""
    roles = [m["role"] for m in doc["messages"]]
    while roles and roles[0] == "system":
        roles.pop(0)
    return roles


def alternates(doc: dict[str, Any]) -> bool:
    """Whether user and assistant turns alternate after the system message, as the API demands."""
    return all(role == ("user", "assistant")[n % 2] for n, role in enumerate(turns(doc)))


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` every 0.1 s; fail saying ``what`` did not happen within ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
        time.sleep(0.1)


def rewrite_in_place(path: Path, data: bytes, stop: threading.Event) -> None:
    """Rewrite ``path`` until ``stop`` as the TypeScript server does: remove it, then write it (in
    two pieces here, so readers can catch it half-written); whole for a moment in between."""
    half = len(data) // 2
    while not stop.is_set():
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data[:half])
            time.sleep(0.002)
            os.write(fd, data[half:])
        finally:
            os.close(fd)
        time.sleep(0.005)
