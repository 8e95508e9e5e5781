"""简体中文 for a message's own actions and the branches they leave (app/message_actions.py,
app/chat_controller.py); app/zh_CN.py merges it into its table."""

TABLE = {
    "Copy": "复制",
    "Copy Markdown": "复制 Markdown",
    "Copy this message as plain text": "以纯文本复制这条消息",
    "Copy this answer's Markdown as written": "按原样复制这条回答的 Markdown",
    "Regenerate": "重新生成",
    "Answer this message again; this answer stays as a branch": "重新回答这条消息；当前回答保留为一个分支",
    "Branch from here": "从这里分支",
    "Ask something else after this answer; what followed stays as a branch": "在这条回答之后问别的问题；之后的内容保留为一个分支",
    "Edit": "编辑",
    "Change this message and send it again; the old one stays as a branch": "修改这条消息并重新发送；原消息保留为一个分支",
    "Delete": "删除",
    "Delete this answer and the message it answers": "删除这条回答及其对应的提问",
    "Delete this message and its answer": "删除这条消息及其回答",
    "Delete message": "删除消息",
    "Delete this answer and the message it answers?": "删除这条回答及其对应的提问？",
    "Delete this message and its answer?": "删除这条消息及其回答？",
    "branches": "个分支",
    "Editing an earlier message: send it to start a new branch there": "正在编辑较早的消息：发送后将在此处开始新分支",
    "New branch after this answer: what you send next starts it (Esc goes back)":
        "在这条回答之后新建分支：你接下来发送的消息将开始这个分支（按 Esc 返回）",
    "Branch switched: the next answer reuses {reused} tokens of the shared start and reads {read}":
        "已切换分支：下一次回答复用共同开头的 {reused} 个词元，另读入 {read} 个",
    "The messages of this chat; answers are announced when they end. A message's menu (Menu key) copies, edits, "
    "answers again, branches or deletes it; Alt+Up and Alt+Down step through the messages' actions":
        "本对话的消息；回答结束时会朗读。消息的菜单（菜单键）可复制、编辑、重新回答、分支或删除它；"
        "Alt+上/Alt+下 在各条消息的操作间移动",
    "Stop the answer, leave a new branch before its first message, or leave a page":
        "停止回答、在新分支发送第一条消息前退出它，或离开当前页面",
    "Answer the last message again": "重新回答最后一条消息",
    "Answering model": "回答的模型",
    "Which model answers this chat: Auto lets the router choose for each message, or pick a tier and its model":
        "由哪个模型回答本对话：“自动”让路由器为每条消息选择，或选定一个层级及其模型",
}
