"""Write ``ts_server_conversation.json``: a conversation as the TypeScript server stores it.

    .venv/bin/python tests/data/make_ts_server_conversation.py

Runs the real TypeScript perplexity-mcp-server (see ``tests/support/ts_server.py``) against
pplx_nb's simulator in Sonar mode, with its default model (``sonar-reasoning-pro``, whose
answers start with a ``<think>`` block), and asks one question and one follow-up with its
``perplexity_search`` and ``perplexity_search_followup`` tools. Its clock is set back to
January 2025, and the file it wrote is then copied with two changes only, so that tests can
name it: its conversation id becomes ``20250124-1737724800123``, and every timestamp moves by
the same amount (``createdAt`` becomes that id's instant). Everything else — the indented
layout, the system prompt, the raw ``<think>`` blocks, the absence of any metadata — is as the
server wrote it.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from support.ts_server import TSServer  # noqa: E402

from pplx_nb.sim import serve  # noqa: E402

CONVERSATION_ID = "20250124-1737724800123"
QUESTION = "How does asyncio.TaskGroup cancel its tasks when one of them fails?"
FOLLOW_UP = "And how do I give the whole group a deadline?"


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def main() -> None:
    """Produce the fixture next to this script."""
    target_ms = int(CONVERSATION_ID.split("-")[1])
    with tempfile.TemporaryDirectory() as scratch:
        logs = Path(scratch) / "conversation-logs"
        logs.mkdir()
        with serve(latency_ms=0, sonar=True) as url:
            offset = target_ms / 1000 - time.time()
            with TSServer(logs, url, clock_offset=offset) as server:
                first = server.call("perplexity_search", {"query": QUESTION})
                written = first["structuredContent"]["conversationId"]
                server.call(
                    "perplexity_search_followup", {"conversationId": written, "query": FOLLOW_UP}
                )
        text = (logs / written / "conversation.json").read_text()
    document = json.loads(text)
    created = datetime.fromisoformat(document["createdAt"])
    shift = datetime.fromtimestamp(target_ms / 1000, UTC) - created
    text = text.replace(written, CONVERSATION_ID)
    for key in ("createdAt", "updatedAt"):
        moment = datetime.fromisoformat(document[key])
        text = text.replace(f'"{document[key]}"', f'"{_iso(moment + shift)}"')
    assert abs(shift) < timedelta(minutes=1), "the clock offset did not take"
    (HERE / "ts_server_conversation.json").write_text(text)


if __name__ == "__main__":
    main()
