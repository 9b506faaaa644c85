"""What each option is called on each surface, and option errors worded in those names.

One option has a name per surface: a keyword argument in Python (``search_domain_filter``), a tool
argument over MCP (``search_domain_filter``, ``showThinking``), a magic's flag in a notebook
(``--domain``). The layer that checks an option raises its error once, with
:func:`option_error`: which option failed, with what value, and the rest of the sentence. The
error's message is worded for Python; its ``wordings`` hold the same sentence for every
surface, read back with :func:`worded`. The names come from the one table :data:`OPTION_NAMES`.
"""

from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple

from pplx_nb._errors import PplxError, ValidationError

__all__ = ["OPTION_NAMES", "SURFACES", "Names", "Surface", "option_error", "worded"]

Surface = Literal["python", "mcp", "notebook"]
SURFACES: tuple[Surface, ...] = ("python", "mcp", "notebook")


class Names(NamedTuple):
    """An option's names besides its Python keyword; ``None`` where a surface does not have it.

    ``switch``: the magic flag takes no value (``--related``, ``--academic``).
    """

    mcp: str | None
    magic: str | None
    switch: bool = False


OPTION_NAMES: dict[str, Names] = {
    # Answers: Researcher.search and friends, the MCP ask tools, %%pplx / %%pplx_research /
    # %%pplx_followup.
    "model": Names(None, "--model"),
    "search_domain_filter": Names("search_domain_filter", "--domain"),
    "search_recency_filter": Names("search_recency_filter", "--recency"),
    "search_after_date_filter": Names("search_after_date_filter", "--after"),
    "search_before_date_filter": Names("search_before_date_filter", "--before"),
    "search_mode": Names("search_mode", "--academic", switch=True),
    "return_related_questions": Names("return_related_questions", "--related", switch=True),
    "return_images": Names(None, "--images", switch=True),
    "reasoning_effort": Names("reasoning_effort", None),
    "effort": Names(None, "--effort"),
    "preset": Names(None, "--preset"),
    "show_thinking": Names("showThinking", "--thinking", switch=True),
    "use_cache": Names(None, "--no-cache", switch=True),
    # The Search API: Researcher.web_search, perplexity_web_search, %%pplx_web.
    "max_results": Names("max_results", "-n"),
    "country": Names("country", "--country"),
    "max_tokens_per_page": Names("max_tokens_per_page", None),
    "max_tokens": Names(None, None),
    "last_updated_after_filter": Names(None, None),
    "last_updated_before_filter": Names(None, None),
    "search_language_filter": Names(None, None),
    "search_context_size": Names(None, None),
    # Listing conversations: Researcher.conversations, list_conversations, %pplx_conversations.
    "since": Names("since", "--since"),
    "until": Names("until", "--until"),
    "limit": Names("limit", "--limit"),
    # Spend: Researcher.costs, %pplx_costs.
    "by": Names(None, "--by"),
    # Citations and reports: pplx_nb.cite, perplexity_cite, %pplx_cite / %pplx_report.
    "format": Names("format", "--format"),
    "style": Names(None, "--style"),
    "force": Names(None, "--force", switch=True),
    "path": Names(None, "--file"),
}
"""Each option by its Python keyword: its MCP argument and its magic flag."""


def _words(option: str, surface: Surface) -> tuple[Surface, str]:
    """The surface whose words name ``option`` (Python's, where ``surface`` lacks it) and its
    name there."""
    names = OPTION_NAMES.get(option)
    if surface == "notebook" and names and names.magic:
        return surface, names.magic
    if surface == "mcp" and names and names.mcp:
        return surface, names.mcp
    return "python", option


def _value(value: Any, surface: Surface) -> str:
    if surface == "mcp":
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            return repr(value)
    if surface == "notebook" and isinstance(value, str):
        plain = value and not any(c.isspace() or c in "'\"`" for c in value)
        return value if plain else repr(value)
    return repr(value)


def _worded(option: str, value: Any, item: bool, surface: Surface) -> dict[str, str]:
    """``option``, ``value`` and ``given`` (the two as a user writes them) for ``surface``.

    In a notebook the flag is a command, in backquotes: ```--domain ''```, ```--related```.
    """
    surface, name = _words(option, surface)
    shown = _value(value, surface)
    if surface == "notebook":
        flag = name if OPTION_NAMES[option].switch else f"{name} {shown}"
        return {"option": f"`{name}`", "value": shown, "given": f"`{flag}`"}
    given = f"{shown} in {name}" if item else f"{name}={shown}"
    return {"option": name, "value": shown, "given": given}


def option_error(
    template: str,
    option: str,
    value: Any,
    *,
    item: bool = False,
    other: tuple[str, Any] | None = None,
    **fields: Any,
) -> ValidationError:
    """The VALIDATION_ERROR for ``option`` holding ``value``, worded for every surface.

    ``template`` is a :meth:`str.format` string with ``{option}`` (the option's name), ``{value}``
    and ``{given}`` (name and value, as a user writes them: ``country='USA'`` in Python,
    ```--country USA``` in a notebook); ``{option2}`` and ``{given2}`` name ``other``, a
    second option the problem involves. ``item``: ``value`` is one entry of a list option.
    ``fields`` fill the template's other names, the same on every surface.
    """
    wordings: dict[str, str] = {}
    for surface in SURFACES:
        names = _worded(option, value, item, surface)
        if other is not None:
            second = _worded(*other, False, surface)
            names.update(option2=second["option"], given2=second["given"])
        wordings[surface] = template.format(**names, **fields)
    options = [option] if other is None else [option, other[0]]
    return ValidationError(wordings["python"], wordings=wordings, option=option, options=options)


def worded(error: PplxError, surface: Surface) -> str:
    """``error``'s message in ``surface``'s names for the options (as it is, if it names none)."""
    if isinstance(error, ValidationError) and surface in error.wordings:
        return error.wordings[surface]
    return error.message
