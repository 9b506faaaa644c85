"""File primitives shared by the store and the job queue.

Conversation ids, atomic JSON writes (temp file in the same directory, one write, ``os.replace``),
the per-conversation lock (``flock`` on a ``.lock`` file), and the translation of ``OSError`` into
:class:`FilesystemError`. Directories are created 0700 and files 0600.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pplx_nb._errors import FilesystemError, ValidationError

__all__ = [
    "CONVERSATION_ID_RE",
    "LOCK_NAME",
    "DirectoryLock",
    "atomic_write_bytes",
    "atomic_write_json",
    "ensure_dir",
    "filesystem_error",
    "fs_errors",
    "fsync_dir",
    "id_from_ms",
    "locked",
    "read_bytes",
    "validate_conversation_id",
]

# [0-9], not \d: \d also matches full-width and Arabic-Indic digits, which must not become
# directory names.
CONVERSATION_ID_RE = re.compile(r"^[0-9]{8}-[0-9]{13}\Z")
LOCK_NAME = ".lock"
_DIR_MODE = 0o700
_FILE_MODE = 0o600
_tmp_counter = itertools.count()
# O_BINARY: without it Windows opens in text mode (CRLF translation, 0x1A ends a read); it and
# O_CLOEXEC exist only where they mean something.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)


def validate_conversation_id(conversation_id: object) -> str:
    """Return the id if it has the form ``yyyymmdd-<13-digit unix ms>``; else VALIDATION_ERROR.

    This runs before any file access, so ``../x`` or an absolute path never reaches the disk.
    """
    if not isinstance(conversation_id, str) or len(conversation_id) != 22:
        shown = repr(conversation_id)[:40]
        raise ValidationError(
            f"Invalid conversation id {shown}: expected the form yyyymmdd-<13-digit unix ms>, "
            "e.g. 20250124-1706102400123, as returned when the conversation was created.",
            conversation_id=shown,
        )
    if not CONVERSATION_ID_RE.match(conversation_id):
        raise ValidationError(
            f"Invalid conversation id {conversation_id!r}: expected the form "
            "yyyymmdd-<13-digit unix ms>, e.g. 20250124-1706102400123.",
            conversation_id=conversation_id,
        )
    return conversation_id


def id_from_ms(unix_ms: int) -> str:
    """The conversation id for an instant: its UTC date and the 13-digit unix milliseconds."""
    day = datetime.fromtimestamp(unix_ms / 1000, UTC).strftime("%Y%m%d")
    return f"{day}-{unix_ms:013d}"


@contextlib.contextmanager
def fs_errors(path: Path | str, action: str = "access") -> Iterator[None]:
    """Turn an ``OSError`` inside the block into FILESYSTEM_ERROR naming the path and the reason."""
    try:
        yield
    except FilesystemError:
        raise
    except OSError as exc:
        raise filesystem_error(path, action, exc) from exc


def filesystem_error(path: Path | str, action: str, exc: OSError) -> FilesystemError:
    """The FILESYSTEM_ERROR for ``exc``, raised while trying to ``action`` ``path``."""
    reason = exc.strerror or type(exc).__name__
    return FilesystemError(
        f"Could not {action} {path}: {reason}. Check that the directory exists, is writable "
        "and the disk is not full (CONVERSATION_LOGS_DIR sets where conversations live).",
        path=str(path),
        reason=reason,
    )


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (and parents) with mode 0700 if it does not exist."""
    with fs_errors(path, "create directory"):
        path.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    return path


