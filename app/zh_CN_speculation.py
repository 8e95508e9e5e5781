"""简体中文 for speculative decoding: the line under an answer and its tooltip (app/render.py) and
the Settings group (app/speculative_settings.py); app/zh_CN.py merges it into its table."""

TABLE = {
    "drafted {accepted}/{drafted} accepted": "草稿接受 {accepted}/{drafted}",
    "Speculative decoding: {how}": "推测解码：{how}",
    "n-gram drafts": "N-gram 草稿",
    "a draft model": "草稿模型",
    "Speculative decoding": "推测解码",
    "Mode": "模式",
    "Auto drafts tokens from the chat itself (and a draft model where one is paired) and turns itself off "
    "where it would be slower.":
        "自动模式根据对话本身起草词元（已配对草稿模型时也用它起草），并在会更慢时自行关闭。",
    "One token at a time.": "每次生成一个词元。",
    "N-gram drafts (always)": "N-gram 草稿（始终）",
    "Drafts from the chat's own words (what an answer repeats: code, quotes, lists), also where that is slower.":
        "根据对话自身的文字起草（回答中重复的内容：代码、引文、列表），即使更慢也使用。",
    "Draft model (always)": "草稿模型（始终）",
    "A small model paired with the answering one drafts, also where that is slower.":
        "由与回答模型配对的小模型起草，即使更慢也使用。",
}
