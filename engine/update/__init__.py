"""Update check (issue 43): a signed release manifest (manifest.py) and the opt-in check that reads it
(check.py). Nothing is ever downloaded or run: the user gets a link to this system's installer."""
