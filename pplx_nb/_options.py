"""The accepted values of the search options, checked before any request is paid for.

One set of rules serves both the Python API (:func:`check_options`, called by the Researcher) and
the MCP input schemas (the ``Literal`` types, :data:`MAX_DOMAINS` and :func:`parse_date`), so a
value refused in one place is refused in the other, with the same explanation. Each refusal names
the option as the surface it came from names it (:mod:`pplx_nb._option_names`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, TypedDict, cast, get_args
from urllib.parse import urlsplit

from pplx_nb._errors import ValidationError
from pplx_nb._logging import get_logger
from pplx_nb._option_names import option_error

__all__ = [
    "DATE_FORMAT",
    "EFFORTS",
    "MAX_DOMAINS",
    "MAX_DOMAIN_CHARS",
    "REASONING_EFFORTS",
    "RECENCY_FILTERS",
    "SEARCH_MODES",
    "SEARCH_OPTIONS",
    "ContextSizeValue",
    "ReasoningEffortValue",
    "RecencyValue",
    "SearchModeValue",
    "SearchOptions",
    "WebSearchFilters",
    "check_date_order",
    "check_options",
    "choice",
    "date_option",
    "domain_name",
    "effort_tier",
    "parse_date",
]

RecencyValue = Literal["hour", "day", "week", "month", "year"]
SearchModeValue = Literal["web", "academic", "sec"]
ReasoningEffortValue = Literal["minimal", "low", "medium", "high"]
ContextSizeValue = Literal["low", "medium", "high"]
RECENCY_FILTERS: tuple[str, ...] = get_args(RecencyValue)
SEARCH_MODES: tuple[str, ...] = get_args(SearchModeValue)
REASONING_EFFORTS: tuple[str, ...] = get_args(ReasoningEffortValue)
MAX_DOMAINS = 20
MAX_DOMAIN_CHARS = 253
DATE_FORMAT = "%m/%d/%Y"
_DATE_HINT = "use MM/DD/YYYY, e.g. 01/31/2025"
_ASCII_DATE = re.compile(r"[0-9]{1,2}/[0-9]{1,2}/[0-9]{4}")
_LABEL = re.compile(r"[^\W_](?:[\w-]{0,61}[^\W_])?")
logger = get_logger("pplx_nb")


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


def choice(choices: tuple[str, ...]) -> Callable[[str, Any], Any]:
    """The rule for an option that takes one of ``choices``: ``rule(name, value)``."""

    def check(name: str, value: Any) -> Any:
        if value not in choices:
            raise option_error(
                "{given} is not accepted; use one of {choices}.",
                name,
                value,
                choices=", ".join(choices),
            )
        return value

    return check


def date_option(name: str, value: Any) -> str:
    """``value`` of the date option ``name``, if it is a real MM/DD/YYYY date."""
    if isinstance(value, str):
        try:
            return parse_date(value)
        except ValidationError:
            pass
    raise option_error(f"{{given}} is not a date: {_DATE_HINT}.", name, value)


def domain_name(entry: object) -> str | None:
    """``entry`` as the domain filter takes it, or None when it names no domain.

    Whitespace around it goes, a leading ``-`` (exclude) stays, and a web address is cut to its
    host, as a user means it: ``https://docs.python.org/3/`` is ``docs.python.org``.
    """
    if not isinstance(entry, str):
        return None
    text = entry.strip()
    sign = "-" if text.startswith("-") else ""
    text = text[len(sign) :].strip()
    scheme, sep, _ = text.partition("://")
    if sep and scheme.lower() not in ("http", "https"):
        return None
    try:
        parts = urlsplit(text if sep else f"//{text}")
        parts.port  # noqa: B018 - a port that is not a number raises ValueError
    except ValueError:
        return None
    host = (parts.hostname or "").rstrip(".")
    labels = host.removeprefix(".").split(".")
    if not 0 < len(host) <= MAX_DOMAIN_CHARS or not all(_LABEL.fullmatch(x) for x in labels):
        return None
    return sign + host


def _domains(name: str, value: Any) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise option_error(
            "{option} must be a list of domains, e.g. ['python.org', '-pinterest.com']; "
            "got {value}.",
            name,
            value,
        )
    if len(value) > MAX_DOMAINS:
        raise option_error(
            "{count} domains given with {option}; at most {most} are accepted. Keep the ones "
            "that matter most.",
            name,
            value,
            count=len(value),
            most=MAX_DOMAINS,
        )
    domains = []
    for entry in value:
        domain = domain_name(entry)
        if domain is None:
            raise option_error(
                "{given} is not a domain: give a site's name, e.g. 'python.org' (a web address is "
                "cut to its site), or '-pinterest.com' to leave a site out.",
                name,
                entry,
                item=True,
            )
        domains.append(domain)
    return domains


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise option_error("{given} is not accepted; use True or False.", name, value)
    return value


EFFORTS = ("fast", "low", "medium", "high", "xhigh")
"""The Agent API's effort levels, lightest first."""
_PINNED = re.compile(r"(?P<tier>[a-z]+)@[0-9A-Za-z][0-9A-Za-z.\-]*")


