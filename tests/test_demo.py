"""``make demo``: JupyterLab on the example notebooks, saying which backend answers.

The installation half (a fresh ``.venv`` with ``.[lab]``) is what ``make test`` already did, so
these tests skip it (``make -o``) and check what a user sees: the URL, the backend line, and
JupyterLab answering on ``/lab`` with the notebooks folder as its root.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_URL = re.compile(
    r"JupyterLab:\s+(http://127\.0\.0\.1:\d+/lab/tree/01-quickstart\.ipynb\?token=[0-9a-f]+)"
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Demo:
    """A running ``make demo`` and the lines it printed so far."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            for line in self.process.stdout:
                self._queue.put(line)
        except ValueError:
            return  # closed by the teardown while this thread was still reading

    def wait_for_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.2)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            self.lines.append(line)
            if match := _URL.search(line):
                return match.group(1)
        raise AssertionError("make demo printed no URL:\n" + "".join(self.lines))


@contextmanager
def _make_demo(**env: str) -> Iterator[_Demo]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PERPLEXITY_", "PPLX_NB_"))}
    process = subprocess.Popen(
        [
            "make",
            "--no-print-directory",
            "-o",
            ".venv/.installed-lab",
            "demo",
            f"DEMO_PORT={_free_port()}",
            "DEMO_ARGS=--no-browser",
        ],
        cwd=ROOT,
        env={**clean, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    demo = _Demo(process)
    try:
        yield demo
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        # The group is gone, so the pipe ends: let the reader see its end before closing it
        # (a busy machine may not have run the thread yet).
        demo.reader.join(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def _get(url: str, timeout: float) -> tuple[int, bytes]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@pytest.mark.slow
def test_demo_serves_jupyterlab_on_the_notebooks_with_the_offline_simulator() -> None:
    with _make_demo() as demo:
        url = demo.wait_for_url(timeout=60)
        status, page = _get(url, timeout=60)
        assert status == 200
        assert b"JupyterLab" in page
        assert "backend: offline simulator (no PERPLEXITY_API_KEY set)" in "".join(demo.lines)

        contents_url = re.sub(r"/lab/tree/[^?]*\?", "/api/contents?", url)
        _, listing = _get(contents_url, timeout=10)
        names = {item["name"] for item in json.loads(listing)["content"]}
        assert "01-quickstart.ipynb" in names


@pytest.mark.slow
def test_demo_says_it_uses_the_perplexity_api_when_a_key_is_set() -> None:
    with _make_demo(PERPLEXITY_API_KEY="pplx-test-demo-key") as demo:
        demo.wait_for_url(timeout=60)
        printed = "".join(demo.lines)
        assert "backend: Perplexity API" in printed
        assert "pplx-test-demo-key" not in printed
