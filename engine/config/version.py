"""The package's version string (pyproject.toml's `version`), below every group: `assistant --version`
reads it through engine.api."""

__version__ = "0.1.0"
