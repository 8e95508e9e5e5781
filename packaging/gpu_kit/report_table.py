#!/usr/bin/env python3
"""gpu_check.py's JSON report as the markdown tables of docs/gpu.md.

    python3 packaging/gpu_kit/report_table.py gpu_report.json > table.md

Standard library only (gpu_check.py renders the table on the box too).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

MIB = 1 << 20
ORDER = ("cpu", "vulkan", "cuda")


def _dev(result: dict) -> str:
    dev = result.get("device")
    if not dev:
        cpu = (result.get("registry") or {}).get("cpu_module", "")
        return f"CPU ({Path(cpu).stem.replace('libggml-cpu-', '')})" if cpu else "CPU"
    return f"{dev['name']} ({dev['description'].split('(')[0].strip()})"


def _pct(x) -> str:
    return "—" if x is None else f"{x * 100:+.1f} %"


def _mib(x) -> str:
    return "—" if x is None else f"{x / MIB:.1f}"


def _agreement(cpu: list[int] | None, dev: list[int] | None) -> str:
    if not cpu or not dev:
        return "—"
    n = min(len(cpu), len(dev))
    same = next((i for i in range(n) if cpu[i] != dev[i]), n)
    return f"{same}/{n}" + ("" if same == n else f" (differs at {same})")


def speed_table(report: dict) -> list[str]:
    backends = report.get("backends", {})
    cpu = backends.get("cpu", {}).get("models", {})
    lines = ["| model | backend (device) | prompt tokens | prompt tok/s | decode tok/s | greedy = CPU | "
             "first logits max abs diff / CPU std |", "|---|---|---:|---:|---:|---|---:|"]
    for mid in sorted({m for b in backends.values() for m in b.get("models", {})}):
        for name in ORDER:
            result = backends.get(name, {})
            speed = result.get("models", {}).get(mid, {}).get("speed")
            if not speed:
                continue
            for prompt, row in speed["prompts"].items():
                ref = cpu.get(mid, {}).get("speed", {}).get("prompts", {}).get(prompt, {}).get("greedy")
                lv = speed.get("logits_vs_cpu", {}).get(prompt)
                diff = f"{lv['max_abs_diff']:.3g} / {lv['cpu_logit_std']:.3g}" if lv else "—"
                agree = "(reference)" if name == "cpu" else _agreement(ref, row.get("greedy"))
                lines.append(f"| {mid} | {_dev(result)} | {row['tokens']} ({prompt}) | {row['prompt_tps']:.0f} | "
                             f"{row['decode_tps']:.1f} | {agree} | {diff} |")
    return lines


def vram_table(report: dict) -> list[str]:
    lines = ["| model | backend | case | plan | planned MiB | llama.cpp buffers on the device MiB | NVML used Δ MiB | "
             "planned vs buffers | planned vs NVML |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for name in ORDER:
        result = report.get("backends", {}).get(name, {})
        for mid, tasks in sorted(result.get("models", {}).items()):
            for row in tasks.get("vram", []):
                if "plan" not in row:
                    lines.append(f"| {mid} | {name} | {row['case']} | {row.get('skipped', '')} | | | | | |")
                    continue
                p = row["plan"]
                plan = (f"{p['offload']}, {p['n_gpu_layers']}/{p['n_layers']} layers, {p['n_ctx']} ctx, "
                        f"{p['type_k']} KV{', FA' if p['flash_attn'] else ''}")
                if "error" in row:
                    lines.append(f"| {mid} | {name} | {row['case']} | {plan} | {_mib(p['gpu_bytes'])} | "
                                 f"load failed: {row['error'][:80]} | | | |")
                    continue
                logged = row.get("logged_on_device", {}).get("total")
                lines.append(f"| {mid} | {name} | {row['case']} | {plan} | {_mib(p['gpu_bytes'])} | {_mib(logged)} | "
                             f"{_mib(row.get('nvml_delta_after_eval'))} | {_pct(row.get('plan_vs_logged'))} | "
                             f"{_pct(row.get('plan_vs_nvml'))} |")
    return lines


def _med(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if r.get(key) is not None]
    return f"{statistics.median(values):.1f}" if values else "—"


def kv_table(report: dict) -> list[str]:
    lines = ["| model | backend | tier | tokens restored | restore ms (median) | park ms | cold write ms | "
             "re-evaluating instead ms | evaluated / new tokens | answer = from scratch |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    for name in ORDER:
        result = report.get("backends", {}).get(name, {})
        for mid, tasks in sorted(result.get("models", {}).items()):
            kv = tasks.get("kv")
            if not kv:
                continue
            for tier in ("warm", "cold"):
                rows = kv.get(tier, [])
                if not rows:
                    continue
                origin = {r["restored_from"] for r in rows}
                evaluated = ", ".join(f"{r['evaluated']}/{r['new_tokens']}" for r in rows)
                same = [r["matches_scratch"] for r in rows if "matches_scratch" in r]
                lines.append(
                    f"| {mid} | {name} | {tier} (restored from: {', '.join(map(str, sorted(origin, key=str)))}) | "
                    f"{rows[0]['restored_tokens']} | {_med(rows, 'restore_ms')} | {_med(rows, 'park_ms')} | "
                    f"{kv.get('cold_write_ms', '—') if tier == 'cold' else '—'} | {_med(rows, 'scratch_eval_ms')} | "
                    f"{evaluated} | {'yes' if same and all(same) else 'no' if same else '—'} |")
    return lines


def status_lines(report: dict) -> list[str]:
    m = report.get("machine", {})
    out = [f"Machine: {m.get('cpu', '?')}, {m.get('cores')} cores, Python {m.get('python')}; "
           f"GPU: {m.get('nvidia_smi') or 'none (no nvidia-smi)'}. Profile: {report.get('profile', '?')}; "
           f"{report.get('elapsed_s')} s of a {report.get('budget_s')} s budget."]
    cuda = report.get("parts", {}).get("cuda_build", {})
    if cuda:
        detail = cuda.get("reason") or (f"{cuda.get('seconds')} s, {cuda.get('jobs')} jobs, {cuda.get('arch')}"
                                        if cuda.get("status") == "built" else "")
        out.append(f"CUDA build: {cuda.get('status')}{': ' + detail if detail else ''}.")
    for name in ORDER:
        result = report.get("backends", {}).get(name, {})
        errors = result.get("errors") or ([result["skipped"]] if result.get("skipped") else [])
        if errors:
            out.append(f"{name}: " + "; ".join(str(e)[:300] for e in errors))
    out += [f"Note: {n}" for n in report.get("notes", [])]
    if report.get("fatal"):
        out.append(f"Stopped early: {report['fatal']}")
    return out


def render(report: dict) -> str:
    parts = ["### Speed (same prompts, same run; greedy, models with random weights of the demo models' shapes)", "",
             *speed_table(report), "", "### Planner against the device", "", *vram_table(report), "",
             "### KV restore on the device", "", *kv_table(report), "", *(f"- {s}" for s in status_lines(report)), ""]
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(render(json.loads(Path(argv[1]).read_text(encoding="utf-8"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
