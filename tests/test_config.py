"""Settings read every variable of the table, explicit arguments win, and the key stays hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from pplx_nb import Settings
from pplx_nb._config import DEFAULT_BASE_URL

KEY = "pplx-config-SECRET-9876543210"


def test_every_documented_variable_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "PERPLEXITY_API_KEY": KEY,
        "PERPLEXITY_BASE_URL": "http://127.0.0.1:9/",
        "PERPLEXITY_API_STYLE": "sonar",
        "PERPLEXITY_MODEL": "sonar",
        "PERPLEXITY_TIMEOUT": "1234",
        "PERPLEXITY_DEEP_RESEARCH_TIMEOUT": "5678",
        "PERPLEXITY_MAX_RETRIES": "7",
        "PERPLEXITY_CACHE_TTL": "12",
        "PERPLEXITY_CACHE_MAX_SIZE": "34",
        "PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH": "1",
        "PERPLEXITY_MAX_JOB_RETRIES": "5",
        "PPLX_NB_JOB_LEASE_SECONDS": "9",
        "CONVERSATION_LOGS_DIR": "/tmp/logs-here",
        "PPLX_NB_OFFLINE": "true",
        "PPLX_NB_FILE_ROOTS": "/a:/b",
        "LOG_LEVEL": "debug",
        "LOG_FORMAT": "json",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    s = Settings.from_env()
    assert s.api_key is not None and s.api_key.get_secret_value() == KEY
    assert s.base_url == "http://127.0.0.1:9"
    assert (s.api_style, s.model, s.timeout_ms, s.deep_research_timeout_ms) == (
        "sonar",
        "sonar",
        1234,
        5678,
    )
    assert (s.max_retries, s.cache_ttl, s.cache_max_size) == (7, 12, 34)
    assert s.enable_async_deep_research is True
    assert (s.max_job_retries, s.job_lease_seconds) == (5, 9)
    assert s.conversation_logs_dir == Path("/tmp/logs-here")
    assert s.offline is True and s.is_offline
    assert s.file_roots == (Path("/a"), Path("/b"))
    assert (s.log_level, s.log_format) == ("debug", "json")


def test_the_cache_folder_follows_xdg_cache_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert Settings.from_env().cache_dir() == tmp_path / "pplx_nb"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert Settings.from_env().cache_dir() == Path.home() / ".cache" / "pplx_nb"


def test_explicit_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERPLEXITY_MODEL", "sonar")
    monkeypatch.setenv("PPLX_NB_OFFLINE", "1")
    s = Settings(model="sonar-reasoning-pro", offline=False)
    assert s.model == "sonar-reasoning-pro"
    assert s.offline is False


def test_offline_by_default_only_without_a_key_on_the_real_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PPLX_NB_OFFLINE", raising=False)
    monkeypatch.delenv("PERPLEXITY_API_KEY", raising=False)
    monkeypatch.delenv("PERPLEXITY_BASE_URL", raising=False)
    assert Settings().is_offline
    assert not Settings(api_key=KEY).is_offline
    assert not Settings(base_url="http://127.0.0.1:1").is_offline
    assert Settings(api_key=KEY).base_url == DEFAULT_BASE_URL


def test_bad_values_are_refused_with_the_field_named() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="api_style"):
        Settings(api_style="graphql")
    with pytest.raises(ValidationError, match="max_retries"):
        Settings(max_retries=-1)


@pytest.mark.parametrize(
    "url", ["http://[::1", "ftp://api.example", "not a url", "http://h:99999", "https://"]
)
def test_a_base_url_that_is_not_http_is_refused_naming_the_variable(url: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="PERPLEXITY_BASE_URL"):
        Settings(base_url=url)


def test_a_base_url_keeps_its_path_without_the_trailing_slash() -> None:
    assert Settings(base_url=" http://127.0.0.1:8080/api/ ").base_url == "http://127.0.0.1:8080/api"


def test_the_key_appears_in_no_repr_or_display() -> None:
    s = Settings(api_key=KEY)
    assert KEY not in repr(s)
    assert KEY not in str(s)
    assert KEY not in str(s.redacted())
    assert s.redacted()["api_key"] == "set (hidden)"


_PURE = """
import socket, sys, threading

