"""Command line of the deep-research worker: ``python -m pplx_nb.worker [--concurrency N]``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import signal
import sys
from collections.abc import Sequence
from typing import cast

from pydantic import ValidationError as PydanticValidationError

from pplx_nb._config import Settings
from pplx_nb._errors import PplxError, ValidationError
from pplx_nb._logging import configure_logging
from pplx_nb.backends import open_backends
from pplx_nb.jobs import JobRunner, Worker

__all__ = ["load_runner", "main"]

logger = logging.getLogger("pplx_nb.jobs")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pplx_nb.worker",
        description="Run queued deep-research jobs until SIGTERM, from the Redis store of "
        "PPLX_NB_STORE when set (any machine that reaches it), else from CONVERSATION_LOGS_DIR.",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="jobs run at once (default 4)")
    parser.add_argument(
        "--drain",
        type=float,
        default=10.0,
        help="seconds running jobs may take to finish on SIGTERM before being released",
    )
    parser.add_argument("--worker-id", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--poll-interval", type=float, default=0.2, help=argparse.SUPPRESS)
    parser.add_argument("--runner", default=None, help=argparse.SUPPRESS)
    return parser


def load_runner(spec: str) -> JobRunner:
    """Import ``module:function`` and return it as the job runner."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValidationError(f"--runner expects module:function, got {spec!r}.")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValidationError(
            f"--runner {spec!r} cannot be loaded: {exc}. Check the module is importable "
            "(PYTHONPATH) and defines that function."
        ) from exc
    if not callable(target):
        raise ValidationError(f"--runner {spec!r} does not name a callable.")
    return cast(JobRunner, target)


async def _serve(worker: Worker) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await worker.run(stop)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m pplx_nb.worker`` and ``pplx-nb-worker``.

    Returns 0 after a clean stop, 2 when the configuration or the arguments are unusable.
    """
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except PydanticValidationError as exc:
        print(
            "The worker cannot start: VALIDATION_ERROR: invalid configuration, fix the "
            f"environment:\n{exc}",
            file=sys.stderr,
        )
        return 2
    configure_logging(settings)
    try:
        _run(args, settings)
    except PplxError as exc:
        logger.error("The worker cannot start: %s", exc)
        return 2
    return 0


def _run(args: argparse.Namespace, settings: Settings) -> None:
    researcher = None
    try:
        if args.runner:
            runner = load_runner(args.runner)
        else:
            from pplx_nb.research import Researcher, job_runner

            researcher = Researcher(settings)
            runner = job_runner(researcher)
        worker = Worker(
            open_backends(settings).job_queue(),
            runner,
            concurrency=args.concurrency,
            worker_id=args.worker_id,
            poll_interval=args.poll_interval,
            drain_seconds=args.drain,
        )
        asyncio.run(_serve(worker))
    finally:
        if researcher is not None:
            researcher.close()


if __name__ == "__main__":
    sys.exit(main())
