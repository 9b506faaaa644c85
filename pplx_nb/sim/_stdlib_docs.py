"""Documents from the Python documentation shipped with the interpreter, read without importing.

One document per documented public module, class, function and method of the standard library
(docstrings read with :mod:`ast` from the ``.py`` sources), the C-only modules' docstrings, and the
language reference topics of :mod:`pydoc_data.topics`. ``build_corpus`` freezes them into the
simulator's default corpus.
"""

from __future__ import annotations

import ast
import inspect
import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pplx_nb.sim._documents import Document, first_sentences

__all__ = ["stdlib_documents", "stdlib_root"]

DOCS = "https://docs.python.org/3/"
_SKIP_DIRS = frozenset(
    {
        "test",
        "tests",
        "idlelib",
        "tkinter",
        "lib2to3",
        "ensurepip",
        "site-packages",
        "dist-packages",
        "__pycache__",
        "turtledemo",
        "__phello__",
        "config-3",
    }
)
# Deprecated by PEP 594 / PEP 632 and gone from newer Pythons: answers should not cite them.
_DEPRECATED = frozenset(
    {
        *("aifc", "asynchat", "asyncore", "audioop", "cgi", "cgitb", "chunk", "crypt"),
        *("distutils", "imghdr", "imp", "mailcap", "msilib", "nis", "nntplib", "ossaudiodev"),
        *("pipes", "smtpd", "sndhdr", "spwd", "sunau", "telnetlib", "uu", "xdrlib"),
    }
)
# C modules with no .py source; their docstrings come from the (cheap, side-effect free) import.
_C_MODULES = (
    "array",
    "binascii",
    "builtins",
    "cmath",
    "errno",
    "gc",
    "itertools",
    "marshal",
    "math",
    "mmap",
    "select",
    "sys",
    "time",
    "unicodedata",
    "zlib",
)
_STDTYPES = frozenset(
    {
        *("bytearray", "bytes", "complex", "dict", "float", "frozenset", "int", "list"),
        *("memoryview", "range", "set", "str", "tuple"),
    }
)
_TOPIC_PAGES = {
    "library/stdtypes.html": ("types", "bltin-", "typesseq", "string-methods", "specialattrs"),
    "reference/simple_stmts.html": (
        "assert",
        "assignment",
        "augassign",
        "del",
        "global",
        "import",
        "nonlocal",
        "pass",
        "raise",
        "return",
        "break",
        "continue",
        "yield",
        "exprstmts",
        "future",
        "type",
    ),
    "reference/compound_stmts.html": (
        "if",
        "while",
        "for",
        "try",
        "with",
        "function",
        "class",
        "async",
        "match",
        "compound",
    ),
    "reference/datamodel.html": (
        "attribute-access",
        "customization",
        "specialnames",
        "numeric-types",
        "sequence-types",
        "context-managers",
        "objects",
        "callable-types",
    ),
    "reference/executionmodel.html": ("execmodel", "naming", "exceptions", "dynamic-features"),
    "reference/lexical_analysis.html": (
        "identifiers",
        "keywords",
        "strings",
        "numbers",
        "integers",
    ),
    "library/string.html": ("formatstrings", "formatspec"),
}


