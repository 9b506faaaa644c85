"""The magics in a real IPython shell against the simulator: every magic, options, interpolation."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from html import escape
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from support.ipython import Run, loaded_shell

from pplx_nb import Answer, Conversation, JobStatus, Researcher, Settings
from pplx_nb.notebook import magics
from pplx_nb.notebook._icons import icon
from pplx_nb.notebook._input import interpolate, search_opts, split_conversation_id, unquote
from pplx_nb.sim import stats

# -- interpolation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("about {topic}", "about asyncio"),
        ("{topic} and {count}", "asyncio and 3"),
        ("unknown {nope} stays", "unknown {nope} stays"),
        ("doubled {{topic}} stays", "doubled {{topic}} stays"),
        ("dict {'a': topic} and set {topic, count}", "dict {'a': topic} and set {topic, count}"),
        ("format spec {topic:>10} stays", "format spec {topic:>10} stays"),
        ("attr {obj.name} and {obj.missing}", "attr widget and {obj.missing}"),
        ("private {obj._secret} stays", "private {obj._secret} stays"),
        ("inline `f'{topic}'` code", "inline `f'{topic}'` code"),
        (
            "```python\nprint(f'{topic}')\n```\nabout {topic}",
            "```python\nprint(f'{topic}')\n```\nabout asyncio",
        ),
        ("broken {bad}", "broken {bad}"),
        ("unclosed ``` {topic}", "unclosed ``` {topic}"),
    ],
)
def test_interpolation_replaces_known_names_and_leaves_the_rest(text: str, expected: str) -> None:
    class Obj:
        name = "widget"
        _secret = "hidden"

    class Bad:
        def __str__(self) -> str:
            raise RuntimeError("no str")

    namespace = {"topic": "asyncio", "count": 3, "obj": Obj(), "bad": Bad()}
    assert interpolate(text, namespace) == expected


# -- option parsing -----------------------------------------------------------------------------


def test_unquote_strips_one_pair_of_matching_quotes() -> None:
    assert unquote('"a b"') == "a b"
    assert unquote("'x'") == "x"
    assert unquote("'x\"") == "'x\""
    assert unquote("what's") == "what's"


def test_split_conversation_id_takes_a_leading_id_only() -> None:
    assert split_conversation_id(["20250124-1737734400000", "and", "then?"]) == (
        "20250124-1737734400000",
        ["and", "then?"],
    )
    assert split_conversation_id(["what", "next"]) == (None, ["what", "next"])
    from pplx_nb import ValidationError

    with pytest.raises(ValidationError, match="not a conversation ID"):
        split_conversation_id(["20250124-17377", "x"])


def test_search_opts_map_flags_to_api_fields() -> None:
    args = argparse.Namespace(
        model='"sonar"',
        effort="fast@2026-10-16.0",
        preset="low",
        domain=["docs.python.org", "-example.com"],
        recency="week",
        after="01/02/2025",
        before=None,
        academic=True,
        related=True,
        images=False,
        thinking=True,
        no_cache=True,
    )
    assert search_opts(args) == {
        "model": "sonar",
        "effort": "fast@2026-10-16.0",
        "preset": "low",
        "search_domain_filter": ["docs.python.org", "-example.com"],
        "search_recency_filter": "week",
        "search_after_date_filter": "01/02/2025",
        "search_mode": "academic",
        "return_related_questions": True,
        "show_thinking": True,
        "use_cache": False,
    }


def test_magic_line_parsing_converts_dates_and_keeps_apostrophes() -> None:
    from pplx_nb.notebook._input import parse_argstring

    args = parse_argstring(
        magics.PplxMagics.pplx,
        "-m sonar --domain docs.python.org --domain '-example.com' --recency day "
        "--after 2025-01-02 --before 03/04/2025 --no-cache -o ans what's asyncio?",
    )
    assert args.words == ["what's", "asyncio?"]
    assert args.output == "ans"
    opts = search_opts(args)
    assert opts["search_after_date_filter"] == "01/02/2025"
    assert opts["search_before_date_filter"] == "03/04/2025"
    assert opts["search_domain_filter"] == ["docs.python.org", "-example.com"]


# -- a real shell against the simulator ---------------------------------------------------------


@pytest.fixture
def shell(async_researcher: Researcher) -> Iterator[InteractiveShell]:
    with loaded_shell(async_researcher, "ans", "df", "topic", "conv") as shell:
        yield shell


def _user_messages(researcher: Researcher, cid: str) -> list[str]:
    return [m.content for m in researcher.history(cid).messages if m.role == "user"]


def test_load_ext_imports_only_the_magic_machinery() -> None:
    probe = (
        "import os, sys\n"
        "os.environ.pop('PERPLEXITY_API_KEY', None)\n"
        "os.environ.pop('PPLX_NB_OFFLINE', None)\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "before = set(sys.modules)\n"
        "shell.run_line_magic('load_ext', 'pplx_nb')\n"
        "assert 'pplx' in shell.magics_manager.magics['cell']\n"
        "print(sorted(set(sys.modules) - before))\n"
        "shell.run_cell('x = 1')\n"
        "shell.run_cell('x = 2')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    loaded, *after = out.strip().splitlines()
    for heavy in (
        "pandas",
        "ipywidgets",
        "httpx2",
        "pydantic",
        "pplx_nb.research",
        "pplx_nb._models",
        "pplx_nb._config",
    ):
        assert f"'{heavy}'" not in loaded, f"%load_ext pplx_nb imported {heavy}"
    # Loaded outside a cell, who answers is said once, as the first cell starts.
    assert after == [
        "pplx_nb loaded · answers come from the offline simulator (no PERPLEXITY_API_KEY set) · "
        "%pplx_help lists the magics"
    ]


def test_pplx_streams_into_one_display_and_returns_the_answer(
    shell: InteractiveShell, async_researcher: Researcher
) -> None:
    run = Run(shell, "%%pplx\nHow do I cancel an asyncio task?")

    answer = run.result
    assert isinstance(answer, Answer)
    assert shell.user_ns["_"] is answer
    assert answer.conversation_id is not None
    live = run.ids[0]
    streamed = [*run.ids[:-2], run.ids[-1]]
    assert live and streamed == [live] * len(streamed), "one display handle streams"
    assert run.updates[0] is False and all(run.updates[1:-2]) and run.updates[-1]
    assert run.outputs[0] == run.outputs[-1] == {"text/html": ""}, "the live area ends blank"
    assert "Searching…" in run.outputs[1]["text/markdown"]
    assert run.ids[-2] is None and run.updates[-2] is False, "the answer is its own output"
    assert run.outputs[-2] == run.last, "shown before the live area blanks: no blank flash"
    final = run.last["text/markdown"]
    assert f"`{answer.conversation_id}`" in final and "%pplx_followup" in final
    assert "](https://docs.python.org/3/library/" in final
    assert "**Sources**" in final
    assert answer.text[:40] not in run.stdout, "the answer is not shown a second time"
    assert _user_messages(async_researcher, answer.conversation_id) == [
        "How do I cancel an asyncio task?"
    ]
    assert magics.last_conversation_id() == answer.conversation_id


def test_the_clock_moves_before_the_first_byte_arrives(
    shell: InteractiveShell, settings: Settings
) -> None:
    from pplx_nb.sim import serve

    with serve(latency_ms=700) as url:
        slow = settings.model_copy(update={"base_url": url})
        with Researcher(slow, async_deep_research=True) as researcher:
            magics.set_researcher(researcher)
            run = Run(shell, "%%pplx\nHow do I cancel an asyncio task?")
    assert isinstance(run.result, Answer), run.text()
    painted = [data.get("text/markdown", "") for data in run.outputs]
    first_text = next(n for n, markdown in enumerate(painted) if "▌" in markdown)
    clocks = re.findall(r"> Searching… · (\d+\.\d) s", "\n".join(painted[:first_text]))
    assert len(clocks) >= 3, f"the cell stayed static while waiting: {painted[:first_text]}"
    assert clocks == sorted(clocks, key=float) and float(clocks[-1]) >= 0.4


def test_the_status_line_says_what_the_run_is_doing_before_the_text_comes(
    shell: InteractiveShell, settings: Settings
) -> None:
    from pplx_nb.sim import serve

    # The simulator spreads a search's events 50 ms apart: its reasoning takes ~0.5 s.
    with serve(latency_ms=2000) as url:
        slow = settings.model_copy(update={"base_url": url})
        with Researcher(slow) as researcher:
            magics.set_researcher(researcher)
            run = Run(shell, "%%pplx\nHow do I cancel an asyncio task?")
    assert isinstance(run.result, Answer), run.text()
    painted = [data.get("text/markdown", "") for data in run.outputs]
    first_text = next(n for n, markdown in enumerate(painted) if "▌" in markdown)
    told = re.findall(
        r"> ((?:Planning|Searching: |Read |Writing)[^…]*)…", "\n".join(painted[:first_text])
    )
    assert told, painted[:first_text]
    assert all(not m.endswith(".") for m in told)


def test_search_options_reach_the_simulator(shell: InteractiveShell) -> None:
    narrowed = Run(
        shell, "%%pplx --domain example.com --no-cache\nHow do I cancel an asyncio task?"
    )
    assert isinstance(narrowed.result, Answer)
    assert narrowed.result.sources == []
    assert "no document matching" in narrowed.result.text

    run = Run(shell, "%%pplx -m sonar --related --recency year --academic -o ans\nasyncio.gather")
    answer = shell.user_ns["ans"]
    assert answer is run.result
    assert answer.related_questions, "--related asks for related questions"
    assert "**Related**" in run.last["text/markdown"]


@pytest.mark.sim_sonar
@pytest.mark.parametrize(("style", "refused"), [("agent", True), ("sonar", False)])
def test_images_under_the_agent_style_are_refused_before_asking(
    shell: InteractiveShell, settings: Settings, style: str, refused: bool
) -> None:
    from pplx_nb.sim import stats

    styled = settings.model_copy(update={"api_style": style})
    with Researcher(styled, async_deep_research=True) as researcher:
        magics.set_researcher(researcher)
        before = stats(settings.base_url)["generations"]
        run = Run(shell, "%%pplx --images\nHow do I cancel an asyncio task?")
        asked = stats(settings.base_url)["generations"] - before
        plain = Run(shell, "%%pplx\nHow do I cancel an asyncio task?")
    assert isinstance(plain.result, Answer)
    assert ("PERPLEXITY_API_STYLE=sonar" in run.last.get("text/html", "")) is refused
    if refused:
        assert run.result is None and asked == 0, "refused before anything is billed"
        assert "VALIDATION_ERROR" in run.last["text/html"]
        assert "the Agent API" in run.last["text/html"] and "no images" in run.last["text/html"]
    else:
        assert isinstance(run.result, Answer) and asked == 1
        assert "**Sources**" in run.last["text/markdown"]
    assert "PERPLEXITY_API_STYLE" not in plain.text(), "no notice unless --images was asked"


@pytest.mark.sim_sonar
def test_thinking_is_kept_and_shown_collapsed(settings: Settings) -> None:
    shell = InteractiveShell.instance()
    sonar = settings.model_copy(update={"api_style": "sonar"})
    with Researcher(sonar, async_deep_research=True) as researcher:
        magics.set_researcher(researcher)
        shell.run_line_magic("load_ext", "pplx_nb")
        try:
            run = Run(shell, "%%pplx -m sonar-reasoning-pro --thinking\nWhat does gather return?")
            plain = Run(shell, "%%pplx -m sonar-reasoning-pro\nWhat does gather return?")
        finally:
            shell.run_line_magic("unload_ext", "pplx_nb")
            magics.set_researcher(None)
    assert isinstance(run.result, Answer) and run.result.thinking
    assert "<details><summary>Thinking</summary>" in run.last["text/markdown"]
    assert "<think>" not in run.result.text
    assert isinstance(plain.result, Answer) and not plain.result.thinking
    assert "Thinking" not in plain.last["text/markdown"]


def test_braces_in_cells_interpolate_names_and_leave_code_alone(
    shell: InteractiveShell, async_researcher: Researcher
) -> None:
    shell.user_ns["topic"] = "asyncio.TaskGroup"
    cell = (
        "%%pplx\n"
        "Explain {topic} with this code:\n"
        "```python\nresults = {name: await t for name, t in tasks.items()}\n"
        "print(f'{topic}')\n```\n"
        "Keep {{literal}} and {undefined_name} and {'a': 1}."
    )
    run = Run(shell, cell)
    assert run.error is None
    assert isinstance(run.result, Answer)
    (question,) = _user_messages(async_researcher, str(run.result.conversation_id))
    assert question.startswith("Explain asyncio.TaskGroup with this code:")
    assert "print(f'{topic}')" in question
    assert "{name: await t for name, t in tasks.items()}" in question
    assert "Keep {{literal}} and {undefined_name} and {'a': 1}." in question

    raw = Run(shell, "%%pplx --raw\nWhat is {topic}?")
    assert isinstance(raw.result, Answer)
    assert _user_messages(async_researcher, str(raw.result.conversation_id)) == ["What is {topic}?"]


def test_line_form_asks_too_and_apostrophes_survive(
    shell: InteractiveShell, async_researcher: Researcher
) -> None:
    run = Run(shell, "%pplx what's asyncio.Event for?")
    assert isinstance(run.result, Answer), run.stdout
    assert _user_messages(async_researcher, str(run.result.conversation_id)) == [
        "what's asyncio.Event for?"
    ]
    quoted = Run(shell, '%pplx --domain "docs.python.org" "How is asyncio.Event set?"')
    assert isinstance(quoted.result, Answer)
    assert _user_messages(async_researcher, str(quoted.result.conversation_id)) == [
        "How is asyncio.Event set?"
    ]
    helped = Run(shell, "%pplx_followup?")
    assert "continue a conversation" in helped.stdout.lower()


def test_followup_continues_the_last_conversation_of_the_kernel(
    shell: InteractiveShell, async_researcher: Researcher
) -> None:
    first = Run(shell, "%%pplx\nHow do I cancel an asyncio task?").result
    other = Run(shell, "%%pplx\nWhat is a context variable?").result
    assert isinstance(first, Answer) and isinstance(other, Answer)

    bare = Run(shell, "%pplx_followup and how do I read its value?")
    assert isinstance(bare.result, Answer), bare.stdout
    assert isinstance(bare.result, Answer)
    assert bare.result.conversation_id == other.conversation_id

    shell.user_ns["cid"] = first.conversation_id
    targeted = Run(shell, "%%pplx_followup {cid}\nAnd wait until it is done?")
    assert isinstance(targeted.result, Answer)
    assert targeted.result.conversation_id == first.conversation_id
    assert _user_messages(async_researcher, str(first.conversation_id)) == [
        "How do I cancel an asyncio task?",
        "And wait until it is done?",
    ]
    assert len(_user_messages(async_researcher, str(other.conversation_id))) == 2
    assert magics.last_conversation_id() == first.conversation_id
    assert f"`{first.conversation_id}`" in targeted.last["text/markdown"]


def test_fork_branches_and_leaves_the_original_unchanged(
    shell: InteractiveShell, async_researcher: Researcher
) -> None:
    first = Run(shell, "%%pplx\nHow do I cancel an asyncio task?").result
    assert isinstance(first, Answer)
    before = async_researcher.history(str(first.conversation_id)).message_count

    fork = Run(shell, f"%pplx_followup --fork {first.conversation_id} what about threads?").result
    assert isinstance(fork, Answer)
    assert fork.conversation_id != first.conversation_id
    assert async_researcher.history(str(first.conversation_id)).message_count == before
    child = async_researcher.history(str(fork.conversation_id))
    assert child.parent_conversation_id == first.conversation_id
    assert magics.last_conversation_id() == fork.conversation_id


def test_research_is_queued_then_wait_shows_the_report(
    shell: InteractiveShell, settings: Settings
) -> None:
    from pplx_nb.sim import serve

    with serve(latency_ms=0, deep_research_seconds=3) as url:
        slow = settings.model_copy(update={"base_url": url})
        with Researcher(slow, async_deep_research=True) as researcher:
            magics.set_researcher(researcher)
            queued = Run(shell, "%%pplx_research -o job\nCompare asyncio.gather and TaskGroup")
            status = queued.result
            assert isinstance(status, JobStatus)
            assert shell.user_ns["job"] is status
            assert status.status == "pending"
            assert f"%pplx_wait {status.conversation_id}" in queued.last["text/markdown"]

            busy = Run(shell, "%pplx_followup and what else?")
            assert busy.result is None and busy.error is None
            assert "JOB_IN_PROGRESS" in busy.last["text/html"], busy.text()

            waited = Run(shell, "%pplx_wait --timeout 60")
            final = researcher.status(status.conversation_id)
    report = waited.result
    assert isinstance(report, Answer)
    assert report.conversation_id == status.conversation_id
    assert '<progress value="' in waited.outputs[1]["text/html"]
    assert "](https://docs.python.org/" in waited.last["text/markdown"]
    assert final is not None and final.status == "completed"


def test_research_wait_blocks_with_a_progress_bar(shell: InteractiveShell) -> None:
    run = Run(shell, "%%pplx_research --wait\nHow does asyncio schedule callbacks?")
    assert isinstance(run.result, Answer), run.text()
    bars = [
        data for data in run.outputs if "text/html" in data and "<progress" in data["text/html"]
    ]
    assert bars, "a progress bar is shown while waiting"
    assert "%pplx_followup --research" in run.last["text/markdown"]
    assert run.outputs[0]["text/plain"].startswith("Estimated cost: about $")
    assert len({*run.ids[1:-2], run.ids[-1]}) == 1 and run.ids[-2] is None


def test_followup_in_research_mode_queues_a_job_on_the_same_conversation(
    shell: InteractiveShell,
) -> None:
    first = Run(shell, "%%pplx\nHow do I cancel an asyncio task?").result
    assert isinstance(first, Answer)
    job = Run(shell, "%pplx_followup --research dig into cancellation scopes").result
    assert isinstance(job, JobStatus)
    assert job.conversation_id == first.conversation_id
    shell.user_ns["first"] = first
    done = Run(shell, "%pplx_wait {first.conversation_id}").result
    assert isinstance(done, Answer), "line-magic IDs take {name.attr} fields"
    assert done.conversation_id == first.conversation_id


def test_jobs_watch_shows_each_unfinished_job(shell: InteractiveShell) -> None:
    status = Run(shell, "%%pplx_research\nHow does asyncio schedule callbacks?").result
    assert isinstance(status, JobStatus)
    watched = Run(shell, "%pplx_jobs --watch -o df")
    frame = shell.user_ns["df"]
    assert list(frame["conversation_id"]) == [status.conversation_id]
    if frame["status"][0] in ("pending", "in_progress"):
        assert f"Research job** `{status.conversation_id}`" in watched.outputs[0]["text/markdown"]
    Run(shell, "%pplx_wait --timeout 60")
    assert len(Run(shell, "%pplx_jobs --watch").outputs) == 0, "finished jobs are not watched"


def test_wait_timeout_is_a_styled_error(shell: InteractiveShell) -> None:
    status = Run(shell, "%%pplx_research\nCompare asyncio.gather and asyncio.TaskGroup").result
    assert isinstance(status, JobStatus)
    run = Run(shell, f"%pplx_wait {status.conversation_id} --timeout 0.01")
    assert run.error is None and run.result is None
    assert "TIMEOUT_ERROR" in run.last["text/html"]
    Run(shell, f"%pplx_wait {status.conversation_id} --timeout 60")


def test_history_conversations_jobs_and_export(
    shell: InteractiveShell, async_researcher: Researcher
) -> None:
    first = Run(shell, "%%pplx\nHow do I cancel an asyncio task?").result
    assert isinstance(first, Answer)
    Run(shell, "%pplx_followup and wait for it?")
    job = Run(shell, "%%pplx_research\nHow does asyncio schedule callbacks?").result
    assert isinstance(job, JobStatus)
    Run(shell, "%pplx_wait")

    history = Run(shell, f"%pplx_history {first.conversation_id}")
    assert isinstance(history.result, Conversation)
    assert "> and wait for it?" in history.last["text/markdown"]
    assert "system" not in [m.role for m in history.result.messages]

    listing = Run(shell, "%pplx_conversations").result
    assert list(listing["conversation_id"]) == [job.conversation_id, first.conversation_id]
    assert list(listing["message_count"]) == [3, 5]
    assert len(Run(shell, "%pplx_conversations --limit 1").result) == 1

    jobs = Run(shell, "%pplx_jobs").result
    assert list(jobs["conversation_id"]) == [job.conversation_id]
    assert list(jobs["status"]) == ["completed"]
    assert list(jobs["percentage"]) == [100]

    messages = Run(shell, f"%pplx_export {first.conversation_id}").result
    assert len(messages) >= 4
    Run(shell, "%pplx_export --all --level conversations -o df")
    assert len(shell.user_ns["df"]) == 2
    sources = Run(shell, f"%pplx_export {first.conversation_id} --level sources").result
    assert len(sources) > 0
    other = Run(shell, "%%pplx_research\nWhat does asyncio.shield do?").result
    assert isinstance(other, JobStatus)
    Run(shell, "%pplx_wait")
    (async_researcher.store.path(job.conversation_id) / "status.json").write_text("{not json")
    survivors = Run(shell, "%pplx_jobs").result
    assert list(survivors["conversation_id"]) == [other.conversation_id], (
        "a damaged status is skipped"
    )


def test_config_hides_the_key_and_switches_offline(
    shell: InteractiveShell, async_researcher: Researcher
) -> None:
    from conftest import TEST_KEY

    run = Run(shell, "%pplx_config")
    assert "set (hidden)" in run.last["text/html"]
    assert TEST_KEY not in run.text()

    Run(shell, "%pplx_config --offline")
    assert magics.get_researcher() is not async_researcher
    assert magics.get_researcher().settings.is_offline
    Run(shell, "%pplx_config --online")
    assert not magics.get_researcher().settings.is_offline
    magics.get_researcher().close()


def test_errors_render_as_one_line_with_code_and_next_step(shell: InteractiveShell) -> None:
    missing = Run(shell, "%pplx_followup 20000101-0000000000000 anything?")
    assert missing.error is None and missing.result is None
    assert "CONVERSATION_NOT_FOUND" in missing.last["text/html"]
    assert "Traceback" not in missing.last["text/html"]

    debug = Run(shell, "%pplx_followup --debug 20000101-0000000000000 anything?")
    assert "Traceback" in debug.last["text/html"]

    unknown = Run(shell, "%%pplx --bogus\nquestion")
    assert "VALIDATION_ERROR" in unknown.last["text/html"]
    assert "<code>%%pplx?</code> lists the options" in unknown.last["text/html"]
    level = Run(shell, "%pplx_export --level nonsense")
    assert "invalid choice: &#x27;nonsense&#x27;" in level.last["text/html"]
    assert "<code>%pplx_export?</code> lists the options" in level.last["text/html"]
    assert "%pplx?" not in level.last["text/html"], "the hint names the magic that ran"
    line = Run(shell, "%pplx_followup --recency never what next?")
    assert "<code>%pplx_followup?</code> lists the options" in line.last["text/html"]

    empty = Run(shell, "%%pplx\n   \n")
    assert "VALIDATION_ERROR" in empty.last["text/html"]

    bad_var = Run(shell, "%%pplx -o 1x\nWhat is asyncio?")
    assert "give a Python variable name" in bad_var.last["text/html"]

    magics.set_researcher(magics.get_researcher())
    no_conversation = Run(shell, "%pplx_followup what next?")
    assert "No conversation to continue" in no_conversation.last["text/html"]


def test_notebook_errors_name_magics_not_mcp_tools(
    shell: InteractiveShell, settings: Settings
) -> None:
    missing = Run(shell, "%pplx_followup 20000101-0000000000000 anything?").last
    assert "CONVERSATION_NOT_FOUND" in missing["text/html"]
    assert "<code>%pplx_conversations</code>" in missing["text/html"]
    assert "<code>%%pplx</code>" in missing["text/html"]
    assert "`" not in missing["text/html"] and "`" not in missing["text/plain"]

    from pplx_nb.sim import serve

    with serve(latency_ms=0, deep_research_seconds=3) as url:
        slow = settings.model_copy(update={"base_url": url})
        with Researcher(slow, async_deep_research=True) as researcher:
            magics.set_researcher(researcher)
            job = Run(shell, "%%pplx_research\nCompare asyncio.gather and TaskGroup").result
            assert isinstance(job, JobStatus)
            busy = Run(shell, "%pplx_followup and what else?").last
            Run(shell, "%pplx_wait --timeout 60")
    assert "JOB_IN_PROGRESS" in busy["text/html"]
    assert f"<code>%pplx_wait {job.conversation_id}</code>" in busy["text/html"]
    for shown in (missing, busy):
        text = shown["text/html"] + shown["text/plain"]
        for tool in ("perplexity_", "get_conversation_history", "in_progress"):
            assert tool not in text, f"{tool} in {text}"


OPTION_ERRORS = [
    ("%pplx_web -n 0 asyncio", "-n 0", "is not accepted; ask for 1 to 20 results"),
    ("%pplx_web --country USA asyncio", "--country USA", "two-letter ISO code"),
    ("%pplx_web --domain '' asyncio", "--domain ''", "is not a domain"),
    ("%pplx_web --domain javascript:alert(1) asyncio", "--domain javascript:alert(1)", "domain"),
    ("%%pplx --domain ''\nasyncio", "--domain ''", "is not a domain"),
    ("%%pplx -m ' '\nasyncio", "--model ' '", "is not a model name"),
    ("%%pplx_research --domain -\nasyncio", "--domain -", "is not a domain"),
    ("%%pplx_followup --domain ''\nand trio?", "--domain ''", "is not a domain"),
    ("%%pplx_followup --research --domain ''\nand trio?", "--domain ''", "is not a domain"),
    ("%pplx_conversations --limit -3", "--limit -3", "a whole number of 0 or more"),
    ("%pplx_conversations --since yesterday", "--since yesterday", "ISO 8601"),
]


@pytest.mark.parametrize(("line", "given", "hint"), OPTION_ERRORS)
def test_option_errors_name_the_magics_flags(
    shell: InteractiveShell, sim_url: str, line: str, given: str, hint: str
) -> None:
    if "followup" in line:
        Run(shell, "%pplx What is asyncio?")
    before = stats(sim_url)
    shown = Run(shell, line).last
    html, plain = shown["text/html"], shown["text/plain"]
    assert "VALIDATION_ERROR" in plain and hint in plain, plain
    assert f"<code>{escape(given)}</code>" in html, html
    for api_name in (
        "search_domain_filter",
        "max_results",
        "country=",
        "model=",
        "limit=",
        "since=",
    ):
        assert api_name not in plain, plain
    after = stats(sim_url)
    assert after["searches"] == before["searches"]
    assert after["generations"] == before["generations"]


def test_more_domains_than_accepted_name_the_flag(shell: InteractiveShell) -> None:
    many = Run(shell, "%pplx_web " + "--domain a.com " * 25 + "asyncio").last["text/plain"]
    assert "25 domains given with --domain; at most 20 are accepted" in many


def test_dates_out_of_order_are_refused_naming_both_flags(shell: InteractiveShell) -> None:
    for magic in ("%%pplx", "%%pplx_research --wait", "%%pplx_web"):
        order = Run(shell, f"{magic} --after 2025-02-01 --before 2025-01-31\nasyncio")
        assert "--after 02/01/2025 is later than --before 01/31/2025" in order.last["text/plain"]


def test_wait_refuses_a_timeout_that_is_not_above_zero(shell: InteractiveShell) -> None:
    for timeout in ("-1", "0", "nan"):
        wait = Run(shell, f"%pplx_wait --timeout {timeout}").last["text/plain"]
        assert f"argument --timeout: '{timeout}' is not a number of seconds above 0" in wait


def test_a_bad_output_name_is_refused_before_any_request(
    shell: InteractiveShell, settings: Settings
) -> None:
    from pplx_nb.sim import stats

    before = stats(settings.base_url)
    for cell in (
        "%%pplx -o 1x\nWhat is asyncio?",
        "%%pplx_research -o no-dash\nCompare asyncio and trio",
        "%pplx_followup -o 'a b' 20000101-0000000000000 and then?",
    ):
        run = Run(shell, cell)
        assert run.result is None and "give a Python variable name" in run.last["text/html"]
    after = stats(settings.base_url)
    assert after["generations"] == before["generations"]
    assert after["background_runs"] == before["background_runs"]
    assert sum(after["requests"].values()) == sum(before["requests"].values()), "no request"


def test_an_interrupted_pplx_fails_the_cell_and_is_not_continued(
    shell: InteractiveShell, settings: Settings
) -> None:
    import _thread
    import threading

    from support.interrupts import HANG_SECONDS, api_requests, sigint_raises, wait_asked

    from pplx_nb.sim import inject_faults, serve

    first = Run(shell, "%%pplx\nHow do I cancel an asyncio task?").result
    assert isinstance(first, Answer)
    with serve(latency_ms=0) as url, sigint_raises():
        # Every attempt hangs and the client outwaits the test: only the interrupt ends the cell.
        inject_faults(url, {"hang": HANG_SECONDS, "times": settings.max_retries + 1})
        patient = settings.model_copy(update={"base_url": url, "timeout_ms": HANG_SECONDS * 1000})
        with Researcher(patient, async_deep_research=True) as researcher:
            magics.set_researcher(researcher)
            before = api_requests(url)
            asked: list[AssertionError] = []

            def interrupt_once_asked() -> None:
                try:
                    wait_asked(url, before)
                except AssertionError as exc:
                    asked.append(exc)  # no interrupt: it would land in whatever runs next
                else:
                    _thread.interrupt_main()

            interrupter = threading.Thread(target=interrupt_once_asked)
            interrupter.start()
            interrupted = Run(shell, "%%pplx\nWhat does asyncio.shield do?")
            interrupter.join()
            bare = Run(shell, "%%pplx_followup\nAnd how do I cancel it anyway?")
    assert not asked, asked
    assert isinstance(interrupted.error, KeyboardInterrupt), "the cell fails: Run All stops"
    assert "INTERRUPTED" in interrupted.last["text/html"]
    shown = interrupted.stdout.strip().splitlines()
    assert shown == ["KeyboardInterrupt"], "one line, not a traceback through the magic"
    assert bare.result is None
    assert "No conversation to continue" in bare.last["text/html"]
    assert len(_user_messages(researcher, str(first.conversation_id))) == 1


def test_thinking_without_reasoning_says_why(shell: InteractiveShell) -> None:
    run = Run(shell, "%%pplx --thinking\nWhat does asyncio.gather return?")
    assert isinstance(run.result, Answer) and not run.result.thinking
    assert "NO_THINKING" in run.last["text/html"]
    assert "sonar-reasoning-pro" in run.last["text/html"]


def test_settings_changed_in_the_kernel_take_effect_for_the_next_magic(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import os

    shell = InteractiveShell.instance()
    monkeypatch.setenv("PPLX_NB_OFFLINE", "1")
    monkeypatch.setenv("PPLX_NB_SIM_LATENCY_MS", "0")
    monkeypatch.setenv("PPLX_NB_SIM_DEEP_RESEARCH_SECONDS", "0.3")
    monkeypatch.setenv("CONVERSATION_LOGS_DIR", str(tmp_path / "one"))
    magics.set_researcher(None)
    shell.run_line_magic("load_ext", "pplx_nb")
    try:
        first = Run(shell, "%%pplx_research\nHow does asyncio schedule callbacks?").result
        assert isinstance(first, JobStatus)
        Run(shell, "%pplx_wait --timeout 60")
        old = magics.get_researcher()
        Run(shell, f"%env CONVERSATION_LOGS_DIR={tmp_path / 'two'}")
        second = Run(shell, "%%pplx_research\nHow does asyncio schedule callbacks?").result
        assert isinstance(second, JobStatus)
        assert magics.last_conversation_id() == second.conversation_id
        waited = Run(shell, "%pplx_wait --timeout 60")
        assert isinstance(waited.result, Answer), waited.text()
        assert magics.get_researcher() is not old
        assert (tmp_path / "two" / second.conversation_id / "conversation.json").is_file()
        os.environ["CONVERSATION_LOGS_DIR"] = str(tmp_path / "one")
        back = Run(shell, "%pplx_followup and how is it scheduled?")
        assert "No conversation to continue" in back.last["text/html"], "a new folder"
    finally:
        shell.run_line_magic("unload_ext", "pplx_nb")
        researcher = magics.get_researcher()
        magics.set_researcher(None)
        researcher.close()


def test_wait_says_within_seconds_when_no_worker_serves_the_folder(
    shell: InteractiveShell, async_researcher: Researcher
) -> None:
    import time

    async_researcher.ensure_worker().stop()  # a worker that died: nobody will take the job
    job = Run(shell, "%%pplx_research\nHow does asyncio schedule callbacks?").result
    assert isinstance(job, JobStatus)
    started = time.monotonic()
    run = Run(shell, "%pplx_wait")
    assert time.monotonic() - started < 15
    assert "No worker serves" in run.last["text/html"], run.text()
    assert async_researcher.status(job.conversation_id).status == "pending"  # type: ignore[union-attr]


def test_pplx_help_lists_every_magic_with_an_example(shell: InteractiveShell) -> None:
    shown = Run(shell, "%pplx_help").last["text/markdown"]
    for name in shell.magics_manager.magics["line"]:
        if name.startswith("pplx"):
            assert f"%{name}`" in shown, name
    assert "answers come from the API at 127.0.0.1" in shown
    doc = Run(shell, "%%pplx?").stdout
    assert "Examples:" in doc and "%pplx_help" in doc
    assert "``" not in doc and "::" not in doc, "no reST markup in the help"


def test_question_mark_shows_the_options(shell: InteractiveShell) -> None:
    run = Run(shell, "%%pplx?")
    for option in ("--domain", "--recency", "--after", "--related", "--thinking", "-o"):
        assert option in run.stdout
    jobs = Run(shell, "%pplx_jobs?").stdout
    assert "snapshot" in jobs and "read from disk" in jobs and "--watch" in jobs


def test_file_attachments_are_passed_to_the_researcher(
    shell: InteractiveShell, settings: Settings, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("asyncio.TaskGroup cancels the remaining tasks when one fails.\n")
    outside = Run(shell, f"%%pplx --file {notes}\nSummarize my notes")
    assert "outside the allowed folders" in outside.last["text/html"]

    allowed = settings.model_copy(update={"file_roots": (tmp_path,)})
    with Researcher(allowed, async_deep_research=True) as researcher:
        magics.set_researcher(researcher)
        run = Run(shell, f"%%pplx --file {notes}\nSummarize my notes")
        assert isinstance(run.result, Answer), run.text()
        (message,) = [
            m
            for m in researcher.history(str(run.result.conversation_id)).messages
            if m.role == "user"
        ]
    assert message.files, "the attached file is recorded on the question"
    assert "TaskGroup cancels" in message.content


def test_displaying_an_answer_later_renders_it_again(shell: InteractiveShell) -> None:
    Run(shell, "%%pplx -o ans\nWhat does asyncio.sleep do?")
    again = Run(shell, "ans")
    assert any("**Sources**" in data.get("text/markdown", "") for data in again.outputs)


def test_unload_removes_the_magics(shell: InteractiveShell) -> None:
    shell.run_line_magic("unload_ext", "pplx_nb")
    assert "pplx" not in shell.magics_manager.magics["cell"]
    shell.run_line_magic("load_ext", "pplx_nb")
    assert "pplx" in shell.magics_manager.magics["cell"]


@pytest.mark.parametrize(("env", "queued"), [(None, True), ("true", True), ("false", False)])
def test_kernel_researcher_comes_from_the_environment_and_queues_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: str | None, queued: bool
) -> None:
    monkeypatch.setenv("CONVERSATION_LOGS_DIR", str(tmp_path))
    monkeypatch.setenv("PPLX_NB_OFFLINE", "1")
    if env is None:
        monkeypatch.delenv("PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH", raising=False)
    else:
        monkeypatch.setenv("PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH", env)
    magics.set_researcher(None)
    researcher = magics.get_researcher()
    try:
        assert magics.get_researcher() is researcher, "one Researcher per kernel"
        assert researcher.async_deep_research is queued
        assert Path(researcher.store.location) == tmp_path.resolve()
    finally:
        magics.set_researcher(None)
        researcher.close()


def test_per_kernel_options_are_set_with_config(shell: InteractiveShell) -> None:
    listed = Run(shell, "%config PplxMagics").stdout
    for option in ("stream_interval", "monitor_interval", "related_buttons"):
        assert option in listed
    Run(shell, "%config PplxMagics.stream_interval = 0.5")
    magic = shell.magics_manager.registry["PplxMagics"]
    assert magic.stream_interval == 0.5
    run = Run(shell, "%%pplx\nHow do I cancel an asyncio task?")
    assert isinstance(run.result, Answer)


def test_pplx_web_shows_a_table_once_stores_a_dataframe_and_saves_only_when_asked(
    shell: InteractiveShell, async_researcher: Researcher, sim_url: str
) -> None:
    import pandas as pd

    from pplx_nb.sim import stats

    run = Run(shell, "%pplx_web -n 3 --domain docs.python.org -o df asyncio TaskGroup")
    results = run.result
    assert run.error is None and isinstance(results, list) and 1 <= len(results) <= 3
    assert len(run.outputs) == 1, "shown once, not again as the cell's value"
    table = run.last["text/markdown"]
    assert "| # | title | date | snippet |" in table
    assert all(f"]({source.url})" in table for source in results)
    assert results[0].title in run.last["text/plain"]
    frame = shell.user_ns["df"]
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(results)
    assert list(frame["url"]) == [source.url for source in results]
    assert async_researcher.conversations() == []
    assert stats(sim_url)["searches"] == 1 and stats(sim_url)["generations"] == 0

    saved = Run(shell, "%%pplx_web --save\nasyncio gather")
    cid = saved.result.conversation_id
    assert cid and f"`{cid}`" in saved.last["text/markdown"]
    followup = Run(shell, "%pplx_followup which of these waits for every awaitable?")
    assert isinstance(followup.result, Answer) and followup.result.conversation_id == cid

    refused = Run(shell, "%pplx_web -n 50 asyncio")
    assert refused.result is None and "VALIDATION_ERROR" in refused.last["text/html"]
    assert stats(sim_url)["searches"] == 2


def test_pplx_cancel_stops_the_last_research_with_one_line_and_followups_go_on(
    shell: InteractiveShell, settings: Settings
) -> None:
    from pplx_nb.sim import serve, stats

    with serve(latency_ms=0, deep_research_seconds=60) as url:
        slow = settings.model_copy(update={"base_url": url})
        with Researcher(slow, async_deep_research=True) as researcher:
            magics.set_researcher(researcher)
            queued = Run(shell, "%%pplx_research\nCompare asyncio.gather and TaskGroup")
            cid = queued.result.conversation_id
            cancelled = Run(shell, "%pplx_cancel -o stopped")
            assert cancelled.error is None and len(cancelled.outputs) == 1
            line = cancelled.last["text/plain"]
            assert f"conversation {cid} is cancelled" in line and "%pplx_followup" in line
            status = shell.user_ns.pop("stopped")
            assert isinstance(status, JobStatus) and status.status == "cancelled"
            followup = Run(shell, "%pplx_followup what does asyncio.Task.cancel do?")
            assert isinstance(followup.result, Answer) and followup.result.text
            ended = Run(shell, f"%pplx_cancel {cid}")
            again = ended.last["text/plain"]
            assert f"conversation {cid} was already cancelled at " in again
            assert "nothing was sent" in again and "stop" not in again
            assert icon("cancelled") not in ended.last["text/html"]
            waited = Run(shell, f"%pplx_wait {cid}")
            assert waited.error is None and waited.result is None
            said = waited.last["text/plain"]
            assert f"conversation {cid} was cancelled at " in said and "no report" in said
            assert "PPLX_ERROR" not in said and icon("warning") not in waited.last["text/html"]
            none = Run(shell, "%pplx_cancel 20250124-1706102400123")
            assert "CONVERSATION_NOT_FOUND" in none.last["text/html"]
            # Every run started was cancelled (by the magic, or by the worker if the run's id
            # was not recorded yet when the magic ran).
            deadline = time.monotonic() + 30
            while (billed := stats(url))["cancels"] != billed["background_runs"]:
                assert time.monotonic() < deadline, billed
                time.sleep(0.1)
    assert billed["background_runs"] <= 1


# -- one voice for refusals ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "line", ["%pplx_cancel 2025-01-24", "%pplx_wait 20250124-17", "%pplx_followup 20250124-17 x?"]
)
def test_a_bad_id_is_refused_in_the_same_words_by_every_magic(
    shell: InteractiveShell, line: str
) -> None:
    run = Run(shell, line)
    assert run.error is None and run.result is None
    html = run.last["text/html"]
    assert "is not a conversation ID: IDs look like 20250124-1737734400000" in html
    assert "(<code>%pplx_conversations</code> lists them)" in html
    assert "Invalid conversation id" not in html


@pytest.mark.parametrize("cell", ["%%pplx", "%%pplx\n", "%%pplx_research --wait", "%%pplx_web"])
def test_an_empty_cell_is_refused_in_the_error_box(shell: InteractiveShell, cell: str) -> None:
    run = Run(shell, cell)
    assert run.error is None, "no bare UsageError"
    assert "VALIDATION_ERROR" in run.last["text/html"]
    assert "No question: write it in the cell below the magic" in run.last["text/html"]


def test_a_cell_magic_with_its_question_on_the_line_and_no_cell_asks_it(
    shell: InteractiveShell,
) -> None:
    run = Run(shell, "%%pplx How do I cancel an asyncio task?")
    assert isinstance(run.result, Answer) and run.result.text
    assert Run(shell, "%%pplx?").error is None, "the help is left alone"


def test_a_question_too_long_says_how_to_attach_it_and_nothing_is_asked(
    shell: InteractiveShell, sim_url: str
) -> None:
    before = stats(sim_url)
    run = Run(shell, "%%pplx\n" + "word " * 400_000)
    html = run.last["text/html"]
    assert "VALIDATION_ERROR" in html and "the limit is 32,000" in html
    assert "attach it with <code>--file PATH</code>" in html
    assert "<code>%%pplx --file notes.md</code>" in html
    web = Run(shell, "%%pplx_web\n" + "word " * 10_000)
    assert "Shorten it." in web.last["text/html"] and "--file" not in web.last["text/html"]
    assert stats(sim_url) == before


# -- housekeeping -------------------------------------------------------------------------------


def test_a_simulator_knob_changed_after_the_first_magic_is_said_to_need_a_new_kernel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = {"PPLX_NB_OFFLINE": "1", "PPLX_NB_SIM_LATENCY_MS": "0", "CONVERSATION_LOGS_DIR": tmp_path}
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    magics.set_researcher(None)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "pplx_nb")
    try:
        Run(shell, "%pplx_conversations")
        first = magics.get_researcher()
        Run(shell, "%env PPLX_NB_SIM_LATENCY_MS=2000")
        told = Run(shell, "%pplx_conversations")
        again = Run(shell, "%pplx_conversations")
        assert magics.get_researcher() is first, "nothing to rebuild: the simulator keeps its pace"
        assert first.settings.sim_latency_ms == 0
        Run(shell, "%env PPLX_NB_SIM_LATENCY_MS=0")
        back = Run(shell, "%pplx_conversations")
    finally:
        shell.run_line_magic("unload_ext", "pplx_nb")
        researcher = magics.get_researcher()
        magics.set_researcher(None)
        researcher.close()
    notice = told.outputs[0]["text/html"]
    assert "SIMULATOR_RUNNING" in notice
    assert "<code>PPLX_NB_SIM_LATENCY_MS=2000</code> takes effect only in a new kernel" in notice
    assert "runs with PPLX_NB_SIM_LATENCY_MS=0" in notice
    assert "SIMULATOR_RUNNING" not in again.text() + back.text(), "said once"


def test_conversation_logs_next_to_the_notebooks_are_ignored_by_git() -> None:
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    paths = [
        "notebooks/conversation-logs/20250124-1737734400000/conversation.json",
        "conversation-logs/20250124-1737734400000/conversation.json",
    ]
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *paths],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ignored.stdout.split() == paths
    kept = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", "conversation-logs/.gitkeep"],
        cwd=root,
        check=False,
    )
    assert kept.returncode == 1, "the folder's placeholder stays tracked"
