"""MCP start-up: spawn → initialized and spawn → first result, beside the SDK's floor and the
official node server.

Three servers over stdio, driven by the official Python client, taking turns: ``python -m
pplx_nb.mcp``, a hello-world ``MCPServer`` on the same SDK (the floor: what importing and starting
the SDK costs), and Perplexity's own ``@perplexity-ai/mcp-server`` (the latest on npm, installed
into the checkout's gitignored ``.cache/npm``). Both Perplexity servers ask one simulator in its
own process with no added latency. pplx_nb's ``perplexity_search`` answers (the Agent API); the
official ``perplexity_search`` returns Search API results, as pplx_nb's ``perplexity_web_search``
does, so both of pplx_nb's tools are timed.

The figures for whether the SDK's server side imports without its client side come from
``python -X importtime`` in fresh interpreters.
"""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import anyio

from bench._util import ROOT, median, ratio, simulator, table
from bench.bench_mcp import HELLO, _connect

TITLE = "MCP start-up: pplx_nb, the SDK's floor and the official node server"

RUNS = 9
IMPORT_RUNS = 5
OFFICIAL = "@perplexity-ai/mcp-server"
KEY = "pplx-bench-dummy-key-000000"
QUESTION = "How do I cancel an asyncio task?"
IMPORT_ROWS = {
    "`import mcp.server.mcpserver` (what a server imports)": "mcp.server.mcpserver",
    "the protocol types (`mcp_types`, cumulative)": "mcp_types",
    "the client side's own modules (`mcp.client.*`, their own time)": "mcp.client.*",
}


