"""What our download path costs over a bare HTTP GET, on loopback (no network: the fake hub of tests/).

Run: `.venv/bin/python bench/download_speed.py [--mb 256] [--runs 3]`. Prints a markdown table.

A generated GGUF of `--mb` MB is served by tests/hub_server.HubServer on 127.0.0.1. Side by side in one
process, alternating, `--runs` times each: (a) a raw httpx GET whose bytes are thrown away, (b)
engine.models.downloads.download(): metadata HEAD, streaming into `.part` on disk, sha256 as the bytes
arrive, GGUF header check, rename. Loopback is far faster than any hub, so the ratio is the worst case:
over a real connection the network, not our checks, sets the speed.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.models.downloads import download  # noqa: E402
from engine.models.hubs import entry_for  # noqa: E402
from tests.hub_server import HubServer, write_tiny_gguf  # noqa: E402

log = logging.getLogger("bench.download_speed")
REPO, FILE = "bench/Bench-GGUF", "bench-f32.gguf"


def raw_get(url: str) -> int:
    n = 0
    with httpx.stream("GET", url, headers={"Accept-Encoding": "identity"}, timeout=30) as r:
        r.raise_for_status()
        for chunk in r.iter_bytes(1 << 20):
            n += len(chunk)
    return n


def ours(models: Path) -> int:
    path = download(entry_for(REPO, FILE, "huggingface"))
    n = path.stat().st_size
    path.unlink()
    return n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=256, help="size of the served GGUF in MB (default 256)")
    p.add_argument("--runs", type=int, default=3, help="runs of each path; the median is shown (default 3)")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        gguf = write_tiny_gguf(tmp / FILE, args.mb * 1_000_000 // 4)
        size = gguf.stat().st_size
        print(f"generated a {size / 1e6:.0f} MB GGUF in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        hub = HubServer({f"{REPO}/{FILE}": gguf})
        os.environ["ASSISTANT_HUB_HUGGINGFACE"] = hub.url
        os.environ["ASSISTANT_MODELS_DIR"] = str(tmp / "models")
        url = f"{hub.url}/{REPO}/resolve/main/{FILE}"
        paths = {"(a) raw httpx GET, bytes discarded": lambda: raw_get(url),
                 "(b) download(): .part on disk + sha256 + GGUF check + rename": lambda: ours(tmp / "models")}
        times: dict[str, list[float]] = {k: [] for k in paths}
        try:
            for _ in range(args.runs):
                for name, run in paths.items():  # alternate, so a busy moment hits both alike
                    t = time.perf_counter()
                    got = run()
                    times[name].append(time.perf_counter() - t)
                    assert got == size, (name, got, size)
        finally:
            hub.stop()
        t = time.perf_counter()
        hashlib.sha256(gguf.read_bytes()).hexdigest()
        hash_s = time.perf_counter() - t  # what the sha256 alone costs on this CPU
    base = statistics.median(times[next(iter(paths))])
    print(f"\n{size / 1e6:.0f} MB GGUF from a fake hub on 127.0.0.1, median of {args.runs} runs each\n")
    print("| path | median s | MB/s | time vs raw GET |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {med:.2f} | {size / 1e6 / med:,.0f} | {med / base:.2f}x |")
    print(f"\nsha256 alone on this CPU: {size / 1e6 / hash_s:,.0f} MB/s ({hash_s:.2f} s of the difference)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
