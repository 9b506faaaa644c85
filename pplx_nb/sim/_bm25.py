"""BM25 ranking over a fixed set of documents: tokeniser, index, and a pure search function."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

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
    doc_ids: npt.NDArray[np.int32]
    freqs: npt.NDArray[np.float32]
    doc_norms: npt.NDArray[np.float32]
    k1: float = 1.2
    b: float = 0.75

    @property
    def size(self) -> int:
        """Number of indexed documents."""
        return int(self.doc_norms.shape[0])

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
        length = np.asarray(lengths, dtype=np.float32)
        average = float(length.mean()) if len(lengths) else 1.0
        norms = (k1 * (1.0 - b + b * length / max(average, 1.0))).astype(np.float32)
        spans: dict[str, tuple[int, int]] = {}
        flat_ids: list[int] = []
        flat_counts: list[int] = []
        for term in sorted(ids):
            spans[term] = (len(flat_ids), len(flat_ids) + len(ids[term]))
            flat_ids.extend(ids[term])
            flat_counts.extend(counts[term])
        return cls(
            spans,
            np.asarray(flat_ids, dtype=np.int32),
            np.asarray(flat_counts, dtype=np.float32),
            norms,
            k1,
            b,
        )

    def search(self, query: str, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` best ``(doc_id, score)`` pairs for ``query``, best first.

        Ties break on the lower document id, so equal input always gives equal output.
        """
        terms = sorted(set(tokenize(query)))
        total = self.size
        if not terms or total == 0 or limit <= 0:
            return []
        scores = np.zeros(total, dtype=np.float64)
        for term in terms:
            span = self.spans.get(term)
            if span is None:
                continue
            doc_ids = self.doc_ids[span[0] : span[1]]
            tf = self.freqs[span[0] : span[1]]
            df = doc_ids.shape[0]
            idf = math.log(1.0 + (total - df + 0.5) / (df + 0.5))
            scores[doc_ids] += idf * tf * (self.k1 + 1.0) / (tf + self.doc_norms[doc_ids])
        candidates = np.flatnonzero(scores > 0.0)
        if candidates.shape[0] > limit:
            top = np.argpartition(-scores[candidates], limit - 1)[:limit]
            threshold = scores[candidates[top]].min()
            candidates = candidates[scores[candidates] >= threshold]
        ranked = sorted(candidates.tolist(), key=lambda doc: (-scores[doc], doc))[:limit]
        return [(doc, float(scores[doc])) for doc in ranked]