def atomic_write_bytes(path: Path | str, data: bytes, *, durable: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically: readers see the old or the new file, never half.

    With ``durable`` the file and its directory are fsynced, so the write survives a power loss.
    """
    # Plain strings: on the job cycle, building Path objects cost about as much as the syscalls.
    target = os.fspath(path)
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{next(_tmp_counter)}.tmp")
    try:
        fd = os.open(tmp, _CREATE_FLAGS, _FILE_MODE)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise filesystem_error(target, "write", exc) from exc
    if durable:
        fsync_dir(Path(directory))


def fsync_dir(directory: Path) -> None:
    """Flush a directory's entries (new, renamed or removed names) to disk."""
    with fs_errors(directory, "sync"):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write_json(path: Path | str, data: Any, *, durable: bool = False) -> None:
    """Serialise ``data`` with ``json.dumps`` and write it with :func:`atomic_write_bytes`."""
    payload = json.dumps(data, ensure_ascii=False, indent=2).encode("utf-8")
    atomic_write_bytes(path, payload, durable=durable)


def read_bytes(path: Path | str) -> bytes:
    """Read a whole file; OS failures become FILESYSTEM_ERROR (FileNotFoundError passes)."""
    try:
        # os.open/os.read, not open(): a buffered file object costs five more syscalls.
        fd = os.open(path, _READ_FLAGS)
        try:
            chunks = [os.read(fd, max(os.fstat(fd).st_size, 1024) + 1)]
            while chunks[-1]:
                chunks.append(os.read(fd, 1 << 20))
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise filesystem_error(path, "read", exc) from exc
    return b"".join(chunks)


def locked(directory: Path, timeout: float = 30.0) -> DirectoryLock:
    """Hold the exclusive lock of one conversation directory (``flock`` on its ``.lock`` file).

    Serialises read-modify-write cycles across threads and processes (each ``with`` opens its
    own file description, so two threads exclude each other too). The OS releases the lock if
    the holder dies, so a killed writer never blocks the others. Not re-entrant.
    """
    return DirectoryLock(directory, timeout)


class DirectoryLock:
    """The ``with`` block of :func:`locked`.

    A class rather than a ``contextmanager`` generator: a job cycle takes four locks, and the
    generator machinery cost twice as much as the ``open`` and ``flock`` themselves.
    """

    __slots__ = ("_directory", "_fd", "_timeout", "_windows")

    def __init__(self, directory: Path, timeout: float = 30.0) -> None:
        self._directory = directory
        self._timeout = timeout
        self._fd = -1
        self._windows: contextlib.ExitStack | None = None

    def __enter__(self) -> None:
        directory = self._directory
        if sys.platform == "win32":  # pragma: no cover - no flock there
            self._windows = contextlib.ExitStack()
            self._windows.enter_context(_filelock(directory, self._timeout))
            return
        try:
            fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT, _FILE_MODE)
        except OSError as exc:
            raise filesystem_error(directory, "lock", exc) from exc
        try:
            _flock(fd, directory, self._timeout)
        except BaseException as exc:
            os.close(fd)
            if isinstance(exc, OSError) and not isinstance(exc, FilesystemError):
                raise filesystem_error(directory, "lock", exc) from exc
            raise
        self._fd = fd

    def __exit__(self, *exc_info: object) -> None:
        if self._windows is not None:  # pragma: no cover - Windows
            self._windows.close()
            self._windows = None
            return
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def _flock(fd: int, directory: Path, timeout: float) -> None:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    # Polling with a growing pause instead of a blocking flock keeps the timeout enforceable
    # without signals, which only the main thread may use.
    deadline = time.monotonic() + timeout
    pause = 0.0002
    while True:
        time.sleep(pause)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise _lock_timeout(directory, timeout) from None
        pause = min(pause * 2, 0.005)


def _lock_timeout(directory: Path, timeout: float) -> FilesystemError:
    return FilesystemError(
        f"Could not lock {directory} within {timeout:.0f} s: another process holds it. "
        "Retry; if it persists, look for a stuck pplx_nb process.",
        path=str(directory),
        reason="lock timeout",
    )


@contextlib.contextmanager
def _filelock(directory: Path, timeout: float) -> Iterator[None]:  # pragma: no cover - Windows
    from filelock import FileLock, Timeout

    lock = FileLock(directory / LOCK_NAME, timeout=timeout, mode=_FILE_MODE)
    try:
        with fs_errors(directory, "lock"), lock:
            yield
    except Timeout as exc:
        raise _lock_timeout(directory, timeout) from exc
