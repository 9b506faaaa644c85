"""``python -m pplx_nb.store migrate SOURCE TARGET``: copy conversations between stores.

SOURCE and TARGET are each a conversation-logs folder or a Redis URL (``redis://HOST:PORT/DB``),
so a team moves its files into Redis, or a Redis store is saved back to files. Each conversation
keeps its id and its fields; the status of a job that has ended goes with it. Running it again
changes nothing: a conversation already at the target with the same content is skipped, and one
with the same id but other content is a conflict, reported and never overwritten. Exit code 0
when everything is at the target, 1 when conflicts or unreadable conversations remain, 2 for
a SOURCE or TARGET that cannot be used.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pydantic

from pplx_nb._config import Settings
from pplx_nb._errors import (
    ConversationCorrupted,
    ConversationNotFound,
    PplxError,
    StoreUnavailable,
)
from pplx_nb._errors import ValidationError as PplxValidationError
from pplx_nb._models import ACTIVE_JOB_STATES
from pplx_nb.backends import Backends, is_store_url, open_backends
from pplx_nb.jobs import JobStatusBackend
from pplx_nb.store import ConversationStore

__all__ = ["Migration", "main", "migrate", "open_location"]

_PROGRESS_EVERY = 100
"""A progress line at least every this many conversations (every tenth of them if fewer)."""


@dataclass
class Migration:
    """What a migration did: counts, and the ids of conflicts and unreadable conversations."""

    migrated: int = 0
    skipped: int = 0
    conflicts: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    jobs: int = 0

    @property
    def ok(self) -> bool:
        """Whether every conversation of the source is at the target, as it is at the source."""
        return not self.conflicts and not self.unreadable

    def summary(self) -> str:
        """``migrated 50, skipped 0, conflicts 0`` (and the unreadable ones and job statuses)."""
        text = f"migrated {self.migrated}, skipped {self.skipped}, conflicts {len(self.conflicts)}"
        if self.unreadable:
            text += f", unreadable {len(self.unreadable)}"
        return text + f", job statuses {self.jobs}"


def open_location(where: str, role: str) -> Backends:
    """The backends at ``where`` (a folder or a Redis URL); VALIDATION_ERROR saying what is wrong.

    ``role`` (SOURCE or TARGET) names the argument in messages. A SOURCE folder must exist.
    """
    if is_store_url(where):
        try:
            settings = Settings(store_url=where)
        except pydantic.ValidationError as exc:
            problem = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise PplxValidationError(f"{role}: {problem}") from None
        backends = open_backends(settings)
        try:
            backends.store.check_writable()
        except StoreUnavailable as exc:
            raise StoreUnavailable(f"{role}: {exc.message}", **exc.details) from None
        return backends
    if "://" in where:
        raise PplxValidationError(
            f"{role} {where!r} is neither a folder nor a redis:// URL. Pass a "
            "conversation-logs folder or redis://HOST:PORT/DB.",
        )
    path = Path(where).expanduser()
    if path.exists() and not path.is_dir():
        raise PplxValidationError(f"{role} {where} is a file, not a conversation-logs folder.")
    if role == "SOURCE" and not path.is_dir():
        raise PplxValidationError(
            f"SOURCE {where} does not exist. Pass the conversation-logs folder to copy from "
            "(CONVERSATION_LOGS_DIR, ./conversation-logs by default).",
        )
    return open_backends(root=path)


def migrate(
    source: Backends,
    target: Backends,
    progress: Callable[[str], None] = lambda line: None,
) -> Migration:
    """Copy every conversation of ``source`` missing at ``target``, with ended job statuses."""
    if source.location == target.location:
        raise PplxValidationError(
            f"SOURCE and TARGET are the same store ({source.location}): nothing to migrate.",
        )
    result = Migration()
    reader, writer = source.conversation_store(), target.conversation_store()
    ids = reader.ids()
    every = max(1, min(_PROGRESS_EVERY, len(ids) // 10))
    for number, conversation_id in enumerate(ids, 1):
        try:
            reader.load(conversation_id)  # the whole model: a corrupted one is not copied
            document = reader.read_raw(conversation_id)
        except ConversationNotFound:
            continue  # deleted meanwhile
        except ConversationCorrupted as exc:
            result.unreadable.append(conversation_id)
            progress(f"unreadable {conversation_id}: {exc}")
            continue
        if target.store.put(conversation_id, document):
            result.migrated += 1
        elif _same(writer, conversation_id, document):
            result.skipped += 1
        else:
            result.conflicts.append(conversation_id)
            progress(
                f"conflict {conversation_id}: the target holds another conversation under "
                "this id; left as it is"
            )
            continue
        result.jobs += _copy_status(source.statuses, target.statuses, conversation_id, progress)
        if number % every == 0:
            progress(f"{number}/{len(ids)} conversations: {result.summary()}")
    return result


def _same(target: ConversationStore, conversation_id: str, document: dict[str, Any]) -> bool:
    """Whether the target holds ``document`` (its messages counted anew: Redis stores the count
    of the messages it holds, whatever a file said)."""
    try:
        stored = target.read_raw(conversation_id)
    except (ConversationCorrupted, ConversationNotFound):
        return False
    return _counted(stored) == _counted(document)


def _counted(document: dict[str, Any]) -> dict[str, Any]:
    return {**document, "messageCount": len(document["messages"])}


def _copy_status(
    source: JobStatusBackend,
    target: JobStatusBackend,
    conversation_id: str,
    progress: Callable[[str], None],
) -> int:
    """Copy the conversation's job status if its job has ended and the target has none."""
    try:
        snapshot = source.snapshot(conversation_id)
        if snapshot is None or target.snapshot(conversation_id) is not None:
            return 0
    except PplxError as exc:
        progress(f"job status of {conversation_id} not copied: {exc}")
        return 0
    try:
        status = json.loads(snapshot)
    except (ValueError, RecursionError):
        progress(f"job status of {conversation_id} not copied: it is not valid JSON")
        return 0
    state = status.get("status") if isinstance(status, dict) else None
    if not isinstance(state, str):
        progress(f"job status of {conversation_id} not copied: it names no job state")
        return 0
    if state in ACTIVE_JOB_STATES:
        progress(
            f"job status of {conversation_id} not copied: its job is {state}; migrate again "
            "once it has ended"
        )
        return 0
    target.restore(conversation_id, snapshot)
    return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pplx_nb.store",
        description="Tools for the conversation store.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    move = commands.add_parser(
        "migrate",
        help="copy conversations from SOURCE to TARGET (folders or redis:// URLs)",
        description="Copy every conversation (and the status of each ended job) from SOURCE "
        "to TARGET, keeping ids. Idempotent: what is already there is skipped; a different "
        "conversation under the same id is reported as a conflict and left alone.",
    )
    move.add_argument("source", metavar="SOURCE", help="a conversation-logs folder or redis://")
    move.add_argument("target", metavar="TARGET", help="a conversation-logs folder or redis://")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit code."""
    out = out or sys.stdout
    args = _parser().parse_args(argv)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        source = open_location(args.source, "SOURCE")
        target = open_location(args.target, "TARGET")
        progress(f"migrating {source.location} -> {target.location}")
        result = migrate(source, target, progress)
    except PplxError as exc:
        print(f"error: {exc} [{exc.code}]", file=sys.stderr)
        return 2
    print(result.summary(), file=out, flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
