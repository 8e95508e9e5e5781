"""Tools the engine itself can run for the window (issue 26): built-in ones and, later, MCP
servers' (each a `ToolSource`), the runner that offers them to a turn and runs a call within its
timeout, and the loop model → call → approval → result → model. The local API never runs tools:
its clients bring their own (engine/server/tools.py)."""
