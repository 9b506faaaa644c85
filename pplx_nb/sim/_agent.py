"""Agent API requests (``/v1/agent``, ``/v1/responses``), checked as strictly as the live API.

Every field the SDK defines is accepted; any other field, at the top or inside a web_search tool,
is the live API's 400 ``unknown field``; a ``tool_choice`` it refuses is a 400 too, and
``tool_choice: "none"`` answers without searching. The engine is ``models`` (first of a fallback
chain), else ``model``, else ``effort``, else ``preset``; a preset or effort level still sets how
deep the run goes when a model is named beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pplx_nb.sim._answers import Filters, asks_for_related, count_tokens, is_deep
from pplx_nb.sim._catalog import MODELS, PRESETS
from pplx_nb.sim._validate import (
    Invalid,
    check_choice,
    check_fields,
    check_filters,
    check_number,
    message_text,
)

__all__ = ["AgentRequest", "parse_agent"]

FIELDS = frozenset(
    {
        "input",
        "instructions",
        "model",
        "models",
        "preset",
        "effort",
        "tools",
        "tool_choice",
        "max_output_tokens",
        "max_steps",
        "temperature",
        "top_p",
        "stream",
        "reasoning",
        "response_format",
        "background",
        "store",
        "previous_response_id",
        "prompt_cache_key",
        "service_tier",
        "language_preference",
        "profile",
        "skills",
        "step_budget_reminder",
        "metadata",
    }
)
_WEB_SEARCH = frozenset(
    {
        "type",
        "filters",
        "max_tokens",
        "max_tokens_per_page",
        "search_context_size",
        "search_type",
        "user_location",
    }
)
_FILTERS = frozenset(
    {
        "search_domain_filter",
        "search_recency_filter",
        "search_after_date_filter",
        "search_before_date_filter",
        "last_updated_after_filter",
        "last_updated_before_filter",
    }
)
_ROLES = ("user", "assistant", "system", "developer")
_TOOLS = (
    "web_search",
    "fetch_url",
    "image_search",
    "people_search",
    "finance_search",
    "sandbox",
    "mcp",
    "function",
    "connector",
)


@dataclass(frozen=True, slots=True)
class AgentRequest:
    """A validated Agent API request: what its answer and its response object depend on."""

    model: str
    tier: str
    query: str
    prompt: str
    stream: bool
    background: bool
    store: bool
    max_output_tokens: int | None
    related_in_text: bool
    filters: Filters
    input_tokens: int
    preset: str | None = None
    effort: str | None = None
    skills: tuple[str, ...] = ()
    """The names of the skills it asked for: the run loads each one."""
    searches: bool = True
    """Whether the run searches: not when ``tool_choice`` rules the search out."""
    cost: float | None = None
    """The total cost (USD) its usage reports instead of the priced one (a fault)."""

    @property
    def deep(self) -> bool:
        """Whether this is a deep-research run."""
        return is_deep(self.tier)


def _input_turns(value: Any) -> list[tuple[str, str]]:
    if isinstance(value, str):
        if not value.strip():
            raise Invalid("input must not be empty", "input")
        return [("user", value)]
    if not isinstance(value, list) or not value:
        raise Invalid("input must be a string or a non-empty list of messages", "input")
    turns = []
    for n, item in enumerate(value):
        if not isinstance(item, dict) or item.get("role") not in _ROLES:
            raise Invalid(f"input[{n}].role must be one of {', '.join(_ROLES)}", "input")
        turns.append((item["role"], message_text(item.get("content"), f"input[{n}]")))
    users = [text for role, text in turns if role == "user"]
    if not users or not users[-1].strip():
        raise Invalid("input must contain a non-empty user message", "input")
    return turns


def _tool_filters(tools: Any) -> tuple[str, ...]:
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise Invalid("tools must be a list", "tools")
    domains: tuple[str, ...] = ()
    for n, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") not in _TOOLS:
            raise Invalid(f"tools[{n}].type must be one of {', '.join(_TOOLS)}", "tools")
        if tool["type"] != "web_search":
            continue
        check_fields(tool, _WEB_SEARCH)
        check_choice(tool, "search_context_size", ("low", "medium", "high"))
        check_choice(tool, "search_type", ("web", "fast"))
        filters = tool.get("filters")
        if filters is not None:
            if not isinstance(filters, dict):
                raise Invalid(f"tools[{n}].filters must be an object", "tools")
            check_fields(filters, _FILTERS)
            domains += check_filters(filters)
    return domains


def _skill_names(skills: Any) -> tuple[str, ...]:
    if skills is None:
        return ()
    if not isinstance(skills, list):
        raise Invalid("skills must be a list", "skills")
    names = []
    for n, skill in enumerate(skills):
        if (
            not isinstance(skill, dict)
            or skill.get("type") not in ("builtin", "inline")
            or not isinstance(skill.get("name"), str)
            or not skill["name"]
        ):
            raise Invalid(f"skills[{n}] must be a builtin or inline skill with a name", "skills")
        names.append(skill["name"])
    return tuple(names)


_CHOICES = ("none", "auto", "required")


def _searches(choice: Any, tools: Any, tiered: bool) -> bool:
    """Whether a run with this ``tool_choice`` searches; a 400 for a choice the API refuses:
    not one of none, auto, required or an object naming a tool type, or one that requires a
    tool the request does not have (an effort or preset brings its own tools)."""
    if choice is None or choice == "auto":
        return True
    named = choice.get("type") if isinstance(choice, dict) else None
    if choice not in _CHOICES and named not in _TOOLS:
        raise Invalid(
            f"tool_choice must be one of {', '.join(_CHOICES)} or an object naming a tool type "
            f"({', '.join(_TOOLS)}); got {choice!r}",
            "tool_choice",
        )
    if named == "function" and not isinstance(choice.get("name"), str):
        raise Invalid("tool_choice of type function needs the function's name", "tool_choice")
    if choice == "none":
        return False
    kinds = {t.get("type") for t in tools or () if isinstance(t, dict)}
    if not kinds and not tiered:
        raise Invalid(
            f"tool_choice {choice!r} requires a tool, and the request has none: add tools "
            "(such as web_search) or use an effort",
            "tool_choice",
        )
    if named is not None and kinds and named not in kinds:
        raise Invalid(f"tool_choice names {named!r}, which is not in tools", "tool_choice")
    return named in (None, "web_search")


def _known_model(name: Any, param: str) -> str:
    if not isinstance(name, str) or name not in MODELS:
        raise Invalid(
            f"invalid model {name!r}: use a model that GET /v1/models lists, such as "
            "'perplexity/sonar', or a preset",
            param,
            "invalid_model",
        )
    return name


_EFFORTS = ("fast", "low", "medium", "high", "xhigh")
_PINNED = re.compile(r"(?P<tier>[a-z-]+)@[0-9A-Za-z][0-9A-Za-z.\-]*")


def _tier_name(data: dict[str, Any], key: str) -> str | None:
    """``data[key]`` when it names a tier: an effort level (``effort``; also any preset name
    for ``preset``), as given or pinned to a version (``fast@2026-10-16.0``)."""
    value = data.get(key)
    if value is None:
        return None
    pinned = _PINNED.fullmatch(value) if isinstance(value, str) else None
    tier = pinned["tier"] if pinned else value
    known = _EFFORTS if key == "effort" else tuple(PRESETS)
    if not isinstance(tier, str) or tier not in known:
        raise Invalid(
            f"unknown {key} {value!r}; use one of {', '.join(known)}, optionally pinned to a "
            "version (fast@2026-10-16.0)",
            key,
        )
    return str(value)


def _engine(data: dict[str, Any]) -> tuple[str, str]:
    """The model that answers and the tier that sets the run's depth."""
    models = data.get("models")
    if models is not None and (not isinstance(models, list) or not 1 <= len(models) <= 5):
        raise Invalid("models must be a list of 1 to 5 models", "models")
    chain = [_known_model(name, "models") for name in models or ()]
    model = _known_model(data["model"], "model") if data.get("model") is not None else None
    preset, effort = _tier_name(data, "preset"), _tier_name(data, "effort")
    tier = effort or preset
    named = chain[0] if chain else model
    if named is None and tier is None:
        raise Invalid("one of model, models, preset or effort is required", "model")
    resolved = named or PRESETS[str(tier).partition("@")[0]]
    return resolved, (tier or resolved).partition("@")[0]


