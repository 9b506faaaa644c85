"""``make test-pythons`` finds the other CPythons, and says which declared ones are missing."""

from __future__ import annotations

import sys
from pathlib import Path

import other_pythons
import pytest


def fake_python(root: Path, folder: str, minor: int, answer: str) -> Path:
    """An executable in pyenv's layout under ``root`` that answers the version probe ``answer``."""
    path = root / "versions" / folder / "bin" / f"python3.{minor}"
    path.parent.mkdir(parents=True)
    path.write_text(f"#!/bin/sh\necho {answer}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("passes", [True, False])
def test_the_newest_other_cpython_runs_and_a_missing_declared_one_is_reported_skipped(
    passes: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    own = sys.version_info.minor
    minor = 12 if own != 12 else 13
    fake_python(tmp_path, f"3.{minor}.0", minor, f"CPython 3.{minor}.0")
    newest = fake_python(tmp_path, f"3.{minor}.4", minor, f"CPython 3.{minor}.4")
    fake_python(tmp_path, f"3.{minor}.9", minor, f"PyPy 3.{minor}.9")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    monkeypatch.setattr(other_pythons, "SYSTEM_FOLDERS", ())
    ran: list[tuple[Path, str]] = []

    def run_smoke(python: Path, version: str) -> bool:
        ran.append((python, version))
        return passes

    monkeypatch.setattr(other_pythons, "run_smoke", run_smoke)

    assert other_pythons.main() == (0 if passes else 1)
    assert ran == [(newest, f"3.{minor}.4")]
    report = capsys.readouterr().out.split("test-pythons:\n", 1)[1].splitlines()
    verdict = "passed" if passes else "FAILED"
    expected = {m: f"  skipped: CPython 3.{m} not found" for m in other_pythons.declared_minors()}
    expected[minor] = f"  {verdict}: CPython 3.{minor}.4 ({newest})"
    assert report == [line for m, line in sorted(expected.items()) if m != own]
