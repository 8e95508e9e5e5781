"""One message's actions in the chat (app/message_actions.py): answer again, edit and send again,
branch from an answer, delete a turn, and ‹ › between branches. Each but delete leaves the old
turns as a branch (engine/chat/branches.py). A part of `MainWindow` (app/main_window.py), kept in
its own file; GUI thread only."""

from __future__ import annotations

from app.i18n import tr


class WindowMessages:
    """Mixed into MainWindow: it uses the window's worker, view, composer and status line.
    `self.editing`: the id of the user message the composer holds an edit of (True: the last);
    `self.branch_after`: the answer the next message follows (a branch), else None."""

    def _fork(self) -> dict:
        """send's keywords when the message starts a branch: it replaces the message being edited
        (`replacing`; None: the last), or follows the answer Branch was chosen on (`after`). The
        view drops what it replaces."""
        if self.editing:
            mid = self.editing if self.editing is not True else None
            at = self.view.index_of(mid) if mid else self.view.last_user_index()
            self.editing = False
            if at is not None:
                self.view.cut(at)
            return {"replacing": mid}
        if self.branch_after is not None:
            mid, self.branch_after = self.branch_after, None
            self.view.end_preview(keep=False)
            return {"after": mid}
        return {}

    def _start(self, cid: int, text: str, route: str, fork: dict, **options):
        """The turn's start on the engine thread (`start(assistant, params, cancel, tools)`), with
        the message's images (`sent_images`: their digests, before its text)."""
        if self.sent_images:
            options["images"] = list(self.sent_images)
        if "replacing" in fork and fork["replacing"] is None:  # the last message, its id not read yet
            return lambda a, p, cancel, tools: a.resend_edited(cid, text, p, cancel=cancel, route=route, tools=tools,
                                                               **options)
        options.update(fork)
        return lambda a, p, cancel, tools: a.send(cid, text, p, cancel=cancel, route=route, tools=tools, **options)

    def on_message_action(self, action: str, index: int) -> None:
        if not self.engine_ready or self.busy or self.conversation_id is None:
            return
        m = self.view.messages[index]
        if action == "regenerate":
            self._regenerate_at(index, m["id"])
        elif action == "edit":
            self.edit_message(index)
        elif action == "branch":
            self._branch_from(index)
        elif action == "delete":
            self._delete_turn(m)

    def _regenerate_at(self, index: int, message_id: int) -> None:
        """The answer at `index` again: the view drops it and what followed, and streams the new one."""
        self.cancel_branch()
        self._sent = None  # no message of the user's in flight
        self.view.cut(index)
        self.view.messages.append({"role": "assistant", "content": "", "stats": {}, "streaming": True})
        self._set_busy(True)
        self.status_label.setText(tr("Thinking…"))
        cid, route = self.conversation_id, self.composer.route.currentData()
        self._turn(cid, lambda a, p, cancel, tools: a.regenerate(cid, p, message_id=message_id, cancel=cancel,
                                                                 route=route, tools=tools))

    def edit_message(self, index: int) -> None:
        """Put a message of the user's in the composer; sending it replaces it (a new branch)."""
        self.cancel_branch()
        m = self.view.messages[index]
        self.editing = m.get("id") or True
        self.composer.edit.setPlainText(m["content"])
        self.reattach_images([i["digest"] for i in m.get("images") or ()])  # sent again with the edit
        self.composer.edit.setFocus()
        last = index == self.view.last_user_index()
        self.status_label.setText(tr("Editing your last message: send to replace it") if last else
                                  tr("Editing an earlier message: send it to start a new branch there"))

    def _branch_from(self, index: int) -> None:
        """Show the chat up to the answer at `index`; what is sent next follows it. The turns after
        it come back with Esc, or stay as a branch once a message is sent."""
        self.cancel_branch()
        self.editing = False
        self.branch_after = self.view.messages[index]["id"]
        self.view.preview_cut(index + 1)
        self.composer.edit.setFocus()
        self.status_label.setText(tr("New branch after this answer: what you send next starts it (Esc goes back)"))

    def cancel_branch(self) -> bool:
        """Esc while a branch waits for its first message: the turns after the answer come back."""
        if self.branch_after is None:
            return False
        self.branch_after = None
        self.view.end_preview()
        self.status_label.setText("")
        return True

    def _delete_turn(self, m: dict) -> None:
        what = tr("Delete this answer and the message it answers?") if m["role"] == "assistant" else \
            tr("Delete this message and its answer?")
        if not self.confirm(tr("Delete message"), what):
            return
        self.cancel_branch()
        cid, mid = self.conversation_id, m["id"]
        self.worker.call(lambda a: a.delete_turn(cid, mid), lambda _gone: self._load(cid), refresh=True)

    def switch_branch(self, message_id: int) -> None:
        """‹ or ›: show the branch `message_id` is on, and say what the next answer reuses."""
        if not self.engine_ready or self.busy or self.conversation_id is None:
            return
        self.cancel_branch()
        cid = self.conversation_id

        def shown(report: dict) -> None:
            self._load(cid)
            tokens = report.get("tokens")
            if tokens and cid == self.conversation_id:
                self.status_label.setText(tr("Branch switched: the next answer reuses {reused} tokens of the "
                                             "shared start and reads {read}").format(**tokens))

        self.worker.call(lambda a: a.switch_branch(cid, message_id), shown)

    def after_failed_turn(self) -> None:
        """A turn ended in an error: the view shows the chat as stored again (an answer given again
        that failed leaves the old one standing). A refused new message stays in view, the only
        copy of its text; an edit's or a branch's goes back into the message box instead, since
        the turns it would have replaced come back into view."""
        cid = self.conversation_id
        if cid is None:
            return
        last = self.view.messages[-1] if self.view.messages else None
        unsent = last is not None and last["role"] == "user" and not last.get("id")
        text, _route, fork = self._sent or ("", "auto", {})
        if unsent and fork and not self.composer.edit.toPlainText().strip():
            self.composer.edit.setPlainText(text)
            self.reattach_images(self.sent_images)
        self.adopt_ids(cid, redraw=not unsent or bool(fork))

    def adopt_ids(self, cid: int, redraw: bool = True) -> None:
        """After a turn: the messages shown get their stored ids and branches (what their actions
        and ‹ › act on); a path that differs from what is shown is drawn again, unless `redraw` is
        False."""
        def adopt(rows: list[dict]) -> None:
            if cid == self.conversation_id and not self.busy and not self.view.adopt_ids(rows) and redraw:
                self._on_history(cid, rows)

        self.worker.call(lambda a: a.transcript(cid), adopt)
