"""``python -m pplx_nb.sim.build_corpus``: freeze the running Python's documentation as a corpus.

The simulator's default corpus ships frozen (``python_docs.json.gz``) so that it answers the same on
every Python. It was built with CPython 3.11, the interpreter the example notebooks were saved with;
rebuild it with that interpreter after changing how documents are read (``_stdlib_docs.py``)::

    python3.11 -m pplx_nb.sim.build_corpus

It writes the corpus and, beside it, the PSF License Agreement that the documentation is under
(``LICENSE.txt`` of the interpreter's standard library).
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
from datetime import date, datetime
from pathlib import Path

from pplx_nb.sim._frozen import FROZEN_CORPUS, FROZEN_LICENSE, FrozenCorpus, write_frozen
from pplx_nb.sim._stdlib_docs import stdlib_documents, stdlib_root

__all__ = ["freeze", "main"]


def python_date() -> str:
    """When this interpreter (and so its documentation) was built, as ``YYYY-MM-DD``."""
    built = " ".join(platform.python_build()[1].split()[:3])
    try:
        return datetime.strptime(built, "%b %d %Y").date().isoformat()
    except ValueError:
        return "1970-01-01"


def freeze(day: str | None = None) -> FrozenCorpus:
    """The running interpreter's documentation as a corpus dated ``day`` (default: its build)."""
    return FrozenCorpus(tuple(stdlib_documents()), platform.python_version(), day or python_date())


def _day(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a YYYY-MM-DD date") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pplx_nb.sim.build_corpus",
        description="Freeze this Python's documentation as the simulator's default corpus.",
    )
    parser.add_argument(
        "--output", type=Path, default=FROZEN_CORPUS, help=f"default: {FROZEN_CORPUS}"
    )
    parser.add_argument(
        "--date", type=_day, default=None, help="the date results carry (default: the build date)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Write the corpus and its license; print what was written."""
    args = _parser().parse_args(argv)
    license_text = stdlib_root() / "LICENSE.txt"
    if not license_text.is_file():
        print(
            f"error: {license_text} is missing; build with a Python that ships its LICENSE.txt "
            "(python.org or pyenv builds do)",
            file=sys.stderr,
        )
        return 2
    corpus = freeze(args.date)
    output: Path = args.output
    write_frozen(output, corpus)
    shutil.copyfile(license_text, output.with_name(FROZEN_LICENSE.name))
    size = output.stat().st_size
    print(f"{output}: {len(corpus.documents)} documents of Python {corpus.python}, {size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
