"""The contract with llama-cpp-python: every binding and struct field engine/inference/llama_seam.py
uses, pinned to the signature it was written against, and what each does on a demo model.

An upgrade of the wheel that renames, drops or retypes one fails here by its name (a ctypes call
with a changed signature would not fail: it would pass the wrong arguments). The tables are read
against llama.h; a new use in the seam needs a row here (test_every_use_has_a_contract).
"""

from __future__ import annotations

import ast
import ctypes
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.config import threads
from engine.inference import gbnf, llama_seam
from engine.inference.load_log import parse_memory_report

ROOT = Path(__file__).resolve().parent.parent
SEAM = ROOT / "engine" / "inference" / "llama_seam.py"
SAMPLING = ROOT / "engine" / "inference" / "llama_sampling.py"  # the seam's sampling half, through its _C

i32, u32, f32, size, ptr, boolean = ctypes.c_int32, ctypes.c_uint32, ctypes.c_float, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_bool
SAMPLER = "LP_llama_sampler"  # struct types by name: the binding defines its own classes
# name: (argument types, return type), as llama.h declares them (pointers to llama's opaque types: void *).
FUNCTIONS = {
    "llama_backend_init": ([], None),
    "llama_log_set": (["CFunctionType", ptr], None),
    "llama_model_default_params": ([], "llama_model_params"),
    "llama_model_load_from_file": ([ctypes.c_char_p, "llama_model_params"], ptr),
    "llama_model_free": ([ptr], None),
    "llama_model_get_vocab": ([ptr], ptr),
    "llama_model_size": ([ptr], ctypes.c_uint64),
    "llama_model_n_swa": ([ptr], i32),
    "llama_model_n_ctx_train": ([ptr], i32),
    "llama_model_n_embd_inp": ([ptr], i32),
    "llama_vocab_n_tokens": ([ptr], i32),
    "llama_vocab_bos": ([ptr], i32),
    "llama_vocab_eos": ([ptr], i32),
    "llama_vocab_get_add_bos": ([ptr], boolean),
    "llama_vocab_get_text": ([ptr, i32], ctypes.c_char_p),
    "llama_vocab_is_eog": ([ptr, i32], boolean),
    "llama_tokenize": ([ptr, ctypes.c_char_p, i32, ctypes.POINTER(i32), i32, boolean, boolean], i32),
    "llama_token_to_piece": ([ptr, i32, ctypes.c_char_p, i32, i32, boolean], i32),
    "llama_context_default_params": ([], "llama_context_params"),
    "llama_init_from_model": ([ptr, "llama_context_params"], ptr),
    "llama_free": ([ptr], None),
    "llama_n_ctx": ([ptr], u32),
    "llama_batch_init": ([i32, i32, i32], "llama_batch"),
    "llama_batch_free": (["llama_batch"], None),
    "llama_decode": ([ptr, "llama_batch"], i32),
    "llama_synchronize": ([ptr], None),
    "llama_set_n_threads": ([ptr, i32, i32], None),
    "llama_set_abort_callback": ([ptr, "CFunctionType", ptr], None),
    "llama_get_logits_ith": ([ptr, i32], ctypes.POINTER(f32)),
    "llama_get_memory": ([ptr], ptr),
    "llama_memory_clear": ([ptr, boolean], None),
    "llama_memory_seq_rm": ([ptr, i32, i32, i32], boolean),
    "llama_memory_seq_pos_min": ([ptr, i32], i32),
    "llama_memory_seq_pos_max": ([ptr, i32], i32),
    "llama_memory_can_shift": ([ptr], boolean),
    "llama_memory_seq_add": ([ptr, i32, i32, i32, i32], None),
    "llama_state_seq_get_size": ([ptr, i32], size),
    "llama_state_seq_get_data": ([ptr, ctypes.POINTER(ctypes.c_uint8), size, i32], size),
    "llama_state_seq_set_data": ([ptr, ctypes.POINTER(ctypes.c_uint8), size, i32], size),
    "llama_sampler_chain_default_params": ([], "llama_sampler_chain_params"),
    "llama_sampler_chain_init": (["llama_sampler_chain_params"], SAMPLER),
    "llama_sampler_chain_add": ([SAMPLER, SAMPLER], None),
    # This wheel's llama.h still takes n_vocab first (upstream dropped it): a drop would shift the
    # window size into the repeat penalty, silently.
    "llama_sampler_init_penalties": ([i32, i32, f32, f32, f32], SAMPLER),
    "llama_sampler_init_greedy": ([], SAMPLER),
    "llama_sampler_init_dist": ([u32], SAMPLER),
    "llama_sampler_init_top_k": ([i32], SAMPLER),
    "llama_sampler_init_typical": ([f32, size], SAMPLER),
    "llama_sampler_init_top_p": ([f32, size], SAMPLER),
    "llama_sampler_init_min_p": ([f32, size], SAMPLER),
    "llama_sampler_init_temp": ([f32], SAMPLER),
    "llama_sampler_sample": ([SAMPLER, ptr, i32], i32),
    "llama_sampler_init_grammar": ([ptr, ctypes.c_char_p, ctypes.c_char_p], SAMPLER),
    "llama_sampler_apply": ([SAMPLER, "LP_llama_token_data_array"], None),
    "llama_sampler_accept": ([SAMPLER, i32], None),
    "llama_sampler_free": ([SAMPLER], None),
    "llama_model_quantize_default_params": ([], "llama_model_quantize_params"),
    "llama_model_quantize": ([ctypes.c_char_p, ctypes.c_char_p, "LP_llama_model_quantize_params"], ctypes.c_uint32),
}
# Other module attributes: enum values (ints) and the rest (the log callback type, the token type).
CONSTANTS = ["GGML_TYPE_F16", "GGML_TYPE_Q8_0", "GGML_TYPE_Q4_0", "LLAMA_FLASH_ATTN_TYPE_ENABLED",
             "LLAMA_FLASH_ATTN_TYPE_DISABLED", "LLAMA_LOAD_MODE_MMAP",
             "LLAMA_LOAD_MODE_NONE", "LLAMA_FTYPE_MOSTLY_F16", "LLAMA_FTYPE_MOSTLY_Q8_0",
             "LLAMA_FTYPE_MOSTLY_Q4_0"]
