"""Model prices from the API (``GET /v1/models``), kept on disk for a day.

Asked for only when an answer needs its cost estimated (the API reported none), once per client
and at most once a day per server: the list is cached under ``Settings.cache_dir()`` in a file
named after the server. Fetching never holds an answer up for long (one attempt, a short
timeout); when it fails, or the server lists no prices, the static table of
:mod:`pplx_nb._pricing` prices the answer instead. Failures are logged at debug level only.

Reading is total: a cache file or a listing that is damaged, foreign or absurd (no ``models``,
a price that is not a finite non-negative number, ``fetchedAt`` in the future or infinite) is
ignored entry by entry, so the static table prices what it left out; it never raises.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from pplx_nb._fs import atomic_write_json, ensure_dir, read_bytes
from pplx_nb._logging import get_logger
from pplx_nb._pricing import Price

__all__ = ["FETCH_TIMEOUT", "PRICES_TTL", "ModelPrices", "parse_prices", "prices_path"]

logger = get_logger("pplx_nb.api")

PRICES_TTL = 24 * 3600.0
"""Seconds a fetched price list is used before it is fetched again."""
FETCH_TIMEOUT = 2.0
"""Seconds ``GET /v1/models`` may take before the static table is used instead."""
_UNITS = {"1m tokens": 1.0, "1k tokens": 1e3, "token": 1e6, "1 token": 1e6}
_MAX_BYTES = 4 << 20


def _number(value: Any, scale: float = 1.0) -> float | None:
    """``value`` times ``scale`` if that is a finite number >= 0; else ``None`` (NaN, infinity,
    a price that overflows once scaled, a negative one, a string, a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        scaled = float(value) * scale
    except OverflowError:  # an int too large for a float
        return None
    return scaled if math.isfinite(scaled) and scaled >= 0 else None


def parse_prices(data: Any) -> dict[str, Price]:
    """The token prices in a ``GET /v1/models`` body, by model id; models without prices (or
    with a unit that is not per token, or a price that is not a finite number >= 0) are left
    out. Never raises, whatever ``data`` is."""
    entries = data.get("data") if isinstance(data, dict) else None
    prices: dict[str, Price] = {}
    for entry in entries if isinstance(entries, list) else ():
        pricing = entry.get("pricing") if isinstance(entry, dict) else None
        if not isinstance(pricing, dict) or not isinstance(entry.get("id"), str):
            continue
        unit = pricing.get("unit", "1M tokens")
        scale = _UNITS.get(unit.strip().lower()) if isinstance(unit, str) else None
        if scale is None:
            continue
        paid_in = _number(pricing.get("input"), scale)
        paid_out = _number(pricing.get("output"), scale)
        if paid_in is None or paid_out is None:
            continue
        cached = _number(pricing.get("cache_read"), scale)
        prices[entry["id"].lower()] = Price(paid_in, paid_out, cache_read_per_m=cached)
    return prices


def prices_path(cache_dir: Path, base_url: str) -> Path:
    """Where the price list of the server at ``base_url`` (without credentials) is cached."""
    digest = hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:16]
    return cache_dir / "models" / f"{digest}.json"


class ModelPrices:
    """The API's model prices, read from the disk cache or fetched once (see the module).

    Args:
        path: the cache file (:func:`prices_path`).
        fetch: ``GET /v1/models`` within a timeout in seconds: the body, or an exception.
        ttl: seconds a cached list stays fresh.
    """

    def __init__(
        self,
        path: Path,
        fetch: Callable[[float], Awaitable[bytes]],
        *,
        ttl: float = PRICES_TTL,
    ) -> None:
        self.path = path
        self._fetch = fetch
        self._ttl = ttl
        self._prices: dict[str, Price] | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> Mapping[str, Price]:
        """The prices by model id; empty when neither the cache nor the API has any."""
        if self._prices is not None:
            return self._prices
        async with self._lock:
            if self._prices is None:
                self._prices = self._cached()
                if self._prices is None:
                    self._prices = await self._fetched()
        return self._prices

    def _cached(self) -> dict[str, Price] | None:
        """The cached prices while fresh; ``None`` (fetch them) when the file is absent,
        unreadable, foreign or stale. A fresh file without a usable listing gives no prices:
        the static table answers."""
        try:
            data = json.loads(read_bytes(self.path, _MAX_BYTES))
            age = time.time() - float(data["fetchedAt"])
        except Exception as exc:  # absent, unreadable or foreign: fetch instead
            logger.debug("No cached model prices at %s: %s", self.path, type(exc).__name__)
            return None
        # An infinite or future stamp would keep a bad file "fresh" for ever.
        if not 0 <= age < self._ttl:
            return None
        return parse_prices(data.get("models"))

    async def _fetched(self) -> dict[str, Price]:
        try:
            async with asyncio.timeout(FETCH_TIMEOUT):
                raw = await self._fetch(FETCH_TIMEOUT)
            body = json.loads(raw)
        except Exception as exc:  # any failure: the static table prices the answer
            logger.debug("Model prices not fetched (%s); using the static table", exc)
            return {}
        # Kept even when it lists no prices: the server answered, so ask it again tomorrow.
        try:
            ensure_dir(self.path.parent)
            atomic_write_json(self.path, {"fetchedAt": time.time(), "models": body})
        except Exception as exc:  # a read-only cache folder only costs a fetch next time
            logger.debug("Model prices not cached at %s: %s", self.path, exc)
        return parse_prices(body)
