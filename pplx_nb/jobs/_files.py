"""Job statuses as files: ``status.json`` and ``job.json`` in each conversation's folder.

The only module that reads or writes those two files. Writes are atomic (temp file and
``os.replace``) and compact JSON; reads never follow a symbolic link (see :mod:`pplx_nb._fs`).
Callers hold the conversation's lock (:meth:`FileStatusBackend.locked`) around every
read-modify-write, so the store's appends and the queue's transitions never interleave.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from pplx_nb._errors import ConversationCorrupted, PplxError
from pplx_nb._fs import (
    CONVERSATION_ID_RE,
    DEFAULT_MAX_FILE_BYTES,
    DirectoryLock,
    atomic_write_bytes,
    fs_errors,
    locked,
    read_bytes,
    real_directory,
    strip_bom,
    validate_conversation_id,
)
from pplx_nb._layout import Layout
from pplx_nb._models import JobRecord, JobState, JobStatus
from pplx_nb._reread import read_settled
from pplx_nb.jobs._backend import OneAtATime
from pplx_nb.jobs._codec import encode, parse_record, parse_state, parse_status

__all__ = ["FileStatusBackend"]


class FileStatusBackend(OneAtATime):
    """Job statuses in ``<root>/<conversationId>/status.json`` and ``job.json``.

    Args:
        root: the conversation-logs folder.
        max_file_bytes: the largest status or job file read (PPLX_NB_MAX_FILE_BYTES).
    """

    def __init__(self, root: Path, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        self.layout = Layout(root)
        self.max_file_bytes = max_file_bytes

    def __repr__(self) -> str:
        return f"FileStatusBackend(root={str(self.layout.root)!r})"

    def locked(self, conversation_id: str) -> DirectoryLock:
        """The conversation folder's lock."""
        return locked(self.layout.folder(conversation_id))

    def present(self, conversation_id: str) -> bool:
        """Whether the conversation's folder is there (a symbolic link planted there is not)."""
        folder = self.layout.folder_str(validate_conversation_id(conversation_id))
        return os.path.isdir(folder) and not os.path.islink(folder)

    def conversation_ids(self) -> list[str]:
        """The names under the root that are conversation ids."""
        try:
            names = os.listdir(self.layout.root)
        except FileNotFoundError:
            return []
        return [name for name in names if CONVERSATION_ID_RE.match(name)]

    # -- status.json ----------------------------------------------------------------------------

    def state(self, conversation_id: str) -> JobState | None:
        """The ``status`` of status.json, checked with ``attempts``; ``None`` without one.

        The folder is not checked for a planted link here (listings and locked writers check
        it before they ask), which keeps a listing of thousands at one open per status.
        """
        path = self.layout.status_file(conversation_id)
        raw = self._bytes(path, in_real_folder=False)
        return None if raw is None else parse_state(raw, path)

    def read(self, conversation_id: str) -> JobStatus | None:
        """status.json as a :class:`JobStatus`; ``None`` if no job ever ran for it."""
        path = self.layout.status_file(conversation_id)
        return read_settled(path, lambda: self._status(path), (ConversationCorrupted,))

    def _status(self, path: str) -> JobStatus | None:
        raw = self._bytes(path)
        return None if raw is None else parse_status(raw, path)

    def write(self, status: JobStatus) -> None:
        """Replace status.json (compact JSON, ``None`` fields left out)."""
        path = self.layout.status_file(status.conversation_id)
        atomic_write_bytes(path, encode(status))

    def snapshot(self, conversation_id: str) -> bytes | None:
        """status.json's bytes as they are, or ``None``."""
        return self._bytes(self.layout.status_file(conversation_id))

    def restore(self, conversation_id: str, snapshot: bytes | None) -> None:
        """Put status.json back as :meth:`snapshot` found it; never raises."""
        path = self.layout.status_file(conversation_id)
        try:
            if snapshot is None:
                os.unlink(path)
            else:
                atomic_write_bytes(path, snapshot)
        except FileNotFoundError:
            pass
        except (OSError, PplxError):
            # Restoring needs a new inode; without one, no status beats a pending one that
            # would refuse every follow-up.
            with contextlib.suppress(OSError):
                os.unlink(path)

    # -- job.json -------------------------------------------------------------------------------

    def read_job(self, conversation_id: str) -> JobRecord | None:
        """job.json as a :class:`JobRecord`; ``None`` if there is none.

        Read again while it does not parse and keeps changing: the TypeScript server writes it
        in place.
        """
        path = self.layout.job_file(conversation_id)
        return read_settled(path, lambda: self._record(path), (ConversationCorrupted,))

    def _record(self, path: str) -> JobRecord | None:
        raw = self._bytes(path)
        return None if raw is None else parse_record(raw, path)

    def write_job(self, record: JobRecord) -> None:
        """Write job.json."""
        atomic_write_bytes(self.layout.job_file(record.conversation_id), encode(record))

    def remove_job(self, conversation_id: str) -> None:
        """Remove job.json (absent is fine)."""
        path = self.layout.job_file(conversation_id)
        with fs_errors(path, "remove"), contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def has_job(self, conversation_id: str) -> bool:
        """Whether job.json exists."""
        return os.path.exists(self.layout.job_file(conversation_id))

    def queued_ids(self) -> list[str]:
        """The conversations whose folder holds a job.json."""
        return [cid for cid in self.conversation_ids() if self.has_job(cid)]

    def job_link(self, conversation_id: str) -> str:
        """job.json's path: the claim index hard-links its pending marker to it."""
        return self.layout.job_file(conversation_id)

    # -- helpers --------------------------------------------------------------------------------

    def _bytes(self, path: str, *, in_real_folder: bool = True) -> bytes | None:
        # A folder swapped for a symbolic link is reported, never read through.
        if in_real_folder and not real_directory(os.path.dirname(path)):
            return None
        try:
            # An editor may have saved it with a byte order mark; JSON parsers differ on it.
            return strip_bom(read_bytes(path, self.max_file_bytes))
        except FileNotFoundError:
            return None
