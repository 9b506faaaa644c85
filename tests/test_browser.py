"""A real JupyterLab in headless chromium: the magics stream a cited answer and a job finishes idle.

Skipped (with the reason) when chromium is missing, unless PPLX_NB_REQUIRE_BROWSER=1, as in CI,
where a missing browser is a failure. Saves a screenshot under tests/.artifacts/, or over the
README's docs/screenshot.png when PPLX_NB_UPDATE_SCREENSHOT=1.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support_browser.lab import CHROMIUM_ARGS, Lab, chromium_path, running_lab, write_notebook

pytestmark = pytest.mark.browser

_ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = (
    _ROOT / "docs" / "screenshot.png"
    if os.environ.get("PPLX_NB_UPDATE_SCREENSHOT") == "1"
    else _ROOT / "tests" / ".artifacts" / "screenshot.png"
)
CELLS = [
    "%load_ext pplx_nb",
    "%%pplx --related\nHow do I cancel an asyncio task and wait for it to finish?",
    "%%pplx_research\nCompare asyncio.gather and asyncio.TaskGroup for running tasks concurrently",
    "print('The kernel is free while the research job runs.')",
]
KERNEL = "window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel"
JOB_STATE = """() => {
  const kernel = KERNEL;
  const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[2];
  const bar = cell && cell.querySelector('.pplx-job-monitor .widget-hprogress .progress-bar');
  const report = cell && cell.querySelector('.pplx-job-monitor a[href*="docs.python.org"]');
  return {
    kernel: kernel ? kernel.status : null,
    width: bar ? parseFloat(bar.style.width) : null,
    report: Boolean(report),
  };
}""".replace("KERNEL", KERNEL)
_STATUS = re.compile(r"^\s*[^…\n]*…(\s*·\s*[\d.]+\s*s)?")
# Records, as the DOM changes, every distinct text of the answer cell's output that still has the
# streaming cursor, and when the final answer's first source link appeared. An observer sees each
# repaint, where polling from Python could fall between them.
WATCH_STREAM = """() => {
  const seen = window.pplxStream = {partial: [], partialAt: null, finalAt: null, blank: []};
  const observer = new MutationObserver(() => {
    const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[1];
    const area = cell && cell.querySelector('.jp-OutputArea');
    if (!area) return;
    const text = area.textContent;
    const final = area.querySelector('.jp-RenderedMarkdown a[href*="docs.python.org"]');
    // Between the first streamed words and the final answer the cell must never be empty.
    if (seen.partialAt !== null && !text.includes('▌') && !final) seen.blank.push(text);
    if (text.includes('▌') && !seen.partial.includes(text)) {
      seen.partial.push(text);
      if (seen.partialAt === null) seen.partialAt = performance.now();
      // The page as it was mid-stream, kept for a screenshot: the stream is over in a second.
      if (!window.pplxPartial && area.querySelector('.jp-RenderedMarkdown em')) {
        window.pplxPartial = area.cloneNode(true);
      }
    }
    if (final) {
      seen.finalAt = performance.now();
      observer.disconnect();
    }
  });
  observer.observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def _require_browser() -> str:
    required = os.environ.get("PPLX_NB_REQUIRE_BROWSER") == "1"
    path = chromium_path()
    if path is None:
        reason = "chromium is not installed (apt-get install chromium)"
        if required:
            pytest.fail(f"PPLX_NB_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        if required:
            pytest.fail("PPLX_NB_REQUIRE_BROWSER=1 but the playwright package is missing")
        pytest.skip("the playwright package is not installed")
    return path


def _wait_kernel_idle(page: Any, timeout_ms: int) -> None:
    page.wait_for_function(
        f"() => {{ try {{ return {KERNEL}.status === 'idle'; }} catch (e) {{ return false; }} }}",
        timeout=timeout_ms,
    )


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    """One playwright driver for the module's tests (each start takes seconds)."""
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        yield driver


def _launch(playwright: Any, **options: Any) -> Any:
    """A headless chromium (Debian's) started by ``playwright``."""
    return playwright.chromium.launch(
        executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS, **options
    )


@pytest.fixture(scope="module")
def shared_chromium(playwright: Any) -> Iterator[Any]:
    browser = _launch(playwright)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def browser(shared_chromium: Any) -> Iterator[Any]:
    """The module's chromium; every page a test opened (each in its own context) is closed
    after the test, so no JupyterLab page of an earlier test runs beside the next one."""
    yield shared_chromium
    for context in shared_chromium.contexts:
        context.close()


def test_notebook_streams_cited_answer_and_job_completes_while_kernel_idle(
    tmp_path: Path, browser: Any
) -> None:
    root = tmp_path / "notebooks"
    root.mkdir()
    write_notebook(root / "demo.ipynb", CELLS)
    env = {
        "PPLX_NB_OFFLINE": "1",
        "PPLX_NB_SIM_DEEP_RESEARCH_SECONDS": "3",
        # With 1 s before the first byte the 16 pieces of an answer come 50 ms apart: the cell
        # streams for most of a second, long enough to be seen.
        "PPLX_NB_SIM_LATENCY_MS": "1000",
        "CONVERSATION_LOGS_DIR": str(tmp_path / "conversation-logs"),
    }
    with running_lab(root, env) as lab:
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        page.goto(lab.notebook_url("demo.ipynb"))
        _wait_kernel_idle(page, 60_000)
        page.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")
        page.evaluate(WATCH_STREAM)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")

        answer = page.locator(".jp-Notebook .jp-Cell").nth(1)
        answer.locator('.jp-RenderedMarkdown a[href*="docs.python.org"]').first.wait_for(
            timeout=30_000
        )
        text = answer.locator(".jp-OutputArea").inner_text()
        assert "Conversation" in text and "%pplx_followup" in text
        assert "Sources" in text
        assert "▌" not in text, "the streamed text was not replaced by the final answer"
        assert answer.locator(".jp-RenderedMarkdown").count() == 1, "one display, updated"
        _assert_streamed(page.evaluate("window.pplxStream"), text)
        _screenshot_partial(page, ARTIFACTS / "streamed-partial.png")

        samples = _follow_job(page, timeout=45)
        moving = [s for s in samples if s["kernel"] == "idle" and 0 < (s["width"] or 0) < 100]
        assert moving, f"the bar never moved while the kernel was idle: {samples}"
        final = samples[-1]
        assert final["width"] == 100 and final["report"], final
        assert final["kernel"] == "idle"
        free = page.locator(".jp-Notebook .jp-Cell").nth(3).locator(".jp-OutputArea")
        assert "kernel is free" in free.inner_text()

        page.evaluate("document.querySelector('.jp-WindowedPanel-outer')?.scrollTo(0, 0)")
        time.sleep(0.5)
        SCREENSHOT.parent.mkdir(exist_ok=True)
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT))


