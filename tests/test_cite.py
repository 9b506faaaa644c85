"""Sources as references: canonical URLs, stable keys, and BibTeX / CSL-JSON / RIS read back by
the field's own readers (bibtexparser 2, the CSL-JSON schema, rispy).

``tests/data/csl-data.json`` is the Citation Style Language's input schema
(citation-style-language/schema, ``schemas/input/csl-data.json``, MIT License).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest
import rispy
from bibtexparser.entrypoint import parse_string
from pylatexenc import latexwalker
from pylatexenc.latex2text import LatexNodes2Text, MacroTextSpec, get_default_latex_context_db

from pplx_nb import ConversationStore, Message, Source, ValidationError, cite
from pplx_nb._models import Answer
from pplx_nb._references import canonical_url
from pplx_nb.backends import open_store

SCHEMA = json.loads((Path(__file__).parent / "data" / "csl-data.json").read_text("utf-8"))


def _answer_message(text: str, *sources: Source, when: str = "2026-11-20T10:00:00Z") -> Message:
    return Message(role="assistant", content=text, sources=list(sources), timestamp=when)


def _conversation(store: ConversationStore, question: str, answer: Message) -> str:
    conversation = store.create([Message(role="user", content=question), answer])
    return conversation.conversation_id


ASYNCIO = Source(
    url="https://docs.python.org/3/library/asyncio-task.html?utm_source=feed#asyncio.wait_for",
    title="Coroutines and Tasks",
    date="2024-05-17",
)
ASYNCIO_AGAIN = Source(
    url="http://www.docs.python.org/3/library/asyncio-task.html/#asyncio.wait_for"
)
QUEUES = Source(url="https://docs.python.org/3/library/asyncio-queue.html", title="Queues")


@pytest.mark.parametrize(
    ("url", "canonical"),
    [
        ("http://www.Example.org/a/b/?utm_source=x&b=2&a=1", "https://example.org/a/b?a=1&b=2"),
        ("https://docs.python.org/3/x.html#a.b", "https://docs.python.org/3/x.html#a.b"),
        ("https://example.org/p#:~:text=hello", "https://example.org/p"),
        ("https://example.org/p#top:~:text=hello", "https://example.org/p#top"),
        ("https://example.org/?fbclid=abc", "https://example.org"),
        ("https://example.org:8443/x", "https://example.org:8443/x"),
        ("https://example.org:443/x", "https://example.org/x"),
    ],
)
def test_a_page_has_one_canonical_url(url: str, canonical: str) -> None:
    assert canonical_url(url) == canonical


def test_a_source_becomes_a_csl_item_with_its_identifiers() -> None:
    answer = Answer(
        text="See [1], [2] and [3].",
        sources=[
            ASYNCIO,
            Source(url="https://doi.org/10.1145/3368089.3409741", title="An empirical study"),
            Source(
                url="https://arxiv.org/abs/2101.00001v2", title="Attention, again", date="1/5/2021"
            ),
        ],
    )
    web, article, preprint = (r.item for r in cite.collect(answer))
    assert web["type"] == "webpage"
    assert web["container_title"] == "docs.python.org"
    assert web["issued"] == {"date_parts": [[2024, 5, 17]]}
    assert "accessed" in web
    assert web["id"] == "python2024coroutines-rrh"
    assert article["type"] == "article-journal"
    assert article["DOI"] == "10.1145/3368089.3409741"
    assert "container_title" not in article  # doi.org only redirects
    assert preprint["type"] == "article"
    assert preprint["DOI"] == "10.48550/arXiv.2101.00001"
    assert preprint["number"] == "arXiv:2101.00001"
    assert preprint["issued"] == {"date_parts": [[2021, 1, 5]]}


def test_keys_are_readable_tagged_by_their_page_and_the_same_page_is_one_reference() -> None:
    answer = Answer(
        text="[1] [2] [3] [4]",
        sources=[
            ASYNCIO,
            ASYNCIO_AGAIN,  # the same page: one reference
            Source(url="https://docs.python.org/3/x", title="Coroutines", date="2024-01-01"),
            Source(url="https://docs.python.org/3/y", title="Coroutines!", date="2024"),
        ],
    )
    keys = [r.key for r in cite.collect(answer)]
    assert keys == [
        "python2024coroutines-rrh",
        "python2024coroutines-irk",
        "python2024coroutines-uwf",
    ]


def test_a_page_keeps_its_key_across_conversations_and_as_the_store_grows(
    logs_dir: Path,
) -> None:
    store = open_store(root=logs_dir)
    rival = Source(url="https://docs.python.org/other", title="Coroutines", date="2024-02-02")
    first = _conversation(store, "q1", _answer_message("[1]", ASYNCIO))
    second = _conversation(store, "q2", _answer_message("[1] [2]", rival, ASYNCIO_AGAIN))
    whole = {r.canonical: r.key for r in cite.collect(store)}
    alone = {r.canonical: r.key for r in cite.collect([second], store=store)}
    assert alone == whole
    assert whole[canonical_url(ASYNCIO.url)] == "python2024coroutines-rrh"
    # A newer conversation citing a page with the same stem moves no key.
    _conversation(
        store,
        "q3",
        _answer_message(
            "[1]", Source(url="https://docs.python.org/z", title="Coroutines", date="2024")
        ),
    )
    grown = {r.canonical: r.key for r in cite.collect(store)}
    assert {k: grown[k] for k in whole} == whole
    assert len(set(grown.values())) == 3
    cited = {r.key: r.cited_by for r in cite.collect(store)}
    assert cited["python2024coroutines-rrh"] == ((first, 1), (second, 1))


def _keys(text: str) -> dict[str, str]:
    """Each BibTeX entry's URL and key."""
    return {e.fields_dict["url"].value: e.key for e in parse_string(text).entries}


