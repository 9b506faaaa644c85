"""Where everything lives in a conversation-logs folder: every on-disk name, spelled once.

::

    <root>/<conversationId>/conversation.json   the conversation (the store)
    <root>/<conversationId>/status.json         its job's lifecycle, kept (the job side)
    <root>/<conversationId>/job.json            its queued request, while the job is active
    <root>/<conversationId>/.lock               serialises every writer of the folder (flock)
    <root>/<conversationId>/.answering          a follow-up's answer is on its way
    <root>/.jobs/pending/…/<marker>             the claim index: queued jobs (see jobs/_index.py)
    <root>/.jobs/claimed/<marker>               … and claimed ones
    <root>/.deleted-<conversationId>-…          a conversation being deleted
    <root>/.budget/ledger.jsonl                 the spend ledger (PPLX_NB_BUDGET), locked by .lock

With ``PPLX_NB_STORE`` set, the same things live in one Redis database instead (:class:`RedisKeys`);
every key starts with ``pplx_nb:`` and a conversation's keys contain its id::

    pplx_nb:conversations                   sorted set: every conversation id, by creation (ms)
    pplx_nb:conv:<id>:meta                  hash: the document's fields other than messages
    pplx_nb:conv:<id>:messages              list: one JSON message per entry
    pplx_nb:conv:<id>:status / :job         its job's status and queued request (JSON)
    pplx_nb:conv:<id>:lock / :answering     the conversation lock, the answer-in-progress mark
    pplx_nb:jobs:pending / :claimed         the claim index (sorted sets)
    pplx_nb:jobs:queued                     the conversations holding a queued request (a set)
    pplx_nb:ratelimit:<window>              the shared request counter (PPLX_NB_RATE_LIMIT)
    pplx_nb:budget:<part>                   the spend ledger (PPLX_NB_BUDGET): totals and holds

Names starting with a dot never match the conversation-id pattern, so listings skip them. Temp
files of atomic writes are ``.<name>.<pid>.<n>.tmp`` next to the file they replace.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "ANSWERING_FILE",
    "BUDGET_DIR",
    "CLAIMED_DIR",
    "CONVERSATION_FILE",
    "CONVERSATION_PARTS",
    "INDEX_DIR",
    "JOB_FILE",
    "LEDGER_FILE",
    "LOCK_FILE",
    "OLD_SUMMARY_FILE",
    "PENDING_DIR",
    "PROBE_PREFIX",
    "STATUS_FILE",
    "TRASH_PREFIX",
    "Layout",
    "RedisKeys",
    "is_temp_of",
    "temp_name",
]

CONVERSATION_FILE = "conversation.json"
STATUS_FILE = "status.json"
JOB_FILE = "job.json"
LOCK_FILE = ".lock"
ANSWERING_FILE = ".answering"
OLD_SUMMARY_FILE = "summary.json"
"""Where earlier versions kept the listing summary; removed on the next write."""
INDEX_DIR = ".jobs"
BUDGET_DIR = ".budget"
LEDGER_FILE = "ledger.jsonl"
PENDING_DIR = "pending"
CLAIMED_DIR = "claimed"
TRASH_PREFIX = ".deleted-"
PROBE_PREFIX = ".probe-"
"""Files written only to learn whether a folder is writable (removed at once)."""


def temp_name(name: str, tag: str) -> str:
    """The temp file an atomic write of ``name`` goes through first (``tag``: pid and counter)."""
    return f".{name}.{tag}.tmp"


def is_temp_of(entry: str, names: tuple[str, ...]) -> bool:
    """Whether ``entry`` is a temp file of an atomic write of one of ``names``."""
    return entry.endswith(".tmp") and any(entry.startswith(f".{name}.") for name in names)


class Layout:
    """The paths of one conversation-logs folder. Ids are validated by the caller."""

    __slots__ = ("_root_str", "root")

    def __init__(self, root: Path) -> None:
        self.root = root
        # Plain strings on hot paths: building Path objects costs about as much as the syscalls.
        self._root_str = str(root)

    def folder(self, conversation_id: str) -> Path:
        """The conversation's folder."""
        return self.root / conversation_id

    def folder_str(self, conversation_id: str) -> str:
        """The conversation's folder, as a plain string."""
        return os.path.join(self._root_str, conversation_id)

    def conversation_file(self, conversation_id: str) -> Path:
        """``<root>/<id>/conversation.json``."""
        return self.root / conversation_id / CONVERSATION_FILE

    def status_file(self, conversation_id: str) -> str:
        """``<root>/<id>/status.json``."""
        return os.path.join(self._root_str, conversation_id, STATUS_FILE)

    def job_file(self, conversation_id: str) -> str:
        """``<root>/<id>/job.json``."""
        return os.path.join(self._root_str, conversation_id, JOB_FILE)

    def answering_file(self, conversation_id: str) -> Path:
        """``<root>/<id>/.answering``."""
        return self.root / conversation_id / ANSWERING_FILE

    @property
    def index(self) -> Path:
        """``<root>/.jobs``."""
        return self.root / INDEX_DIR

    @property
    def pending(self) -> Path:
        """``<root>/.jobs/pending``."""
        return self.root / INDEX_DIR / PENDING_DIR

    @property
    def claimed(self) -> Path:
        """``<root>/.jobs/claimed``."""
        return self.root / INDEX_DIR / CLAIMED_DIR

    @property
    def budget(self) -> Path:
        """``<root>/.budget``: the spend ledger's folder (its file and its lock)."""
        return self.root / BUDGET_DIR

    @property
    def ledger_file(self) -> Path:
        """``<root>/.budget/ledger.jsonl``."""
        return self.root / BUDGET_DIR / LEDGER_FILE

    def trash(self, conversation_id: str, tag: str) -> Path:
        """Where a conversation's folder is moved while it is deleted (``tag``: pid, counter)."""
        return self.root / f"{TRASH_PREFIX}{conversation_id}-{tag}"