def _assert_streamed(seen: dict[str, Any], final: str) -> None:
    """Partial text with the cursor was on screen before the final answer replaced it."""
    partial = [_STATUS.sub("", text.split("▌")[0]).strip() for text in seen["partial"]]
    words = [text for text in partial if len(text.split()) >= 3]
    assert words, f"no partial text with the cursor was shown: {seen['partial']}"
    assert seen["finalAt"] is not None and seen["partialAt"] < seen["finalAt"], seen
    assert any(len(text) < len(final) for text in words), "the partial text was not partial"
    assert not seen["blank"], f"the cell went blank between stream and answer: {seen['blank']}"
    raw = [text for text in seen["partial"] if re.search(r"[*`]|\]\(", text)]
    assert not raw, f"Markdown marks shown raw while streaming: {raw}"


SHOW_PARTIAL = """() => {
  const frame = document.createElement('div');
  frame.id = 'pplx-partial';
  frame.className = 'jp-Notebook';
  frame.style.cssText = 'position:fixed;left:0;top:0;width:900px;z-index:10000;padding:12px;' +
    'background:var(--jp-layout-color0,#fff)';
  frame.appendChild(window.pplxPartial);
  document.body.appendChild(frame);
  const em = frame.querySelector('.jp-RenderedMarkdown em');
  return {text: frame.innerText, em: em ? em.textContent : null};
}"""


