"""The accepted values of the search options, checked before any request is paid for.

One set of rules serves both the Python API (:func:`check_options`, called by the Researcher) and
the MCP input schemas (the ``Literal`` types, :data:`MAX_DOMAINS` and :func:`parse_date`), so a
value refused in one place is refused in the other, with the same explanation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, get_args

from pplx_nb._errors import ValidationError

__all__ = [
    "DATE_FORMAT",
    "MAX_DOMAINS",
    "MAX_DOMAIN_CHARS",
    "REASONING_EFFORTS",
    "RECENCY_FILTERS",
    "SEARCH_MODES",
    "SEARCH_OPTIONS",
    "ReasoningEffortValue",
    "RecencyValue",
    "SearchModeValue",
    "check_options",
    "parse_date",
]

RecencyValue = Literal["hour", "day", "week", "month", "year"]
SearchModeValue = Literal["web", "academic", "sec"]
ReasoningEffortValue = Literal["minimal", "low", "medium", "high"]
RECENCY_FILTERS: tuple[str, ...] = get_args(RecencyValue)
SEARCH_MODES: tuple[str, ...] = get_args(SearchModeValue)
REASONING_EFFORTS: tuple[str, ...] = get_args(ReasoningEffortValue)
MAX_DOMAINS = 20
MAX_DOMAIN_CHARS = 253
DATE_FORMAT = "%m/%d/%Y"
_DATE_HINT = "use MM/DD/YYYY, e.g. 01/31/2025"
_ASCII_DATE = re.compile(r"[0-9]{1,2}/[0-9]{1,2}/[0-9]{4}")


def parse_date(value: str) -> str:
    """``value`` unchanged if it is a real MM/DD/YYYY date; a ValueError saying how to write it.

    The error is a :class:`ValidationError`, which is also a ``ValueError``, so pydantic
    validators report it like any other constraint.
    """
    try:
        # strptime also takes non-ASCII digits, which the API would not read.
        if not _ASCII_DATE.fullmatch(value):
            raise ValueError(value)
        datetime.strptime(value, DATE_FORMAT)
    except (TypeError, ValueError):
        raise ValidationError(f"{value!r} is not a date: {_DATE_HINT}.") from None
    return value


def _choice(choices: tuple[str, ...]) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if value not in choices:
            raise ValidationError(
                f"{name}={value!r} is not accepted; use one of {', '.join(choices)}."
            )
        return value

    return check


def _date(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{name}={value!r} is not a date: {_DATE_HINT}.")
    try:
        return parse_date(value)
    except ValidationError:
        raise ValidationError(f"{name}={value!r} is not a date: {_DATE_HINT}.") from None


def _domains(name: str, value: Any) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValidationError(
            f"{name} must be a list of domains, e.g. ['python.org', '-pinterest.com']; "
            f"got {value!r}."
        )
    if len(value) > MAX_DOMAINS:
        raise ValidationError(
            f"{name} has {len(value)} domains; at most {MAX_DOMAINS} are accepted. Keep the "
            "ones that matter most."
        )
    for domain in value:
        if not isinstance(domain, str) or not 0 < len(domain) <= MAX_DOMAIN_CHARS:
            raise ValidationError(
                f"{name} holds {domain!r}; each domain must be a name of 1 to "
                f"{MAX_DOMAIN_CHARS} characters, e.g. 'python.org'."
            )
    return list(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(f"{name}={value!r} is not accepted; use True or False.")
    return value


def _model(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(
            f"{name}={value!r} is not a model name, e.g. 'low' or 'perplexity/sonar'."
        )
    return value


_RULES: dict[str, Callable[[str, Any], Any]] = {
    "model": _model,
    "search_domain_filter": _domains,
    "search_recency_filter": _choice(RECENCY_FILTERS),
    "search_after_date_filter": _date,
    "search_before_date_filter": _date,
    "search_mode": _choice(SEARCH_MODES),
    "return_related_questions": _flag,
    "return_images": _flag,
    "reasoning_effort": _choice(REASONING_EFFORTS),
    "show_thinking": _flag,
    "use_cache": _flag,
}
SEARCH_OPTIONS = frozenset(_RULES)
"""The option names ``Researcher.search`` and friends accept."""


def check_options(opts: dict[str, Any]) -> dict[str, Any]:
    """The options that are set (``None`` dropped), each checked; ValidationError otherwise.

    Unknown names and unaccepted values are refused with the accepted names or values listed.
    """
    unknown = set(opts) - SEARCH_OPTIONS
    if unknown:
        raise ValidationError(
            f"Unknown option(s) {', '.join(sorted(unknown))}; valid options are "
            f"{', '.join(sorted(SEARCH_OPTIONS))}."
        )
    return {key: _RULES[key](key, value) for key, value in opts.items() if value is not None}
