"""Command line: ``python -m pplx_nb.mcp [--transport stdio|http] [--host H] [--port N]``.

On stdio, stdout carries JSON-RPC and nothing else: logging goes to stderr before anything is
imported, start-up runs with ``sys.stdout`` pointed at stderr, and while serving the SDK's stdio
transport writes to a private copy of the real stdout and points descriptor 1 at stderr, so a stray
``print`` from library code or a worker thread can never corrupt the stream.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys

__all__ = ["main"]

logger = logging.getLogger("pplx_nb.mcp")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pplx_nb.mcp",
        description="Serve Perplexity search and deep research over MCP (Model Context Protocol).",
    )
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (http only)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port (http only)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the server until the client disconnects (stdio) or the process is interrupted (http)."""
    args = _parse(argv)
    with contextlib.redirect_stdout(sys.stderr):
        from pydantic import ValidationError as PydanticValidationError

        from pplx_nb._config import Settings
        from pplx_nb._logging import configure_logging

        try:
            settings = Settings.from_env()
        except PydanticValidationError as exc:
            print(f"VALIDATION_ERROR: invalid configuration, fix the environment:\n{exc}")
            return 2
        configure_logging(settings)
        if settings.file_roots:
            from pplx_nb._errors import ValidationError
            from pplx_nb.context._files import allowed_roots

            try:
                allowed_roots(settings.file_roots)
            except ValidationError as exc:
                print(f"{exc.code}: {exc}")
                return 2
        from pplx_nb.mcp.server import create_server

        server = create_server(settings)
        mode = "enabled" if settings.enable_async_deep_research else "disabled"
        logger.info("Async deep research: %s", mode)
    sys.stdout.flush()
    try:
        if args.transport == "stdio":
            server.run("stdio")
        else:
            server.load_tools()
            logger.info(
                "Serving MCP over streamable HTTP on http://%s:%d/mcp", args.host, args.port
            )
            server.run("streamable-http", host=args.host, port=args.port)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