def _screenshot_partial(page: Any, path: Path) -> None:
    """Show the output as the observer kept it mid-stream, check it and take its picture."""
    kept = page.evaluate(SHOW_PARTIAL)
    assert kept["em"] and kept["em"].startswith("Offline simulator answer"), kept
    assert "▌" in kept["text"] and "*" not in kept["text"], kept
    path.parent.mkdir(parents=True, exist_ok=True)
    page.locator("#pplx-partial").screenshot(path=str(path))
    page.evaluate("document.getElementById('pplx-partial').remove()")


def _follow_job(page: Any, timeout: float) -> list[dict[str, Any]]:
    """Sample the job monitor until its bar is full and the report is shown."""
    samples: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = page.evaluate(JOB_STATE)
        samples.append(state)
        if state["width"] == 100 and state["report"]:
            return samples
        time.sleep(0.2)
    pytest.fail(f"the job did not complete in {timeout} s: {samples[-5:]}")


MONITOR = """(index) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[index];
  const monitor = cell && cell.querySelector('.pplx-job-monitor');
  const bar = monitor && monitor.querySelector('.widget-hprogress .progress-bar');
  return monitor ? {
    text: monitor.innerText,
    width: bar ? parseFloat(bar.style.width) : null,
    bar: bar ? bar.className : null,
  } : null;
}"""
RUN_NEXT = "window.jupyterapp.commands.execute('notebook:run-cell-and-select-next')"


def _outputs(page: Any, index: int) -> str:
    return str(
        page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea").inner_text()
    )


@contextmanager
def _chromium_on_lab(browser: Any, root: Path, env: dict[str, str]) -> Iterator[tuple[Lab, Any]]:
    """A JupyterLab serving ``root`` offline (``env`` added), and the module's chromium."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    logs = {"PPLX_NB_OFFLINE": "1", "CONVERSATION_LOGS_DIR": str(root.parent / "logs")}
    with running_lab(root, {**logs, **env}) as lab:
        yield lab, browser


# fontconfig as installed, less every colour font: the page is drawn as on a desktop without an
# emoji font (Debian's chromium draws what fontconfig offers).
NO_EMOJI_FONTS = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <include ignore_missing="yes">/etc/fonts/fonts.conf</include>
  <selectfont><rejectfont>
    <pattern><patelt name="color"><bool>true</bool></patelt></pattern>
  </rejectfont></selectfont>
</fontconfig>
"""
GLYPH_CELLS = [
    "%load_ext pplx_nb",
    "%%pplx\nHow do I cancel an asyncio task?",
    "%pplx_followup --fork and with a timeout?",
    "%pplx_web -n 3 asyncio TaskGroup",
    "%%pplx_research\nCompare asyncio.gather and asyncio.TaskGroup",
    "%pplx_wait",
    "%pplx_history",
    "%pplx_cancel",
    "%pplx_followup 20000101-0000000000000 what next?",
]
# Every character past ASCII in the outputs, drawn in its element's font on a canvas and compared
# with a character no font has (U+0378, unassigned): the same pixels mean the missing-glyph box.
GLYPHS = """() => {
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 48;
  const context = canvas.getContext('2d', {willReadFrequently: true});
  const draw = (ch, family) => {
    context.clearRect(0, 0, 48, 48);
    context.font = `32px ${family}`;
    context.textBaseline = 'top';
    context.fillText(ch, 4, 4);
    return context.getImageData(0, 0, 48, 48).data.join(',');
  };
  const box = (ch, family) => draw(ch, family) === draw('\u0378', family);
  const seen = new Map();
  for (const area of document.querySelectorAll('.jp-Notebook .jp-OutputArea')) {
    const walker = document.createTreeWalker(area, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const element = walker.currentNode.parentElement;
      if (!element || !element.getClientRects().length) continue;
      const family = getComputedStyle(element).fontFamily;
      for (const ch of walker.currentNode.data) {
        if (ch.codePointAt(0) > 0x7e && !/\\s/.test(ch)) seen.set(ch + family, {ch, family});
      }
    }
  }
  const icons = Array.from(document.querySelectorAll('.jp-OutputArea img.pplx-icon'));
  const family = getComputedStyle(document.body).fontFamily;
  return {
    boxes: [...seen.values()].filter(({ch, family}) => box(ch, family)),
    checked: [...new Set([...seen.values()].map(({ch}) => ch))].join(''),
    text: Array.from(document.querySelectorAll('.jp-OutputArea')).map(a => a.innerText).join('\\n'),
    icons: icons.length,
    broken: icons.filter(i => !i.complete || i.naturalWidth === 0).length,
    calibration: {emoji: box('🔗', family), letter: box('a', family)},
  };
}"""
ICONS_LOADED = """() => {
  const icons = Array.from(document.querySelectorAll('.jp-OutputArea img.pplx-icon'));
  return icons.length >= 4 && icons.every(icon => icon.complete);
}"""
TRUSTED = """() => {
  const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
  return Array.from({length: cells.length}, (_, i) => cells.get(i))
    .filter(cell => cell.type === 'code' && cell.outputs.length).map(cell => cell.trusted);
}"""
EMOJI = re.compile("[\U0001f000-\U0001faff\u2300-\u23ff\u2600-\u27bf\u2b00-\u2bff\ufe0f]")


