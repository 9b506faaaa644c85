"""The kernel side of every magic: this kernel's Researcher, the plumbing each magic shares, and
blocking waits that paint progress.

Session: the one documented default instance of the notebook layer, shared by the magics and
widgets; the Researcher and the conversation a bare ``%pplx_followup`` continues. Unless a notebook
sets its own Researcher (:func:`set_researcher`), the settings are read from the environment again
before each magic, so ``%env CONVERSATION_LOGS_DIR=...`` or a change to ``os.environ`` takes effect
for the next magic: a Researcher over the new settings (and its worker, which then serves the
folder in use) replaces the old one, which is closed in the background. The simulator's knobs
(``PPLX_NB_SIM_*``) are the exception: the process-wide simulator takes them when it starts, so
the kernel keeps the first Researcher's and the next magic says that a new value waits for a
new kernel.

Plumbing: :class:`CellMagics` is the base of the registered magics classes: the kernel's
Researcher, the user's namespace, the error guard that renders any failure as one styled line,
the question and conversation-id parsing, and ``-o NAME``; :func:`show` and :func:`show_widget`
put bundles and widgets in the cell.

Waits (:func:`run_with_progress`): the call runs on a helper thread and the main thread paints.
Output published from other threads is fragile in ipykernel, so progress callbacks (which arrive
on the Researcher's loop thread) only enqueue; the kernel's main thread repaints the view.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from IPython import get_ipython
from IPython.core import magic as _magic
from IPython.core.error import UsageError
from IPython.core.magic import Magics
from IPython.display import display

from pplx_nb._errors import APITimeoutError, ValidationError
from pplx_nb.notebook._input import (
    CONVERSATION_ID,
    interpolate,
    not_an_id,
    parse_argstring,
    unquote,
)
from pplx_nb.notebook._terminal import print_bundle
from pplx_nb.notebook.display import error_bundle, notice_bundle, terminal_publisher

if TYPE_CHECKING:
    from pplx_nb._config import Settings
    from pplx_nb._models import Answer, Progress
    from pplx_nb.notebook.display import Bundle, ProgressView
    from pplx_nb.research import Researcher

__all__ = [
    "AlreadyShown",
    "CellMagics",
    "Interrupted",
    "Shown",
    "close_session",
    "forget",
    "get_researcher",
    "is_terminal",
    "last_conversation_id",
    "line_cell_magic",
    "line_magic",
    "output_name",
    "remember",
    "run_with_progress",
    "set_researcher",
    "show",
    "show_widget",
    "spelled",
    "switch",
    "wait_served",
]

_RETIRE_SECONDS = 20.0
"""How long a replaced Researcher's worker may take to finish or release its running jobs."""
_EXIT_SECONDS = 4.0
"""The same when the kernel shuts down: a kernel is killed if it takes much longer to stop."""


class _Session:
    """This kernel's Researcher and the conversation a bare ``%pplx_followup`` continues."""

    def __init__(self) -> None:
        self.researcher: Researcher | None = None
        self.explicit = False
        """Whether the Researcher was set in code (then the environment is not read again)."""
        self.overrides: dict[str, Any] = {}
        """Settings the magics changed (``%pplx_config --offline``), kept over the environment."""
        self.last_conversation_id: str | None = None
        self.knobs_notice: str | None = None
        """Simulator knobs the environment changed and the kernel cannot apply, not yet said."""
        self.knobs_said: list[str] = []
        self.lock = threading.Lock()


_session = _Session()


def set_researcher(researcher: Researcher | None) -> None:
    """Use ``researcher`` for every magic in this kernel (``None``: build one again on next use).

    The hook for tests and for notebooks that configure a Researcher in code. The previous
    Researcher is not closed: whoever created it owns it.
    """
    with _session.lock:
        _session.researcher = researcher
        _session.explicit = researcher is not None
        _session.overrides = {}
        _session.last_conversation_id = None
        _session.knobs_notice, _session.knobs_said = None, []


def get_researcher(*, reread: bool = True) -> Researcher:
    """This kernel's Researcher, over the settings the environment holds now.

    Built on first use, and built again when the settings changed since (a Researcher set with
    :func:`set_researcher` is kept as it is). ``reread=False`` skips reading the environment
    (a few milliseconds) when one was built already: a magic reads it once, when it starts.
    """
    from pplx_nb._config import Settings

    with _session.lock:
        current = _session.researcher
        if current is not None and (_session.explicit or not reread):
            return current
        settings = Settings.from_env(**_session.overrides)
        if current is not None:
            settings = _keep_simulator_knobs(current.settings, settings)
        if current is not None and current.settings == settings:
            return current
        fresh = _build(settings)
        if current is not None and current.store.location != fresh.store.location:
            _session.last_conversation_id = None
        _session.researcher = fresh
    if current is not None:
        _retire(current)
    return fresh


