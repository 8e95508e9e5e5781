"""简体中文 for draft models, as the welcome (app/welcome.py) and the model manager
(app/model_manager.py) show them beside the models they speed up; app/zh_CN.py merges it into its table."""

TABLE = {
    " · with {size} draft (faster answers)": " · 搭配 {size} 草稿模型（回答更快）",
    "draft": "草稿模型",
    "A draft model: it guesses a few words ahead and {targets} checks them in one step, so answers come faster and "
    "read the same. It is downloaded with its model and is not a chat model here.":
        "草稿模型：它先猜出接下来的几个词，再由 {targets} 一步核对，所以回答更快，内容不变。它随所属模型一起下载，"
        "在这里不作为对话模型。",
    "{name} is a draft model: it makes {targets} answer faster and is not offered as a tier.":
        "{name} 是草稿模型：它让 {targets} 回答得更快，不能用作层级模型。",
    "{name} comes with a {size} draft model of its family: it guesses a few words ahead and {name} checks them in "
    "one step, so answers come faster and read the same.":
        "{name} 附带一个同系列的 {size} 草稿模型：它先猜出接下来的几个词，再由 {name} 一步核对，所以回答更快，内容不变。",
}
