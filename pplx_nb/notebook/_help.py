"""``%pplx_help`` and the line ``%load_ext pplx_nb`` shows: the magics and who answers."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pplx_nb._config import Settings
    from pplx_nb.notebook.display import Bundle

__all__ = ["MAGICS", "backend", "help_bundle", "loaded_bundle"]

MAGICS: tuple[tuple[str, str, str], ...] = (
    ("%%pplx", "ask with web search; starts a new conversation", "%%pplx --related"),
    (
        "%%pplx_research",
        "deep research, queued in the background with a live monitor",
        "%%pplx_research -o job",
    ),
    (
        "%pplx_followup",
        "continue the last (or a given) conversation; --fork branches, --research digs deeper",
        "%pplx_followup how do I wait for it?",
    ),
    (
        "%%pplx_web",
        "ranked web results as a table, no answer (Search API); -o VAR for a DataFrame",
        "%pplx_web -n 5 asyncio TaskGroup",
    ),
    ("%pplx_wait", "block until a research job ends and show its report", "%pplx_wait"),
    (
        "%pplx_cancel",
        "cancel a queued or running research job, and its run at the API",
        "%pplx_cancel",
    ),
    (
        "%pplx_retry",
        "ask an unanswered research question again (a new, paid run)",
        "%pplx_retry",
    ),
    ("%pplx_jobs", "the research jobs as a table; --watch adds live monitors", "%pplx_jobs"),
    ("%pplx_history", "a stored conversation, turn by turn", "%pplx_history"),
    ("%pplx_conversations", "every stored conversation as a DataFrame", "%pplx_conversations"),
    (
        "%pplx_export",
        "messages, conversations or sources as a DataFrame",
        "%pplx_export --all --level sources -o df",
    ),
    ("%pplx_config", "the settings in use; --offline / --online switch", "%pplx_config"),
    ("%pplx_help", "this list", "%pplx_help"),
)
"""Each magic, what it does, and an example line."""


def backend(settings: Settings) -> str:
    """Who answers, in a few words: the simulator (and why) or the API at its address."""
    if settings.is_offline:
        why = "no PERPLEXITY_API_KEY set" if settings.offline is None else "PPLX_NB_OFFLINE=1"
        return f"the offline simulator ({why})"
    if settings.base_url.rstrip("/") == "https://api.perplexity.ai":
        return "the Perplexity API"
    from urllib.parse import urlsplit

    return f"the API at {urlsplit(settings.base_url).hostname}"


def loaded_bundle() -> Bundle:
    """One line for ``%load_ext pplx_nb``: who answers and how to see the magics."""
    from pplx_nb._config import Settings

    who = backend(Settings.from_env())
    return {
        "text/markdown": f"<sub>pplx_nb loaded · answers come from {html.escape(who)} · "
        "`%pplx_help` lists the magics</sub>",
        "text/plain": f"pplx_nb loaded · answers come from {who} · %pplx_help lists the magics",
    }


def help_bundle(settings: Settings) -> Bundle:
    """Every magic with what it does and an example; ``%magic?`` for its options."""
    rows = "\n".join(f"| `{name}` | {what} | `{example}` |" for name, what, example in MAGICS)
    markdown = (
        "**pplx_nb magics** · answers come from "
        f"{html.escape(backend(settings))}\n\n"
        f"| magic | does | example |\n|---|---|---|\n{rows}\n\n"
        "A cell magic takes the question in the cell below it; `{name}` in a question is "
        "replaced by the variable's value. `%%pplx?` (any magic with `?`) lists its options; "
        "`-o VAR` stores a result, `--debug` shows an error's traceback."
    )
    width = max(len(name) for name, _, _ in MAGICS)
    plain = "\n".join(
        [f"pplx_nb magics · answers come from {backend(settings)}", ""]
        + [f"{name:<{width}}  {what}\n{'':<{width}}  e.g. {ex}" for name, what, ex in MAGICS]
        + ["", "%%pplx? (any magic with ?) lists its options."]
    )
    return {"text/markdown": markdown, "text/plain": plain}
