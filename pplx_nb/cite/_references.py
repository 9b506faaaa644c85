"""The references of an answer, a conversation or a store, with keys that do not move.

A page is one reference however often it is cited: sources are compared by canonical URL
(:func:`~pplx_nb.cite._items.canonical_url`). Its key is site + year + first title word
(``python2024asyncio``), with a letter on a clash (``python2024asynciob``), handed out in the
order pages were first cited in the store — so an older page keeps its key when newer
conversations arrive, and the same page has the same key in every export from one store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pplx_nb._markdown import cited_and_consulted
from pplx_nb._models import Conversation, Message, Source
from pplx_nb.cite._items import CslItem, canonical_url, csl_item, key_stem

__all__ = ["Cited", "KeyBook", "Reference", "cited_in", "conversation_cites", "references"]


@dataclass(frozen=True, slots=True)
class Reference:
    """One page as a citation: its key, its CSL item, and the turns that cite it."""

    key: str
    item: CslItem
    canonical: str
    cited_by: tuple[tuple[str, int], ...] = ()
    """``(conversation id, turn)`` of each answer citing it (the turn is the message's index)."""


@dataclass(frozen=True, slots=True)
class Cited:
    """A source as one answer cites it: where, and whether the text cites it or the answer only
    consulted it ("Also consulted")."""

    source: Source
    conversation_id: str
    turn: int
    accessed: str | None
    consulted_only: bool


def cited_in(
    conversation_id: str, turn: int, message: Message, *, consulted: bool = False
) -> Iterator[Cited]:
    """The sources of one answer: those its text cites (all of them when it cites none), and
    with ``consulted`` the ones it only consulted as well."""
    sources = message.sources or []
    if message.role != "assistant" or not sources or message.unanswered is not None:
        return
    cited, rest = cited_and_consulted(sources, message.content)
    for index in cited:
        yield Cited(sources[index], conversation_id, turn, message.timestamp, False)
    if consulted:
        for index in rest:
            yield Cited(sources[index], conversation_id, turn, message.timestamp, True)


def conversation_cites(conversation: Conversation, *, consulted: bool = False) -> Iterator[Cited]:
    """Every answer's sources in ``conversation``, in order."""
    for turn, message in enumerate(conversation.messages):
        yield from cited_in(conversation.conversation_id, turn, message, consulted=consulted)


@dataclass
class KeyBook:
    """Keys by canonical URL, handed out in the order pages are first seen."""

    _keys: dict[str, str] = field(default_factory=dict)
    _taken: set[str] = field(default_factory=set)

    def key(self, canonical: str, item: CslItem) -> str:
        """The key of the page at ``canonical`` (a new one, from ``item``, the first time)."""
        found = self._keys.get(canonical)
        if found is not None:
            return found
        stem = key_stem(item)
        key, clash = stem, 0
        while key in self._taken:
            clash += 1
            key = stem + _letters(clash)
        self._keys[canonical] = key
        self._taken.add(key)
        return key

    def learn(self, cites: Iterable[Cited]) -> None:
        """Give a key to each page in ``cites`` not seen yet, in order."""
        for cite in cites:
            canonical = canonical_url(cite.source.url)
            if canonical not in self._keys:
                self.key(canonical, csl_item(cite.source, "", accessed=cite.accessed))


def _letters(n: int) -> str:
    """The n-th clash suffix: 1 → ``b``, 25 → ``z``, 26 → ``ba`` (``a`` is the unsuffixed key)."""
    letters = ""
    while n:
        n, digit = divmod(n, 26)
        letters = "abcdefghijklmnopqrstuvwxyz"[digit] + letters
    return letters


def references(cites: Iterable[Cited], book: KeyBook | None = None) -> list[Reference]:
    """One :class:`Reference` per page in ``cites``, in the order first cited.

    ``book`` holds the keys (those of the whole store, for keys that agree across exports);
    without one, keys are handed out over ``cites`` alone.
    """
    book = book or KeyBook()
    found: dict[str, tuple[Cited, list[tuple[str, int]]]] = {}
    for cite in cites:
        canonical = canonical_url(cite.source.url)
        first, where = found.setdefault(canonical, (cite, []))
        spot = (cite.conversation_id, cite.turn)
        if spot not in where:
            where.append(spot)
    result: list[Reference] = []
    for canonical, (first, where) in found.items():
        draft = csl_item(first.source, "", accessed=first.accessed)
        key = book.key(canonical, draft)
        item = csl_item(first.source, key, accessed=first.accessed)
        result.append(Reference(key, item, canonical, tuple(where)))
    return result
