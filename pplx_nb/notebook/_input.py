"""What a user types into a magic: its options, the {name} fields of its cell, a trailing ``?``.

Options: shared ``magic_arguments`` decorators and their translation to Researcher options.
IPython splits magic lines without POSIX quote removal (so an apostrophe in a question does not
break parsing); :func:`unquote` strips the quotes a user put around an option value.

Interpolation (:func:`interpolate`): only ``{name}`` and ``{name.attr}`` are replaced, and only
when the name exists. Everything else — unknown names, ``{{ }}``, dict literals and f-strings in
pasted code, text inside Markdown code spans and fences — is left exactly as typed, and nothing
there ever raises.

:func:`question_mark_keeper` is an input transformer so that a line magic's question may end in
``?``; :func:`empty_cell_keeper` one so that an empty ``%%pplx`` cell reaches the magic.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Collection, Mapping
from datetime import date
from typing import Any, TypeVar

from IPython.core import magic_arguments as _magic_arguments

from pplx_nb._errors import ValidationError

__all__ = [
    "CONVERSATION_ID",
    "RECENCY",
    "argument",
    "empty_cell_keeper",
    "interpolate",
    "magic_arguments",
    "not_an_id",
    "output_options",
    "parse_argstring",
    "question_mark_keeper",
    "search_options",
    "search_opts",
    "seconds",
    "split_conversation_id",
    "unquote",
    "web_options",
    "web_opts",
]

F = TypeVar("F", bound=Callable[..., Any])

CONVERSATION_ID = re.compile(r"^\d{8}-\d{13}$")
RECENCY = ("hour", "day", "week", "month", "year")
_US_DATE = re.compile(r"^(\d{1,2})/(\d{1,2})/(\d{4})$")
_IPYTHON: Any = _magic_arguments


def argument(*args: Any, **kwargs: Any) -> Callable[[F], F]:
    """IPython's ``@argument`` (argparse ``add_argument`` options), typed."""
    decorator: Callable[[F], F] = _IPYTHON.argument(*args, **kwargs)
    return decorator


def magic_arguments() -> Callable[[F], F]:
    """IPython's ``@magic_arguments()``: builds the parser and the ``%magic?`` help, typed.

    IPython writes the usage as a reST literal block (``::``); ``%magic?`` shows it as plain
    text, so it is headed "Usage:" instead.
    """
    built: Callable[[F], F] = _IPYTHON.magic_arguments()

    def decorator(func: F) -> F:
        func = built(func)
        if func.__doc__:
            func.__doc__ = func.__doc__.replace("::\n\n  %", "Usage:\n\n  %", 1)
        return func

    return decorator


def parse_argstring(magic: Callable[..., Any], line: str) -> argparse.Namespace:
    """Parse a magic's line with the parser its decorators built (UsageError on bad input)."""
    parsed: argparse.Namespace = _IPYTHON.parse_argstring(magic, line)
    return parsed


