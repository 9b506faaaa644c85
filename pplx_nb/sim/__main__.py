"""``python -m pplx_nb.sim``: serve the simulator until interrupted; the first line is its URL."""

from __future__ import annotations

import argparse
import math
import signal
import sys
from collections.abc import Callable
from types import FrameType

from pplx_nb.sim._options import CITATION_STYLES

__all__ = ["main"]


def _bounded(
    kind: Callable[[str], float], low: float, high: float = math.inf
) -> Callable[[str], float]:
    """An argparse ``type`` accepting finite ``kind`` values from ``low`` to ``high``."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and low <= value <= high):
            span = f"from {low:g} to {high:g}" if high < math.inf else f"{low:g} or more"
            raise argparse.ArgumentTypeError(f"{text} is out of range: use {span}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pplx_nb.sim",
        description="Offline Perplexity-compatible API server (Sonar and Agent protocols).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port", type=_bounded(int, 0, 65535), default=0, help="0 picks a free port"
    )
    parser.add_argument("--corpus", default=None, help="folder of .md/.txt/.rst files")
    parser.add_argument("--latency-ms", type=_bounded(int, 0), default=300)
    parser.add_argument("--deep-research-seconds", type=_bounded(float, 0), default=5.0)
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    parser.add_argument(
        "--sonar",
        action="store_true",
        default=None,
        help="also serve the retired Sonar chat completions (default: 403 as the live API; "
        "PPLX_NB_SIM_SONAR=1 does the same)",
    )
    parser.add_argument(
        "--citations",
        choices=CITATION_STYLES,
        default="numbered",
        help="how Agent answers mark sources: [1], [web:0] or markdown links",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, print the base URL as the first stdout line, and serve until a signal."""
    args = _parser().parse_args(argv)
    signals: list[int] = []

    def early_stop(signum: int, frame: FrameType | None) -> None:
        signals.append(signum)

    # Until the event loop takes the signals over, a SIGINT/SIGTERM just means "do not start".
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, early_stop)

    from pplx_nb._config import Settings
    from pplx_nb._errors import PplxError
    from pplx_nb.sim._options import SimOptions
    from pplx_nb.sim._server import base_url, bind, make_app, run_forever

    try:
        sonar = args.sonar if args.sonar is not None else Settings.from_env().sim_sonar
        options = SimOptions(
            args.latency_ms,
            args.deep_research_seconds,
            args.api_key,
            sonar=sonar,
            citations=args.citations,
        )
        app = make_app(args.corpus, options)
    except PplxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # the settings that name the cache folder do not validate
        print(f"error: invalid configuration, fix the environment:\n{exc}", file=sys.stderr)
        return 2
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    print(base_url(sock), flush=True)
    run_forever(app, sock, signals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
