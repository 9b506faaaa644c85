"""Injected faults: what a fault can do, and the queue that hands them to matching requests."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Fault", "FaultQueue", "parse_fault"]

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@dataclass(slots=True)
class Fault:
    """One fault; ``times`` counts down as matching requests consume it.

    ``disconnect_after=N`` cuts a streamed answer after N events; on a request that is not
    streamed it drops the connection before any response. ``odd`` answers in unusual but legal
    shapes (see :mod:`pplx_nb.sim._odd`). ``trickle=S`` sends a whole (not streamed) body in
    ten pieces, ``S`` seconds apart, after the headers. ``headers`` adds response headers (for
    instance rate-limit headers) to the reply, an error or not. ``requires_action`` ends an
    Agent run ``requires_action`` (waiting for a tool call's approval) with the usage of its
    research; ``skill_loaded=NAME`` has an Agent run load that skill (a
    ``response.skill.loaded`` event in its stream), as a request's ``skills`` do.
    ``unsearched`` has an Agent run answer without searching whatever its ``tool_choice`` (a
    server that ignores it). ``cost=USD`` has an Agent run report that total cost (and the
    simulator bill it), whatever it did: higher than any estimate, for budget tests.
    """

    status: int | None = None
    retry_after: float | None = None
    retry_after_ms: int | None = None
    html: bool = False
    hang: float = 0.0
    trickle: float = 0.0
    disconnect_after: int | None = None
    agent_failed: bool = False
    requires_action: bool = False
    skill_loaded: str | None = None
    unsearched: bool = False
    cost: float | None = None
    odd: bool = False
    headers: tuple[tuple[str, str], ...] = ()
    path: str | None = None
    times: int = 1

    def applies_to(self, path: str) -> bool:
        """Whether this fault targets a request for ``path``."""
        return self.path is None or self.path in path

    @property
    def error_status(self) -> int | None:
        """The HTTP error to answer with, if any (a bare Retry-After means 429)."""
        if self.status is not None:
            return self.status
        if self.html:
            return 401
        if self.retry_after is not None or self.retry_after_ms is not None:
            return 429
        return None


def _number(value: Any, key: str, kind: type[int] | type[float]) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"fault key {key!r} must be a non-negative number")
    return kind(value)


def _headers(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and _TOKEN.fullmatch(k) and isinstance(v, str | int | float)
        for k, v in value.items()
    ):
        raise ValueError("fault key 'headers' must map header names to values")
    pairs = tuple((k, str(v)) for k, v in value.items())
    if any("\r" in v or "\n" in v for _, v in pairs):
        raise ValueError("fault key 'headers' values must be single lines")
    return pairs


def parse_fault(raw: Any) -> Fault:
    """Validate one fault given as a dict (or its JSON text); raise ``ValueError`` if malformed."""
    if isinstance(raw, str | bytes):
        try:
            raw = json.loads(raw)
        except RecursionError:
            raise ValueError("a fault must be a flat JSON object, not deeply nested") from None
    if not isinstance(raw, Mapping):
        raise ValueError("a fault must be a JSON object")
    known = set(Fault.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown fault keys {unknown}; known keys: {sorted(known)}")
    status = _number(raw.get("status"), "status", int)
    if status is not None and not 100 <= status <= 599:
        raise ValueError("fault key 'status' must be an HTTP status code")
    path = raw.get("path")
    if path is not None and not isinstance(path, str):
        raise ValueError("fault key 'path' must be a string")
    times = _number(raw.get("times", 1), "times", int)
    skill = raw.get("skill_loaded")
    if skill is not None and (not isinstance(skill, str) or not skill):
        raise ValueError("fault key 'skill_loaded' must be a skill name")
    return Fault(
        status=status,
        retry_after=_number(raw.get("retry_after"), "retry_after", float),
        retry_after_ms=_number(raw.get("retry_after_ms"), "retry_after_ms", int),
        html=bool(raw.get("html", False)),
        hang=_number(raw.get("hang", 0), "hang", float),
        trickle=_number(raw.get("trickle", 0), "trickle", float),
        disconnect_after=_number(raw.get("disconnect_after"), "disconnect_after", int),
        agent_failed=bool(raw.get("agent_failed", False)),
        requires_action=bool(raw.get("requires_action", False)),
        skill_loaded=skill,
        unsearched=bool(raw.get("unsearched", False)),
        cost=_number(raw.get("cost"), "cost", float),
        odd=bool(raw.get("odd", False)),
        headers=_headers(raw.get("headers")),
        path=path,
        times=times,
    )


class FaultQueue:
    """Faults waiting for requests; each matching request consumes the first fault that fits."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []

    def __len__(self) -> int:
        return len(self._faults)

    def extend(self, faults: list[Fault]) -> None:
        """Queue faults after the ones already waiting."""
        self._faults.extend(fault for fault in faults if fault.times > 0)

    def clear(self) -> None:
        """Drop every waiting fault."""
        self._faults.clear()

    def take(self, path: str) -> Fault | None:
        """The first waiting fault for ``path``, counted as used once."""
        for position, fault in enumerate(self._faults):
            if fault.applies_to(path):
                fault.times -= 1
                if fault.times <= 0:
                    del self._faults[position]
                return fault
        return None
