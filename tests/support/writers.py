"""Store writers in processes of their own, forked from a server that has imported the store.

Started as ``python -c``, each writer would spend most of its life importing pplx_nb (0.4 s of
CPU); forked from the ``forkserver`` it starts at once. What it writes is acknowledged over a
pipe, one message a write, as a line printed and flushed is: what the test received was
acknowledged before the process ended or died.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, ForkServerProcess

__all__ = ["append", "create", "received", "start"]


def _forks() -> ForkServerContext:
    """The forkserver context whose server has pplx_nb's store and this module imported."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["support.writers", "pplx_nb.backends", "pplx_nb.store"])
    return context


def start(target: Callable[..., None], *args: object) -> tuple[ForkServerProcess, Connection]:
    """Start ``target(*args, acks)`` in a forked process; the process and the pipe's read end."""
    context = _forks()
    acks, writer_end = context.Pipe(duplex=False)
    process = context.Process(target=target, args=(*args, writer_end))
    process.start()
    writer_end.close()
    return process, acks


def received(acks: Connection, timeout: float = 240) -> list[str]:
    """Every acknowledgement until the writer's end closes (its process ended or was killed)."""
    messages = []
    while acks.poll(timeout):
        try:
            messages.append(acks.recv_bytes().decode())
        except EOFError:
            acks.close()
            return messages
    raise TimeoutError(f"the writer's pipe stayed open for {timeout} s")


def append(root: str, conversation_id: str, tag: str, count: int, acks: Connection) -> None:
    """Say ``ready``, then append ``<tag>-<n>`` for n below ``count``, acknowledging each."""
    from pplx_nb.backends import open_store

    store = open_store(root=root)
    acks.send_bytes(b"ready")
    for n in range(count):
        store.append(conversation_id, {"role": "user", "content": f"{tag}-{n}"})
        acks.send_bytes(f"{tag}-{n}".encode())


def create(root: str, count: int, acks: Connection) -> None:
    """Create ``count`` conversations, acknowledging each id."""
    from pplx_nb.backends import open_store

    store = open_store(root=root)
    for _ in range(count):
        acks.send_bytes(store.create([{"role": "user", "content": "hi"}]).conversation_id.encode())
