"""Follow-up detection and query reformulation.

A search engine sees only the last user message, so "how do I cancel it?" must become "how do I
cancel asyncio task?" before it is sent. The heuristic here is deterministic and offline-safe. It
takes what the user was talking about from the previous question (its identifiers and its last
noun phrase: "an asyncio task", "a text file") and where that lives from the last answer's top
source titles (the dotted prefix most of them share: ``pathlib.Path`` for ``pathlib.Path.read_text``
and ``pathlib.Path.read_bytes``), then puts that subject where the pronoun was, or appends the
module when the follow-up names its own object ("what about the median?"). With a real API,
:func:`~pplx_nb.context._rewrite.areformulate` asks a cheap model first and falls back to this
heuristic.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from difflib import SequenceMatcher
from typing import overload

from pplx_nb._models import Message

__all__ = [
    "CONTEXTUAL_REFERENCES",
    "FOLLOW_UP_PHRASES",
    "is_follow_up",
    "reformulate",
    "subject_of",
]

_STRONG_REFERENCES = (
    "the same",
    "this one",
    "that one",
    "the one",
    "which one",
    "the result",
    "the above",
    "itself",
    "its",
    "it",
    "them",
    "they",
    "their",
)
_WEAK_REFERENCES = ("that", "this", "those", "these", "one")

CONTEXTUAL_REFERENCES = _STRONG_REFERENCES + _WEAK_REFERENCES
"""Words and phrases that point back at something said earlier.

The weak ones count only when they stand alone: "how do I write one?", not "that file" or
"merge them into one".
"""

FOLLOW_UP_PHRASES = (
    "tell me more",
    "more about",
    "what about",
    "how about",
    "and what",
    "and how",
    "how does it",
    "how do they",
    "can you compare",
    "compare it",
    "what's the difference",
    "what is the difference",
    "is it better",
    "any other",
    "similar to",
    "like that",
    "another option",
    "instead",
    "as well",
    "also",
)
"""Phrases that continue a conversation rather than start one.

