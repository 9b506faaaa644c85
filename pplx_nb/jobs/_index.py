"""The claim index: one marker file per queued job, named so that sorting gives claim order.

A marker is named ``{PRIORITY_MAX - priority:05d}-{enqueued_us:016d}-{conversationId}``, so a plain
string sort yields priority descending, then enqueue time ascending (FIFO). Pending markers live
four levels deep under ``<root>/.jobs/pending/``::

    {priority key}-{enqueued_us // 10**9:07d}/   a priority and a ~17-minute window
      {(enqueued_us // 10**7) % 100:02d}/        10 seconds of that window
        {(enqueued_us // 10**5) % 100:02d}/      a tenth of a second
          {marker}

so a claim lists a few small directories (at most 100 entries, or a tenth of a second's worth of
enqueues) and stays cheap with tens of thousands of jobs queued: one flat directory of 10,000
names takes ≈4 ms to list and sort here. Claiming moves a marker into the flat
``<root>/.jobs/claimed/`` with ``os.rename``: of several processes renaming the same file, exactly
one succeeds. A marker is a hard link to the job's job.json (a link is far cheaper than a new
inode), or an empty file when rebuilt. ``.jobs`` never matches the conversation-id pattern, so
the store's listing skips it.

:class:`ClaimIndex` is the seam the queue and its recovery use; :class:`JobIndex` is the file
index, :class:`~pplx_nb.jobs._redis.RedisClaimIndex` the one in Redis. The file index judges
leases by this process's clock (:mod:`pplx_nb.jobs._lease`), the Redis one by the server's.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from pplx_nb._errors import FilesystemError
from pplx_nb._fs import ensure_dir, fs_errors, real_directory
from pplx_nb._layout import Layout
from pplx_nb.jobs._lease import WatchedLeases

__all__ = ["PRIORITY_MAX", "ClaimIndex", "JobIndex", "marker_name"]

PRIORITY_MAX = 9999
_LEVELS = 3
_FILE_MODE = 0o600
# A symbolic link planted where a marker goes is refused (ELOOP), never followed to create a file.
_MARKER_FLAGS = (
    os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
)


def marker_name(priority: int, enqueued_us: int, conversation_id: str) -> str:
    """The marker file name of a job: sorts by priority descending, then enqueue time."""
    return f"{PRIORITY_MAX - priority:05d}-{enqueued_us:016d}-{conversation_id}"


def conversation_of(marker: str) -> str:
    """The conversation id a marker names (its last 22 characters)."""
    return marker[-22:]


def _pending_subdirs(marker: str) -> tuple[str, str, str]:
    key, stamp = marker[:5], int(marker[6:22])
    return (
        f"{key}-{stamp // 10**9:07d}",
        f"{(stamp // 10**7) % 100:02d}",
        f"{(stamp // 10**5) % 100:02d}",
    )


class ClaimIndex(Protocol):
    """Where queued jobs wait in claim order, and which are claimed: hints next to the statuses.

    Markers are :func:`marker_name` strings. Every method but :meth:`claim_next` is idempotent.
    """

    location: str
    """Where the index lives, for users (a folder, a Redis URL without credentials)."""

    def add_pending(self, marker: str, link: str | None = None) -> None:
        """Queue ``marker`` (``link``: a file a file index may hard-link it to)."""
        ...

    def add_claimed(self, marker: str) -> None:
        """Record ``marker`` as claimed, its lease starting now (rebuilding the index)."""
        ...

    def claim_next(self) -> str | None:
        """Claim the first pending marker in claim order; each one goes to exactly one caller."""
        ...

    def requeue(self, marker: str) -> None:
        """Move a claimed marker back to pending (a retry, a release, a recovered job)."""
        ...

    def drop(self, marker: str) -> None:
        """Remove the marker wherever it is (a finished or cancelled job)."""
        ...

    def indexed(self, marker: str) -> bool:
        """Whether the marker is pending or claimed."""
        ...

    def pending(self) -> list[str]:
        """Every pending marker, in claim order."""
        ...

    def claimed(self) -> list[str]:
        """Every claimed marker (jobs in progress, or claimed by a worker that died)."""
        ...

    def recoverable(self, claimed: list[str]) -> list[str]:
        """Those of ``claimed`` whose lease recovery must judge now."""
        ...

    def renew(self, marker: str, heartbeat: str | None) -> bool:
        """Start the claimed marker's lease again (its job wrote ``heartbeat``); False when the
        lease had already run out, so the write must be refused."""
        ...

    def lease_age(self, marker: str, heartbeat: str | None) -> float:
        """Seconds the claimed marker's job has gone without renewing its lease (its status
        says ``heartbeat``)."""
        ...

    def held(self, marker: str) -> bool:
        """Whether the claimed marker's lease still runs (checked before an answer is stored)."""
        ...


