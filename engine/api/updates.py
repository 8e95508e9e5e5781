"""The update check as front-ends use it: whether it may run, and one check that keeps its settings.

Off until the user says yes (`updates.check`: ask → on | off); at most once a day; any thread (it owns
nothing native: one httpx client per check). See engine/update/check.py for what is read and trusted.
"""

from __future__ import annotations

import time
from pathlib import Path

from engine.config.settings import Settings
from engine.config.version import __version__
from engine.update.check import TIMEOUT_S, Channel, Offer, Outcome, channel, check

DAY_S = 24 * 3600.0

__all__ = ["Offer", "Outcome", "update_channel", "update_due", "check_for_update", "update_self_check"]


def update_channel(folder: Path | None = None) -> Channel | None:
    """The channel this build checks, or None (a build without one: Settings says so)."""
    return channel(folder)


def update_due(settings: Settings, now: float | None = None) -> bool:
    """The user allowed the check and it did not run in the last day."""
    if settings.get("updates.check") != "on":
        return False
    now = time.time() if now is None else now
    return not 0 <= now - settings.get("updates.last_check") < DAY_S


def check_for_update(settings: Settings, language: str = "en", *, chan: Channel | None = None,
                     current: str = __version__, system: str | None = None,
                     timeout_s: float = TIMEOUT_S) -> Outcome:
    """One check through `chan` (this build's by default), remembering when it ran and the newest
    version it saw. Refuses nothing loudly: no channel or a failed read is an Outcome without offer."""
    chan = chan or update_channel()
    if chan is None:
        return Outcome(None, "this build has no update channel")
    outcome = check(chan, current, system=system, language=language,
                    newest_seen=settings.get("updates.newest_seen"), timeout_s=timeout_s)
    values: dict = {"updates.last_check": time.time()}
    if outcome.seen:
        values["updates.newest_seen"] = outcome.seen
    settings.set_many(values)
    return outcome


def update_self_check() -> dict:
    """The install's update machinery works (the selftest): a manifest signed with a throwaway key
    verifies, a tampered one does not; and which channel this build carries."""
    from engine.update.manifest import ManifestError, new_private_key, public_key_of, sign, verify

    key = new_private_key()
    release = {"format": 1, "version": "99.0.0", "published": "", "notes": {},
               "installers": {"linux-x86_64": {"url": "https://example.org/x", "sha256": "0" * 64, "size": 1}}}
    envelope = sign(release, key)
    good = str(verify(envelope, [public_key_of(key)]).version) == "99.0.0"
    try:
        verify(envelope, [public_key_of(new_private_key())])
        refused = False
    except ManifestError:
        refused = True
    chan = update_channel()
    return {"ok": good and refused, "channel": chan.url if chan else None}