def _official_script() -> tuple[Path, str] | None:
    """The official server's entry point (installed once per version) and its version."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return None
    version = subprocess.run(
        [npm, "view", OFFICIAL, "version"], capture_output=True, text=True, timeout=120
    ).stdout.strip()
    if not version:
        return None
    prefix = ROOT / ".cache" / "npm" / f"{OFFICIAL.replace('/', '+')}@{version}"
    script = prefix / "node_modules" / OFFICIAL / "dist" / "index.js"
    if not (prefix / ".installed").exists():
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(prefix),
             f"{OFFICIAL}@{version}"],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        (prefix / ".installed").write_text(f"{OFFICIAL}@{version}\n")
    return script, version


class _Start(NamedTuple):
    """Seconds from spawn to ``initialized`` and to the first result: wall clock, and the CPU
    the server process had used by then (steady when other work shares the machine)."""

    initialized: float
    answered: float
    initialized_cpu: float
    answered_cpu: float


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _spawn(
    command: str, args: list[str], env: dict[str, str], tool: str, arguments: dict[str, Any]
) -> _Start:
    async with _connect(args, env, command) as server:
        initialized = time.perf_counter()
        initialized_cpu = _cpu_seconds(server.pid)
        result = await server.session.call_tool(tool, arguments)
        answered = server.startup + time.perf_counter() - initialized
        answered_cpu = _cpu_seconds(server.pid)
        if result.is_error:
            raise RuntimeError(f"{tool} failed: {result.content}")
    return _Start(server.startup, answered, initialized_cpu, answered_cpu)


async def _measure(
    hello: Path, logs: Path, official: Path | None, base_url: str
) -> dict[str, list[_Start]]:
    ours_env = {
        "PYTHONPATH": str(ROOT),
        "LOG_LEVEL": "warning",
        "CONVERSATION_LOGS_DIR": str(logs),
        "PPLX_NB_OFFLINE": "0",
        "PERPLEXITY_BASE_URL": base_url,
        "PERPLEXITY_API_KEY": KEY,
    }
    theirs_env = {"PERPLEXITY_API_KEY": KEY, "PERPLEXITY_BASE_URL": base_url}
    out: dict[str, list[_Start]] = {"search": [], "web": [], "hello": [], "node": []}
    for index in range(RUNS):
        question = f"{QUESTION} (run {index})"
        out["search"].append(
            await _spawn(sys.executable, ["-m", "pplx_nb.mcp"], ours_env, "perplexity_search",
                         {"query": question})
        )  # fmt: skip
        out["hello"].append(await _spawn(sys.executable, [str(hello)], {}, "hello", {"name": "n"}))
        out["web"].append(
            await _spawn(sys.executable, ["-m", "pplx_nb.mcp"], ours_env, "perplexity_web_search",
                         {"query": question})
        )  # fmt: skip
        if official is not None:
            out["node"].append(
                await _spawn("node", [str(official)], theirs_env, "perplexity_search",
                             {"query": question, "max_results": 5})
            )  # fmt: skip
    return out


def _import_times() -> dict[str, list[float]]:
    """Import seconds of each row of IMPORT_ROWS in fresh interpreters: a module's cumulative
    time, or (``name.*``) the sum of the own times of the modules under ``name``."""
    found: dict[str, list[float]] = {module: [] for module in IMPORT_ROWS.values()}
    for _ in range(IMPORT_RUNS):
        lines = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import mcp.server.mcpserver"],
            capture_output=True, text=True, check=True,
        ).stderr.splitlines()  # fmt: skip
        own: dict[str, float] = {}
        cumulative: dict[str, float] = {}
        for line in lines:
            parts = line.removeprefix("import time:").split("|")
            if len(parts) == 3 and parts[1].strip().isdigit():
                # A name can appear twice: nested inside another import, then where it ran.
                name = parts[2].strip()
                own[name] = own.get(name, 0.0) + int(parts[0]) / 1e6
                cumulative[name] = max(cumulative.get(name, 0.0), int(parts[1]) / 1e6)
        for module in found:
            if module.endswith(".*"):
                package = module.removesuffix(".*")
                found[module].append(
                    sum(t for name, t in own.items() if name.startswith(f"{package}."))
                )
            else:
                found[module].append(cumulative.get(module, 0.0))
    return found


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def run() -> str:
    """Measure and return the Markdown section."""
    # Installed packages are byte-compiled by pip; the checkout's sources must be too.
    compileall.compile_dir(ROOT / "pplx_nb", quiet=1)
    official = _official_script()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        hello = Path(tmp) / "hello_server.py"
        hello.write_text(HELLO)
        with simulator() as base_url:
            m = anyio.run(
                _measure, hello, Path(tmp) / "logs", official[0] if official else None, base_url
            )
    imports = _import_times()
    load_after = os.getloadavg()[0]

    def cell(key: str, field: str) -> str:
        values = [getattr(start, field) for start in m[key]]
        return _ms(median(values)) if values else "n/a"

    def versus_floor(key: str, field: str) -> str:
        floor = median([getattr(start, field) for start in m["hello"]])
        values = [getattr(start, field) for start in m[key]]
        return ratio(median(values), floor) if values else "n/a"

    node_name = f"`{OFFICIAL}` {official[1]} (node)" if official else "official server: no node"
    labels = {
        "search": "pplx_nb: `perplexity_search` (an answer)",
        "web": "pplx_nb: `perplexity_web_search` (Search API results)",
        "hello": "hello-world `MCPServer`: `hello`",
        "node": f"{node_name}: `perplexity_search` (Search API results)",
    }
    rows = [
        [label, cell(key, "initialized"), cell(key, "answered"),
         versus_floor(key, "initialized"), cell(key, "initialized_cpu"),
         cell(key, "answered_cpu"), versus_floor(key, "initialized_cpu")]
        for key, label in labels.items()
    ]  # fmt: skip
    cpu_ratio = versus_floor("search", "initialized_cpu")
    wall_ratio = versus_floor("search", "initialized")
    import_rows = [
        [label, _ms(median(imports[module])),
         f"{median(imports[module]) / median(imports['mcp.server.mcpserver']):.0%}"]
        for label, module in IMPORT_ROWS.items()
    ]  # fmt: skip
    verdict = "meets" if float(cpu_ratio.rstrip("×")) <= 1.1 else "misses"
    return "\n\n".join(
        [
            f"Medians of {RUNS} spawns each, the servers taking turns; the simulator in its own "
            "process, no added latency. *First result* counts from spawn to the tool's result "
            "(initialize, then one call). *CPU* is what the server process had used by then "
            "(user + system): the wall clock follows the load other work puts on this shared "
            f"machine (load average {load_before:.1f} before, {load_after:.1f} after, on "
            f"{os.cpu_count()} cores), its CPU time much less.",
            table(
                [
                    "server: first call",
                    "spawn → initialized",
                    "spawn → first result",
                    "vs hello-world",
                    "CPU to initialized",
                    "CPU to first result",
                    "CPU vs hello-world",
                ],
                rows,
            ),
            f"pplx_nb reaches `initialized` with **{cpu_ratio}** the hello-world server's CPU "
            f"({wall_ratio} its wall-clock time in this run) and {verdict} the 1.1× target.",
            "**Can the SDK's server side be imported without its client side?** Not through its "
            "public modules: `mcp.server.mcpserver` is inside the `mcp` package, and Python runs "
            "`mcp/__init__.py` before any of its submodules; that file imports `Client`, "
            "`ClientSession`, `ClientSessionGroup` and `stdio_client` and binds every protocol "
            "type. A server on SDK 2.x therefore pays for the client side at start-up, and so "
            "does the hello-world server, which is why it is the floor. Import times "
            f"(`python -X importtime`, median of {IMPORT_RUNS} fresh interpreters):",
            table(["import", "median", "share"], import_rows),
            "The client's modules import the server's and the types, so their own time is the "
            "least a server-only import would save. pplx_nb imports, before the handshake, only "
            "what answering `initialize` needs besides the SDK: its settings (pydantic-settings), "
            "logging and the server class; the tools' schemas and the Researcher load on the "
            "first `tools/list` or call, the API client (httpx2, its TLS context) on the first "
            "call that asks the API.",
        ]
    )


if __name__ == "__main__":
    print(run())
