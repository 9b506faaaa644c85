"""Start a real JupyterLab on a free loopback port, in a temporary directory, and stop it again.

The server gets its own settings, workspaces and runtime directories so nothing leaks in from (or
out to) the user's Jupyter set-up, and JupyterLab's news and update pop-ups are turned off.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "Lab", "chromium_path", "running_lab", "write_notebook"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
_NOTIFICATIONS = {"checkForUpdates": False, "fetchNews": "false", "doNotDisturbMode": True}
# Every cell rendered, scrolled into view or not, so a test reads the whole notebook's text.
_TRACKER = {"windowingMode": "none"}


def chromium_path() -> str | None:
    """Debian's chromium, if installed."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    return shutil.which("chromium")


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab: where it listens and the token that opens it."""

    url: str
    token: str
    root: Path
    log: Path

    def notebook_url(self, name: str) -> str:
        """The address that opens ``name`` (relative to the root) in the Lab UI."""
        return f"{self.url}/lab/tree/{name}?token={self.token}&reset"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def write_notebook(path: Path, cells: list[str]) -> None:
    """Write a notebook of code cells (nbformat 4) without importing nbformat."""
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"cell-{index}",
                "metadata": {},
                "outputs": [],
                "source": source,
            }
            for index, source in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook, indent=1))


@contextmanager
def running_lab(root: Path, env: Mapping[str, str], timeout: float = 60) -> Iterator[Lab]:
    """Run ``jupyter lab`` serving ``root`` with ``env`` added; stop it (and its kernels) after."""
    token = secrets.token_hex(16)
    port = _free_port()
    home = root.parent / "jupyter-home"
    settings = home / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps(_NOTIFICATIONS))
    tracker = home / "settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True, exist_ok=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps(_TRACKER))
    log = root.parent / "jupyterlab.log"
    full_env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_PLATFORM_DIRS": "1",
        **env,
    }
    command = [
        str(Path(sys.executable).with_name("jupyter")),
        "lab",
        "--no-browser",
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.open_browser=False",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.extension_manager=readonly",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=root,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, token, process, log, timeout)
        yield Lab(url=url, token=token, root=root, log=log)
    finally:
        _stop(process)


def _wait_ready(
    url: str, token: str, process: subprocess.Popen[bytes], log: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"jupyter lab did not start in {timeout} s:\n{log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    # The server runs in its own session: signal the group so its kernels go too.
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
