"""A process that asks the API questions, for the rate-limit tests: ``python -m support.asker``.

Settings come from the environment (PERPLEXITY_BASE_URL, PPLX_NB_STORE, PPLX_NB_RATE_LIMIT).
It builds its client (``--warm``: and asks once, as a long-running worker's client is warm),
prints ``ready``, waits for a line on stdin, then either asks ``--count``
questions (``--concurrency`` at a time) or keeps asking for ``--seconds`` with ``--gap``
seconds between a reply and the next question, and prints one JSON line: the error codes met
and the instants of the turns its throttle granted (the throttle's clock: the Redis server's
when the limit is shared), which is where the limit is kept, whatever the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from pplx_nb import Settings
from pplx_nb._errors import PplxError
from pplx_nb.api._throttle import _Turn
from pplx_nb.api.client import AsyncClient
from pplx_nb.api.request import Request


async def _main(args: argparse.Namespace) -> None:
    errors: list[str] = []
    turns: list[float] = []
    async with AsyncClient(Settings.from_env()) as client:
        reserve = client.throttle._reserve

        async def reserve_and_note(max_wait: float) -> _Turn:
            turn = await reserve(max_wait)
            if turn.granted:
                turns.append(turn.at)
            return turn

        client.throttle._reserve = reserve_and_note  # type: ignore[method-assign]
        if args.warm:
            await client.ask(Request(messages=[{"role": "user", "content": "warm up"}]))
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        loop = asyncio.get_running_loop()
        ends = loop.time() + args.seconds
        questions = iter(range(args.count))

        async def ask_until_done() -> None:
            for n in questions if not args.seconds else iter(int, 1):
                if args.seconds and loop.time() >= ends:
                    return
                request = Request(
                    messages=[{"role": "user", "content": f"asyncio task {n}"}], use_cache=False
                )
                try:
                    await client.ask(request)
                except PplxError as error:
                    errors.append(error.code)
                if args.gap:
                    await asyncio.sleep(args.gap)

        await asyncio.gather(*(ask_until_done() for _ in range(args.concurrency)))
    print(json.dumps({"errors": errors, "turns": turns}), flush=True)


def main() -> None:
    """Parse the arguments and ask."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--gap", type=float, default=0.0)
    parser.add_argument("--warm", action="store_true", help="ask once before saying ready")
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
