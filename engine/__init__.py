"""Headless engine of the offline assistant. Never imports Qt."""

from engine.config.version import __version__  # noqa: F401 - engine.__version__, as packages have
