"""The notebook layer: ``%load_ext`` cost vs jupyter-ai's, ``%%pplx`` overhead, first visible text.

* ``%load_ext pplx_nb`` and ``%load_ext jupyter_ai_magics``, each in a fresh IPython (the shell is
  created first, with asyncio imported as in every IPython front end; only the ``load_ext`` is
  timed, in wall-clock and CPU time, then with the first cell after it). jupyter-ai-magics is
  installed in its own venv under ``bench/.out/venv-jai`` (created here on first run), never in
  the project's.
* ``%%pplx`` end to end in a real IPython shell against the simulator running in another process
  (100 ms latency), compared with replaying the exact request it sent with bare ``httpx2`` on a
  warm connection: the difference is what the notebook layer and the Researcher add.
* First streamed text visible: an httpx2 transport wrapper notes when the first response bytes
  carrying answer text arrive; a display publisher notes when the cell first shows text.
"""

from __future__ import annotations

import compileall
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
from typing import Any, NamedTuple

from bench._util import median, ratio, table

TITLE = "Notebook: %load_ext, %%pplx overhead, first streamed text"

HERE = Path(__file__).parent
OUT = HERE / ".out"
JAI_VENV = OUT / "venv-jai"
LATENCY_MS = 100
QUESTION = "How do I cancel an asyncio task and wait for it to finish?"
LOAD_PROBE = """
import asyncio  # every IPython front end has it: ipykernel and the terminal's prompt_toolkit
import time
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
start, cpu = time.perf_counter(), time.process_time()
shell.run_line_magic("load_ext", {name!r})
took, cpu_took = time.perf_counter() - start, time.process_time() - cpu
shell.run_cell("pass")
with_cell = time.perf_counter() - start
import sys
print(took, cpu_took, with_cell, len(sys.modules))
"""


class _Loads(NamedTuple):
    """Seconds of each ``%load_ext``: wall clock, this process's CPU, and with the first cell
    after; the modules loaded by then."""

    wall: list[float]
    cpu: list[float]
    with_cell: list[float]
    modules: int


