"""The shown chat's turns, without Qt: what is sent, edited, branched, answered again or deleted,
and the `Transcript` the view draws. The window is a view over it: it hands the controller the
user's actions and the engine's results, and the controller asks back through two small
interfaces: `EnginePort` (app/engine_worker.py: calls and turns on the engine thread) and
`ChatScreen` (the window: what is drawn and said). tests/test_chat_controller.py drives it with
neither Qt nor an engine.

A turn's results come back typed (app/transcript.py's `Answer`, the engine's `Retracted`,
`ToolCallEvent`, `ToolResultEvent`) and are matched exhaustively: an unknown one is an error.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from app.errors import TURN_ERRORS, said
from app.transcript import Answer, Shown, Transcript, shown_path
from app.words import tr
from engine.api import MessageRecord, MessageTooLong, Retracted, ToolCallEvent, ToolResultEvent, unknown_event

# A turn's start on the engine thread: `start(assistant, params, cancel, tools)` yields its events;
# every start passes `tools` on (Send, an edit, a branch and Regenerate alike).
TurnStart = Callable[[Any, Any, threading.Event, Any], Iterator]


@dataclass(frozen=True)
class TurnOptions:
    """What the window's switches say for a turn: the chat's preset's temperature (or the
    window's), the answer's length, Think (None: the setting) and Tools."""

    temperature: float = 0.7
    max_tokens: int = 512
    think: bool | None = None
    tools: bool = False


@dataclass(frozen=True)
class Fork:
    """Where the next message joins the chat: at the end (`kind` ""), in place of a user message
    ("edit"; `message_id` None: the last one, its id not read yet), or after an answer ("branch")."""

    kind: str = ""
    message_id: int | None = None

    def options(self) -> dict:
        """send's keywords: `replacing=` or `after=`."""
        return {"edit": {"replacing": self.message_id}, "branch": {"after": self.message_id}}.get(self.kind, {})


@dataclass(frozen=True)
class Sent:
    """A message in flight: MessageTooLong gives it back to be shortened, or to the composer."""

    text: str
    route: str
    fork: Fork = Fork()
    images: tuple[str, ...] = ()
    files: tuple[str, ...] = field(default=())


class EnginePort(Protocol):
    """The engine thread, as app/engine_worker.py offers it (GUI thread only)."""

    def call(self, fn: Callable, on_done: Callable | None = None, refresh: bool = False) -> None: ...

    def turn(self, conversation_id: int, start: TurnStart, options: TurnOptions,
             on_event: Callable[[int, object], None], on_error: Callable[[int, BaseException], None]) -> None: ...

    def stop(self) -> None: ...


class ChatScreen(Protocol):
    """What the controller asks of the window (GUI thread only)."""

    def draw(self, now: bool = True) -> None:
        """The transcript changed: draw it now, or with the next frame (streamed text)."""

    def redraw(self) -> None:
        """The transcript was replaced: draw it whole."""

    def busy_changed(self, busy: bool) -> None: ...

    def say(self, text: str) -> None:
        """The status line."""

    def alert(self, text: str) -> None:
        """The banner over the chat: something went wrong."""

    def sending(self) -> None:
        """A message is on its way: the last turn's banner and warnings go."""

    def put_back(self, text: str, images: list[str], replace: bool = True) -> None:
        """A message the user gets back in the composer, with its images (`replace` False: only
        into an empty composer)."""

    def focus_composer(self) -> None: ...

    def turn_options(self) -> TurnOptions: ...

    def route(self) -> str:
        """The chat's route as the model picker shows it ("auto", "L1", …)."""

    def answered(self, conversation_id: int, answer: Answer, shown: bool) -> None:
        """A turn ended with `answer`; `shown`: in the chat on screen (the top bar, the gauges)."""

    def history_shown(self, last: dict) -> None:
        """A chat was drawn from its record; `last`: its last answer's stats."""

    def confirm(self, title: str, text: str) -> bool: ...

    def ask_overflow(self, exc: MessageTooLong, chosen: Callable[[str | None], None]) -> None:
        """A message too long for the context: `chosen("head_tail" | "summarise" | None)`."""

    def chat_opened(self, conversation_id: int | None, new: bool) -> None:
        """The chat shown changed (None: none); `new`: just made."""

    def tool_event(self, event: ToolCallEvent | ToolResultEvent) -> None:
        """A call the engine runs, or its result (the transcript has it already)."""


def attaching(cid: int, files: list[str], start: TurnStart) -> TurnStart:
    """`start`, after the files are indexed into the chat's collection (on the engine thread)."""
    def run(a, params, cancel, tools):
        a.attach_documents(cid, files)
        yield from start(a, params, cancel, tools)

    return run


