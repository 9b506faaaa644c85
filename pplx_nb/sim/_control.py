"""Client helpers for a running simulator's control endpoints (work across processes)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

__all__ = ["inject_faults", "reset", "stats"]


# The simulator is always local: never route control calls through an environment proxy.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _call(base_url: str, method: str, path: str, payload: Any = None) -> Any:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        base_url.rstrip("/") + path,
        data=data,
        method=method,
        headers={"content-type": "application/json"},
    )
    with _opener.open(request, timeout=10) as response:
        return json.loads(response.read())


def inject_faults(base_url: str, *faults: dict[str, Any]) -> None:
    """Queue faults on the simulator at ``base_url``; matching API requests consume them in order.

    Keys: ``status``, ``retry_after``, ``retry_after_ms``, ``html``, ``hang``, ``trickle``,
    ``disconnect_after``, ``agent_failed``, ``requires_action``, ``skill_loaded`` (a skill name),
    ``unsearched``, ``cost`` (the total cost in USD an Agent run reports, and is billed),
    ``odd``, ``headers`` (added to the reply), ``path`` (substring filter),
    ``times`` (default 1).
    A single request can also carry one fault as JSON in its ``X-Sim-Fault`` header.
    """
    _call(base_url, "POST", "/_sim/faults", {"faults": list(faults)})


def reset(base_url: str) -> None:
    """Clear the simulator's queued faults and counters."""
    _call(base_url, "POST", "/_sim/reset", {})


def stats(base_url: str) -> dict[str, Any]:
    """What a server has done since it started (or was reset), to count money in tests.

    ``requests`` per route template (``"POST /v1/agent"``), ``generations`` (answers started
    that would be billed, a cancelled run included), ``background_runs``, ``cancels`` (runs a
    cancel was accepted for), ``searches`` (Search API requests, billed per request) and
    ``billed_usd``: the total of the costs the server reported for what it billed (a run
    cancelled before it finished reports none and is not counted), to compare with a budget.
    """
    result: dict[str, Any] = _call(base_url, "GET", "/_sim/stats")
    return result
