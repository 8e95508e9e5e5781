"""Entry point of the bundled desktop app (PyInstaller's `assistant-gui`)."""

import sys

from app.main import main

if __name__ == "__main__":
    sys.exit(main())
