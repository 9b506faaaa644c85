"""Running the simulator: in a background thread (``serve``) or in the foreground (the CLI)."""

from __future__ import annotations

import asyncio
import atexit
import signal
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from pplx_nb.sim._app import SimApp
from pplx_nb.sim._corpus import load_corpus
from pplx_nb.sim._options import CitationStyle, SimOptions
from pplx_nb.sim._wire import WireServer

__all__ = ["SimServer", "base_url", "bind", "make_app", "run_forever", "serve", "shared_server_url"]


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (created as TCP explicitly so TCP_NODELAY applies)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def base_url(sock: socket.socket) -> str:
    """The ``http://host:port`` a bound socket serves."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def make_app(
    corpus: str | Path | None, options: SimOptions, cache_dir: Path | None = None
) -> SimApp:
    """The simulator app over the chosen corpus (built ones are cached under ``cache_dir``)."""
    return SimApp(load_corpus(corpus, cache_dir=cache_dir), options)


class SimServer:
    """A simulator serving from a daemon thread with its own event loop."""

    def __init__(self, app: SimApp, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self._socket = bind(host, port)
        self.url = base_url(self._socket)
        self._wire = WireServer(app, self._socket)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=f"pplx-sim {self.url}", daemon=True)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._wire.serve())
        finally:
            self._loop.close()

    def start(self) -> str:
        """Start serving and return the base URL once requests are accepted."""
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._wire.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the simulator at {self.url} failed to start")
            time.sleep(0.0005)
        return self.url

    def stop(self) -> None:
        """Stop serving and wait for the thread to end."""
        if self._thread.is_alive():
            with suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._shutdown)
            self._thread.join(timeout=10)
        self._socket.close()

    def _shutdown(self) -> None:
        self.app.stop()
        self._wire.stop()


def run_forever(app: SimApp, sock: socket.socket, received: Sequence[int] = ()) -> None:
    """Serve ``app`` on ``sock`` in the current thread until SIGINT or SIGTERM.

    ``received`` is where an earlier handler recorded signals that came before this one took
    over; any there means stop at once.
    """

    async def main() -> None:
        wire = WireServer(app, sock)
        loop = asyncio.get_running_loop()

        def shutdown() -> None:
            app.stop()
            wire.stop()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, shutdown)
        if received:
            return
        await wire.serve()

    asyncio.run(main())


@contextmanager
def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    corpus: str | Path | None = None,
    latency_ms: int = 300,
    deep_research_seconds: float = 5.0,
    api_key: str | None = None,
    sonar: bool = False,
    citations: CitationStyle = "numbered",
    cancel_seconds: float = 0.2,
) -> Iterator[str]:
    """Run a simulator in a background thread for the ``with`` block; yield its base URL.

    ``port=0`` picks a free port. ``corpus`` is a folder of ``.md``/``.txt``/``.rst`` files
    (default: the Python documentation). With ``api_key`` set, requests must carry
    ``Authorization: Bearer <api_key>``. ``sonar=True`` also serves the retired Sonar chat
    completions (else 403, as the live API); ``citations`` and ``cancel_seconds`` are
    described on :class:`SimOptions`.
    """
    options = SimOptions(
        latency_ms, deep_research_seconds, api_key, sonar, citations, cancel_seconds
    )
    server = SimServer(make_app(corpus, options), host, port)
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


_shared: SimServer | None = None
_shared_lock = threading.Lock()


def shared_server_url(
    *,
    latency_ms: int = 300,
    deep_research_seconds: float = 5.0,
    cache_dir: Path | None = None,
    sonar: bool = False,
) -> str:
    """The base URL of the process-wide default simulator, started on the first call.

    This is the module's documented default instance: later calls reuse it whatever their
    arguments, so the first caller's knobs win. It stops when the interpreter exits.
    """
    global _shared
    with _shared_lock:
        if _shared is None:
            options = SimOptions(latency_ms, deep_research_seconds, sonar=sonar)
            server = SimServer(make_app(None, options, cache_dir))
            server.start()
            atexit.register(server.stop)
            _shared = server
        return _shared.url
