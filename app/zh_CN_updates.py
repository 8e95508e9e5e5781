"""简体中文 for the update check: the bar above the chat, the release notes and the Settings section
(app/updates.py); app/zh_CN.py merges it into its table."""

TABLE = {
    "Check for new versions once a day? The app reads one small signed file from {host}; "
    "nothing is downloaded or installed by itself.":
        "每天检查一次新版本吗？应用只会从 {host} 读取一个带签名的小文件；不会自行下载或安装任何东西。",
    "Check once a day": "每天检查一次",
    "Don't check": "不检查",
    "Version {version} is available.": "新版本 {version} 已发布。",
    "What's new": "更新内容",
    "Get it": "获取",
    "Later": "以后再说",
    "Version {version}": "版本 {version}",
    "No release notes.": "没有发布说明。",
    "Release notes": "发布说明",
    "What is new in version {version}": "版本 {version} 的更新内容",
    "The installer for this computer: <a href=\"{url}\">{name}</a> ({mb:.0f} MB). Its SHA-256 is {sha}.":
        "适用于这台电脑的安装包：<a href=\"{url}\">{name}</a>（{mb:.0f} MB）。其 SHA-256 为 {sha}。",
    "Updates": "更新",
    "Check for new versions once a day": "每天检查一次新版本",
    "This build cannot check for updates: it was built without a release channel "
    "(from source, or without a signing key).":
        "此版本无法检查更新：构建时没有发布渠道（从源码运行，或构建时没有签名密钥）。",
    "Reads one small signed file from {host} and tells you when a new version is out. "
    "Nothing is downloaded or installed by itself.":
        "从 {host} 读取一个带签名的小文件，有新版本时告诉你。不会自行下载或安装任何东西。",
}
