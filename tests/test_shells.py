"""The magics where people use them: IPython in a terminal (a pty) and a Jupyter kernel (nbclient).

The terminal shell is ``python -m IPython`` driven through a pseudo-terminal with pexpect, as a
person types; the kernel runs notebooks through nbclient, as JupyterLab's "Run All" does. Both
talk to a simulator in this process, so what they ask is counted at the server.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.interrupts import HANG_SECONDS, api_requests, default_sigint, wait_asked

from pplx_nb.sim import inject_faults, reset, serve, stats

ROOT = Path(__file__).resolve().parents[1]
PROMPT = r"In \[\d+\]: "
KEY = "pplx-test-SECRETKEY-0123456789abcdef"


@pytest.fixture
def sim() -> Iterator[str]:
    with serve(latency_ms=200, deep_research_seconds=1) as url:
        yield url


def _env(url: str, logs: Path) -> dict[str, str]:
    import os

    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PERPLEXITY_", "PPLX_NB_", "CONVERSATION_LOGS_DIR"))
    }
    env.update(
        {
            "PERPLEXITY_API_KEY": KEY,
            "PERPLEXITY_BASE_URL": url,
            "PPLX_NB_OFFLINE": "0",
            "CONVERSATION_LOGS_DIR": str(logs),
            "PERPLEXITY_TIMEOUT": "60000",
            "TERM": "dumb",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


# -- IPython in a terminal ------------------------------------------------------------------------


class Terminal:
    """``python -m IPython`` in a pty: type a line, read what the shell printed until the prompt."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        import pexpect

        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "IPython", "--simple-prompt", "--no-banner", "--colors=NoColor"],
            env=env,
            cwd=str(cwd),
            encoding="utf-8",
            timeout=90,
            dimensions=(50, 200),
            preexec_fn=default_sigint,  # Ctrl-C interrupts, however the suite was started
        )
        self.child.expect(PROMPT)

    def run(self, line: str) -> str:
        self.child.sendline(line)
        self.child.expect(PROMPT)
        before: str = self.child.before
        return before.replace("\r\n", "\n").split("\n", 1)[-1]  # the echoed line goes

    def close(self) -> None:
        import pexpect

        self.child.sendline("exit")
        self.child.expect(pexpect.EOF, timeout=30)
        self.child.close(force=True)


@pytest.fixture
def terminal(sim: str, tmp_path: Path) -> Iterator[Terminal]:
    pytest.importorskip("pexpect")
    shell = Terminal(_env(sim, tmp_path / "logs"), tmp_path)
    try:
        yield shell
    finally:
        shell.close()


def test_the_terminal_shell_prints_each_answer_once(terminal: Terminal, sim: str) -> None:
    loaded = terminal.run("%load_ext pplx_nb")
    assert "answers come from the API at 127.0.0.1" in loaded

    shown = terminal.run("%pplx --related How do I cancel an asyncio task?")
    answer = shown.split("Searching…", 1)[-1]
    first_line = next(line for line in answer.splitlines() if len(line.split()) > 4)
    assert shown.count("Searching…") == 1, shown
    assert shown.count(first_line) == 1, f"the answer was printed more than once:\n{shown}"
    assert "Related" in shown and "https://docs.python.org/3/library/" in shown
    assert "Out[" not in shown, f"an empty Out[n] after the magic:\n{shown}"

    queued = terminal.run("%pplx_research Compare asyncio.gather and asyncio.TaskGroup")
    assert "Research job" in queued and "Out[" not in queued
    report = terminal.run("%pplx_wait")
    assert report.count("Waiting for the worker") + report.count("Querying") <= 1, report
    assert report.count("Sources") + report.count("[1] https://") == 1, report
    assert "Out[" not in report

    kept = terminal.run("answer = %pplx What does asyncio.sleep do?")
    assert "Out[" not in kept
    assert "Answer" in terminal.run("type(answer).__name__")


def test_the_terminal_shell_refuses_a_bad_output_name_before_asking(
    terminal: Terminal, sim: str
) -> None:
    terminal.run("%load_ext pplx_nb")
    before = stats(sim)
    refused = terminal.run("%pplx -o 1x What is asyncio?")
    assert "VALIDATION_ERROR" in refused and "give a Python variable name" in refused
    assert stats(sim)["generations"] == before["generations"]
    assert sum(stats(sim)["requests"].values()) == sum(before["requests"].values())


