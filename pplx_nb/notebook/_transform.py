"""An input transformer so that a line magic's question may end in ``?``."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

__all__ = ["question_mark_keeper"]

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
