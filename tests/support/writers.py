"""Store writers in processes of their own, forked from a server that has imported the store.

A writer killed again and again is a new process each round; started as ``python -c`` it would
spend most of its round importing pplx_nb (0.4 s of CPU), forked from the ``forkserver`` it
starts at once. Its acknowledgements go back over a pipe, one message a write, as a line printed
and flushed does: what the test received was acknowledged before the process died.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext

__all__ = ["append_until_killed", "forks"]


def forks() -> ForkServerContext:
    """The forkserver context whose server has pplx_nb's store and this module imported."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["support.writers", "pplx_nb.backends", "pplx_nb.store"])
    return context


def append_until_killed(root: str, conversation_id: str, tag: str, acks: Connection) -> None:
    """Say ``ready``, then append ``<tag>-<n>`` for n = 0, 1, ... and acknowledge each (to a
    million: a writer the test failed to kill ends on its own)."""
    from pplx_nb.backends import open_store

    store = open_store(root=root)
    acks.send_bytes(b"ready")
    for n in range(1_000_000):
        store.append(conversation_id, {"role": "user", "content": f"{tag}-{n}"})
        acks.send_bytes(f"{tag}-{n}".encode())