def test_outputs_draw_no_missing_glyph_box_without_an_emoji_font(
    tmp_path: Path, playwright: Any
) -> None:
    root = tmp_path / "notebooks"
    root.mkdir()
    write_notebook(root / "glyphs.ipynb", GLYPH_CELLS)
    quickstart = (_ROOT / "notebooks" / "01-quickstart.ipynb").read_text(encoding="utf-8")
    (root / "saved.ipynb").write_text(quickstart, encoding="utf-8")
    fonts = tmp_path / "fonts.conf"
    fonts.write_text(NO_EMOJI_FONTS)
    env = _offline(tmp_path)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with running_lab(root, env) as lab:
        # A chromium of its own: fontconfig is read from the environment it starts in.
        browser = _launch(playwright, env={**os.environ, "FONTCONFIG_FILE": str(fonts)})
        try:
            # Saved outputs of a notebook never run here are untrusted: JupyterLab sanitizes them.
            page = _lab_page(browser, lab.notebook_url("saved.ipynb"))
            page.wait_for_function(ICONS_LOADED, timeout=30_000)
            trusted = page.evaluate(TRUSTED)
            assert trusted and not any(trusted), f"the saved notebook was trusted: {trusted}"
            saved = page.evaluate(GLYPHS)
            assert saved["icons"] >= 4 and not saved["broken"] and not saved["boxes"], saved
            page.close()
            page = _lab_page(browser, lab.notebook_url("glyphs.ipynb"))
            _run_all_and_wait(page, 120)
            page.locator(".pplx-job-monitor").get_by_text("completed").first.wait_for(
                timeout=30_000
            )
            page.wait_for_function(ICONS_LOADED, timeout=30_000)
            found = page.evaluate(GLYPHS)
            assert found["calibration"] == {"emoji": True, "letter": False}, (
                "an emoji font is still in use, or the box is not recognised"
            )
            assert not EMOJI.findall(found["text"]), EMOJI.findall(found["text"])
            assert not found["boxes"], f"drawn as the missing-glyph box: {found['boxes']}"
            assert found["icons"] >= 8 and not found["broken"], found
            # Tall enough for the whole notebook in one picture.
            page.set_viewport_size({"width": 1280, "height": 4200})
            time.sleep(0.5)
            page.screenshot(path=str(ARTIFACTS / "glyphs-light.png"))
            page.evaluate(
                "window.jupyterapp.commands.execute('apputils:change-theme', "
                "{theme: 'JupyterLab Dark'})"
            )
            page.wait_for_function("document.body.dataset.jpThemeLight === 'false'")
            time.sleep(0.5)
            page.screenshot(path=str(ARTIFACTS / "glyphs-dark.png"))
        finally:
            browser.close()


