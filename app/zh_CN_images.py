"""简体中文 for images in the window (issue 41): the message box's image chips, the viewer, and
what is said when no tier reads images (app/intake.py, app/images.py, app/attachments.py);
app/zh_CN.py merges it into its table."""

TABLE = {
    "Attach": "附加",
    "Attach files or images": "附加文件或图片",
    "Attach files or images (or drop them here, or paste a screenshot)": "附加文件或图片（也可拖到这里，或粘贴截图）",
    "Show {name}": "查看 {name}",
    "{w} × {h} pixels": "{w} × {h} 像素",
    "Do not send this image": "不发送这张图片",
    "Image": "图片",
    "Loading the image…": "正在载入图片…",
    "The image, whole": "完整图片",
    "The image could not be shown: {why}": "无法显示这张图片：{why}",
    "pasted image": "粘贴的图片",
    "first frame of {n}": "共 {n} 帧，取第一帧",
    "scaled from {w} × {h}": "由 {w} × {h} 缩小",
    "{name} is {mb:.1f} MB; images up to {limit} MB can be sent": "{name} 有 {mb:.1f} MB；图片最大 {limit} MB",
    "an image of this message is no longer in the data folder": "这条消息的一张图片已不在数据文件夹中",
    "Not attached: at most {n} images go in one message": "未附加：一条消息最多 {n} 张图片",
    "None of your models reads images yet: sending will say how to get one":
        "你的模型都还不能读图片：发送时会告诉你如何获取一个",
    "This model cannot read images": "这个模型不能读图片",
    "{tier} cannot read images. Send this message to {other}, which can?":
        "{tier} 不能读图片。改发给能读图片的 {other} 吗？",
    "Not sent: the message and its images are still in the box": "未发送：消息和图片仍在输入框中",
    "No model reads images": "没有能读图片的模型",
    "Its model reads images: send images to it": "它的模型能读图片：把图片发给它",
    "On: a message with images may go to L3, its images sent to the endpoint. Off: image turns stay on a local "
    "model that reads them.": "开：带图片的消息可以发给 L3，图片会发送到该端点。关：带图片的对话留在能读图片的本地模型上。",
    "None of your models reads images. A vision model (for example SmolVLM2 on the CPU) comes with a projector "
    "file that lets it see them. Open Models to get one?\n\nThe message and its images stay in the box.":
        "你的模型都不能读图片。视觉模型（例如可在 CPU 上运行的 SmolVLM2）带有一个投影器文件，让它能看图片。"
        "打开“模型”去获取一个吗？\n\n消息和图片会留在输入框中。",
    " · reads images": " · 能读图片",
    "{name} reads images too: paste a screenshot or drop a photo into a message.":
        "{name} 也能读图片：把截图粘贴或把照片拖进消息即可。",
    "To chat about images, {name} ({size} GB with its projector) fits beside them: get it in Models and use it "
    "for a tier.": "想就图片对话，{name}（连同投影器 {size} GB）也放得下：在“模型”中下载，并把它设为某一层。",
}
