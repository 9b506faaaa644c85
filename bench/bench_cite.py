"""Citations and reports: exporting a large store's references, and rendering a report.

Every alternative runs in the same process on the same data:

- the references of 10,000 conversations (20,000 answers citing 3,000 distinct pages) as BibTeX,
  CSL-JSON and RIS with ``pplx_nb.cite``, against pandoc converting the same CSL-JSON to biblatex
  (``pandoc -f csljson -t biblatex``), when pandoc is installed, and the store's part of an
  export alone (every document read and decoded by ``store.documents()``);
- a report of 25 questions citing 50 references: ``cite.to_report`` (Markdown, ``.bib`` and
  the HTML rendered by citeproc-py) against ``pandoc --citeproc`` rendering the Markdown it wrote.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from pathlib import Path

from bench._util import median, ratio, scratch, table, timed
from pplx_nb import cite
from pplx_nb._models import Message, Source
from pplx_nb.backends import open_store
from pplx_nb.cite._documents import cycles_uncollected
from pplx_nb.store import ConversationStore

TITLE = "Citations and reports"

_SITES = ["docs.python.org", "peps.python.org", "realpython.com", "stackoverflow.com"]
_WORDS = ["asyncio", "task", "cancel", "timeout", "queue", "pathlib", "typing", "protocol"]


def _page(n: int) -> Source:
    site = _SITES[n % len(_SITES)]
    title = " ".join(_WORDS[(n + i) % len(_WORDS)] for i in range(4)).title()
    return Source(url=f"https://{site}/page/{n}", title=title, date=f"20{n % 25:02d}-05-17")


def _fill(store: ConversationStore, conversations: int, pages: int, cited: int) -> list[str]:
    rng = random.Random(28)
    ids = []
    for _ in range(conversations):
        messages = []
        for turn in range(2):
            chosen = [_page(rng.randrange(pages)) for _ in range(cited)]
            markers = " ".join(f"[{i + 1}]" for i in range(cited))
            messages.append(Message(role="user", content=f"Question {turn} about asyncio?"))
            messages.append(
                Message(
                    role="assistant",
                    content=f"An answer {markers}.",
                    sources=chosen,
                    timestamp="2026-11-28T01:00:00Z",
                )
            )
        ids.append(store.create(messages).conversation_id)
    return ids


def _export_rows(store: ConversationStore, pandoc: str | None) -> str:
    rows = []
    base = median(timed(lambda: cite.to_bibtex(store), repeat=3))
    rows.append(["`cite.to_bibtex(store)`", f"{base:.2f} s", "1.00×"])
    for name, call in (("CSL-JSON", cite.to_csl_json), ("RIS", cite.to_ris)):
        took = median(timed(lambda call=call: call(store), repeat=3))  # type: ignore[misc]
        rows.append(
            [
                f"`cite.to_{name.lower().replace('-', '_')}(store)`",
                f"{took:.2f} s",
                ratio(took, base),
            ]
        )
    took = median(timed(lambda: _read_all(store), repeat=3))
    rows.append(
        [
            "the store's part: `store.documents()` reading every document",
            f"{took:.2f} s",
            ratio(took, base),
        ]
    )
    if pandoc is not None:
        csl = cite.to_csl_json(store)

        def convert() -> None:
            subprocess.run(
                [pandoc, "-f", "csljson", "-t", "biblatex"],
                input=csl,
                text=True,
                capture_output=True,
                check=True,
                timeout=600,
            )

        took = median(timed(convert, repeat=3))
        rows.append(
            [
                "pandoc: the same CSL-JSON → biblatex (no reading the store)",
                f"{took:.2f} s",
                ratio(took, base),
            ]
        )
    count = len(cite.collect(store))
    return (
        "### The references of 10,000 conversations (target ≤ 2 s)\n\n"
        f"20,000 answers citing {count:,} distinct pages (5 sources each); keys over the whole "
        "store. Median of 3.\n\n" + table(["export", "median", "vs BibTeX"], rows)
    )


def _read_all(store: ConversationStore) -> None:
    """Every document read and decoded, as an export reads them, and nothing more."""
    with cycles_uncollected():
        for _ in store.documents():
            pass


def _report_rows(store: ConversationStore, ids: list[str], folder: Path, pandoc: str | None) -> str:
    path = folder / "report" / "report.md"
    report = cite.to_report(store, ids, path, style="apa", force=True)
    ours = median(
        timed(lambda: cite.to_report(store, ids, path, style="apa", force=True), repeat=3)
    )
    rows = [
        ["`cite.to_report` (Markdown, .bib, HTML by citeproc-py)", f"{ours * 1e3:.0f} ms", "1.00×"]
    ]
    if pandoc is not None:

        def render() -> None:
            subprocess.run(
                [pandoc, "--citeproc", report.markdown.name, "-o", "pandoc.html"],
                cwd=report.markdown.parent,
                capture_output=True,
                check=True,
                timeout=600,
            )

        took = median(timed(render, repeat=3))
        rows.append(
            [
                "`pandoc --citeproc report.md -o report.html`",
                f"{took * 1e3:.0f} ms",
                ratio(took, ours),
            ]
        )
    return (
        f"### A report of {report.sections} questions citing {report.references} references\n\n"
        "APA, median of 3.\n\n" + table(["renderer", "median", "vs ours"], rows)
    )


def run() -> str:
    pandoc = shutil.which("pandoc")
    load = os.getloadavg()[0]
    with scratch("cite-") as folder:
        root = Path(folder)
        start = time.perf_counter()
        big = open_store(root=root / "big")
        _fill(big, 10_000, 3_000, 5)
        filled = time.perf_counter() - start
        small = open_store(root=root / "small")
        ids = _fill(small, 13, 50, 4)
        sections = [_export_rows(big, pandoc), _report_rows(small, ids, root, pandoc)]
    note = "" if pandoc else " pandoc is not installed: its rows are missing."
    # The machine is shared: how busy it was says how far the wall times stretched.
    busy = f" Load average {load:.1f} → {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores."
    return "\n\n".join(sections) + f"\n\n<sub>Store filled in {filled:.0f} s.{busy}{note}</sub>"
