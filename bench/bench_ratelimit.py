"""What a request's turn under the rate limit costs: in process, and shared through Redis.

Times :meth:`Throttle.admit` alone (no wait: a limit far above the pace) for the default (no
``PPLX_NB_RATE_LIMIT``, no store), a per-process limit, and the Redis one (a script call from a
thread), then whole requests to a simulator in another process (zero added latency) with each,
so the turn's cost sits next to the request it guards. Redis is Debian's ``redis-server`` on a free
loopback port, started here; without it the Redis rows say so.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bench._util import median, simulator, table
from pplx_nb import Settings
from pplx_nb.api import AsyncClient, Request
from pplx_nb.api._throttle import LocalThrottle, RedisThrottle, Throttle

TITLE = "Rate limit: the cost of a request's turn"

RUNS = 5
TURNS = 2_000
REQUESTS = 300
_FAST = "1000000/s"


@contextmanager
def _redis() -> Iterator[str | None]:
    """A throwaway ``redis-server`` (no persistence); yields its URL, or None without one."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="pplx-nb-bench-redis-") as folder:
        flags = ["--port", str(port), "--bind", "127.0.0.1", "--dir", folder, "--save", ""]
        process = subprocess.Popen([binary, *flags], stdout=subprocess.DEVNULL)
        try:
            for _ in range(200):
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.025)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(timeout=10)


async def _turns(throttle: Throttle) -> float:
    start = time.perf_counter()
    for _ in range(TURNS):
        await throttle.admit("bench", 60)
    return (time.perf_counter() - start) / TURNS


def _script_calls(throttle: RedisThrottle) -> float:
    start = time.perf_counter()
    for _ in range(TURNS):
        throttle.reserve(60)
    return (time.perf_counter() - start) / TURNS


async def _requests(settings: Settings) -> float:
    question = Request(messages=[{"role": "user", "content": "asyncio.TaskGroup"}], use_cache=False)
    async with AsyncClient(settings) as client:
        await client.ask(question)
        start = time.perf_counter()
        for _ in range(REQUESTS):
            await client.ask(question)
        return (time.perf_counter() - start) / REQUESTS


def run() -> str:
    """Median seconds per turn and per request for each kind of throttle (runs interleaved)."""
    with _redis() as store, simulator() as url:
        kinds: dict[str, tuple[Throttle, dict[str, str]]] = {
            "none (the default)": (LocalThrottle(None), {}),
            f"this process, `{_FAST}`": (LocalThrottle(_FAST), {"rate_limit": _FAST}),
        }
        if store is not None:
            shared = {"store_url": store, "rate_limit": _FAST}
            kinds[f"Redis, `{_FAST}`"] = (RedisThrottle(store, _FAST), shared)
        base = Settings(base_url=url, api_key="pplx-bench-0123456789", offline=False)
        turns: dict[str, list[float]] = {name: [] for name in kinds}
        direct: list[float] = []
        requests: dict[str, list[float]] = {name: [] for name in kinds}
        for _ in range(RUNS):
            for name, (throttle, fields) in kinds.items():
                turns[name].append(asyncio.run(_turns(throttle)))
                settings = base.model_copy(update=fields)
                requests[name].append(asyncio.run(_requests(settings)))
                if isinstance(throttle, RedisThrottle):
                    direct.append(_script_calls(throttle))
    plain = median(requests["none (the default)"])
    rows = []
    for name in kinds:
        whole = median(requests[name])
        rows.append(
            [
                name,
                f"{median(turns[name]) * 1e6:.1f} µs",
                f"{whole * 1e3:.2f} ms",
                f"{(whole - plain) * 1e3:+.2f} ms ({(whole - plain) / plain:+.0%})",
            ]
        )
    if store is None:
        rows.append(["Redis", "redis-server not installed", "", ""])
    head = ["throttle", "one turn (`admit`)", "one request to the simulator", "vs none"]
    return (
        f"Median of {RUNS} interleaved runs: {TURNS:,} turns, then {REQUESTS} sequential answers "
        "from a simulator in another process with no added latency (a real API answers in "
        "seconds).\n\n"
        + table(head, rows)
        + "\n\nA Redis turn is one script call (`EVALSHA`"
        + (f", {median(direct) * 1e6:.0f} µs called directly" if direct else "")
        + ") from a worker thread, so a slow Redis never blocks the event loop; next to a real "
        "API's 1–40 s answers it is noise."
    )