def _model(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise option_error(
            "{given} is not a model name, e.g. 'low' or 'perplexity/sonar'.", name, value
        )
    return value


def effort_tier(value: str) -> str | None:
    """The effort level ``value`` is (``fast``, or ``fast`` pinned as ``fast@2026-10-16.0``),
    else ``None``."""
    pinned = _PINNED.fullmatch(value.strip())
    tier = pinned["tier"] if pinned else value.strip()
    return tier if tier in EFFORTS else None


def _effort(name: str, value: Any) -> str:
    if not isinstance(value, str) or effort_tier(value) is None:
        raise option_error(
            "{given} is not an effort: use fast, low, medium, high or xhigh, or one pinned to a "
            "version such as fast@2026-10-16.0.",
            name,
            value,
        )
    return value.strip()


def _preset(name: str, value: Any) -> str:
    checked = _effort(name, value)
    _warn_preset()
    return checked


@functools.cache
def _warn_preset() -> None:
    """Say once per process that ``preset`` is the deprecated name of ``effort``."""
    logger.warning(
        "The preset option is deprecated, as the API's preset field is: pass effort instead "
        "(the same values; when both are given, effort is used)."
    )


def check_date_order(checked: dict[str, Any], after: str, before: str) -> None:
    """VALIDATION_ERROR when the date of ``after`` in ``checked`` is later than ``before``'s."""
    if after in checked and before in checked:
        start = datetime.strptime(checked[after], DATE_FORMAT)
        end = datetime.strptime(checked[before], DATE_FORMAT)
        if start > end:
            raise option_error(
                "{given} is later than {given2}: no page is published after the first and "
                "before the second. Swap the dates, or drop one.",
                after,
                checked[after],
                other=(before, checked[before]),
            )


class SearchOptions(TypedDict, total=False):
    """The options ``Researcher.search`` and the other asking methods take, typed for IDEs and
    type checkers (at run time each is checked by :func:`check_options`; ``None`` means unset).

    ``model``: a model name, or for deep research a reasoning effort ('low', ...);
    ``search_domain_filter``: sites to search, or with a leading ``-`` to leave out (at most
    20); ``search_recency_filter``: how recent the pages are; ``search_after_date_filter`` and
    ``search_before_date_filter``: publication dates as MM/DD/YYYY; ``search_mode``: which
    sources; ``return_related_questions``, ``return_images``: ask for them with the answer;
    ``reasoning_effort``: of a reasoning model; ``effort``: how much the run does (fast, low,
    medium, high, xhigh, or pinned as ``fast@2026-10-16.0``; over an effort given as ``model``);
    ``preset``: its deprecated name (a warning, once; ``effort`` wins); ``show_thinking``: keep
    the model's thinking in the answer; ``use_cache``: False skips the response cache (default
    True).
    """

    model: str | None
    search_domain_filter: Sequence[str] | None
    search_recency_filter: RecencyValue | None
    search_after_date_filter: str | None
    search_before_date_filter: str | None
    search_mode: SearchModeValue | None
    return_related_questions: bool | None
    return_images: bool | None
    reasoning_effort: ReasoningEffortValue | None
    effort: str | None
    preset: str | None
    show_thinking: bool | None
    use_cache: bool | None


class WebSearchFilters(TypedDict, total=False):
    """The filters of ``Researcher.web_search``, named as the Search API names them and typed
    for IDEs and type checkers (at run time each is checked before the request is sent, see
    :mod:`pplx_nb.api.search`; ``None`` means unset). Dates are MM/DD/YYYY, ``country`` a
    two-letter ISO code, ``search_language_filter`` a list of ISO 639-1 codes."""

    search_domain_filter: Sequence[str] | None
    search_recency_filter: RecencyValue | None
    search_after_date_filter: str | None
    search_before_date_filter: str | None
    search_mode: SearchModeValue | None
    last_updated_after_filter: str | None
    last_updated_before_filter: str | None
    max_tokens: int | None
    max_tokens_per_page: int | None
    country: str | None
    search_language_filter: Sequence[str] | None
    search_context_size: ContextSizeValue | None


_RULES: dict[str, Callable[[str, Any], Any]] = {
    "model": _model,
    "search_domain_filter": _domains,
    "search_recency_filter": choice(RECENCY_FILTERS),
    "search_after_date_filter": date_option,
    "search_before_date_filter": date_option,
    "search_mode": choice(SEARCH_MODES),
    "return_related_questions": _flag,
    "return_images": _flag,
    "reasoning_effort": choice(REASONING_EFFORTS),
    "effort": _effort,
    "preset": _preset,
    "show_thinking": _flag,
    "use_cache": _flag,
}
SEARCH_OPTIONS = frozenset(_RULES)
"""The option names ``Researcher.search`` and friends accept."""


def check_options(opts: Mapping[str, object]) -> SearchOptions:
    """The options that are set (``None`` dropped), each checked; ValidationError otherwise.

    Unknown names and unaccepted values are refused with the accepted names or values listed.
    """
    unknown = set(opts) - SEARCH_OPTIONS
    if unknown:
        raise ValidationError(
            f"Unknown option(s) {', '.join(sorted(unknown))}; valid options are "
            f"{', '.join(sorted(SEARCH_OPTIONS))}."
        )
    checked = {key: _RULES[key](key, value) for key, value in opts.items() if value is not None}
    check_date_order(checked, "search_after_date_filter", "search_before_date_filter")
    return cast(SearchOptions, checked)
