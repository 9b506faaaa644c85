"""The spend ledger: what each UTC day and month spent and holds reserved, one per store.

A request reserves its worst case under a hold id before it is sent; when it ends, the hold
settles to what it cost (or keeps its reservation as spent when that is unknown, or is released
when provably nothing was sent). :class:`Ledger` is the seam; three ship, as the store's
backends do: :class:`MemoryLedger` (one process; tests), :class:`FileLedger` (a locked file in
the logs folder) and :class:`~pplx_nb.budget._redis.RedisLedger` (one Lua script per step).

Amounts are whole micro-dollars, so every process adds the same numbers. The document the
memory and file ledgers keep, and the pure steps over it::

    {"days":   {"2026-11-28": [spent, reserved]},
     "months": {"2026-11": [spent, reserved]},
     "holds":  {"<hold id>": {"amount": n, "state": "reserved", "at": "<UTC ISO>",
                              "day": "2026-11-28", "month": "2026-11", "kind": "search:low"}},
     "kinds":  {"search:low": [runs settled, the most one cost]}}

A hold counts in the day and month it was reserved in, and leaves the document once settled
(its amount is in those totals), so the file holds only what is in flight. Pruned on every
reservation: days before today, months before this one, and holds of earlier months never
settled (what no period counts any more).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from pplx_nb._caps import Period
from pplx_nb._errors import FilesystemError
from pplx_nb._fs import atomic_write_bytes, ensure_dir, fs_errors, locked, read_bytes
from pplx_nb._layout import Layout
from pplx_nb._logging import get_logger

__all__ = [
    "FileLedger",
    "History",
    "Ledger",
    "MemoryLedger",
    "Refusal",
    "Totals",
    "day_label",
    "month_label",
]

logger = get_logger("pplx_nb.budget")

_MAX_LEDGER_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Totals:
    """What one period spent and holds reserved, in micro-dollars."""

    spent: int = 0
    reserved: int = 0

    @property
    def used(self) -> int:
        """Spent and reserved: what a new reservation is added to."""
        return self.spent + self.reserved


@dataclass(frozen=True, slots=True)
class Refusal:
    """A reservation refused: ``period`` would pass its cap; ``used`` is what it had spent and
    reserved before (micro-dollars)."""

    period: Period
    used: int


@dataclass(frozen=True, slots=True)
class History:
    """The runs of one kind settled in this store: how many, and the most one cost (µUSD)."""

    runs: int = 0
    most: int = 0


class Ledger(Protocol):
    """Where the spend of one store is counted; every step is atomic across processes."""

    where: str
    """Where it lives, for messages (a folder, a Redis URL without credentials, ``memory``)."""

    def reserve(
        self, hold: str, amount: int, limits: Mapping[Period, int], now: datetime, kind: str
    ) -> Refusal | None:
        """Reserve ``amount`` under ``hold`` unless a period of ``limits`` (``"day"``,
        ``"month"``: caps in µUSD) would pass its cap; ``None`` when reserved. A hold still
        reserved under the same id (a job's run submitted again) is first counted as spent."""
        ...

    def settle(self, hold: str, amount: int | None) -> bool:
        """Settle ``hold`` to ``amount`` spent (``None``: its reservation, the cost being
        unknown) and count it in its kind's history; False when no reserved hold has that id
        (settled already, or never reserved)."""
        ...

    def release(self, hold: str) -> bool:
        """Settle ``hold`` to nothing spent (provably not sent, or cancelled unbilled)."""
        ...

    def totals(self, now: datetime) -> dict[Period, Totals]:
        """The day's and the month's totals at ``now``."""
        ...

    def history(self, kind: str) -> History:
        """The settled runs of ``kind``."""
        ...


def day_label(moment: datetime) -> str:
    """The UTC day of ``moment``: ``2026-11-28``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d")


def month_label(moment: datetime) -> str:
    """The UTC month of ``moment``: ``2026-11``."""
    return moment.astimezone(UTC).strftime("%Y-%m")


# -- the document and its pure steps ------------------------------------------------------------


def empty() -> dict[str, Any]:
    """A ledger with nothing in it."""
    return {"days": {}, "months": {}, "holds": {}, "kinds": {}}


def _add(document: dict[str, Any], hold: Mapping[str, Any], spent: int, reserved: int) -> None:
    for table, label in (("days", hold["day"]), ("months", hold["month"])):
        pair = document[table].setdefault(label, [0, 0])
        pair[0] += spent
        pair[1] += reserved


def reserve_in(
    document: dict[str, Any],
    hold: str,
    amount: int,
    limits: Mapping[Period, int],
    now: datetime,
    kind: str,
) -> Refusal | None:
    """:meth:`Ledger.reserve` on ``document``."""
    refusal = _refusal(document, amount, limits, now)
    prune(document, now)
    apply_reserve(document, hold, amount, utc_stamp(now), kind, granted=refusal is None)
    return refusal


def utc_stamp(moment: datetime) -> str:
    """``moment`` in UTC as ISO 8601 with milliseconds and ``Z``; it starts with its day's
    and month's labels (:func:`day_label`, :func:`month_label`)."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _refusal(
    document: Mapping[str, Any], amount: int, limits: Mapping[Period, int], now: datetime
) -> Refusal | None:
    """The period whose cap ``amount`` would pass, with what it had used; ``None`` if none."""
    periods: tuple[tuple[Period, str, str], ...] = (
        ("day", day_label(now), "days"),
        ("month", month_label(now), "months"),
    )
    for period, label, table in periods:
        limit = limits.get(period)
        spent, reserved = document[table].get(label, [0, 0])
        if limit is not None and spent + reserved + amount > limit:
            return Refusal(period, spent + reserved)
    return None


