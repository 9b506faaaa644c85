"""The simulator's default corpus: the Python documentation, frozen and shipped as package data.

Reading the running interpreter's own documentation made the simulator answer differently on
every Python version; the frozen file makes the answers, sources and dates the same everywhere.
``python -m pplx_nb.sim.build_corpus`` writes it. The file is gzip-compressed JSON::

    {"format": 1, "python": "3.11.7", "date": "YYYY-MM-DD", "license": "...",
     "documents": [[title, url, text, section], ...]}

The text is CPython's docstrings and ``pydoc`` topics, under the PSF License Agreement shipped
beside it (``python_docs_LICENSE.txt``).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pplx_nb.sim._documents import Document

__all__ = ["FROZEN_CORPUS", "FROZEN_LICENSE", "FrozenCorpus", "read_frozen", "write_frozen"]

FROZEN_CORPUS = Path(__file__).with_name("python_docs.json.gz")
FROZEN_LICENSE = Path(__file__).with_name("python_docs_LICENSE.txt")
_FORMAT = 1
_LICENSE = (
    "Docstrings and pydoc topics of CPython {python}, Copyright (c) Python Software Foundation, "
    "used under the PSF License Agreement (python_docs_LICENSE.txt)."
)


@dataclass(frozen=True, slots=True)
class FrozenCorpus:
    """The documents of one Python's documentation, that Python's version and the corpus date."""

    documents: tuple[Document, ...]
    python: str
    date: str


def write_frozen(path: Path, corpus: FrozenCorpus) -> None:
    """Write ``corpus`` to ``path``; the same corpus always gives the same bytes."""
    payload: dict[str, Any] = {
        "format": _FORMAT,
        "python": corpus.python,
        "date": corpus.date,
        "license": _LICENSE.format(python=corpus.python),
        "documents": [list(doc) for doc in corpus.documents],
    }
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    # mtime=0 keeps the gzip header free of the build time, so a rebuild changes no byte.
    path.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))


def read_frozen(path: Path = FROZEN_CORPUS) -> FrozenCorpus:
    """The corpus in ``path`` (by default the one shipped with pplx_nb)."""
    payload = json.loads(gzip.decompress(path.read_bytes()))
    if payload.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a format {_FORMAT} corpus; rebuild it")
    documents = tuple(Document(*fields) for fields in payload["documents"])
    return FrozenCorpus(documents, payload["python"], payload["date"])
