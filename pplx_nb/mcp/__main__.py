"""Command line: ``python -m pplx_nb.mcp [--transport stdio|http] [--host H] [--port N]``.

Over HTTP, ``PPLX_NB_MCP_TOKEN`` turns on bearer authentication, and a ``--host`` other than a
loopback address refuses to start without it (``--allow-unauthenticated`` for trusted networks).

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
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="HTTP bind address (http only; anything but loopback needs PPLX_NB_MCP_TOKEN)",
    )
    parser.add_argument("--port", type=int, default=8000, help="HTTP port (http only)")
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve a non-loopback --host without PPLX_NB_MCP_TOKEN (trusted networks only)",
    )
    parser.add_argument(
        "--session-idle-seconds",
        type=float,
        default=300.0,
        help="close an HTTP session after this long without a request (default 300)",
    )
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
            from pplx_nb.context import allowed_roots

            try:
                allowed_roots(settings.file_roots)
            except ValidationError as exc:
                print(f"{exc.code}: {exc}")
                return 2
        if args.transport == "http":
            from pplx_nb.mcp._http import exposure_problem

            problem = exposure_problem(args.host, settings, args.allow_unauthenticated)
            if problem is not None:
                print(problem)
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
            from pplx_nb.mcp._http import serve_http

            server.load_tools()
            serve_http(server, settings, args.host, args.port, args.session_idle_seconds)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
