"""Where the client's requests go: the configured API, or the built-in simulator when offline.

:class:`~pplx_nb.Settings` only says whether pplx_nb is offline (:attr:`Settings.is_offline`);
starting the in-process simulator for that is a side effect, and this module is the one place that
performs it::

    endpoint = resolve_endpoint(Settings(offline=True))   # starts the simulator once per process
    endpoint.base_url                                     # 'http://127.0.0.1:PORT'
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import SecretStr

from pplx_nb._config import DEFAULT_BASE_URL, Settings
from pplx_nb._errors import APIKeyInvalid
from pplx_nb.api._failures import KEY_HELP

__all__ = ["Endpoint", "resolve_endpoint"]


class Endpoint(NamedTuple):
    """Where the client sends requests: a base URL and the key (``None`` for keyless servers)."""

    base_url: str
    api_key: SecretStr | None
    offline: bool


def resolve_endpoint(settings: Settings) -> Endpoint:
    """The URL and key requests use; when offline, the process-wide simulator, started now.

    Raises APIKeyInvalid when offline is explicitly off, no key is set and the base URL is the
    real API (which would refuse every request).
    """
    if settings.is_offline:
        from pplx_nb.sim import shared_server_url

        url = shared_server_url(
            latency_ms=settings.sim_latency_ms,
            deep_research_seconds=settings.sim_deep_research_seconds,
            cache_dir=settings.cache_dir(),
            sonar=settings.sim_sonar,
        )
        return Endpoint(url, None, True)
    if settings.api_key is None and settings.base_url == DEFAULT_BASE_URL:
        raise APIKeyInvalid(f"No Perplexity API key is set. {KEY_HELP}")
    return Endpoint(settings.base_url, settings.api_key, False)
