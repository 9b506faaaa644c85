"""Small helpers shared by the benchmark modules: medians, ratios, fresh-interpreter timings."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "ROOT",
    "SCRATCH",
    "fresh_interpreter_seconds",
    "median",
    "ratio",
    "redis_server",
    "round_trips",
    "scratch",
    "simulator",
    "table",
    "timed",
]

ROOT = Path(__file__).resolve().parent.parent
"""The checkout: where ``python -m pplx_nb.sim`` finds the package."""
SCRATCH = ROOT / "bench" / ".out"
"""Scratch space in the checkout, on the disk where ``conversation-logs/`` lives by default."""


def median(values: Sequence[float]) -> float:
    """The median of ``values``."""
    return statistics.median(values)


def ratio(ours: float, theirs: float) -> str:
    """``ours / theirs`` formatted as ``1.23×``."""
    return f"{ours / theirs:.2f}×" if theirs else "n/a"


def timed(fn: Callable[[], object], repeat: int = 5) -> list[float]:
    """Wall-clock seconds of ``repeat`` calls of ``fn``."""
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def fresh_interpreter_seconds(code: str, repeat: int = 5) -> list[float]:
    """Seconds ``code`` takes in each of ``repeat`` fresh interpreters (start-up excluded)."""
    probe = "import time; _t0 = time.perf_counter()\n" + code + "\nprint(time.perf_counter() - _t0)"
    results = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout
        results.append(float(out.strip().splitlines()[-1]))
    return results


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


@contextmanager
def simulator(*options: str) -> Iterator[str]:
    """``python -m pplx_nb.sim --latency-ms 0 --sonar`` and ``options`` in its own process;
    yields its base URL.

    Sonar mode, because the client benchmark also compares chat-completions clients.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "pplx_nb.sim", "--latency-ms", "0", "--sonar", *options],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(timeout=10)


def scratch(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory under :data:`SCRATCH`, removed when the ``with`` block ends.

    The store's disk-bound benchmarks run here rather than in the system temp folder: the
    default store is ``conversation-logs/`` in the working directory, and the two folders can
    differ twice over in inode-creation cost even on one file system.
    """
    SCRATCH.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=prefix, dir=SCRATCH)


@contextmanager
def redis_server() -> Iterator[str | None]:
    """Debian's ``redis-server`` on a free loopback port (no persistence) for the ``with`` block;
    yields the URL of its database 0, or ``None`` when it is not installed."""
    import shutil
    import socket

    import redis

    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as folder:
        options = ["--bind", "127.0.0.1", "--dir", folder, "--save", "", "--appendonly", "no"]
        process = subprocess.Popen(
            [binary, "--port", str(port), *options],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            client = redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2)
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.ping()
                    break
                except redis.RedisError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("redis-server did not start in 30 s") from None
                    time.sleep(0.05)
            client.close()
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(timeout=10)


@contextmanager
def round_trips() -> Iterator[list[int]]:
    """Count the round trips redis-py makes in the block (one per command or pipeline sent)."""
    import redis.connection

    counted = [0]
    send: Callable[..., None] = redis.connection.AbstractConnection.send_packed_command

    def sending(self: Any, command: Any, check_health: bool = True) -> None:
        counted[0] += 1
        send(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = sending  # type: ignore[method-assign]
    try:
        yield counted
    finally:
        redis.connection.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
