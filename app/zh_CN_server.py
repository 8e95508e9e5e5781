"""简体中文 for the local API server: its Settings section and the window's notices
(app/api_server_settings.py, app/api_server.py); app/zh_CN.py merges it into its table."""

TABLE = {
    "Local API server": "本地 API 服务",
    "Serve an OpenAI-compatible API to programs on this computer": "为本机上的程序提供 OpenAI 兼容的 API",
    "Port": "端口",
    "any free port": "任一空闲端口",
    "Address": "地址",
    "chosen when the server starts": "服务启动时选定",
    "Other computers: {url}": "其他电脑：{url}",
    "Now": "当前状态",
    "Off": "已关闭",
    "Running at {url}": "正在运行：{url}",
    "Could not start: {why}": "无法启动：{why}",
    "made when the server is first turned on": "首次开启服务时生成",
    "Copy": "复制",
    "New key…": "新密钥…",
    "New API key": "新的 API 密钥",
    "Programs that use the current key will be refused until they get the new one. Make a new key?":
        "使用当前密钥的程序将被拒绝，直到它们换上新密钥。确定生成新密钥吗？",
    "Store API conversations in my chat list": "将 API 对话保存到我的对话列表",
    "Let API programs use my memory (recall, and “remember that …”)": "允许 API 程序使用我的记忆（回忆，以及“记住……”）",
    "Let API programs read my documents": "允许 API 程序读取我的文档",
    "Web pages allowed (CORS)": "允许的网页（CORS）",
    "e.g. http://localhost:3000 (empty: no web page may call it)": "例如 http://localhost:3000（留空：不允许任何网页调用）",
    "Each web page origin looks like http://host:port (not: {origins}).":
        "每个网页来源应形如 http://主机:端口（以下不符合：{origins}）。",
    "Allow other computers on the network": "允许网络上的其他电脑访问",
    "They still need the API key.": "它们仍然需要 API 密钥。",
    "Allow other computers": "允许其他电脑",
    "Programs on other computers on your network will be able to use your models and read the conversations "
    "they start, if they have the API key. Only do this on a network you trust. Allow it?":
        "网络上其他电脑中持有 API 密钥的程序将能使用你的模型，并读取它们发起的对话。请只在你信任的网络中这样做。确定允许吗？",
    "Local API server at {url}": "本地 API 服务已在 {url} 运行",
    "Local API server stopped": "本地 API 服务已停止",
    "The local API server could not start: {why}": "本地 API 服务无法启动：{why}",
    "nothing can listen on port {port} (another program may use it): choose another port":
        "无法在端口 {port} 上监听（可能已被其他程序占用）：请换一个端口",
    "internal error (see the log)": "内部错误（详见日志）",
}
