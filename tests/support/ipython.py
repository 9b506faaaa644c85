"""A real IPython shell with pplx_nb loaded, and what one of its cells did."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from pplx_nb import Researcher
from pplx_nb.notebook import magics


@contextmanager
def loaded_shell(researcher: Researcher, *names: str) -> Iterator[InteractiveShell]:
    """The IPython shell with ``%load_ext pplx_nb`` answering through ``researcher``; the
    user variables ``names`` are removed afterwards."""
    shell = InteractiveShell.instance()
    magics.set_researcher(researcher)
    with capture_output():  # loaded through a cell, as users do: it names who answers at its end
        shell.run_cell("%load_ext pplx_nb")
    try:
        yield shell
    finally:
        shell.run_line_magic("unload_ext", "pplx_nb")
        magics.set_researcher(None)
        for name in names:
            shell.user_ns.pop(name, None)


class Run:
    """What one cell did: its result, what it displayed, and what it printed."""

    def __init__(self, shell: InteractiveShell, source: str) -> None:
        with capture_output() as captured:
            outcome = shell.run_cell(source)
        self.result = outcome.result
        self.error = outcome.error_in_exec
        self.outputs = [output.data for output in captured.outputs]
        self.metadata = [output.metadata or {} for output in captured.outputs]
        self.updates = [output.update for output in captured.outputs]
        self.ids = [(output.transient or {}).get("display_id") for output in captured.outputs]
        self.stdout = captured.stdout

    @property
    def last(self) -> dict[str, str]:
        """The last output with content (a live area is blanked after its outcome shows)."""
        return [data for data in self.outputs if data != {"text/html": ""}][-1]

    def text(self) -> str:
        return "\n".join(value for data in self.outputs for value in data.values())