def unquote(value: str) -> str:
    """``value`` without one pair of matching surrounding quotes."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _api_date(value: str) -> str:
    """A date as the API wants it (MM/DD/YYYY), from ISO ``YYYY-MM-DD`` or MM/DD/YYYY."""
    value = unquote(value.strip())
    try:
        if match := _US_DATE.match(value):
            month, day, year = (int(g) for g in match.groups())
            parsed = date(year, month, day)
        else:
            parsed = date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a date: write it as YYYY-MM-DD (or MM/DD/YYYY)"
        ) from None
    return parsed.strftime("%m/%d/%Y")


def seconds(value: str) -> float:
    """A number of seconds above 0 (the type of ``--timeout``): ``-1`` or ``nan`` is refused."""
    try:
        number = float(unquote(value.strip()))
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number of seconds above 0, e.g. 600"
        ) from None
    return number


def _apply(func: F, decorators: list[Callable[[F], F]]) -> F:
    # magic_arguments lists options in reverse order of application; apply bottom-up so the help
    # shows them in the order written here.
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def output_options(func: F) -> F:
    """``-o/--output VAR`` and ``--debug``."""
    return _apply(
        func,
        [
            argument("-o", "--output", metavar="VAR", help="also store the result in VAR"),
            argument("--debug", action="store_true", help="show the traceback of an error"),
        ],
    )


def _filter_arguments() -> list[Callable[[F], F]]:
    """The options that narrow the web search, for the asking magics and ``%%pplx_web``."""
    return [
        argument(
            "--domain",
            action="append",
            metavar="DOMAIN",
            help="only search DOMAIN (repeatable; prefix with - to exclude it)",
        ),
        argument("--recency", choices=RECENCY, help="only sources from the last hour/day/..."),
        argument("--after", type=_api_date, metavar="DATE", help="sources after DATE"),
        argument("--before", type=_api_date, metavar="DATE", help="sources before DATE"),
        argument("--academic", action="store_true", help="search scholarly sources"),
    ]


def _filter_opts(args: argparse.Namespace) -> dict[str, Any]:
    """The API's filter fields that the options of :func:`_filter_arguments` ask for."""
    opts: dict[str, Any] = {}
    if args.domain:
        opts["search_domain_filter"] = [unquote(d) for d in args.domain]
    if args.recency:
        opts["search_recency_filter"] = args.recency
    if args.after:
        opts["search_after_date_filter"] = args.after
    if args.before:
        opts["search_before_date_filter"] = args.before
    if args.academic:
        opts["search_mode"] = "academic"
    return opts


def web_options(func: F) -> F:
    """The options of ``%%pplx_web``: how many results, the filters, ``--save``, outputs."""
    return _apply(
        func,
        [
            argument(
                "-n",
                "--max-results",
                type=int,
                default=10,
                metavar="N",
                help="at most N results (1 to 20, default 10)",
            ),
            *_filter_arguments(),
            argument("--country", metavar="CC", help="results for a country (ISO code, e.g. GB)"),
            argument(
                "--save",
                action="store_true",
                help="store query and results as a conversation to follow up",
            ),
            argument("--raw", action="store_true", help="do not replace {name} from variables"),
            argument(
                "-o", "--output", metavar="VAR", help="also store the results as a DataFrame in VAR"
            ),
            argument("--debug", action="store_true", help="show the traceback of an error"),
        ],
    )


def web_opts(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Researcher.web_search`` keyword options that parsed ``%%pplx_web`` args ask for."""
    opts = {"max_results": args.max_results, "save": args.save, **_filter_opts(args)}
    if args.country:
        opts["country"] = unquote(args.country)
    return opts


def search_options(func: F) -> F:
    """The search options shared by every asking magic, plus ``--file``, ``--raw`` and outputs."""
    return _apply(
        func,
        [
            argument(
                "-m",
                "--model",
                help="model: an effort (fast, low, medium, high, xhigh), perplexity/sonar or "
                "a provider model",
            ),
            argument(
                "--effort",
                help="how much the run does: fast, low, medium, high, xhigh, or pinned "
                "(fast@2026-10-16.0); --preset is its deprecated name",
            ),
            argument("--preset", help=argparse.SUPPRESS),
            *_filter_arguments(),
            argument("--related", action="store_true", help="ask for related questions"),
            argument("--images", action="store_true", help="ask for images"),
            argument("--thinking", action="store_true", help="show the model's reasoning"),
            argument("--no-cache", action="store_true", help="bypass the response cache"),
            argument(
                "--file",
                action="append",
                metavar="PATH",
                help="attach a text file to the question (repeatable)",
            ),
            argument("--raw", action="store_true", help="do not replace {name} from variables"),
            argument("-o", "--output", metavar="VAR", help="also store the result in VAR"),
            argument("--debug", action="store_true", help="show the traceback of an error"),
        ],
    )


def search_opts(args: argparse.Namespace) -> dict[str, Any]:
    """The Researcher keyword options (API field names) that parsed magic ``args`` ask for."""
    opts = _filter_opts(args)
    if args.model:
        opts["model"] = unquote(args.model)
    for name in ("effort", "preset"):
        if getattr(args, name):
            opts[name] = unquote(getattr(args, name))
    if args.related:
        opts["return_related_questions"] = True
    if args.images:
        opts["return_images"] = True
    if args.thinking:
        opts["show_thinking"] = True
    if args.no_cache:
        opts["use_cache"] = False
    return opts


def split_conversation_id(words: list[str]) -> tuple[str | None, list[str]]:
    """``(id, rest)`` when the first word is a conversation id, else ``(None, words)``."""
    if words and CONVERSATION_ID.match(unquote(words[0])):
        return unquote(words[0]), words[1:]
    if words and re.match(r"^\d{8}-\d+$", words[0]):
        raise not_an_id(words[0])
    return None, words


def not_an_id(word: str) -> ValidationError:
    """The refusal of ``word`` where a conversation ID belongs, in every magic's words."""
    return ValidationError(
        f"{word!r} is not a conversation ID: IDs look like 20250124-1737734400000 "
        "(`%pplx_conversations` lists them)."
    )


_FIELD = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}(?!\})")
_CODE = re.compile(r"(```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)|`[^`\n]*`)", re.S)
_MISSING = object()


