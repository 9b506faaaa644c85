"""Exporting a whole store: the references read from its plain documents are those its
conversations' models give, byte for byte, in every format."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pplx_nb import Conversation, ConversationStore, Message, Source, cite
from pplx_nb._models import closing_turn
from pplx_nb.backends import open_store

_SITES = ["docs.python.org", "www.example.org", "doi.org", "arxiv.org", "bbc.co.uk"]
_WORDS = ["The", "asyncio", "{x}", "50%", "a_b", "Ünïcode", "--", "\\emph", "of", "日本"]


def _source(rng: random.Random, n: int, ids: bool) -> Source:
    site = rng.choice(_SITES)
    path = {
        "doi.org": f"10.{1000 + n % 7}/abc.{n % 11}",
        "arxiv.org": f"abs/2101.{n % 13:05d}v2",
    }.get(site, f"page/{n % 23}/?utm_source=x&b={n % 3}")
    scheme = rng.choice(["https://", "http://", "HTTPS://", "javascript:"])
    return Source(
        url=f"{scheme}{site}/{path}",
        title=rng.choice([None, " ".join(rng.choices(_WORDS, k=rng.randint(1, 5)))]),
        date=rng.choice([None, f"20{n % 25:02d}-05-17", f"5/{n % 28 + 1}/2019", "2024", "soon"]),
        ids=[n, n + 100] if ids else None,
    )


def _answer_text(rng: random.Random, sources: list[Source]) -> str:
    count = len(sources)
    parts = ["An answer"]
    for _ in range(rng.randint(0, 4)):
        n = rng.randint(0, count + 1)
        parts.append(
            rng.choice(
                [
                    f"[{n + 1}]",
                    f"[web:{n}]",
                    f"`[{n + 1}]`",
                    f"[see]({sources[0].url})",
                    f"[{n}][{n + 1}]",
                ]
            )
        )
    if rng.random() < 0.2:
        parts.append(f"\n\n```\n[1]\n```\n<think>[{count}]</think>")
    return " ".join(parts) + "."


def _fill(store: ConversationStore, count: int) -> None:
    rng = random.Random(28)
    for c in range(count):
        messages: list[Message] = []
        for turn in range(rng.randint(1, 3)):
            messages.append(Message(role="user", content=f"Question {c}.{turn}?"))
            if rng.random() < 0.1:
                messages.append(closing_turn("failed", "API_ERROR", "it failed"))
                continue
            ids = rng.random() < 0.5
            sources = [_source(rng, rng.randrange(60), ids) for _ in range(rng.randint(0, 6))]
            if ids:  # each search-result id names one page
                sources = list({s.ids[0]: s for s in sources if s.ids}.values())
            messages.append(
                Message(
                    role="assistant",
                    content=_answer_text(rng, sources) if sources else "No sources.",
                    sources=sources,
                    timestamp=rng.choice([None, f"2026-11-{c % 28 + 1:02d}T10:00:00Z"]),
                )
            )
        store.create(messages)


def _conversations(store: ConversationStore) -> list[Conversation]:
    """The store's conversations as models, in the order keys are handed out (oldest first)."""
    loaded = [store.load(cid) for cid in store.ids()]
    return sorted(loaded, key=lambda c: (c.created_at, c.conversation_id))


@pytest.fixture
def store(logs_dir: Path) -> ConversationStore:
    store = open_store(root=logs_dir)
    _fill(store, 120)
    return store


def test_a_store_exports_what_its_conversations_models_cite(store: ConversationStore) -> None:
    conversations = _conversations(store)
    assert len(cite.collect(store)) > 50
    for fmt in cite.FORMATS:
        for consulted in (False, True):
            expected = cite.export(conversations, fmt, consulted=consulted)
            assert cite.export(store, fmt, consulted=consulted) == expected, (fmt, consulted)


def test_a_store_export_builds_no_models_of_its_messages(
    store: ConversationStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validating every message of every conversation cost more than the rest of an export."""
    expected = cite.to_bibtex(_conversations(store))
    built: list[str] = []
    for model in (Conversation, Message, Source):

        def counted(*args: object, model: type = model, **kwargs: object) -> object:
            built.append(model.__name__)
            raise AssertionError("a model was built")

        monkeypatch.setattr(model, "model_validate", counted)
    assert cite.to_bibtex(store) == expected
    assert built == []


def test_a_stored_source_of_another_shape_is_read_as_the_models_read_it(
    store: ConversationStore,
) -> None:
    """Another program's document may hold values the models convert ("ids": ["3"])."""
    conversation = _conversations(store)[0]
    path = Path(store.path(conversation.conversation_id)) / "conversation.json"
    document = json.loads(path.read_text("utf-8"))
    document["messages"].append(
        {
            "role": "assistant",
            "content": "Odd [3].",
            "sources": [{"url": "https://example.org/odd", "title": "Odd", "ids": ["3"]}],
        }
    )
    document["messageCount"] = len(document["messages"])
    path.write_text(json.dumps(document, indent=1), "utf-8")
    references = cite.collect(store)
    assert "https://example.org/odd" in [r.item["URL"] for r in references]
    assert cite.to_ris(store) == cite.to_ris(_conversations(store))