def parse_agent(data: dict[str, Any]) -> AgentRequest:
    """Validate an Agent API body strictly: an unknown field is a 400."""
    check_fields(data, FIELDS)
    model, tier = _engine(data)
    turns = _input_turns(data.get("input"))
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise Invalid("instructions must be a string", "instructions")
    check_number(data, "temperature", 0, 2)
    check_number(data, "top_p", 0, 1)
    check_number(data, "max_output_tokens", 1, 128_000, integer=True)
    check_number(data, "max_steps", 1, 100, integer=True)
    reasoning = data.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise Invalid("reasoning must be an object", "reasoning")
        check_choice(reasoning, "effort", ("minimal", "low", "medium", "high", "xhigh"))
    for flag in ("stream", "background", "store"):
        if data.get(flag) is not None and not isinstance(data[flag], bool):
            raise Invalid(f"{flag} must be a boolean", flag)
    domains = _tool_filters(data.get("tools"))
    tiered = data.get("effort") is not None or data.get("preset") is not None
    searches = _searches(data.get("tool_choice"), data.get("tools"), tiered)
    query = next(text for role, text in reversed(turns) if role == "user")
    everything = "\n".join([instructions or "", *(text for _, text in turns)])
    return AgentRequest(
        model=model,
        tier=tier,
        query=query,
        prompt=everything,
        stream=bool(data.get("stream")),
        background=bool(data.get("background")),
        store=data.get("store") is not False,
        max_output_tokens=data.get("max_output_tokens"),
        related_in_text=asks_for_related(everything),
        filters=Filters(domains),
        input_tokens=count_tokens(everything),
        preset=data.get("effort") or data.get("preset"),
        effort=data.get("effort") or data.get("preset"),
        skills=_skill_names(data.get("skills")),
        searches=searches,
    )
