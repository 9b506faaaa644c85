"""Reading a response body within its limits: a capped size, and a stream's lines paced by its
deadline and its idle timeout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import cast

import httpx2

from pplx_nb._errors import APITimeoutError
from pplx_nb.api._failures import too_large
from pplx_nb.api._sse import is_progress

__all__ = ["paced_lines", "read_capped"]


async def read_capped(response: httpx2.Response, limit: int, what: str) -> bytes:
    """The whole body of ``response``, refused unread once it is over ``limit`` bytes."""
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit():
        if int(declared) > limit:
            raise too_large(what, limit)
        if "content-encoding" not in response.headers:
            return await response.aread()  # its length is known and within the cap
    chunks: list[bytes] = []
    size = 0
    # Decoded bytes: a compressed body is capped by what it expands to. The reader is closed
    # here, not when it is collected: by then its event loop may be closed.
    async with aclosing(response.aiter_bytes()) as body:
        async for chunk in body:
            size += len(chunk)
            if size > limit:
                raise too_large(what, limit)
            chunks.append(chunk)
    return b"".join(chunks)


async def paced_lines(
    response: httpx2.Response, what: str, deadline: float, idle: float, limit: int
) -> AsyncGenerator[str, None]:
    """The lines of a streamed response, ended by the call's deadline or ``idle`` seconds
    without progress (a line carrying an event; comments and blank lines do not count), and
    refused past ``limit`` bytes."""
    loop = asyncio.get_running_loop()
    # Closed here, however this generator ends, not when collected (its loop may be closed).
    # httpx2 types it as an iterator; it is an async generator.
    reader = cast("AsyncGenerator[str, None]", response.aiter_lines())
    async with aclosing(reader) as lines:
        size = 0
        last_progress = loop.time()
        while True:
            now = loop.time()
            wait = min(deadline, last_progress + idle) - now
            try:
                if wait <= 0:
                    raise TimeoutError
                async with asyncio.timeout(wait):
                    line = await anext(lines)
            except StopAsyncIteration:
                return
            except TimeoutError:
                if loop.time() >= deadline:
                    raise APITimeoutError(
                        f"{what} did not finish its answer within the call's timeout. Allow more "
                        "time with PERPLEXITY_TIMEOUT (PERPLEXITY_DEEP_RESEARCH_TIMEOUT for deep "
                        "research), milliseconds.",
                        reason="deadline",
                    ) from None
                raise APITimeoutError(
                    f"{what} sent nothing new for {idle:g} s (PERPLEXITY_TIMEOUT); the stream was "
                    "closed. Retry, or allow more time with PERPLEXITY_TIMEOUT (milliseconds).",
                    reason="idle",
                ) from None
            size += len(line) + 1
            if size > limit:
                raise too_large(what, limit)
            if is_progress(line):
                last_progress = loop.time()
            yield line