_SIMULATOR_KNOBS = {
    "sim_latency_ms": "PPLX_NB_SIM_LATENCY_MS",
    "sim_deep_research_seconds": "PPLX_NB_SIM_DEEP_RESEARCH_SECONDS",
    "sim_sonar": "PPLX_NB_SIM_SONAR",
}


def _keep_simulator_knobs(current: Settings, fresh: Settings) -> Settings:
    """``fresh`` with ``current``'s simulator knobs, noting any that ``fresh`` changed.

    The simulator is one per process and takes its knobs when it starts: a Researcher built
    over new ones would believe a pace the simulator does not keep.
    """
    kept = {name: getattr(current, name) for name in _SIMULATOR_KNOBS}
    changed = [
        f"`{variable}={getattr(fresh, name)}`"
        for name, variable in _SIMULATOR_KNOBS.items()
        if getattr(fresh, name) != kept[name] and fresh.is_offline
    ]
    if changed != _session.knobs_said:
        _session.knobs_said = changed
        running = ", ".join(f"{_SIMULATOR_KNOBS[name]}={value}" for name, value in kept.items())
        _session.knobs_notice = (
            f"{', '.join(changed)} takes effect only in a new kernel: the simulator takes its "
            f"knobs when it starts, and this one runs with {running}. Restart the kernel "
            "(with the variable set before the first magic) to apply it."
            if changed
            else None
        )
    return fresh.model_copy(update=kept)


def _build(settings: Settings) -> Researcher:
    """A Researcher that queues deep research unless the settings turn that off."""
    from pplx_nb.research import Researcher

    queued = settings.enable_async_deep_research is not False
    return Researcher(settings, async_deep_research=queued)


def _retire(researcher: Researcher, seconds: float = _RETIRE_SECONDS) -> None:
    """Close ``researcher`` on a helper thread: its worker may take seconds to let go of jobs."""
    threading.Thread(
        target=researcher.close, kwargs={"timeout": seconds}, name="pplx-retire", daemon=True
    ).start()


def last_conversation_id() -> str | None:
    """The conversation this kernel asked in last (what a bare ``%pplx_followup`` continues)."""
    return _session.last_conversation_id


def remember(conversation_id: str | None) -> None:
    """Note ``conversation_id`` as the one a bare ``%pplx_followup`` continues."""
    if conversation_id:
        _session.last_conversation_id = conversation_id


def forget() -> None:
    """No conversation to continue: a new question is on its way and is not stored yet.

    Were it interrupted, a bare ``%pplx_followup`` would otherwise continue the conversation
    before it, which the user did not mean.
    """
    _session.last_conversation_id = None


def switch(**overrides: Any) -> Researcher:
    """Use these settings over the environment's from now on; return the new Researcher.

    The conversation a bare follow-up continues is kept when the folder stays the same.
    """
    with _session.lock:
        _session.overrides = {**_session.overrides, **overrides}
        if _session.explicit and _session.researcher is not None:
            # A Researcher set in code: derive the new one from its settings, not the environment.
            settings = _session.researcher.settings.model_copy(update=overrides)
            _session.researcher = _build(settings)
            return _session.researcher
    return get_researcher()


def close_session(seconds: float = _EXIT_SECONDS) -> None:
    """Stop the kernel's Researcher (its worker lets go of the folder) before the kernel exits.

    Registered with :mod:`atexit` when the extension loads, so a temporary logs folder removed
    at exit is not written to by the worker while it is being removed.
    """
    with _session.lock:
        researcher, _session.researcher = _session.researcher, None
        explicit = _session.explicit
    if researcher is not None and not explicit:
        researcher.close(timeout=seconds)


def register_exit() -> None:
    """Register :func:`close_session` with :mod:`atexit` (once)."""
    atexit.unregister(close_session)
    atexit.register(close_session)


F = TypeVar("F", bound=Callable[..., Any])


def line_magic(func: F) -> F:
    """IPython's ``@line_magic`` marker, typed."""
    return cast(F, _magic.line_magic(func))


def line_cell_magic(func: F) -> F:
    """IPython's ``@line_cell_magic`` marker, typed."""
    return cast(F, _magic.line_cell_magic(func))


