"""Settings: the one place that reads environment variables.

Every component takes a :class:`Settings` (or builds the default one with
:func:`Settings.from_env`).
An explicit keyword argument always wins over the environment::

    Settings(api_key="pplx-...", offline=False)
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from pplx_nb._caps import parse_caps
from pplx_nb._errors import redact, url_without_credentials
from pplx_nb._store_url import check_store_url

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODEL", "Settings", "parse_rate"]

DEFAULT_BASE_URL = "https://api.perplexity.ai"
DEFAULT_MODEL = "low"
"""The Agent API preset that took over from ``sonar-pro``, the default before Sonar retired."""
_RATE_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
}
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([a-z]+?)s?\s*$")


def parse_rate(text: str) -> tuple[float, float] | None:
    """``"20/s"`` -> ``(20.0, 1.0)``: the count and the period in seconds; ``None`` if not a rate.

    Units: s, sec, second, min, minute, h, hour (a trailing s is allowed: 50/mins).
    """
    match = _RATE_RE.match(text.lower())
    if match is None or match.group(2) not in _RATE_UNITS or float(match.group(1)) <= 0:
        return None
    return float(match.group(1)), _RATE_UNITS[match.group(2)]


def _env(name: str, field: str) -> Any:
    return AliasChoices(field, name)


class Settings(BaseSettings):
    """pplx_nb configuration; each field names the environment variable it reads.

    ``offline`` left unset means: offline when no API key is set and the base URL is the real API,
    so a fresh install answers from the built-in simulator instead of failing.
    """

    model_config = SettingsConfigDict(
        extra="ignore",
        validate_by_name=True,
        validate_by_alias=True,
        frozen=True,
        env_ignore_empty=True,
        # A rejected value may be a key or a URL with credentials: errors name the field only.
        hide_input_in_errors=True,
    )

    api_key: SecretStr | None = Field(None, validation_alias=_env("PERPLEXITY_API_KEY", "api_key"))
    base_url: str = Field(
        DEFAULT_BASE_URL, validation_alias=_env("PERPLEXITY_BASE_URL", "base_url")
    )
    api_style: Literal["agent", "sonar"] = Field(
        "agent", validation_alias=_env("PERPLEXITY_API_STYLE", "api_style")
    )
    model: str = Field(
        DEFAULT_MODEL,
        validation_alias=_env("PERPLEXITY_MODEL", "model"),
        description="A preset, provider model or retired Sonar name (mapped for each style).",
    )
    timeout_ms: int = Field(30_000, gt=0, validation_alias=_env("PERPLEXITY_TIMEOUT", "timeout_ms"))
    deep_research_timeout_ms: int = Field(
        900_000,
        gt=0,
        validation_alias=_env("PERPLEXITY_DEEP_RESEARCH_TIMEOUT", "deep_research_timeout_ms"),
    )
    max_retries: int = Field(
        3, ge=0, validation_alias=_env("PERPLEXITY_MAX_RETRIES", "max_retries")
    )
    max_response_mb: float = Field(
        32,
        gt=0,
        validation_alias=_env("PPLX_NB_MAX_RESPONSE_MB", "max_response_mb"),
        description="The most one API response body or stream may hold, in MiB.",
    )
    cache_ttl: float = Field(3600, ge=0, validation_alias=_env("PERPLEXITY_CACHE_TTL", "cache_ttl"))
    cache_max_size: int = Field(
        100, ge=0, validation_alias=_env("PERPLEXITY_CACHE_MAX_SIZE", "cache_max_size")
    )
    enable_async_deep_research: bool | None = Field(
        None,
        validation_alias=_env(
            "PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH", "enable_async_deep_research"
        ),
        description="None: each face picks its default (MCP blocks, notebooks queue).",
    )
    max_job_retries: int = Field(
        2, ge=0, validation_alias=_env("PERPLEXITY_MAX_JOB_RETRIES", "max_job_retries")
    )
    job_lease_seconds: float = Field(
        60, gt=0, validation_alias=_env("PPLX_NB_JOB_LEASE_SECONDS", "job_lease_seconds")
    )
    max_file_bytes: int = Field(
        32 << 20,
        gt=0,
        validation_alias=_env("PPLX_NB_MAX_FILE_BYTES", "max_file_bytes"),
        description="The largest conversation or job file read from the logs folder.",
    )
    conversation_logs_dir: Path = Field(
        Path("conversation-logs"),
        validation_alias=_env("CONVERSATION_LOGS_DIR", "conversation_logs_dir"),
    )
    store_url: str | None = Field(
        None,
        validation_alias=_env("PPLX_NB_STORE", "store_url"),
        description="redis://HOST:PORT/DB puts conversations, job statuses, the queue and the "
        "answer guard in Redis; unset keeps them as files under conversation_logs_dir.",
    )
    rate_limit: str | None = Field(
        None,
        validation_alias=_env("PPLX_NB_RATE_LIMIT", "rate_limit"),
        description="API requests allowed, such as 20/s or 50/min; shared by every process on "
        "the same Redis store (per process with files).",
    )
    budget: str | None = Field(
        None,
        validation_alias=_env("PPLX_NB_BUDGET", "budget"),
        description="Spend caps in USD checked before paying, such as "
        "2/request,10/day,100/month (UTC periods); one ledger per store. Unset: no cap.",
    )
    offline: bool | None = Field(None, validation_alias=_env("PPLX_NB_OFFLINE", "offline"))
    file_roots: Annotated[tuple[Path, ...], NoDecode] = Field(
        (), validation_alias=_env("PPLX_NB_FILE_ROOTS", "file_roots")
    )
    sim_latency_ms: int = Field(
        300, ge=0, validation_alias=_env("PPLX_NB_SIM_LATENCY_MS", "sim_latency_ms")
    )
    sim_deep_research_seconds: float = Field(
        5.0,
        ge=0,
        validation_alias=_env("PPLX_NB_SIM_DEEP_RESEARCH_SECONDS", "sim_deep_research_seconds"),
    )
    sim_sonar: bool = Field(
        False,
        validation_alias=_env("PPLX_NB_SIM_SONAR", "sim_sonar"),
        description="The simulator also serves the retired Sonar chat completions.",
    )
    cache_home: Path | None = Field(
        None,
        validation_alias=_env("XDG_CACHE_HOME", "cache_home"),
        description="The user cache folder (an operating-system convention; ~/.cache if unset).",
    )
    state_home: Path | None = Field(
        None,
        validation_alias=_env("XDG_STATE_HOME", "state_home"),
        description="The user state folder (an operating-system convention; ~/.local/state if "
        "unset): paid answers a failing store could not take are kept there.",
    )
    mcp_token: SecretStr | None = Field(
        None,
        validation_alias=_env("PPLX_NB_MCP_TOKEN", "mcp_token"),
        description="Bearer token the MCP server requires over HTTP; never logged or shown.",
    )
    mcp_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        validation_alias=_env("PPLX_NB_MCP_ALLOWED_HOSTS", "mcp_allowed_hosts"),
        description="Host headers the MCP server accepts over HTTP (comma-separated; "
        "empty: loopback names and the bound address).",
    )
    mcp_allowed_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        validation_alias=_env("PPLX_NB_MCP_ALLOWED_ORIGINS", "mcp_allowed_origins"),
        description="Origin headers the MCP server accepts over HTTP (comma-separated; "
        "empty: loopback origins).",
    )
    log_level: str = Field("info", validation_alias=_env("LOG_LEVEL", "log_level"))
    log_format: Literal["text", "json"] = Field(
        "text", validation_alias=_env("LOG_FORMAT", "log_format")
    )

    @field_validator("file_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(Path(part) for part in value.split(os.pathsep) if part)
        return value

    @field_validator("mcp_allowed_hosts", "mcp_allowed_origins", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        shown = url_without_credentials(value)
        try:
            parts = urlsplit(value.strip())
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError as exc:
            raise ValueError(
                f"PERPLEXITY_BASE_URL {shown!r} is not a valid URL ({redact(str(exc), value)})"
            ) from None
        if parts.scheme not in ("http", "https") or not parts.hostname or " " in value.strip():
            raise ValueError(
                f"PERPLEXITY_BASE_URL {shown!r} must be an http:// or https:// URL with a host, "
                f"such as {DEFAULT_BASE_URL}"
            )
        return value.strip().rstrip("/")

    @field_validator("store_url")
    @classmethod
    def _check_store(cls, value: str | None) -> str | None:
        return None if value is None else check_store_url(value)

    @field_validator("rate_limit")
    @classmethod
    def _check_rate(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if parse_rate(value) is None:
            raise ValueError(
                f"PPLX_NB_RATE_LIMIT {value!r} must be a count per unit such as 20/s, 50/min or "
                "1000/h"
            )
        return value.strip()

    @field_validator("budget")
    @classmethod
    def _check_budget(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parse_caps(value)  # a ValidationError naming PPLX_NB_BUDGET, with an example
        return value.strip()

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Read the environment now; keyword arguments override it."""
        return cls(**overrides)

    @property
    def is_offline(self) -> bool:
        """Whether requests go to the built-in simulator instead of ``base_url``."""
        if self.offline is not None:
            return self.offline
        return self.api_key is None and self.base_url == DEFAULT_BASE_URL

    def cache_dir(self) -> Path:
        """pplx_nb's folder in the user cache (built simulator corpora live there)."""
        return (self.cache_home or Path.home() / ".cache").expanduser() / "pplx_nb"

    def state_dir(self) -> Path:
        """pplx_nb's folder in the user state folder (paid answers the store could not take
        wait there until it can)."""
        return (self.state_home or Path.home() / ".local" / "state").expanduser() / "pplx_nb"

    def logs_dir(self) -> Path:
        """The conversation-logs directory as an absolute path."""
        return self.conversation_logs_dir.expanduser().resolve()

    def redacted(self) -> dict[str, Any]:
        """All settings as a dict for display: the key shown only as set / not set, and the
        base URL without the ``user:password@`` it may carry."""
        data = self.model_dump()
        data["api_key"] = "set (hidden)" if self.api_key is not None else "not set"
        data["base_url"] = url_without_credentials(self.base_url)
        if self.store_url is not None:
            data["store_url"] = url_without_credentials(self.store_url)
        data["mcp_token"] = "set (hidden)" if self.mcp_token is not None else "not set"
        data["offline_in_effect"] = self.is_offline
        return data

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            hides = name in ("base_url", "store_url") and value is not None
            yield name, url_without_credentials(value) if hides else value
