"""简体中文 for the CPU threads: the Resources panel's row (app/gauges.py) and the Settings override
(app/settings_dialog.py); app/zh_CN.py merges it into its table."""

TABLE = {
    "CPU threads": "CPU 线程",
    "no model loaded": "未加载模型",
    "1 thread": "1 个线程",
    "{n} threads": "{n} 个线程",
    "{threads}, {n} for prompts": "{threads}，处理提示词 {n} 个",
    "{threads} (set in Settings)": "{threads}（在设置中指定）",
    "{threads} while other programs are busy ({best} when quiet)": "{threads}，其他程序正忙（空闲时 {best}）",
    "{threads} (one per core)": "{threads}（每个核心一个）",
    "{n}/{best} CPU threads (other programs busy)": "CPU 线程 {n}/{best}（其他程序正忙）",
    "A fixed count from Settings: it does not change while other programs are busy.":
        "设置中指定的固定数量：其他程序繁忙时也不改变。",
    "Other programs use {others} of {cpus} CPUs now.": "其他程序当前占用 {cpus} 个 CPU 中的 {others} 个。",
    "One thread per core (not measured for this model); fewer while other programs are busy.":
        "每个核心一个线程（未针对此模型测量）；其他程序繁忙时减少。",
    "Measured for this model on this computer; fewer while other programs are busy.":
        "已在这台电脑上针对此模型测量；其他程序繁忙时减少。",
    "CPU threads (after a restart)": "CPU 线程（重启后生效）",
    "Automatic: measured once per model on this computer; fewer while other programs are busy.":
        "自动：在这台电脑上为每个模型测量一次；其他程序繁忙时减少。",
    "A number fixes the count for every model.": "指定数字则每个模型都使用这个固定数量。",
}