def stdlib_root() -> Path:
    """The directory holding the standard library's ``.py`` sources."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_documents() -> list[Document]:
    """All standard-library documents, in a deterministic order."""
    root = stdlib_root()
    files = sorted(_module_files(root))
    trees: dict[str, ast.Module] = {}
    for module, path in files:
        try:
            trees[module] = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError):
            continue
    exported = _reexports(trees)
    documents: list[Document] = []
    for module in sorted(trees):
        documents.extend(_module_documents(module, trees[module], exported))
    seen = {doc.title for doc in documents}
    for name in _C_MODULES:
        if name not in trees:
            documents.extend(doc for doc in _c_module_documents(name) if doc.title not in seen)
    documents.extend(_topic_documents())
    return _with_module_summaries(documents)


def _with_module_summaries(documents: list[Document]) -> list[Document]:
    """Give each document its module's one-line summary as section (``re — Support for ...``).

    Function docstrings rarely restate what their module is about ("regular expressions"), so
    the summary lets such questions reach them.
    """
    summaries = {"builtins": "Built-in functions, types and exceptions"}
    for doc in documents:
        if doc.url.endswith(f"#module-{doc.title}"):
            summary = first_sentences(doc.text, 1, limit=100).rstrip(".…")
            if summary:
                summaries[doc.title] = summary
    return [
        doc._replace(section=f"{doc.section} — {summaries[doc.section]}")
        if doc.section in summaries
        else doc
        for doc in documents
    ]


def _module_files(root: Path) -> Iterator[tuple[str, Path]]:
    for directory, subdirs, filenames in os.walk(root):
        subdirs[:] = [
            d for d in subdirs if d not in _SKIP_DIRS and d.isidentifier() and not d.startswith(".")
        ]
        rel = Path(directory).relative_to(root).parts
        if rel and not (root / rel[0] / "__init__.py").exists():
            continue
        for filename in filenames:
            stem, ext = os.path.splitext(filename)
            if ext != ".py" or not stem.isidentifier() or stem.startswith("test_"):
                continue
            parts = [*rel] if stem == "__init__" else [*rel, stem]
            if not parts or parts[0].startswith("_") or parts[0] in _DEPRECATED:
                continue
            yield ".".join(parts), Path(directory) / filename


def _literal_all(tree: ast.Module) -> set[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                try:
                    value = ast.literal_eval(node.value) if node.value else None
                except ValueError:
                    return None
                if isinstance(value, list | tuple):
                    return {str(name) for name in value}
    return None


def _reexports(trees: dict[str, ast.Module]) -> dict[tuple[str, str], str]:
    """Map ``(submodule, name)`` to the package that re-exports it (``asyncio.tasks.Task``)."""
    exported: dict[tuple[str, str], str] = {}
    for package, tree in trees.items():
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom) or node.level > 1 or not node.module:
                continue
            source = node.module if node.level == 0 else f"{package}.{node.module}"
            if not source.startswith(package + "."):
                continue
            if source not in trees:
                continue
            if any(alias.name == "*" for alias in node.names):
                names = _literal_all(trees[source]) or set()
            else:
                names = {alias.name for alias in node.names if alias.asname is None}
            for name in names:
                exported.setdefault((source, name), package)
        _lazy_exports(package, tree, trees, exported)
    return exported


def _defined(tree: ast.Module) -> set[str]:
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def _lazy_exports(
    package: str,
    tree: ast.Module,
    trees: dict[str, ast.Module],
    exported: dict[tuple[str, str], str],
) -> None:
    """Names a package lists in ``__all__`` but loads lazily from a direct submodule.

    (``concurrent.futures.ThreadPoolExecutor`` lives in ``concurrent.futures.thread``.)
    """
    missing = (_literal_all(tree) or set()) - _defined(tree)
    if not missing:
        return
    prefix = package + "."
    for source in sorted(m for m in trees if m.startswith(prefix) and "." not in m[len(prefix) :]):
        for name in sorted(missing & _defined(trees[source])):
            exported.setdefault((source, name), package)


def _clean(docstring: str | None) -> str:
    return inspect.cleandoc(docstring).strip() if docstring else ""


def _url(module: str, qualified: str) -> str:
    return f"{DOCS}library/{module.lower()}.html#{qualified}"


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> str:
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args) if a.arg not in ("self", "cls")]
    if args.vararg:
        names.append("*" + args.vararg.arg)
    names.extend(a.arg for a in args.kwonlyargs)
    if args.kwarg:
        names.append("**" + args.kwarg.arg)
    return f"{name}({', '.join(names)})"


def _module_documents(
    module: str, tree: ast.Module, exported: dict[tuple[str, str], str]
) -> Iterator[Document]:
    public_module = not any(part.startswith("_") for part in module.split("."))
    doc = _clean(ast.get_docstring(tree, clean=False))
    if doc and public_module:
        yield Document(module, _url(module, f"module-{module}"), doc, module)
    names = _literal_all(tree)
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if node.name.startswith("_") or (names is not None and node.name not in names):
            continue
        owner = exported.get((module, node.name))
        if owner is None and not public_module:
            continue
        home = owner or module
        qualified = f"{home}.{node.name}"
        if isinstance(node, ast.ClassDef):
            yield from _class_documents(home, qualified, node)
        elif text := _clean(ast.get_docstring(node, clean=False)):
            body = f"{_signature(node, qualified)}\n{text}"
            yield Document(qualified, _url(home, qualified), body, home)


def _class_text(node: ast.ClassDef) -> str:
    """The class docstring, or its ``__init__``'s when the class itself has none."""
    if text := _clean(ast.get_docstring(node, clean=False)):
        return text
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            return _clean(ast.get_docstring(item, clean=False))
    return ""


def _class_documents(module: str, qualified: str, node: ast.ClassDef) -> Iterator[Document]:
    if text := _class_text(node):
        yield Document(qualified, _url(module, qualified), f"class {qualified}\n{text}", module)
    for item in node.body:
        if not isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if item.name.startswith("_"):
            continue
        if text := _clean(ast.get_docstring(item, clean=False)):
            name = f"{qualified}.{item.name}"
            body = f"{_signature(item, name)}\n{text}"
            yield Document(name, _url(module, name), body, module)


def _builtin_url(name: str, owner: str | None) -> str:
    if owner in _STDTYPES or (owner is None and name in _STDTYPES):
        page = "stdtypes"
    elif (owner or name)[:1].isupper():
        page = "exceptions"
    else:
        page = "functions"
    target = f"{owner}.{name}" if owner else name
    return f"{DOCS}library/{page}.html#{target}"


def _c_module_documents(module: str) -> Iterator[Document]:
    try:
        namespace = __import__(module)
    except ImportError:
        return
    builtin = module == "builtins"
    if not builtin and (doc := _clean(namespace.__doc__)):
        yield Document(module, _url(module, f"module-{module}"), doc, module)
    for name in sorted(vars(namespace)):
        if name.startswith("_"):
            continue
        value: Any = getattr(namespace, name)
        text = _clean(getattr(value, "__doc__", None))
        if not text or not callable(value):
            continue
        title = name if builtin else f"{module}.{name}"
        url = _builtin_url(name, None) if builtin else _url(module, title)
        yield Document(title, url, text, module)
        if not isinstance(value, type) or (builtin and issubclass(value, BaseException)):
            continue
        for attr in sorted(vars(value)):
            method_doc = _clean(getattr(vars(value)[attr], "__doc__", None))
            if attr.startswith("_") or not method_doc:
                continue
            method = f"{title}.{attr}"
            method_url = _builtin_url(attr, name) if builtin else _url(module, method)
            yield Document(method, method_url, method_doc, module)


def _topic_page(topic: str) -> str:
    for page, prefixes in _TOPIC_PAGES.items():
        if any(topic == p or topic.startswith(p) for p in prefixes):
            return page
    return "reference/expressions.html"


def _topic_documents() -> Iterator[Document]:
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return
    for topic in sorted(topics):
        text = topics[topic].strip()
        if not text:
            continue
        first = text.splitlines()[0].strip()
        title = f"{first} ({topic})" if first else topic
        yield Document(title, f"{DOCS}{_topic_page(topic)}#{topic}", text, "language reference")
