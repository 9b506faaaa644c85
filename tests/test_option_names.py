"""pplx_nb._option_names: one table of each option's names, and errors worded for each surface."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

import pytest

from pplx_nb import Settings
from pplx_nb._errors import ValidationError
from pplx_nb._option_names import OPTION_NAMES, option_error, worded
from pplx_nb._options import SEARCH_OPTIONS
from pplx_nb.api.search import SEARCH_FILTERS
from pplx_nb.notebook._cite import PplxCiteMagics
from pplx_nb.notebook._input import parse_argstring, search_opts, web_opts
from pplx_nb.notebook._lookback import PplxLookbackMagics
from pplx_nb.notebook._spend import PplxSpendMagics
from pplx_nb.notebook.magics import PplxMagics


def test_an_option_error_names_the_option_as_each_surface_does() -> None:
    error = option_error("{given} is not accepted; ask for 1 to 20.", "max_results", 0)
    assert isinstance(error, ValidationError) and error.code == "VALIDATION_ERROR"
    assert error.message == "max_results=0 is not accepted; ask for 1 to 20."
    assert worded(error, "mcp") == "max_results=0 is not accepted; ask for 1 to 20."
    assert worded(error, "notebook") == "`-n 0` is not accepted; ask for 1 to 20."
    assert error.details["option"] == "max_results"
    assert error.wordings["notebook"] == worded(error, "notebook")
    assert "wordings" not in error.details and "worded" not in error.details

    entry = option_error("{given} is not a domain.", "search_domain_filter", "", item=True)
    assert entry.message == "'' in search_domain_filter is not a domain."
    assert worded(entry, "mcp") == '"" in search_domain_filter is not a domain.'
    assert worded(entry, "notebook") == "`--domain ''` is not a domain."

    thinking = option_error("{given} is not accepted.", "show_thinking", "yes")
    assert worded(thinking, "mcp") == 'showThinking="yes" is not accepted.'
    assert worded(thinking, "notebook") == "`--thinking` is not accepted."

    dates = option_error(
        "{given} is later than {given2}; {option} and {option2}.",
        "search_after_date_filter",
        "02/01/2025",
        other=("search_before_date_filter", "01/31/2025"),
    )
    assert worded(dates, "notebook") == (
        "`--after 02/01/2025` is later than `--before 01/31/2025`; `--after` and `--before`."
    )
    assert dates.details["options"] == ["search_after_date_filter", "search_before_date_filter"]

    no_flag = option_error("{given} is not accepted.", "reasoning_effort", "max")
    assert (
        worded(no_flag, "notebook") == no_flag.message == "reasoning_effort='max' is not accepted."
    )
    assert worded(ValidationError("Plain."), "notebook") == "Plain."


def test_an_option_error_keeps_its_wordings_across_processes() -> None:
    error = option_error("{given} is not accepted.", "country", "USA")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ValidationError
    assert worded(copy, "notebook") == "`--country USA` is not accepted."


def test_every_option_the_api_takes_is_in_the_table() -> None:
    assert (SEARCH_OPTIONS | SEARCH_FILTERS | {"max_results"}) <= set(OPTION_NAMES)


MAGICS: list[Any] = [
    getattr(cls, name)
    for cls in (PplxMagics, PplxLookbackMagics, PplxCiteMagics, PplxSpendMagics)
    for name in dir(cls)
    if name.startswith("pplx") and hasattr(getattr(cls, name), "parser")
]


def _opts(magic: Any, line: str) -> dict[str, Any]:
    """The options ``line`` asks for: as a Researcher keyword where the magic maps them."""
    args = parse_argstring(magic, line)
    if magic.__name__ == "pplx_web":
        return web_opts(args)
    if magic.__name__ in ("pplx", "pplx_research", "pplx_followup"):
        return search_opts(args)
    return vars(args)


def _options_asked(flag: str) -> set[str]:
    """The options that each magic taking ``flag`` asks for when given it (and nothing else)."""
    asked: set[str] = set()
    for magic in MAGICS:
        actions = {s: a for a in magic.parser._actions for s in a.option_strings}
        if flag not in actions:
            continue
        if actions[flag].nargs == 0:
            line = flag
        elif actions[flag].choices:
            line = f"{flag} {next(iter(actions[flag].choices))}"
        else:
            value = {"-n": "3", "--limit": "3", "--after": "2025-01-31", "--before": "2025-01-31"}
            line = f"{flag} {value.get(flag, 'x')}"
        base, given = _opts(magic, ""), _opts(magic, line)
        asked |= {key for key, v in given.items() if key not in base or base[key] != v}
    return asked


@pytest.mark.parametrize(
    ("option", "flag"), [(o, n.magic) for o, n in OPTION_NAMES.items() if n.magic]
)
def test_each_magic_flag_in_the_table_asks_for_its_option(option: str, flag: str) -> None:
    assert option in _options_asked(flag)


def test_each_mcp_name_in_the_table_is_an_argument_of_a_tool(tmp_path: Path) -> None:
    from pplx_nb.mcp.server import create_server

    server = create_server(Settings(offline=True, conversation_logs_dir=tmp_path))
    tools = asyncio.run(server.list_tools())
    arguments = {name for tool in tools for name in tool.input_schema.get("properties", {})}
    named = {names.mcp for names in OPTION_NAMES.values() if names.mcp}
    assert named <= arguments, named - arguments


@pytest.mark.parametrize(
    ("option", "flag"), [(o, n.magic) for o, n in OPTION_NAMES.items() if n.magic]
)
def test_a_switch_in_the_table_is_a_flag_without_a_value(option: str, flag: str) -> None:
    takes = {
        action.nargs != 0
        for magic in MAGICS
        for action in magic.parser._actions
        if flag in action.option_strings
    }
    assert takes == {not OPTION_NAMES[option].switch}


def test_search_options_type_every_checked_option_on_every_asking_method() -> None:
    """IDEs and type checkers see each option of search, deep_research, followup, retry and
    their async and streaming twins: the TypedDict names exactly the options checked at run
    time (an unknown one is still refused there, with the valid names)."""
    import inspect
    import sys
    from typing import Unpack

    from pplx_nb import Researcher, SearchOptions

    assert SearchOptions.__optional_keys__ == SEARCH_OPTIONS
    where = vars(sys.modules[Researcher.__module__])
    # Only this annotation: return types such as CostEstimate are imported for type checkers.
    taking = {
        name
        for name, method in inspect.getmembers(Researcher, callable)
        if not name.startswith("_")
        and "opts" in inspect.signature(method).parameters
        and eval(inspect.signature(method).parameters["opts"].annotation, where)
        == Unpack[SearchOptions]
    }
    asking = {"search", "stream_search", "deep_research", "followup", "stream_followup", "retry"}
    asking |= {"estimate"}  # what a run may cost takes the options that price it
    assert taking == asking | {f"a{name}" for name in asking}


def test_web_search_filters_type_every_filter_the_search_api_takes() -> None:
    import inspect
    import sys
    from typing import Unpack

    from pplx_nb import Researcher, WebSearchFilters

    assert WebSearchFilters.__optional_keys__ == SEARCH_FILTERS
    where = vars(sys.modules[Researcher.__module__])
    for method in (Researcher.web_search, Researcher.aweb_search):
        # Only this annotation: the return type is imported for type checkers alone.
        annotation = inspect.signature(method).parameters["filters"].annotation
        assert eval(annotation, where) == Unpack[WebSearchFilters]
