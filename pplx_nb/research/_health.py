"""Health: healthy | degraded | unhealthy, from the API, the response cache, store and memory."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pplx_nb import __version__
from pplx_nb._config import Settings
from pplx_nb._errors import PplxError

if TYPE_CHECKING:
    from pplx_nb.api import AsyncClient, ResponseCache
    from pplx_nb.store import ConversationStore

__all__ = ["health"]

_MEMORY_MB = 1024
"""Resident memory above which the process counts as degraded."""


async def health(
    settings: Settings,
    client: Callable[[], AsyncClient],
    cache: ResponseCache | None,
    store: ConversationStore,
    started: float,
) -> dict[str, Any]:
    """The report: status, version, uptime since ``started`` (monotonic), checks, offline.

    ``client`` gives the API client to ask (it may fail: no API key is then an unreachable API).
    """
    checks = {
        "api": await _api_reachable(client),
        "cache": _cache_consistent(cache),
        "store": _store_writable(store),
        "memory": _rss_mb() < _MEMORY_MB,
    }
    if not checks["store"]:
        state = "unhealthy"
    elif all(checks.values()):
        state = "healthy"
    else:
        state = "degraded"
    return {
        "status": state,
        "version": __version__,
        "uptime": round(time.monotonic() - started, 3),
        "checks": checks,
        "offline": settings.is_offline,
    }


async def _api_reachable(client: Callable[[], AsyncClient]) -> bool:
    """Whether the client's API answers (a client that cannot be made, e.g. no key: no)."""
    try:
        return await client().reachable()
    except Exception:
        return False


def _cache_consistent(cache: ResponseCache | None) -> bool:
    """The response cache, if any, answers and holds no more than its caps allow.

    No probe entry is written: in a full cache it would evict a real answer.
    """
    if cache is None:
        return True
    try:
        stats = cache.stats()
    except Exception:
        return False
    return 0 <= stats.entries <= cache.max_size and 0 <= stats.bytes <= cache.max_bytes


def _store_writable(store: ConversationStore) -> bool:
    try:
        store.check_writable()
    except PplxError:
        return False
    return True


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
