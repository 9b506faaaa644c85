"""A conversation-logs folder as another program meets it: the raw files read without pplx_nb's
code, and a follow-up left without an answer in it."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pplx_nb import Researcher
from pplx_nb._errors import PplxError
from pplx_nb.sim import inject_faults

__all__ = [
    "alternates",
    "document",
    "failed_follow_up",
    "job_status",
    "rewrite_in_place",
    "turns",
]


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


def failed_follow_up(researcher: Researcher, sim_url: str, question: str) -> tuple[str, PplxError]:
    """A conversation whose follow-up the API refused (HTTP 400): its id and the error raised."""
    conversation_id = researcher.search(question).conversation_id
    assert conversation_id is not None
    # 400 is not retried; the follow-up's reformulation may take one of them first.
    inject_faults(sim_url, {"status": 400, "path": "/v1/", "times": 5})
    with pytest.raises(PplxError) as failed:
        researcher.followup(conversation_id, "And how does asyncio.timeout work?")
    return conversation_id, failed.value
