"""The chat list's groups: Pinned, then by a chat's last activity in local calendar days (Today,
Yesterday, Previous 7 days, Previous 30 days, Older). No Qt here: the sidebar titles the groups,
and a unit test checks the day boundaries with a `now` of its own."""

from __future__ import annotations

from datetime import datetime, timezone

GROUPS = ("pinned", "today", "yesterday", "week", "month", "older")  # the list's order


def group_of(updated: str, now: datetime) -> str:
    """The date group of `updated` (engine/storage/db.py `_now`: ISO, UTC with its offset) counted
    in calendar days in `now`'s time zone, so a chat from 23:59 is "yesterday" a minute later."""
    when = datetime.fromisoformat(updated)
    if when.tzinfo is None:  # every stored stamp has its offset; a bare one is read as the UTC it was
        when = when.replace(tzinfo=timezone.utc)
    days = (now.date() - when.astimezone(now.tzinfo).date()).days
    if days <= 0:  # a clock set back after the chat: still the newest
        return "today"
    if days == 1:
        return "yesterday"
    if days <= 7:
        return "week"
    return "month" if days <= 30 else "older"


def grouped(rows: list[dict], now: datetime) -> list[tuple[str, list[dict]]]:
    """`rows` (Assistant.conversations: "updated", "pinned") under their groups in GROUPS order,
    each keeping the rows' order; empty groups left out."""
    groups: dict[str, list[dict]] = {g: [] for g in GROUPS}
    for r in rows:
        groups["pinned" if r.get("pinned") else group_of(r["updated"], now)].append(r)
    return [(g, members) for g, members in groups.items() if members]
