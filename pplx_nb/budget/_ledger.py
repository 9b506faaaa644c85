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
     "holds":  {"<hold id>": {"amount": n, "state": "reserved"|"spent", "at": "<UTC ISO>",
                              "day": "2026-11-28", "month": "2026-11", "kind": "search:low"}},
     "kinds":  {"search:low": [runs settled, the most one cost]}}

A hold counts in the day and month it was reserved in. Pruned on every write: days before today,
months before this one, spent holds of earlier days, reserved holds of earlier months (what no
period counts any more).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from pplx_nb._caps import Period
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
        unknown) and count it in its kind's history; False when no reserved hold has that id."""
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
    old = document["holds"].get(hold)
    if old is not None and old["state"] == "reserved":
        _add(document, old, old["amount"], -old["amount"])
        old["state"] = "spent"
    day, month = day_label(now), month_label(now)
    periods: tuple[tuple[Period, str, str], ...] = (
        ("day", day, "days"),
        ("month", month, "months"),
    )
    for period, label, table in periods:
        limit = limits.get(period)
        spent, reserved = document[table].get(label, [0, 0])
        if limit is not None and spent + reserved + amount > limit:
            return Refusal(period, spent + reserved)
    entry = {
        "amount": amount,
        "state": "reserved",
        "at": now.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "day": day,
        "month": month,
        "kind": kind,
    }
    document["holds"][hold] = entry
    _add(document, entry, 0, amount)
    return None


def settle_in(document: dict[str, Any], hold: str, amount: int | None, *, count: bool) -> bool:
    """:meth:`Ledger.settle` (``count``: in its kind's history) or :meth:`Ledger.release`."""
    entry = document["holds"].get(hold)
    if entry is None or entry["state"] != "reserved":
        return False
    spent = entry["amount"] if amount is None else amount
    _add(document, entry, spent, -entry["amount"])
    entry["state"], entry["amount"] = "spent", spent
    if count:
        runs, most = document["kinds"].get(entry["kind"], [0, 0])
        document["kinds"][entry["kind"]] = [runs + 1, max(most, spent)]
    return True


def prune(document: dict[str, Any], now: datetime) -> None:
    """Drop what no period counts any more (see the module)."""
    day, month = day_label(now), month_label(now)
    document["days"] = {k: v for k, v in document["days"].items() if k >= day}
    document["months"] = {k: v for k, v in document["months"].items() if k >= month}
    document["holds"] = {
        k: v
        for k, v in document["holds"].items()
        if v["month"] >= month and (v["state"] == "reserved" or v["day"] >= day)
    }


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
            prune(self._document, now)
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
    """The ledger of a logs folder: ``<root>/.budget/ledger.json``, each step one locked
    read-modify-write (the folder's ``.lock``, ``flock``), written atomically.

    Nothing is created until the first step (a store without caps never has the folder).
    """

    def __init__(self, root: Path) -> None:
        layout = Layout(root)
        self._folder = layout.budget
        self._file = layout.ledger_file
        self.where = str(self._file)

    def _read(self) -> dict[str, Any]:
        try:
            data = read_bytes(self._file, _MAX_LEDGER_BYTES)
        except FileNotFoundError:
            return empty()
        try:
            document = json.loads(data)
            if not isinstance(document, dict) or set(document) != set(empty()):
                raise ValueError("not a ledger")
        except ValueError as exc:
            # Refusing every request over a damaged file would stop all work; counting from
            # zero again is said loudly instead.
            logger.error("The spend ledger %s is damaged (%s); it starts again", self._file, exc)
            return empty()
        return document

    def _write(self, document: dict[str, Any]) -> None:
        atomic_write_bytes(self._file, json.dumps(document, separators=(",", ":")).encode())

    def _step(self, now: datetime | None, change: Any) -> Any:
        with fs_errors(self._folder, "keep the spend ledger in"):
            ensure_dir(self._folder)
            with locked(self._folder):
                document = self._read()
                if now is not None:
                    prune(document, now)
                result = change(document)
                if result is not False:
                    self._write(document)
                return result

    def reserve(
        self, hold: str, amount: int, limits: Mapping[Period, int], now: datetime, kind: str
    ) -> Refusal | None:
        """See :meth:`Ledger.reserve`."""
        refusal: Refusal | None = self._step(
            now, lambda d: reserve_in(d, hold, amount, limits, now, kind)
        )
        return refusal

    def settle(self, hold: str, amount: int | None) -> bool:
        """See :meth:`Ledger.settle`."""
        return bool(self._step(None, lambda d: settle_in(d, hold, amount, count=True)))

    def release(self, hold: str) -> bool:
        """See :meth:`Ledger.release`."""
        return bool(self._step(None, lambda d: settle_in(d, hold, 0, count=False)))

    def totals(self, now: datetime) -> dict[Period, Totals]:
        """See :meth:`Ledger.totals` (read without the lock: the file is replaced whole)."""
        with fs_errors(self._folder, "read the spend ledger in"):
            return totals_in(self._read(), now)

    def history(self, kind: str) -> History:
        """See :meth:`Ledger.history`."""
        with fs_errors(self._folder, "read the spend ledger in"):
            return history_in(self._read(), kind)
