"""简体中文 for the window's new look (issue 42): the icon rail, the chat list's column, the top bar,
the status line's words for where an answer was made, the answer's routing popover and the
Settings sections; app/zh_CN.py merges it into its table."""

TABLE = {
    "Your chats and the conversation": "你的对话及当前对话",
    "Chat list": "对话列表",
    "Show or fold the chat list (Ctrl+B)": "显示或收起对话列表（Ctrl+B）",
    "Show or fold the chat list": "显示或收起对话列表",
    "the remote model": "远程模型",
    "the GPU model": "GPU 模型",
    "the CPU model": "CPU 模型",
    "a model": "一个模型",
    "Answered on {where}": "由{where}回答",
    "{text} (a stand-in: {why})": "{text}（替补：{why}）",
    "Tier {level}: {model}": "层级 {level}：{model}",
    "Why this tier: {why}": "选择此层级的原因：{why}",
    "Stand-in: {why}": "替补：{why}",
    "Why this model answered": "为什么由这个模型回答",
    "Sections": "分区",
    "Clear the search": "清除搜索",
    "Download from": "下载来源",
    "The hub the models are downloaded from (a mirror where the main hub is slow or blocked)":
        "下载模型的站点（主站慢或无法访问时可选镜像）",
    "Recommended models": "推荐模型",
    "The models that fit this computer, with their size and what each is for": "适合本机的模型，及其大小和用途",
    "Choose which settings to show": "选择要显示的设置",
}
