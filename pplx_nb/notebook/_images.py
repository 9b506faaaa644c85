"""Image thumbnails of an answer, as Markdown (cell outputs) and HTML (widget values).

Only http(s) images are shown, their URLs quoted so they cannot end the Markdown link or the HTML
attribute they sit in; each thumbnail links to the page it comes from.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from pplx_nb._markdown import escape, web_url

__all__ = ["images_html", "images_markdown"]

_THUMB_STYLE = "max-height:120px;max-width:200px;margin:0 6px 6px 0;vertical-align:top"


def images_markdown(images: Sequence[Mapping[str, Any]]) -> str:
    """Image thumbnails, each linking to the page it comes from: ``[![title](image)](page)``."""
    thumbs = [
        f"[![{escape(title)}]({image})]({page})" for title, image, page in _image_links(images)
    ]
    return "**Images**\n\n" + " ".join(thumbs) if thumbs else ""


def images_html(images: Sequence[Mapping[str, Any]]) -> str:
    """Image thumbnails as HTML (widget values do not render Markdown images)."""
    thumbs = [
        f'<a href="{html.escape(page)}" target="_blank" rel="noopener">'
        f'<img src="{html.escape(image)}" alt="{html.escape(title)}" '
        f'title="{html.escape(title)}" style="{_THUMB_STYLE}"></a>'
        for title, image, page in _image_links(images)
    ]
    return "<p><strong>Images</strong></p><div>" + "".join(thumbs) + "</div>" if thumbs else ""


def _image_links(images: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """``(title, image URL, page URL)`` for each image with a web address; others are left out.

    Takes the API's snake_case keys (``image_url``, ``origin_url``) and the stored camelCase ones.
    """
    links: list[tuple[str, str, str]] = []
    for image in images:
        url = web_url(image.get("image_url") or image.get("imageUrl"))
        if url is None:
            continue
        page = web_url(image.get("origin_url") or image.get("originUrl")) or url
        title = " ".join(str(image.get("title") or "").split())
        links.append((title or urlsplit(page).hostname or "image", url, page))
    return links
