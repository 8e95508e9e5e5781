"""Entry point of the bundled terminal chat and tools (PyInstaller's `assistant`)."""

import sys

from engine.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
