"""Which requests a reasoning model on L1 answers without thinking (setting reasoning.quick_off):
those the router itself sends to L1 by its quick-request rules (engine/routing/router.py `quick`).
Counted on the router's labelled evaluation prompts, by the level each prompt is labelled with:
L1-labelled prompts answered at once save their thinking; an L2 or L3 prompt caught by the rules
would lose it.

    .venv/bin/python bench/quick_thinking.py [files.tsv ...]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.routing.router import classify, quick  # noqa: E402
from engine.routing.router_eval import load_tsv, split_by_language  # noqa: E402

DEFAULT_FILES = [ROOT / "tests/data/router_private.tsv", ROOT / "tests/data/router_holdout.tsv",
                 ROOT / "tests/data/router_public.tsv"]  # the public set (a copy of ../shared/eval/'s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args(argv)
    examples = [e for f in (args.files or DEFAULT_FILES) if f.is_file() for e in load_tsv(f)]
    total, fast = Counter(), Counter()
    reasons: Counter = Counter()
    for lang, group in split_by_language(examples).items():
        for e in group:
            decision = classify(e.prompt)
            total[(lang, e.level)] += 1
            if quick(decision):
                fast[(lang, e.level)] += 1
                reasons[decision.reason] += 1
    print(f"{len(examples)} labelled prompts ({', '.join(f.name for f in (args.files or DEFAULT_FILES) if f.is_file())})\n")
    print("| labelled | zh: no thinking | en: no thinking | all |")
    print("|---|---:|---:|---:|")
    for level in ("L1", "L2", "L3"):
        cells = [f"{fast[(lang, level)]}/{total[(lang, level)]}" for lang in ("zh", "en")]
        n, d = sum(fast[(x, level)] for x in ("zh", "en")), sum(total[(x, level)] for x in ("zh", "en"))
        print(f"| {level} | {cells[0]} | {cells[1]} | **{n}/{d} ({100 * n / max(d, 1):.0f} %)** |")
    print("\nby rule: " + ", ".join(f"{r} {n}" for r, n in reasons.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
