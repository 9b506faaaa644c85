"""A searchable corpus: documents plus their BM25 index, built once and cached on disk.

The default corpus is the Python 3.11 documentation frozen into the package (``_frozen.py``), so
the simulator answers the same on every Python; ``--corpus DIR`` indexes a folder of ``.md`` /
``.txt`` / ``.rst`` files instead. Indexing takes a moment, so the result is pickled under the user
cache directory and reused by every later process (only a file that no other user could have
written is unpickled); within a process each corpus is loaded once. The cache folder is an
argument, by default ``Settings.cache_dir()``.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pplx_nb._config import Settings
from pplx_nb._errors import ValidationError
from pplx_nb.sim._bm25 import BM25Index, tokenize
from pplx_nb.sim._documents import Document
from pplx_nb.sim._frozen import FROZEN_CORPUS, read_frozen

__all__ = ["Corpus", "directory_documents", "load_corpus"]

_FORMAT = 9
_TITLE_WEIGHT = 3
_EXTENSIONS = (".md", ".txt", ".rst")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`*+#])\1{2,}\s*$")

_loaded: dict[str, Corpus] = {}
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Corpus:
    """Documents, their index, the phrase answers use to name where they come from, and the
    ``YYYY-MM-DD`` date search results carry (when the documents were last written)."""

    label: str
    documents: tuple[Document, ...]
    index: BM25Index
    date: str = "1970-01-01"

    def search(self, query: str, limit: int) -> list[tuple[Document, float]]:
        """The ``limit`` best documents for ``query`` with their BM25 scores, best first."""
        return [(self.documents[i], score) for i, score in self.index.search(query, limit)]


def index_terms(document: Document) -> list[str]:
    """The terms a document is indexed under: its title weighted above section and body."""
    return [
        *tokenize(document.title) * _TITLE_WEIGHT,
        *tokenize(document.section),
        *tokenize(document.text),
    ]


def build_corpus(label: str, documents: list[Document], date: str = "1970-01-01") -> Corpus:
    """Index ``documents`` in memory."""
    index = BM25Index.build(index_terms(doc) for doc in documents)
    return Corpus(label, tuple(documents), index, date)


def _newest_date(files: list[Path]) -> str:
    newest = max((path.stat().st_mtime for path in files), default=0.0)
    return datetime.fromtimestamp(newest, UTC).date().isoformat()


def _directory_files(directory: Path) -> list[Path]:
    return sorted(
        path
        for path in directory.rglob("*")
        if path.suffix.lower() in _EXTENSIONS and path.is_file() and not path.name.startswith(".")
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _sections(text: str, default: str) -> list[tuple[str, str]]:
    """Split text at Markdown (``## Title``) and reStructuredText (underlined) headings."""
    sections: list[tuple[str, list[str]]] = [(default, [])]
    lines = text.splitlines()
    skip = False
    for n, line in enumerate(lines):
        if skip:
            skip = False
            continue
        following = lines[n + 1] if n + 1 < len(lines) else ""
        match = _HEADING.match(line)
        if match:
            sections.append((match.group(2), []))
        elif line.strip() and _RST_UNDERLINE.match(following) and len(following) >= len(line):
            sections.append((line.strip(), []))
            skip = True
        elif not _RST_UNDERLINE.match(line) or sections[-1][1]:
            sections[-1][1].append(line)
    return [(title, "\n".join(body).strip()) for title, body in sections]


def directory_documents(directory: Path) -> list[Document]:
    """One document per section (Markdown or reST heading) of each file under ``directory``."""
    documents: list[Document] = []
    for path in _directory_files(directory):
        text = path.read_text(encoding="utf-8", errors="replace")
        url = path.resolve().as_uri()
        name = path.relative_to(directory).as_posix()
        for heading, body in _sections(text, path.stem):
            if body:
                anchor = "" if heading == path.stem else f"#{_slug(heading)}"
                documents.append(Document(heading, url + anchor, body, name))
    return documents


def _fingerprint(directory: Path | None) -> str:
    digest = hashlib.sha256(f"{_FORMAT}|{sys.version}".encode())
    for path in [FROZEN_CORPUS] if directory is None else _directory_files(directory):
        stat = path.stat()
        digest.update(f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def _cache_path(directory: Path | None, cache_dir: Path) -> Path:
    kind = "corpus" if directory is None else "dircorpus"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return cache_dir / f"{kind}-{version}-{_fingerprint(directory)}.pkl"


def _fallback_dir() -> Path:
    """A per-user cache folder in the temp directory, for when the home is read-only."""
    uid = getattr(os, "getuid", lambda: None)()
    return Path(tempfile.gettempdir()) / (f"pplx_nb-{uid}" if uid is not None else "pplx_nb")


def _trusted(path: Path) -> bool:
    """Whether only this user can have written ``path`` and its folder.

    Unpickling runs code, so a cache file another user could plant (a shared temp folder, a
    group-writable directory) is rebuilt instead of loaded.
    """
    uid = getattr(os, "getuid", lambda: None)()
    if uid is None:
        return True
    try:
        stats = [path.parent.stat(), path.stat()]
    except OSError:
        return False
    return all(st.st_uid == uid and not st.st_mode & 0o022 for st in stats)


def _read_cache(path: Path) -> Corpus | None:
    if not _trusted(path):
        return None
    try:
        corpus = pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None
    return corpus if isinstance(corpus, Corpus) else None


def _write_cache(path: Path, corpus: Corpus) -> None:
    # Best effort: a read-only home just means rebuilding next time.
    for folder in (path.parent, _fallback_dir()):
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(pickle.dumps(corpus, protocol=pickle.HIGHEST_PROTOCOL))
            os.replace(tmp, folder / path.name)
            return
        except OSError:
            continue


def _build(directory: Path | None) -> Corpus:
    if directory is None:
        frozen = read_frozen()
        return build_corpus("the Python documentation", list(frozen.documents), frozen.date)
    return build_corpus(
        f"the local corpus {directory.name}",
        directory_documents(directory),
        _newest_date(_directory_files(directory)),
    )


def load_corpus(directory: Path | str | None = None, *, cache_dir: Path | None = None) -> Corpus:
    """The corpus for ``directory`` (default: the Python docs): from memory, disk cache or built.

    Built corpora are cached under ``cache_dir`` (default: ``Settings.from_env().cache_dir()``).
    A folder that does not exist or holds no documents is a VALIDATION_ERROR.
    """
    folder = Path(directory).expanduser().resolve() if directory is not None else None
    if folder is not None and not folder.is_dir():
        raise ValidationError(
            f"The corpus folder {directory} does not exist. Point --corpus at a folder of .md, "
            ".txt or .rst files, or leave it out to use the Python docs.",
            corpus=str(directory),
        )
    key = str(folder)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        path = _cache_path(folder, cache_dir or Settings.from_env().cache_dir())
        corpus = _read_cache(path) or _read_cache(_fallback_dir() / path.name)
        if corpus is None:
            corpus = _build(folder)
            _write_cache(path, corpus)
        if folder is not None and not corpus.documents:
            raise ValidationError(
                f"The corpus folder {directory} holds no text files (.md, .txt, .rst) to answer "
                "from. Point --corpus at a folder of documents, or leave it out to use the Python "
                "docs.",
                corpus=str(directory),
            )
        _loaded[key] = corpus
        return corpus
