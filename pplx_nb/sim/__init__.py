"""An offline Perplexity-compatible server: both protocols, answered from a local corpus.

Run it with ``python -m pplx_nb.sim`` or in-process::

    from pplx_nb.sim import serve, inject_faults

    with serve(latency_ms=0) as url:
        inject_faults(url, {"status": 429, "retry_after": 1})
        ...

By default it answers from the Python documentation shipped with the interpreter, ranked with
BM25 over the last user message; every answer says it comes from the offline simulator.
"""

from __future__ import annotations

from pplx_nb.sim._control import inject_faults, reset, stats
from pplx_nb.sim._server import serve, shared_server_url

__all__ = ["inject_faults", "reset", "serve", "shared_server_url", "stats"]
