"""read_settled: a file rewritten in place by another program is read whole, a damaged one fails."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from support.folder import rewrite_in_place

from pplx_nb._reread import read_settled


def test_a_file_rewritten_in_place_is_always_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    data = json.dumps({"params": {"query": "q" * 4000}}).encode()
    path.write_bytes(data)
    stop = threading.Event()
    writer = threading.Thread(target=rewrite_in_place, args=(path, data, stop), daemon=True)
    writer.start()
    try:
        for _ in range(300):
            value = read_settled(
                path, lambda: json.loads(path.read_bytes()), (ValueError, FileNotFoundError)
            )
            assert value["params"]["query"] == "q" * 4000
    finally:
        stop.set()
        writer.join()


def test_a_file_that_stays_damaged_fails_at_once(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text('{"params": ')
    calls = []

    def load() -> object:
        calls.append(1)
        return json.loads(path.read_bytes())

    started = time.monotonic()
    with pytest.raises(ValueError):
        read_settled(path, load, (ValueError,))
    assert time.monotonic() - started < 0.5
    assert 2 <= len(calls) <= 5


def test_other_errors_are_not_retried(tmp_path: Path) -> None:
    calls = []

    def load() -> object:
        calls.append(1)
        raise PermissionError("no")

    with pytest.raises(PermissionError):
        read_settled(tmp_path / "x", load, (ValueError,))
    assert calls == [1]
