"""The chat as the window shows it, typed and Qt-free: `Shown` messages in a `Transcript` that the
`ChatController` (app/chat_controller.py) changes and the `ChatView` draws. An `Answer` is a
finished answer as the engine thread hands it over: a snapshot of the engine's `TurnDone`."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from engine.api import MessageRecord, ToolCallEvent, ToolResultEvent, TurnDone

_SERIALS = itertools.count(1)


@dataclass(frozen=True)
class Answer:
    """A finished answer (or a round of tool calls), made on the engine thread: its stats are the
    JSON shape (`TurnStats.as_json()`) copied there, so nothing the engine changes later reaches
    the window."""

    text: str
    stats: dict
    level: str
    model: str
    route_reason: str = ""
    fallback: str | None = None
    message_id: int | None = None
    reasoning: str = ""
    tool_calls: tuple[dict, ...] = ()

    @classmethod
    def of(cls, done: TurnDone) -> "Answer":
        return cls(done.text, done.stats.as_json(), done.level, done.model, done.route_reason, done.fallback,
                   done.message_id, done.reasoning, tuple(done.tool_calls or ()))

    def stopped(self) -> "Answer":
        """This round of calls as an answer that was stopped (Stop between rounds)."""
        return Answer("", dict(self.stats, finish_reason="cancelled"), self.level, self.model, self.route_reason,
                      self.fallback, self.message_id, self.reasoning)

    @property
    def shown_stats(self) -> dict:
        """The stats a message shows: the model and tier beside the measurements."""
        return dict(self.stats, level=self.level, model=self.model)


@dataclass
class ToolBlock:
    """One call in an answer, and how it ended ("stored": read back from the chat's history)."""

    call_id: str | None
    server: str = ""
    tool: str = "?"
    arguments: str = ""
    status: str | None = None
    text: str | None = None
    seconds: float | None = None
    open: bool = False  # unfolded in the view


@dataclass(eq=False)
class Shown:
    """One message as the chat shows it. `steps`: an answer's earlier tool rounds, shown above its
    text: ("text", str) or ("tool", ToolBlock). `rev` counts changes the view cannot see in its
    other fields (an answer finished, a block opened, a round moved up): with `serial`, one per
    message ever made, it is what the view's drawing cache knows a message by."""

    role: str
    content: str = ""
    id: int | None = None
    stats: dict = field(default_factory=dict)
    reasoning: str = ""
    images: list[str] = field(default_factory=list)  # digests
    branches: list[int] | None = None
    streaming: bool = False
    steps: list[tuple[str, str | ToolBlock]] = field(default_factory=list)
    calling: bool = False  # a stored answer that made calls: the next answer joins its bubble
    think_t0: float | None = None  # when its thinking began streaming
    think_s: float | None = None  # how long it thought, once the answer began
    think_open: bool | None = None  # None: the default (open when the answer is all thinking)
    think_shown: int | None = None  # the "Thinking… N s" second last drawn
    rev: int = 0
    serial: int = field(default_factory=lambda: next(_SERIALS))

    @property
    def answer(self) -> bool:
        return self.role == "assistant"

    @property
    def branch(self) -> tuple[int, int] | None:
        """(which, of how many) for a message with siblings: ‹ 2 / 3 ›."""
        siblings = self.branches or []
        return (siblings.index(self.id) + 1, len(siblings)) if self.id in siblings else None

    def tool_blocks(self) -> list[ToolBlock]:
        return [b for kind, b in self.steps if kind == "tool"]


def shown_path(records: list[MessageRecord]) -> list[Shown]:
    """A stored chat's current path as the view shows it: an answer's rounds (answers with calls,
    the tool results that follow them) and its final answer in one bubble, each call a block
    with its result."""
    out: list[Shown] = []
    for r in records:
        if r.superseded:
            continue
        if r.role == "tool":
            host = out[-1] if out and out[-1].answer else None
            block = next((b for b in host.tool_blocks() if b.call_id == r.tool_call_id), None) if host else None
            if block is not None:
                block.status, block.text = "stored", r.content
            continue
        m = Shown(r.role, r.content, r.id, dict(r.stats), r.reasoning or "", r.image_digests, r.branches)
        if m.answer and out and out[-1].answer and out[-1].calling:
            host = out.pop()  # the answer after the results: same bubble, below the calls
            # One turn: the bubble acts as its first round, the message its branches hang on.
            m.steps, m.id, m.branches = host.steps, host.id, host.branches
        if m.answer and r.tool_calls:
            if m.content.strip():
                m.steps.append(("text", m.content))
            for call in r.tool_calls:
                fn = call.get("function", {})
                m.steps.append(("tool", ToolBlock(call.get("id"), "", fn.get("name", "?"), fn.get("arguments", ""))))
            m.content, m.calling = "", True
        out.append(m)
    return out


class Transcript:
    """The messages shown, and the turns a branch's preview hides until its message is sent."""

    def __init__(self) -> None:
        self.messages: list[Shown] = []
        self.hidden: list[Shown] | None = None  # the turns after a branch's answer, while it waits

    def __len__(self) -> int:
        return len(self.messages)

    def __getitem__(self, index: int) -> Shown:
        return self.messages[index]

    def __iter__(self):
        return iter(self.messages)

    @property
    def live(self) -> Shown | None:
        """The answer being written, if any."""
        last = self.messages[-1] if self.messages else None
        return last if last is not None and last.answer and last.streaming else None

    def set(self, messages: list[Shown]) -> None:
        self.messages, self.hidden = list(messages), None

    def add_user(self, text: str, images: list[str] = ()) -> None:
        """A message sent, and its answer's empty bubble."""
        self.messages += [Shown("user", text, images=list(images)), Shown("assistant", streaming=True)]

    def append_tokens(self, text: str) -> bool:
        last = self.live
        if last is None:
            return False
        last.content += text
        if last.think_t0 and last.think_s is None:  # the answer began: thinking is over
            last.think_s = time.monotonic() - last.think_t0
        return True

    def append_thinking(self, text: str) -> bool:
        last = self.live
        if last is None:
            return False
        last.reasoning += text
        if last.think_t0 is None:
            last.think_t0 = time.monotonic()
        return True

    def finish(self, answer: Answer) -> None:
        last = self.messages[-1] if self.messages else None
        if last is not None and last.answer:
            last.content, last.streaming, last.reasoning = answer.text, False, answer.reasoning or ""
            last.stats = answer.shown_stats
            last.rev += 1

    def round_done(self, answer: Answer) -> bool:
        """A round that ended in calls: its text moves above, the next round streams below it."""
        last = self.live
        if last is None:
            return False
        text = answer.text or last.content
        if text.strip():
            last.steps.append(("text", text))
        last.content = ""
        last.rev += 1
        return True

    def tool_event(self, event: ToolCallEvent | ToolResultEvent) -> bool:
        """A call (a new block) or its result (the block it answers is updated)."""
        last = self.messages[-1] if self.messages else None
        if last is None or not last.answer:
            return False
        match event:
            case ToolCallEvent():
                last.steps.append(("tool", ToolBlock(event.call_id, event.server, event.tool, event.arguments)))
            case ToolResultEvent():
                block = next((b for b in reversed(last.tool_blocks()) if b.call_id == event.call_id), None)
                if block is None:
                    block = ToolBlock(event.call_id, event.server, event.tool)
                    last.steps.append(("tool", block))
                block.status, block.text, block.seconds = event.status, event.text, event.seconds
        last.rev += 1
        return True

    def restart_answer(self) -> bool:
        """The answer is written again (the cascade took it back; Regenerate): its bubble empties."""
        last = self.messages[-1] if self.messages else None
        if last is None or not last.answer:
            return False
        last.content, last.streaming, last.stats, last.reasoning = "", True, {}, ""
        last.think_t0 = last.think_s = None
        last.rev += 1
        return True

    def fail(self) -> None:
        """The turn ended in an error: an answer that wrote nothing goes."""
        last = self.live
        if last is not None:
            last.streaming = False
            if not last.content:
                self.messages.pop()

    def ends_with_answer(self) -> bool:
        return len(self.messages) >= 2 and self.messages[-1].answer and self.messages[-2].role == "user"

    def cut(self, index: int) -> None:
        """Drop the messages from `index` on (an answer given again, a message edited)."""
        del self.messages[index:]
        self.hidden = None

    def drop_last_turn(self) -> None:
        """The last user message and what followed it (a message that was not sent)."""
        last = self.last_user_index()
        if last is not None:
            self.cut(last)

    def preview_cut(self, index: int) -> None:
        """Show the chat up to `index` while a branch waits for its first message."""
        hidden = self.messages[index:]
        self.cut(index)
        self.hidden = hidden

    def end_preview(self, keep: bool = True) -> bool:
        """The branch's preview ends: the hidden turns come back (`keep`), or go (its message was
        sent). True when the messages changed."""
        hidden, self.hidden = self.hidden, None
        if hidden and keep:
            self.messages.extend(hidden)
            return True
        return False

    def adopt(self, records: list[MessageRecord]) -> bool | None:
        """Give the messages shown their stored ids and branches (the chat read after a turn).
        None: what is shown is not that chat's path (the caller draws it anew); True: the ‹ ›
        changed (drawn again); False: nothing to draw."""
        if self.hidden is not None:
            return False  # a branch waits for its first message: the view shows part of the path
        path = shown_path(records)
        if [m.role for m in path] != [m.role for m in self.messages]:
            return None
        changed = False
        for shown, stored in zip(self.messages, path):
            if shown.streaming:
                return changed  # a turn started since: its ids come with the next read
            if shown.branches != stored.branches:  # only ‹ › is drawn of these
                shown.rev += 1
                changed = True
            shown.id, shown.branches = stored.id, stored.branches
        return changed

    def index_of(self, message_id: int | None) -> int | None:
        return next((i for i, m in enumerate(self.messages) if message_id and m.id == message_id), None)

    def last_user_index(self) -> int | None:
        return max((i for i, m in enumerate(self.messages) if m.role == "user"), default=None)

    def last_answer(self) -> str:
        """The last answer's text (a reasoning model's thinking is not part of it)."""
        return next((m.content for m in reversed(self.messages) if m.answer), "")

    def tool_blocks(self) -> list[ToolBlock]:
        """Every tool block in the chat, in order."""
        return [b for m in self.messages for b in m.tool_blocks()]