def test_a_cancelled_job_and_an_interrupted_wait_read_as_what_the_user_did(
    tmp_path: Path, browser: Any
) -> None:
    root = tmp_path / "notebooks"
    root.mkdir()
    write_notebook(
        root / "cancel.ipynb",
        [
            "%load_ext pplx_nb",
            "%%pplx_research -o job\nWrite a history of asyncio from PEP 3156 to TaskGroup",
            "%pplx_cancel",
        ],
    )
    write_notebook(
        root / "interrupt.ipynb",
        [
            "%load_ext pplx_nb",
            "%%pplx_research --wait\nCompare asyncio.gather and asyncio.TaskGroup",
            "print('Run All went on')",
        ],
    )
    slow = {"PPLX_NB_SIM_DEEP_RESEARCH_SECONDS": "120", "PPLX_NB_SIM_LATENCY_MS": "100"}
    with _chromium_on_lab(browser, root, slow) as (lab, browser):
        page = _lab_page(browser, lab.notebook_url("cancel.ipynb"))
        page.evaluate("window.jupyterapp.shell.currentWidget.content.activeCellIndex = 0")
        page.evaluate(RUN_NEXT)
        page.evaluate(RUN_NEXT)
        # The cancel once the bar has moved, as a user who watched it would.
        page.wait_for_function(f"() => ({MONITOR})(1)?.width > 0", timeout=60_000)
        page.evaluate(RUN_NEXT)
        page.wait_for_function(f"() => ({MONITOR})(1)?.text.includes('cancelled')", timeout=30_000)
        monitor = page.evaluate(f"({MONITOR})(1)")
        assert monitor["width"] > 0, f"the bar dropped to 0 %: {monitor}"
        assert f"cancelled at {monitor['width']:.0f}%" in monitor["text"], monitor
        assert "danger" not in monitor["bar"] and "warning" not in monitor["bar"], monitor
        assert "PPLX_ERROR" not in monitor["text"] and "⚠" not in monitor["text"]
        assert "billed" in monitor["text"] or "cost unknown" in monitor["text"], monitor
        assert "is cancelled" in _outputs(page, 2)
        time.sleep(0.3)
        page.screenshot(path=str(ARTIFACTS / "cancelled-monitor.png"), clip=_clip(page))

        page = _lab_page(browser, lab.notebook_url("interrupt.ipynb"))
        # Not awaited: the command's promise settles only when every cell has run.
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        waiting = page.locator(".jp-Notebook .jp-Cell").nth(1).locator("progress")
        waiting.first.wait_for(timeout=60_000)
        page.evaluate("window.jupyterapp.commands.execute('notebook:interrupt-kernel')")
        _wait_kernel_idle(page, 60_000)
        cell = page.locator(".jp-Notebook .jp-Cell").nth(1)
        cell.get_by_text("INTERRUPTED").wait_for(timeout=30_000)
        stderr = cell.locator("[data-mime-type='application/vnd.jupyter.stderr']")
        assert stderr.count() == 1, _outputs(page, 1)
        after = stderr.inner_text().strip().splitlines()
        assert len(after) <= 1, f"a traceback under the message: {after}"
        text = _outputs(page, 1)
        assert "contextlib" not in text and "_kernel.py" not in text, text
        assert "Run the cell again to retry" in text
        assert "Run All went on" not in _outputs(page, 2), "the cell failed: Run All stops"
        time.sleep(0.3)
        page.screenshot(path=str(ARTIFACTS / "interrupted.png"), clip=_clip(page))


def test_notebook_02_reopened_shows_how_its_jobs_ended(tmp_path: Path, browser: Any) -> None:
    root = tmp_path / "notebooks"
    root.mkdir()
    source = _ROOT / "notebooks" / "02-deep-research-async.ipynb"
    (root / "02.ipynb").write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    with _chromium_on_lab(browser, root, {}) as (lab, browser):
        page = _lab_page(browser, lab.notebook_url("02.ipynb"))
        queued = page.locator(".jp-Notebook .jp-Cell").nth(3).locator(".jp-OutputArea")
        queued.get_by_text("Research job").first.wait_for(timeout=30_000)
        notebook = page.locator(".jp-Notebook").inner_text()
        assert "reading status" not in notebook
        assert re.search(r"Research job \d{8}-\d{13}: completed", queued.inner_text())
        # Cancelled before or after its run started, depending on when the notebook was saved.
        assert re.search(r"Research job \d{8}-\d{13}: cancelled( at \d+%)? · ", notebook)
        assert "PPLX_ERROR" not in notebook
        time.sleep(0.3)
        page.screenshot(path=str(ARTIFACTS / "reopened-02.png"), clip=_clip(page, 700))


