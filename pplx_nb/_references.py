"""Sources as references: CSL items, canonical URLs, and keys that do not move.

A :class:`~pplx_nb._models.Source` becomes a CSL item (the Citation Style Language's data, what
Zotero, pandoc and Quarto read): a ``webpage`` by default, an article when its URL holds a DOI or
an arXiv id. BibTeX and RIS are written from the same item (:mod:`pplx_nb._citation_formats`), so
every format says the same thing about a page.

A page is one reference however often it is cited: sources are compared by canonical URL
(:func:`canonical_url`). Its key is site + year + first title word and a tag of three letters
drawn from its canonical URL (``python2024asyncio-kqx``): the page's own, so it is the same in
every export — of an answer, a conversation or a store — and stays when conversations are added
or deleted. (A key could not be both that stable and left without a tag until a clash: a page
holding the plain stem whose conversation is deleted would hand it to a page that had a suffix.)
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Literal, NamedTuple, NotRequired, Protocol, TypedDict
from urllib.parse import (
    SplitResult,
    parse_qsl,
    quote,
    unquote_plus,
    urlencode,
    urlsplit,
    urlunsplit,
)

from pplx_nb._markdown import cited_and_consulted
from pplx_nb._models import Answer, Conversation, Message

__all__ = [
    "Citing",
    "CslDate",
    "CslItem",
    "KeyBook",
    "Page",
    "Reference",
    "answer_citing",
    "answer_references",
    "canonical_url",
    "cited_in",
    "conversation_cites",
    "csl_item",
    "key_stem",
    "page_key",
    "references",
    "to_csl_json_dict",
]

CslType = Literal["webpage", "article-journal", "article"]


class Page(Protocol):
    """What a reference reads of a source: a :class:`~pplx_nb._models.Source`, or a stored
    source read without building one (a store's export reads thousands)."""

    @property
    def url(self) -> str: ...

    @property
    def title(self) -> str | None: ...

    @property
    def date(self) -> str | None: ...

    @property
    def ids(self) -> list[int] | None: ...


class CslDate(TypedDict):
    """A CSL date: ``{"date-parts": [[2024, 5, 17]]}`` (month and day when known)."""

    date_parts: list[list[int]]


class CslItem(TypedDict):
    """The CSL-JSON fields pplx_nb writes (``id`` is the citation key).

    The hyphenated CSL names (``container-title``, ``date-parts``) are the JSON keys; in Python
    they are spelled with underscores and renamed by :func:`to_csl_json_dict`.
    """

    id: str
    type: CslType
    title: str
    URL: str
    container_title: NotRequired[str]
    issued: NotRequired[CslDate]
    accessed: NotRequired[CslDate]
    DOI: NotRequired[str]
    publisher: NotRequired[str]
    number: NotRequired[str]


# Query parameters that say who sent the reader, not which page it is.
_TRACKING = re.compile(
    r"^(?:utm_\w+|fbclid|gclid|dclid|msclkid|mc_cid|mc_eid|igshid|ref|ref_src|_hsenc|_hsmi|yclid)$",
    re.IGNORECASE,
)
_DOI = re.compile(r"\b(10\.\d{4,9}/[^\s?#]+)", re.IGNORECASE)
_ARXIV = re.compile(
    r"arxiv\.org/(?:abs|pdf|html)/((?:\d{4}\.\d{4,5}|[a-z\-]+(?:\.[A-Z]{2})?/\d{7}))(?:v\d+)?",
    re.IGNORECASE,
)
# Hosts that only redirect to the publisher: not where the work appeared.
_RESOLVERS = frozenset({"doi.org", "dx.doi.org", "arxiv.org", "export.arxiv.org"})
# Second-level names under which sites register (bbc.co.uk is "bbc", not "co").
_SHARED_SUFFIXES = frozenset({"co", "com", "ac", "org", "gov", "edu", "net", "ne", "or", "go"})
_STOP_WORDS = frozenset(
    "a an and the of on in for to with by from at as is are how what why when which".split()  # noqa: SIM905
)
_ISO_DATE = re.compile(r"^(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?")
_US_DATE = re.compile(r"^(\d{1,2})/(\d{1,2})/(\d{4})$")
_SPACE = re.compile(r"\s+")
# Control characters print nothing (or drive a terminal), and bidi embeddings, overrides and
# isolates reorder the text after them (a title could show its URL backwards): not kept in titles.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NOT_KEY = re.compile(r"[^a-z0-9]")
_WORD_BREAK = re.compile(r"[\s\-_/.:]+")
# Query parameters that carry a secret (a signed link's signature, an API key, a session): a
# reference names the page, and its file is shared, so they are never written.
_SECRET_PARAM = re.compile(
    r"^(?:\w*[_\-.])?(?:pass|password|passwd|pwd|secret|token|key|apikey|api_key|auth|sig|"
    r"signature|credentials?|session|sessionid|sid)$",
    re.IGNORECASE,
)
_WEB = re.compile(r"\s*https?://", re.IGNORECASE)
# Characters a URL never holds unencoded but that BibTeX and RIS readers would take as markup.
# Control characters and line separators too: a URL is one line in every format (an RIS record
# whose URL holds a line break would end there).
_UNSAFE_IN_URL = str.maketrans(
    {
        c: quote(c)
        for c in '{}\\ "<>|^`\u2028\u2029' + "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)]))
    }
)


@functools.lru_cache(maxsize=65_536)
def canonical_url(url: str) -> str:
    """One spelling per page: https, no ``www.``, no trailing slash, no tracking parameters
    (``utm_*``, ``fbclid``, ...), the other parameters sorted; the host lower-cased and in its
    Unicode form (``xn--bcher-kva.de`` is ``bücher.de``), the path percent-encoded one way
    (``%7E`` is ``~``, a space is ``%20``).

    Two sources are the same reference when their canonical URLs are equal. The fragment is
    kept: on documentation pages it names the entry cited (``asyncio.html#asyncio.Task.cancel``
    and ``#asyncio.wait_for`` are two references); a browser's text directive
    (``#:~:text=...``) is dropped, as it only scrolls.
    """
    parts = _split(url)
    host = _unicode_host((parts.hostname or "").lower().rstrip(".").removeprefix("www."))
    port = _port(parts)
    if port and port not in (80, 443):
        host = f"{host}:{port}"
    query = sorted((k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True))
    kept = urlencode([(k, v) for k, v in query if not _TRACKING.match(k)])
    path = quote(_PERCENT.sub(_unreserved, parts.path), safe=_PATH_SAFE).rstrip("/")
    fragment = parts.fragment.split(":~:", 1)[0]
    return urlunsplit(("https", host, path, kept, fragment))


_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"


def _unreserved(match: re.Match[str]) -> str:
    """A percent-escape as one spelling: the letter when it needs none, else upper-case hex."""
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else match.group(0).upper()


def _unicode_host(host: str) -> str:
    try:
        return host.encode("ascii").decode("idna") if "xn--" in host else host
    except UnicodeError:  # not valid punycode: compared as written
        return host


def _split(url: str) -> SplitResult:
    """``url``'s parts; one :func:`urlsplit` refuses (``https://[::1/``) is read as no host."""
    url = url.strip()
    try:
        return urlsplit(url)
    except ValueError:
        return SplitResult("", "", url, "", "")


def _port(parts: SplitResult) -> int | None:
    try:
        return parts.port
    except ValueError:  # out of range or not a number: not a port to keep
        return None


@functools.lru_cache(maxsize=65_536)
def _safe_url(url: str) -> str:
    """``url`` as a reference writes it: without the ``user:password@`` it may carry or query
    parameters that hold a secret, and with characters that are never literal in a URL
    percent-encoded (a brace or a backslash would otherwise end a BibTeX field or start a LaTeX
    command)."""
    parts = _split(url)
    query = "&".join(
        param
        for param in parts.query.split("&")
        if param and not _SECRET_PARAM.match(unquote_plus(param.partition("=")[0]))
    )
    public = parts._replace(netloc=parts.netloc.rpartition("@")[2], query=query)
    return urlunsplit(public).translate(_UNSAFE_IN_URL)


def _identifiers(url: str) -> tuple[CslType, dict[str, str]]:
    arxiv = _ARXIV.search(url)
    if arxiv:
        ident = arxiv.group(1)
        fields = {
            "DOI": f"10.48550/arXiv.{ident}",
            "publisher": "arXiv",
            "number": f"arXiv:{ident}",
        }
        return "article", fields
    doi = _DOI.search(url)
    if doi:
        return "article-journal", {"DOI": doi.group(1).rstrip(".").lower()}
    return "webpage", {}


def _date_parts(text: str | None) -> list[int] | None:
    """``[year, month, day]`` (as far as known) from the API's date strings: ISO 8601
    (``2024-05-17``, ``2024-05``, ``2024``) or US (``5/17/2024``)."""
    if not text:
        return None
    text = text.strip()
    iso = _ISO_DATE.match(text)
    if iso:
        parts = [int(p) for p in iso.groups() if p is not None]
    else:
        us = _US_DATE.match(text)
        if not us:
            return None
        parts = [int(us.group(3)), int(us.group(1)), int(us.group(2))]
    try:
        date(parts[0], parts[1] if len(parts) > 1 else 1, parts[2] if len(parts) > 2 else 1)
    except ValueError:
        return None
    return parts


def _accessed(timestamp: str | None) -> list[int] | None:
    if not timestamp:
        return None
    try:
        when = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    when = when.astimezone(UTC) if when.tzinfo else when
    return [when.year, when.month, when.day]


def _site(host: str) -> str:
    """The site's own name in its host: ``docs.python.org`` → ``python``."""
    labels = [label for label in host.split(".") if label and label != "www"]
    if len(labels) >= 3 and labels[-2] in _SHARED_SUFFIXES and len(labels[-1]) == 2:
        return labels[-3]
    return labels[-2] if len(labels) >= 2 else (labels[0] if labels else "web")


@functools.lru_cache(maxsize=16_384)
def _ascii_word(text: str) -> str:
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return _NOT_KEY.sub("", plain.lower())


def key_stem(item: CslItem) -> str:
    """A readable key without its tag (:func:`page_key`): site + year + first title word
    (``python2024asyncio``); ``nd`` when the page has no date."""
    site = _ascii_word(_site(_split(item["URL"]).hostname or "")) or "web"
    issued = item.get("issued")
    year = str(issued["date_parts"][0][0]) if issued else "nd"
    words = (_ascii_word(w) for w in _WORD_BREAK.split(item["title"]))
    first = next((w for w in words if w and w not in _STOP_WORDS), "")
    if not first:
        path = [_ascii_word(p) for p in _split(item["URL"]).path.split("/")]
        first = next((p for p in reversed(path) if p), "")
    return f"{site}{year}{first[:20]}"


def csl_item(source: Page, key: str, *, accessed: str | None = None) -> CslItem:
    """``source`` as a CSL item with citation key ``key``.

    ``accessed`` is when the answer citing it was given (ISO 8601); the page's own date, when
    the API gave one, is ``issued``. Whitespace in the title (newlines included) is collapsed:
    a title is one line in every format; control and bidi-override characters are dropped.
    """
    url = _safe_url(source.url)
    kind, identifiers = _identifiers(url)
    host = _split(url).hostname or ""
    title = _UNPRINTABLE.sub("", _SPACE.sub(" ", source.title or "")).strip()
    title = title or host.removeprefix("www.") or url
    item: CslItem = {"id": key, "type": kind, "title": title, "URL": url}
    site = host.lower().removeprefix("www.")
    if site and site not in _RESOLVERS:
        item["container_title"] = site
    issued = _date_parts(source.date)
    if issued:
        item["issued"] = {"date_parts": [issued]}
    seen = _accessed(accessed)
    if seen:
        item["accessed"] = {"date_parts": [seen]}
    item.update(identifiers)  # type: ignore[typeddict-item]
    return item


def to_csl_json_dict(item: CslItem) -> dict[str, Any]:
    """``item`` with the CSL-JSON key names (``container-title``, ``date-parts``)."""
    data: dict[str, Any] = {}
    for name, value in item.items():
        if isinstance(value, dict):
            value = {"date-parts": value["date_parts"]}
        data[name.replace("_", "-")] = value
    return data


@dataclass(frozen=True, slots=True)
class Reference:
    """One page as a citation: its key, its CSL item, and the turns that cite it."""

    key: str
    item: CslItem
    canonical: str
    cited_by: tuple[tuple[str, int], ...] = ()
    """``(conversation id, turn)`` of each answer citing it (the turn is the message's index)."""


class Citing(NamedTuple):
    """One answer's sources as references read them: where and when it was given, its sources,
    and the positions of those its text cites (all of them when it cites none) and of those it
    only consulted ("Also consulted").

    A source whose URL is not an http(s) page (``javascript:``, ``data:``, ``file:``) is in
    neither list: it is no reference, so no export or report carries it as a link."""

    conversation_id: str
    turn: int
    accessed: str | None
    sources: Sequence[Page]
    cited: list[int]
    consulted: list[int]


def answer_citing(
    conversation_id: str, turn: int, sources: Sequence[Page], text: str, accessed: str | None
) -> Citing | None:
    """The :class:`Citing` of the answer ``text`` given at ``accessed`` (``None`` without
    sources)."""
    if not sources:
        return None
    cited, rest = cited_and_consulted(sources, text)
    return Citing(
        conversation_id, turn, accessed, sources, _web(sources, cited), _web(sources, rest)
    )


def _web(sources: Sequence[Page], positions: list[int]) -> list[int]:
    """The ``positions`` of ``sources`` that are http(s) pages."""
    for i in positions:
        if not sources[i].url.startswith(_HTTP):
            return [i for i in positions if _WEB.match(sources[i].url)]
    return positions  # as almost always: no pattern to match


_HTTP = ("https://", "http://")


def cited_in(conversation_id: str, turn: int, message: Message) -> Citing | None:
    """The sources of the answer ``message`` (``None`` for other turns, a question left
    without an answer, or an answer without sources)."""
    if message.role != "assistant" or message.unanswered is not None:
        return None
    return answer_citing(
        conversation_id, turn, message.sources or [], message.content, message.timestamp
    )


def conversation_cites(conversation: Conversation) -> Iterator[Citing]:
    """Every answer's sources in ``conversation``, in order."""
    for turn, message in enumerate(conversation.messages):
        citing = cited_in(conversation.conversation_id, turn, message)
        if citing is not None:
            yield citing


@dataclass
class KeyBook:
    """Keys by canonical URL: each page's stem and tag (:func:`page_key`); should two pages of
    one export draw the same key (1 in 17,576 for two pages of one stem), the page seen later
    takes one more letter of its tag."""

    _keys: dict[str, str] = field(default_factory=dict)
    _taken: set[str] = field(default_factory=set)

    def key(self, canonical: str, item: CslItem) -> str:
        """The key of the page at ``canonical`` (a new one, from ``item``, the first time)."""
        found = self._keys.get(canonical)
        if found is not None:
            return found
        key, letters = page_key(canonical, item), _TAG_LETTERS
        while key in self._taken:
            letters += 1
            key = page_key(canonical, item, letters)
        self._keys[canonical] = key
        self._taken.add(key)
        return key

    def __contains__(self, canonical: object) -> bool:
        return canonical in self._keys

    def learn(self, answers: Iterable[Citing]) -> None:
        """Give a key to each page the ``answers`` cite or consulted not seen yet, in order."""
        for answer in answers:
            for index in answer.cited + answer.consulted:
                source = answer.sources[index]
                canonical = canonical_url(source.url)
                if canonical not in self._keys:
                    self.key(canonical, csl_item(source, "", accessed=answer.accessed))


_TAG_LETTERS = 3
_ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def page_key(canonical: str, item: CslItem, letters: int = _TAG_LETTERS) -> str:
    """The key of the page at ``canonical``: its :func:`key_stem`, a hyphen, and ``letters``
    letters drawn from a hash of ``canonical`` (``python2024coroutines-kqx``)."""
    number = int.from_bytes(hashlib.sha256(canonical.encode("utf-8")).digest())
    tag = []
    for _ in range(letters):  # 256 bits hold 54 letters (after them, the tag goes on in a's)
        number, digit = divmod(number, 26)
        tag.append(_ALPHABET[digit])
    return f"{key_stem(item)}-{''.join(tag)}"


def references(
    answers: Iterable[Citing], book: KeyBook | None = None, *, consulted: bool = False
) -> list[Reference]:
    """One :class:`Reference` per page the ``answers`` cite (and, with ``consulted``, only
    consulted), in the order first cited.

    ``book`` holds the keys; every page of the ``answers`` (consulted ones too) takes its key in
    it in order, so one pass over a whole store gives each page its store-wide key. Without a
    book, keys are handed out over ``answers`` alone.
    """
    book = book or KeyBook()
    known = book._keys  # read in the loop below for every source of every answer
    # The turns citing a page as dict keys: ordered, and each added once without a search.
    found: dict[str, tuple[CslItem, dict[tuple[str, int], None]]] = {}
    for answer in answers:
        spot = (answer.conversation_id, answer.turn)
        sources = answer.sources
        for positions, listed in ((answer.cited, True), (answer.consulted, consulted)):
            for index in positions:
                source = sources[index]
                canonical = canonical_url(source.url)
                item: CslItem | None = None
                if canonical not in known:
                    item = csl_item(source, "", accessed=answer.accessed)
                    book.key(canonical, item)
                if not listed:
                    continue
                entry = found.get(canonical)
                if entry is None:
                    item = item or csl_item(source, "", accessed=answer.accessed)
                    entry = found[canonical] = (item, {})
                entry[1][spot] = None
    result: list[Reference] = []
    for canonical, (item, where) in found.items():
        item["id"] = key = book.key(canonical, item)
        result.append(Reference(key, item, canonical, tuple(where)))
    return result


def answer_references(answer: Answer, *, consulted: bool = False) -> list[Reference]:
    """The references of one answer (keys over its sources alone), accessed now."""
    accessed = datetime.now(UTC).isoformat()
    citing = answer_citing(answer.conversation_id or "", -1, answer.sources, answer.text, accessed)
    return references([citing] if citing else [], consulted=consulted)