OTHER = ["__version__", "__file__", "llama_log_callback", "ggml_abort_callback", "llama_token", "llama_token_data", "llama_token_data_array",
         "llama_pos"]
# struct: {field: type}; the seam names them `params` (model), `p` (context) and `batch`.
FIELDS = {
    "llama_model_params": {"n_gpu_layers": i32, "vocab_only": boolean, "load_mode": ctypes.c_int, "devices": ptr},
    "llama_context_params": {
        "n_ctx": u32, "n_batch": u32, "n_ubatch": u32, "n_threads": i32, "n_threads_batch": i32,
        "type_k": ctypes.c_int, "type_v": ctypes.c_int, "flash_attn_type": ctypes.c_int, "swa_full": boolean,
        "op_offload": boolean, "yarn_ext_factor": f32, "yarn_attn_factor": f32, "yarn_beta_fast": f32,
        "yarn_beta_slow": f32, "no_perf": boolean},
    "llama_batch": {"n_tokens": i32, "token": ctypes.POINTER(i32), "pos": ctypes.POINTER(i32),
                    "seq_id": ctypes.POINTER(ctypes.POINTER(i32)), "n_seq_id": ctypes.POINTER(i32),
                    "logits": ctypes.POINTER(ctypes.c_int8)},
    "llama_token_data": {"id": i32, "logit": f32, "p": f32},
    "llama_model_quantize_params": {"ftype": ctypes.c_int, "allow_requantize": boolean, "nthread": ctypes.c_int},
    "llama_token_data_array": {"data": "LP_llama_token_data", "size": size, "selected": ctypes.c_int64,
                               "sorted": boolean},
}
_STRUCT_OF = {"qp": "llama_model_quantize_params", "params": "llama_model_params", "p": "llama_context_params", "batch": "llama_batch",
              "one": "llama_token_data", "array": "llama_token_data_array", "single": "llama_token_data_array"}