def test_an_interrupted_pplx_in_the_terminal_fails_and_is_not_continued(
    terminal: Terminal, sim: str
) -> None:
    terminal.run("%load_ext pplx_nb")
    terminal.run("%pplx How do I cancel an asyncio task?")
    # Each attempt hangs past the client's timeout (PERPLEXITY_TIMEOUT) and pexpect's: without
    # the interrupt no answer comes while the test waits for the prompt.
    inject_faults(sim, {"hang": HANG_SECONDS, "times": 5})
    before = api_requests(sim)
    terminal.child.sendline("%pplx What does asyncio.shield do?")
    terminal.child.expect("Searching…")
    wait_asked(sim, before)
    terminal.child.sendintr()
    terminal.child.expect(PROMPT)
    interrupted = terminal.child.before.replace("\r\n", "\n")
    assert "INTERRUPTED" in interrupted and "KeyboardInterrupt" in interrupted, interrupted
    reset(sim)
    bare = terminal.run("%pplx_followup and how do I cancel it anyway?")
    assert "No conversation to continue" in bare, bare


# -- a Jupyter kernel through nbclient ------------------------------------------------------------


def _notebook(cells: list[str]) -> Any:
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    return notebook


def _execute(notebook: Any, cwd: Path, env: dict[str, str], **options: Any) -> Any:
    import os

    from nbclient import NotebookClient

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits the environment it is started in
    try:
        client = NotebookClient(
            notebook,
            timeout=180,
            kernel_name="python3",
            resources={"metadata": {"path": str(cwd)}},
            **options,
        )
        return client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _texts(cell: Any) -> str:
    parts: list[str] = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        parts.extend(str(value) for value in output.get("data", {}).values())
        parts.extend(output.get("traceback", []))
    return "\n".join(parts)


def test_notebook_02_run_twice_in_one_kernel_finishes(tmp_path: Path, sim: str) -> None:
    pytest.importorskip("nbclient")
    import nbformat

    source = nbformat.read(ROOT / "notebooks" / "02-deep-research-async.ipynb", as_version=4)
    code = [cell.source for cell in source.cells if cell.cell_type == "code"]
    env = _env(sim, tmp_path / "unused")
    env.update({"PPLX_NB_OFFLINE": "1", "PPLX_NB_SIM_LATENCY_MS": "0"})
    env["PPLX_NB_SIM_DEEP_RESEARCH_SECONDS"] = "1"
    notebook = _notebook([*code, *code])

    executed = _execute(notebook, tmp_path, env)

    folders = re.findall(r"CONVERSATION_LOGS_DIR=(\S+)", "\n".join(map(_texts, executed.cells)))
    assert len(folders) == 2 and folders[0] != folders[1]
    half = len(code)
    for run in (executed.cells[:half], executed.cells[half:]):
        texts = [_texts(cell) for cell in run]
        assert any("perplexity_deep_research ·" in text for text in texts), texts
        assert not any("TIMEOUT_ERROR" in t or "JOB_IN_PROGRESS" in t for t in texts)
    for folder in folders:
        assert not Path(folder).exists(), f"{folder} outlived the kernel"


def test_in_a_kernel_an_interrupt_fails_the_cell_and_errors_name_magics(
    tmp_path: Path, sim: str
) -> None:
    pytest.importorskip("nbclient")
    from nbclient.exceptions import CellExecutionError

    env = _env(sim, tmp_path / "logs")
    before = stats(sim)
    errors = _execute(
        _notebook(
            [
                "%load_ext pplx_nb",
                "%pplx_followup 20000101-0000000000000 anything?",
                "%%pplx -o 1x\nWhat is asyncio?",
            ]
        ),
        tmp_path,
        env,
    )
    missing = _texts(errors.cells[1])
    assert "CONVERSATION_NOT_FOUND" in missing and "<code>%pplx_conversations</code>" in missing
    assert "perplexity_search" not in missing and "get_conversation_history" not in missing
    assert "give a Python variable name" in _texts(errors.cells[2])
    assert stats(sim)["generations"] == before["generations"], "refused before any request"

    inject_faults(sim, {"hang": 30, "times": 5})
    interrupt = (
        "import os, signal, threading\n"
        "threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT)).start()"
    )
    notebook = _notebook(
        [
            "%load_ext pplx_nb",
            interrupt,
            "%%pplx\nWhat does asyncio.shield do?",
            "print('this cell must not run')",
        ]
    )
    with pytest.raises(CellExecutionError) as failed:
        _execute(notebook, tmp_path, env)
    assert "KeyboardInterrupt" in str(failed.value)
    outputs = json.dumps(notebook.cells[2].get("outputs", []))
    assert "INTERRUPTED" in outputs, outputs
    assert not notebook.cells[3].get("outputs"), "Run All stopped at the interrupted cell"
