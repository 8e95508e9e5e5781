"""The desktop app (Qt only). It talks to the engine through `engine.api.Assistant`, which runs on
its own QThread (`app/engine_worker.py`); `engine/` never imports Qt."""
