"""Conversation store and export: appends, listing and DataFrames against naive ways of doing them.

Every alternative runs in the same process on the same data:

- append to a 1,000-message conversation: ``ConversationStore.append`` (returns the validated
  Conversation), the file backend's write path alone, ``json.loads`` + ``json.dumps(indent=2)`` +
  atomic write, and pydantic ``model_validate_json`` + ``model_dump_json`` + atomic write;
- appends per second to small conversations, with and without ``durable=True``, against plain
  ``json.dump`` into the file (no lock, no atomicity);
- ``list()`` over 10,000 conversations against loading every conversation;
- ``to_dataframe`` over 10,000 conversations / 50,000 messages against one dict per row built
  from ``store.load()`` and ``pd.DataFrame(rows)``;
- the listing and export rows again with the same conversations in Redis (``PPLX_NB_STORE``).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench._util import median, ratio, redis_server, scratch, table, timed
from pplx_nb._fs import atomic_write_bytes, locked
from pplx_nb._models import Conversation
from pplx_nb.backends import open_store
from pplx_nb.store import ConversationStore, FileBackend

TITLE = "Conversation store and export"

_WORDS = [
    *("asyncio", "task", "cancel", "timeout", "event", "loop", "coroutine", "future", "await"),
    *("gather", "shield", "queue", "pathlib", "glob", "dataclass", "slots", "typing"),
    *("protocol", "generic", "context", "manager", "iterator"),
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _user(rng: random.Random) -> dict[str, Any]:
    return {
        "role": "user",
        "content": _text(rng, 15) + "?",
        "timestamp": "2025-01-24T15:00:00.000Z",
    }


def _assistant(rng: random.Random, words: int = 220) -> dict[str, Any]:
    """An answer as the Researcher stores it: ~1.5 kB of text, five sources, usage and cost."""
    return {
        "role": "assistant",
        "content": _text(rng, words) + " [1][2].",
        "timestamp": "2025-01-24T15:00:02.000Z",
        "tool": rng.choice(["perplexity_search", "perplexity_deep_research"]),
        "model": rng.choice(["sonar-pro", "sonar-deep-research"]),
        "sources": [
            {
                "url": f"https://docs.python.org/3/library/mod{rng.randrange(500)}.html",
                "title": _text(rng, 4),
                "snippet": _text(rng, 20),
            }
            for _ in range(5)
        ],
        "usage": {"promptTokens": 120, "completionTokens": 400, "totalTokens": 520},
        "cost": {"inputCost": 0.0004, "outputCost": 0.006, "totalCost": 0.0064},
    }


def _messages(rng: random.Random, count: int, words: int = 220) -> list[dict[str, Any]]:
    return [_user(rng) if n % 2 == 0 else _assistant(rng, words) for n in range(count)]


def _append_naive_json(path: Path, message: dict[str, Any]) -> None:
    with locked(path.parent):
        document = json.loads(path.read_bytes())
        document["messages"].append(message)
        document["messageCount"] = len(document["messages"])
        payload = json.dumps(document, ensure_ascii=False, indent=2).encode()
        atomic_write_bytes(path, payload)


def _append_pydantic(path: Path, message: dict[str, Any]) -> None:
    with locked(path.parent):
        conversation = Conversation.model_validate_json(path.read_bytes())
        conversation.messages.append(conversation.messages[0].model_validate(message))
        conversation.message_count = len(conversation.messages)
        atomic_write_bytes(path, conversation.model_dump_json(indent=2).encode())


def _append_plain(path: Path, message: dict[str, Any]) -> None:
    with open(path) as file:
        document = json.load(file)
    document["messages"].append(message)
    with open(path, "w") as file:
        json.dump(document, file)


def _append_times(root: Path, history: list[dict[str, Any]], new: list[dict[str, Any]]) -> Any:
    """Median seconds per append of each approach, and the file size in kB."""
    store = open_store(root=root)
    ids = [store.create(history).conversation_id for _ in range(4)]
    paths = [store.path(i) / "conversation.json" for i in ids]
    backend = FileBackend(root.absolute())

    def per_append(append: Any) -> float:
        times = []
        for message in new:
            start = time.perf_counter()
            append(message)
            times.append(time.perf_counter() - start)
        return median(times)

    return (
        [
            per_append(lambda m: store.append(ids[0], m)),
            per_append(lambda m: backend.append(ids[1], [m])),
            per_append(lambda m: _append_naive_json(paths[2], m)),
            per_append(lambda m: _append_pydantic(paths[3], m)),
        ],
        paths[0].stat().st_size / 1024,
    )


def _big_append(root: Path) -> str:
    rng = random.Random(1)
    chat, chat_kb = _append_times(
        root / "chat", _messages(rng, 1000, words=40), _messages(rng, 30, words=40)
    )
    research, research_kb = _append_times(
        root / "research", _messages(rng, 1000), _messages(rng, 30)
    )
    names = [
        "`store.append` (returns the Conversation, history validated on first use)",
        "file backend write path (lock, splice, summary in the header, atomic write)",
        "`json.loads` + `json.dumps(indent=2)` + atomic write",
        "pydantic validate + `model_dump_json(indent=2)` + atomic write",
    ]
    rows = [
        [
            name,
            f"{chat[n] * 1e3:.2f}",
            ratio(chat[n], chat[0]),
            f"{research[n] * 1e3:.2f}",
            ratio(research[n], research[0]),
        ]
        for n, name in enumerate(names)
    ]
    return (
        "### Append to a 1,000-message conversation\n\n"
        "Median of 30 appends each (target ≤ 5 ms). Every assistant message carries five sources, "
        f"usage and cost; *chat* answers are ~40 words ({chat_kb:,.0f} kB file), *research* "
        f"answers ~220 words with snippets ({research_kb:,.0f} kB file).\n\n"
        + table(
            ["approach", "chat ms", "vs ours", "research ms", "vs ours"],
            rows,
        )
    )


def _small_appends(root: Path) -> str:
    rng = random.Random(2)
    n_conversations, n_appends = 50, 500
    seed = _messages(rng, 3, words=60)
    message = _assistant(rng, words=60)

    def rate(store: ConversationStore) -> float:
        ids = [store.create(seed).conversation_id for _ in range(n_conversations)]

        def burst() -> None:
            for n in range(n_appends):
                store.append(ids[n % n_conversations], message)

        return n_appends / median(timed(burst, repeat=5))

    ours = rate(open_store(root=root / "small"))
    durable = rate(open_store(root=root / "small-durable", durable=True))
    plain_store = open_store(root=root / "small-plain")
    paths = [
        plain_store.path(plain_store.create(seed).conversation_id) / "conversation.json"
        for _ in range(n_conversations)
    ]

    def plain_burst() -> None:
        for n in range(n_appends):
            _append_plain(paths[n % n_conversations], message)

    plain = n_appends / median(timed(plain_burst, repeat=5))
    rows = [
        ["`store.append`", f"{ours:,.0f}", "1.00×"],
        [
            "`store.append`, `durable=True` (fsync file + directory)",
            f"{durable:,.0f}",
            ratio(durable, ours),
        ],
        [
            "plain `json.load` / `json.dump` (no lock, not atomic)",
            f"{plain:,.0f}",
            ratio(plain, ours),
        ],
    ]
    return (
        f"### Appends per second to small conversations ({n_conversations} conversations of "
        f"3 messages, {n_appends} appends, median of 5)\n\nTargets: ≥ 1,000/s, ≥ 500/s durable. "
        "One atomic write per append (conversation.json, its summary in the header line).\n\n"
        + table(["approach", "appends / s", "vs store.append"], rows)
    )


def _big_store(store: ConversationStore) -> ConversationStore:
    """``store`` with the same 10,000 conversations of 5 messages each, whatever its backend."""
    rng = random.Random(3)
    for _ in range(10_000):
        store.create(_messages(rng, 5, words=60))
    return store


def _redis_rows(files: ConversationStore) -> str:
    """The listing and export rows again with the conversations in Redis, beside the files'
    (measured in turn, so both see the same load)."""
    from pplx_nb import Settings

    with redis_server() as url:
        if url is None:
            return "### On Redis\n\nNot measured: `redis-server` is not installed."
        start = time.perf_counter()
        settings = Settings(store_url=url, conversation_logs_dir=Path(files.location) / "unused")
        on_redis = _big_store(open_store(settings))
        took = time.perf_counter() - start
        measures: list[tuple[str, Callable[[ConversationStore], object]]] = [
            ("`store.list()`", lambda store: store.list()),
            ("`store.list(limit=20)`", lambda store: store.list(limit=20)),
            (
                "`store.list(text=...)` (reads every message)",
                lambda store: store.list(text="Shield Queue Pathlib"),
            ),
            ('`to_dataframe(store, level="messages")`', lambda store: _frame(store, "messages")),
            (
                '`to_dataframe(store, level="conversations")`',
                lambda store: _frame(store, "conversations"),
            ),
        ]
        rows = []
        for name, measure in measures:
            on_files: list[float] = []
            redis_times: list[float] = []
            for _ in range(3):
                on_files += timed(partial(measure, files), repeat=1)
                redis_times += timed(partial(measure, on_redis), repeat=1)
            rows.append(
                [
                    name,
                    f"{median(on_files):.3f}",
                    f"{median(redis_times):.3f}",
                    ratio(median(redis_times), median(on_files)),
                ]
            )
    return (
        "### On Redis: the same 10,000 conversations / 50,000 messages (`PPLX_NB_STORE`)\n\n"
        "Median of 3 runs each, seconds, files and Redis in turn. Redis is Debian's "
        "`redis-server` on loopback; a listing reads its summaries, an export its documents, "
        "in batches of up to 512 conversations per round trip.\n\n"
        + table(["approach", "files s", "Redis s", "Redis ÷ files"], rows)
        + f"\n\n<sub>Creating the 10,000 conversations in Redis through `store.create` took "
        f"{took:.1f} s ({10_000 / took:,.0f} creates/s).</sub>"
    )


def _listing(store: ConversationStore) -> str:
    import pandas as pd

    ours = median(timed(store.list, repeat=3))
    by_tool = median(timed(lambda: store.list(tool="perplexity_deep_research"), repeat=3))
    limited = median(timed(lambda: store.list(limit=20), repeat=3))
    by_text = median(timed(lambda: store.list(text="Shield Queue Pathlib"), repeat=3))

    def naive() -> None:
        for conversation_id in store.ids():
            conversation = store.load(conversation_id)
            conversation.first_query()
            sorted({m.tool for m in conversation.messages if m.tool})

    load_all = median(timed(naive, repeat=3))
    rows = [
        ["`store.list()`", f"{ours:.3f}", "1.00×"],
        ["`store.list(tool=...)`", f"{by_tool:.3f}", ratio(by_tool, ours)],
        ["`store.list(limit=20)`", f"{limited:.4f}", ratio(limited, ours)],
        ["`store.list(text=...)` (reads every message)", f"{by_text:.3f}", ratio(by_text, ours)],
        [
            "load every conversation with pydantic and summarise",
            f"{load_all:.3f}",
            ratio(load_all, ours),
        ],
    ]
    messages = median(timed(lambda: _frame(store, "messages"), repeat=3))
    conversations = median(timed(lambda: _frame(store, "conversations"), repeat=3))

    def rows_from_models() -> None:
        rows = []
        for conversation_id in store.ids():
            conversation = store.load(conversation_id)
            for turn, m in enumerate(conversation.messages):
                rows.append(
                    {
                        "conversation_id": conversation_id,
                        "turn": turn,
                        "role": m.role,
                        "content": m.content,
                        "tool": m.tool,
                        "model": m.model,
                        "timestamp": m.timestamp,
                        "prompt_tokens": m.usage.prompt_tokens if m.usage else None,
                        "completion_tokens": m.usage.completion_tokens if m.usage else None,
                        "cost_usd": m.cost.total_cost if m.cost else None,
                        "n_sources": len(m.sources or ()),
                    }
                )
        frame = pd.DataFrame(rows)
        frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)

    per_row = median(timed(rows_from_models, repeat=3))
    frame_rows = [
        ['`to_dataframe(store, level="messages")`', f"{messages:.3f}", "1.00×"],
        [
            '`to_dataframe(store, level="conversations")`',
            f"{conversations:.3f}",
            ratio(conversations, messages),
        ],
        [
            "`store.load()` each + one dict per row + `pd.DataFrame(rows)`",
            f"{per_row:.3f}",
            ratio(per_row, messages),
        ],
    ]
    return (
        "### Listing 10,000 conversations (50,000 messages)\n\nMedian of 3 runs, seconds "
        "(target ≤ 1 s).\n\n"
        + table(["approach", "s", "vs list()"], rows)
        + "\n\n### DataFrame export of the same 10,000 conversations / 50,000 messages\n\n"
        "Median of 3 runs, seconds (target ≤ 3 s).\n\n"
        + table(["approach", "s", "vs to_dataframe"], frame_rows)
    )


def _frame(store: ConversationStore, level: Any) -> None:
    from pplx_nb.export import to_dataframe

    to_dataframe(store, level=level)


def run() -> str:
    """Run every measurement in a scratch folder of the checkout; return the Markdown section."""
    load_before = os.getloadavg()[0]
    with scratch("store-") as tmp:
        root = Path(tmp)
        parts = [_big_append(root), _small_appends(root)]
        start = time.perf_counter()
        store = _big_store(open_store(root=root / "many"))
        took = time.perf_counter() - start
        parts.append(_listing(store))
        parts.append(_redis_rows(store))
        parts.append(
            "<sub>Every row ran in a scratch folder of the checkout, on the disk where "
            "`conversation-logs/` lives by default. "
            f"Creating the 10,000 conversations through `store.create` took {took:.1f} s "
            f"({10_000 / took:,.0f} creates/s). Load average before / after the run: "
            f"{load_before:.1f} / {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
            "(other work shares the machine; the disk-bound rows move with it).</sub>"
        )
    return "\n\n".join(parts)
