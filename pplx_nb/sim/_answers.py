"""Turning ranked documents into an answer: text with ``[n]`` markers, sources, usage and cost.

Everything here is a pure function of the corpus and the request, so the same question always
gets the same answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from pplx_nb._pricing import price_for
from pplx_nb.sim._corpus import Corpus
from pplx_nb.sim._documents import Document, first_sentences, snippet

__all__ = [
    "Answer",
    "Filters",
    "compose",
    "count_tokens",
    "is_deep",
    "is_reasoning",
    "unsearched",
]

_DEEP_NAMES = frozenset(
    {"sonar-deep-research", "medium", "high", "xhigh", "deep-research", "advanced-deep-research"}
)
_REASONING_NAMES = frozenset({"sonar-reasoning-pro", "sonar-reasoning"})
_WORD = re.compile(r"\S+")
_RELATED_ASK = re.compile(r"related questions\s*:", re.IGNORECASE)


def is_deep(model: str | None) -> bool:
    """Whether a sonar model, preset or slug means deep research (slow, long, many sources)."""
    name = (model or "").lower()
    return name in _DEEP_NAMES or name.split("/")[-1] in _DEEP_NAMES


def is_reasoning(model: str | None) -> bool:
    """Whether answers start with a ``<think>`` block (reasoning and deep-research models)."""
    name = (model or "").lower().split("/")[-1]
    return name in _REASONING_NAMES or is_deep(model)


def count_tokens(text: str) -> int:
    """A plausible token count: about 1.3 tokens per word."""
    return round(len(_WORD.findall(text)) * 1.3)


def asks_for_related(text: str) -> bool:
    """Whether instructions or input ask for a trailing "Related questions:" list."""
    return bool(_RELATED_ASK.search(text))


@dataclass(frozen=True, slots=True)
class Filters:
    """Search filters that change which documents may be cited."""

    domains: tuple[str, ...] = ()

    def allows(self, url: str) -> bool:
        """Whether a document at ``url`` passes the domain allow/deny list."""
        host = urlsplit(url).hostname or ""
        allow = [d.lower() for d in self.domains if not d.startswith("-")]
        deny = [d[1:].lower() for d in self.domains if d.startswith("-")]

        def matches(domain: str) -> bool:
            return host == domain or host.endswith("." + domain)

        if any(matches(d) for d in deny):
            return False
        return not allow or any(matches(d) for d in allow)


@dataclass(frozen=True, slots=True)
class Answer:
    """A composed answer before it is put in either protocol's envelope."""

    text: str
    think: str
    sources: tuple[Document, ...]
    related: tuple[str, ...]
    queries: tuple[str, ...]
    deep: bool
    truncated: bool = False
    snippets: tuple[str, ...] = field(default=())
    date: str | None = None

    @property
    def content(self) -> str:
        """What the model emits: the ``<think>`` block (if any) and then the answer text."""
        return f"<think>\n{self.think}\n</think>\n\n{self.text}" if self.think else self.text


def unsearched(answer: Answer) -> Answer:
    """``answer`` as a model gives it without searching (``tool_choice: "none"``): the same
    words without their ``[n]`` markers, no sources, no queries."""
    text = re.sub(r"\s*\[\d+\]", "", answer.text)
    return replace(answer, text=text, sources=(), snippets=(), queries=())


def _header(corpus: Corpus) -> str:
    return f"*Offline simulator answer from {corpus.label}.*"


def _name(doc: Document) -> str:
    """An API name as code (``json.dumps``); a prose title (a reference topic) as it is."""
    return doc.title if " " in doc.title else f"`{doc.title}`"


def _as_clause(sentence: str) -> str:
    """A sentence ready for a citation marker: no closing punctuation, capitalised prose."""
    sentence = sentence.rstrip(" .…:;,")
    first = sentence.split(" ", 1)[0]
    if first.isalpha() and first.islower():
        sentence = sentence[0].upper() + sentence[1:]
    return sentence


def _brief(hits: list[Document]) -> str:
    sentences = []
    for n, doc in enumerate(hits[:4], start=1):
        sentence = _as_clause(first_sentences(doc.text, 1)) or doc.title
        sentences.append(f"{_name(doc)}: {sentence} [{n}].")
    return " ".join(sentences)


