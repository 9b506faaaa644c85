"""The file backend: one directory per conversation under ``conversation-logs/``.

The store's part of the folder (see :mod:`pplx_nb._layout` for all of it)::

    <root>/<conversationId>/conversation.json   the conversation (the single source of truth);
                                                 its first line holds the summary list() reads
    <root>/<conversationId>/.lock               serialises writers (flock)
    <root>/<conversationId>/.answering          a question's answer is on its way (_answering.py)

The job side keeps its own files in the same folder; this module never reads them.

Ids are claimed by creating the directory exclusively, so two processes never get the same one.
Symbolic links are never followed: a conversation folder that is a link is listed as corrupted,
read and written never, and deleting it removes the link alone.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pplx_nb._errors import (
    ConversationCorrupted,
    ConversationNotFound,
    FilesystemError,
    PplxError,
)
from pplx_nb._fs import (
    CONVERSATION_ID_RE,
    DEFAULT_MAX_FILE_BYTES,
    atomic_write_bytes,
    ensure_dir,
    filesystem_error,
    fs_errors,
    fsync_dir,
    id_from_ms,
    locked,
    open_regular,
    read_bytes,
    real_directory,
    strip_bom,
    validate_conversation_id,
)
from pplx_nb._layout import (
    CONVERSATION_FILE,
    OLD_SUMMARY_FILE,
    PROBE_PREFIX,
    Layout,
    is_temp_of,
)
from pplx_nb._models import now_iso
from pplx_nb._reread import read_settled
from pplx_nb.store import _answering as answering
from pplx_nb.store._answering import AnsweringMarker
from pplx_nb.store._document import (
    TAIL,
    appended,
    encode,
    header,
    new_document,
    parse,
    replaced,
    split,
    summarize,
    summary_of_header,
)

__all__ = ["FileBackend", "not_found", "or_error"]

_T = TypeVar("_T")

_DIR_MODE = 0o700
_trash_counter = itertools.count()
_TEMP_OF = (CONVERSATION_FILE, OLD_SUMMARY_FILE)
_IN_FOLDER = os.sep + CONVERSATION_FILE


def not_found(conversation_id: str, root: Path | str) -> ConversationNotFound:
    """The CONVERSATION_NOT_FOUND error, telling the user how to start a conversation."""
    return ConversationNotFound(
        f"Conversation {conversation_id} does not exist (looked in {root}). Start a new "
        "conversation with `perplexity_search` (or `%%pplx` in a notebook) and follow up with "
        "the conversation id it returns.",
        conversation_id=conversation_id,
        root=str(root),
    )


def _sweep_leftovers(directory: Path) -> None:
    """Remove temp files of writers that died mid-write (call with the directory's lock held).

    The store writes only under the lock (or before the id is known), so while we hold it any
    temp file of ours belongs to a dead process. A summary.json of earlier versions goes too.
    """
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if name == OLD_SUMMARY_FILE or is_temp_of(name, _TEMP_OF):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(directory, name))


class FileBackend:
    """Conversations as ``<root>/<id>/conversation.json``; see the module docstring for the layout.

    Args:
        root: the conversation-logs directory (created on the first write).
        durable: fsync each conversation write and its directory (survives power loss).
        max_file_bytes: the largest file read (PPLX_NB_MAX_FILE_BYTES); a larger one is
            reported as corrupted.
    """

    def __init__(
        self, root: Path, *, durable: bool = False, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    ) -> None:
        self.root = root
        self.where = str(root)
        self.durable = durable
        self.max_file_bytes = max_file_bytes
        self._layout = Layout(root)
        # Paths are joined as text onto this: bulk readers ask for one per conversation, and
        # pathlib's parsing, or even os.path.join, cost a good part of reading the document.
        self._prefix = os.path.join(str(root), "")
        # Where this backend's next id search starts: a burst of creates (faster than one per
        # millisecond) would otherwise retry every id the burst already took, each time.
        self._next_ms = 0

    def __repr__(self) -> str:
        return f"FileBackend(root={str(self.root)!r}, durable={self.durable})"

    def directory(self, conversation_id: str) -> Path:
        """The conversation's directory; the id is validated before anything touches the disk."""
        return self.root / validate_conversation_id(conversation_id)

    def location(self, conversation_id: str) -> str:
        """The conversation's directory as a string."""
        return self._prefix + validate_conversation_id(conversation_id)

    def document_location(self, conversation_id: str) -> str:
        """The conversation.json path as a string."""
        return self.location(conversation_id) + _IN_FOLDER

    # -- writing --------------------------------------------------------------------------------

    def create(self, messages: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> bytes:
        """Claim a fresh id (next free millisecond) and write the conversation."""
        ensure_dir(self.root)
        unix_ms = max(time.time_ns() // 1_000_000, self._next_ms)
        while not self._claim(self.root / id_from_ms(unix_ms)):
            unix_ms += 1
        self._next_ms = unix_ms + 1
        conversation_id = id_from_ms(unix_ms)
        directory = self.root / conversation_id
        stamp = now_iso(datetime.fromtimestamp(unix_ms / 1000, UTC))
        try:
            data = new_document(conversation_id, stamp, messages, meta)
            self._write(directory, data)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        if self.durable:
            fsync_dir(self.root)
        return data

    def put(self, conversation_id: str, document: Mapping[str, Any]) -> bool:
        """Store ``document`` under its own id unless that id is taken (migrating a store);
        whether it was stored."""
        directory = self.directory(conversation_id)
        ensure_dir(self.root)
        if not self._claim(directory):
            return False
        try:
            self._write(directory, encode(document))
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return True

    def _claim(self, directory: Path) -> bool:
        with fs_errors(directory, "create directory"):
            try:
                os.mkdir(directory, _DIR_MODE)
            except FileExistsError:
                return False
        return True

    def append(
        self,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """Append under the conversation's lock: read, splice new lines in, replace atomically.

        ``check`` sees the stored document before anything is written and may raise to refuse;
        ``then`` runs after the write, and if it raises the previous document is put back, so
        the append and its action happen together or not at all. Both run under the lock, so
        they must not take it.
        """
        with self._locked(conversation_id, self.directory(conversation_id)):
            return self.append_locked(conversation_id, messages, check=check, then=then)

    def append_locked(
        self,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """:meth:`append` for a caller that holds the conversation's lock (the job side closing a
        question in the step that ends its job)."""
        directory = self.directory(conversation_id)
        data = self._read_locked(conversation_id, directory)
        if check is not None:
            check(data)
        where = str(directory / CONVERSATION_FILE)
        new = appended(data, messages, now_iso(), conversation_id, where)
        self._write_then(directory, new, data, then)
        return new

    def place(
        self,
        conversation_id: str,
        message: Mapping[str, Any],
        *,
        where: Callable[[bytes], int],
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """Under the conversation's lock, put ``message`` where ``where(document)`` says: the
        index of the message it replaces, or the message count to append it (``where`` may
        raise to refuse). ``then`` as for :meth:`append`. The document is rewritten whole."""
        directory = self.directory(conversation_id)
        with self._locked(conversation_id, directory):
            data = self._read_locked(conversation_id, directory)
            index = where(data)
            document = parse(data, conversation_id, str(directory / CONVERSATION_FILE))
            if index == len(document["messages"]):
                return self.append_locked(conversation_id, [message], then=then)
            new = replaced(document, index, message, now_iso())
            self._write_then(directory, new, data, then)
            return new

    def _write_then(
        self, directory: Path, new: bytes, old: bytes, then: Callable[[], None] | None
    ) -> None:
        """Write ``new``, then run ``then``; if it raises, ``old`` is written back."""
        self._write(directory, new)
        if then is not None:
            try:
                then()
            except BaseException:
                self._write(directory, old)
                raise

    def _read_locked(self, conversation_id: str, directory: Path) -> bytes:
        """The whole document, the lock held (leftover temp files swept first)."""
        path = directory / CONVERSATION_FILE
        _sweep_leftovers(directory)
        # Another program may be rewriting it in place, lock or not: read it whole.
        return read_settled(
            path,
            lambda: _whole(self._read(conversation_id, path), conversation_id, str(path)),
            (ConversationCorrupted, ConversationNotFound),
        )

    @contextlib.contextmanager
    def _locked(self, conversation_id: str, directory: Path) -> Iterator[None]:
        """The directory's lock; CONVERSATION_NOT_FOUND if the directory is not there."""
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(locked(directory))
            except FilesystemError as exc:
                if isinstance(exc.__cause__, FileNotFoundError):
                    raise not_found(conversation_id, self.root) from None
                raise
            yield

    def check_writable(self, conversation_id: str | None = None) -> None:
        """FILESYSTEM_ERROR unless a file can be written in the conversation's directory.

        Without an id, in the root (created if missing): can new conversations be stored?
        """
        if conversation_id is None:
            directory = ensure_dir(self.root)
        else:
            directory = self.directory(conversation_id)
        probe = directory / f"{PROBE_PREFIX}{os.getpid()}-{next(_trash_counter)}.tmp"
        with fs_errors(directory, "write in"):
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, b"x")
            finally:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(probe)

    def _write(self, directory: Path, data: bytes) -> None:
        atomic_write_bytes(directory / CONVERSATION_FILE, data, durable=self.durable)

    def delete(self, conversation_id: str, *, before: Callable[[], None] | None = None) -> None:
        """Move the directory aside under the lock (readers see all or nothing), then remove it.

        ``before`` runs under the lock, right before the directory is moved.
        """
        directory = self.directory(conversation_id)
        if os.path.islink(directory):
            # A planted link: remove the link itself, never what it points to.
            with fs_errors(directory, "delete"):
                os.unlink(directory)
            return
        trash = self._layout.trash(conversation_id, f"{os.getpid()}-{next(_trash_counter)}")
        with self._locked(conversation_id, directory), fs_errors(directory, "delete"):
            if before is not None:
                before()
            try:
                os.rename(directory, trash)
            except FileNotFoundError:
                raise not_found(conversation_id, self.root) from None
        shutil.rmtree(trash, ignore_errors=True)

    # -- the question being answered --------------------------------------------------------

    def locked(self, conversation_id: str) -> contextlib.AbstractContextManager[None]:
        """The conversation's lock, the one :meth:`append` takes (not re-entrant)."""
        return self._locked(conversation_id, self.directory(conversation_id))

    def mark_answering(self, conversation_id: str, seconds: float) -> str:
        """Write the ``.answering`` marker for ``seconds`` (lock held); returns its token."""
        return answering.mark(self.directory(conversation_id), seconds)

    def renew_answering(
        self, conversation_id: str, token: str, seconds: float, remote_id: str | None = None
    ) -> None:
        """Push the marker ``token`` names ``seconds`` ahead, with its run (lock held)."""
        answering.renew(self.directory(conversation_id), token, seconds, remote_id)

    def clear_answering(self, conversation_id: str, token: str) -> None:
        """Remove the marker if ``token`` still names it (lock held; never raises)."""
        answering.clear(self.directory(conversation_id), token)

    def answering(self, conversation_id: str) -> AnsweringMarker | None:
        """The conversation's live marker, or ``None``."""
        return answering.live(self.directory(conversation_id))

    def answering_run(self, conversation_id: str) -> str | None:
        """The paid run the conversation's marker names, live or not."""
        return answering.recorded_run(self.directory(conversation_id))

    # -- reading --------------------------------------------------------------------------------

    def read(self, conversation_id: str) -> bytes:
        """The bytes of conversation.json."""
        # Plain strings, not Path objects: a store's export reads every conversation.
        directory = self.location(conversation_id)
        if not real_directory(directory):
            raise not_found(conversation_id, self.root)
        path = directory + _IN_FOLDER
        # In a folder that is there, a missing file is one being rewritten in place (the
        # TypeScript server removes it first) or being created: read again while that lasts.
        return read_settled(
            path, lambda: self._read(conversation_id, path), (ConversationNotFound,)
        )

    def _read(self, conversation_id: str, path: Path | str) -> bytes:
        try:
            return strip_bom(read_bytes(path, self.max_file_bytes))
        except FileNotFoundError:
            raise not_found(conversation_id, self.root) from None

    def _head(self, conversation_id: str, path: str) -> bytes | None:
        """The header line of a whole canonical document, or ``None`` for anything else.

        "Whole" means it ends as a canonical document does, so a file cut short is read in
        full and reported corrupted rather than listed from its intact first line.
        """
        with self._open(conversation_id, path) as file, fs_errors(path, "read"):
            first = strip_bom(file.readline(self.max_file_bytes))
            if not first.endswith(b"\n") or header(first) is None:
                return None
            file.seek(-len(TAIL), os.SEEK_END)
            return first if file.read() == TAIL else None

    def _open(self, conversation_id: str, path: Path | str) -> BinaryIO:
        try:
            return os.fdopen(open_regular(path, self.max_file_bytes), "rb")
        except FileNotFoundError:
            raise not_found(conversation_id, self.root) from None

    def exists(self, conversation_id: str) -> bool:
        """Whether the conversation is stored (a planted link counts: it is there, corrupted)."""
        directory = self.directory(conversation_id)
        return os.path.islink(directory) or os.path.isfile(directory / CONVERSATION_FILE)

    def ids(self) -> list[str]:
        """Ids of the conversation directories under the root, newest first."""
        try:
            with os.scandir(self.root) as entries:
                # Links are listed too, so that reading them reports them instead of hiding them.
                found = [
                    entry.name
                    for entry in entries
                    if CONVERSATION_ID_RE.match(entry.name)
                    and (entry.is_dir(follow_symlinks=False) or entry.is_symlink())
                ]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise filesystem_error(self.root, "list", exc) from exc
        found.sort(reverse=True)
        return found

    def summaries(self, conversation_ids: Sequence[str]) -> list[dict[str, Any] | PplxError]:
        """:meth:`summary` of each id (or its error), one after the other."""
        return [or_error(self.summary, conversation_id) for conversation_id in conversation_ids]

    def read_many(self, conversation_ids: Sequence[str]) -> list[bytes | PplxError]:
        """:meth:`read` of each id (or its error), one after the other."""
        return [or_error(self.read, conversation_id) for conversation_id in conversation_ids]

    def summary(self, conversation_id: str) -> dict[str, Any]:
        """The light summary: from the header line when its summary is current, else computed."""
        # Plain strings, not Path objects: list() calls this for every conversation.
        directory = self.location(conversation_id)
        if not real_directory(directory):
            raise not_found(conversation_id, self.root)
        path = directory + _IN_FOLDER
        first = self._head(conversation_id, path)
        fields = None if first is None else header(first)
        summary = None if fields is None else summary_of_header(fields)
        if summary is None:
            data = self._read(conversation_id, path)
            summary = summarize(parse(data, conversation_id, path))
        summary["path"] = directory
        return summary


def or_error(read: Callable[[str], _T], conversation_id: str) -> _T | PplxError:
    """``read(conversation_id)``, or the error of the store it raised (for batch reads)."""
    try:
        return read(conversation_id)
    except (ConversationNotFound, ConversationCorrupted, FilesystemError) as exc:
        return exc


def _whole(data: bytes, conversation_id: str, where: str) -> bytes:
    """``data`` if it is a whole document (CONVERSATION_CORRUPTED if it does not parse)."""
    if split(data) is None:
        parse(data, conversation_id, where)
    return data
