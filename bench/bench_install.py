"""Install size: the wheel, built as a release builds it, installed into fresh virtualenvs.

Each install is a new ``python -m venv`` under the system temp folder and ``pip install`` of the
wheel with one set of extras, from the package index as pip is configured here. Sizes count the
virtualenv's site-packages without pip and setuptools (which every virtualenv has); packages
count the distributions ``pip list`` shows, also without those two. The last row is what the
core installed before the extras split (the notebook and Redis packages were in the core).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench._util import ROOT, table

TITLE = "Install size (the wheel in fresh virtualenvs)"

TARGET_MB = 60
INSTALLS = {
    "`pip install pplx_nb` (the core: MCP server, worker, client, simulator)": "",
    "`pip install 'pplx_nb[notebook]'`": "[notebook]",
    "`pip install 'pplx_nb[notebook,redis]'` (what the core was before the extras)": (
        "[notebook,redis]"
    ),
}
_EVERY_VENV = {"pip", "setuptools", "pkg_resources", "_distutils_hack", "distutils-precedence.pth"}


@dataclass(frozen=True)
class _Installed:
    mb: float
    packages: int
    seconds: float
    largest: str
    extras_only: list[str]


def _site_packages(venv: Path) -> Path:
    (found,) = venv.glob("lib/python3*/site-packages")
    return found


def _size_mb(path: Path) -> float:
    return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file()) / 1e6


def _install(wheel: Path, extras: str, folder: Path) -> _Installed:
    venv = folder / f"venv{extras or '-core'}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    start = time.perf_counter()
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", f"pplx_nb{extras} @ {wheel.as_uri()}"],
        check=True, capture_output=True, timeout=1800,
    )  # fmt: skip
    took = time.perf_counter() - start
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    names = {package["name"].lower() for package in json.loads(listed)} - _EVERY_VENV
    sizes = {
        entry.name: _size_mb(entry) if entry.is_dir() else entry.stat().st_size / 1e6
        for entry in _site_packages(venv).iterdir()
        if entry.name.split("-")[0] not in _EVERY_VENV
    }
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:4]
    return _Installed(
        mb=sum(sizes.values()),
        packages=len(names),
        seconds=took,
        largest=", ".join(f"{name} {mb:.0f}" for name, mb in largest),
        extras_only=sorted(names & {"ipython", "ipywidgets", "pandas", "numpy", "redis"}),
    )


def run() -> str:
    """Build the wheel, install it each way, and return the Markdown section."""
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
        folder = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(folder), str(ROOT)],
            check=True, capture_output=True, timeout=900,
        )  # fmt: skip
        (wheel,) = folder.glob("pplx_nb-*.whl")
        wheel_mb = wheel.stat().st_size / 1e6
        results = {label: _install(wheel, extras, folder) for label, extras in INSTALLS.items()}
    core = next(iter(results.values()))
    rows = [
        [label, f"{r.mb:.0f} MB", r.packages, f"{r.seconds:.0f} s", r.largest]
        for label, r in results.items()
    ]
    verdict = "meets" if core.mb <= TARGET_MB else "misses"
    return "\n\n".join(
        [
            f"The wheel is {wheel_mb:.2f} MB. Sizes are the files in site-packages, without pip "
            "and setuptools; *largest* in MB.",
            table(["install", "size", "packages", "pip install took", "largest"], rows),
            f"The core takes **{core.mb:.0f} MB** in {core.packages} packages and {verdict} the "
            f"{TARGET_MB} MB target; of IPython, ipywidgets, pandas, numpy and redis it installs "
            f"{', '.join(core.extras_only) or 'none'}. The simulator ranks with BM25 in plain "
            "Python (numpy came with pandas before).",
        ]
    )


if __name__ == "__main__":
    print(run())
