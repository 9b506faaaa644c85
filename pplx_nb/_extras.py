"""Optional dependencies: which extra brings each, and the error when one is missing.

``pip install pplx_nb`` is the core (client, store, jobs, worker, MCP server, simulator). The
notebook (IPython, ipywidgets, pandas) and Redis come with extras, imported where they are used;
a feature that needs one checks first with :func:`require`, so a missing package is a
:class:`~pplx_nb._errors.MissingExtra` naming the line that installs it, not a bare
``ModuleNotFoundError`` from deep inside a call.
"""

from __future__ import annotations

import importlib.util

from pplx_nb._errors import MissingExtra

__all__ = ["EXTRAS", "install_line", "require"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "notebook": ("IPython", "ipywidgets", "pandas"),
    "redis": ("redis",),
}
"""Each extra and the modules it brings (those pplx_nb imports)."""


def install_line(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'pplx_nb[notebook]'``."""
    return f"pip install 'pplx_nb[{extra}]'"


def require(extra: str, feature: str, modules: tuple[str, ...] | None = None) -> None:
    """Check that ``modules`` (default: all of ``extra``'s) can be imported, importing nothing.

    Raises:
        MissingExtra: naming ``feature``, the modules missing and :func:`install_line`.
    """
    missing = [name for name in modules or EXTRAS[extra] if not _findable(name)]
    if missing:
        raise MissingExtra(
            f"{feature} needs {' and '.join(missing)}, from pplx_nb's {extra} extra: install it "
            f"with `{install_line(extra)}` (into the environment this Python runs in), then "
            "start again.",
            extra=extra,
        )


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