PROMPTS = """() => Array.from(
  document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')
).map(p => p.textContent.trim())"""
ARTIFACTS = _ROOT / "tests" / ".artifacts"


def _run_all_and_wait(page: Any, timeout: float) -> list[str]:
    """Run every cell, then wait until the last one has run (its prompt shows a new number)."""
    before = page.evaluate(PROMPTS)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    deadline = time.monotonic() + timeout
    prompts = before
    while time.monotonic() < deadline:
        time.sleep(0.5)
        prompts = page.evaluate(PROMPTS)
        last = prompts[-1] if prompts else ""
        if last != before[-1] and re.fullmatch(r"\[\d+\]:", last) and "[*]:" not in prompts:
            return prompts
    pytest.fail(f"Run All did not finish in {timeout} s: {prompts}")


def _offline(tmp_path: Path) -> dict[str, str]:
    """The lab's settings: the simulator, quick, conversations under ``tmp_path``."""
    return {
        "PPLX_NB_OFFLINE": "1",
        "PPLX_NB_SIM_DEEP_RESEARCH_SECONDS": "2",
        "PPLX_NB_SIM_LATENCY_MS": "100",
        "CONVERSATION_LOGS_DIR": str(tmp_path / "conversation-logs"),
    }


def _lab_page(browser: Any, url: str) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    page.goto(url)
    _wait_kernel_idle(page, 60_000)
    page.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")
    return page


def test_notebook_02_runs_twice_and_an_error_shows_in_a_box(tmp_path: Path, browser: Any) -> None:
    root = tmp_path / "notebooks"
    root.mkdir()
    source = _ROOT / "notebooks" / "02-deep-research-async.ipynb"
    (root / "02.ipynb").write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    write_notebook(
        root / "errors.ipynb",
        [
            "%load_ext pplx_nb",
            "%pplx_followup 20000101-0000000000000 what next?",
            "%%pplx -o 1x\nWhat is asyncio?",
        ],
    )
    env = _offline(tmp_path)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with running_lab(root, env) as lab:
        page = _lab_page(browser, lab.notebook_url("02.ipynb"))
        page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
        _run_all_and_wait(page, 120)
        prompts = _run_all_and_wait(page, 120)
        notebook = page.locator(".jp-Notebook").inner_text()
        for stuck in ("TIMEOUT_ERROR", "JOB_IN_PROGRESS", "None · None", "PPLX_ERROR"):
            assert stuck not in notebook, f"{stuck} after the second Run All"
        assert "perplexity_deep_research · " in notebook
        assert notebook.count("report is in its monitor above") >= 1, "no report twice"
        assert all(re.fullmatch(r"\[\d+\]:", p) for p in prompts), prompts
        monitor = page.locator(".pplx-job-monitor").first
        monitor.scroll_into_view_if_needed()
        monitor.get_by_text("completed").first.wait_for(timeout=30_000)
        time.sleep(0.5)
        page.screenshot(path=str(ARTIFACTS / "rerun-02.png"))

        page = _lab_page(browser, lab.notebook_url("errors.ipynb"))
        _run_all_and_wait(page, 60)
        boxes = page.locator(".jp-OutputArea-output div[style*='border-left']")
        boxes.nth(1).wait_for(timeout=30_000)
        missing, refused = boxes.nth(0), boxes.nth(1)
        assert "CONVERSATION_NOT_FOUND" in missing.inner_text()
        assert missing.locator("code", has_text="%pplx_conversations").count() == 1
        assert "`" not in missing.inner_text() + refused.inner_text()
        assert "perplexity_search" not in missing.inner_text()
        assert "give a Python variable name" in refused.inner_text()
        page.evaluate("document.querySelector('.jp-WindowedPanel-outer')?.scrollTo(0, 0)")
        time.sleep(0.3)
        page.screenshot(path=str(ARTIFACTS / "error-box.png"), clip=_clip(page))


def _clip(page: Any, height: float = 420) -> dict[str, float]:
    """The notebook's first cells, where the error boxes are."""
    box = page.locator(".jp-Notebook").bounding_box()
    return {"x": box["x"], "y": box["y"], "width": box["width"], "height": height}


