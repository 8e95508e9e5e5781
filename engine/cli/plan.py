"""`assistant devices` and `assistant plan`: what this machine has (and the CPU threads a model runs on
it, with each model's measured speed by thread count), and how a model would fit it.

Registered into engine/cli/main.py's subcommands by `add_plan_parsers`. Neither command loads weights.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from engine.api import (DEFAULT_MARGIN_MB, DEFAULT_N_CTX, DeviceSnapshot, GGUFError, ModelNotFound, Plan, PlanError,
                        Settings, cpu_threads_report, default_vram_budget_mb, device_snapshot, plan)
from engine.cli.output import EXIT_MODEL, EXIT_OK, EXIT_USAGE, error

MIB = 1 << 20
GIB = 1024 * MIB


def add_plan_parsers(subparsers) -> None:
    """Register `devices` and `plan` on an argparse subparsers object; each sets `func`."""
    d = subparsers.add_parser("devices", help="CPU, RAM and GPUs as the memory planner sees them, and CPU threads")
    d.add_argument("--json", action="store_true", help="print one JSON object")
    d.set_defaults(func=cmd_devices)

    p = subparsers.add_parser("plan", help="how a model fits the VRAM budget (GPU layers, context, KV type)")
    p.add_argument("--model", required=True, metavar="NAME|PATH",
                   help="catalog id (downloaded or not) or path to a .gguf file")
    p.add_argument("--vram-budget-mb", metavar="N", default=None,
                   help=f"MiB of VRAM to plan for; 0 = CPU only (default: free VRAM minus {DEFAULT_MARGIN_MB})")
    p.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX, help="wanted context in tokens")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_plan)


def parse_budget(text: str | None) -> float | None:
    """The --vram-budget-mb value: None (use the default), or a finite number of MiB >= 0.

    Raises:
        PlanError: not a number, not finite, or negative; the message says what to give instead.
    """
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise PlanError(f"--vram-budget-mb must be a number of MiB (like 6144, or 0 for CPU only), got {text!r}")
    if not math.isfinite(value) or value < 0:
        raise PlanError(f"--vram-budget-mb must be 0 or more MiB (0 = CPU only), got {text!r}")
    return value


def cmd_devices(args: argparse.Namespace) -> int:
    snap = device_snapshot()
    budget = default_vram_budget_mb(snap)
    threads = cpu_threads_report(manual=int(Settings.shared().get("runtime.n_threads")))
    if args.json:
        chosen = snap.best_gpu
        sys.stdout.write(json.dumps({**snap.as_dict(), "default_vram_budget_mb": budget,
                                     "chosen_device": chosen.device if chosen else None,
                                     "cpu_threads": threads}, indent=2) + "\n")
        return EXIT_OK
    sys.stdout.write(_devices_text(snap, budget) + threads_text(threads))
    return EXIT_OK


def _devices_text(snap: DeviceSnapshot, budget: int) -> str:
    phys = f" ({snap.cpu_physical} physical)" if snap.cpu_physical else ""
    lines = [f"platform  {snap.platform}",
             f"CPU       {snap.cpu_logical} logical cores{phys}",
             f"RAM       {snap.ram_total_bytes / GIB:.1f} GiB total, {snap.ram_available_bytes / GIB:.1f} GiB "
             f"available; this process {snap.process_rss_bytes / MIB:.0f} MiB"]
    lines.append(f"backends  {', '.join(snap.backends) or 'none (llama.cpp not loadable)'}"
                 + "".join(f"; {b} not loaded: {why}" for b, why in snap.skipped)
                 + (f"; CPU kernels: {snap.cpu_variant}" if snap.cpu_variant else ""))
    chosen = snap.best_gpu
    for g in snap.gpus:
        via = f"{g.backend} as {g.device}" if g.device else "no backend can use it"
        tags = [t for t in ("unified memory" if g.unified else "", "software (not used by auto)" if g.software else "",
                            f"driver {snap.driver_version}" if g.memory_from == "nvml" and snap.driver_version else "",
                            "chosen" if g is chosen else "") if t]
        lines.append(f"GPU {g.index}     {g.name}: {g.total_bytes / GIB:.1f} GiB total, {g.free_bytes / GIB:.1f} GiB "
                     f"free, {g.used_bytes / GIB:.1f} GiB used ({via}{'; ' + ', '.join(tags) if tags else ''})")
    if not snap.gpus:
        lines.append(f"GPU       none ({snap.note})" if snap.note else "GPU       none")
    elif snap.note:
        lines.append(f"note      {snap.note}")
    lines.append(f"budget    {budget} MiB default VRAM budget (free VRAM of the best GPU minus {DEFAULT_MARGIN_MB} MiB)")
    return "\n".join(lines) + "\n"


def threads_text(r: dict) -> str:
    """The CPU threads section of `assistant devices`, from engine.api.cpu_threads_report."""
    cpu = r["cpu"]
    lines = [f"threads   {cpu['usable']} usable CPUs ({cpu['physical']} physical, {cpu['performance']} performance "
             f"cores); other programs use {r['others']:.1f} CPUs now"]
    if r["manual"]:
        lines.append(f"          {_threads(r['manual'])} per model, set in Settings (runtime.n_threads); never changed")
    else:
        lines.append(f"          automatic: a model runs its measured best, up to {_threads(r['threads_now'])} now "
                     f"(fewer while other programs are busy)")
    for c in r["calibrations"]:
        where = "CPU only" if not c["gpu_layers"] else f"{c['gpu_layers']} GPU layers"
        lines.append(f"measured  {c['model']} ({where}, {c['cpu']}): decode {_rates(c['decode'])} tok/s, best "
                     f"{c['best_decode']}; prompt {_rates(c['batch'])} tok/s, best {c['best_batch']}")
    if not r["calibrations"]:
        lines.append("measured  no model yet (each is measured at its first load)")
    return "\n".join(lines) + "\n"


def _threads(n: int) -> str:
    return f"{n} thread{'s' if n != 1 else ''}"


def _rates(rates: dict[int, float]) -> str:
    """{1: 50.0, 2: 90.0} -> "1: 50, 2: 90" (threads: tok/s)."""
    return ", ".join(f"{n}: {r:.0f}" for n, r in sorted(rates.items()))


def cmd_plan(args: argparse.Namespace) -> int:
    try:
        budget = parse_budget(args.vram_budget_mb)
    except PlanError as exc:
        return error(str(exc), EXIT_USAGE)
    if args.n_ctx < 1:
        return error(f"--n-ctx must be a positive number of tokens, got {args.n_ctx}", EXIT_USAGE)
    budget_source = "given"
    if budget is None:
        budget, budget_source = default_vram_budget_mb(device_snapshot()), "free VRAM minus margin"
    try:
        result = plan(args.model, budget, args.n_ctx)
    except PlanError as exc:
        return error(str(exc), EXIT_USAGE)
    except (ModelNotFound, GGUFError) as exc:
        return error(str(exc), EXIT_MODEL)
    except ValueError as exc:  # metadata the accounting cannot use (no layer count, odd arrays)
        return error(f"cannot plan {args.model}: {exc}", EXIT_MODEL)
    if args.json:
        sys.stdout.write(json.dumps({**result.as_dict(), "budget_source": budget_source}, indent=2) + "\n")
    else:
        sys.stdout.write(plan_text(result, budget_source))
    return EXIT_OK


def plan_text(p: Plan, budget_source: str = "given") -> str:
    """The human form of a plan, as `assistant plan` prints it."""
    full = p.n_layers + 1
    src = "GGUF metadata and tensor table" if p.source == "gguf" else "catalog facts (weights estimated)"
    offload = {"full": "full", "partial": "partial", "cpu": "none (CPU only)"}[p.offload]
    lines = [
        f"model     {p.model}  [{src}]",
        f"budget    {p.budget_bytes / MIB:.0f} MiB VRAM ({budget_source})",
        f"offload   {offload}: n_gpu_layers {p.n_gpu_layers} of {full} ({p.n_layers} repeating + output)",
        f"context   {p.n_ctx} tokens" + (f" (asked {p.n_ctx_asked})" if p.n_ctx != p.n_ctx_asked else ""),
        f"KV cache  {p.type_k}/{p.type_v}, flash attention {'on' if p.flash_attn else 'off'}: "
        f"{p.kv_bytes_per_token / 1024:.1f} KiB/token, {p.kv_bytes_total / MIB:.1f} MiB allocated "
        f"({p.kv_bytes_gpu / MIB:.1f} on GPU); {p.mha_ratio:.1f}x smaller than with one KV head per query head",
        f"weights   {p.weights_bytes_gpu / MIB:.0f} MiB on GPU, {p.weights_bytes_total / MIB:.0f} MiB in all",
        f"compute   ~{p.compute_buffer_bytes_estimate / MIB:.0f} MiB (estimate)",
        f"GPU total {p.gpu_bytes_total / MIB:.0f} of {p.budget_bytes / MIB:.0f} MiB",
        f"why       {p.explanation}",
    ]
    lines += [f"note      {n}" for n in p.notes]
    return "\n".join(lines) + "\n"
