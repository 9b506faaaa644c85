"""``make test-pythons``: the notebooks and the smoke tests under every other CPython found here.

``make test`` runs the whole suite with one interpreter. This script looks for the other CPythons
3.11 or later on the machine (``python3.X`` on PATH, pyenv's versions folder, /usr/bin and
/usr/local/bin) and runs ``make test-smoke`` with each: the example notebooks under nbval and
``tests/test_smoke.py`` (the simulator's answers, a ``%%pplx`` cell, the MCP server), each
Python in its own venv under ``.venv-pythons/`` (kept between runs, rebuilt when pyproject.toml
changes). A version the package declares (pyproject's classifiers) that is not installed is
reported as skipped; the exit status is that of the versions that ran.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / ".venv-pythons"
SYSTEM_FOLDERS = (Path("/usr/local/bin"), Path("/usr/bin"))
_OLDEST = 11
_NEWEST_LOOKED_FOR = 20
_PROBE = "import platform; print(platform.python_implementation(), platform.python_version())"


def declared_minors() -> list[int]:
    """The 3.X versions pyproject's classifiers say the package supports."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = (
        re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c)
        for c in project.get("classifiers", [])
    )
    return sorted({int(match.group(1)) for match in found if match})


def _pyenv_candidates(minor: int) -> Iterator[Path]:
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    releases = []
    for folder in root.glob(f"3.{minor}.*"):
        if match := re.fullmatch(rf"3\.{minor}\.(\d+)", folder.name):
            releases.append((int(match.group(1)), folder / "bin" / f"python3.{minor}"))
    for _, path in sorted(releases, reverse=True):
        yield path


def candidates(minor: int) -> Iterator[Path]:
    """Where a CPython 3.``minor`` may be, most likely first."""
    if on_path := shutil.which(f"python3.{minor}"):
        yield Path(on_path)
    yield from _pyenv_candidates(minor)
    for folder in SYSTEM_FOLDERS:
        yield folder / f"python3.{minor}"


def probe(path: Path, minor: int) -> str | None:
    """The full version of the CPython 3.``minor`` at ``path``, or None if it is not one."""
    if not os.access(path, os.X_OK):
        return None
    try:
        done = subprocess.run([str(path), "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None  # a pyenv shim for a version pyenv does not have, a broken link
    implementation, _, version = done.stdout.strip().partition(" ")
    if done.returncode or implementation != "CPython" or not version.startswith(f"3.{minor}."):
        return None
    return version


def find(minor: int) -> tuple[Path, str] | None:
    """The first working CPython 3.``minor`` and its full version."""
    for path in candidates(minor):
        if version := probe(path, minor):
            return path, version
    return None


def run_smoke(python: Path, version: str) -> bool:
    """``make test-smoke`` in the venv of ``python``; whether it passed."""
    venv = VENVS / f"cpython-{version}"
    arguments = ["test-smoke", f"PYTHON={python}", f"VENV={venv.relative_to(ROOT)}"]
    print(f"== CPython {version}: make {' '.join(arguments)}", flush=True)
    make = [os.environ.get("MAKE", "make"), "--no-print-directory", "-C", str(ROOT)]
    started = time.monotonic()
    passed = subprocess.run([*make, *arguments], check=False).returncode == 0
    verdict = "passed" if passed else "FAILED"
    print(f"== CPython {version}: {verdict} in {time.monotonic() - started:.0f} s", flush=True)
    return passed


def main() -> int:
    """Run the smoke tests under each other CPython; report the ones not found."""
    own = sys.version_info.minor
    print(f"CPython {platform.python_version()} runs the whole suite (make test); the others:")
    outcomes: list[str] = []
    failed = False
    for minor in sorted({*range(_OLDEST, _NEWEST_LOOKED_FOR), *declared_minors()} - {own}):
        found = find(minor)
        if found is None:
            if minor in declared_minors():
                outcomes.append(f"skipped: CPython 3.{minor} not found")
            continue
        passed = run_smoke(*found)
        failed |= not passed
        outcomes.append(f"{'passed' if passed else 'FAILED'}: CPython {found[1]} ({found[0]})")
    print("\n".join(["", "test-pythons:", *(f"  {line}" for line in outcomes)]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