class ChatController:
    """The turn state of the chat shown, and its transcript. Every method runs on the GUI thread."""

    def __init__(self, engine: EnginePort, screen: ChatScreen):
        self.engine, self.screen = engine, screen
        self.transcript = Transcript()
        self.conversation_id: int | None = None
        self.ready = False  # the engine started
        self.busy = False  # a turn, or a new chat, is under way
        self.fork = Fork()  # where the next message joins the chat
        self.sent: Sent | None = None  # the message in flight (None: an answer given again)
        self.pending: Sent | None = None  # a first message, waiting for its new chat
        self.last_answer: Answer | None = None  # the latest finished turn
        self.make_chat: Callable[[Callable[[int], None]], None] = lambda created: None  # the window's

    # ---- state
    @property
    def idle(self) -> bool:
        """A new turn may start: the engine is ready and none runs."""
        return self.ready and not self.busy

    @property
    def editing(self) -> bool:
        return self.fork.kind == "edit"

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.screen.busy_changed(busy)

    def engine_ready(self) -> None:
        self.ready = True
        self.set_busy(False)

    # ---- chats
    def open(self, cid: int) -> bool:
        """Show chat `cid` (the chat list); False while a turn runs or it is shown already."""
        if self.busy or cid == self.conversation_id:
            return False
        self.conversation_id, self.fork = cid, Fork()  # the other chat's edit or branch ends
        self.screen.chat_opened(cid, new=False)
        self.load(cid)
        return True

    def close_chat(self, cid: int) -> None:
        """Chat `cid` is deleted: if shown, none is."""
        if cid == self.conversation_id:
            self.conversation_id, self.fork = None, Fork()
            self.transcript.set([])
            self.screen.redraw()
            self.screen.chat_opened(None, new=False)

    def new_chat(self) -> None:
        """A new chat from the window's preset; sending waits until it exists (engine thread)."""
        if not self.idle:
            return
        self.set_busy(True)
        self.make_chat(self.created)

    def created(self, cid: int) -> None:
        self.conversation_id, self.fork = cid, Fork()
        self.transcript.set([])
        self.screen.redraw()
        self.screen.chat_opened(cid, new=True)
        pending, self.pending = self.pending, None
        if pending is not None:
            self._send_to(cid, pending)
        else:
            self.set_busy(False)

    def load(self, cid: int) -> None:
        self.engine.call(lambda a: a.messages(cid), lambda records: self.show_history(cid, records))

    def show_history(self, cid: int, records: list[MessageRecord]) -> None:
        if cid != self.conversation_id:
            return
        self.transcript.set(shown_path(records))
        self.screen.redraw()
        last = next((r.stats for r in reversed(records) if r.role == "assistant" and r.stats and not r.superseded),
                    {})
        self.screen.history_shown(last)

    # ---- sending
    def send(self, text: str, route: str = "auto", files: list[str] = (), images: list[str] = ()) -> bool:
        """Send a message (in place of the one being edited, or after the branch's answer).
        False when the engine cannot take it now."""
        if not self.idle:
            return False
        sent = Sent(text, route, Fork(), tuple(images), tuple(files))
        if self.conversation_id is None:
            # A chat is made on the engine thread first; `created` sends the message into it.
            self.pending = sent
            self.set_busy(True)
            self.make_chat(self.created)
            return True
        self._send_to(self.conversation_id, Sent(text, route, self._take_fork(), tuple(images), tuple(files)))
        return True

    def _take_fork(self) -> Fork:
        """The next message's fork, taken: the view drops what an edit replaces; a branch's preview
        lets its hidden turns go."""
        fork, self.fork = self.fork, Fork()
        if fork.kind == "edit":
            at = self.transcript.index_of(fork.message_id) if fork.message_id else self.transcript.last_user_index()
            if at is not None:
                self.transcript.cut(at)
        elif fork.kind == "branch":
            self.transcript.end_preview(keep=False)
        return fork

    def _send_to(self, cid: int, sent: Sent, overflow: str | None = None) -> None:
        self.conversation_id = cid
        self.screen.sending()
        self.transcript.add_user(sent.text, list(sent.images))
        self.screen.draw()
        self.set_busy(True)
        self.screen.say(tr("Summarising the message…") if overflow == "summarise" else tr("Thinking…"))
        self.sent = sent
        start = self._start(cid, sent, overflow)
        if sent.files:
            self.screen.say(tr("Indexing the attached files…"))
            start = attaching(cid, list(sent.files), start)
        self._turn(cid, start)

    @staticmethod
    def _start(cid: int, sent: Sent, overflow: str | None) -> TurnStart:
        """The turn's start on the engine thread, with the message's images (before its text)."""
        options = {"images": list(sent.images)} if sent.images else {}
        if overflow is not None:
            options["overflow"] = overflow
        text, route = sent.text, sent.route
        if sent.fork.kind == "edit" and sent.fork.message_id is None:  # the last message, its id not read yet
            return lambda a, p, cancel, tools: a.resend_edited(cid, text, p, cancel=cancel, route=route, tools=tools,
                                                               **options)
        options.update(sent.fork.options())
        return lambda a, p, cancel, tools: a.send(cid, text, p, cancel=cancel, route=route, tools=tools, **options)

    def _turn(self, cid: int, start: TurnStart) -> None:
        self.engine.turn(cid, start, self.screen.turn_options(), self.on_event, self.on_error)

    def stop(self) -> None:
        """Esc: a branch waiting for its first message goes back; else the answer stops."""
        if not self.busy and self.cancel_branch():
            return
        self.engine.stop()

    # ---- what the engine streams (GUI thread)
    def on_tokens(self, cid: int, text: str) -> None:
        if cid == self.conversation_id and self.transcript.append_tokens(text):
            self.screen.draw(now=False)

    def on_thinking(self, cid: int, text: str) -> None:
        if cid == self.conversation_id and self.transcript.append_thinking(text):
            self.screen.draw(now=False)

    def on_event(self, cid: int, event: Answer | Retracted | ToolCallEvent | ToolResultEvent) -> None:
        shown = cid == self.conversation_id
        match event:
            case Answer() if event.tool_calls:  # a round of calls: the answer goes on
                if shown and self.transcript.round_done(event):
                    self.screen.draw(now=False)
                self.screen.say(tr("Calling tools…"))
            case Answer():
                self._answered(cid, event, shown)
            case Retracted():  # a low-confidence answer: asked again on L2
                if shown and self.transcript.restart_answer():
                    self.screen.draw()
                    self.screen.say(tr("Low confidence: asking {level} instead…").format(level=event.next_level))
            case ToolCallEvent() | ToolResultEvent():
                if shown and self.transcript.tool_event(event):
                    self.screen.draw(now=False)
                self.screen.tool_event(event)
            case _:
                unknown_event(event)

    def _answered(self, cid: int, answer: Answer, shown: bool) -> None:
        self.last_answer = answer
        self.set_busy(False)
        if shown:
            self.transcript.finish(answer)
            self.screen.draw()
        self.screen.answered(cid, answer, shown)
        self.adopt_ids(cid)

    def on_error(self, cid: int, exc: BaseException) -> None:
        if isinstance(exc, MessageTooLong):
            self._too_long(cid, exc)
            return
        self.set_busy(False)
        self.transcript.fail()
        self.screen.draw()
        self.screen.alert(said(exc, TURN_ERRORS))
        self.after_failed_turn()

    # ---- a message too long for the context: the user chooses how it is shortened, or keeps it
    def _too_long(self, cid: int, exc: MessageTooLong) -> None:
        self.set_busy(False)
        self.transcript.drop_last_turn()  # nothing was stored; the bubble comes back if the user sends it
        self.screen.draw()
        sent = self.sent or Sent("", "auto")
        self.screen.ask_overflow(exc, lambda overflow: self.overflow_chosen(cid, sent, overflow))

    def overflow_chosen(self, cid: int, sent: Sent, overflow: str | None) -> None:
        if overflow is None:  # Cancel: the text is the user's again, in the composer
            self.screen.put_back(sent.text, list(sent.images))
            if sent.fork.kind == "edit":
                self.fork = sent.fork
            if sent.fork.kind:
                self.load(cid)  # the turns it was to replace, or follow, are all still there
            self.screen.say(tr("Not sent: the message is too long for the context"))
            return
        self._send_to(cid, Sent(sent.text, sent.route, sent.fork, sent.images), overflow)  # files: indexed

    def after_failed_turn(self) -> None:
        """A turn ended in an error: the chat is shown as stored again (an answer given again that
        failed leaves the old one standing). A refused new message stays in view, the only copy of
        its text; an edit's or a branch's goes back into the composer instead, since the turns it
        would have replaced come back into view."""
        cid = self.conversation_id
        if cid is None:
            return
        last = self.transcript[-1] if len(self.transcript) else None
        unsent = last is not None and last.role == "user" and not last.id
        sent = self.sent or Sent("", "auto")
        if unsent and sent.fork.kind:
            self.screen.put_back(sent.text, list(sent.images), replace=False)
        self.adopt_ids(cid, redraw=not unsent or bool(sent.fork.kind))

    def adopt_ids(self, cid: int, redraw: bool = True) -> None:
        """After a turn: the messages shown get their stored ids and branches (what their actions
        and ‹ › act on); a path that differs from what is shown is drawn again, unless `redraw` is
        False."""
        def adopt(records: list[MessageRecord]) -> None:
            if cid != self.conversation_id or self.busy:
                return
            changed = self.transcript.adopt(records)
            if changed is None and redraw:
                self.show_history(cid, records)
            elif changed:
                self.screen.draw()

        self.engine.call(lambda a: a.messages(cid), adopt)

    # ---- one message's actions (app/message_actions.py)
    def act(self, action: str, index: int) -> None:
        if not self.idle or self.conversation_id is None or not 0 <= index < len(self.transcript):
            return
        m = self.transcript[index]
        match action:
            case "regenerate":
                self.regenerate(index)
            case "edit":
                self.edit(index)
            case "branch":
                self.branch_from(index)
            case "delete":
                self.delete_turn(m)
            case _:
                raise ValueError(f"unknown message action {action!r}")

    def regenerate(self, index: int | None = None) -> None:
        """The answer at `index` (None: the last) again: the view drops it and what followed, and
        streams the new one; the old one stays as a branch."""
        if not self.idle or self.conversation_id is None or (index is None and not self.transcript.ends_with_answer()):
            return
        self.cancel_branch()
        self.sent = None  # no message of the user's in flight
        message_id = None
        if index is None:
            self.transcript.restart_answer()
        else:
            message_id = self.transcript[index].id
            self.transcript.cut(index)
            self.transcript.messages.append(Shown("assistant", streaming=True))
        self.screen.draw()
        self.set_busy(True)
        self.screen.say(tr("Thinking…"))
        cid, route = self.conversation_id, self.screen.route()
        options = {} if message_id is None else {"message_id": message_id}
        self._turn(cid, lambda a, p, cancel, tools: a.regenerate(cid, p, cancel=cancel, route=route, tools=tools,
                                                                 **options))

    def edit(self, index: int) -> None:
        """Put a message of the user's in the composer; sending it replaces it (a new branch)."""
        self.cancel_branch()
        m = self.transcript[index]
        self.fork = Fork("edit", m.id)
        self.screen.put_back(m.content, list(m.images))  # its images are sent again with the edit
        self.screen.focus_composer()
        last = index == self.transcript.last_user_index()
        self.screen.say(tr("Editing your last message: send to replace it") if last else
                        tr("Editing an earlier message: send it to start a new branch there"))

    def edit_last(self) -> None:
        """Up in an empty composer: the last user message, to edit."""
        at = self.transcript.last_user_index()
        if not self.busy and at is not None:
            self.edit(at)

    def branch_from(self, index: int) -> None:
        """Show the chat up to the answer at `index`; what is sent next follows it. The turns after
        it come back with Esc, or stay as a branch once a message is sent."""
        self.cancel_branch()
        self.fork = Fork("branch", self.transcript[index].id)
        self.transcript.preview_cut(index + 1)
        self.screen.draw()
        self.screen.focus_composer()
        self.screen.say(tr("New branch after this answer: what you send next starts it (Esc goes back)"))

    def cancel_branch(self) -> bool:
        """Esc while a branch waits for its first message: the turns after the answer come back."""
        if self.fork.kind != "branch":
            return False
        self.fork = Fork()
        if self.transcript.end_preview():
            self.screen.draw()
        self.screen.say("")
        return True

    def delete_turn(self, m: Shown) -> None:
        what = tr("Delete this answer and the message it answers?") if m.answer else \
            tr("Delete this message and its answer?")
        if not self.screen.confirm(tr("Delete message"), what):
            return
        self.cancel_branch()
        cid, mid = self.conversation_id, m.id
        self.engine.call(lambda a: a.delete_turn(cid, mid), lambda _gone: self.load(cid), refresh=True)

    def switch_branch(self, message_id: int) -> None:
        """‹ or ›: show the branch `message_id` is on, and say what the next answer reuses."""
        if not self.idle or self.conversation_id is None:
            return
        self.cancel_branch()
        cid = self.conversation_id

        def shown(report: dict) -> None:
            self.load(cid)
            tokens = report.get("tokens")
            if tokens and cid == self.conversation_id:
                self.screen.say(tr("Branch switched: the next answer reuses {reused} tokens of the shared start "
                                   "and reads {read}").format(**tokens))

        self.engine.call(lambda a: a.switch_branch(cid, message_id), shown)
