"""Small icons for notebook output that render with any fonts: SVG images as ``data:`` URIs.

Emoji (🔗 ✅ ⏳ …) need a colour-emoji font, which many Linux desktops lack: there they show as
empty boxes. An ``<img>`` whose source is a ``data:`` URI needs no font and no network, passes
JupyterLab's sanitizer (so it shows in an untrusted notebook too) and renders in widget HTML.
Each icon sits beside words that say the same ("Conversation", "completed"), so its alt text is
empty; text output (``text/plain``, a terminal) carries the words alone.
"""

from __future__ import annotations

import base64
from typing import Literal

__all__ = ["IconName", "icon"]

IconName = Literal[
    "answer",
    "branch",
    "cancelled",
    "completed",
    "conversation",
    "failed",
    "info",
    "job",
    "pending",
    "question",
    "search",
    "waiting",
    "warning",
]

_BLUE, _GREEN, _AMBER, _RED, _GREY = "#2f80ed", "#2e9d4f", "#d98a00", "#d9534f", "#8a94a6"
# Shapes on a 16 x 16 grid, stroked (or filled) in colours that read on light and dark themes.
_SHAPES: dict[str, tuple[str, str]] = {
    "answer": (
        _GREY,
        '<path d="M4 1.5h5.5l3 3v10H4z"/><path d="M6.2 7.5h4.3M6.2 10h4.3M6.2 12.5h2.8"/>',
    ),
    "branch": (
        _GREEN,
        '<circle cx="4.5" cy="3.5" r="1.6"/><circle cx="4.5" cy="12.5" r="1.6"/>'
        '<circle cx="11.5" cy="5" r="1.6"/><path d="M4.5 5.1v5.8M11.5 6.6c0 3.4-7 2.2-7 4.3"/>',
    ),
    "cancelled": (_GREY, '<circle cx="8" cy="8" r="6.2"/><path d="M3.7 12.3l8.6-8.6"/>'),
    "completed": (
        _GREEN,
        '<circle cx="8" cy="8" r="7" fill="#2e9d4f" stroke="none"/>'
        '<path d="M4.6 8.3l2.3 2.3 4.6-4.8" stroke="#fff" stroke-width="1.8"/>',
    ),
    "conversation": (
        _BLUE,
        '<path d="M6.8 9.2l2.4-2.4"/><path d="M7.4 4.6l1.3-1.3a2.6 2.6 0 013.7 3.7l-1.3 1.3"/>'
        '<path d="M8.6 11.4l-1.3 1.3a2.6 2.6 0 01-3.7-3.7l1.3-1.3"/>',
    ),
    "failed": (
        _RED,
        '<circle cx="8" cy="8" r="7" fill="#d9534f" stroke="none"/>'
        '<path d="M5.4 5.4l5.2 5.2M10.6 5.4l-5.2 5.2" stroke="#fff" stroke-width="1.8"/>',
    ),
    "info": (
        _BLUE,
        '<circle cx="8" cy="8" r="6.5"/><path d="M8 7.2v4.6"/>'
        '<circle cx="8" cy="4.8" r="0.6" fill="#2f80ed"/>',
    ),
    "job": (_BLUE, '<rect x="2" y="2" width="12" height="12" rx="2.5"/><path d="M8 5v6M5 8h6"/>'),
    "pending": (_GREY, '<circle cx="8" cy="8" r="6.5"/><path d="M8 4.2V8l2.6 1.6"/>'),
    "question": (
        _GREY,
        '<circle cx="8" cy="5" r="2.8"/><path d="M2.6 14.5c.6-3 2.8-4.6 5.4-4.6s4.8 1.6 5.4 4.6"/>',
    ),
    "search": (_BLUE, '<circle cx="6.8" cy="6.8" r="4.4"/><path d="M10.1 10.1l4 4"/>'),
    "waiting": (
        _AMBER,
        '<path d="M3.5 1.8h9M3.5 14.2h9"/>'
        '<path d="M4.8 1.8c0 3.6 6.4 3.9 6.4 6.2s-6.4 2.6-6.4 6.2"/>'
        '<path d="M11.2 1.8c0 3.6-6.4 3.9-6.4 6.2s6.4 2.6 6.4 6.2"/>',
    ),
    "warning": (
        _RED,
        '<path d="M8 1.6l6.9 12.4H1.1z" fill="#d9534f" stroke-linejoin="round"/>'
        '<path d="M8 5.8v4.1M8 11.7v.3" stroke="#fff" stroke-width="1.8"/>',
    ),
}


def _data_uri(name: str) -> str:
    colour, shape = _SHAPES[name]
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16" '
        f'fill="none" stroke="{colour}" stroke-width="1.5" stroke-linecap="round">{shape}</svg>'
    )
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode("ascii")


_URIS = {name: _data_uri(name) for name in _SHAPES}


def icon(name: IconName) -> str:
    """The icon ``name`` as an ``<img>`` one line of text high, for Markdown or HTML output."""
    return (
        f'<img src="{_URIS[name]}" alt="" width="14" height="14" class="pplx-icon" '
        'style="vertical-align:-2px;margin:0">'
    )