def test_a_saved_answer_records_where_it_came_from_and_is_checked_against_the_store(
    tmp_path: Path, browser: Any
) -> None:
    import json
    import subprocess
    import sys

    import nbformat

    root = tmp_path / "notebooks"
    root.mkdir()
    path = root / "cite.ipynb"
    write_notebook(path, ["%load_ext pplx_nb", "%%pplx\nHow do I cancel an asyncio task?"])
    logs = root.parent / "logs"
    with _chromium_on_lab(browser, root, {}) as (lab, browser):
        page = _lab_page(browser, lab.notebook_url("cite.ipynb"))
        _run_all_and_wait(page, 120)
        page.locator(".jp-Notebook .jp-Cell").nth(1).get_by_text("Sources").first.wait_for(
            timeout=30_000
        )
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        deadline = time.monotonic() + 30
        while '"pplx_nb"' not in path.read_text(encoding="utf-8"):
            assert time.monotonic() < deadline, "the saved notebook holds no provenance"
            time.sleep(0.3)
        page.screenshot(path=str(ARTIFACTS / "provenance.png"), clip=_clip(page))
    saved = nbformat.read(path, as_version=4)
    found = [
        output["metadata"]["pplx_nb"]
        for output in saved.cells[1].outputs
        if "pplx_nb" in output.get("metadata", {})
    ]
    assert len(found) == 1, saved.cells[1].outputs
    record = found[0]
    assert record["query"] == "How do I cancel an asyncio task?"
    assert record["sources"] and record["answerSha256"]

    def check() -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "pplx_nb.provenance", str(path), "--store", str(logs)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    matching = check()
    assert matching.returncode == 0, matching.stdout + matching.stderr
    assert f"{record['conversationId']} turn {record['turn']}" in matching.stdout
    assert "matching" in matching.stdout
    document = logs / record["conversationId"] / "conversation.json"
    data = json.loads(document.read_text(encoding="utf-8"))
    data["messages"][record["turn"]]["content"] += " (edited)"
    document.write_text(json.dumps(data), encoding="utf-8")
    changed = check()
    assert changed.returncode == 1 and "changed" in changed.stdout, changed.stdout


# Every output area's text and the math MathJax typeset in it (JupyterLab reads `$…$` as TeX).
MONEY = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell')).map(cell => ({
  text: cell.querySelector('.jp-OutputArea')?.innerText ?? '',
  math: cell.querySelectorAll('.jp-OutputArea mjx-container, .jp-OutputArea .MathJax').length,
}))"""


def test_spend_caps_and_costs_show_their_dollars_as_amounts_not_as_math(
    tmp_path: Path, browser: Any
) -> None:
    root = tmp_path / "notebooks"
    root.mkdir()
    write_notebook(
        root / "budget.ipynb",
        [
            "%load_ext pplx_nb",
            "%env PPLX_NB_BUDGET=0.5/request,0.02/day",
            "%%pplx\nWhat is a coroutine?",
            "%%pplx\nWhat is an event loop?",
            "%pplx_budget",
            "%pplx_costs",
            "%%pplx_research --wait\nCompare asyncio and trio",
        ],
    )
    with _chromium_on_lab(browser, root, _offline(tmp_path)) as (lab, browser):
        page = _lab_page(browser, lab.notebook_url("budget.ipynb"))
        _run_all_and_wait(page, 120)
        time.sleep(1)  # MathJax typesets after the outputs are attached
        cells = page.evaluate(MONEY)
        refused, standing, spent, research = (cells[i]["text"] for i in (3, 4, 5, 6))
        assert "BUDGET_EXCEEDED" in refused and "of today's (UTC) cap of $0.0200" in refused
        assert re.search(r"day\s+\$0\.0200\s+\$0\.\d{4}\s+\$0\.00\s+\$0\.\d{4}", standing), standing
        assert re.search(r"\$0\.\d{4} spent on 1 paid turn\.", spent), spent
        assert re.search(r"Estimated cost: about \$0\.\d{4}, at most \$0\.\d{4}", research)
        assert "BUDGET_EXCEEDED" in research
        assert [cell["math"] for cell in cells] == [0] * len(cells), cells
        page.screenshot(path=str(ARTIFACTS / "budget.png"))