def seam_uses() -> tuple[set[str], dict[str, set[str]]]:
    """(llama_cpp attributes the seam reads, struct fields it touches), from its source."""
    attrs, fields = set(), {s: set() for s in FIELDS}
    nodes = [n for path in (SEAM, SAMPLING) for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))]
    for node in nodes:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in ("_C", "llama_cpp"):
                attrs.add(node.attr)
            elif node.value.id in _STRUCT_OF:
                fields[_STRUCT_OF[node.value.id]].add(node.attr)
    return attrs, fields


@pytest.fixture(scope="module")
def C():
    llama_seam.init()
    import llama_cpp  # the module the seam wraps; this test reads its bindings

    return llama_cpp


def _type_ok(got, want) -> bool:
    if isinstance(want, str):
        return got is not None and (got.__name__ == want or (want == "CFunctionType" and issubclass(got, ctypes._CFuncPtr)))
    return got is want


def test_every_use_has_a_contract():
    attrs, fields = seam_uses()
    assert attrs - set(FUNCTIONS) - set(CONSTANTS) - set(OTHER) == set(), "add a contract row for these"
    assert (set(FUNCTIONS) | set(CONSTANTS) | set(OTHER)) - attrs == set(), "rows for bindings the seam no longer uses"
    for struct, used in fields.items():
        assert used - set(FIELDS[struct]) == set(), f"add a contract row for these {struct} fields"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_binding(C, name):
    fn = getattr(C, name, None)
    assert fn is not None, f"llama_cpp.{name} is gone"
    want_args, want_res = FUNCTIONS[name]
    got_args = list(fn.argtypes or [])
    assert len(got_args) == len(want_args), f"{name}: {len(got_args)} arguments, the seam passes {len(want_args)}"
    for i, (got, want) in enumerate(zip(got_args, want_args)):
        assert _type_ok(got, want), f"{name} argument {i}: {got} (the seam passes {want})"
    assert (fn.restype is None and want_res is None) or _type_ok(fn.restype, want_res), \
        f"{name} returns {fn.restype}, the seam expects {want_res}"


@pytest.mark.parametrize("name", CONSTANTS)
def test_constant(C, name):
    assert isinstance(getattr(C, name, None), int), f"llama_cpp.{name} is gone"


@pytest.mark.parametrize("struct,field", [(s, f) for s, fs in FIELDS.items() for f in fs])
def test_struct_field(C, struct, field):
    fields = dict(getattr(C, struct)._fields_)
    assert field in fields, f"{struct}.{field} is gone"
    assert _type_ok(fields[field], FIELDS[struct][field]), \
        f"{struct}.{field} is {fields[field]}, not {FIELDS[struct][field]}"


def test_the_json_schema_converter_the_seam_extends(C):
    from llama_cpp import llama_grammar

    assert isinstance(llama_grammar.RESERVED_NAMES, (set, frozenset, dict, list, tuple))
    assert "root" in llama_grammar.JSON_GBNF
    converter = llama_grammar.SchemaConverter
    for member in ("visit", "_add_rule", "resolve_refs", "format_grammar"):
        assert callable(getattr(converter, member, None)), f"SchemaConverter.{member} is gone"
    assert "root ::=" in llama_seam.json_schema_grammar({"type": "integer"}, lambda schema: None)
    # The seam replaces the module function the port writes repetition with (engine/inference/gbnf.py):
    # a string's bounds must come out in llama.cpp's {m,n}, not as a group nested per character.
    assert llama_grammar._build_repetition is gbnf.repetition
    grammar = llama_seam.json_schema_grammar({"type": "string", "maxLength": 5000}, lambda schema: None)
    assert gbnf.shape(grammar).nesting <= 4 and gbnf.shape(grammar).largest_count <= gbnf.LLAMA_MAX_REPEAT


def test_a_grammar_is_checked_by_llama_cpps_parser_without_a_model(C):
    threads.run(lambda: llama_seam.Grammar(None, 'root ::= "a"{0,2000} [0-9]').close())
    for broken in ('root ::= "a"{2001}', 'root ::= "\\1"', "root ::= x"):
        with pytest.raises(llama_seam.GrammarError):
            threads.run(lambda: llama_seam.Grammar(None, broken))  # noqa: B023 - run at once