def _load_ext_seconds(python: str, name: str, repeat: int) -> _Loads:
    loads = _Loads([], [], [], 0)
    for _ in range(repeat):
        out = subprocess.run(
            [python, "-c", LOAD_PROBE.format(name=name)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        ).stdout.split()
        loads.wall.append(float(out[-4]))
        loads.cpu.append(float(out[-3]))
        loads.with_cell.append(float(out[-2]))
        loads = loads._replace(modules=int(out[-1]))
    return loads


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


class _Stamps:
    """When the last request's response brought its first body byte and its first text."""

    def __init__(self) -> None:
        self.body: bytes = b""
        self.path = ""
        self.first_byte: float | None = None
        self.first_text: float | None = None


def _stamping_transport(stamps: _Stamps) -> Any:
    """An httpx2 transport that records the request and when response bytes arrive."""
    import httpx2

    class Stream(httpx2.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        async def __aiter__(self) -> Any:
            async for chunk in self._inner:
                now = time.perf_counter()
                if stamps.first_byte is None and chunk:
                    stamps.first_byte = now
                if stamps.first_text is None and b"output_text.delta" in chunk:
                    stamps.first_text = now
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    class Transport(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            stamps.body = await request.aread()
            stamps.path = request.url.path
            response = await self._inner.handle_async_request(request)
            return httpx2.Response(
                status_code=response.status_code,
                headers=response.headers,
                stream=Stream(response.stream),
                extensions=response.extensions,
            )

        async def aclose(self) -> None:
            await self._inner.aclose()

    return Transport()


def _raw_stream(client: Any, url: str, stamps: _Stamps) -> tuple[float, float]:
    """Replay the Researcher's exact request with bare httpx2: seconds to first text and to end."""
    start = time.perf_counter()
    first = 0.0
    headers = {"Authorization": "Bearer pplx-bench-0000000000", "Content-Type": "application/json"}
    with client.stream(
        "POST", f"{url}{stamps.path}", content=stamps.body, headers=headers
    ) as reply:
        for line in reply.iter_lines():
            if not first and line.startswith("data:") and "output_text.delta" in line:
                json.loads(line.removeprefix("data:"))
                first = time.perf_counter() - start
    return first, time.perf_counter() - start


class _TimedPublisher:
    """A display publisher that notes when the first answer text is shown."""

    def __init__(self) -> None:
        self.first_text: float | None = None

    def publish(self, data: dict[str, str], *args: Any, **kwargs: Any) -> None:
        if self.first_text is None and "▌" in data.get("text/markdown", ""):
            self.first_text = time.perf_counter()

    def clear_output(self, wait: bool = False) -> None:
        """Nothing to clear."""


def _cell_runs(url: str, repeat: int) -> dict[str, list[float]]:
    import httpx2
    from IPython.core.interactiveshell import InteractiveShell

    from pplx_nb import Researcher, Settings
    from pplx_nb.api import AsyncClient
    from pplx_nb.notebook import magics

    shell = InteractiveShell.instance()
    publisher = _TimedPublisher()
    stamps = _Stamps()
    shell.display_pub, saved = publisher, shell.display_pub  # type: ignore[assignment]
    results: dict[str, list[float]] = {"cell": [], "raw": [], "visible": [], "first_text": []}
    with tempfile.TemporaryDirectory() as logs, httpx2.Client(timeout=30) as raw_client:
        settings = Settings(
            api_key="pplx-bench-0000000000", base_url=url, offline=False, conversation_logs_dir=logs
        )
        client = AsyncClient(settings, transport=_stamping_transport(stamps))
        with Researcher(settings, client=client, async_deep_research=True) as researcher:
            magics.set_researcher(researcher)
            shell.run_line_magic("load_ext", "pplx_nb")
            try:
                for index in range(repeat + 2):
                    publisher.first_text = stamps.first_byte = stamps.first_text = None
                    start = time.perf_counter()
                    outcome = shell.run_cell(f"%%pplx --no-cache\n{QUESTION}", silent=True)  # type: ignore[no-untyped-call]
                    took = time.perf_counter() - start
                    shown, arrived = publisher.first_text, stamps.first_text
                    if outcome.error_in_exec is not None or shown is None or arrived is None:
                        raise RuntimeError(f"%%pplx failed in the benchmark: {outcome}")
                    raw_first, raw_total = _raw_stream(raw_client, url, stamps)
                    if index < 2:
                        continue  # warm-up: imports, connection set-up
                    results["cell"].append(took)
                    results["raw"].append(raw_total)
                    results["visible"].append(shown - arrived)
                    results["first_text"].append(raw_first)
            finally:
                shell.run_line_magic("unload_ext", "pplx_nb")
                magics.set_researcher(None)
                shell.display_pub = saved
    return results


def _load_row(label: str, loads: _Loads, ours: _Loads) -> list[object]:
    return [
        label,
        f"{median(loads.wall) * 1000:.0f} ms",
        f"{min(loads.wall) * 1000:.0f}–{max(loads.wall) * 1000:.0f} ms",
        f"{median(loads.cpu) * 1000:.0f} ms",
        f"{median(loads.with_cell) * 1000:.0f} ms",
        loads.modules,
        ratio(median(loads.wall), median(ours.wall)),
    ]


def run() -> str:
    """Measure and return the Markdown section."""
    repeat = 7
    # Installed packages are byte-compiled by pip; the checkout's sources must be too.
    compileall.compile_dir(Path(__file__).parent.parent / "pplx_nb", quiet=1)
    ours = _load_ext_seconds(sys.executable, "pplx_nb", repeat)
    jai_python, why = _jai_python()
    rows: list[list[object]] = [_load_row("`%load_ext pplx_nb`", ours, ours)]
    notes = []
    if jai_python:
        theirs = _load_ext_seconds(jai_python, "jupyter_ai_magics", repeat)
        version = _version(jai_python, "jupyter-ai-magics")
        rows.append(_load_row(f"`%load_ext jupyter_ai_magics` ({version})", theirs, ours))
        notes.append(
            f"`%load_ext pplx_nb` takes **{median(ours.cpu) * 1000:.0f} ms** of CPU "
            f"({median(ours.wall) * 1000:.0f} ms wall clock on this shared machine) and loads "
            f"**{median(theirs.wall) / median(ours.wall):.1f}× faster** than jupyter-ai-magics "
            f"({median(theirs.cpu) / median(ours.cpu):.1f}× in CPU time, "
            f"{median(theirs.with_cell) / median(ours.with_cell):.1f}× with the first cell after "
            "it, where pplx_nb reads its settings to say who answers: pydantic and "
            "pydantic-settings, which the first magic needs anyway)."
        )
    else:
        notes.append(f"jupyter-ai-magics could not be installed in the bench venv: {why}")
    load = table(
        [
            "fresh IPython (asyncio imported)",
            "median",
            "range",
            "CPU time",
            "with the first cell after",
            "modules loaded after",
            "time vs pplx_nb",
        ],
        rows,
    )

    with _simulator() as url:
        runs = _cell_runs(url, repeat=15)
    overhead = [c - r for c, r in zip(runs["cell"], runs["raw"], strict=True)]

    def ms(values: list[float], bold: bool = False) -> str:
        text = f"{median(values) * 1000:.1f} ms"
        return f"**{text}**" if bold else text

    cell = table(
        ["simulator in another process, 100 ms latency, 15 runs", "median"],
        [
            ["the same request with bare httpx2 (warm connection), whole answer", ms(runs["raw"])],
            ["`%%pplx --no-cache` cell, answer streamed, stored and rendered", ms(runs["cell"])],
            ["**`%%pplx` overhead** (paired difference)", ms(overhead, True)],
            ["bare httpx2: first text delta after sending", ms(runs["first_text"])],
            ["**first text visible after its bytes arrive**", ms(runs["visible"], True)],
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
