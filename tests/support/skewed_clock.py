"""Run a module as if the wall clock were off: ``python -m support.skewed_clock S M ...``.

Shifts ``time.time`` and the timestamps pplx_nb writes (``now_iso``) by S seconds, then runs
module M with the remaining arguments, as ``python -m M ...`` would. The monotonic clock is left
alone, as a real clock error leaves it.
"""

from __future__ import annotations

import runpy
import sys
import time
from datetime import UTC, datetime, timedelta

import pplx_nb._models as models


def main() -> None:
    """Shift the clock by ``sys.argv[1]`` seconds and run the module ``sys.argv[2]``."""
    offset = float(sys.argv[1])
    module = sys.argv[2]
    real_time, real_now_iso = time.time, models.now_iso

    def shifted_time() -> float:
        return real_time() + offset

    def shifted_now_iso(moment: datetime | None = None) -> str:
        return real_now_iso((moment or datetime.now(UTC)) + timedelta(seconds=offset))

    time.time = shifted_time
    # Before pplx_nb.jobs is imported, so the queue binds the shifted stamp.
    models.now_iso = shifted_now_iso
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
