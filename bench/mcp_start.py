"""What an MCP server costs (issue 26), side by side in one run, through the engine's own client
(engine/tools/mcp_server.py, the official SDK) against the test server tests/mcp_servers/toolbench.py
over stdio:

- the SDK's import, paid once per app run at the first server's start;
- a stdio server's start to its listed tools (spawn, the server's own imports, the handshake,
  tools/list), against the anchor: the same interpreter started bare (`python -c pass`), and
  against the server's SDK import alone, timed inside a fresh interpreter;
- one call's round trip (`add`), and a 1 MB result's, after the start.

    .venv/bin/python bench/mcp_start.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def spawn(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return time.perf_counter() - t0


def child_import_s() -> float:
    """The server side's SDK import, timed inside a fresh interpreter (its start and exit left out)."""
    code = "import time; t = time.perf_counter(); import mcp.server.mcpserver; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, capture_output=True, text=True)
    return float(out.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()

    t0 = time.perf_counter()
    import mcp  # noqa: F401 - the SDK's import, as the first server's start pays it
    import mcp.client.stdio  # noqa: F401
    sdk_import = time.perf_counter() - t0

    from engine.tools import mcp_config
    from engine.tools.mcp_server import McpServers
    from engine.tools.runner import ToolRunner

    entry = {"command": sys.executable, "args": ["-m", "tests.mcp_servers.toolbench"], "cwd": str(ROOT)}
    logs = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    bare, imports, starts, calls, bigs = [], [], [], [], []
    for _ in range(args.runs):
        bare.append(spawn("pass"))
        imports.append(child_import_s())
        configs, _ = mcp_config.parse(json.dumps({"mcpServers": {"bench": entry}}))
        servers = McpServers(configs, logs)
        (server,) = servers.servers()
        t0 = time.perf_counter()
        server.tools()
        starts.append(time.perf_counter() - t0)
        runner = ToolRunner(servers.sources())
        runner.use()
        for i in range(args.calls):
            t0 = time.perf_counter()
            out = runner.run({"id": "c", "function": {"name": "add", "arguments": json.dumps({"a": i, "b": 1})}},
                             threading.Event(), lambda a: "once")
            calls.append(time.perf_counter() - t0)
            assert out.text == str(i + 1), out
        t0 = time.perf_counter()
        runner.run({"id": "c", "function": {"name": "big", "arguments": "{}"}}, threading.Event(), lambda a: "once")
        bigs.append(time.perf_counter() - t0)
        servers.close()

    med = statistics.median
    anchor = med(bare)
    print(f"MCP over stdio, {args.runs} starts, {args.calls} calls each (Python {sys.version.split()[0]})\n")
    print("| what | median | vs bare interpreter start |")
    print("|---|---:|---:|")
    print(f"| bare interpreter start to exit (`python -c pass`, the anchor) | {anchor * 1000:.0f} ms | 1.00× |")
    print(f"| the server's SDK import (`mcp.server.mcpserver`), inside its process | {med(imports) * 1000:.0f} ms "
          f"| {med(imports) / anchor:.2f}× |")
    print(f"| stdio server: start to listed tools | {med(starts) * 1000:.0f} ms | {med(starts) / anchor:.2f}× |")
    print(f"| the SDK's import in the app (once per run) | {sdk_import * 1000:.0f} ms | {sdk_import / anchor:.2f}× |")
    print(f"| one call's round trip (`add`) | {med(calls) * 1000:.1f} ms | |")
    print(f"| a 1 MB result's round trip (`big`, cut to 16 000 chars after) | {med(bigs) * 1000:.0f} ms | |")


if __name__ == "__main__":
    main()