class Shown:
    """Results a magic has already rendered, so the display hook does not show them twice."""

    def __init__(self) -> None:
        self.ids: set[int] = set()

    def add(self, value: object) -> None:
        """Note ``value`` as shown."""
        self.ids.add(id(value))

    def take(self, value: object) -> bool:
        """Whether ``value`` was shown; it is forgotten either way."""
        if id(value) in self.ids:
            self.ids.discard(id(value))
            return True
        return False

    def clear(self, *_: object) -> None:
        """Forget everything (before each cell runs)."""
        self.ids.clear()


def show(bundle: Bundle) -> None:
    """Display a MIME bundle as an output of the running cell (printed for it in a terminal)."""
    if is_terminal(get_ipython()):
        print_bundle(bundle)
    else:
        display(bundle, raw=True)  # type: ignore[no-untyped-call]


def show_widget(widget: Any) -> None:
    """Display a widget as an output of the running cell."""
    display(widget)  # type: ignore[no-untyped-call]


class CellMagics(Magics):
    """The plumbing the pplx magics classes share (not registered itself)."""

    @property
    def researcher(self) -> Researcher:
        """This kernel's Researcher (the settings are read again when a magic starts)."""
        return get_researcher(reread=False)

    @property
    def namespace(self) -> dict[str, Any]:
        """The user's variables."""
        assert self.shell is not None
        namespace: dict[str, Any] = self.shell.user_ns
        return namespace

    @property
    def widgets_live(self) -> bool:
        """Whether a front end can show widgets (a kernel, not a plain IPython shell)."""
        return getattr(self.shell, "kernel", None) is not None

    @property
    def in_terminal(self) -> bool:
        """Whether this is IPython in a terminal, which prints every display it is given."""
        return is_terminal(self.shell)

    def _publisher(self) -> Any:
        """How live views publish: in place in a notebook, a line and the outcome in a terminal."""
        if not self.in_terminal:
            return None

        return terminal_publisher()

    @contextlib.contextmanager
    def _guard(self, line: str, magic: str) -> Iterator[None]:
        """Render any failure as one styled line (with the traceback under ``--debug``).

        ``magic`` is the magic as the user wrote it (``%%pplx``, ``%pplx_export``): a usage
        error names its ``?`` help.
        An interrupt is shown, then raised again: as with any interrupted cell, the cell fails
        and "Run All" stops there.
        """
        __tracebackhide__ = True

        try:
            yield
        except AlreadyShown as shown:
            if isinstance(shown.error, KeyboardInterrupt):
                raise Interrupted from None
        except UsageError as exc:
            error = ValidationError(f"{exc}. `{magic}?` lists the options.")
            show(error_bundle(error, debug="--debug" in line))
        except Exception as exc:
            show(error_bundle(exc, debug="--debug" in line))
        except KeyboardInterrupt as exc:
            show(error_bundle(exc))
            raise Interrupted from None

    def _question(self, words: list[str], cell: str | None, raw: bool) -> str:
        text = " ".join(unquote(w) if len(words) == 1 else w for w in words)
        if cell and cell.strip():
            text = f"{text}\n{cell}" if text else cell
        text = text.strip()
        if not text:
            raise ValidationError(
                "No question: write it in the cell below the magic (or after it on the line)."
            )
        if raw:
            return text

        return interpolate(text, self.namespace)

    def _parse(self, magic: Callable[..., Any], line: str) -> argparse.Namespace:
        """Parse ``line`` and refuse, before anything is asked or billed, what cannot work."""

        args = parse_argstring(magic, line)
        output_name(args)
        # Before anything else: the settings may have changed since the last magic.
        researcher = get_researcher()
        notice, _session.knobs_notice = _session.knobs_notice, None
        if notice:
            show(notice_bundle("SIMULATOR_RUNNING", notice))
        if getattr(args, "images", False) and researcher.settings.api_style == "agent":
            raise ValidationError(
                "--images asks for Sonar's return_images, which the Agent API (the only one "
                "Perplexity serves now) does not have: its answers come with no images. Its "
                "image_search tool finds pictures on its own, but pplx_nb does not ask for "
                "it. Ask again without --images (the sources link to the pages), or, with a "
                "server that still speaks Sonar, set PERPLEXITY_API_STYLE=sonar "
                "(`%env PERPLEXITY_API_STYLE=sonar`)."
            )
        return args

    def _store(self, args: argparse.Namespace, value: object) -> None:
        name = output_name(args)
        if name:
            self.namespace[name] = value

    def _conversation(self, given: str | None) -> str:
        if given:
            # `%pplx_wait {job.conversation_id}`: IDs take the same {name} fields as questions.
            given = interpolate(given, self.namespace)
        if given and not CONVERSATION_ID.match(given):
            raise not_an_id(given)
        cid = given or last_conversation_id()
        if cid is None:
            raise ValidationError(
                "No conversation to continue in this kernel: none was answered yet, or the "
                "last question got no answer. Pass an ID (`%pplx_conversations` lists them) "
                "or ask with `%%pplx` first."
            )
        return cid