def apply_reserve(
    document: dict[str, Any], hold: str, amount: int, at: str, kind: str, *, granted: bool
) -> None:
    """What a reservation checked at ``at`` (:func:`utc_stamp`) changes: a hold still
    reserved under the same id counted as spent, and (``granted``) the new hold."""
    old = document["holds"].pop(hold, None)
    if old is not None:
        _add(document, old, old["amount"], -old["amount"])
    if not granted:
        return
    entry = {
        "amount": amount,
        "state": "reserved",
        "at": at,
        "day": at[:10],
        "month": at[:7],
        "kind": kind,
    }
    document["holds"][hold] = entry
    _add(document, entry, 0, amount)


def settle_in(document: dict[str, Any], hold: str, amount: int | None, *, count: bool) -> bool:
    """:meth:`Ledger.settle` (``count``: in its kind's history) or :meth:`Ledger.release`."""
    entry = document["holds"].get(hold)
    if entry is None or entry["state"] != "reserved":
        return False
    spent = entry["amount"] if amount is None else amount
    _add(document, entry, spent, -entry["amount"])
    del document["holds"][hold]  # counted in its day and month: nothing needs it any more
    if count:
        runs, most = document["kinds"].get(entry["kind"], [0, 0])
        document["kinds"][entry["kind"]] = [runs + 1, max(most, spent)]
    return True


def prune(document: dict[str, Any], now: datetime) -> None:
    """Drop what no period counts any more (see the module)."""
    day, month = day_label(now), month_label(now)
    if any(k < day for k in document["days"]):
        document["days"] = {k: v for k, v in document["days"].items() if k >= day}
    if any(k < month for k in document["months"]):
        document["months"] = {k: v for k, v in document["months"].items() if k >= month}
        holds = document["holds"].items()
        document["holds"] = {k: v for k, v in holds if v["month"] >= month}


def totals_in(document: Mapping[str, Any], now: datetime) -> dict[Period, Totals]:
    """:meth:`Ledger.totals` of ``document``."""
    day = document["days"].get(day_label(now), [0, 0])
    month = document["months"].get(month_label(now), [0, 0])
    return {"day": Totals(*day), "month": Totals(*month)}


def history_in(document: Mapping[str, Any], kind: str) -> History:
    """:meth:`Ledger.history` of ``document``."""
    return History(*document["kinds"].get(kind, [0, 0]))


# -- memory and files -----------------------------------------------------------------------


class MemoryLedger:
    """The ledger of one process (``open_backends(memory=True)``, tests)."""

    where = "memory"

    def __init__(self) -> None:
        self._document = empty()
        self._lock = threading.Lock()

    def reserve(
        self, hold: str, amount: int, limits: Mapping[Period, int], now: datetime, kind: str
    ) -> Refusal | None:
        """See :meth:`Ledger.reserve`."""
        with self._lock:
            return reserve_in(self._document, hold, amount, limits, now, kind)

    def settle(self, hold: str, amount: int | None) -> bool:
        """See :meth:`Ledger.settle`."""
        with self._lock:
            return settle_in(self._document, hold, amount, count=True)

    def release(self, hold: str) -> bool:
        """See :meth:`Ledger.release`."""
        with self._lock:
            return settle_in(self._document, hold, 0, count=False)

    def totals(self, now: datetime) -> dict[Period, Totals]:
        """See :meth:`Ledger.totals`."""
        with self._lock:
            return totals_in(self._document, now)

    def history(self, kind: str) -> History:
        """See :meth:`Ledger.history`."""
        with self._lock:
            return history_in(self._document, kind)


