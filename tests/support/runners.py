"""Job runners for the job-queue tests, importable by worker processes (``--runner``).

:func:`sim_runner` does what a real research runner does, against the simulator over loopback: it
streams a chat completion (reporting 50 % when text starts, 75–95 % as it grows), then appends the
answer, tagged with the job id, to the conversation — unless a message with that id is already
there. Knobs in the job's request make it misbehave on purpose:

- ``fail_attempts: N`` — attempts 1..N raise API_SERVER_ERROR;
- ``sleep: S`` — wait S seconds after the first progress report (to kill a worker mid-job);
- ``only_on: worker_id`` — never finish on other workers, raise instead.

Settings come from the environment (PERPLEXITY_BASE_URL, CONVERSATION_LOGS_DIR or PPLX_NB_STORE),
as in a worker. The answer's append is fenced (``ctx.check_owner``) as a real runner's is.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2

from pplx_nb import Settings
from pplx_nb._errors import APIServerError
from pplx_nb._models import Message, Usage
from pplx_nb.backends import open_store
from pplx_nb.jobs import Job, JobContext
from pplx_nb.store import ConversationStore

_clients: dict[asyncio.AbstractEventLoop, httpx2.AsyncClient] = {}


def answered(store: ConversationStore, job: Job) -> bool:
    """Whether the conversation already holds the answer of ``job`` (tagged with its jobId)."""
    conversation = store.load(job.conversation_id)
    return any(m.job_id == job.job_id for m in conversation.messages)


def _client(settings: Settings) -> httpx2.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        key = settings.api_key.get_secret_value() if settings.api_key else ""
        client = httpx2.AsyncClient(
            base_url=settings.base_url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=30.0,
        )
        _clients[loop] = client
    return client


async def _stream_answer(settings: Settings, query: str, ctx: JobContext) -> tuple[str, Usage]:
    body = {
        "model": "sonar",
        "messages": [{"role": "user", "content": query}],
        "stream": True,
    }
    parts: list[str] = []
    usage = Usage()
    async with _client(settings).stream("POST", "/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            chunk: dict[str, Any] = json.loads(line[5:])
            delta = (chunk.get("choices") or [{}])[0].get("delta", {}).get("content") or ""
            if delta:
                if not parts:
                    await ctx.report(50, "Processing response...")
                parts.append(delta)
                size = sum(map(len, parts))
                await ctx.report(75 + min(20, size // 200), "Finalizing research report...")
            if chunk.get("usage"):
                usage = Usage.model_validate(chunk["usage"])
    return "".join(parts), usage


async def sim_runner(job: Job, ctx: JobContext) -> Message | None:
    """Answer the job's ``query`` from the simulator and append it to the conversation once."""
    settings = Settings.from_env()
    store = open_store(settings)
    if answered(store, job):
        return None
    request = job.request
    if ctx.attempt <= int(request.get("fail_attempts", 0)):
        raise APIServerError(f"Simulated failure on attempt {ctx.attempt}. It will be retried.")
    if request.get("sleep"):
        await ctx.report(30, "Waiting on purpose")
        await asyncio.sleep(float(request["sleep"]))
    if request.get("only_on") and request["only_on"] != job.worker_id:
        raise APIServerError(f"Worker {job.worker_id} refuses this job on purpose.")
    text, usage = await _stream_answer(settings, str(request.get("query", "asyncio")), ctx)
    fields = {"role": "assistant", "content": text, "tool": job.tool, "usage": usage}
    message = Message.model_validate({**fields, "jobId": job.job_id})
    store.append(job.conversation_id, message, check=ctx.check_owner)
    return message
