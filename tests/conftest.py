"""Fixtures shared by the suite: a fresh simulator over loopback and settings pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import redis_server as redis_support
from support.misbehaving import Misbehaving
from support.redis_server import RedisServer

from pplx_nb import Researcher, Settings

TEST_KEY = "pplx-test-SECRETKEY-0123456789abcdef"


@pytest.fixture
def sim_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh in-process simulator (no added latency, 0.3 s deep research) and its base URL.

    It answers as the live API does (Sonar chat completions: 403) unless the test is marked
    ``sim_sonar``, which serves the retired Sonar protocol as well.
    """
    from pplx_nb.sim import serve

    sonar = request.node.get_closest_marker("sim_sonar") is not None
    with serve(latency_ms=0, deep_research_seconds=0.3, sonar=sonar) as url:
        yield url


@pytest.fixture
def bad(sim_url: str) -> Iterator[Misbehaving]:
    """The misbehaving proxy in front of this test's simulator (well-behaved until told)."""
    with Misbehaving(sim_url) as server:
        yield server


@pytest.fixture
def logs_dir(tmp_path: Path) -> Path:
    """An empty conversation-logs directory for one test."""
    path = tmp_path / "conversation-logs"
    path.mkdir()
    return path


@pytest.fixture
def settings(sim_url: str, logs_dir: Path) -> Settings:
    """Settings talking to the fresh simulator with a test key, storing under ``logs_dir``."""
    return Settings(
        api_key=TEST_KEY,
        base_url=sim_url,
        offline=False,
        conversation_logs_dir=logs_dir,
        state_home=logs_dir.parent / "state",
        max_retries=3,
        timeout_ms=5_000,
        job_lease_seconds=2,
    )


@pytest.fixture
def researcher(settings: Settings) -> Iterator[Researcher]:
    """A Researcher on the test's simulator whose deep research blocks until its report."""
    with Researcher(settings, async_deep_research=False) as r:
        yield r


@pytest.fixture
def async_researcher(settings: Settings) -> Iterator[Researcher]:
    """A Researcher on the test's simulator whose deep research is queued for its worker."""
    with Researcher(settings, async_deep_research=True) as r:
        yield r


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding ``notes.md``, made the current one (files attach from it)."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "notes.md").write_text(
        "# Notes\nOur service cancels asyncio tasks with TaskGroup on shutdown.\n"
    )
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real ``redis-server`` for the session (skips, or fails in CI, without one)."""
    with redis_support.start() as server:
        yield server


_next_db = iter(range(1 << 30))


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The URL of an emptied database of the session's Redis, a different one for each test."""
    db = next(_next_db) % redis_support.DATABASES
    redis_server.flush(db)
    return redis_server.url(db)
