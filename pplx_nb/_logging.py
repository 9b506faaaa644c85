"""Logging set-up for the command-line entry points (MCP server, worker, simulator).

Library code only calls ``logging.getLogger("pplx_nb...")``; the entry points call
:func:`configure_logging` once, which sends records to stderr (stdout belongs to JSON-RPC in the
MCP server) as text or, with ``LOG_FORMAT=json``, as JSON lines. Messages are redacted of API keys.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from pplx_nb._config import Settings
from pplx_nb._errors import redact

__all__ = ["JsonFormatter", "configure_logging"]

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class _Redacting(logging.Filter):
    def __init__(self, secret: str | None) -> None:
        super().__init__()
        self._secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage(), self._secret)
        record.args = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def configure_logging(settings: Settings) -> None:
    """Send the ``pplx_nb`` loggers to stderr at the configured level and format."""
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    secret = settings.api_key.get_secret_value() if settings.api_key else None
    handler.addFilter(_Redacting(secret))
    root = logging.getLogger("pplx_nb")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
    root.propagate = False
