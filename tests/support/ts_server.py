"""The TypeScript perplexity-mcp-server, built from its tarball once and run over stdio.

pplx_nb shares its ``conversation-logs`` format with that server, so the interoperability tests
run the real thing against pplx_nb's simulator. The tarball is looked for in ``shared/ts-server``
beside the checkout (CI clones the repository next to ``shared/``; from a git worktree, beside
the main checkout too), built with ``npm ci && tsc`` into ``.cache/ts-server/<sha256 prefix of the
tarball>/`` (gitignored) under a lock, and reused while the tarball is unchanged.

Without node, npm or the tarball the tests skip with the reason, except where ``CI=true`` or
``PPLX_NB_REQUIRE_NODE=1`` asks for them: there it is a failure.

:class:`TSServer` speaks the few MCP messages the tests need (initialize, tools/call) as JSON
lines over the server's stdin/stdout, and skips the lines that are not JSON (the server prints
its configuration on stdout before the protocol starts).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import tarfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest
from filelock import FileLock

from support.mcp import ROOT
from support.node import require

__all__ = ["CLOCK_PRELOAD", "TEN_MINUTES", "TSServer", "build", "tarball"]

CLOCK_PRELOAD = Path(__file__).with_name("shifted_clock.cjs")
"""``node --require`` file shifting the wall clock by ``PPLX_NB_CLOCK_OFFSET_MS``."""
TEN_MINUTES = 600.0
"""The TypeScript server's stall threshold: with async jobs on, it resets at start-up every
``in_progress`` job whose ``updatedAt`` is older than this (``recoverStalledJobs``)."""
CACHE = ROOT / ".cache" / "ts-server"
_PATTERN = "perplexity-mcp-server-*.tar.gz"


def _required() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("PPLX_NB_REQUIRE_NODE") == "1"


def _checkouts() -> list[Path]:
    """This checkout, and the main checkout when this one is a git worktree."""
    found = [ROOT]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        common = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        main = Path(common).parent
        if main not in found:
            found.append(main)
    return found


def tarball() -> Path:
    """The server's tarball in ``shared/ts-server`` beside the checkout; skip if there is none."""
    places = [checkout.parent / "shared" / "ts-server" for checkout in _checkouts()]
    for place in places:
        candidates = sorted(place.glob(_PATTERN))
        if candidates:
            return candidates[-1]
    reason = f"the TypeScript server's tarball ({_PATTERN}) is not in {places[0]}"
    if _required():
        pytest.fail(f"the TypeScript server is required here but {reason}")
    pytest.skip(reason)


def build() -> Path:
    """The built server (a folder holding ``dist/index.js``), building it on first use."""
    paths = require("node", "npm")
    source = tarball()
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    target = CACHE / digest
    if (target / "dist" / "index.js").is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / f"{digest}.lock")):
        if (target / "dist" / "index.js").is_file():
            return target
        work = CACHE / f"{digest}.building"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        with tarfile.open(source) as archive:
            archive.extractall(work, filter="data")
        for command in (
            [paths["npm"], "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            [paths["node"], str(work / "node_modules" / "typescript" / "bin" / "tsc")],
        ):
            done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                pytest.fail(
                    f"building the TypeScript server failed ({' '.join(command[1:])}):\n"
                    f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
                )
        # The server reads a .env from its folder: none must change the tests' environment.
        (work / ".env").unlink(missing_ok=True)
        work.rename(target)
    return target


class TSServer:
    """One TypeScript server process over stdio, driven by a minimal MCP client.

    Args:
        logs_dir: its ``CONVERSATION_LOGS_DIR`` (the folder pplx_nb uses too).
        api_url: the simulator's base URL (it must serve Sonar chat completions).
        async_jobs: ``PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH``: queue deep research and start its
            background worker (which first resets stalled ``in_progress`` jobs).
        clock_offset: seconds added to the server's wall clock (see :data:`CLOCK_PRELOAD`).
        env: more environment variables.
    """

    def __init__(
        self,
        logs_dir: Path,
        api_url: str,
        *,
        async_jobs: bool = False,
        clock_offset: float = 0.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.logs_dir = logs_dir
        self.home = build()
        self.log_dir = logs_dir.parent / "ts-server-logs"
        self.log_dir.mkdir(exist_ok=True)
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", ""),
            "MCP_TRANSPORT_TYPE": "stdio",
            "LOG_LEVEL": "debug",
            "LOGS_DIR": str(self.log_dir),
            "CONVERSATION_LOGS_DIR": str(logs_dir),
            "PERPLEXITY_API_KEY": "sim-key-for-the-typescript-server",
            "PERPLEXITY_API_BASE_URL": api_url,
            "PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH": "true" if async_jobs else "false",
            "PPLX_NB_CLOCK_OFFSET_MS": str(round(clock_offset * 1000)),
            **(env or {}),
        }
        self.noise: list[str] = []
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._next_id = 0
        self._writing = threading.Lock()
        self._stderr: IO[bytes] | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> TSServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 60) -> None:
        """Start the process and complete the MCP handshake."""
        self._stderr = (self.log_dir / "stderr.log").open("ab")
        self.process = subprocess.Popen(
            ["node", "--require", str(CLOCK_PRELOAD), str(self.home / "dist" / "index.js")],
            cwd=self.home,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self._reader = threading.Thread(target=self._read, daemon=True, name="ts-server stdout")
        self._reader.start()
        self._request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "pplx-nb-interop-test", "version": "1"},
            },
            timeout,
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool: str, arguments: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
        """``tools/call``: the tool's result (``isError`` set when the tool failed)."""
        return self._request("tools/call", {"name": tool, "arguments": arguments}, timeout)

    def text(self, result: dict[str, Any]) -> str:
        """The text content of a tool result."""
        return "\n".join(part.get("text", "") for part in result.get("content", []))

    def log(self) -> str:
        """What the server logged (its log files and stderr), for failure messages."""
        parts = [path.read_text(errors="replace") for path in sorted(self.log_dir.glob("*.log"))]
        return "\n".join(parts)[-6000:]

    def kill(self) -> None:
        """Stop the process at once, as a crash or a closed laptop would (no clean-up)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        self._close_pipes()

    def stop(self) -> None:
        """Close its input, then terminate it if it does not exit by itself."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(OSError):
                assert process.stdin is not None
                process.stdin.close()
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_pipes()

    def _close_pipes(self) -> None:
        process = self.process
        if process is None:
            return
        if self._reader is not None:
            self._reader.join(timeout=10)  # the process is gone: its stdout ends
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if self._stderr is not None:
            self._stderr.close()

    # -- JSON lines -----------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process is not None and self.process.stdin is not None
        with self._writing:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()

    def _request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        self._next_id += 1
        ident = self._next_id
        self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply to {method} in {timeout:g} s\n{self.log()}")
            try:
                message = self._replies.get(timeout=min(left, 1.0))
            except queue.Empty:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"the TypeScript server exited ({self.process.returncode}) before "
                        f"answering {method}\n{self.log()}"
                    ) from None
                continue
            if message.get("id") != ident:
                continue
            if "error" in message:
                raise RuntimeError(f"{method} failed: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                self.noise.append(line.decode(errors="replace").rstrip())
                continue
            if isinstance(message, dict) and "id" in message and "method" not in message:
                self._replies.put(message)
            elif isinstance(message, dict) and "id" in message:
                # A request from the server (e.g. ping): answer it so it never waits on us.
                self._send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