@pytest.mark.model
def test_a_grammar_allows_what_it_accepts_and_a_constrained_sampler_keeps_to_it(demo):
    model, ctx, _ = demo
    gbnf = 'root ::= "yes" | "no"'
    grammar = llama_seam.Grammar(model, gbnf)
    yes = llama_seam.tokenize(model.vocab, b"yes", False)[0]
    hello = llama_seam.tokenize(model.vocab, b" Hello", False)[0]
    assert grammar.allows(yes, 1.0) and not grammar.allows(hello, 1.0)
    grammar.close()
    with pytest.raises(llama_seam.GrammarError):
        llama_seam.Grammar(model, "root ::= (")
    ctx.clear()
    ctx.decode(llama_seam.tokenize(model.vocab, b"Is the sky blue? Answer:", False), 0)
    sampler = llama_seam.Sampler(ctx, llama_seam.vocab_facts(model.vocab)["n_vocab"], temperature=0.0, top_k=40,
                                 top_p=0.95, min_p=0.05, repeat_penalty=1.0, seed=1,
                                 grammar=llama_seam.Grammar(model, gbnf))
    token = sampler.sample()
    assert llama_seam.token_piece(model.vocab, token).decode() in ("yes", "no", "y", "n", "ye")
    sampler.close()


def test_only_the_seam_imports_llama_cpp():
    importers = []
    for path in sorted([*(ROOT / "engine").rglob("*.py"), *(ROOT / "app").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "llama_cpp" or n.startswith("llama_cpp.") for n in names):
                importers.append(str(path.relative_to(ROOT)))
    assert sorted(set(importers)) == ["engine/inference/llama_seam.py"]


def test_importing_loads_nothing_until_init():
    """Importing the inference modules sets no environment, loads no ggml backend and no library;
    init() does, once, whichever thread asks first."""
    code = (
        "import os, sys, threading\n"
        "import engine.inference.backend, engine.inference.generate, engine.inference.manager, engine.inference.runtime\n"
        "from engine.models import ggml_registry\n"
        "print('llama_cpp' in sys.modules, 'GGML_NO_BACKTRACE' in os.environ, ggml_registry._registry is not None)\n"
        "from engine.inference import llama_seam\n"
        "ts = [threading.Thread(target=llama_seam.init) for _ in range(4)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print('llama_cpp' in sys.modules, os.environ.get('GGML_NO_BACKTRACE'), 'cpu' in ggml_registry.registry().backends())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GGML_NO_BACKTRACE"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    before, after = out.stdout.splitlines()[-2:]
    assert before == "False False False"
    assert after == "True 1 True"


# ---- behaviour on a demo model ------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo(model_paths):
    with llama_seam.LoadLog() as log:
        model = llama_seam.Model(model_paths["demo-small"])
        ctx = llama_seam.Context(model, n_ctx=256, n_batch=32, n_threads=1)
    yield model, ctx, log.text()
    model.close()


@pytest.mark.model
def test_vocabulary(demo):
    model, _, _ = demo
    facts = llama_seam.vocab_facts(model.vocab)
    assert facts["n_vocab"] == 49152 and facts["eos_id"] >= 0
    ids = llama_seam.tokenize(model.vocab, "Hello, world! <|im_end|>".encode(), special=True)
    assert llama_seam.count_tokens(model.vocab, b"Hello, world!") == len(llama_seam.tokenize(model.vocab, b"Hello, world!", False))
    assert llama_seam.is_eog(model.vocab, ids[-1]) and llama_seam.token_text(model.vocab, ids[-1]) == "<|im_end|>"
    assert b"".join(llama_seam.token_piece(model.vocab, t) for t in ids[:-1]) == b"Hello, world! "
    assert llama_seam.tokenize(model.vocab, b"", False) == [] and model.size_bytes() > 50 << 20


@pytest.mark.model
def test_load_log_names_what_was_allocated(demo):
    report = parse_memory_report(demo[2])
    assert report["weights_bytes"] > 50 << 20 and report["kv_bytes"] > 0 and report["compute_bytes"] > 0


@pytest.mark.model
def test_context_decodes_saves_and_rolls_back(demo):
    model, ctx, _ = demo
    ctx.clear()
    ids = llama_seam.tokenize(model.vocab, b"The quick brown fox jumps over the lazy dog", False)
    assert ctx.n_ctx() == 256 and ctx.n_batch == 32
    ctx.decode(ids, 0)
    row = np.ctypeslib.as_array(ctx.last_logits(), shape=(49152,)).copy()
    assert np.isfinite(row).all()
    saved = ctx.save_state()
    assert len(saved) > 0 and ctx.pos_min() == 0
    assert ctx.remove(3) and isinstance(ctx.can_shift(), bool)
    ctx.decode(ids[3:], 3)  # the same positions again: the same logits
    assert np.allclose(np.ctypeslib.as_array(ctx.last_logits(), shape=(49152,)), row, atol=1e-3)
    ctx.clear()
    assert ctx.load_state(saved) and ctx.pos_min() == 0
    with pytest.raises(llama_seam.DecodeFailed):
        ctx.decode(ids, 300)  # past the context: llama.cpp refuses


@pytest.mark.model
def test_an_aborted_decode_drops_its_piece_and_the_next_one_runs(demo):
    """abort() reaches llama.cpp through the C flag reader (strlen as the abort callback): the
    decode stops, its positions are dropped, and after clear_abort() the same tokens give the
    logits an unaborted decode gives."""
    model, ctx, _ = demo
    ctx.clear()
    ids = llama_seam.tokenize(model.vocab, b"The quick brown fox jumps over the lazy dog", False)
    ctx.decode(ids, 0)
    row = np.ctypeslib.as_array(ctx.last_logits(), shape=(49152,)).copy()
    ctx.clear()
    ctx.abort()
    with pytest.raises(llama_seam.DecodeAborted):
        ctx.decode(ids, 0)
    ctx.clear_abort()
    ctx.decode(ids, 0)  # the aborted positions are gone: the same positions decode again
    assert np.allclose(np.ctypeslib.as_array(ctx.last_logits(), shape=(49152,)), row, atol=1e-3)


@pytest.mark.model
def test_greedy_sampler_takes_the_top_logit_and_softmax_sum_matches_numpy(demo):
    model, ctx, _ = demo
    ctx.clear()
    ctx.decode(llama_seam.tokenize(model.vocab, b"Once upon a time", False), 0)
    row = np.ctypeslib.as_array(ctx.last_logits(), shape=(49152,)).copy()
    sampler = llama_seam.Sampler(ctx, 49152, temperature=0.0, top_k=40, top_p=0.95, min_p=0.05,
                                 repeat_penalty=1.0, seed=1)
    assert sampler.sample() == int(row.argmax())
    sampler.close()
    fn = llama_seam.softmax_sum()
    if fn is None:
        pytest.skip("this ggml exports no ggml_vec_soft_max_f32: numpy computes it")
    out = np.empty_like(row)
    total = fn(len(row), out.ctypes.data, row.ctypes.data, float(row.max()))
    assert total == pytest.approx(float(np.exp(row.astype(np.float64) - row.max()).sum()), rel=1e-5)


def test_init_is_one_call_from_many_threads(C):
    errors = []
    threads = [threading.Thread(target=lambda: errors.append(llama_seam.init())) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == [None] * 8 and llama_seam.version() == C.__version__


def test_every_owner_of_native_memory_frees_it_when_dropped():
    """A class that frees llama.cpp memory in close() also does so when it is garbage (a sampler
    left to the collector once leaked its candidate buffer: n_vocab × 12 bytes a turn)."""
    tree = ast.parse(SEAM.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            methods = {m.name for m in node.body if isinstance(m, ast.FunctionDef)}
            if "close" in methods:
                assert "__del__" in methods, f"{node.name} has close() but no __del__"
    # and no method left outside its class by an edit
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            assert not any(isinstance(n, ast.FunctionDef) and n.name.startswith("__") for n in node.body), node.name
