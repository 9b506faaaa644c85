"""Check a notebook's answers against the store: ``python -m pplx_nb.provenance NOTEBOOK.ipynb``.

Each output a pplx_nb magic showed carries ``metadata["pplx_nb"]`` (:mod:`pplx_nb._provenance`),
saved in the ``.ipynb``. For each one this lists the cell, the conversation and turn, and whether
the answer is still in the store as it was shown (``matching``), is there but different
(``changed``: edited, another answer took its place, or its file is corrupted), or is gone
(``missing``)::

    $ python -m pplx_nb.provenance analysis.ipynb
    cell  3  20261128-1764300000000 turn 1  matching
    cell  7  20261128-1764300099999 turn 3  changed   the stored answer differs from the one shown

Exit status: 0 when every answer matches, 1 when one changed or is missing, 2 when the notebook or
the store cannot be read. ``--store`` names the store (a folder or a ``redis://`` URL); by
default it is the one the settings name (``CONVERSATION_LOGS_DIR``, ``PPLX_NB_STORE``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic

from pplx_nb._errors import (
    ConversationCorrupted,
    ConversationNotFound,
    PplxError,
    ValidationError,
)
from pplx_nb._fs import DEFAULT_MAX_FILE_BYTES, filesystem_error
from pplx_nb._provenance import METADATA_KEY, answer_hash
from pplx_nb.store import ConversationStore

__all__ = [
    "Checked",
    "Status",
    "check_notebook",
    "check_records",
    "main",
    "provenance_records",
    "records_of",
]

Status = Literal["matching", "changed", "missing"]


@dataclass(frozen=True)
class Checked:
    """One answer of the notebook, checked."""

    cell: int
    """The cell's position in the notebook, counting from 1 (as JupyterLab's "Cell N")."""
    conversation_id: str
    turn: int
    status: Status
    detail: str = ""

    def __str__(self) -> str:
        line = f"cell {self.cell:>3}  {self.conversation_id} turn {self.turn:<3} {self.status}"
        return f"{line:<60} {self.detail}".rstrip()


def provenance_records(notebook: Path | str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(cell number, record)`` for every output of ``notebook`` that carries one.

    Cells, outputs and metadata of the wrong shape (a hand-edited or foreign file) carry none.
    """
    path = Path(notebook).expanduser()
    document = _notebook(path)
    if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
        raise ValidationError(f"{path} is not a Jupyter notebook (no cells).")
    for number, cell in enumerate(document["cells"], 1):
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        found = records_of(_Output(o) for o in outputs) if isinstance(outputs, list) else ()
        for _, record in found:
            yield number, record


@dataclass(frozen=True)
class _Output:
    """One output of a saved notebook, read as :func:`records_of` reads displayed ones."""

    saved: object

    @property
    def metadata(self) -> object:
        return self.saved.get("metadata") if isinstance(self.saved, dict) else None


_MAX_NOTEBOOK_BYTES = DEFAULT_MAX_FILE_BYTES * 4


def _notebook(path: Path) -> object:
    """The JSON document at ``path``; VALIDATION_ERROR when it is not a readable notebook."""
    if not path.is_file():
        raise ValidationError(f"{path} is not a file: pass the path of a saved .ipynb notebook.")
    size = path.stat().st_size
    if size > _MAX_NOTEBOOK_BYTES:
        raise ValidationError(
            f"{path} is {size:,} bytes, over the {_MAX_NOTEBOOK_BYTES:,}-byte limit for a "
            "notebook: clear its outputs of images or data you do not need, and check it again."
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise filesystem_error(path, "read", exc) from None
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{path} is not a notebook (not JSON: {exc.msg}).") from None
    except UnicodeDecodeError:
        raise ValidationError(f"{path} is not a notebook (not UTF-8 JSON).") from None
    except RecursionError:
        raise ValidationError(f"{path} is not a notebook (JSON nested too deeply).") from None


def check_notebook(notebook: Path | str, store: ConversationStore) -> list[Checked]:
    """Every answer of ``notebook`` checked against ``store``, in notebook order."""
    return check_records(provenance_records(notebook), store)


def records_of(outputs: Iterable[Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(n, record)`` for each displayed output that carries one, the n-th such output: the
    ``outputs`` of IPython's ``%%capture`` (or anything with a ``metadata`` mapping)."""
    number = 0
    for output in outputs:
        metadata = getattr(output, "metadata", None)
        found = metadata.get(METADATA_KEY) if isinstance(metadata, Mapping) else None
        if isinstance(found, dict) and isinstance(found.get("conversationId"), str):
            number += 1
            yield number, found


def check_records(
    records: Iterable[tuple[int, dict[str, Any]]], store: ConversationStore
) -> list[Checked]:
    """Each ``(position, record)`` checked against ``store``."""
    checked: list[Checked] = []
    for number, found in records:
        cid, turn = found["conversationId"], found.get("turn")
        if not isinstance(turn, int) or isinstance(turn, bool):
            checked.append(Checked(number, cid, -1, "missing", "the record names no turn"))
            continue
        checked.append(_check(store, number, cid, turn, found.get("answerSha256")))
    return checked


def _check(store: ConversationStore, cell: int, cid: str, turn: int, expected: object) -> Checked:
    try:
        conversation = store.load(cid)
    except (ConversationNotFound, ValidationError):
        return Checked(cell, cid, turn, "missing", "no such conversation in the store")
    except ConversationCorrupted:  # the other answers are still checked
        detail = "the stored conversation is corrupted: it no longer holds the answer as shown"
        return Checked(cell, cid, turn, "changed", detail)
    messages = conversation.messages
    if not 0 <= turn < len(messages) or messages[turn].role != "assistant":
        return Checked(cell, cid, turn, "missing", "the conversation has no answer at that turn")
    if answer_hash(messages[turn].content) != expected:
        return Checked(cell, cid, turn, "changed", "the stored answer differs from the one shown")
    return Checked(cell, cid, turn, "matching")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pplx_nb.provenance",
        description="Check that each answer a notebook shows is still in the store, unchanged.",
    )
    parser.add_argument("notebook", help="the .ipynb file")
    parser.add_argument("--store", help="a conversation-logs folder or redis:// URL")
    parser.add_argument("--json", action="store_true", help="one JSON object per answer")
    args = parser.parse_args(argv)
    try:
        store = _open(args.store)
        results = check_notebook(args.notebook, store)
    except PplxError as exc:
        print(f"{exc.code}: {exc.message}", file=sys.stderr)
        return 2
    for result in results:
        if args.json:
            print(json.dumps(result.__dict__))
        else:
            print(result)
    if not results:
        print(f"{args.notebook}: no pplx_nb answers with provenance in this notebook.")
    return 0 if all(r.status == "matching" for r in results) else 1


def _open(where: str | None) -> ConversationStore:
    """The store ``--store`` names (a folder or a ``redis://`` URL), else the settings' one."""
    from pplx_nb._config import Settings
    from pplx_nb.backends import is_store_url, open_store

    if where is None:
        return open_store()
    if is_store_url(where):
        try:
            settings = Settings(store_url=where)
        except pydantic.ValidationError as exc:
            problem = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise ValidationError(f"--store: {problem}") from None
        return open_store(settings)
    if not Path(where).expanduser().is_dir():
        raise ValidationError(
            f"--store {where} is not a folder. Pass the conversation-logs folder the notebook's "
            "answers were stored in, or a redis:// URL."
        )
    return open_store(root=where)


if __name__ == "__main__":
    sys.exit(main())
