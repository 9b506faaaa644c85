"""What ``make test-pythons`` runs under every other Python, beside the example notebooks.

The simulator's answers to 20 fixed questions must be byte-identical on every Python (its corpus
is frozen); a ``%%pplx`` cell and the MCP server must work. ``PPLX_NB_UPDATE_SIM_ANSWERS=1``
rewrites ``tests/data/sim_answers.json`` after a deliberate change to what the simulator says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from support.mcp import check_serves

from pplx_nb import Answer, Researcher, Settings
from pplx_nb.notebook import magics
from pplx_nb.sim import stats

ANSWERS = Path(__file__).parent / "data" / "sim_answers.json"
QUESTIONS = (
    "how do I cancel an asyncio task",
    "sort a list in place",
    "parse a JSON string",
    "what does the assert statement do",
    "read a text file with pathlib",
    "how do dataclasses generate __init__",
    "match a regular expression at the start of a string",
    "format a float with two decimals in an f-string",
    "write a context manager with a generator",
    "group consecutive items with itertools",
    "parse an ISO 8601 date",
    "run a subprocess and capture its output",
    "protect shared state with a threading lock",
    "configure logging to a file",
    "what does the with statement do",
    "cache the results of a function",
    "count how often each word occurs",
    "read rows from a CSV file",
    "pick a random element from a list",
    "what is a coroutine",
)


def _stable(value: Any) -> Any:
    """``value`` without the ids and timestamps that differ between any two runs."""
    if isinstance(value, dict):
        return {key: _stable(item) for key, item in value.items() if not _varies(key, item)}
    if isinstance(value, list):
        return [_stable(item) for item in value]
    return value


def _varies(key: str, item: Any) -> bool:
    # A search result's "id" is its rank (1, 2, ...) and is kept; a response's is random.
    return key in ("created_at", "completed_at") or (key == "id" and isinstance(item, str))


def _ask_all(url: str) -> str:
    answers = []
    with httpx2.Client(base_url=url, timeout=60) as http:
        for question in QUESTIONS:
            response = http.post("/v1/agent", json={"model": "perplexity/sonar", "input": question})
            response.raise_for_status()
            body = response.json()
            answers.append(
                {"question": question, **_stable({k: body[k] for k in ("output", "usage")})}
            )
    return json.dumps(answers, ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def test_the_simulator_answers_twenty_questions_the_same_on_every_python(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    process = subprocess.Popen(
        [sys.executable, "-m", "pplx_nb.sim", "--latency-ms", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        answers = _ask_all(process.stdout.readline().strip())
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    if os.environ.get("PPLX_NB_UPDATE_SIM_ANSWERS") == "1":
        ANSWERS.write_text(answers, encoding="utf-8")
    assert answers == ANSWERS.read_text(encoding="utf-8")


def test_a_pplx_cell_answers_once_and_binds_the_answer(settings: Settings, sim_url: str) -> None:
    shell = InteractiveShell.instance()
    with Researcher(settings) as researcher:
        magics.set_researcher(researcher)
        shell.run_line_magic("load_ext", "pplx_nb")
        try:
            with capture_output() as captured:
                outcome = shell.run_cell("%%pplx -o ans\nhow do I cancel an asyncio task")
        finally:
            shell.run_line_magic("unload_ext", "pplx_nb")
            magics.set_researcher(None)
    answer = shell.user_ns.pop("ans")
    assert outcome.error_in_exec is None and captured.outputs
    assert isinstance(answer, Answer) and answer.sources[0].title == "asyncio.Task.cancel"
    assert stats(sim_url)["generations"] == 1


def test_the_mcp_server_answers_a_search_over_stdio(tmp_path: Path) -> None:
    check_serves(Path(sys.executable).parent / "pplx-nb-mcp", tmp_path)