opened = []
real_socket = socket.socket


class Recorded(real_socket):
    def __init__(self, *args, **kwargs):
        opened.append(args)
        super().__init__(*args, **kwargs)


socket.socket = Recorded
from pplx_nb._config import Settings

for settings in (Settings(), Settings(offline=True), Settings(offline=True, sim_sonar=True)):
    assert settings.is_offline
    settings.cache_dir(), settings.logs_dir(), settings.redacted(), repr(settings)
loaded = sorted(m for m in sys.modules if m.startswith(("pplx_nb.sim", "pplx_nb.api")))
print(threading.active_count(), len(opened), loaded)
"""


def test_building_offline_settings_starts_no_server(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PPLX_NB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _PURE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0", "[]"]


def test_the_api_layer_starts_the_simulator_when_offline() -> None:
    from pplx_nb.api import resolve_endpoint
    from pplx_nb.sim import stats

    endpoint = resolve_endpoint(Settings(offline=True, sim_latency_ms=0))
    assert endpoint.offline and endpoint.api_key is None
    assert endpoint.base_url.startswith("http://127.0.0.1:")
    assert "generations" in stats(endpoint.base_url)
    assert resolve_endpoint(Settings(offline=True)).base_url == endpoint.base_url


def test_online_the_configured_url_and_key_are_used_as_they_are() -> None:
    from pplx_nb._errors import APIKeyInvalid
    from pplx_nb.api import resolve_endpoint

    endpoint = resolve_endpoint(Settings(api_key=KEY, base_url="http://127.0.0.1:9", offline=False))
    assert endpoint.base_url == "http://127.0.0.1:9" and not endpoint.offline
    assert endpoint.api_key is not None and endpoint.api_key.get_secret_value() == KEY
    with pytest.raises(APIKeyInvalid, match="PERPLEXITY_API_KEY"):
        resolve_endpoint(Settings(api_key=None, offline=False))


@pytest.mark.parametrize(
    "url",
    [
        "redis://h:6379/1/2",
        "redis://h:6379/abc",
        "redis://h:6379/5/extra",
        "redis://h:6379/-1",
        "redis://h:6379/5?db=6",
        "redis://h:6379/0?db=x",
        "redis://h:6379/0?foo=bar",
        "redis://h:6379/0?socket_timeout=abc",
        "redis://h:6379/0?db=1&db=1",
        "redis://h:6379/0?TopSecret99",
        "redis://h:6379/0#frag",
        "redis://h:6379/0?ssl_cert_reqs=none",
        "rediss://h:6379/0?ssl_cert_reqs=maybe",
        "redis://h:6379/0?client_name=a%20b",
        "unix://h/run/redis.sock",
        "unix://",
        "http://h:6379/0",
        "redis://h:port/0",
    ],
)
def test_a_store_url_redis_would_misread_is_refused_naming_the_variable_and_the_forms(
    url: str,
) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="PPLX_NB_STORE") as caught:
        Settings(store_url=url + "&password=TopSecret99" if "?" in url else url)
    assert "redis://HOST:PORT/DB" in str(caught.value)
    assert "TopSecret99" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        (" REDIS://h:6379/3 ", "redis://h:6379/3"),
        ("redis://h:6379/5?db=5", "redis://h:6379/5?db=5"),
        ("redis://h:6379?db=7&password=p", "redis://h:6379?db=7&password=p"),
        ("redis://h:6379/", "redis://h:6379/"),
        ("rediss://u:p@h:6380/2?ssl_cert_reqs=none", "rediss://u:p@h:6380/2?ssl_cert_reqs=none"),
        ("unix:///run/redis.sock?db=3&password=p", "unix:///run/redis.sock?db=3&password=p"),
    ],
)
def test_a_store_url_redis_reads_as_written_is_kept_with_its_scheme_in_lower_case(
    url: str, kept: str
) -> None:
    assert Settings(store_url=url).store_url == kept
