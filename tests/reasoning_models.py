"""Reasoning-model fixtures from a real model: demo-small (SmolLM2-135M-Instruct, ChatML markers)
copied with the `gguf` package's gguf_new_metadata under a reasoning template, so the engine's
whole path (detection, the generation prompt, the split stream, the history rule, the KV state)
runs on real llama.cpp. The tiny model does not know the tags; under the R1-style template the
prompt opens the block, so it really generates inside it, until a budget closes it.

    path = reasoning_gguf("r1", tmp_path)   # or "qwen3"

The templates are written for these fixtures, shaped like each family's rule (tests/test_reasoning.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_reasoning import QWEN3_LIKE, R1_LIKE

ROOT = Path(__file__).resolve().parents[1]
DEMO_SMALL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATES = {"r1": R1_LIKE, "qwen3": QWEN3_LIKE}


def reasoning_gguf(style: str, folder: Path, source: Path = DEMO_SMALL) -> Path:
    """demo-small with the `style` template ("r1" | "qwen3"), written once into `folder`."""
    out = Path(folder) / f"smollm2-{style}.gguf"
    if not out.exists():
        subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(source), str(out),
                        "--chat-template", TEMPLATES[style], "--force"],
                       check=True, capture_output=True, timeout=300)
    return out