def interpolate(text: str, namespace: Mapping[str, Any]) -> str:
    """Replace ``{name}`` and ``{name.attr}`` in ``text`` with values from ``namespace``.

    Code spans and fenced code blocks are copied unchanged; so is any field whose name is unknown,
    whose attribute lookup fails, or whose ``str()`` raises.
    """
    parts = _CODE.split(text)
    # re.split with one group alternates prose (even indexes) and code (odd indexes).
    return "".join(
        part if index % 2 else _FIELD.sub(lambda m: _lookup(m, namespace), part)
        for index, part in enumerate(parts)
    )


def _lookup(match: re.Match[str], namespace: Mapping[str, Any]) -> str:
    head, *attrs = match.group(1).split(".")
    value = namespace.get(head, _MISSING)
    try:
        for attr in attrs:
            if value is _MISSING or attr.startswith("_"):
                return match.group(0)
            value = getattr(value, attr, _MISSING)
        if value is _MISSING:
            return match.group(0)
        return str(value)
    except Exception:
        return match.group(0)


_QUESTION_LINE = re.compile(
    r"^(\s*(?:[A-Za-z_][A-Za-z0-9_]*\s*=\s*)?)%(pplx\w*)[ \t]+(.*\?)[ \t]*$"
)


def question_mark_keeper(names: Collection[str]) -> Callable[[list[str]], list[str]]:
    """A cleanup transformer: ``%pplx_followup why?`` asks "why?" instead of opening the help.

    IPython reads a line ending in ``?`` as a help request; a line magic in ``names`` WITH
    arguments is turned into the explicit call first, also after an assignment
    (``answer = %pplx why?``). ``%pplx?`` alone still shows the help, and a cell that is a cell
    magic (its body is text) is left alone.
    """

    def keep_question_marks(lines: list[str]) -> list[str]:
        if lines and lines[0].lstrip().startswith("%%"):
            return lines
        out = []
        for line in lines:
            match = _QUESTION_LINE.match(line.rstrip("\r\n"))
            if match and match.group(2) in names:
                indent, name, rest = match.groups()
                line = f"{indent}get_ipython().run_line_magic({name!r}, {rest!r})\n"
            out.append(line)
        return out

    return keep_question_marks


_CELL_MAGIC_LINE = re.compile(r"^%%(pplx\w*)(?:[ \t]|$)")


def empty_cell_keeper(names: Collection[str]) -> Callable[[list[str]], list[str]]:
    """A cleanup transformer: a cell magic in ``names`` with an empty cell still runs the magic.

    IPython itself refuses a cell magic whose cell is empty, with a bare ``UsageError``; given a
    blank cell instead, the magic asks the question written on its line, or refuses in its own
    error box like every other refusal. ``%%pplx?`` (help) is left alone.
    """

    def keep_empty_cells(lines: list[str]) -> list[str]:
        match = _CELL_MAGIC_LINE.match(lines[0]) if lines else None
        if match is None or match.group(1) not in names or "".join(lines[1:]):
            return lines
        return [lines[0].rstrip("\r\n") + "\n", "\n"]

    return keep_empty_cells
