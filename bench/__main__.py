"""``python -m bench [NAME ...]``: run the benchmark modules and update bench/RESULTS.md.

Each ``bench/bench_<name>.py`` defines ``TITLE`` and ``run() -> str`` (a Markdown section
with medians and ratios). Only the sections of the modules that ran are replaced in RESULTS.md.
"""

from __future__ import annotations

import importlib
import os
import platform
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "RESULTS.md"
HEADER = """# Benchmark results

`make bench` runs every `bench/bench_*.py`; each compares pplx_nb with the alternatives in the
same run and reports medians and ratios. The machine is a noisy 2-core box: read the ratios, not
the absolutes.
"""


def _section(name: str, body: str) -> str:
    return f"<!-- bench:{name} -->\n{body.strip()}\n<!-- /bench:{name} -->"


def main(argv: list[str]) -> int:
    names = argv or sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    os.environ.setdefault("PPLX_NB_OFFLINE", "1")
    for name in names:
        module = importlib.import_module(f"bench.bench_{name}")
        print(f"== {module.TITLE}", flush=True)
        start = time.perf_counter()
        body = module.run()
        took = time.perf_counter() - start
        stamp = time.strftime("%Y-%m-%d", time.gmtime())
        body = (
            f"## {module.TITLE}\n\n{body.strip()}\n\n"
            f"<sub>{stamp}, Python {platform.python_version()}, {os.cpu_count()} cores, "
            f"{took:.0f} s</sub>"
        )
        print(body, flush=True)
        _store(name, body)
    return 0


def _store(name: str, body: str) -> None:
    """Replace (or add) one section, re-reading the file so other runs' sections survive."""
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    block = _section(name, body)
    pattern = re.compile(
        rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S
    )
    found = pattern.search(text)
    text = pattern.sub(lambda _: block, text) if found else f"{text}\n{block}\n"
    RESULTS.write_text(text)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
