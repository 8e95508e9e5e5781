"""The `assistant` command: one entry point with sub-commands."""
