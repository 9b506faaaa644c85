"""What a run is doing, read from the ``response.reasoning.*`` events of its stream.

The Agent API narrates a run as it goes: the queries it searches (``search_queries``), the results
those bring back (``search_results``), the pages it reads in full (``fetch_url_queries``), then
the answer's text; ``response.skill.loaded`` names a skill it loaded (instructions it reads on
demand). :class:`ActivityLog` folds those events into an :class:`Activity`, the stage
the run is at with running totals, which the research layer turns into progress.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel

from pplx_nb.api._adapter import read_wire

__all__ = ["SKILL_EVENTS", "Activity", "ActivityLog", "Stage"]

Stage = Literal["planning", "searching", "reading", "fetching", "skill", "writing"]
SKILL_EVENTS = frozenset({"response.skill.loaded", "response.skill_loaded"})
"""The event of a loaded skill, as the SDK spells it, and as it is also written."""


@dataclass(frozen=True, slots=True)
class Activity:
    """Where a run is: its stage and what it has done so far (totals since it started).

    ``query`` is the latest search query, when the API names it; ``skill`` the skill loaded
    last; ``chars`` how much answer text has been written.
    """

    stage: Stage
    queries: int = 0
    results: int = 0
    urls: int = 0
    query: str | None = None
    chars: int = 0
    skill: str | None = None


class _Skill(BaseModel):
    name: str | None = None


class _Reasoning(BaseModel):
    queries: list[Any] | None = None
    results: list[Any] | None = None
    urls: list[Any] | None = None


class ActivityLog:
    """Folds a run's events into its :class:`Activity`; :attr:`current` is ``None`` until the
    first event that says something."""

    def __init__(self) -> None:
        self.current: Activity | None = None

    def reasoning(self, kind: str, data: str) -> None:
        """Take in a ``response.reasoning.*`` event (``kind``) and its JSON ``data``.

        Search rounds of any kind (web, images) add their queries and results; events that
        carry nothing countable only mark the stage.
        """
        now = self.current or Activity("planning")
        step = kind.removeprefix("response.reasoning.")
        if step == "stopped":
            self.writing(0)
            return
        if step == "started":
            self.current = now
            return
        payload = read_wire(_Reasoning, data, "a reasoning event")
        if step.endswith("search_queries"):
            queries = [q for q in payload.queries or () if isinstance(q, str)]
            self.current = replace(
                now,
                stage="searching",
                queries=now.queries + len(queries),
                query=queries[-1] if queries else now.query,
            )
        elif step.endswith("search_results"):
            self.current = replace(
                now, stage="reading", results=now.results + len(payload.results or ())
            )
        elif step == "fetch_url_queries":
            self.current = replace(now, stage="fetching", urls=now.urls + len(payload.urls or ()))

    def skill(self, data: str) -> None:
        """Take in a skill-loaded event's JSON ``data``: the run loaded the skill it names."""
        name = read_wire(_Skill, data, "a skill event").name
        now = self.current or Activity("planning")
        self.current = replace(now, stage="skill", skill=name or now.skill)

    def writing(self, chars: int) -> None:
        """The run is writing its answer: ``chars`` more characters of it."""
        now = self.current or Activity("planning")
        if now.stage != "writing" or chars:
            self.current = replace(now, stage="writing", chars=now.chars + chars)
