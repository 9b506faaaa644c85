"""An offline Perplexity-compatible server answering as the live API does, from a local corpus.

Run it with ``python -m pplx_nb.sim`` or in-process::

    from pplx_nb.sim import serve, inject_faults, stats

    with serve(latency_ms=0) as url:
        inject_faults(url, {"status": 429, "retry_after": 1})
        ...
        assert stats(url)["generations"] == 1

It serves the Agent API (plain, streamed, background, retrieve, cancel), the Search API and the
model list; the retired Sonar chat completions answer 403 unless ``serve(sonar=True)`` (or
``--sonar``) asks for them. By default it answers from the Python 3.11 documentation frozen into
the package (the same answers on every Python), ranked with BM25 over the last user message;
every answer says it comes from the offline simulator.
"""

from __future__ import annotations

from pplx_nb.sim._control import inject_faults, reset, stats
from pplx_nb.sim._server import serve, shared_server_url

__all__ = ["inject_faults", "reset", "serve", "shared_server_url", "stats"]
