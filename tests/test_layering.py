"""The layers import one another one way only, and never another package's private modules.

Read statically (``ast``) from every module of pplx_nb, imports inside functions and under
``TYPE_CHECKING`` included: a lazy import is still a dependency. The table below is the data flow of
the README's architecture section: adapters (``notebook``, ``mcp``, ``worker``) -> ``research`` ->
``context`` / ``api`` / ``backends`` -> ``store`` / ``jobs``. The top-level ``pplx_nb/_*.py``
modules (settings, errors, models, rendering, ...) are shared by every layer and import only one
another. A package's ``__main__`` listed in the table (``store.__main__``) is a program over its
package, a layer of its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pplx_nb

ROOT = Path(pplx_nb.__file__).parent

SHARED = "shared"
"""The top-level private modules: ``_config``, ``_errors``, ``_models``, ``_markdown``, ..."""

MAY_IMPORT: dict[str, frozenset[str]] = {
    SHARED: frozenset(),
    # Citations read a store through its public methods only (a protocol), never build one.
    "cite": frozenset(),
    "sim": frozenset(),
    # Spend caps, the ledger and the estimate: shared data only; the store opens the ledger.
    "budget": frozenset(),
    # The API layer starts the offline simulator and checks the budget it is given before
    # paying; it never sees conversations or jobs.
    "api": frozenset({"sim", "budget"}),
    "context": frozenset({"api"}),
    # The store and the job side never import each other: they ask each other through seams
    # (JobStates, AnswerLookup) that the backends layer fills when it opens them together.
    "store": frozenset(),
    "jobs": frozenset(),
    "backends": frozenset({"store", "jobs", "budget"}),
    # `python -m pplx_nb.store migrate` opens a store at each end, as any program does.
    "store.__main__": frozenset({"store", "jobs", "backends"}),
    # Researcher.costs reads the spend as the export reads the store: one DataFrame of turns.
    "research": frozenset({"api", "context", "backends", "store", "jobs", "budget", "export"}),
    "export": frozenset({"backends", "store", "cite"}),
    # Checks a saved notebook's answers against the store it opens.
    "provenance": frozenset({"backends", "store"}),
    "notebook": frozenset({"research", "export", "cite"}),
    # The MCP server confines attachments to PPLX_NB_FILE_ROOTS before the Researcher sees them,
    # reads a conversation resource as the Markdown export writes it, and cites sources.
    "mcp": frozenset({"research", "context", "export", "cite"}),
    "worker": frozenset({"research", "backends", "jobs"}),
}
"""Which other layers each layer may import (its own modules, the shared ones and the root
package's ``__version__`` are always allowed)."""


class Edge(NamedTuple):
    """``importer`` imports ``target`` (a module), naming ``name`` from it (None: the module)."""

    importer: str
    target: str
    name: str | None
    line: int

    def __str__(self) -> str:
        what = f"{self.target}.{self.name}" if self.name else self.target
        return f"{self.importer}:{self.line} imports {what}"


@cache
def modules() -> dict[str, Path]:
    """Every module of pplx_nb by dotted name."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def unit(module: str) -> str:
    """The layer a module belongs to: its package, a public top-level module, SHARED, or root."""
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    if parts[-1] == "__main__" and f"{parts[1]}.__main__" in MAY_IMPORT:
        return f"{parts[1]}.__main__"
    if (ROOT / parts[1]).is_dir():
        return parts[1]
    return SHARED if parts[1].startswith("_") else parts[1]


@cache
def tree(module: str) -> ast.Module:
    """The syntax tree of ``module``, parsed once for all the tests (they only read it)."""
    return ast.parse(modules()[module].read_text(encoding="utf-8"))


@cache
def edges() -> tuple[Edge, ...]:
    """Every import of a pplx_nb module, anywhere in any module of pplx_nb."""
    return tuple(_edges())


def _edges() -> Iterator[Edge]:
    known = modules()
    for importer, path in known.items():
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for node in ast.walk(tree(importer)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("pplx_nb"):
                        yield Edge(importer, alias.name, None, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                if not base.startswith("pplx_nb"):
                    continue
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    if submodule in known:
                        yield Edge(importer, submodule, None, node.lineno)
                    else:
                        yield Edge(importer, base, alias.name, node.lineno)


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def test_every_module_belongs_to_a_layer_of_the_table() -> None:
    layers = {unit(module) for module in modules()} - {"root"}
    assert layers <= set(MAY_IMPORT), f"place these in MAY_IMPORT: {layers - set(MAY_IMPORT)}"


def test_layers_import_only_what_the_data_flow_allows() -> None:
    wrong = []
    for edge in edges():
        source, target = unit(edge.importer), unit(edge.target)
        if source in ("root", target) or target in (SHARED, "root"):
            continue
        if target not in MAY_IMPORT[source]:
            wrong.append(f"{edge} ({source} may not import {target})")
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_another_layers_private_module_or_name() -> None:
    wrong = []
    for edge in edges():
        source, target = unit(edge.importer), unit(edge.target)
        if source == target:
            continue
        inside = edge.target.split(".")[2:] if target != SHARED else []
        if any(map(_private, inside)) or (edge.name is not None and _private(edge.name)):
            wrong.append(str(edge))
    assert not wrong, "\n".join(wrong)


def test_shared_modules_import_only_shared_modules() -> None:
    wrong = [
        str(edge)
        for edge in edges()
        if unit(edge.importer) == SHARED and unit(edge.target) not in (SHARED, "root")
    ]
    assert not wrong, "\n".join(wrong)


def test_settings_reach_nothing_that_starts_a_server() -> None:
    graph: dict[str, set[str]] = {}
    for edge in edges():
        graph.setdefault(edge.importer, set()).add(edge.target)
    reached, todo = set(), ["pplx_nb._config"]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph.get(module, ()))
    assert reached and not {m for m in reached if unit(m) in ("sim", "api")}


def test_the_checker_sees_lazy_relative_and_private_imports() -> None:
    found = {(edge.importer, edge.target, edge.name) for edge in edges()}
    # A lazy import inside a function, and a name imported from a package's __init__.
    assert ("pplx_nb.api.endpoint", "pplx_nb.sim", "shared_server_url") in found
    assert ("pplx_nb.jobs", "pplx_nb._markdown", "job_status_markdown") in found
    assert unit("pplx_nb._config") == SHARED and unit("pplx_nb.export") == "export"
    assert unit("pplx_nb.notebook.magics") == "notebook" and unit("pplx_nb") == "root"


def _attributes(module: str, names: frozenset[str]) -> list[str]:
    """Where ``module`` reads one of the attributes ``names`` (``x.locked``, ``x.check_idle``)."""
    return [
        f"{module}:{node.lineno} .{node.attr}"
        for node in ast.walk(tree(module))
        if isinstance(node, ast.Attribute) and node.attr in names
    ]


def test_the_answer_guard_alone_takes_the_conversation_lock_and_sets_the_mark() -> None:
    # "An answer lands right after its question" is one module's rule: the lock, the idle check
    # and the .answering mark, whose methods on the store and the queue expect the lock held.
    rule = frozenset(
        {
            "locked",
            "mark_answering",
            "renew_answering",
            "clear_answering",
            "answering",
            "enqueue_locked",
            "check_idle",
        }
    )
    outside = [
        place
        for module in modules()
        if unit(module) not in ("store", "jobs") and module != "pplx_nb.research._guard"
        for place in _attributes(module, rule)
    ]
    assert outside == []
    assert _attributes("pplx_nb.research._guard", rule)  # the checker sees the guard's own
    marker = frozenset({"mark_answering", "renew_answering", "clear_answering", "answering"})
    assert [p for m in modules() if unit(m) == "jobs" for p in _attributes(m, marker)] == []


def test_no_method_takes_a_flag_saying_the_lock_is_held() -> None:
    # A caller that holds the conversation lock calls the method documented for it
    # (enqueue_locked, append_locked, close_question_locked), never a flag's other branch.
    flags = [
        f"{module}:{node.lineno} {node.arg}"
        for module in modules()
        for node in ast.walk(tree(module))
        if isinstance(node, ast.arg) and node.arg == "lock_held"
    ]
    assert flags == []


def _reads(module: str, attribute: str) -> list[str]:
    """Where ``module`` reads ``x.<attribute>``."""
    return [place.split(" .")[0] for place in _attributes(module, frozenset({attribute}))]


def test_only_the_backends_module_reads_where_the_store_lives() -> None:
    # One place opens the backends from settings; a branch on "is this Redis?" anywhere else
    # means the seam leaks. Settings define the field; the API's throttle keeps its shared
    # request counter in that Redis database, which is not where conversations or jobs live.
    allowed = {"pplx_nb.backends", "pplx_nb._config", "pplx_nb.api._throttle"}
    readers = [p for m in modules() if m not in allowed for p in _reads(m, "store_url")]
    assert readers == []
    assert _reads("pplx_nb.backends", "store_url")  # the checker sees the factory's own
    branches = [p for m in modules() for p in _reads(m, "is_redis")]
    assert branches == []


def test_the_store_and_the_job_side_import_nothing_of_each_other() -> None:
    between = [
        str(edge)
        for edge in edges()
        if {unit(edge.importer), unit(edge.target)} == {"store", "jobs"}
    ]
    assert between == []
    assert unit("pplx_nb.store.__main__") == "store.__main__"
