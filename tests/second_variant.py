"""The numerics tests again under a second CPU kernel: `make test` runs this after the whole suite.

llama.cpp rounds differently under each CPU variant ggml ships (x64, sandybridge, haswell, alderlake,
zen4): a test that only holds under one encodes that kernel's rounding, not what the engine
guarantees. The first pass ran the best variant this processor has; this one runs `haswell` (or `x64`
where haswell is the best), loaded through ASSISTANT_CPU_VARIANT (engine/models/ggml_registry.py).

Run: `.venv/bin/python tests/second_variant.py [pytest args]`
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.models.ggml_registry import CPU_VARIANT_ENV, cpu_variants  # noqa: E402


def second_variant() -> tuple[str, str] | None:
    """(best, second): the variant a plain run loads, and the one to run the numerics tests under."""
    runnable = cpu_variants(runnable=True)
    if len(runnable) < 2:
        return None
    best = runnable[0]
    second = "haswell" if best != "haswell" and "haswell" in runnable else next(v for v in reversed(runnable) if v != best)
    return best, second


def main() -> int:
    pair = second_variant()
    if pair is None:
        print("second_variant: this llama.cpp has one CPU variant (a static build): nothing to run twice")
        return 0
    best, second = pair
    print(f"second_variant: the numerics tests under ggml's {second} CPU kernels (the first pass ran {best})",
          flush=True)
    env = dict(os.environ, **{CPU_VARIANT_ENV: second})
    args = [sys.executable, "-m", "pytest", "-m", "numerics", *sys.argv[1:]]
    os.chdir(ROOT)
    os.execve(sys.executable, args, env)


if __name__ == "__main__":
    sys.exit(main())
