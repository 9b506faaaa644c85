"""File primitives shared by the store and the job queue.

Conversation ids, atomic JSON writes (temp file in the same directory, one write, ``os.replace``),
the per-conversation lock (``flock`` on a ``.lock`` file), and the translation of ``OSError`` into
:class:`FilesystemError`. Directories are created 0700 and files 0600.

Nothing inside the logs folder is trusted to be what its name says: files are opened without
following a symbolic link and without blocking (``O_NOFOLLOW | O_NONBLOCK``), must be regular
files once open, and are read up to a size limit. A symbolic link, a FIFO, a device or an
oversized file where a store file should be is a foreign entry, reported as
:class:`ConversationCorrupted` (like a damaged file), so listings skip it and go on.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import itertools
import json
import os
import re
import stat
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pplx_nb._errors import ConversationCorrupted, FilesystemError, ValidationError
from pplx_nb._layout import LOCK_FILE, temp_name

__all__ = [
    "CONVERSATION_ID_RE",
    "DEFAULT_MAX_FILE_BYTES",
    "LOCK_NAME",
    "DirectoryLock",
    "atomic_write_bytes",
    "atomic_write_json",
    "ensure_dir",
    "filesystem_error",
    "foreign_entry",
    "fs_errors",
    "fsync_dir",
    "id_from_ms",
    "locked",
    "open_regular",
    "read_bytes",
    "real_directory",
    "strip_bom",
    "validate_conversation_id",
]

# [0-9], not \d: \d also matches full-width and Arabic-Indic digits, which must not become
# directory names.
CONVERSATION_ID_RE = re.compile(r"^[0-9]{8}-[0-9]{13}\Z")
LOCK_NAME = LOCK_FILE
_DIR_MODE = 0o700
_FILE_MODE = 0o600
_tmp_counter = itertools.count()
# O_BINARY: without it Windows opens in text mode (CRLF translation, 0x1A ends a read); it and
# O_CLOEXEC exist only where they mean something.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
# A symbolic link planted where a store file should be is refused (ELOOP) rather than followed,
# and opening a FIFO returns at once instead of waiting for a writer.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_SAFE_READ_FLAGS = _READ_FLAGS | _NOFOLLOW
# ELOOP: a symbolic link under O_NOFOLLOW (EMLINK on FreeBSD); ENXIO: a socket, or a FIFO
# opened for writing without a reader.
_FOREIGN_ERRNOS = frozenset((errno.ELOOP, errno.EMLINK, errno.ENXIO))
DEFAULT_MAX_FILE_BYTES = 32 << 20
"""The default size limit of a file read from the logs folder (PPLX_NB_MAX_FILE_BYTES)."""
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | _NOFOLLOW
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
    tmp = os.path.join(directory, temp_name(name, f"{os.getpid()}.{next(_tmp_counter)}"))
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


def foreign_entry(path: Path | str, what: str) -> ConversationCorrupted:
    """The error for ``path`` being ``what`` (a symbolic link, a FIFO ...) instead of ours."""
    return ConversationCorrupted(
        f"{path} is {what}, not an entry pplx_nb wrote: it reads only regular files and real "
        "folders in the logs folder, and never follows symbolic links there. Remove it (or "
        "restore the original from a backup); other conversations are not affected.",
        path=str(path),
        problem=what,
    )


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: Path | str, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> int:
    """Open a store file for reading: never through a symbolic link, never blocking.

    Returns the descriptor of a regular file of at most ``max_bytes`` (the caller closes it).

    Raises:
        FileNotFoundError: nothing is there.
        ConversationCorrupted: a symbolic link, FIFO, device, socket, folder or a file over
            ``max_bytes`` (see :func:`foreign_entry`).
        FilesystemError: any other OS failure.
    """
    try:
        fd = os.open(path, _SAFE_READ_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in _FOREIGN_ERRNOS:
            raise foreign_entry(path, _lkind(path)) from None
        raise filesystem_error(path, "read", exc) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise foreign_entry(path, _kind(info.st_mode))
        if info.st_size > max_bytes:
            raise _too_large(path, info.st_size, max_bytes)
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError) and not isinstance(exc, FilesystemError):
            raise filesystem_error(path, "read", exc) from exc
        raise
    return fd


def _lkind(path: Path | str) -> str:
    try:
        return _kind(os.lstat(path).st_mode)
    except OSError:
        return "not a regular file"


def _too_large(path: Path | str, size: int, max_bytes: int) -> ConversationCorrupted:
    return ConversationCorrupted(
        f"{path} is {size:,} bytes or more, over the {max_bytes:,}-byte limit for a file in the "
        "logs folder. Raise PPLX_NB_MAX_FILE_BYTES if the file is genuine, or remove it.",
        path=str(path),
        problem="too large",
    )


def read_bytes(path: Path | str, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> bytes:
    """Read a whole store file, as :func:`open_regular` opens it, at most ``max_bytes``.

    OS failures become FILESYSTEM_ERROR (FileNotFoundError passes); a foreign entry or a file
    over the limit is CONVERSATION_CORRUPTED.
    """
    fd = open_regular(path, max_bytes)
    try:
        # os.open/os.read, not open(): a buffered file object costs five more syscalls.
        chunks = [os.read(fd, min(max(os.fstat(fd).st_size, 1024), max_bytes) + 1)]
        size = len(chunks[0])
        while chunks[-1] and size <= max_bytes:
            chunks.append(os.read(fd, min(1 << 20, max_bytes + 1 - size)))
            size += len(chunks[-1])
    except OSError as exc:
        raise filesystem_error(path, "read", exc) from exc
    finally:
        os.close(fd)
    if size > max_bytes:
        raise _too_large(path, size, max_bytes)
    return b"".join(chunks)


def strip_bom(data: bytes) -> bytes:
    """``data`` without a leading UTF-8 byte order mark (some editors write one)."""
    return data[len(codecs.BOM_UTF8) :] if data.startswith(codecs.BOM_UTF8) else data


def real_directory(path: Path | str) -> bool:
    """Whether ``path`` is a folder itself, not a symbolic link to one; False if absent.

    Raises:
        ConversationCorrupted: something else is there (a symbolic link, a file ...).
    """
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise filesystem_error(path, "access", exc) from exc
    if not stat.S_ISDIR(mode):
        raise foreign_entry(path, _kind(mode))
    return True


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
        real_directory(directory)  # a folder swapped for a link is refused, never locked through
        path = os.path.join(directory, LOCK_NAME)
        try:
            fd = os.open(path, _LOCK_FLAGS, _FILE_MODE)
        except OSError as exc:
            if exc.errno in _FOREIGN_ERRNOS:
                raise foreign_entry(path, _lkind(path)) from None
            raise filesystem_error(directory, "lock", exc) from exc
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise foreign_entry(path, _kind(mode))
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