def test_deleting_an_older_conversation_moves_no_key(logs_dir: Path) -> None:
    """The pages left keep the keys they had, in a store's export and in a conversation's."""
    store = open_store(root=logs_dir)
    pages = [
        Source(url=f"https://docs.python.org/3/{name}", title="Coroutines", date="2024")
        for name in ("older", "newer", "later", "last")
    ]
    older = _conversation(store, "q1", _answer_message("[1] [2]", pages[0], pages[1]))
    newer = _conversation(store, "q2", _answer_message("[1] [2] [3]", *pages[1:]))
    before = _keys(cite.to_bibtex(store))
    assert len(set(before.values())) == 4
    store.delete(older)
    after = _keys(cite.to_bibtex(store))
    assert after == {url: before[url] for url in after}
    assert set(after) == {p.url for p in pages[1:]}
    assert _keys(cite.to_bibtex([newer], store=store)) == after


def test_two_pages_drawing_the_same_key_get_two_keys() -> None:
    """Three letters of a hash tell about 17,576 pages of one stem apart: should two draw the
    same, the one seen later takes a fourth letter (and both stay readable)."""
    seen: dict[str, Source] = {}
    for n in range(2000):
        source = Source(url=f"https://example.org/{n}", title="Same", date="2024")
        key = cite.collect(Answer(text="[1]", sources=[source]))[0].key
        if key in seen:
            pair = [seen[key], source]
            break
        seen[key] = source
    else:
        pytest.fail("no two of 2,000 pages drew the same three letters")
    keys = [r.key for r in cite.collect(Answer(text="[1] [2]", sources=pair))]
    assert keys[0] == key and keys[1] != key
    assert re.fullmatch(r"example2024same-[a-z]{4}", keys[1])


def test_only_cited_sources_unless_consulted_is_asked(logs_dir: Path) -> None:
    answer = Answer(text="Only [1] is cited.", sources=[ASYNCIO, QUEUES])
    assert [r.item["title"] for r in cite.collect(answer)] == ["Coroutines and Tasks"]
    everything = cite.collect(answer, consulted=True)
    assert [r.item["title"] for r in everything] == ["Coroutines and Tasks", "Queues"]