Only "what about", "how about", "and what" and "and how" always do; with the others ("what is the
difference", "tell me more", "can you compare", ...) a question that brings its own content words,
none of them said in the recent turns, starts a new topic ("What is the difference between a list
and a tuple?").
"""

_CONTINUATIONS = ("what about", "how about", "and what", "and how")
_RECENT_TURNS = 3
_MAX_SUBJECT_WORDS = 6

_SOURCE_TITLES = 5
_PREFIX_SHARE = 0.5

_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_'.\-]*[A-Za-z0-9_]|[A-Za-z0-9_]")
_IDENTIFIER = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*$")
_CODE_LIKE = re.compile(r"[._]|[a-z][A-Z]")
_STRONG = re.compile(rf"\b(?:{'|'.join(_STRONG_REFERENCES)})\b", re.IGNORECASE)
_WEAK = re.compile(rf"\b(?:{'|'.join(_WEAK_REFERENCES)})\b", re.IGNORECASE)
_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*[A-Za-z0-9_]|[A-Za-z0-9_]|[^\sA-Za-z0-9_]")
_DETERMINERS = frozenset(
    "a an the my our your this that these those several multiple many some all each every".split()  # noqa: SIM905
)
_PREPOSITIONS = frozenset(
    """about above across after against along among around as at before behind below between
    beyond by during for from in inside into like near of off on onto out outside over per since
    than through to toward towards under until upon using via with within without""".split()  # noqa: SIM905
)
_NOT_A_PRONOUN_BEFORE_ONE = frozenset({"no", "any", "each", "every", "only", "which", "one"})
_ADVERBS = frozenset({"instead", "too", "again", "now", "also", "later"})
_INSTRUMENTAL = frozenset({"with", "using", "via", "through"})
_CIRCUMSTANTIAL = _INSTRUMENTAL | {"without", "after", "before", "during", "by"}
_TITLE_SEPARATORS = re.compile(r"\s+[—–|-]\s+")
_TRAILING = re.compile(r"[\s?.!]+$")
# "Is it true that ...", "it is possible to ...": an "it" that stands for nothing said before.
_EXPLETIVE = re.compile(
    r"\b(?:is it|it is|it's|was it|it was)\s+(?:(?:not|really|still|also|ever)\s+)?"
    r"(?:(?:true|false)(?=\s+\w)|(?:possible|impossible|better|best|worse|worth|safe|okay|ok"
    r"|necessary|normal|common|wise|advisable|recommended|important|allowed|fine|bad|good)"
    r"(?=\s+(?:that|to|whether|if)\b))",
    re.IGNORECASE,
)
_COORDINATORS = frozenset({"and", "or", "with"})

# Words that say what to do rather than what about: kept out of a subject built from a question.
_QUESTION_WORDS = frozenset(
    """a about after again all also am an and any are as at be been before being both but by can
    could did do does doing done each either else for from get got had has have how i if in into is
    it its just let like make me more most much my need no not now of on one only or other our out
    over own please python same should show so some such tell than that the their them then there
    these they thing things this those through to too try two under up us use used using very want
    was way we were what when where whether which while who why will with without would you your
    difference differences example examples explain work works""".split()  # noqa: SIM905
)
# Words that say nothing about the topic of a question.
_NOT_CONTENT = (
    _QUESTION_WORDS
    | _PREPOSITIONS
    | _DETERMINERS
    | frozenset(" ".join((*FOLLOW_UP_PHRASES, *CONTEXTUAL_REFERENCES)).split())
)


def _words(text: str) -> list[str]:
    return [word.strip(".'-") for word in _WORD.findall(text)]


def _recent_user_turns(history: Sequence[Message], count: int) -> list[Message]:
    """The last ``count`` user turns, oldest first, read from the end (cost: how far back)."""
    turns: list[Message] = []
    for message in reversed(history):
        if len(turns) == count:
            break
        if message.role == "user":
            turns.append(message)
    return turns[::-1]


class _Head(Sequence[Message]):
    """The first ``end`` messages of a history, without copying them.

    :func:`_topics` asks about every earlier prefix of a long history; slicing each would make
    a follow-up quadratic in the length of the conversation.
    """

    def __init__(self, messages: Sequence[Message], end: int) -> None:
        self._messages = messages
        self._end = end

    def __len__(self) -> int:
        return self._end

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            return [self._messages[i] for i in range(*index.indices(self._end))]
        if index < 0:
            index += self._end
        if not 0 <= index < self._end:
            raise IndexError(index)
        return self._messages[index]

    def __reversed__(self) -> Iterator[Message]:
        return (self._messages[i] for i in range(self._end - 1, -1, -1))


def _last_answer(history: Sequence[Message]) -> Message | None:
    return next((m for m in reversed(history) if m.role == "assistant"), None)


def is_follow_up(query: str, history: Sequence[Message]) -> bool:
    """Whether ``query`` leans on the conversation so far (and there is a conversation).

    True when an earlier user turn exists and the query points back at it: a contextual reference
    ("it", "that", "this one", "the same", ...), a continuation ("what about", "how about", or a
    short question opening with "and" / "or": "And combinations?"), or another follow-up phrase
    ("tell me more", "can you compare", ...) in a question that does not bring a new topic of its
    own. An "it" that stands for nothing ("Is it true that Rust ...") and a possessive that points
    inside the question ("transactions and their isolation") are not references.
    """
    if not any(m.role == "user" for m in history):
        return False
    text = " ".join(query.lower().split())
    if not text:
        return False
    if _reference(text) is not None or _WHICH_OF_THE.search(text):
        return True
    words = _words(text)
    if words and words[0] in ("and", "or", "but") and len(words) <= 8:
        return True
    if any(_has_phrase(text, phrase) for phrase in _CONTINUATIONS):
        return True
    if any(_has_phrase(text, phrase) for phrase in FOLLOW_UP_PHRASES):
        return not _new_topic(text, history)
    return False


def _has_phrase(text: str, phrase: str) -> bool:
    return re.search(rf"\b{re.escape(phrase)}\b", text) is not None


def _stem(word: str) -> str:
    for suffix in ("ing", "es", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _content_stems(text: str) -> set[str]:
    """The stems of the words that say what ``text`` is about (no question or stop words)."""
    words = (w.lower() for w in _words(text.replace(".", " ")))
    return {_stem(w) for w in words if "'" not in w and w not in _NOT_CONTENT}


def _recent_stems(history: Sequence[Message]) -> set[str]:
    """Content stems of the last user turns (and their rewrites) and the last answer's sources.

    Answer prose is left out: it mentions too much in passing to say what the talk is about.
    """
    stems: set[str] = set()
    for message in _recent_user_turns(history, _RECENT_TURNS):
        stems |= _content_stems(_question(message))
        stems |= _content_stems(message.reformulated_query or "")
    answer = _last_answer(history)
    for source in (answer.sources or [])[:_SOURCE_TITLES] if answer else []:
        stems |= _content_stems(_title_name(source.title or ""))
    return stems


def _new_topic(text: str, history: Sequence[Message]) -> bool:
    """Whether ``text`` brings content words, none of which the recent turns share."""
    own = _content_stems(text)
    recent = _recent_stems(history)
    return bool(own) and not any(_same_stem(a, b) for a in own for b in recent)


def _same_stem(a: str, b: str) -> bool:
    """Equal stems, or one extending the other ("cancel" / "cancellation")."""
    short, long = sorted((a, b), key=len)
    return short == long or (len(short) >= 4 and long.startswith(short))


def _question(message: Message) -> str:
    """The question of a user turn without the files attached after it."""
    return message.content.split("\n\n", 1)[0]


def _title_name(title: str) -> str:
    """A source title reduced to what it names: ``asyncio — Asynchronous I/O`` → ``asyncio``."""
    return _TITLE_SEPARATORS.split(title.strip(), maxsplit=1)[0].strip()


def _shared_prefix(titles: Sequence[str]) -> str | None:
    """The longest dotted prefix shared by more than half of ``titles``, weighted by rank."""
    names = [name for name in (_title_name(t) for t in titles) if _IDENTIFIER.match(name)]
    if not names:
        return None
    weights: dict[str, float] = {}
    total = 0.0
    for rank, name in enumerate(names, 1):
        weight = 1.0 / rank
        total += weight
        parts = name.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            weights[prefix] = weights.get(prefix, 0.0) + weight
    shared = [p for p, w in weights.items() if w / total > _PREFIX_SHARE]
    if not shared:
        return None
    best = max(shared, key=lambda p: (p.count("."), weights[p]))
    if best == names[0] and "." in best:
        # The top page itself is the shared name only when it stands alone; name its owner, the
        # thing the next question is about (asyncio.Task for asyncio.Task.cancel).
        owners = [p for p in shared if p != best]
        if owners:
            return max(owners, key=lambda p: (p.count("."), weights[p]))
    return best


def _source_subject(message: Message | None, said: str = "") -> str | None:
    """Where the last answer's sources live: the dotted name most of them share.

    Without a shared name the top page's name is used only when the user named its package
    (in ``said``): a lone top hit ("email.iterators.walk" for "walk a directory tree") is as
    likely a word match as the topic.
    """
    if message is None or not message.sources:
        return None
    titles = [s.title for s in message.sources[:_SOURCE_TITLES] if s.title]
    prefix = _shared_prefix(titles)
    if prefix or not titles:
        return prefix
    name = _title_name(titles[0])
    if not _IDENTIFIER.match(name) or not _mentions(said, name.split(".", 1)[0]):
        return None
    return name


def _said(history: Sequence[Message]) -> str:
    """What the user said in the recent turns (questions and their stored rewrites)."""
    turns = _recent_user_turns(history, _RECENT_TURNS)
    return " ".join(f"{_question(m)} {m.reformulated_query or ''}" for m in turns)


def _noun_phrases(text: str) -> list[tuple[str, str]]:
    """Short phrases that follow a determiner, each with the preposition that led to it ("" for
    none): "an asyncio task", ("with", "a timeout"), ("of", "the files")."""
    phrases: list[tuple[str, str]] = []
    current: list[str] | None = None
    joined = leading = ""
    for token in _TOKEN.findall(text):
        lower = token.lower()
        if lower in _DETERMINERS:
            if current:
                phrases.append((joined, " ".join(current)))
            current, joined = [], leading
            continue
        leading = lower if lower in _PREPOSITIONS else ""
        if current is None:
            continue
        if not token[0].isalnum() or lower in _QUESTION_WORDS or lower in _PREPOSITIONS:
            if current:
                phrases.append((joined, " ".join(current)))
            current = None
            continue
        current.append(token)
        if len(current) == 3:
            phrases.append((joined, " ".join(current)))
            current = None
    if current:
        phrases.append((joined, " ".join(current)))
    return phrases


def _main_phrase(phrases: Sequence[tuple[str, str]]) -> str | None:
    """The phrase a question is about: its object, made more specific by what "of" adds.

    "the signature of a function" is about the function and "parse a string into a datetime"
    ends with one, but "run a subprocess with a timeout" is about the subprocess: a phrase after
    "with", "after", "by", ... says how or when, and a pronoun in the next question points back
    at the object, not at the circumstance.
    """
    main: str | None = None
    for joined, phrase in phrases:
        if main is None or joined not in _CIRCUMSTANTIAL:
            main = phrase
    return main


def _question_subject(text: str) -> str | None:
    """The identifiers and noun phrases of a question ("asyncio task", "text file"), if any."""
    words: list[str] = []
    previous = ""
    for word in _words(text):
        if _IDENTIFIER.match(word) and _CODE_LIKE.search(word):
            # "with subprocess.Popen" names a tool, not the subject: keep only its module.
            words.append(_module(word) if previous in _INSTRUMENTAL else word)
        previous = word.lower()
    phrase = _main_phrase(_noun_phrases(text))
    if phrase is not None:
        words.extend(phrase.split())
    unique = list(dict.fromkeys(words))
    return " ".join(unique[:_MAX_SUBJECT_WORDS]) or None


def _module(name: str) -> str:
    """The module part of a dotted name: ``asyncio.Task.cancel`` → ``asyncio``."""
    parts = name.split()[0].split(".") if name.split() else [name]
    module: list[str] = []
    for part in parts:
        if not part[:1].islower() or (module and _CODE_LIKE.search(part)):
            break
        module.append(part)
    return ".".join(module) or parts[0]


def subject_of(history: Sequence[Message]) -> str | None:
    """What the recent conversation is about, as a short explicit phrase.

    The newest user turn that set the topic says what the user is talking about ("an asyncio
    task"): a question that was not itself a follow-up, or the subject a follow-up's stored
    rewrite put in place of its pronoun — never a follow-up's own noun phrases ("the exception it
    raises" is still about the task). The last answer's top source titles say where it lives (the
    module and class most of them share: ``asyncio.Task``). Both are combined, without repeating
    a word — "coroutines in asyncio" — and either one alone is used when the other is missing.
    """
    located = _source_subject(_last_answer(history), _said(history))
    for phrase, said in _topics(history):
        if located is None:
            return phrase
        module = _module(located)
        package = module.split(".", 1)[0]
        if _mentions(phrase, package):
            return phrase
        # The user's own word for the module reads better than the sources' sub-module.
        named = _mentions(said, package)
        return f"{phrase} in {package if named else module}"
    return located


def _topics(history: Sequence[Message]) -> Iterator[tuple[str, str]]:
    """Newest first, each user turn's subject with the text it was said in, follow-ups skipped.

    A follow-up whose stored rewrite replaced a pronoun yields the subject that replaced it.
    """
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if message.role != "user":
            continue
        question = _question(message)
        if message.reformulated_query or is_follow_up(question, _Head(history, index)):
            carried = _carried_subject(question, message.reformulated_query or "")
            if carried is not None:
                yield carried, message.reformulated_query or ""
            continue
        phrase = _question_subject(question)
        if phrase is not None:
            yield phrase, message.content


def _carried_subject(question: str, rewrite: str) -> str | None:
    """The words ``rewrite`` put in place of the one reference of ``question``, if that is all."""
    before, after = _TOKEN.findall(question), _TOKEN.findall(rewrite)
    matcher = SequenceMatcher(None, before, after, autojunk=False)
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if len(changes) != 1:
        return None
    tag, start, end, new_start, new_end = changes[0]
    inserted = after[new_start:new_end]
    if tag != "replace" or _reference(" ".join(before[start:end])) is None:
        return None
    return " ".join(inserted) if len(inserted) <= _MAX_SUBJECT_WORDS else None


def _mentions(query: str, subject: str) -> bool:
    query_words = {w.lower() for w in _words(query.replace(".", " "))}
    subject_words = {w.lower() for w in _words(subject.replace(".", " "))}
    return bool(subject_words) and subject_words <= query_words


def reformulate(query: str, history: Sequence[Message]) -> str:
    """``query`` made standalone with the conversation's subject, deterministically and offline.

    The first contextual reference ("it", "them", "this one", ...) is replaced with the subject
    (``how do I cancel it?`` → ``how do I cancel asyncio task?``); without one, the module the
    conversation is in is appended in parentheses (``And combinations (itertools)?``). A query
    that is not a follow-up (:func:`is_follow_up`), already names the subject, or comes in a
    conversation without one is returned unchanged.

    When the rewrite would not be confident, the query is searched as typed: a conversation
    that weighed alternatives ("pickle or json?") has "which one" / "the three" / "one of them"
    replaced by those alternatives, but a lone "it" there could be any of them; and no module is
    appended unless the last answer's sources agree on it (or the user named it).
    """
    query = query.strip()
    if not is_follow_up(query, history):
        return query
    choices = _alternatives(history)
    if choices:
        return _choice_rewrite(query, choices)
    subject = subject_of(history)
    if not subject or _mentions(query, subject):
        return query
    match = _reference(query)
    if match is not None:
        start = match.start()
        if match.group(0).lower().endswith(" one"):
            start = match.end() - len("one")  # "which one" → "which asyncio task"
        return f"{query[:start]}{subject}{query[match.end() :]}"
    # No reference: the query names its own object ("what about the median?"), so only where
    # the conversation is (the module) is carried over — when the sources agree on one. A
    # guess would send the search somewhere the user never went: the query goes as typed.
    located = _source_subject(_last_answer(history), _said(history))
    if located is None:
        return query
    place = _module(located)
    if _mentions(query, place):
        return query
    body = _TRAILING.sub("", query)
    ending = query[len(body) :].strip()
    return f"{body} ({place}){ending}"


_ITEM = r"[A-Za-z_][\w.]*\w|[A-Za-z_]"
_ALTERNATIVES_OR = re.compile(
    rf"({_ITEM})((?:\s*,\s*(?:{_ITEM}))*)\s*,?\s+(?:or|vs\.?|versus)\s+({_ITEM})", re.I
)
_ALTERNATIVES_AND = re.compile(
    rf"\b(?:between|compare|comparing)\s+({_ITEM})((?:\s*,\s*(?:{_ITEM}))*)\s*,?\s+and\s+"
    rf"({_ITEM})",
    re.I,
)
_WHICH_OF_THE = re.compile(r"\bwhich of the (?:two|three|four|five)\b", re.I)
_COLLECTIVE = re.compile(
    r"\bwhich one\b|\bwhich of them\b|\bthe (?:two|three|four|five)\b|\bone of them\b"
    r"|\b(?:them|they)\b",
    re.I,
)


def _alternatives(history: Sequence[Message]) -> list[str] | None:
    """The things the newest topic-setting question weighed: "pickle or json", "between a and b".

    ``None`` unless there are at least two and each is a content word or a dotted name.
    """
    question = _topic_question(history)
    if question is None:
        return None
    for pattern in (_ALTERNATIVES_AND, _ALTERNATIVES_OR):
        match = pattern.search(question)
        if match is None:
            continue
        middle = [w.strip() for w in match.group(2).split(",") if w.strip()]
        items = [match.group(1), *middle, match.group(3)]
        if all(item.lower() not in _NOT_CONTENT for item in items):
            return list(dict.fromkeys(items))
    return None


def _topic_question(history: Sequence[Message]) -> str | None:
    """The newest of the recent user questions that was not itself a follow-up."""
    seen = 0
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if message.role != "user":
            continue
        seen += 1
        question = _question(message)
        if not message.reformulated_query and not is_follow_up(question, _Head(history, index)):
            return question
        if seen >= _RECENT_TURNS:
            return None
    return None


def _choice_rewrite(query: str, choices: Sequence[str]) -> str:
    """``query`` with its reference to the weighed alternatives spelled out, else as typed.

    "Which one is safe?" → "Which of pickle and json is safe?"; "Which of the three ..." and
    "one of them" likewise. A singular reference ("is it safe?") could mean any of them: the
    query is searched as typed.
    """
    listed = f"{', '.join(choices[:-1])} and {choices[-1]}"
    for match in _COLLECTIVE.finditer(query):
        if match.group(0).lower() in ("them", "they") and _points_inside(query, match):
            continue
        words = match.group(0).split()
        lead = f"{words[0]} of " if words[0].lower() in ("which", "one") else ""
        return f"{query[: match.start()]}{lead}{listed}{query[match.end() :]}"
    return query


def _reference(query: str) -> re.Match[str] | None:
    """The first strong reference in ``query``, else the first weak one that stands alone.

    Expletive "it" ("is it true that") and possessives of a noun of the query itself ("a key and
    its value") point at nothing said before, so they are skipped.
    """
    expletives = [m.span() for m in _EXPLETIVE.finditer(query)]
    strong = (
        m
        for m in _STRONG.finditer(query)
        if not any(start <= m.start() < end for start, end in expletives)
        and not _points_inside(query, m)
    )
    return next(strong, None) or next(
        (m for m in _WEAK.finditer(query) if _stands_alone(query, m)), None
    )


def _points_inside(query: str, match: re.Match[str]) -> bool:
    """A pronoun whose noun is in the query itself.

    A possessive coordinated with a noun ("transactions and their isolation"), or "them" /
    "they" after a plural noun phrase of the query ("cancels the other tasks when one of them
    fails").
    """
    word = match.group(0).lower()
    if word in ("them", "they"):
        return any(_plural(w) for w in _words(query[: match.start()]))
    if word not in ("its", "their"):
        return False
    before = [w.lower() for w in _words(query[: match.start()])][-2:]
    return (
        len(before) == 2
        and before[1] in _COORDINATORS
        and before[0] not in _NOT_CONTENT
        and "'" not in before[0]
    )


def _plural(word: str) -> bool:
    """A plural-looking content word: "tasks", "files" (not "class", "process")."""
    lower = word.lower()
    return lower.endswith("s") and not lower.endswith("ss") and lower not in _NOT_CONTENT


def _stands_alone(query: str, match: re.Match[str]) -> bool:
    """A weak reference is a pronoun only when no noun follows ("that file", "one of them")."""
    before = _words(query[: match.start()])
    after = _words(query[match.end() :])
    following = after[0].lower() if after else None
    if match.group(0).lower() == "one":
        previous = before[-1].lower() if before else ""
        if previous in _PREPOSITIONS or previous in _NOT_A_PRONOUN_BEFORE_ONE:
            return False
        if following == "of":
            return False  # "one of them": what follows "of" is the reference, if anything
        return following is None or following in _PREPOSITIONS or following in _ADVERBS
    return following is None or following in _QUESTION_WORDS
