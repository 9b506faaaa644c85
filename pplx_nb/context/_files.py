"""Files attached to a question: read safely, embedded once per conversation.

A file is embedded in the question as a fenced block headed by its path (API-key-shaped text in
it replaced by ``***``, so a key never reaches a conversation file), and recorded in the user
message's ``files`` metadata as ``{"path", "sha256", "bytes"}``. Those records are what
de-duplication looks at: a file whose resolved path and hash already appear in any earlier
message is not embedded again (a note says so), whatever mode the earlier turn used; a file
that changed since is embedded anew.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pplx_nb._errors import ValidationError, redact
from pplx_nb._logging import get_logger
from pplx_nb._models import Message

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_MAX_BYTES",
    "PreparedFiles",
    "allowed_roots",
    "embedded_files",
    "prepare_files",
    "scrub_secrets",
]

logger = get_logger("pplx_nb.context")

DEFAULT_MAX_BYTES = 200_000
"""The size cap per attached file, in bytes."""


class PreparedFiles(NamedTuple):
    """The text to add to the question, the records to store, and notes for the user."""

    text: str
    records: list[dict[str, Any]]
    notes: list[str]


def embedded_files(history: Iterable[Message]) -> dict[str, set[str]]:
    """Resolved path → content hashes of every file recorded in ``history``'s ``files``."""
    seen: dict[str, set[str]] = {}
    for message in history:
        for record in message.files or ():
            path, digest = record.get("path"), record.get("sha256")
            if isinstance(path, str) and isinstance(digest, str):
                seen.setdefault(path, set()).add(digest)
    return seen


def allowed_roots(roots: Sequence[Path] | None, *, working_directory: bool = True) -> list[Path]:
    """The resolved folders files may be attached from: the working directory plus ``roots``.

    ``working_directory=False`` leaves the working directory out (the MCP server, which often
    runs from ``/``, attaches only from ``roots``). The home directory and every folder holding
    it (``/``, ``/home``) are refused with :class:`ValidationError`: under them lie keys, mail
    and browser profiles, so a question could carry any of them to the API. A working
    directory that wide is skipped when ``roots`` are given, and refused otherwise.
    """
    configured = [_checked_root(Path(root), "PPLX_NB_FILE_ROOTS holds") for root in roots or ()]
    if not working_directory:
        if not configured:
            raise ValidationError(
                "No folder is allowed for attached files. Set PPLX_NB_FILE_ROOTS to the "
                "folder(s) whose files may be attached, e.g. PPLX_NB_FILE_ROOTS=~/projects/report."
            )
        return list(dict.fromkeys(configured))
    cwd = Path.cwd().resolve()
    if _too_wide(cwd) and configured:
        return list(dict.fromkeys(configured))
    return list(dict.fromkeys([_checked_root(cwd, "The working directory is"), *configured]))


def _too_wide(folder: Path) -> bool:
    """Whether ``folder`` is the home directory or holds it (``/``, ``/home`` ...)."""
    return Path.home().resolve().is_relative_to(folder) or folder == Path("/").resolve()


def _checked_root(root: Path, where: str) -> Path:
    """``root`` resolved, refused if it is the home directory or a folder holding it."""
    resolved = root.expanduser().resolve()
    if _too_wide(resolved):
        raise ValidationError(
            f"{where} {str(resolved)!r}, too wide a folder to attach files from (it would open "
            "every file under it). Set PPLX_NB_FILE_ROOTS to the project folder(s) whose "
            "files may be attached, e.g. PPLX_NB_FILE_ROOTS=~/projects/report.",
            root=str(resolved),
        )
    return resolved


def _hidden(resolved: Path, roots: list[Path]) -> bool:
    """Whether ``resolved`` is a dot-file or lies in a dot-folder below every root holding it.

    A root may itself be a dot-folder (PPLX_NB_FILE_ROOTS=~/project/.notes): its files are
    visible from it even when another root (the working directory) also holds them.
    """
    return all(
        any(part.startswith(".") for part in resolved.relative_to(root).parts)
        for root in roots
        if resolved.is_relative_to(root)
    )


def resolve_attachments(
    paths: Sequence[str | Path], roots: Sequence[Path] | None, *, working_directory: bool = True
) -> list[Path]:
    """The real paths of ``paths``, each checked as :func:`prepare_files` does (not read)."""
    allowed = allowed_roots(roots, working_directory=working_directory)
    return [_resolve(path, allowed) for path in paths]


def _resolve(path: str | Path, roots: list[Path]) -> Path:
    """The real path of ``path``, refused unless it is a regular, visible file under a root.

    The location is checked before existence, so a refusal says nothing about files outside.
    """
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as exc:
        raise ValidationError(
            f"File {str(path)!r} cannot be resolved ({exc}). Check the path and its symlinks.",
            path=str(path),
        ) from None
    if not any(resolved.is_relative_to(root) for root in roots):
        allowed = ", ".join(str(root) for root in roots)
        raise ValidationError(
            f"File {str(path)!r} is outside the allowed folders ({allowed}). Move or copy it "
            "into one of them, or add its folder to PPLX_NB_FILE_ROOTS.",
            path=str(path),
        )
    if _hidden(resolved, roots):
        raise ValidationError(
            f"File {str(path)!r} is hidden (a dot-file, or inside a dot-folder such as .ssh or "
            ".git); hidden files often hold secrets and are never attached. Copy the part you "
            "need into a regular file and attach that.",
            path=str(path),
        )
    try:
        mode = resolved.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise ValidationError(
            f"File {str(path)!r} does not exist. Check the path (relative paths start at the "
            "working directory).",
            path=str(path),
        ) from None
    except OSError as exc:
        raise ValidationError(
            f"File {str(path)!r} cannot be read ({exc.strerror or exc}). Check its permissions.",
            path=str(path),
        ) from None
    if not stat.S_ISREG(mode):
        raise ValidationError(
            f"{str(path)!r} is not a regular file. Attach files one by one, not folders.",
            path=str(path),
        )
    return resolved