class RedisKeys:
    """The keys of one Redis store (``PPLX_NB_STORE``). Ids are validated by the caller."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str = "pplx_nb") -> None:
        self.prefix = prefix

    @property
    def conversations(self) -> str:
        """``pplx_nb:conversations``: every conversation id, scored by its creation (ms)."""
        return f"{self.prefix}:conversations"

    def conversation(self, conversation_id: str, part: str) -> str:
        """``pplx_nb:conv:<id>:<part>``; ``part`` is one of :data:`CONVERSATION_PARTS`."""
        if part not in CONVERSATION_PARTS:
            raise KeyError(part)
        return f"{self.conversation_base}{conversation_id}:{part}"

    @property
    def conversation_base(self) -> str:
        """``pplx_nb:conv:``, what every key of a conversation starts with (for a script that
        builds them from the id)."""
        return f"{self.prefix}:conv:"

    def all_of(self, conversation_id: str) -> list[str]:
        """Every key the conversation may have (to delete or migrate it whole)."""
        return [self.conversation(conversation_id, part) for part in CONVERSATION_PARTS]

    def jobs(self, part: str) -> str:
        """``pplx_nb:jobs:<part>`` (the claim index and whatever else the queue keeps)."""
        return f"{self.prefix}:jobs:{part}"

    def budget(self, part: str) -> str:
        """``pplx_nb:budget:<part>``: the spend ledger's totals and holds."""
        return f"{self.prefix}:budget:{part}"

    def rate_limit(self, window: str) -> str:
        """``pplx_nb:ratelimit:<window>``: the shared request counter of one window."""
        return f"{self.prefix}:ratelimit:{window}"


CONVERSATION_PARTS = ("meta", "messages", "status", "job", "lock", "answering")
"""The parts of a conversation in Redis: ``pplx_nb:conv:<id>:<part>``."""
