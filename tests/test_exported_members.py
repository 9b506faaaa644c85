"""The public surface: ``pplx_nb.__all__`` is sorted, complete and cheap to import."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pplx_nb
import pplx_nb.api
from pplx_nb import _errors

HEAVY = ("pandas", "ipywidgets", "mcp", "IPython", "httpx2")
README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
ERROR_NAME = re.compile(
    r"`([A-Z][A-Za-z]*(?:Error|Exceeded|Unknown|Lost|Unavailable|Failed|TimedOut|NotFound|"
    r"Corrupted|InProgress|Invalid|Input))`"
)


def public_names(module: types.ModuleType) -> set[str]:
    """Names a user can reach on ``module``: its lazy table plus what is defined in it."""
    names = {name for name in vars(module) if not name.startswith("_")}
    names |= set(getattr(module, "_LAZY", {}))
    submodules = {n for n in names if isinstance(getattr(module, n, None), types.ModuleType)}
    return names - submodules - {"annotations", "importlib", "TYPE_CHECKING", "Any"}


def test_all_is_sorted() -> None:
    assert pplx_nb.__all__ == sorted(pplx_nb.__all__)
    assert pplx_nb.api.__all__ == sorted(pplx_nb.api.__all__)


def test_all_lists_exactly_the_exported_names() -> None:
    exported = public_names(pplx_nb) | {"__version__"}
    assert set(pplx_nb.__all__) == exported


def test_every_exported_name_resolves_to_its_own_object() -> None:
    for name in pplx_nb.__all__:
        value = getattr(pplx_nb, name)
        if isinstance(value, type):
            assert value.__name__ == name
            assert value.__module__.startswith("pplx_nb")
    assert "Researcher" in dir(pplx_nb)
    for typed in ("SearchOptions", "WebSearchFilters"):
        assert typed in dir(pplx_nb), "users type their option dicts against it"


def test_every_error_a_user_may_catch_is_exported() -> None:
    classes = {
        name
        for name, value in vars(_errors).items()
        if isinstance(value, type) and issubclass(value, _errors.PplxError)
    }
    assert {"LeaseLost", "RemoteRunFailed", "RunTimedOut", "StoreUnavailable"} <= classes
    assert "SubmissionUnknown" in classes
    assert classes <= set(pplx_nb.__all__)


def test_every_error_the_readme_names_is_importable_from_pplx_nb() -> None:
    """The README tells users which errors to expect, by class name and by code: each is a
    PplxError importable from the top package, and an APIError has the attributes it lists."""
    named = set(ERROR_NAME.findall(README))
    assert {"SubmissionUnknown", "LeaseLost", "StoreUnavailable"} <= named, "the README moved"
    for name in named:
        error = getattr(pplx_nb, name, None)
        assert isinstance(error, type) and issubclass(error, pplx_nb.PplxError), name
        assert name in pplx_nb.__all__, name
    table = re.search(r"\| code \| meaning \|\n\|[-|]+\|\n(.*?)\n\n", README, flags=re.DOTALL)
    assert table is not None, "the README's error table moved"
    rows = table.group(1).splitlines()
    listed = {code for row in rows for code in re.findall(r"`([A-Z_]+)`", row.split("|")[1])}
    exported = {
        getattr(pplx_nb, name).code
        for name in pplx_nb.__all__
        if isinstance(getattr(pplx_nb, name), type)
        and issubclass(getattr(pplx_nb, name), pplx_nb.PplxError)
    }
    assert listed and listed <= exported, listed - exported
    error = pplx_nb.APIError("x", status_code=429, retry_after=2.0)
    for attribute in ("status_code", "retry_after", "reason", "request_id"):
        assert f"`{attribute}`" in README, attribute
        assert hasattr(error, attribute) and attribute not in error.details, attribute


def test_api_package_exports_what_it_defines() -> None:
    for name in pplx_nb.api.__all__:
        value = getattr(pplx_nb.api, name)
        assert value.__name__ == name and value.__module__.startswith("pplx_nb.api")


def test_import_does_not_pull_heavy_dependencies() -> None:
    probe = (
        "import json, sys, pplx_nb; "
        f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert json.loads(result.stdout) == []
