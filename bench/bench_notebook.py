"""The notebook layer: ``%load_ext`` cost vs jupyter-ai's, ``%%pplx`` overhead, first visible text.

* ``%load_ext pplx_nb`` and ``%load_ext jupyter_ai_magics``, each in a fresh IPython (the shell is
  created first; only the ``load_ext`` is timed). jupyter-ai-magics is installed in its own venv
  under ``bench/.out/venv-jai`` (created here on first run), never in the project's.
* ``%%pplx`` end to end in a real IPython shell against the simulator running in another process
  (100 ms latency), compared with a raw ``httpx2`` streaming request for the same question: the
  difference is what the notebook layer and the Researcher add.
* First streamed text visible: time from the cell's start to the first display update carrying
  answer text, minus the raw client's time to its first text delta (which includes the
  simulator's latency). Both include the request set-up, so this is an upper bound on
  "after the first byte".
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench._util import median, ratio, table

TITLE = "Notebook: %load_ext, %%pplx overhead, first streamed text"

HERE = Path(__file__).parent
OUT = HERE / ".out"
JAI_VENV = OUT / "venv-jai"
LATENCY_MS = 100
QUESTION = "How do I cancel an asyncio task and wait for it to finish?"
LOAD_PROBE = """
import time
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
start = time.perf_counter()
shell.run_line_magic("load_ext", {name!r})
took = time.perf_counter() - start
import sys
print(took, len(sys.modules))
"""


def _load_ext_seconds(python: str, name: str, repeat: int) -> tuple[list[float], int]:
    times: list[float] = []
    modules = 0
    for _ in range(repeat):
        out = subprocess.run(
            [python, "-c", LOAD_PROBE.format(name=name)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        ).stdout.split()
        times.append(float(out[-2]))
        modules = int(out[-1])
    return times, modules


def _jai_python() -> tuple[str | None, str]:
    """The bench venv's python with jupyter-ai-magics, creating it once; or why there is none."""
    python = JAI_VENV / "bin" / "python"
    check = [str(python), "-c", "import jupyter_ai_magics, IPython"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return str(python), ""
    OUT.mkdir(exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [
        [base, "-m", "venv", str(JAI_VENV)],
        [str(python), "-m", "pip", "install", "-q", "jupyter-ai-magics", "ipython"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            return None, (done.stderr or done.stdout).strip().splitlines()[-1:][0]
    if subprocess.run(check, capture_output=True).returncode != 0:
        return None, "jupyter-ai-magics installed but does not import"
    return str(python), ""


def _version(python: str, package: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or "?"


# -- %%pplx against a simulator in another process ----------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def _simulator() -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "pplx_nb.sim", "--port", str(port), "--latency-ms", str(LATENCY_MS)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx2

        for _ in range(300):
            try:
                httpx2.get(f"{url}/v1/models", timeout=1)
                break
            except httpx2.HTTPError:
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _raw_stream(url: str) -> tuple[float, float]:
    """Seconds to the first text delta and to the end, for a bare httpx2 streaming request."""
    import httpx2

    body = {
        "preset": "low",
        "instructions": "Answer with citations.",
        "input": [{"role": "user", "content": QUESTION}],
        "stream": True,
    }
    start = time.perf_counter()
    first = 0.0
    with (
        httpx2.Client(timeout=30) as client,
        client.stream(
            "POST", f"{url}/v1/agent", json=body, headers={"Authorization": "Bearer pplx-bench"}
        ) as response,
    ):
        for line in response.iter_lines():
            if not first and line.startswith("data:") and "output_text.delta" in line:
                json.loads(line[5:])
                first = time.perf_counter() - start
    return first, time.perf_counter() - start


class _TimedPublisher:
    """A display publisher that notes when the first answer text is shown."""

    def __init__(self) -> None:
        self.start = 0.0
        self.first_text: float | None = None

    def publish(self, data: dict[str, str], *args: Any, **kwargs: Any) -> None:
        if self.first_text is None and "▌" in data.get("text/markdown", ""):
            self.first_text = time.perf_counter() - self.start

    def clear_output(self, wait: bool = False) -> None:
        """Nothing to clear."""


def _cell_runs(url: str, repeat: int) -> dict[str, list[float]]:
    from IPython.core.interactiveshell import InteractiveShell

    from pplx_nb import Researcher, Settings
    from pplx_nb.notebook import magics

    shell = InteractiveShell.instance()
    publisher = _TimedPublisher()
    shell.display_pub, saved = publisher, shell.display_pub
    results: dict[str, list[float]] = {"cell": [], "raw": [], "cell_first": [], "raw_first": []}
    with tempfile.TemporaryDirectory() as logs:
        settings = Settings(
            api_key="pplx-bench-0000000000", base_url=url, offline=False, conversation_logs_dir=logs
        )
        with Researcher(settings, async_deep_research=True) as researcher:
            magics.set_researcher(researcher)
            shell.run_line_magic("load_ext", "pplx_nb")
            try:
                for index in range(repeat + 2):
                    raw_first, raw_total = _raw_stream(url)
                    publisher.start = time.perf_counter()
                    publisher.first_text = None
                    outcome = shell.run_cell(f"%%pplx --no-cache\n{QUESTION}", silent=True)
                    took = time.perf_counter() - publisher.start
                    if outcome.error_in_exec is not None or publisher.first_text is None:
                        raise RuntimeError(f"%%pplx failed in the benchmark: {outcome}")
                    if index < 2:
                        continue  # warm-up: imports, connection set-up
                    results["cell"].append(took)
                    results["raw"].append(raw_total)
                    results["cell_first"].append(publisher.first_text)
                    results["raw_first"].append(raw_first)
            finally:
                shell.run_line_magic("unload_ext", "pplx_nb")
                magics.set_researcher(None)
                shell.display_pub = saved
    return results


def run() -> str:
    """Measure and return the Markdown section."""
    repeat = 7
    ours, our_modules = _load_ext_seconds(sys.executable, "pplx_nb", repeat)
    jai_python, why = _jai_python()
    rows: list[list[object]] = [
        [
            "`%load_ext pplx_nb`",
            f"{median(ours) * 1000:.0f} ms",
            f"{min(ours) * 1000:.0f}–{max(ours) * 1000:.0f} ms",
            our_modules,
            "1.00×",
        ]
    ]
    notes = []
    if jai_python:
        theirs, their_modules = _load_ext_seconds(jai_python, "jupyter_ai_magics", repeat)
        version = _version(jai_python, "jupyter-ai-magics")
        rows.append(
            [
                f"`%load_ext jupyter_ai_magics` ({version})",
                f"{median(theirs) * 1000:.0f} ms",
                f"{min(theirs) * 1000:.0f}–{max(theirs) * 1000:.0f} ms",
                their_modules,
                ratio(median(theirs), median(ours)),
            ]
        )
        speedup = median(theirs) / median(ours)
        notes.append(f"pplx_nb loads **{speedup:.1f}× faster** than jupyter-ai-magics.")
    else:
        notes.append(f"jupyter-ai-magics could not be installed in the bench venv: {why}")
    load = table(
        ["fresh IPython", "median", "range", "modules loaded after", "time vs pplx_nb"], rows
    )

    with _simulator() as url:
        runs = _cell_runs(url, repeat=15)
    overhead = [c - r for c, r in zip(runs["cell"], runs["raw"], strict=True)]
    visible = [c - r for c, r in zip(runs["cell_first"], runs["raw_first"], strict=True)]

    def ms(values: list[float], bold: bool = False) -> str:
        text = f"{median(values) * 1000:.1f} ms"
        return f"**{text}**" if bold else text

    cell = table(
        ["simulator in another process, 100 ms latency, 15 runs", "median"],
        [
            ["raw httpx2 streaming request, whole answer", ms(runs["raw"])],
            ["`%%pplx --no-cache` cell, whole answer rendered", ms(runs["cell"])],
            ["**overhead of `%%pplx`** (paired difference)", ms(overhead, True)],
            ["raw httpx2: first text delta", ms(runs["raw_first"])],
            ["`%%pplx`: first text visible in the output", ms(runs["cell_first"])],
            ["**first text visible after the first delta**", ms(visible, True)],
        ],
    )
    return "\n\n".join(
        [
            load,
            " ".join(notes),
            cell,
            "`%%pplx` stores the conversation on disk, renders Markdown with linked citations and "
            "updates one display handle at most every 100 ms; jupyter-ai's `%%ai` shows nothing "
            "until the whole answer is back.",
        ]
    )
