"""The desktop app (Qt only). It talks to the engine through `engine.api.Assistant`, which runs on
its own thread (`app/engine_worker.py`, a Runner of `app/background.py`, the app's one way to run
work off the GUI thread); `engine/` never imports Qt."""
