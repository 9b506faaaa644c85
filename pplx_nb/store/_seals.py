"""The history check of an append, and the seals that make it cheap.

Validating a long history costs several times an append, so the histories a store validated
(loaded, created or appended to) are remembered by their message count and the CRC-32 of their
message lines: an append then only checks that the bytes are still those (well under a
millisecond per megabyte). Nothing else is remembered: the store is still read every time.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from pplx_nb.store._document import body

__all__ = ["Seals"]

_SEALS = 1024
"""How many conversations' validated histories a store remembers."""


class Seals:
    """The conversations whose message lines a store validated, by count and CRC-32 (the
    oldest forgotten past 1024)."""

    def __init__(self) -> None:
        self._seals: dict[str, tuple[int, int]] = {}

    def seal(self, conversation_id: str, message_count: int, crc: int) -> None:
        """Remember that the conversation's ``message_count`` message lines with CRC-32 ``crc``
        validate (the oldest remembered is forgotten past :data:`_SEALS`)."""
        self._seals.pop(conversation_id, None)
        self._seals[conversation_id] = (message_count, crc)
        if len(self._seals) > _SEALS:
            del self._seals[next(iter(self._seals))]

    def check_history(
        self,
        data: bytes,
        conversation_id: str,
        message_count: int,
        validate: Callable[[bytes, str], object],
    ) -> list[int]:
        """CONVERSATION_CORRUPTED unless every message of the stored document ``data`` (whose
        header says ``message_count``) validates; for a canonical document, its count and the
        length and CRC-32 of its message lines.

        ``validate`` is the store's whole validation, which seals a canonical document; it runs
        only when the history is not sealed as it is.
        """
        span = body(data)
        if span is None:
            validate(data, conversation_id)
            return []
        lines = memoryview(data)[span[0] : span[1]]
        seal = (message_count, zlib.crc32(lines))
        if self._seals.get(conversation_id) != seal:
            validate(data, conversation_id)
            if self._seals.get(conversation_id) != seal:
                return []
        return [message_count, len(lines), seal[1]]