def _read_text(path: str | Path, resolved: Path, max_bytes: int) -> tuple[bytes, str]:
    """The bytes and text of the file :func:`_resolve` checked, read through one descriptor.

    The file is opened without following a final symbolic link and without blocking, and the
    opened file itself is checked (a regular file, at the checked path), so swapping the path
    for a link, a FIFO or another file after the checks reads nothing.
    """
    try:
        fd = os.open(resolved, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO):
            raise _changed(path) from None
        raise ValidationError(
            f"File {str(path)!r} cannot be read ({exc.strerror or exc}). Check its permissions.",
            path=str(path),
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or not _opened_at(fd, resolved):
            raise _changed(path)
        data = _read_fd(fd, path, max_bytes)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ValidationError(
            f"File {str(path)!r} is over the {max_bytes:,}-byte limit per file. "
            "Attach a smaller excerpt of it.",
            path=str(path),
            max_bytes=max_bytes,
        )
    if b"\0" in data:
        raise _binary(path)
    try:
        return data, data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _binary(path) from None


_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def _read_fd(fd: int, path: str | Path, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ValidationError(
            f"File {str(path)!r} cannot be read ({exc.strerror or exc}). Check its permissions.",
            path=str(path),
        ) from None
    return b"".join(chunks)


def _opened_at(fd: int, resolved: Path) -> bool:
    """Whether the file open as ``fd`` is the one at ``resolved`` (whose location was checked).

    The descriptor's own path (``/proc/self/fd`` on Linux, ``F_GETPATH`` on macOS) is what the
    kernel opened, whatever happened to the names since. Elsewhere the file's identity is
    compared with what the path names now.
    """
    opened: str | None = None
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        getpath = getattr(fcntl, "F_GETPATH", None) if fcntl is not None else None
        if getpath is not None and fcntl is not None:
            with contextlib.suppress(OSError):
                opened = fcntl.fcntl(fd, getpath, b"\0" * 1024).rstrip(b"\0").decode()
    if opened is not None:
        return opened == str(resolved)
    try:
        held, named = os.fstat(fd), os.stat(resolved, follow_symlinks=False)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def _changed(path: str | Path) -> ValidationError:
    return ValidationError(
        f"File {str(path)!r} changed while it was being attached (it was replaced by a link, "
        "a pipe or another file). Attach it again once it stays put.",
        path=str(path),
    )


def scrub_secrets(text: str, name: str) -> tuple[str, list[str]]:
    """``text`` with API-key-shaped parts replaced by ``***`` (see :func:`redact`), and a note
    for the user naming ``name`` when anything was replaced."""
    safe = redact(text)
    if safe == text:
        return text, []
    return safe, [f"{name} holds API-key-shaped text; it was sent and stored as ***."]


def _binary(path: str | Path) -> ValidationError:
    return ValidationError(
        f"File {str(path)!r} is not a UTF-8 text file; only text files can be attached. "
        "Convert it to text (e.g. CSV or Markdown) first.",
        path=str(path),
    )


def _display(resolved: Path, roots: list[Path]) -> str:
    for root in roots:
        if resolved.is_relative_to(root):
            return resolved.relative_to(root).as_posix()
    return str(resolved)


def _fenced(name: str, text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    language = Path(name).suffix.lstrip(".")
    return f"File: {name}\n{fence}{language}\n{text.rstrip(os.linesep)}\n{fence}"


def prepare_files(
    paths: Sequence[str | Path],
    history: Sequence[Message],
    *,
    roots: Sequence[Path] | None = None,
    working_directory: bool = True,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> PreparedFiles:
    """Read ``paths`` and embed those not already in the conversation.

    Paths are resolved (symlinks too) and must lie under the working directory (unless
    ``working_directory`` is false) or one of ``roots``; see :func:`allowed_roots`. Refused
    with :class:`ValidationError`: missing files, folders, paths outside the roots, dot-files
    and files in dot-folders, files over ``max_bytes`` and binary files (NUL bytes or invalid
    UTF-8). A file whose
    resolved path and SHA-256 are already recorded in ``history`` is skipped with a note; one
    that changed is embedded again. Nothing is embedded unless every file passes the checks.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    allowed = allowed_roots(roots, working_directory=working_directory)
    seen = embedded_files(history)
    blocks: list[str] = []
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    for path in paths:
        resolved = _resolve(path, allowed)
        data, text = _read_text(path, resolved, max_bytes)
        digest = hashlib.sha256(data).hexdigest()
        key = str(resolved)
        name = _display(resolved, allowed)
        if digest in seen.get(key, ()):
            notes.append(f"{name} is already in the conversation history.")
            continue
        if key in seen:
            notes.append(f"{name} changed since it was last attached; the new version is included.")
        seen.setdefault(key, set()).add(digest)
        safe, told = scrub_secrets(text, name)
        notes += told
        blocks.append(_fenced(name, safe))
        records.append({"path": key, "sha256": digest, "bytes": len(data)})
    if records:
        logger.info("embedding %d file(s): %s", len(records), ", ".join(r["path"] for r in records))
    return PreparedFiles("\n\n".join(blocks), records, notes)
