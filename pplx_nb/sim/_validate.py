"""Request checks both protocols share; each failure is an ``Invalid`` carrying the 400 message."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "RECENCY",
    "Invalid",
    "check_choice",
    "check_fields",
    "check_filters",
    "check_number",
    "message_text",
    "parse_json_object",
]

RECENCY = ("hour", "day", "week", "month", "year")
_DATE = re.compile(r"^(0?[1-9]|1[0-2])/(0?[1-9]|[12]\d|3[01])/\d{4}$")


class Invalid(ValueError):
    """A request the real API would reject with 400; ``param`` names the offending field and
    ``kind`` is the error ``type`` (``invalid_request``, ``invalid_model``...)."""

    def __init__(
        self, message: str, param: str | None = None, kind: str = "invalid_request"
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.kind = kind


def check_fields(data: dict[str, Any], known: frozenset[str], where: str = "") -> None:
    """Reject any key of ``data`` not in ``known`` the way the live API does."""
    for key in sorted(data):
        if key not in known:
            raise Invalid(f'invalid request body: json: unknown field "{key}"', where + key)


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object."""
    try:
        data = json.loads(body) if body.strip() else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise Invalid(f"invalid request body: malformed JSON ({exc})") from exc
    except RecursionError as exc:
        raise Invalid("invalid request body: JSON nested too deeply") from exc
    if not isinstance(data, dict):
        raise Invalid("invalid request body: expected a JSON object")
    return data


def check_choice(data: dict[str, Any], key: str, choices: tuple[str, ...]) -> None:
    """``data[key]``, when present, is one of ``choices``."""
    value = data.get(key)
    if value is not None and value not in choices:
        raise Invalid(f"{key} must be one of {', '.join(choices)}; got {value!r}", key)


def check_number(
    data: dict[str, Any], key: str, low: float, high: float, *, integer: bool = False
) -> None:
    """``data[key]``, when present, is a number in ``[low, high]``."""
    value = data.get(key)
    if value is None:
        return
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
        raise Invalid(f"{key} must be a number between {low:g} and {high:g}; got {value!r}", key)


def check_filters(data: dict[str, Any]) -> tuple[str, ...]:
    """Validate the search filters in ``data``; return the domain filter."""
    check_choice(data, "search_recency_filter", RECENCY)
    for key in (
        "search_after_date_filter",
        "search_before_date_filter",
        "last_updated_after_filter",
        "last_updated_before_filter",
    ):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not _DATE.match(value)):
            raise Invalid(f"{key} must be a date in MM/DD/YYYY format; got {value!r}", key)
    domains = data.get("search_domain_filter")
    if domains is None:
        return ()
    if not isinstance(domains, list) or not all(isinstance(d, str) and d for d in domains):
        raise Invalid("search_domain_filter must be a list of domain names", "search_domain_filter")
    if len(domains) > 20:
        raise Invalid("search_domain_filter accepts at most 20 domains", "search_domain_filter")
    return tuple(domains)


def message_text(content: Any, param: str) -> str:
    """The text of a message ``content``: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif not isinstance(part, dict) or "type" not in part:
                raise Invalid(f"{param} has a malformed content part", param)
        return "\n".join(texts)
    raise Invalid(f"{param} content must be a string or a list of parts", param)
