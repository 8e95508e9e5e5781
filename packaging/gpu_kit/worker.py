"""One backend's measurements, in a process of its own (gpu_check.py starts one per backend).

    python worker.py SPEC.json RESULT.json

The process sees exactly one llama.cpp backend set: gpu_check.py puts a `llama_cpp` package first
on PYTHONPATH whose lib/ holds the CPU variants and at most one GPU module (none for the CPU run), so
a CPU number can never include work ggml quietly offloaded to a device. Everything goes through the
engine: Backend/LoadParams (with gpu_device), the planner, prefill, and the KV tiers. RESULT.json is
rewritten after every step, so a run cut short by its deadline still reports what it measured.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

T_START = time.monotonic()
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _nvml():
    """(read used bytes of GPU 0, its name) through NVML, or (None, why not)."""
    try:
        import pynvml  # noqa: PLC0415 - optional: absent or without a driver on a CPU machine
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        return (lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)), (
            name.decode() if isinstance(name, bytes) else str(name))
    except Exception as exc:  # noqa: BLE001 - NVMLError_*, ImportError: no NVIDIA reading here
        return None, f"no NVML: {exc.__class__.__name__}: {exc}"


NVML_USED, NVML_NAME = _nvml()
NVML_AT_START = NVML_USED() if NVML_USED else None

from engine.inference.backend import Backend, LoadParams, SamplingParams  # noqa: E402
from engine.inference.generate import prefill  # noqa: E402
from engine.inference.manager import plan_error  # noqa: E402
from engine.kv.tiers import KVTiers  # noqa: E402
from engine.models.ggml_registry import registry  # noqa: E402
from engine.models.planner import plan  # noqa: E402

NVML_AFTER_IMPORT = NVML_USED() if NVML_USED else None
log = logging.getLogger("gpu_kit.worker")
GREEDY = SamplingParams(temperature=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, seed=0)
MIB = 1 << 20
FULL_BUDGET_MB = 1 << 20  # a budget no demo model fills: the planner's full offload

# Measurement sizes. "quick" is for software devices (lavapipe reads ~3 prompt tokens a second) and
# smoke runs. llama_decode returns before a GPU has finished: every timing below ends with a read
# of the logits (first_logits / sample), which waits for the device.
PROFILES = {
    "full": {"prompt_tokens": {"short": 0, "long": 2000}, "prompt_reps": 3, "decode_tokens": 128,
             "n_ctx": 4096, "long_ctx": 32768, "vram_fractions": [0.5, 0.25], "vram_eval_tokens": 512,
             "kv_tokens": 2000, "kv_new_tokens": 32, "kv_check_tokens": 8, "warm_reps": 3, "cold_reps": 2},
    "quick": {"prompt_tokens": {"short": 0, "long": 48}, "prompt_reps": 1, "decode_tokens": 4,
              "n_ctx": 2048, "long_ctx": 0, "vram_fractions": [0.5], "vram_eval_tokens": 8,
              "kv_tokens": 48, "kv_new_tokens": 8, "kv_check_tokens": 2, "warm_reps": 1, "cold_reps": 1,
              "min_cold_tokens": 16},
}
SHORT = "Name three colours that a rainbow shows, one per line, and say which one is on the outside."
TOPICS = ["the history of the bicycle", "how bread rises", "why the sky is blue", "the rules of chess",
          "how vaccines work", "the water cycle", "what a compiler does", "how tides happen"]


def document(i: int) -> str:
    """A long, varied text (~60 tokens a paragraph); `i` picks where it starts."""
    return " ".join(
        f"Part {k + 1}. {TOPICS[(i + k) % len(TOPICS)].capitalize()} is explained here in plain words: "
        f"each step builds on the one before, and every claim was checked against a second source {k * 7 + i}."
        for k in range(400))


class Run:
    def __init__(self, spec: dict, out: Path):
        self.spec, self.out = spec, out
        self.deadline = spec["deadline"]  # time.time() after which no new step starts
        self.result: dict = {"backend": spec["backend"], "pid": os.getpid(), "steps": [], "errors": [],
                             "models": {}, "nvml": {"name": NVML_NAME, "used_at_start": NVML_AT_START,
                                                    "used_after_import": NVML_AFTER_IMPORT}}
        self.threads = spec.get("threads") or os.cpu_count() or 1
        self.work = Path(spec["workdir"])
        self.work.mkdir(parents=True, exist_ok=True)

    def save(self) -> None:
        self.result["seconds"] = round(time.monotonic() - T_START, 1)
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, indent=1), encoding="utf-8")
        os.replace(tmp, self.out)

    def left(self) -> float:
        return self.deadline - time.time()

    # ---- device
    def pick_device(self) -> dict | None:
        reg = registry()
        devs = reg.devices()
        self.result["registry"] = {"backends": reg.backends(), "skipped": reg.skipped, "error": reg.error,
                                   "cpu_module": str(reg.cpu_module() or ""),
                                   "devices": [d.as_dict() for d in devs]}
        if self.spec["backend"] == "cpu":
            return None
        mine = [d for d in devs if d.backend == self.spec["backend"] and d.is_gpu]
        mine.sort(key=lambda d: (d.software, d.type != "gpu"))
        if not mine:
            self.result["registry"]["log"] = [line.rstrip() for line in reg.log_lines[-30:]]  # why ggml skipped it
            raise RuntimeError(f"no {self.spec['backend']} device: ggml loaded {reg.backends()}, "
                               f"skipped {reg.skipped or 'nothing'} {reg.error}")
        return mine[0].as_dict()

    def device_free(self) -> int | None:
        dev = self.result.get("device")
        found = [d.free_bytes for d in registry().devices() if dev and d.name == dev["name"]]
        return found[0] if found else None

    def load(self, path: Path, p) -> Backend:
        kw = {k: v for k, v in p.load_kwargs().items() if k != "n_batch"}
        device = self.result["device"]["name"] if self.result.get("device") and p.n_gpu_layers > 0 else None
        return Backend(path, LoadParams(n_threads=self.threads, n_batch=p.n_ubatch, gpu_device=device, **kw))

    # ---- steps
    def prompts(self, backend: Backend, prof: dict) -> dict[str, list[int]]:
        bos = [backend.bos_id] if backend.add_bos and backend.bos_id >= 0 else []
        out = {}
        for name, n in prof["prompt_tokens"].items():
            ids = bos + backend.tokenize(SHORT if name == "short" else document(0), special=False)
            out[name] = ids[:n] if n else ids
        return out

    def decode(self, backend: Backend, n: int) -> tuple[list[int], float]:
        """Greedy tokens after the evaluated prompt, each evaluated in turn; tok/s after the first."""
        sampler = backend.make_sampler(GREEDY)
        ids, t_first = [], None
        for i in range(n):
            token, _ = backend.sample(sampler)
            ids.append(token)
            if i == 0:
                t_first = time.perf_counter()
            if i < n - 1:
                backend.eval([token])
        dt = time.perf_counter() - t_first if t_first else 0.0
        return ids, ((n - 1) / dt if dt > 0 else 0.0)

    def speed(self, mid: str, path: Path, prof: dict) -> dict:
        p = plan(path, FULL_BUDGET_MB if self.result.get("device") else 0, prof["n_ctx"])
        t0 = time.perf_counter()
        backend = self.load(path, p)
        out = {"load_s": round(time.perf_counter() - t0, 3), "offload": backend.offload,
               "plan": {"offload": p.offload, "n_gpu_layers": p.n_gpu_layers, "n_ctx": p.n_ctx,
                        "type_k": p.type_k, "flash_attn": p.flash_attn}, "prompts": {}}
        try:
            prompts = self.prompts(backend, prof)
            t = time.perf_counter()  # warm-up: shaders, kernels and graphs are made on first use
            backend.eval(prompts["short"][:8])
            self.decode(backend, 3)
            backend.reset()
            out["warmup_s"] = round(time.perf_counter() - t, 3)
            for name, ids in prompts.items():
                times = []
                for _ in range(prof["prompt_reps"]):
                    backend.reset()
                    t = time.perf_counter()
                    backend.eval(ids)
                    logits = backend.first_logits()  # waits for the device
                    times.append(time.perf_counter() - t)
                self._logits(mid, name, logits, out)
                tokens, tps = self.decode(backend, prof["decode_tokens"])
                out["prompts"][name] = {
                    "tokens": len(ids), "prompt_s": [round(t, 4) for t in times],
                    "prompt_tps": round(len(ids) / statistics.median(times), 1),
                    "decode_tokens": len(tokens), "decode_tps": round(tps, 1), "greedy": tokens}
        finally:
            backend.close()
        return out

    def _logits(self, mid: str, prompt: str, logits, out: dict) -> None:
        """Keep the CPU's first-position logits; on a GPU, compare with them."""
        mine = self.work / f"{mid}-{prompt}-logits.npy"
        np.save(mine, logits)
        ref_dir = self.spec.get("reference_dir")
        ref = Path(ref_dir) / mine.name if ref_dir else None
        if ref is None or not ref.exists():
            return
        cpu = np.load(ref)
        diff = np.abs(cpu - logits)
        top_cpu, top_dev = set(np.argsort(cpu)[-10:].tolist()), set(np.argsort(logits)[-10:].tolist())
        out.setdefault("logits_vs_cpu", {})[prompt] = {
            "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
            "cpu_logit_std": float(cpu.std()), "argmax_same": int(cpu.argmax()) == int(logits.argmax()),
            "top10_overlap": len(top_cpu & top_dev)}

    def vram(self, mid: str, path: Path, prof: dict) -> list[dict]:
        """Full offload (also at a long context), then budgets the planner must shrink into: each is
        what `layers` repeating layers cost with an f16 cache, so the planner's own search (KV type,
        context, layers) decides what goes on the device."""
        dev = self.result["device"]["name"]
        cases = [("full", FULL_BUDGET_MB, prof["n_ctx"])]
        if prof.get("long_ctx"):
            cases.append(("full, long context", FULL_BUDGET_MB, prof["long_ctx"]))
        n_full = plan(path, FULL_BUDGET_MB, prof["n_ctx"]).n_gpu_layers
        for frac in prof["vram_fractions"]:
            layers = max(1, round(n_full * frac))
            cost = plan(path, FULL_BUDGET_MB, prof["n_ctx"], n_gpu_layers=layers).gpu_bytes_total
            cases.append((f"budget of {layers}/{n_full} layers", cost / MIB, prof["n_ctx"]))
        rows = []
        for label, budget_mb, n_ctx in cases:
            if self.left() < 10:
                rows.append({"case": label, "skipped": "deadline"})
                break
            rows.append(self._vram_case(label, path, budget_mb, n_ctx, dev, prof))
        return rows

    def _vram_case(self, label: str, path: Path, budget_mb: float, n_ctx: int, dev: str, prof: dict) -> dict:
        gc.collect()
        p = plan(path, budget_mb, n_ctx)
        row = {"case": label, "budget_mib": round(budget_mb, 1),
               "plan": {"offload": p.offload, "n_gpu_layers": p.n_gpu_layers, "n_layers": p.n_layers + 1,
                        "n_ctx": p.n_ctx, "type_k": p.type_k, "flash_attn": p.flash_attn,
                        "gpu_bytes": p.gpu_bytes_total, "weights_gpu": p.weights_bytes_gpu,
                        "kv_gpu": p.kv_bytes_gpu, "compute_estimate": p.compute_buffer_bytes_estimate}}
        used0, free0 = (NVML_USED() if NVML_USED else None), self.device_free()
        try:
            backend = self.load(path, p)
        except Exception as exc:  # noqa: BLE001 - a failed load is a finding, not the end of the run
            row["error"] = f"{exc.__class__.__name__}: {exc}"
            return row
        try:
            used1, free1 = (NVML_USED() if NVML_USED else None), self.device_free()
            backend.eval(self.prompts(backend, prof)["long"][:prof["vram_eval_tokens"]])
            self.decode(backend, 2)
            used2, free2 = (NVML_USED() if NVML_USED else None), self.device_free()
            report = backend.memory_report
            on_dev = {k: sum(v for b, v in report[k].items() if b == dev) for k in ("weights", "kv", "compute", "output")}
            logged = sum(on_dev.values())
            row["logged_on_device"] = on_dev | {"total": logged}
            row["logged_buffers"] = {k: report[k] for k in ("weights", "kv", "compute", "output")}
            row["offload"] = backend.offload
            row["plan_error"] = plan_error(p, report)
            row["plan_vs_logged"] = round((p.gpu_bytes_total - logged) / logged, 4) if logged else None
            if used0 is not None:
                row["nvml_delta_load"], row["nvml_delta_after_eval"] = used1 - used0, used2 - used0
                row["plan_vs_nvml"] = round((p.gpu_bytes_total - (used2 - used0)) / (used2 - used0), 4) \
                    if used2 > used0 else None
            if None not in (free0, free1, free2):
                row["ggml_free_delta_load"], row["ggml_free_delta_after_eval"] = free0 - free1, free0 - free2
        finally:
            backend.close()
        gc.collect()
        if used0 is not None:
            row["nvml_left_after_close"] = NVML_USED() - used0
        return row

    def kv(self, mid: str, path: Path, prof: dict) -> dict:
        p = plan(path, FULL_BUDGET_MB, prof["n_ctx"])
        backend = self.load(path, p)
        out = {"kv_buffers": backend.memory_report["kv"], "warm": [], "cold": []}
        folder = Path(tempfile.mkdtemp(prefix=f"kv-{mid}-", dir=self.work))
        try:
            bos = [backend.bos_id] if backend.add_bos and backend.bos_id >= 0 else []
            history = (bos + backend.tokenize(document(3), special=False))[:prof["kv_tokens"]]
            other = (bos + backend.tokenize(document(5), special=False))[:max(32, prof["kv_tokens"] // 4)]
            tiers = self._tiers(folder, prof)
            tiers.prepare(backend, 1, history)
            prefill(backend, history)
            history = history + self.decode(backend, prof["kv_check_tokens"])[0][:-1]
            for rep in range(prof["warm_reps"]):
                if self.left() < 15:
                    break
                history = self._kv_turn(backend, tiers, history, rep, "warm", out, prof, switch=other)
            t = time.perf_counter()
            tiers.release(backend)
            tiers.close()  # every warm state to its cold file, writer joined
            out["cold_write_ms"] = round((time.perf_counter() - t) * 1000, 1)
            files = list(folder.glob("*.kvs"))
            out["cold_file_bytes"] = sum(f.stat().st_size for f in files)
            for rep in range(prof["cold_reps"]):
                if self.left() < 15:
                    break
                backend.reset()  # the context forgets everything, as after a restart
                tiers = self._tiers(folder, prof)
                history = self._kv_turn(backend, tiers, history, rep, "cold", out, prof, switch=None)
                tiers.release(backend)
                tiers.close()
        finally:
            backend.close()
        return out

    @staticmethod
    def _tiers(folder: Path, prof: dict) -> KVTiers:
        kw = {"min_cold_tokens": prof["min_cold_tokens"]} if "min_cold_tokens" in prof else {}
        return KVTiers(folder, 4 << 30, 4 << 30, **kw)

    def _kv_turn(self, backend, tiers, history, rep, tier, out, prof, switch) -> list[int]:
        """Park the chat (or restart), come back with a new turn: restore, check what is evaluated and
        that the answer equals a from-scratch evaluation's (first rep)."""
        park_ms = None
        if switch is not None:
            t = time.perf_counter()
            tiers.park(backend, 1)
            park_ms = (time.perf_counter() - t) * 1000
            tiers.prepare(backend, 2, switch)
            prefill(backend, switch)
        turn = backend.tokenize(f" Question {rep + 1}: and what happens after that, step by step?",
                                special=False)[:prof["kv_new_tokens"]]
        prompt = history + turn
        restore = tiers.prepare(backend, 1, prompt)
        t = time.perf_counter()
        kept, mode, _ = prefill(backend, prompt)
        backend.first_logits()
        eval_ms = (time.perf_counter() - t) * 1000
        answer = self.decode(backend, prof["kv_check_tokens"])[0]
        row = {"restored_from": restore.restored_from, "restore_ms": round(restore.restore_ms, 2),
               "park_ms": round(park_ms, 2) if park_ms is not None else None, "restored_tokens": restore.tokens,
               "prompt_tokens": len(prompt), "new_tokens": len(turn), "evaluated": len(prompt) - kept,
               "new_turn_eval_ms": round(eval_ms, 2), "cache_mode": mode, "greedy": answer}
        if rep == 0:
            backend.reset()
            t = time.perf_counter()
            backend.eval(prompt)
            backend.first_logits()
            row["scratch_eval_ms"] = round((time.perf_counter() - t) * 1000, 2)
            scratch = self.decode(backend, prof["kv_check_tokens"])[0]
            row["scratch_greedy"] = scratch
            row["matches_scratch"] = scratch == answer
        out[tier].append(row)
        return list(backend.kv_tokens)

    PASS_SIZES = (1, 2, 4, 8, 16, 33)

    def passes(self, mid: str, path: Path, prof: dict) -> dict:
        """Speculative decoding's cost on this device (issue 40): one decode of n tokens with logits
        on every row, as a draft's verification pass, against one plain step. A pass of n all
        accepted yields n tokens: n / ratio is the most any draft can gain here."""
        p = plan(path, FULL_BUDGET_MB if self.result.get("device") else 0, prof["n_ctx"])
        backend = self.load(path, p)
        try:
            prompt = self.prompts(backend, prof)["short"]
            backend.eval(prompt)
            base = len(backend.kv_tokens)
            rows, sampler = {}, backend.make_sampler(GREEDY)
            for n in self.PASS_SIZES:
                times = []
                for _ in range(7):
                    t = time.perf_counter()
                    backend.eval_rows((prompt * n)[:n], 0)
                    backend.sample(sampler, n - 1)  # waits for the device
                    times.append(time.perf_counter() - t)
                    backend.keep_prefix(base)
                rows[n] = statistics.median(times)
            return {"ms": {n: round(v * 1000, 3) for n, v in rows.items()},
                    "ratio": {n: round(v / rows[1], 3) for n, v in rows.items()},
                    "ceiling": {n: round(n * rows[1] / v, 2) for n, v in rows.items()}}
        finally:
            backend.close()

    def run(self) -> None:
        try:
            self.result["device"] = self.pick_device()
        except Exception as exc:  # noqa: BLE001
            self.result["errors"].append(f"device: {exc}")
            self.save()
            return
        software = bool(self.result["device"] and self.result["device"]["software"])
        name = self.spec.get("profile") or ("quick" if software else "full")
        prof = PROFILES[name]
        self.result["profile"] = {"name": name} | prof
        self.save()
        tasks = self.spec["tasks"] if self.result["device"] else ["speed"]
        for task in tasks:
            for model in self.spec["models"]:
                if self.left() < 10:
                    self.result["errors"].append(f"{model['id']} {task}: skipped, deadline")
                    continue
                t = time.perf_counter()
                try:
                    value = getattr(self, task)(model["id"], Path(model["path"]), prof)
                    self.result["models"].setdefault(model["id"], {})[task] = value
                except Exception as exc:  # noqa: BLE001 - the report says what failed; the next step runs
                    log.exception("%s %s failed", model["id"], task)
                    self.result["errors"].append(f"{model['id']} {task}: {exc.__class__.__name__}: {exc}")
                self.result["steps"].append({"model": model["id"], "task": task,
                                             "seconds": round(time.perf_counter() - t, 2)})
                self.save()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(levelname)s %(message)s")
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    Run(spec, Path(argv[2])).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
