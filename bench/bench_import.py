"""Import cost: ``import pplx_nb`` (and, for information, ``import pplx_nb.api``).

Each measurement is a fresh interpreter, so nothing is cached in ``sys.modules``; the interpreter's
own start-up is excluded. The alternatives a user would otherwise import are measured alongside.
"""

from __future__ import annotations

from bench._util import fresh_interpreter_seconds, median, table

TITLE = "Import time (fresh interpreters)"

REPEAT = 5
TARGET_SECONDS = 0.25
PROBES = {
    "`import pplx_nb`": "import pplx_nb",
    "`import pplx_nb.api` (the client: httpx2 + pydantic)": "import pplx_nb.api",
    "`import httpx2`": "import httpx2",
    "`import openai`": "import openai",
    "`import perplexity` (perplexityai SDK)": "import perplexity",
}


def run() -> str:
    """Median import time of each probe over REPEAT fresh interpreters."""
    results = {name: fresh_interpreter_seconds(code, REPEAT) for name, code in PROBES.items()}
    ours = median(results["`import pplx_nb`"])
    rows = [
        (
            name,
            f"{median(times) * 1000:.1f} ms",
            f"{min(times) * 1000:.1f}–{max(times) * 1000:.1f} ms",
            f"{median(times) / ours:.1f}×",
        )
        for name, times in results.items()
    ]
    verdict = "meets" if ours <= TARGET_SECONDS else "misses"
    return "\n\n".join(
        [
            f"Median of {REPEAT} fresh interpreters each.",
            table(["import", "median", "range", "time vs `import pplx_nb`"], rows),
            f"`import pplx_nb` takes **{ours * 1000:.1f} ms** and {verdict} the "
            f"{TARGET_SECONDS * 1000:.0f} ms target: names load lazily, so the client, pandas, "
            "ipywidgets and mcp are imported only when first used.",
        ]
    )
