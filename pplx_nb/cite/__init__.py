"""Citable research: every source a reference, in BibTeX, CSL-JSON and RIS, and reports.

A :class:`~pplx_nb.Source` becomes a CSL item (:mod:`._items`): a ``webpage`` by default, an
article when its URL holds a DOI or an arXiv id. The same page (compared by canonical URL) is
one reference with one key everywhere in a store (:mod:`._references`). Three scopes: one
answer, one conversation, or a store (all of it, chosen ids, or the filters of
:meth:`ConversationStore.list`). Formats are written by the field's libraries
(:mod:`._formats`); reports (:mod:`._report`) are Markdown with pandoc citations and a ``.bib``
beside them, or self-contained HTML with the bibliography rendered by citeproc-py. A store is
read for what its references need alone (:mod:`._documents`), without building every message.

Sources an answer only consulted (its "Also consulted" list) are left out unless
``consulted=True``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from os import PathLike
from pathlib import Path
from typing import Any, Protocol, TypedDict, Unpack, runtime_checkable

from pplx_nb._citation_formats import FORMATS, Format, check_format, write_references
from pplx_nb._errors import ConversationNotFound, PplxError, ValidationError
from pplx_nb._logging import get_logger
from pplx_nb._models import Answer, Conversation, ConversationSummary
from pplx_nb._option_names import option_error
from pplx_nb._references import (
    Citing,
    CslItem,
    KeyBook,
    Reference,
    answer_references,
    canonical_url,
    conversation_cites,
    references,
)
from pplx_nb.cite._documents import Stored, cycles_uncollected, stored_cites
from pplx_nb.cite._report import STYLES, Report, ReportOptions, write_report

__all__ = [
    "FORMATS",
    "STYLES",
    "Citable",
    "CiteOptions",
    "ConversationSource",
    "CslItem",
    "Format",
    "Reference",
    "Report",
    "canonical_url",
    "check_format",
    "collect",
    "export",
    "to_bibtex",
    "to_csl_json",
    "to_report",
    "to_ris",
    "write_references",
]

logger = get_logger("pplx_nb.cite")


@runtime_checkable
class ConversationSource(Protocol):
    """Where conversations are read from: a :class:`~pplx_nb.store.ConversationStore` (the
    citation layer reads a store through these two methods only)."""

    def documents(
        self, ids: Sequence[str] | None = None
    ) -> Iterator[tuple[str, dict[str, Any] | PplxError]]: ...

    def list(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        tool: str | None = None,
        model: str | None = None,
        text: str | None = None,
        limit: int | None = None,
    ) -> list[ConversationSummary]: ...


Citable = Answer | Conversation | ConversationSource | Iterable[str | Conversation]


class CiteOptions(TypedDict, total=False):
    """Which sources, and from where (see :func:`collect`)."""

    consulted: bool
    store: ConversationSource | None
    since: datetime | str | None
    until: datetime | str | None
    tool: str | None
    model: str | None
    text: str | None
    limit: int | None


_FILTERS = ("since", "until", "tool", "model", "text", "limit")


def collect(source: Citable, **options: Unpack[CiteOptions]) -> list[Reference]:
    """The references of ``source``, in the order first cited.

    Keyword args:
        source: an :class:`Answer`, a :class:`Conversation`, a :class:`ConversationStore`
            (every conversation, or those the filters choose), or conversation ids / Conversations
            (ids are read from ``store``, default: the store the settings name).
        consulted: include the sources answers only consulted ("Also consulted").
        store: where ids are read from, and whose keys are used: with a store, a page's key is
            the one it has in the whole store, so exports of one conversation and of the store
            agree.
        since, until, tool, model, text, limit: with a store as ``source``, which conversations
            (as :meth:`ConversationStore.list` filters them).
    """
    unknown = sorted(set(options) - set(CiteOptions.__annotations__))
    if unknown:
        raise ValidationError(
            f"Unknown option(s) {', '.join(unknown)}: citations take "
            + ", ".join(CiteOptions.__annotations__)
            + ".",
            field=unknown[0],
        )
    consulted = options.get("consulted", False)
    store = options.get("store")
    if store is not None:
        _check_store(store, "store")
    if isinstance(source, Answer):
        return answer_references(source, consulted=consulted)
    if isinstance(source, ConversationSource):
        store = source
        filters = {k: v for k, v in options.items() if k in _FILTERS and v is not None}
        chosen: list[str] | None = None
        if filters:
            chosen = [s.conversation_id for s in store.list(**filters)]  # type: ignore[arg-type]
        everything = _read_cites(store)
        if chosen is None:  # one pass: keys over the whole store (a clash goes oldest first)
            return references(_all(everything), consulted=consulted)
        book = _book(everything)
        wanted = set(chosen)
        chosen_ones = [c for c in everything if c.conversation_id in wanted]
        return references(_all(chosen_ones), book, consulted=consulted)
    conversations = _conversations(source, store)
    keys = _book(_read_cites(store)) if store is not None else None
    return references(_cites(conversations), keys, consulted=consulted)


def export(source: Citable, fmt: str = "bibtex", **options: Unpack[CiteOptions]) -> str:
    """The references of ``source`` (see :func:`collect`) as text in ``fmt``: ``bibtex``,
    ``csl-json`` or ``ris``. An unknown format is a VALIDATION_ERROR naming it."""
    return write_references(collect(source, **options), check_format(fmt))


def to_bibtex(source: Citable, **options: Unpack[CiteOptions]) -> str:
    """The references of ``source`` as biblatex BibTeX (what pandoc reads from a ``.bib``)."""
    return export(source, "bibtex", **options)


def to_csl_json(source: Citable, **options: Unpack[CiteOptions]) -> str:
    """The references of ``source`` as CSL-JSON (what Zotero, pandoc and Quarto read)."""
    return export(source, "csl-json", **options)


def to_ris(source: Citable, **options: Unpack[CiteOptions]) -> str:
    """The references of ``source`` as RIS (EndNote, Mendeley, Zotero)."""
    return export(source, "ris", **options)


def to_report(
    store: ConversationSource,
    conversation_ids: Sequence[str],
    path: str | Path,
    *,
    style: str = "apa",
    title: str | None = None,
    thinking: bool = False,
    failed: bool = False,
    consulted: bool = False,
    force: bool = False,
) -> Report:
    """One report from the conversations ``conversation_ids`` of ``store``, written at ``path``.

    ``path`` gets Markdown whose citations are pandoc's (``[@key]``); beside it go
    ``references.bib`` (the references the report cites, keyed as in the whole store), the
    style's ``.csl`` (so ``pandoc --citeproc report.md -o report.pdf`` renders it in that style)
    and ``<name>.html``, self-contained, with citations and bibliography rendered in ``style``
    by citeproc-py.

    Args:
        style: ``apa``, ``chicago-author-date``, ``ieee``, or the path of a ``.csl`` file.
        title: the report's title (default "Research report").
        thinking: include each answer's thinking, quoted before it.
        failed: include questions that have no answer (with why).
        consulted: include and cite the sources answers only consulted.
        force: overwrite files that exist (otherwise VALIDATION_ERROR, nothing written).
    """
    _check_store(store, "store")
    if isinstance(conversation_ids, str):  # one id, not its characters
        conversation_ids = [conversation_ids]
    if not conversation_ids:
        raise ValidationError("A report needs at least one conversation id.", field="ids")
    if not isinstance(path, (str, PathLike)):
        raise option_error(
            "{given} is not a path: give the report's Markdown file, e.g. report.md.",
            "path",
            path,
        )
    book = _book(_read_cites(store))
    options = ReportOptions(style, title, thinking, failed, consulted, force)
    chosen = _read(store, list(dict.fromkeys(conversation_ids)))
    return write_report(chosen, Path(path), options, book)


def _check_store(store: object, name: str) -> None:
    if not isinstance(store, ConversationSource):
        raise ValidationError(
            f"{name} must be a ConversationStore (for example researcher.store), not "
            f"{type(store).__name__}.",
            field=name,
        )


def _cites(conversations: Iterable[Conversation]) -> Iterator[Citing]:
    """The sources of every answer."""
    for conversation in conversations:
        yield from conversation_cites(conversation)


def _all(conversations: Iterable[Stored]) -> Iterator[Citing]:
    """The sources of every answer of the stored ``conversations``."""
    for conversation in conversations:
        yield from conversation.answers


def _book(conversations: Iterable[Stored]) -> KeyBook:
    """The keys of every page in ``conversations`` (oldest first), each cited or consulted."""
    book = KeyBook()
    book.learn(_all(conversations))
    return book


def _read_cites(store: ConversationSource) -> list[Stored]:
    """Every conversation of ``store`` read for its references (:mod:`._documents`), oldest
    first; unreadable ones are skipped with a warning, as every bulk reader of the store does."""
    conversations: list[Stored] = []
    with cycles_uncollected():
        for conversation_id, document in store.documents(None):
            if isinstance(document, ConversationNotFound):
                continue  # deleted while listing
            if isinstance(document, PplxError):
                logger.warning("Skipping conversation %s: %s", conversation_id, document)
                continue
            conversations.append(stored_cites(conversation_id, document))
    conversations.sort(key=lambda c: (c.created_at, c.conversation_id))
    return conversations


def _conversations(
    source: Iterable[str | Conversation] | Conversation, store: ConversationSource | None
) -> list[Conversation]:
    if isinstance(source, Conversation):
        return [source]
    if isinstance(source, (str, bytes)) or not isinstance(source, Iterable):
        raise ValidationError(
            "Citations come from an Answer, a Conversation, a ConversationStore or a list of "
            f"conversation ids, not {type(source).__name__}.",
        )
    items = list(source)
    ids = [item for item in items if isinstance(item, str)]
    loaded: dict[str, Conversation] = {}
    if ids:
        if store is None:
            raise ValidationError(
                "Conversation ids need the store they are kept in: pass store=... (for "
                "example researcher.store), or the store itself to cite all of it."
            )
        loaded = {c.conversation_id: c for c in _read(store, ids)}
    result: list[Conversation] = []
    for item in items:
        if isinstance(item, Conversation):
            result.append(item)
        elif isinstance(item, str):
            result.append(loaded[item])
        else:
            raise ValidationError(
                f"Cannot cite a {type(item).__name__}: pass conversation ids or Conversations."
            )
    return result


def _read(store: ConversationSource, ids: Sequence[str]) -> list[Conversation]:
    """The conversations of ``store`` named by ``ids``; a missing or unreadable one is its
    error."""
    conversations: list[Conversation] = []
    for _, document in store.documents(ids):
        if isinstance(document, PplxError):
            raise document
        conversations.append(Conversation.model_validate(document))
    return conversations
