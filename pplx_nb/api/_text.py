"""Answer text surgery: ``<think>`` blocks and the trailing "Related questions:" list.

Reasoning models start their content with ``<think>...</think>``; that goes to ``Answer.thinking``
and never into the answer text. The Agent API has no related-questions field, so the adapter asks
for a trailing list (:data:`RELATED_INSTRUCTION`) and :func:`split_related` cuts it off. Streams
get the same treatment incrementally through :class:`DeltaFilter`.
"""

from __future__ import annotations

import re

from pplx_nb._think import THINK_CLOSE as _CLOSE
from pplx_nb._think import THINK_OPEN as _OPEN
from pplx_nb._think import split_think

__all__ = ["RELATED_INSTRUCTION", "DeltaFilter", "split_related", "split_think"]

RELATED_INSTRUCTION = (
    "After the answer, add a line 'Related questions:' followed by three short follow-up "
    "questions the reader might ask next, one per line, each starting with '- '."
)
_RELATED = re.compile(r"(?im)^[ \t#>*_]*related questions[ \t*_]*:[ \t*_]*$")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s*")
_MARKER = "related questions"


def split_related(text: str) -> tuple[str, list[str]]:
    """``(text, questions)``: the last "Related questions:" list cut off the end of ``text``."""
    matches = list(_RELATED.finditer(text))
    if not matches:
        return text, []
    marker = matches[-1]
    questions = []
    for line in text[marker.end() :].splitlines():
        question = _BULLET.sub("", line).strip().strip("*_").strip()
        if question:
            questions.append(question)
    return text[: marker.start()].rstrip(), questions


class DeltaFilter:
    """Turns raw content deltas into answer-text deltas.

    Text inside a leading ``<think>`` block is collected in :attr:`thinking` instead of being
    emitted; with ``related=True`` a trailing "Related questions:" list is held back. Tags and
    markers split across deltas are handled by holding back only what could still become one.
    """

    def __init__(self, *, related: bool = False) -> None:
        self._related = related
        self._state = "start"
        self._buffer = ""
        self._thought: list[str] = []
        self.thinking: str | None = None

    def feed(self, delta: str) -> str:
        """The part of the answer text that can be shown now."""
        if self._state == "think":
            return self._think(delta)
        self._buffer += delta
        if self._state == "start":
            head = self._buffer.lstrip()
            if head.startswith(_OPEN):
                self._state, self._buffer = "think", ""
                return self._think(head[len(_OPEN) :])
            if _OPEN.startswith(head):
                return ""
            self._state = "text"
        if self._state == "gap":
            self._buffer = self._buffer.lstrip()
            if not self._buffer:
                return ""
            self._state = "text"
        if self._state == "held":
            return ""
        return self._release()

    def _think(self, delta: str) -> str:
        # Reasoning runs to thousands of deltas: each is looked at once, with only the few
        # characters before it that could start a split closing tag, never the whole block.
        window = self._buffer + delta
        end = window.find(_CLOSE)
        if end < 0:
            cut = max(0, len(window) - len(_CLOSE) + 1)
            self._thought.append(window[:cut])
            self._buffer = window[cut:]
            return ""
        self._thought.append(window[:end])
        self.thinking = "".join(self._thought).strip()
        self._thought = []
        self._state, self._buffer = "gap", window[end + len(_CLOSE) :]
        return self.feed("")

    def flush(self) -> str:
        """Whatever answer text is still held back once the stream has ended."""
        if self._state in ("held", "think"):
            return ""
        out, self._buffer = self._buffer, ""
        if self._related:
            out = split_related(out)[0]
        return out

    def _release(self) -> str:
        if not self._related:
            out, self._buffer = self._buffer, ""
            return out
        found = _RELATED.search(self._buffer)
        if found is not None:
            out = self._buffer[: found.start()]
            self._buffer = ""
            self._state = "held"
            return out.rstrip()
        cut = self._buffer.rfind("\n")
        if cut < 0:
            cut = 0 if self._could_be_marker(self._buffer) else len(self._buffer)
        elif not self._could_be_marker(self._buffer[cut + 1 :]):
            cut = len(self._buffer)
        out, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return out

    @staticmethod
    def _could_be_marker(line: str) -> bool:
        head = line.lstrip(" \t#>*_").lower()
        return head.startswith(_MARKER) or (_MARKER.startswith(head) and bool(head))
