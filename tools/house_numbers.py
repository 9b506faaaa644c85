"""Print the size and typing figures of the ``pplx_nb`` package (issue 26's "numbers").

Usage: ``python tools/house_numbers.py [PACKAGE_DIR]`` (default ``pplx_nb``). Figures:

- modules, total lines and modules under 80 lines (all, and outside ``sim/``);
- the largest module and the largest class outside ``sim/``;
- imports inside a function body (outside ``sim/``);
- lines that use ``model_extra``;
- public signatures (a function or method whose name has no leading underscore, in a class
  whose name has none either) that mention ``Any`` in a parameter or return annotation.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

SMALL = 80


@dataclass
class Figures:
    """What one walk over the package counts."""

    modules: int = 0
    lines: int = 0
    small: list[str] = field(default_factory=list)
    largest_module: tuple[int, str] = (0, "")
    largest_class: tuple[int, str] = (0, "")
    function_imports: int = 0
    model_extra: int = 0
    any_signatures: list[str] = field(default_factory=list)


def _mentions_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    return any(
        (isinstance(n, ast.Name) and n.id == "Any")
        or (isinstance(n, ast.Attribute) and n.attr == "Any")
        or (isinstance(n, ast.Constant) and isinstance(n.value, str) and "Any" in n.value)
        for n in ast.walk(node)
    )


def _signature_has_any(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    args = fn.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    every += [a for a in (args.vararg, args.kwarg) if a is not None]
    return _mentions_any(fn.returns) or any(_mentions_any(a.annotation) for a in every)


def _public(name: str) -> bool:
    return not name.startswith("_") or name == "__init__"


def _walk_signatures(tree: ast.Module, where: str, figures: Figures) -> None:
    for node in tree.body:
        scopes: list[tuple[str, list[ast.stmt]]] = [("", [node])]
        if isinstance(node, ast.ClassDef):
            if not _public(node.name):
                continue
            scopes = [(f"{node.name}.", node.body)]
        for prefix, body in scopes:
            for fn in body:
                is_fn = isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
                if is_fn and _public(fn.name) and _signature_has_any(fn):
                    figures.any_signatures.append(f"{where}:{prefix}{fn.name}")


def _count_function_imports(tree: ast.Module) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    count += 1
    # Nested functions are walked twice above; count each import once.
    return count - _nested_imports(tree)


def _nested_imports(tree: ast.Module) -> int:
    extra = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if inner is not node and isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                    extra += sum(
                        isinstance(n, ast.Import | ast.ImportFrom) for n in ast.walk(inner)
                    )
    return extra


def measure(package: Path) -> tuple[Figures, Figures]:
    """The figures for the whole package and for the package outside ``sim/``."""
    everything, outside = Figures(), Figures()
    for path in sorted(package.rglob("*.py")):
        where = str(path.relative_to(package.parent))
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        tree = ast.parse(text)
        in_sim = path.relative_to(package).parts[0] == "sim"
        for figures in (everything,) if in_sim else (everything, outside):
            figures.modules += 1
            figures.lines += lines
            if lines < SMALL:
                figures.small.append(f"{where} ({lines})")
            figures.largest_module = max(figures.largest_module, (lines, where))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                    size = node.end_lineno - node.lineno + 1
                    name = f"{where}:{node.name}"
                    figures.largest_class = max(figures.largest_class, (size, name))
            figures.function_imports += _count_function_imports(tree)
            figures.model_extra += sum("model_extra" in line for line in text.splitlines())
            _walk_signatures(tree, where, figures)
    return everything, outside


def report(title: str, figures: Figures, *, verbose: bool) -> None:
    """Print ``figures`` under ``title``."""
    print(f"== {title}")
    print(f"modules                    {figures.modules}")
    print(f"lines                      {figures.lines}")
    print(f"modules under {SMALL} lines     {len(figures.small)}")
    print(f"largest module             {figures.largest_module[1]} ({figures.largest_module[0]})")
    print(f"largest class              {figures.largest_class[1]} ({figures.largest_class[0]})")
    print(f"function-level imports     {figures.function_imports}")
    print(f"model_extra uses           {figures.model_extra}")
    print(f"Any in public signatures   {len(figures.any_signatures)}")
    if verbose:
        for line in figures.small:
            print(f"  small: {line}")
        for line in figures.any_signatures:
            print(f"  Any: {line}")


def main(argv: list[str]) -> None:
    """Measure the package named on the command line (default ``pplx_nb``)."""
    verbose = "-v" in argv
    names = [a for a in argv if a != "-v"]
    package = Path(names[0] if names else "pplx_nb")
    everything, outside = measure(package)
    report("whole package", everything, verbose=False)
    report("outside sim/", outside, verbose=verbose)


if __name__ == "__main__":
    main(sys.argv[1:])
