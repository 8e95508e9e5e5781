"""Headless engine of the offline assistant. Never imports Qt."""

__version__ = "0.1.0"
