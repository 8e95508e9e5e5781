"""Export the bundled embedding model to ONNX (engine/memory/onnx_encoder.py): `make models` runs
this so the first start needs no torch.

    .venv/bin/python -m engine.memory.export
"""

from __future__ import annotations

import logging
import os
import sys

from engine.memory.embedder import DEFAULT_MODEL, bundled_model_dir
from engine.memory.onnx_encoder import export, usable_export

log = logging.getLogger("assistant.memory.export")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model_dir = bundled_model_dir()
    if usable_export(DEFAULT_MODEL.id, model_dir):
        log.info("%s: the ONNX export is up to date", DEFAULT_MODEL.id)
        return 0
    export(DEFAULT_MODEL.id, model_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
