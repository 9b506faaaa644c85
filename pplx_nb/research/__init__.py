"""Researcher: the one façade over the API client, the store, the job queue and context.

Notebook magics and MCP tools are thin adapters over :class:`Researcher`; it is the only place where
a question becomes an API request and an answer becomes stored turns. Async methods are the core;
each has a sync twin that runs on one background event-loop thread, so it also works inside a
running Jupyter kernel.

    r = Researcher()
    answer = r.search("How do I cancel an asyncio task?")
    more = r.followup(answer.conversation_id, "and wait for it to finish?")
    job = r.deep_research("Compare asyncio, trio and curio", wait=False)
    report = r.wait(job.conversation_id)

The package, by job: ``_researcher`` (the façade), ``_turns`` (building, checking and fitting a
question), ``_answers`` (Answer <-> stored message), ``_guard`` (an answer lands right after its
question), ``_runner`` (asking or streaming a turn, progress, metrics), ``_progress`` (how far an
answer has come: live steps, a background run's estimate), ``_deep`` (the deep-research job
runner), ``_jobs`` (the queue, the in-process worker, waiting for a job), ``_clients`` (one API
client per event loop), ``_health``.
"""

from __future__ import annotations

from pplx_nb._options import SEARCH_OPTIONS
from pplx_nb._web_results import WebResults
from pplx_nb.budget import CostEstimate, PeriodStanding
from pplx_nb.research._researcher import Researcher, job_runner
from pplx_nb.research._turns import DEEP_RESEARCH_MODEL, MAX_QUERY_CHARS, SYSTEM_PROMPT, Mode

__all__ = [
    "DEEP_RESEARCH_MODEL",
    "MAX_QUERY_CHARS",
    "SEARCH_OPTIONS",
    "SYSTEM_PROMPT",
    "CostEstimate",
    "Mode",
    "PeriodStanding",
    "Researcher",
    "WebResults",
    "job_runner",
]
