"""IPython in a terminal: answers rendered for it, and the line that says what a magic waits for.

The end-to-end test runs ``python -m IPython`` (its prompt_toolkit shell, as a person uses it) in
tmux and reads the screen back with ``capture-pane``: what is checked is what a person would see.
Skipped when tmux is missing, unless PPLX_NB_REQUIRE_TMUX=1 (as in CI).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pplx_nb._models import Answer, Source
from pplx_nb.notebook import display
from pplx_nb.notebook._terminal import StatusLine, plain_text, print_bundle, terminal_markdown
from pplx_nb.sim import serve, stats

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    Source(url="https://docs.python.org/3/library/asyncio-task.html", title="Coroutines and Tasks"),
    Source(url="https://docs.python.org/3/library/asyncio.html", title="asyncio"),
]
ANSWER = Answer(
    text="*From the docs.* Call `Task.cancel()` [1], then **await** it.",
    sources=SOURCES,
    conversation_id="20261122-1763794800000",
    related_questions=["How do I wait for *many* tasks?"],
)


def test_an_answer_in_plain_text_has_no_markdown_marks_and_names_its_sources() -> None:
    text = plain_text(display.answer_bundle(ANSWER)["text/markdown"])
    assert "From the docs. Call Task.cancel() [1], then await it." in text
    assert "1. Coroutines and Tasks (https://docs.python.org/3/library/asyncio-task.html)" in text
    assert "Also consulted\n\n- 2. asyncio (https://docs.python.org/3/library/asyncio.html)" in text
    assert "- How do I wait for *many* tasks?" in text, "a question's own characters stay"
    assert "%pplx_followup 20261122-1763794800000 <question>" in text
    assert not re.search(r"\*\*|`|<img|&lt;|\]\(", text), text


def test_the_terminal_markdown_keeps_citations_as_numbers_and_drops_html() -> None:
    markdown = terminal_markdown(display.answer_bundle(ANSWER)["text/markdown"])
    assert "`Task.cancel()` [1], then" in markdown, "the Sources list gives the address"
    assert "<" not in markdown.replace("<question>", "")


def test_with_rich_the_answer_prints_rendered() -> None:
    pytest.importorskip("rich")
    out = io.StringIO()
    print_bundle(display.answer_bundle(ANSWER), file=out)
    text = out.getvalue()
    assert "Coroutines and Tasks (https://docs.python.org/3/library/asyncio-task.html)" in text
    assert "**" not in text and "`" not in text and "\x1b[" not in text, "no styles in a file"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_status_line_is_shown_once_and_erased_in_a_terminal_only() -> None:
    screen = _Tty()
    line = StatusLine(screen)
    line.show("Searching…\nmore")
    line.show("Searching… · 0.5 s")
    line.clear()
    assert screen.getvalue() == "Searching…\r          \r"
    piped = io.StringIO()
    StatusLine(piped).show("Searching…")
    assert piped.getvalue() == "", "a log or a pipe keeps no status line"


# -- IPython in tmux ----------------------------------------------------------------------------


class Tmux:
    """A shell in a tmux session of its own (its own server socket): type, read the screen."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.socket = f"pplx-test-{os.getpid()}-{time.monotonic_ns()}"
        self._tmux(
            "-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "80", "--", *command,
            env=env, cwd=cwd,
        )  # fmt: skip

    def _tmux(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    def type(self, line: str) -> None:
        self._tmux("send-keys", "-t", "0", "-l", line)
        self._tmux("send-keys", "-t", "0", "Enter")

    def screen(self) -> str:
        """The window and its scrollback, wrapped lines joined."""
        return self._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "0")

    def wait_for(self, pattern: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if re.search(pattern, screen):
                return screen
            time.sleep(0.1)
        pytest.fail(f"{pattern!r} did not show in {timeout} s:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def tmux_ipython(tmp_path: Path) -> Iterator[tuple[Tmux, str]]:
    if shutil.which("tmux") is None:
        if os.environ.get("PPLX_NB_REQUIRE_TMUX") == "1":
            pytest.fail("PPLX_NB_REQUIRE_TMUX=1 but tmux is not installed (apt-get install tmux)")
        pytest.skip("tmux is not installed (apt-get install tmux)")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PERPLEXITY_", "PPLX_NB_", "CONVERSATION_LOGS_DIR", "TMUX"))
    }
    # Two seconds before the first byte: the status line is on screen long enough to be read.
    with serve(latency_ms=2000, deep_research_seconds=1) as url:
        env.update(
            {
                "PERPLEXITY_API_KEY": "pplx-test-0123456789abcdef",
                "PERPLEXITY_BASE_URL": url,
                "PPLX_NB_OFFLINE": "0",
                "CONVERSATION_LOGS_DIR": str(tmp_path / "logs"),
                "TERM": "xterm-256color",
                "IPYTHONDIR": str(tmp_path / "ipython"),
            }
        )
        shell = Tmux([sys.executable, "-m", "IPython", "--no-banner"], env, tmp_path)
        try:
            shell.wait_for(r"In \[1\]: ")
            yield shell, url
        finally:
            shell.close()


def _between(screen: str, start: str, end: str) -> str:
    return screen.split(start, 1)[1].split(end, 1)[0]


def test_terminal_ipython_shows_the_answer_rendered_with_titled_sources(
    tmux_ipython: tuple[Tmux, str],
) -> None:
    shell, url = tmux_ipython
    shell.type("%load_ext pplx_nb")
    shell.wait_for(r"In \[2\]: ")
    shell.type("%pplx How do I cancel an asyncio task?")
    waiting = shell.wait_for(r"Searching…")
    assert "Sources" not in _between(waiting, "In [2]:", "Searching…")
    screen = shell.wait_for(r"In \[3\]: ")
    answer = _between(screen, "In [2]:", "In [3]:")
    assert stats(url)["generations"] == 1

    # The README: "While a magic waits, one line says what for ("Searching…"), and what it
    # prints next replaces that line"; "no Markdown marks, citations as `[1]`, sources by title
    # and address".
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert 'one line says what for ("Searching…"), and what it prints next replaces' in readme
    assert "Searching" not in answer, f"the status line stayed on screen:\n{answer}"
    assert "Offline simulator answer from the Python documentation." in answer
    for mark in ("**", "`", "](", "<img", "<sub>", "<code"):
        assert mark not in answer, f"{mark!r} on screen:\n{answer}"
    assert re.search(r"\[1\]", answer.split("Sources", 1)[0]), answer
    titled = re.findall(r"^\s*\S*\s*1\. (\S+) \((https://docs\.python\.org/\S+)\)", answer, re.M)
    assert titled and titled[0][0] != titled[0][1], f"no titled source:\n{answer}"
    assert re.search(r"^\s*Also consulted\s*$", answer, re.M), answer
    assert re.search(r"continue with %pplx_followup \d{8}-\d{13} <question>", answer), answer
    assert "Out[" not in answer

    shell.type("%pplx_history")
    history = _between(shell.wait_for(r"In \[4\]: "), "In [3]:", "In [4]:")
    assert re.search(r"^\s*Question\b", history, re.M), f"no conversation shown:\n{history}"
    assert re.search(r"^\s*Answer\b", history, re.M) and "**" not in history, history
    shell.type("%pplx_conversations")
    table = _between(shell.wait_for(r"In \[5\]: "), "In [4]:", "In [5]:")
    assert re.search(r"\b\d{8}-\d{13}\b", table), f"no conversation listed:\n{table}"
    assert stats(url)["generations"] == 1, "showing them asks nothing"
