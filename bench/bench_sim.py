"""The simulator's frozen corpus: what it adds to the wheel, and the first simulated answer.

The default corpus is Python 3.11's documentation frozen into the package, where it used to be
read from the running interpreter's standard library. Both are measured in the same run, in fresh
processes from the import of ``pplx_nb.sim`` to the first answer over loopback: once with an empty
corpus cache (the first run on a machine) and then with the cache the first run wrote (every later
run). "Interpreter's docs" rebuilds the corpus as before, from ``stdlib_documents()``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from bench._util import ROOT, median, ratio, table

TITLE = "Simulator: frozen corpus size and first answer"

COLD_REPEAT = 3
WARM_REPEAT = 12
WHEEL_GROWTH_TARGET_MB = 5.0
_FIRST_ANSWER = """
import time
_t0 = time.perf_counter()
{setup}
import httpx2
from pplx_nb.sim import serve
from pplx_nb.sim._corpus import load_corpus
_t1 = time.perf_counter()
load_corpus()
_loaded = time.perf_counter() - _t1
with serve(latency_ms=0) as url:
    body = httpx2.post(
        url + "/v1/agent", json={{"model": "perplexity/sonar", "input": "cancel an asyncio task"}}
    ).json()
assert body["output"][0]["results"][0]["title"] == "asyncio.Task.cancel", body
print(_loaded, time.perf_counter() - _t0)
"""
_HEADER = ("default corpus", "first answer", "corpus", "vs before (answer / corpus)")
_SETUPS = {
    "interpreter's docs (before)": (
        "import pplx_nb.sim._corpus as corpus\n"
        "from pplx_nb.sim.build_corpus import freeze\n"
        "corpus.read_frozen = freeze"
    ),
    "frozen corpus (now)": "",
}


def _first_answer_seconds(setup: str, cache: Path) -> tuple[float, float]:
    """Seconds to load the corpus, and from importing the simulator to its first answer."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    code = _FIRST_ANSWER.format(setup=setup)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    loaded, answered = done.stdout.strip().splitlines()[-1].split()
    return float(loaded), float(answered)


Times = dict[str, list[tuple[float, float]]]


def _first_answers(scratch: Path) -> tuple[Times, Times]:
    """Per setup, the times with an empty corpus cache, then with the cache the first run wrote.

    The setups take turns, so the machine's load drifts over both alike.
    """
    cold: Times = {name: [] for name in _SETUPS}
    warm: Times = {name: [] for name in _SETUPS}
    for attempt in range(COLD_REPEAT + WARM_REPEAT):
        for n, (name, setup) in enumerate(_SETUPS.items()):
            if attempt < COLD_REPEAT:
                cold[name].append(_first_answer_seconds(setup, scratch / f"{n}-{attempt}"))
            else:
                warm[name].append(_first_answer_seconds(setup, scratch / f"{n}-0"))
    return cold, warm


def _wheel(scratch: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(scratch), "."],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = scratch.glob("pplx_nb-*.whl")
    return wheel


def _corpus_bytes_in(wheel: Path) -> int:
    with zipfile.ZipFile(wheel) as archive:
        return sum(
            info.compress_size
            for info in archive.infolist()
            if Path(info.filename).name.startswith("python_docs")
        )


def _seconds(times: list[float]) -> str:
    low, high = min(times), max(times)
    if median(times) < 0.1:
        return f"{median(times) * 1000:.0f} ms ({low * 1000:.0f}–{high * 1000:.0f})"
    return f"{median(times):.2f} s ({low:.2f}–{high:.2f})"


def _rows(times: Times, before: str) -> list[tuple[str, str, str, str]]:
    base = [median([t[1] for t in times[before]]), median([t[0] for t in times[before]])]
    rows = []
    for name, runs in times.items():
        answered, loaded = [t[1] for t in runs], [t[0] for t in runs]
        vs = f"{ratio(median(answered), base[0])} / {ratio(median(loaded), base[1])}"
        rows.append((name, _seconds(answered), _seconds(loaded), vs))
    return rows


def run() -> str:
    """Wheel size and first-answer times, before and now, in one run."""
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        wheel = _wheel(scratch)
        wheel_mb = wheel.stat().st_size / 1e6
        growth_mb = _corpus_bytes_in(wheel) / 1e6
        cold, warm = _first_answers(scratch)
    before, now = _SETUPS
    verdict = "meets" if growth_mb <= WHEEL_GROWTH_TARGET_MB else "misses"
    answered = {name: median([t[1] for t in runs]) for name, runs in warm.items()}
    return "\n\n".join(
        [
            "Fresh processes, the setups taking turns; median (range). *First answer* counts from "
            "importing the simulator to the first answer over loopback, *corpus* the "
            "`load_corpus()` inside it.",
            f"Empty corpus cache (the first run on a machine), {COLD_REPEAT} runs each:",
            table(_HEADER, _rows(cold, before)),
            f"Corpus cached by an earlier run (every later run), {WARM_REPEAT} runs each:",
            table(_HEADER, _rows(warm, before)),
            f"The wheel is **{wheel_mb:.2f} MB**, of which the frozen corpus and its license take "
            f"**{growth_mb:.2f} MB** (compressed): it {verdict} the "
            f"{WHEEL_GROWTH_TARGET_MB:.0f} MB target. Cached, the first answer takes "
            f"{answered[now]:.2f} s against {answered[before]:.2f} s before "
            f"({ratio(answered[now], answered[before])}): the same unpickling of the cached index.",
        ]
    )
