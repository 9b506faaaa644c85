"""Pinned npm packages for tests, installed on first use into the checkout's ``.cache/npm``.

The folder is gitignored and kept between runs, so only the first run on a machine downloads
anything. Concurrent test processes serialise on a lock file; a package counts as installed
only once npm has finished (a marker file written last).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["CACHE", "npm_package"]

CACHE = Path(__file__).resolve().parents[2] / ".cache" / "npm"


def npm_package(name: str, version: str, *, timeout: float = 300) -> Path:
    """The installed folder of ``name@version`` (``node_modules/<name>``), installing it once.

    Skips the test when node or npm is missing (``.ci/run`` installs them and sets
    ``PPLX_NB_REQUIRE_NODE=1``, under which a missing one fails the test instead).
    """
    if shutil.which("node") is None or shutil.which("npm") is None:
        reason = "node and npm are needed to run an npm package (apt-get install nodejs npm)"
        if os.environ.get("PPLX_NB_REQUIRE_NODE") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    prefix = CACHE / f"{name.replace('/', '+')}@{version}"
    done = prefix / ".installed"
    package = prefix / "node_modules" / name
    prefix.mkdir(parents=True, exist_ok=True)
    with (prefix.parent / f"{prefix.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            result = subprocess.run(
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--no-save",
                    "--prefix",
                    str(prefix),
                    f"{name}@{version}",
                ],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if result.returncode != 0:
                pytest.fail(f"npm install {name}@{version} failed:\n{result.stderr[-2000:]}")
            done.write_text(f"{name}@{version}\n")
    return package
