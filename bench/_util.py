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

__all__ = [
    "ROOT",
    "SCRATCH",
    "fresh_interpreter_seconds",
    "median",
    "ratio",
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
def simulator() -> Iterator[str]:
    """``python -m pplx_nb.sim --latency-ms 0 --sonar`` in its own process; yields its base URL.

    Sonar mode, because the client benchmark also compares chat-completions clients.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "pplx_nb.sim", "--latency-ms", "0", "--sonar"],
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
