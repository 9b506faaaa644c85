"""The public surface: ``pplx_nb.__all__`` is sorted, complete and cheap to import."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pplx_nb
import pplx_nb.api
from pplx_nb import _errors

HEAVY = ("pandas", "ipywidgets", "mcp", "IPython", "httpx2")


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


def test_every_error_a_user_may_catch_is_exported() -> None:
    classes = {
        name
        for name, value in vars(_errors).items()
        if isinstance(value, type) and issubclass(value, _errors.PplxError)
    }
    assert {"LeaseLost", "RemoteRunFailed", "RunTimedOut", "StoreUnavailable"} <= classes
    assert "SubmissionUnknown" in classes
    assert classes <= set(pplx_nb.__all__)


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
