"""Paid answers the store could not take, kept on disk outside it until it can.

A question is stored before its answer is bought, so a store that cannot be written fails at no
cost. One that fails in between — the disk filled up or went read-only, Redis reached its
``maxmemory`` — would drop an answer already paid for. It is kept instead in a file of its own,
``<state folder>/pplx_nb/kept-answers/<store>/<conversation id>.json`` (``XDG_STATE_HOME``,
default ``~/.local/state``; the cache folder when that cannot be written), in a 0700 folder
as a 0600 file that holds the answer turn, which question it answers and nothing else — no key,
no URL credentials. ``<store>`` is a digest of the store's identity (its folder, or its Redis
URL without credentials), so two stores never share a kept answer.

The next retry, follow-up or job attempt of the conversation stores it first, without paying
again (:meth:`KeptAnswers.restore`): right after its question, or in place of the turn that
closed it as not answered, in one locked step that also ends the question's answering mark
when the failure left it behind.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pplx_nb._config import Settings
from pplx_nb._errors import FilesystemError, PplxError
from pplx_nb._fs import atomic_write_json, ensure_dir, read_bytes
from pplx_nb._logging import get_logger
from pplx_nb._models import Answer, Message, now_iso

if TYPE_CHECKING:
    from pplx_nb.research._guard import AnswerGuard
    from pplx_nb.store import ConversationStore

__all__ = ["KeptAnswers"]

logger = get_logger("pplx_nb.research")

_FOLDER = "kept-answers"
_MAX_BYTES = 64 << 20


class KeptAnswers:
    """The paid answers of one store that it could not take, kept until it can.

    Args:
        settings: where the state and cache folders are.
        store: the store the answers belong to.
        guard: stores a kept answer after its question.
    """

    def __init__(self, settings: Settings, store: ConversationStore, guard: AnswerGuard) -> None:
        digest = hashlib.sha256(store.location.encode()).hexdigest()[:16]
        self._folders = [
            root / _FOLDER / digest for root in (settings.state_dir(), settings.cache_dir())
        ]
        self._location = store.location
        self._guard = guard

    def keep(
        self,
        error: FilesystemError,
        conversation_id: str,
        question: Message,
        message: Message,
        answer: Answer,
        *,
        token: str | None = None,
    ) -> FilesystemError:
        """Keep ``message`` (the paid ``answer`` to ``question``), which storing failed with
        ``error``; return the error to raise instead: the same code, the answer in
        :attr:`~pplx_nb.FilesystemError.answer`, and a message saying where it is kept and how
        to store it. ``token``: the question's answering mark, if the failure left it behind."""
        record = {
            "conversationId": conversation_id,
            "store": self._location,
            "keptAt": now_iso(),
            "question": {"timestamp": question.timestamp, "sha256": _digest(question.content)},
            "answeringToken": token,
            "answer": message.to_json_dict(),
        }
        where = self._write(conversation_id, record)
        answer.conversation_id = conversation_id
        if where is None:
            kept = "It could not be kept on disk either: copy it now from this error's `.answer`."
        else:
            kept = (
                f"It is kept in {where}, outside the store. Once the store can be written "
                f"again, `Researcher.retry({conversation_id!r})` (`%pplx_retry {conversation_id}`"
                " in a notebook) stores it without paying again, and so does the next follow-up "
                f"on the conversation (`perplexity_search_followup`)."
            )
        logger.error("A paid answer of %s could not be stored: %s", conversation_id, error)
        return type(error)(
            f"{error.message} The answer to the question of conversation {conversation_id} was "
            f"paid for and has arrived, but the store could not take it. {kept}",
            answer=answer,
            **{
                **error.details,
                "conversation_id": conversation_id,
                "kept": None if where is None else str(where),
            },
        )

    def restore(self, conversation_id: str) -> Message | None:
        """Store the conversation's kept answer, if it has one; return it once stored.

        A job's report goes through the answer guard's late-report step, which also ends the
        job ``completed`` (whether it is pending, running or failed by now). Raises
        FILESYSTEM_ERROR (the answer stays kept) while the store still cannot take it.
        """
        found = self._read(conversation_id)
        if found is None:
            return None
        path, record = found
        message = Message.model_validate(record["answer"])
        if self._stored_late(conversation_id, message):
            placed: str = "stored"
        else:
            token = record.get("answeringToken")
            placed = self._guard.answer_kept(
                conversation_id,
                message,
                _question_of(dict(record.get("question") or {})),
                token if isinstance(token, str) else None,
            )
        if placed == "missing":
            logger.warning(
                "The answer kept in %s is for a question conversation %s no longer holds; "
                "it stays there",
                path,
                conversation_id,
            )
            return None
        path.unlink(missing_ok=True)
        if placed == "answered":
            return None
        logger.info("Stored the paid answer of %s kept in %s", conversation_id, path)
        return message

    def _stored_late(self, conversation_id: str, message: Message) -> bool:
        """Whether ``message``, a job's report, is stored now as that job's late report (the
        job then ends ``completed``); ``False`` for another answer, or a job no longer there."""
        job_id = message.job_id
        if job_id is None:
            return False
        status = self._guard.answer_late(conversation_id, job_id, message)
        return status is not None and status.status == "completed" and status.job_id == job_id

    def _write(self, conversation_id: str, record: dict[str, Any]) -> Path | None:
        """Write ``record`` to the first folder that takes it; where, or ``None``."""
        for folder in self._folders:
            path = folder / f"{conversation_id}.json"
            try:
                ensure_dir(folder)
                atomic_write_json(path, record, durable=True)
            except PplxError as exc:
                logger.warning("Could not keep a paid answer in %s: %s", folder, exc)
                continue
            return path
        return None

    def _read(self, conversation_id: str) -> tuple[Path, dict[str, Any]] | None:
        """The kept answer of the conversation and its file, or ``None``."""
        for folder in self._folders:
            path = folder / f"{conversation_id}.json"
            try:
                record = json.loads(read_bytes(path, _MAX_BYTES))
            except FileNotFoundError:
                continue
            except (PplxError, ValueError) as exc:
                logger.warning("The kept answer %s cannot be read: %s", path, exc)
                continue
            if isinstance(record, dict) and isinstance(record.get("answer"), dict):
                return path, record
        return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _question_of(question: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool]:
    """Whether a stored message is the question a kept answer is for."""

    def matches(message: Mapping[str, Any]) -> bool:
        content = message.get("content")
        return (
            message.get("role") == "user"
            and message.get("timestamp") == question.get("timestamp")
            and isinstance(content, str)
            and _digest(content) == question.get("sha256")
        )

    return matches
