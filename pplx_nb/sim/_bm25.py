"""BM25 ranking over a fixed set of documents: tokeniser, index, and a pure search function.

Plain Python (the simulator is part of the core install, which brings no numpy). Frequencies,
document norms and each term's contribution are single-precision floats (``array("f")`` rounds
every step), as the index always computed them, so rankings and scores stay what they were.
"""

from __future__ import annotations

import heapq
import math
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["BM25Index", "tokenize"]

_WORD = re.compile(r"[A-Za-z0-9]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

STOPWORDS = frozenset(
    """a about after all also an and any are as at be been before being but by can could did do
    does doing for from had has have having he her here his how i if in into is it its itself just
    me more most my no nor not of on once only or other our out over own same she should so some
    such than that the their them then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your""".split()  # noqa: SIM905
)


def _stem(word: str) -> str:
    # Plural folding only: enough for "tasks" to meet "task" without a stemmer's surprises.
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Lower-case search terms of ``text``: words, identifier parts, camelCase parts, no stopwords.

    ``ThreadPoolExecutor`` yields ``threadpoolexecutor`` plus ``thread``, ``pool``, ``executor``;
    ``run_until_complete`` yields ``run``, ``until``, ``complete``.
    """
    terms: list[str] = []
    for word in _WORD.findall(text):
        lower = word.lower()
        parts = _CAMEL.findall(word)
        if len(parts) > 1:
            terms.extend(_stem(part.lower()) for part in parts if part.lower() not in STOPWORDS)
        if lower not in STOPWORDS:
            terms.append(_stem(lower))
    return terms


@dataclass(frozen=True, slots=True)
class BM25Index:
    """An inverted index with Okapi BM25 scoring (``k1``, ``b``) over pre-tokenised documents.

    Postings are stored flat (one array of document ids, one of term frequencies, and each
    term's slice of them), which keeps the pickled index quick to load.
    """

    spans: dict[str, tuple[int, int]]
    doc_ids: array[int]
    freqs: array[float]
    doc_norms: array[float]
    k1: float = 1.2
    b: float = 0.75

    @property
    def size(self) -> int:
        """Number of indexed documents."""
        return len(self.doc_norms)

    @classmethod
    def build(
        cls, documents: Iterable[Sequence[str]], *, k1: float = 1.2, b: float = 0.75
    ) -> BM25Index:
        """Index documents given as term lists; a document's id is its position."""
        ids: dict[str, list[int]] = {}
        counts: dict[str, list[int]] = {}
        lengths: list[int] = []
        for doc_id, terms in enumerate(documents):
            lengths.append(len(terms))
            for term, count in Counter(terms).items():
                ids.setdefault(term, []).append(doc_id)
                counts.setdefault(term, []).append(count)
        average = _single(sum(lengths) / len(lengths)) if lengths else 1.0
        scaled = _singles(_single(b) * n for n in lengths)
        relative = _singles(x / _single(max(average, 1.0)) for x in scaled)
        padded = _singles(_single(1.0 - b) + x for x in relative)
        norms = array("f", [_single(k1) * x for x in padded])
        spans: dict[str, tuple[int, int]] = {}
        flat_ids: array[int] = array("i")
        flat_counts: array[float] = array("f")
        for term in sorted(ids):
            spans[term] = (len(flat_ids), len(flat_ids) + len(ids[term]))
            flat_ids.extend(ids[term])
            flat_counts.extend(counts[term])
        return cls(spans, flat_ids, flat_counts, norms, k1, b)

    def search(self, query: str, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` best ``(doc_id, score)`` pairs for ``query``, best first.

        Ties break on the lower document id, so equal input always gives equal output.
        """
        terms = sorted(set(tokenize(query)))
        total = self.size
        if not terms or total == 0 or limit <= 0:
            return []
        scores: dict[int, float] = {}
        boost = _single(self.k1 + 1.0)
        for term in terms:
            span = self.spans.get(term)
            if span is None:
                continue
            doc_ids = self.doc_ids[span[0] : span[1]]
            tf = self.freqs[span[0] : span[1]]
            idf = _single(math.log(1.0 + (total - len(doc_ids) + 0.5) / (len(doc_ids) + 0.5)))
            weighted = _singles(x * boost for x in _singles(idf * f for f in tf))
            damped = _singles(f + self.doc_norms[doc] for f, doc in zip(tf, doc_ids, strict=True))
            parts = _singles(x / y for x, y in zip(weighted, damped, strict=True))
            for doc, part in zip(doc_ids, parts, strict=True):
                scores[doc] = scores.get(doc, 0.0) + part
        found = (doc for doc, score in scores.items() if score > 0.0)
        ranked = heapq.nsmallest(limit, found, key=lambda doc: (-scores[doc], doc))
        return [(doc, scores[doc]) for doc in ranked]


def _singles(values: Iterable[float]) -> array[float]:
    """``values`` each rounded to single precision."""
    return array("f", values)


def _single(value: float) -> float:
    """``value`` rounded to single precision."""
    return array("f", (value,))[0]
