"""Extras: the core (MCP server, client, store, worker) runs without the notebook and Redis ones,
and a feature that needs a missing extra says which ``pip install`` line brings it.

Each check runs in a subprocess of this venv in which an import hook refuses the extras'
packages (``ImportError``, as a venv without them would): an honest test of "does not import",
and of what a user without the extra sees. ``tests/test_distribution.py`` installs the wheel
without extras into a fresh venv, the same check end to end.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.mcp import TOOLS, serve_once

from pplx_nb.sim import stats

NOTEBOOK = ("IPython", "ipywidgets", "pandas")
"""The notebook extra's packages."""
REFUSED = (*NOTEBOOK, "redis", "numpy", "traitlets", "jedi", "ipykernel", "matplotlib")
"""Blocked in the core checks: the extras and what they bring with them."""


def without(*packages: str) -> str:
    """Python source that makes importing any of ``packages`` (or a submodule) fail."""
    return textwrap.dedent(
        f"""
        import sys

        class _Refuse:
            blocked = {set(packages)!r}

            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in self.blocked:
                    raise ImportError(f"No module named {{name!r}} (not installed here)")
                return None

        sys.meta_path.insert(0, _Refuse())
        """
    )


def run_without(packages: tuple[str, ...], code: str, **env: str) -> list[str]:
    """Run ``code`` with ``packages`` refused; its printed lines."""
    done = subprocess.run(
        [sys.executable, "-c", without(*packages) + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_mcp_server_serves_without_the_notebook_or_redis_extras(tmp_path: Path) -> None:
    script = tmp_path / "pplx-nb-mcp"
    imported = tmp_path / "modules.json"
    script.write_text(
        f"#!{sys.executable}\n"
        + without(*REFUSED)
        + textwrap.dedent(
            f"""
            import atexit, json, runpy

            atexit.register(
                lambda: open({str(imported)!r}, "w").write(json.dumps(sorted(sys.modules)))
            )
            runpy.run_module("pplx_nb.mcp", run_name="__main__")
            """
        )
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)

    initialized, listed, searched = serve_once(script, tmp_path)

    assert initialized["result"]["serverInfo"]["name"] == "pplx_nb"
    assert {tool["name"] for tool in listed["result"]["tools"]} == TOOLS
    assert searched["result"].get("isError") is not True, searched
    modules = json.loads(imported.read_text())
    assert "pplx_nb.mcp.server" in modules and "pplx_nb.research" in modules
    found = [name for name in modules if name.partition(".")[0] in REFUSED]
    assert found == []


def test_the_client_store_and_export_to_json_need_no_extra(tmp_path: Path) -> None:
    lines = run_without(
        REFUSED,
        """
        from pplx_nb import Researcher, Settings
        from pplx_nb.export import to_json, to_markdown

        researcher = Researcher(Settings(offline=True, sim_latency_ms=0))
        answer = researcher.search("What is a coroutine?")
        conversation = researcher.history(answer.conversation_id)
        print("coroutine" in to_json(conversation) and "coroutine" in to_markdown(conversation))
        researcher.close()
        """,
        CONVERSATION_LOGS_DIR=str(tmp_path / "logs"),
    )
    assert lines[-1] == "True"


def test_load_ext_without_the_notebook_extra_names_the_pip_line() -> None:
    lines = run_without(
        ("ipywidgets", "pandas"),
        """
        from IPython.core.interactiveshell import InteractiveShell

        from pplx_nb import MissingExtra

        shell = InteractiveShell.instance()
        try:
            shell.run_line_magic("load_ext", "pplx_nb")
        except MissingExtra as exc:
            print(exc.code, isinstance(exc, ImportError))
            print(exc)
        print("pplx" in shell.magics_manager.magics["cell"])
        """,
    )
    assert lines[0] == "MISSING_EXTRA True"
    assert lines[1].startswith("%load_ext pplx_nb needs ipywidgets and pandas")
    assert "`pip install 'pplx_nb[notebook]'`" in lines[1]
    assert lines[2] == "False"


def test_to_dataframe_without_pandas_names_the_pip_line() -> None:
    lines = run_without(
        NOTEBOOK,
        """
        from pplx_nb import MissingExtra
        from pplx_nb.export import to_dataframe

        try:
            to_dataframe([])
        except MissingExtra as exc:
            print(exc)
        """,
    )
    assert lines == [
        "to_dataframe() needs pandas, from pplx_nb's notebook extra: install it with "
        "`pip install 'pplx_nb[notebook]'` (into the environment this Python runs in), then "
        "start again."
    ]


@pytest.mark.parametrize("surface", ["python", "mcp"])
def test_a_redis_store_without_the_redis_extra_stops_before_anything_is_paid(
    sim_url: str, tmp_path: Path, surface: str
) -> None:
    ask = {
        "python": """
            from pplx_nb import MissingExtra, Researcher
            try:
                Researcher().search("What is a coroutine?")
            except MissingExtra as exc:
                print(exc.code, exc)
            """,
        "mcp": """
            import anyio
            from pplx_nb.mcp import create_server

            async def main() -> None:
                server = create_server()
                result = await server.call_tool("perplexity_search", {"query": "What is it?"})
                print(result.content[0].text)

            anyio.run(main)
            """,
    }[surface]
    lines = run_without(
        ("redis",),
        ask,
        PERPLEXITY_API_KEY="pplx-extras-test-key",
        PERPLEXITY_BASE_URL=sim_url,
        PPLX_NB_STORE="redis://127.0.0.1:6379/0",
        CONVERSATION_LOGS_DIR=str(tmp_path / "logs"),
    )
    shown = "\n".join(lines)
    assert "MISSING_EXTRA" in shown and "PPLX_NB_STORE=redis://… needs redis" in shown
    assert "`pip install 'pplx_nb[redis]'`" in shown
    assert stats(sim_url)["generations"] == 0
    assert not (tmp_path / "logs").exists()


def test_citations_need_no_extra_and_a_report_names_the_pip_line(tmp_path: Path) -> None:
    lines = run_without(
        (*REFUSED, "citeproc", "mistune"),
        f"""
        from pplx_nb import MissingExtra, cite
        from pplx_nb._models import Answer, Message, Source
        from pplx_nb.backends import open_store

        source = Source(url="https://docs.python.org/3/library/asyncio.html", title="asyncio")
        print(Answer(text="See [1].", sources=[source]).to_bibtex().splitlines()[0])
        store = open_store(root={str(tmp_path / "logs")!r})
        made = store.create([Message(role="user", content="q"),
                             Message(role="assistant", content="a [1]", sources=[source])])
        try:
            cite.to_report(store, [made.conversation_id], {str(tmp_path / "r.md")!r})
        except MissingExtra as exc:
            print(exc)
        """,
    )
    assert lines[0] == "@online{pythonndasyncio-jla,"
    assert "pip install 'pplx_nb[notebook]'" in lines[1] and "citeproc" in lines[1]
    assert not (tmp_path / "r.md").exists()