def spelled(name: str, cell: str | None) -> str:
    """A line-cell magic as the user wrote it: ``%%name`` for a cell, ``%name`` for a line."""
    return f"%%{name}" if cell is not None else f"%{name}"


class Interrupted(KeyboardInterrupt):
    """The interrupt a magic raises again once it has shown what happened.

    The cell still fails, so "Run All" stops there; IPython shows it as one line
    (``_render_traceback_``) under the message, not a traceback through the magic's internals.
    """

    def _render_traceback_(self) -> list[str]:
        return ["KeyboardInterrupt"]


class AlreadyShown(Exception):
    """An error a live view has already rendered; the guard must not render it again."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def output_name(args: argparse.Namespace) -> str | None:
    """The variable ``-o`` names, if any; a name that cannot be one is refused."""

    name = getattr(args, "output", None)
    if not name:
        return None
    name = unquote(name)
    if not name.isidentifier():
        raise ValidationError(f"`-o {name}`: give a Python variable name, like `-o answer`.")
    return str(name)


def is_terminal(shell: object) -> bool:
    """Whether ``shell`` is IPython in a terminal (checked by name: no prompt_toolkit import)."""
    return any(cls.__name__ == "TerminalInteractiveShell" for cls in type(shell).__mro__)


T = TypeVar("T")


def run_with_progress(call: Callable[[Callable[[Progress], object]], T], view: ProgressView) -> T:
    """Run ``call(on_progress)`` on a helper thread while this (main) thread repaints ``view``.

    Returns what ``call`` returns or raises what it raised. Ctrl-C stops the waiting only.
    """
    updates: queue.SimpleQueue[Progress] = queue.SimpleQueue()
    outcome: list[Any] = []
    failure: list[BaseException] = []
    done = threading.Event()

    def target() -> None:
        try:
            outcome.append(call(updates.put))
        except BaseException as exc:
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=target, name="pplx-wait", daemon=True).start()
    while not done.is_set():
        try:
            view.update(updates.get(timeout=0.1))
        except queue.Empty:
            view.update(None)
    while not updates.empty():
        view.update(updates.get_nowait())
    if failure:
        raise failure[0]
    result: T = outcome[0]
    return result


_SERVED_CHECK_SECONDS = 5.0
"""How often a wait looks whether a worker serves the job's folder."""


def wait_served(
    researcher: Researcher,
    conversation_id: str,
    *,
    timeout: float | None = None,
    on_progress: Callable[[Progress], object] | None = None,
) -> Answer:
    """``researcher.wait`` that has this kernel run the job, and never waits on nobody.

    The kernel's worker serves the folder the job is in (the Researcher follows the settings in
    use). Every few seconds the wait looks again: a pending job that no running worker can take
    ends the wait with a TIMEOUT_ERROR that says so, instead of a bar that never moves.
    """

    status = researcher.status(conversation_id)
    worker = researcher.ensure_worker() if status is not None and not status.done else None
    started = time.monotonic()
    while True:
        step = _SERVED_CHECK_SECONDS
        if timeout is not None:
            step = max(0.0, min(step, started + timeout - time.monotonic()))
        try:
            return researcher.wait(conversation_id, timeout=step, on_progress=on_progress)
        except APITimeoutError:
            status = researcher.status(conversation_id)
            if status is None or status.done:
                raise  # the job itself ended with a timeout
        waited = time.monotonic() - started
        if status.status == "pending" and (worker is None or not worker.running):
            raise APITimeoutError(
                f"No worker serves {researcher.store.location}: the job of conversation "
                f"{conversation_id} has been pending for {waited:.0f} s. Run "
                "`python -m pplx_nb.worker` with CONVERSATION_LOGS_DIR set to that folder, "
                f"or restart the kernel and `%pplx_wait {conversation_id}` again.",
                conversation_id=conversation_id,
            )
        if timeout is not None and waited >= timeout:
            raise APITimeoutError(
                f"The job of conversation {conversation_id} is still "
                f"{status.status.replace('_', ' ')} after {timeout:.0f} s. It goes on in the "
                f"background: `%pplx_wait {conversation_id}` waits again.",
                conversation_id=conversation_id,
            )
