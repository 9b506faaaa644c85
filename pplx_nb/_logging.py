"""Logging: pplx_nb's loggers, and their set-up for the command-line entry points.

Library code gets its logger from :func:`get_logger`, whose records are redacted before any
handler sees them (key-shaped text, Authorization values, a URL's ``user:password@``), whoever
configured logging. The entry points (MCP server, worker) call :func:`configure_logging` once,
which sends the ``pplx_nb`` loggers, and only those, to stderr (stdout belongs to JSON-RPC in
the MCP server) as text or, with ``LOG_FORMAT=json``, as JSON lines, also redacting the key.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Any

from pplx_nb._redact import redact

if TYPE_CHECKING:
    from pplx_nb._config import Settings

__all__ = ["JsonFormatter", "configure_logging", "get_logger"]

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_TRACEBACKS = logging.Formatter()


class _Redacting(logging.Filter):
    """Replaces a record's message (and traceback) by its redacted text."""

    def __init__(self, secret: str | None) -> None:
        super().__init__()
        self._secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format call: the handler reports it as usual
            return True
        record.msg = redact(message, self._secret)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = _TRACEBACKS.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self._secret)
        return True


def get_logger(name: str) -> logging.Logger:
    """The logger ``name`` (a ``pplx_nb`` one), redacting every record it emits."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, _Redacting) for f in logger.filters):
        logger.addFilter(_Redacting(None))
    return logger


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
    """Send the ``pplx_nb`` loggers to stderr at the configured level and format.

    No other logger is touched: the root logger and the HTTP libraries (whose debug output
    carries request and response headers) keep whatever the embedding program set.
    """
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
