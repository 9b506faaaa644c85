"""``%load_ext pplx_nb``: register the magics and the rich display of results, and undo it.

Loading imports only IPython's magic machinery and the magics' modules; the line naming who
answers is shown when the loading cell ends (reading the settings imports pydantic).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from pplx_nb.notebook._cite import PplxCiteMagics
from pplx_nb.notebook._kernel import Shown, is_terminal, register_exit, show
from pplx_nb.notebook._lookback import PplxLookbackMagics
from pplx_nb.notebook._render import loaded_bundle
from pplx_nb.notebook._spend import PplxSpendMagics
from pplx_nb.notebook.magics import PplxMagics

__all__ = ["load_ipython_extension", "unload_ipython_extension"]

_DISPLAYED_TYPES = (
    ("pplx_nb._models", "Answer"),
    ("pplx_nb._models", "Conversation"),
    ("pplx_nb._models", "JobStatus"),
    ("pplx_nb._web_results", "WebResults"),
)


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics and the rich display of results on ``ipython``; say who answers."""
    magics = PplxMagics(ipython)
    ipython.register_magics(
        magics, PplxLookbackMagics(ipython), PplxCiteMagics(ipython), PplxSpendMagics(ipython)
    )
    register_exit()
    if is_terminal(ipython):
        _quiet_after_magics(ipython, magics.shown)
    formatter = ipython.display_formatter.ipython_display_formatter
    for module, name in _DISPLAYED_TYPES:
        formatter.for_type_by_name(module, name, magics.display_result)
    ipython.events.register("pre_run_cell", magics.shown.clear)
    ipython.input_transformers_cleanup.append(magics.keep_question_marks)
    ipython.input_transformers_cleanup.append(magics.keep_empty_cells)
    _say_who_answers_after_this_cell(ipython)


def _say_who_answers_after_this_cell(ipython: Any) -> None:
    """Show the loaded line, naming who answers, at the end of the cell that loaded pplx_nb (at
    the start of the first cell when it was loaded outside one, as from IPython's config).

    Naming the backend reads the settings, which imports pydantic (about 100 ms): the first
    magic needs them anyway, and ``%load_ext`` itself stays at the cost of the magic machinery.
    """
    in_a_cell = getattr(ipython.displayhook, "exec_result", None) is not None
    event = "post_run_cell" if in_a_cell else "pre_run_cell"

    def say(_: object) -> None:
        _forget_loaded_line(ipython)
        with contextlib.suppress(Exception):
            show(loaded_bundle())

    _forget_loaded_line(ipython)
    ipython._pplx_loaded_line = (event, say)
    ipython.events.register(event, say)


def _forget_loaded_line(ipython: Any) -> None:
    """Drop the loaded line still waiting for a cell (shown, or unloaded before any cell ran)."""
    pending = ipython.__dict__.pop("_pplx_loaded_line", None)
    if pending is not None:
        with contextlib.suppress(ValueError):
            ipython.events.unregister(*pending)


_MAGIC_CALL = re.compile(r"^get_ipython\(\)\.run_(?:line|cell)_magic\('pplx\w*'")


def _quiet_after_magics(ipython: Any, shown: Shown) -> None:
    """In a terminal, no ``Out[n]:`` for a result the magic has shown already.

    IPython prints the prompt for any value a cell ends with, even one that displays nothing
    more; a cell whose last line is a pplx magic call that showed its result is made quiet
    instead (as with ``;``). A result it left to the display hook (``%pplx_history``'s
    conversation, ``%pplx_conversations``' table) is shown as any other.
    """
    hook = ipython.displayhook
    if getattr(hook, "_pplx_quiet", None) is not None:
        return
    original = hook.quiet

    def quiet() -> bool:
        try:
            cell = ipython.history_manager.input_hist_parsed[-1]
        except (IndexError, AttributeError):
            cell = ""
        lines = [line for line in cell.splitlines() if line.strip()]
        magic = bool(lines and _MAGIC_CALL.match(lines[-1].strip()))
        return (magic and bool(shown.ids)) or bool(original())

    hook._pplx_quiet = original
    hook.quiet = quiet


def unload_ipython_extension(ipython: Any) -> None:
    """Remove what :func:`load_ipython_extension` registered."""
    magics = ipython.magics_manager.registry.pop("PplxMagics", None)
    for other in ("PplxLookbackMagics", "PplxCiteMagics", "PplxSpendMagics"):
        ipython.magics_manager.registry.pop(other, None)
    for kind in ("line", "cell"):
        table = ipython.magics_manager.magics[kind]
        for name in [n for n in table if n.startswith("pplx")]:
            del table[name]
    formatter = ipython.display_formatter.ipython_display_formatter
    for module, name in _DISPLAYED_TYPES:
        formatter.deferred_printers.pop((module, name), None)
        formatter.type_printers = {
            cls: fn
            for cls, fn in formatter.type_printers.items()
            if not (cls.__module__ == module and cls.__name__ == name)
        }
    if magics is not None:
        with contextlib.suppress(ValueError):
            ipython.events.unregister("pre_run_cell", magics.shown.clear)
    _forget_loaded_line(ipython)
    if magics is not None:
        for transformer in (magics.keep_question_marks, magics.keep_empty_cells):
            with contextlib.suppress(ValueError):
                ipython.input_transformers_cleanup.remove(transformer)
    hook = ipython.displayhook
    original = getattr(hook, "_pplx_quiet", None)
    if original is not None:
        hook.quiet = original
        del hook._pplx_quiet