def test_the_store_filters_choose_conversations(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    _conversation(store, "about tasks", _answer_message("[1]", ASYNCIO))
    _conversation(store, "about queues", _answer_message("[1]", QUEUES))
    titles = [r.item["title"] for r in cite.collect(store, text="queues")]
    assert titles == ["Queues"]


def test_no_sources_is_an_empty_bibliography_not_an_error(logs_dir: Path) -> None:
    store = open_store(root=logs_dir)
    cid = _conversation(store, "q", _answer_message("No sources here."))
    assert cite.to_bibtex([cid], store=store) == ""
    assert json.loads(cite.to_csl_json([cid], store=store)) == []
    assert cite.to_ris([cid], store=store) == ""


def test_an_unknown_format_names_the_option() -> None:
    with pytest.raises(ValidationError, match="format='endnote' is not a citation format"):
        cite.export(Answer(text="x"), "endnote")


_HOSTILE = [
    "{", "}", "%", "&", "#", "_", "\\", "$", "~", "^", "--", "``", "''", "?`", "\n", "\t",
    "ü", "ß", "日本語", "Ω", "😀", "é", "\\textbf{x}", "{\\", "}}", "%%", "a_b", "@", '"',
]  # fmt: skip


def _hostile_title(rng: random.Random) -> str:
    words = ["The", "state", "of", "Python", "2024", "guide", "x"]
    return " ".join(rng.choice(_HOSTILE + words) for _ in range(rng.randint(1, 12)))


def _hostile_sources(count: int) -> list[Source]:
    rng = random.Random(20261128)
    return [
        Source(
            url=f"https://site{n % 37}.example.org/p/{n}/a_b%20c?q={n}&r=#frag",
            title=_hostile_title(rng),
            date=f"20{n % 25:02d}-0{n % 9 + 1}-1{n % 9}",
        )
        for n in range(count)
    ]


def _thousand() -> Answer:
    """An answer with 1,000 hostile sources (markers go to [999]: the rest are consulted)."""
    return Answer(text=" ".join(f"[{n}]" for n in range(1, 1000)), sources=_hostile_sources(1000))


# pylatexenc's table maps \textasciicircum to U+02C6 (a modifier letter) where LaTeX prints "^".
_DECODER_QUIRKS = str.maketrans({"\u02c6": "^"})


def _latex_decoder() -> Callable[[str], str]:
    """The decoder of bibtexparser's ``LatexDecodingMiddleware(keep_braced_groups=False)``, for
    the fields a test reads: the middleware decodes every field of every entry and pylatexenc
    builds its macro table again for each value, 5,000 times for 1,000 entries (most of the
    test's time); here the table is built once and only titles and organizations are decoded."""
    context = get_default_latex_context_db()
    context.add_context_category(
        "bibtexparse-default-context",
        prepend=True,
        macros=[MacroTextSpec("url", simplify_repl="%s")],
    )
    decoder = LatexNodes2Text(latex_context=context, keep_braced_groups=False, math_mode="verbatim")
    walker_context = latexwalker.get_default_latex_context_db()

    def decode(value: str) -> str:
        text: str = decoder.latex_to_text(value, latex_context=walker_context)
        return text

    return decode


def test_a_thousand_hostile_titles_round_trip_through_bibtexparser() -> None:
    references = cite.collect(_thousand(), consulted=True)
    assert len(references) == 1000
    library = parse_string(cite.to_bibtex(_thousand(), consulted=True))
    assert library.failed_blocks == []
    entries = {entry.key: entry for entry in library.entries}
    assert len(entries) == 1000
    decode = _latex_decoder()
    lost = []
    for reference in references:
        entry = entries[reference.key]
        item = reference.item
        title = decode(entry.fields_dict["title"].value).translate(_DECODER_QUIRKS)
        if (
            title != item["title"]
            or decode(entry.fields_dict["organization"].value) != item["container_title"]
        ):
            lost.append((item["title"], title))
    assert lost == []


def test_urls_stay_verbatim_in_bibtex() -> None:
    raw = parse_string(cite.to_bibtex(Answer(text="[1]", sources=_hostile_sources(1))))
    assert (
        raw.entries[0].fields_dict["url"].value
        == "https://site0.example.org/p/0/a_b%20c?q=0&r=#frag"
    )


def test_every_csl_json_export_validates_against_the_schema() -> None:
    data = json.loads(
        cite.to_csl_json(
            Answer(
                text="[1] [2] [3]",
                sources=[
                    ASYNCIO,
                    Source(url="https://doi.org/10.1000/xyz", title="DOI"),
                    Source(url="https://arxiv.org/abs/2101.00001", title="arXiv"),
                ],
            )
        )
    )
    jsonschema.validate(data, SCHEMA)
    thousand = json.loads(cite.to_csl_json(_thousand(), consulted=True))
    jsonschema.validate(thousand, SCHEMA)
    expected = [r.item["title"] for r in cite.collect(_thousand(), consulted=True)]
    assert [item["title"] for item in thousand] == expected


def test_ris_reads_back_with_rispy() -> None:
    references = cite.collect(_thousand(), consulted=True)
    records = rispy.loads(cite.to_ris(_thousand(), consulted=True))
    assert len(records) == 1000
    for record, reference in zip(records, references, strict=True):
        assert record["id"] == reference.key
        assert record["title"] == reference.item["title"]
        assert record["urls"] == [reference.item["URL"]]
        assert record["type_of_reference"] == "ELEC"


def test_an_answer_writes_its_own_bibtex() -> None:
    answer = Answer(text="Only [1] is cited.", sources=[ASYNCIO, QUEUES])
    entries = parse_string(answer.to_bibtex()).entries
    assert [e.key for e in entries] == ["python2024coroutines-rrh"]
    assert len(parse_string(answer.to_bibtex(consulted=True)).entries) == 2