class JobIndex(WatchedLeases):
    """The pending and claimed marker directories of one conversation-logs root."""

    def __init__(self, root: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        layout = Layout(root)
        self.location = str(root)
        self.base = layout.index
        self.pending_dir = layout.pending
        self.claimed_dir = layout.claimed
        # Plain strings on the claim path: building Path objects costs more than the syscalls.
        self._pending = str(self.pending_dir)
        self._claimed = str(self.claimed_dir)
        self._ready = False

    def _ensure(self) -> None:
        if not self._ready:
            # A link planted at .jobs (or below) is refused, never created or written through.
            for directory in (self.base, self.pending_dir, self.claimed_dir):
                real_directory(directory)
                ensure_dir(directory)
            self._ready = True

    def pending_path(self, marker: str) -> Path:
        """Where the pending marker ``marker`` lives."""
        return Path(self._pending_str(marker))

    def claimed_path(self, marker: str) -> Path:
        """Where the claimed marker ``marker`` lives."""
        return Path(self._claimed_str(marker))

    def _pending_str(self, marker: str) -> str:
        return os.path.join(self._pending, *_pending_subdirs(marker), marker)

    def _claimed_str(self, marker: str) -> str:
        return os.path.join(self._claimed, marker)

    def add_pending(self, marker: str, link: str | None = None) -> None:
        """Create the pending marker (idempotent).

        With ``link`` (the job's job.json) the marker is a hard link to it: creating an inode
        costs ≈0.5–1 ms on a busy ext4 disk, a link a few microseconds.
        """
        self._ensure()
        path = self._pending_str(marker)
        with fs_errors(path, "create the job marker"):
            for _ in range(8):
                try:
                    _make_marker(path, link)
                    return
                except FileNotFoundError:
                    # A claimer may remove an emptied directory between our mkdir and create,
                    # or while we make it again: then the next turn makes it once more.
                    with contextlib.suppress(FilesystemError):
                        ensure_dir(Path(path).parent)
            _make_marker(path, link)

    def add_claimed(self, marker: str) -> None:
        """Create the claimed marker (idempotent); used when rebuilding the index."""
        self._ensure()
        with fs_errors(self.claimed_dir, "create a marker in"):
            os.close(os.open(self.claimed_path(marker), _MARKER_FLAGS, _FILE_MODE))

    def requeue(self, marker: str) -> None:
        """Move a claimed marker back to pending (a retry, a release, a recovered job)."""
        self._ensure()
        source, target = self.claimed_path(marker), self.pending_path(marker)
        for _ in range(8):
            try:
                os.rename(source, target)
                return
            except FileNotFoundError:
                if not source.exists():
                    self.add_pending(marker)
                    return
                ensure_dir(target.parent)
        self.add_pending(marker)
        self.drop(marker)

    def drop(self, marker: str) -> None:
        """Remove the marker wherever it is (a finished or cancelled job)."""
        for path in (self._claimed_str(marker), self._pending_str(marker)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                return

    def candidates(self) -> Iterator[str]:
        """Pending markers in claim order, listing one small directory at a time.

        Emptied directories met on the way are removed, so old windows do not pile up.
        """
        self._ensure()
        return _walk(self._pending, _LEVELS)

    def claim(self, marker: str) -> bool:
        """Move a pending marker to claimed; True for exactly one of any racing callers."""
        try:
            os.rename(self._pending_str(marker), self._claimed_str(marker))
        except FileNotFoundError:
            return False
        return True

    def claim_next(self) -> str | None:
        """Walk the pending markers in claim order and claim the first one still there."""
        for marker in self.candidates():
            if self.claim(marker):
                return marker
        return None

    def indexed(self, marker: str) -> bool:
        """Whether the marker file is pending or claimed."""
        return os.path.exists(self._pending_str(marker)) or os.path.exists(
            self._claimed_str(marker)
        )

    def pending(self) -> list[str]:
        """Every pending marker, in claim order (walks the whole index)."""
        self._ensure()
        return list(_walk(self._pending, _LEVELS, prune=False))

    def claimed(self) -> list[str]:
        """Every claimed marker (jobs in progress, or claimed by a worker that died)."""
        self._ensure()
        return sorted(_listdir(self._claimed))


def _make_marker(path: str, job_file: str | None) -> None:
    if job_file is not None:
        try:
            os.link(job_file, path)
            return
        except FileExistsError:
            return
        except FileNotFoundError:
            if not os.path.exists(job_file):
                job_file = None
            else:
                raise
        except OSError:
            # A file system without hard links: fall back to an empty file.
            job_file = None
    os.close(os.open(path, _MARKER_FLAGS, _FILE_MODE))


def _walk(directory: str, levels: int, *, prune: bool = True) -> Iterator[str]:
    """Names ``levels`` directories below ``directory``, in sorted order, depth first."""
    names = sorted(_listdir(directory))
    if levels == 0:
        yield from names
        return
    for name in names:
        child = os.path.join(directory, name)
        yielded = False
        for marker in _walk(child, levels - 1, prune=prune):
            yielded = True
            yield marker
        if prune and not yielded:
            _rmdir(child)


def _listdir(path: str) -> list[str]:
    try:
        return [name for name in os.listdir(path) if not name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _rmdir(path: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(path)
