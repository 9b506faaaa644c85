"""Opening the backends: the one place that decides where conversations and jobs live.

    from pplx_nb.backends import open_backends

    backends = open_backends(settings)       # PPLX_NB_STORE's Redis database, else the logs folder
    store = backends.conversation_store()    # a ConversationStore over them
    queue = backends.job_queue(store)        # the JobQueue beside it, asking that store

A backend is three parts kept in one place: the conversations (a
:class:`~pplx_nb.store.StoreBackend`), the job statuses and queued requests (a
:class:`~pplx_nb.jobs.JobStatusBackend`) and the claim index (a :class:`~pplx_nb.jobs.ClaimIndex`).
:class:`~pplx_nb.store.ConversationStore` and :class:`~pplx_nb.jobs.JobQueue` take theirs as
constructor arguments and never build each other (as httpx's ``Client(transport=...)``); this
module is the only one that reads ``settings.store_url``. Three ship:

- files (the default): ``CONVERSATION_LOGS_DIR``, or ``root=`` (which wins over ``PPLX_NB_STORE``);
- Redis: ``PPLX_NB_STORE=redis://HOST:PORT/DB``, shared by every machine that names it;
- memory (``memory=True``): one :class:`~pplx_nb._memory.MemorySpace` in this process, gone with
  it; for tests and experiments, as httpx ships ``MockTransport``. Only the parts of one
  :class:`Backends` share it: open it once and build the store and queue from that.

Beside them, with ``PPLX_NB_BUDGET`` set, the store's one spend ledger and the guard over it
(:attr:`Backends.budget`): a locked file in the logs folder, keys in the Redis database, or
memory. Without caps there is no guard and no ledger is opened.

A fourth implements the three seams in modules of its own and gets one branch in
:func:`open_backends`; nothing that uses a store or a queue changes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pplx_nb._caps import parse_caps
from pplx_nb._config import Settings
from pplx_nb._fs import DEFAULT_MAX_FILE_BYTES
from pplx_nb._memory import MemorySpace
from pplx_nb.budget import BudgetGuard, FileLedger, Ledger, MemoryLedger, RedisLedger
from pplx_nb.jobs import (
    AnswerLookup,
    ClaimIndex,
    FileStatusBackend,
    JobIndex,
    JobQueue,
    JobSide,
    JobStatusBackend,
    MemoryClaimIndex,
    MemoryStatusBackend,
    RedisClaimIndex,
    RedisStatusBackend,
)
from pplx_nb.store import ConversationStore, FileBackend, MemoryBackend, RedisBackend, StoreBackend

__all__ = [
    "Backends",
    "home_of",
    "is_store_url",
    "open_backends",
    "open_queue",
    "open_store",
]

_DEFAULT_RETRIES = 2
_DEFAULT_LEASE_SECONDS = 60.0
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


@dataclass(frozen=True)
class Backends:
    """The parts of one place where conversations and their jobs live, opened together.

    Attributes:
        store: the conversations.
        statuses: the job statuses and queued requests, beside the conversations.
        index: the claim index of queued jobs.
        max_job_retries: what a queue built here retries (PERPLEXITY_MAX_JOB_RETRIES).
        lease_seconds: the job lease (PPLX_NB_JOB_LEASE_SECONDS; the Redis index holds it too).
        clock: the monotonic clock by which this process judges the leases it watches.
        budget: the spend caps checked against this store's ledger (``PPLX_NB_BUDGET``);
            ``None`` without caps.
    """

    store: StoreBackend
    statuses: JobStatusBackend
    index: ClaimIndex
    max_job_retries: int = _DEFAULT_RETRIES
    lease_seconds: float = _DEFAULT_LEASE_SECONDS
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    budget: BudgetGuard | None = None

    @property
    def location(self) -> str:
        """Where they live, for users: the folder, the Redis URL (no credentials), ``memory``."""
        return self.store.where

    def job_side(self) -> JobSide:
        """What a store over these backends asks about jobs."""
        return JobSide(self.statuses, self.index)

    def conversation_store(self) -> ConversationStore:
        """A :class:`ConversationStore` over these backends, asking their job side."""
        return ConversationStore(self.store, jobs=self.job_side())

    def job_queue(
        self, answers: AnswerLookup | None = None, *, max_job_retries: int | None = None
    ) -> JobQueue:
        """A :class:`JobQueue` over these backends.

        Args:
            answers: the conversation store it asks for a job's answer (default: a new
                :meth:`conversation_store` over the same backends).
            max_job_retries: overrides :attr:`max_job_retries`.
        """
        return JobQueue(
            self.statuses,
            self.index,
            answers=answers if answers is not None else self.conversation_store(),
            max_job_retries=self.max_job_retries if max_job_retries is None else max_job_retries,
            lease_seconds=self.lease_seconds,
            clock=self.clock,
        )


def open_backends(
    settings: Settings | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    memory: bool = False,
    durable: bool = False,
    lease_seconds: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Backends:
    """The backends ``settings`` name: the Redis database of ``store_url`` (``PPLX_NB_STORE``)
    when set, else the folder ``logs_dir()``.

    Args:
        settings: where, and the job retries, lease and file size limit (default: read from the
            environment, unless ``root`` is given: then the built-in defaults).
        root: a conversation-logs folder to use instead (files, whatever ``store_url`` says).
        memory: a fresh in-memory space instead (see the module docstring).
        durable: fsync every conversation write and its folder (files).
        lease_seconds: overrides ``settings.job_lease_seconds``.
        clock: the monotonic clock by which this process judges the leases it watches (files,
            memory; tests pass one they advance).
    """
    if settings is None and root is None:
        settings = Settings.from_env()
    if lease_seconds is None:
        lease_seconds = (
            settings.job_lease_seconds if settings is not None else _DEFAULT_LEASE_SECONDS
        )
    store, statuses, index = _parts(settings, root, memory, durable, lease_seconds, clock)
    caps = parse_caps(settings.budget if settings is not None else None)
    return Backends(
        store,
        statuses,
        index,
        max_job_retries=settings.max_job_retries if settings is not None else _DEFAULT_RETRIES,
        lease_seconds=lease_seconds,
        clock=clock,
        budget=BudgetGuard(caps, _ledger(settings, root, memory)) if caps else None,
    )


def _ledger(settings: Settings | None, root: str | os.PathLike[str] | None, memory: bool) -> Ledger:
    """The spend ledger beside the parts :func:`_parts` opens: the same branch on where."""
    if memory:
        return MemoryLedger()
    if root is None and settings is not None and settings.store_url:
        return RedisLedger(settings.store_url)
    return FileLedger(_folder(settings, root))


def _parts(
    settings: Settings | None,
    root: str | os.PathLike[str] | None,
    memory: bool,
    durable: bool,
    lease_seconds: float,
    clock: Callable[[], float],
) -> tuple[StoreBackend, JobStatusBackend, ClaimIndex]:
    """The three parts :func:`open_backends` opens: the one branch on where they live."""
    if memory:
        space = MemorySpace()
        return MemoryBackend(space), MemoryStatusBackend(space), MemoryClaimIndex(clock=clock)
    if root is None and settings is not None and settings.store_url:
        url = settings.store_url
        return (
            RedisBackend(url),
            RedisStatusBackend(url),
            RedisClaimIndex(url, lease_seconds=lease_seconds),
        )
    folder = _folder(settings, root)
    limit = settings.max_file_bytes if settings is not None else DEFAULT_MAX_FILE_BYTES
    return (
        FileBackend(folder, durable=durable, max_file_bytes=limit),
        FileStatusBackend(folder, max_file_bytes=limit),
        JobIndex(folder, clock=clock),
    )


def _folder(settings: Settings | None, root: str | os.PathLike[str] | None) -> Path:
    if root is not None:
        return Path(root).expanduser().absolute()
    assert settings is not None  # read from the environment without a root
    return settings.logs_dir()


def open_store(
    settings: Settings | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    durable: bool = False,
) -> ConversationStore:
    """``open_backends(settings, root=root, durable=durable).conversation_store()``."""
    return open_backends(settings, root=root, durable=durable).conversation_store()


def open_queue(
    settings: Settings | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    max_job_retries: int | None = None,
    lease_seconds: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> JobQueue:
    """A :class:`JobQueue` over :func:`open_backends` (same arguments), asking a store over the
    same backends."""
    backends = open_backends(settings, root=root, lease_seconds=lease_seconds, clock=clock)
    return backends.job_queue(max_job_retries=max_job_retries)


def is_store_url(location: str) -> bool:
    """Whether ``location`` (a command-line argument, a conversation's ``path``) names a place
    in a Redis store rather than a folder."""
    return location.startswith(_REDIS_SCHEMES)


def home_of(path: str) -> Backends | None:
    """The backends of the folder holding the conversation whose ``path`` is ``path``, or
    ``None`` when that path is not a folder (a conversation in Redis or in memory: its
    credentials or its space are not in its path; reopen those from settings)."""
    if is_store_url(path) or not os.path.isabs(path):
        return None
    return open_backends(root=Path(path).parent)