def _report(query: str, hits: list[Document]) -> str:
    groups: dict[str, list[int]] = {}
    for n, doc in enumerate(hits, start=1):
        groups.setdefault(doc.section, []).append(n)
    lines = [f"## Overview\n\n{_brief(hits)}"]
    for section, numbers in groups.items():
        bullets = []
        for n in numbers:
            doc = hits[n - 1]
            detail = _as_clause(first_sentences(doc.text, 3, limit=600)) or doc.title
            bullets.append(f"- **{_name(doc)}**: {detail} [{n}].")
        lines.append(f"## {section}\n\n" + "\n".join(bullets))
    cited = ", ".join(f"[{n}]" for n in range(1, len(hits) + 1))
    lines.append(
        f"## Conclusion\n\nFor “{query.strip()}”, the {len(hits)} sources above ({cited}) "
        "are the most relevant passages of the offline corpus; start with the first."
    )
    return "\n\n".join(lines)


def _related(hits: list[Document]) -> tuple[str, ...]:
    titles = [doc.title for doc in hits[:3]]
    questions = [f"How is {titles[0]} used in practice?"] if titles else []
    if len(titles) > 1:
        questions.append(f"What is the difference between {titles[0]} and {titles[1]}?")
    if len(titles) > 2:
        questions.append(f"When should I use {titles[2]}?")
    return tuple(questions)


def _truncate(text: str, max_tokens: int | None) -> tuple[str, bool]:
    if max_tokens is None or count_tokens(text) <= max_tokens:
        return text, False
    words = text.split(" ")
    keep = max(1, int(max_tokens / 1.3))
    return " ".join(words[:keep]), True


def compose(
    corpus: Corpus,
    query: str,
    *,
    model: str | None,
    filters: Filters = Filters(),
    related: bool = False,
    related_in_text: bool = False,
    max_tokens: int | None = None,
    limit: int | None = None,
) -> Answer:
    """Answer ``query`` (the last user message only) from ``corpus`` for ``model``."""
    deep = is_deep(model)
    count = limit or (10 if deep else 5)
    ranked = corpus.search(query, count * 4 if filters.domains else count)
    hits = [doc for doc, _ in ranked if filters.allows(doc.url)][:count]
    if hits:
        body = _report(query, hits) if deep else _brief(hits)
    else:
        body = (
            "The offline corpus has no document matching this question. "
            "Name the module, class or function you mean, or ask a broader question."
        )
    questions = _related(hits)
    text = f"{_header(corpus)}\n\n{body}"
    if related_in_text and questions:
        text += "\n\nRelated questions:\n" + "\n".join(f"- {q}" for q in questions)
    text, truncated = _truncate(text, max_tokens)
    think = ""
    if is_reasoning(model):
        read = "; ".join(doc.title for doc in hits) or "nothing relevant"
        think = f"Searching the offline corpus for: {query.strip()}\nRead: {read}."
    queries: tuple[str, ...] = (query.strip(),)
    if deep:
        queries += tuple(f"{query.strip()} {doc.title}" for doc in hits[:2])
    return Answer(
        text=text,
        think=think,
        sources=tuple(hits),
        related=questions if related else (),
        queries=queries,
        deep=deep,
        truncated=truncated,
        snippets=tuple(snippet(doc.text) for doc in hits),
        date=corpus.date,
    )


def sonar_usage(model: str, prompt: str, answer: Answer, *, final: bool) -> dict[str, object]:
    """The chat-completions ``usage`` block; ``cost`` filled only in the final form."""
    price = price_for(model)
    prompt_tokens = count_tokens(prompt)
    completion = count_tokens(answer.content)
    reasoning = count_tokens(answer.think) if answer.think else 0
    citation = sum(count_tokens(s) for s in answer.snippets) if answer.deep else 0
    searches = len(answer.queries)
    input_cost = prompt_tokens * price.input_per_m / 1e6
    output_cost = completion * price.output_per_m / 1e6
    citation_cost = citation * price.citation_per_m / 1e6
    reasoning_cost = reasoning * price.reasoning_per_m / 1e6
    search_cost = searches * price.search_fee
    total = input_cost + output_cost + citation_cost + reasoning_cost + search_cost
    total += price.request_fee
    cost: dict[str, float] = {
        "input_tokens_cost": round(input_cost, 6),
        "output_tokens_cost": round(output_cost, 6),
        "total_cost": 0.0,
    }
    if final:
        cost["request_cost"] = round(price.request_fee, 6)
        if answer.deep:
            cost["citation_tokens_cost"] = round(citation_cost, 6)
            cost["reasoning_tokens_cost"] = round(reasoning_cost, 6)
            cost["search_queries_cost"] = round(search_cost, 6)
        cost["total_cost"] = round(total, 6)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
        "search_context_size": "high" if answer.deep else "low",
        "citation_tokens": citation,
        "num_search_queries": searches,
        "reasoning_tokens": reasoning,
        "cost": cost,
    }
