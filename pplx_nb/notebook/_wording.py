"""Error messages in a notebook's words: magics where the core names MCP tools, flags where it
names options.

The core's errors keep their class and stable code; only the text a notebook shows changes.
The store and the queue word their next steps for every surface ("start one with
`perplexity_search`"); here those steps name the magic that does the same thing. An option's
error carries its notebook wording (``--domain`` for ``search_domain_filter``, see
:mod:`pplx_nb._option_names`).
"""

from __future__ import annotations

import re

from pplx_nb._errors import ConversationNotFound, JobInProgress, PplxError
from pplx_nb._option_names import worded

__all__ = ["MAGIC_FOR_TOOL", "notebook_message"]

MAGIC_FOR_TOOL = {
    "perplexity_search": "%%pplx",
    "perplexity_deep_research": "%%pplx_research",
    "perplexity_search_followup": "%%pplx_followup",
    "perplexity_deep_research_followup": "%%pplx_followup --research",
    "get_conversation_history": "%pplx_history",
    "get_conversation_histories": "%pplx_history",
    "await_conversation_histories": "%pplx_wait",
    "list_conversations": "%pplx_conversations",
    "cancel_deep_research": "%pplx_cancel",
    "perplexity_web_search": "%%pplx_web",
}
"""Each MCP tool a message may name, and the magic that does the same in a notebook."""

_TOOL = re.compile(r"`(" + "|".join(sorted(MAGIC_FOR_TOOL, key=len, reverse=True)) + r")`")
_IN_A_NOTEBOOK = re.compile(r"\s*\(or `%%?pplx\w*` in a notebook\)")
_STATES = {"in_progress": "in progress"}


def notebook_message(error: PplxError) -> str:
    """``error``'s message with its next step worded for a notebook."""
    cid = error.details.get("conversation_id")
    if isinstance(error, ConversationNotFound) and cid:
        where = error.details.get("root")
        place = f" in {where}" if where else ""
        return (
            f"Conversation {cid} does not exist{place}. `%pplx_conversations` lists the "
            "stored ones (CONVERSATION_LOGS_DIR says where they are); `%%pplx` starts a new one."
        )
    if isinstance(error, JobInProgress) and cid and "research job" in error.message:
        state = "pending" if "pending" in error.message else "in progress"
        return (
            f"Conversation {cid} has a research job that is {state}. `%pplx_wait {cid}` "
            "waits for it to end (`%pplx_jobs` lists the jobs); then follow up."
        )
    message = _IN_A_NOTEBOOK.sub("", worded(error, "notebook"))
    message = _TOOL.sub(lambda m: f"`{MAGIC_FOR_TOOL[m.group(1)]}`", message)
    for state, words in _STATES.items():
        message = re.sub(rf"\b{state}\b", words, message)
    return message
