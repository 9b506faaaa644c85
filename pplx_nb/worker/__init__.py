"""``python -m pplx_nb.worker``: the deep-research worker as a process.

It drains the job queue of ``CONVERSATION_LOGS_DIR`` through the research package's job runner
(``pplx_nb.research.job_runner(Researcher(settings))``). On SIGTERM or SIGINT it stops claiming,
lets running jobs finish for up to ``--drain`` seconds, releases the rest back to the queue and
exits 0. Several worker processes may share one directory.
"""

from __future__ import annotations

__all__: list[str] = []
