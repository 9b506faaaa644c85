"""What every pplx magic does around its call: parse, guard, show — the magics' shared plumbing.

:class:`CellMagics` is the base of the registered magics classes: the kernel's Researcher, the
user's namespace, the error guard that renders any failure as one styled line, the question and
conversation-id parsing, and ``-o NAME``. The functions here show bundles and widgets.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from IPython.core import magic as _magic
from IPython.core.error import UsageError
from IPython.core.magic import Magics

from pplx_nb.notebook._args import parse_argstring, unquote
from pplx_nb.notebook._session import get_researcher, last_conversation_id

if TYPE_CHECKING:
    from pplx_nb.notebook.display import Bundle
    from pplx_nb.research import Researcher

__all__ = [
    "AlreadyShown",
    "CellMagics",
    "Shown",
    "is_terminal",
    "line_cell_magic",
    "line_magic",
    "output_name",
    "show",
    "show_widget",
    "spelled",
]

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
    """Display a MIME bundle as an output of the running cell."""
    from IPython.display import display

    display(bundle, raw=True)  # type: ignore[no-untyped-call]


def show_widget(widget: Any) -> None:
    """Display a widget as an output of the running cell."""
    from IPython.display import display

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
        from pplx_nb.notebook.display import terminal_publisher

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
        from pplx_nb.notebook.display import error_bundle

        try:
            yield
        except AlreadyShown as shown:
            if isinstance(shown.error, KeyboardInterrupt):
                # A fresh one: the traceback of where the wait was interrupted is noise here.
                raise KeyboardInterrupt from None
        except UsageError as exc:
            from pplx_nb._errors import ValidationError

            error = ValidationError(f"{exc}. `{magic}?` lists the options.")
            show(error_bundle(error, debug="--debug" in line))
        except Exception as exc:
            show(error_bundle(exc, debug="--debug" in line))
        except KeyboardInterrupt as exc:
            show(error_bundle(exc))
            raise KeyboardInterrupt from None

    def _question(self, words: list[str], cell: str | None, raw: bool) -> str:
        from pplx_nb._errors import ValidationError

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
        from pplx_nb.notebook._interpolate import interpolate

        return interpolate(text, self.namespace)

    def _parse(self, magic: Callable[..., Any], line: str) -> argparse.Namespace:
        """Parse ``line`` and refuse, before anything is asked or billed, what cannot work."""
        from pplx_nb._errors import ValidationError

        args = parse_argstring(magic, line)
        output_name(args)
        # Before anything else: the settings may have changed since the last magic.
        researcher = get_researcher()
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
        from pplx_nb._errors import ValidationError

        if given:
            from pplx_nb.notebook._interpolate import interpolate

            # `%pplx_wait {job.conversation_id}`: IDs take the same {name} fields as questions.
            given = interpolate(given, self.namespace)
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


class AlreadyShown(Exception):
    """An error a live view has already rendered; the guard must not render it again."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def output_name(args: argparse.Namespace) -> str | None:
    """The variable ``-o`` names, if any; a name that cannot be one is refused."""
    from pplx_nb._errors import ValidationError

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
