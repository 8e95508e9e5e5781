"""A stored message as front-ends read it (`Assistant.messages`): typed, so a front-end reads
fields, not a dict's keys; `as_dict` is the JSON shape of `Assistant.transcript`."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class MessageRecord:
    id: int
    role: str  # "user" | "assistant" | "tool" | "system"
    content: str
    reasoning: str | None  # a reasoning model's thinking, else None
    stats: dict  # the answer's TurnStats.as_json() shape ({} for other roles)
    superseded: bool  # off the chat's current path: another branch
    tool_calls: list[dict] | None  # an answer's calls, OpenAI-shaped
    tool_call_id: str | None  # a tool result's
    parent_id: int | None  # the message it follows
    branches: list[int] | None  # every message at its place, oldest first, when it has siblings
    images: list[dict] | None  # [{"digest", "at"}]

    @classmethod
    def of(cls, row, branches: list[int] | None) -> "MessageRecord":
        """From a row of `Database.messages`."""
        return cls(row["id"], row["role"], row["content"], row["reasoning"], row["stats"] or {},
                   row["superseded_by"] is not None, row["tool_calls"], row["tool_call_id"], row["parent_id"],
                   branches, row["images"])

    @property
    def image_digests(self) -> list[str]:
        return [image["digest"] for image in self.images or ()]

    def as_dict(self) -> dict:
        return asdict(self)
