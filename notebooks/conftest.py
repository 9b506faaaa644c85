"""nbval support: apply in-place display updates to a cell's outputs, as Jupyter front ends do.

pplx_nb's magics stream an answer into one display and replace it in place when the answer is
complete (``update_display_data``); ``%pplx_wait`` does the same with its progress bar. Jupyter
front ends and ``nbconvert --execute`` apply those updates, so the saved notebooks hold the final
answers. nbval 0.11 drops update messages, so without this plugin it would compare the
"Searching…" placeholder instead of the answer the reader sees.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from nbval.plugin import IPyNbCell  # type: ignore[import-untyped]

_APPENDED = frozenset({"display_data", "execute_result", "stream", "error"})


class _DisplayUpdates:
    """Tracks which of a running cell's outputs belong to which display id, and updates them."""

    def __init__(self, cell: IPyNbCell) -> None:
        self.cell = cell
        self.msg_id: str | None = None
        self.appended = 0
        self.positions: dict[str, list[int]] = {}

    def execute(self, original: Any) -> Any:
        def execute_cell_input(*args: Any, **kwargs: Any) -> str:
            msg_id: str = original(*args, **kwargs)
            self.msg_id = msg_id
            return msg_id

        return execute_cell_input

    def receive(self, original: Any) -> Any:
        def get_kernel_message(*args: Any, **kwargs: Any) -> dict[str, Any]:
            msg: dict[str, Any] = original(*args, **kwargs)
            if msg["parent_header"].get("msg_id") == self.msg_id:
                self.observe(msg["msg_type"], msg["content"])
            return msg

        return get_kernel_message

    def observe(self, msg_type: str, content: dict[str, Any]) -> None:
        display_id = (content.get("transient") or {}).get("display_id")
        if msg_type in _APPENDED:
            # nbval appends exactly one output per message of these types, in arrival order.
            if msg_type == "display_data" and display_id:
                self.positions.setdefault(display_id, []).append(self.appended)
            self.appended += 1
        elif msg_type == "update_display_data" and display_id:
            outputs = self.cell.test_outputs
            for position in self.positions.get(display_id, []):
                outputs[position]["data"] = content["data"]
                outputs[position]["metadata"] = content.get("metadata", {})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Run an nbval cell with display updates applied to its collected outputs."""
    if not isinstance(item, IPyNbCell) or item.parent.kernel is None:
        return (yield)
    notebook, kernel = item.parent, item.parent.kernel
    updates = _DisplayUpdates(item)
    kernel.execute_cell_input = updates.execute(kernel.execute_cell_input)
    notebook.get_kernel_message = updates.receive(notebook.get_kernel_message)
    try:
        return (yield)
    finally:
        del kernel.execute_cell_input
        del notebook.get_kernel_message
