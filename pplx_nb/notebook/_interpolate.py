"""``{name}`` interpolation of cell text from the user namespace.

Only ``{name}`` and ``{name.attr}`` are replaced, and only when the name exists. Everything
else — unknown names, ``{{ }}``, dict literals and f-strings in pasted code, text inside Markdown
code spans and fences — is left exactly as typed, and nothing here ever raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["interpolate"]

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