class FileLedger:
    """The ledger of a logs folder: ``<root>/.budget/ledger.jsonl``, each step one locked
    read and one append (the folder's ``.lock``, ``flock``).

    The file is a snapshot of the document (its first line) followed by the steps taken since,
    one JSON line each, appended with a single ``write``: ``["reserve", hold, amount, at, kind,
    granted]`` and ``["settle", hold, amount | null, counted]``. Every :data:`COMPACT_AFTER`
    steps the document is written again as a new snapshot (temp file + ``os.replace``), so a
    step reads a few dozen lines and writes one; a rename per step costs milliseconds on a busy
    disk. A last line cut short (the process died while appending) was never acknowledged and
    is ignored, and the next step writes a fresh snapshot. Nothing is created until the first
    step (a store without caps never has the folder).
    """

    COMPACT_AFTER = 64

    def __init__(self, root: Path) -> None:
        layout = Layout(root)
        self._folder = layout.budget
        self._file = layout.ledger_file
        self.where = str(self._file)

    def _read(self) -> tuple[dict[str, Any], int, bool]:
        """The document, the steps after its snapshot, and whether the last line was cut."""
        try:
            data = read_bytes(self._file, _MAX_LEDGER_BYTES)
        except FileNotFoundError:
            return empty(), 0, False
        lines = data.split(b"\n")
        cut = lines[-1] != b""  # a whole file ends with a newline
        if not cut:
            lines.pop()
        if cut:
            lines.pop()
        try:
            document = json.loads(lines[0]) if lines else empty()
            if not isinstance(document, dict) or set(document) != set(empty()):
                raise ValueError("not a ledger")
            # One parse for every step: a step reads a few dozen lines, each as costly to
            # parse alone as all of them together. Old days are pruned by the live step.
            steps = json.loads(b"[" + b",".join(lines[1:]) + b"]")
            for step in steps:
                _replay(document, step)
        except (ValueError, KeyError, TypeError) as exc:
            # Counting from zero would let the caps be passed: refused until someone looks.
            raise FilesystemError(
                f"The spend ledger {self._file} is damaged ({type(exc).__name__}), so no paid "
                "request can be checked against PPLX_NB_BUDGET. Move the file away to count "
                "from zero again (what it held for today and this month is then forgotten), "
                "or unset PPLX_NB_BUDGET.",
                path=str(self._file),
            ) from None
        return document, len(steps), cut

    def _save(self, document: dict[str, Any], steps: int, cut: bool, step: list[Any]) -> None:
        if cut or steps >= self.COMPACT_AFTER or not self._file.exists():
            snapshot = json.dumps(document, separators=(",", ":")) + "\n"
            atomic_write_bytes(self._file, snapshot.encode())
            return
        fd = os.open(self._file, _APPEND_FLAGS)
        try:
            os.write(fd, (json.dumps(step, separators=(",", ":")) + "\n").encode())
        finally:
            os.close(fd)

    def reserve(
        self, hold: str, amount: int, limits: Mapping[Period, int], now: datetime, kind: str
    ) -> Refusal | None:
        """See :meth:`Ledger.reserve`."""
        with fs_errors(self._folder, "keep the spend ledger in"):
            ensure_dir(self._folder)
            with locked(self._folder):
                document, steps, cut = self._read()
                refusal = _refusal(document, amount, limits, now)
                granted, at = refusal is None, utc_stamp(now)
                prune(document, now)
                apply_reserve(document, hold, amount, at, kind, granted=granted)
                self._save(document, steps, cut, ["reserve", hold, amount, at, kind, granted])
                return refusal

    def _settle(self, hold: str, amount: int | None, count: bool) -> bool:
        with fs_errors(self._folder, "keep the spend ledger in"):
            if not self._folder.is_dir():
                return False
            with locked(self._folder):
                document, steps, cut = self._read()
                if not settle_in(document, hold, amount, count=count):
                    return False
                self._save(document, steps, cut, ["settle", hold, amount, count])
                return True

    def settle(self, hold: str, amount: int | None) -> bool:
        """See :meth:`Ledger.settle`."""
        return self._settle(hold, amount, True)

    def release(self, hold: str) -> bool:
        """See :meth:`Ledger.release`."""
        return self._settle(hold, 0, False)

    def totals(self, now: datetime) -> dict[Period, Totals]:
        """See :meth:`Ledger.totals` (read without the lock: appends are single writes)."""
        with fs_errors(self._folder, "read the spend ledger in"):
            return totals_in(self._read()[0], now)

    def history(self, kind: str) -> History:
        """See :meth:`Ledger.history`."""
        with fs_errors(self._folder, "read the spend ledger in"):
            return history_in(self._read()[0], kind)


_APPEND_FLAGS = (
    os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)


def _replay(document: dict[str, Any], step: list[Any]) -> None:
    """Apply one appended step of a :class:`FileLedger` to ``document``."""
    if step[0] == "reserve":
        _, hold, amount, at, kind, granted = step
        apply_reserve(document, hold, amount, at, kind, granted=granted)
    else:
        _, hold, amount, counted = step
        settle_in(document, hold, amount, count=counted)
