"""A real Redis for the tests: Debian's ``redis-server`` on a free loopback port in a temp folder.

:func:`start` runs one server (no persistence, 64 databases) and stops it on exit. Without
``redis-server`` the tests that need it skip with the reason, except where ``CI=true`` or
``PPLX_NB_REQUIRE_REDIS=1`` asks for it: there a missing server is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

__all__ = ["DATABASES", "RedisServer", "require", "start"]

DATABASES = 64


def require() -> str:
    """The path of ``redis-server``; skip (or fail where Redis is required) when it is missing."""
    path = shutil.which("redis-server")
    if path is None:
        reason = "redis-server not installed (Debian package redis-server)"
        if os.environ.get("CI") == "true" or os.environ.get("PPLX_NB_REQUIRE_REDIS") == "1":
            pytest.fail(f"Redis is required here but {reason}")
        pytest.skip(reason)
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A running ``redis-server``: its port, and the URL of any of its databases."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.port = port

    def url(self, db: int = 0) -> str:
        """``redis://127.0.0.1:PORT/db``."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def flush(self, db: int) -> None:
        """Empty database ``db`` (a test starts from nothing)."""
        import redis

        client = redis.Redis.from_url(self.url(db), socket_timeout=10)
        try:
            client.flushdb()
        finally:
            client.close()


@contextlib.contextmanager
def start(deadline: float = 30.0) -> Iterator[RedisServer]:
    """Run a fresh server until the block ends (killed if it does not stop in 10 s)."""
    import redis

    binary = require()
    with tempfile.TemporaryDirectory(prefix="pplx-nb-redis-") as folder:
        for _ in range(5):
            port = _free_port()
            process = subprocess.Popen(
                [
                    binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    folder,
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--databases",
                    str(DATABASES),
                    "--protected-mode",
                    "yes",
                    "--logfile",
                    os.path.join(folder, "redis.log"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            client = redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2)
            ends = time.monotonic() + deadline
            while process.poll() is None and time.monotonic() < ends:
                try:
                    if client.ping():
                        break
                except redis.RedisError:
                    time.sleep(0.05)
            client.close()
            if process.poll() is None and time.monotonic() < ends:
                break
            process.kill()
            process.wait()
        else:
            pytest.fail(f"redis-server did not start; see its log in {folder}")
        try:
            yield RedisServer(process, port)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
