"""Can one GGUF draft for another: llama.cpp's rule (common_speculative_are_compatible) read from the
headers alone. The two demo GGUFs for the real cases, small written GGUFs for each clause of the rule."""

import gguf
import numpy as np
import pytest

from engine.models.draft_pair import FIRST_CHECKED, SIZE_SLACK, vocab_mismatch
from engine.models.gguf_info import GGUFError, array_bytes, read_gguf
from tests.conftest import MODELS

SMOL, GEMMA = MODELS["demo-small"], MODELS["demo-int4"]


def vocab_gguf(path, tokens, model="gpt2", bos=1, eos=2, add_bos=None):
    """A GGUF of a few KB carrying only a vocabulary and one tensor."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model(model)
    w.add_token_list(tokens)
    for value, add in ((bos, w.add_bos_token_id), (eos, w.add_eos_token_id), (add_bos, w.add_add_bos_token)):
        if value is not None:
            add(value)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path


def words(n):
    return [f"tok{i}" for i in range(n)]


def test_a_model_drafts_for_itself():
    assert vocab_mismatch(SMOL, SMOL) is None
    assert vocab_mismatch(GEMMA, GEMMA) is None


def test_smollm2_cannot_draft_for_gemma_and_the_reason_names_both_vocabularies():
    why = vocab_mismatch(GEMMA, SMOL)
    assert why == "the draft's vocabulary (49 152 tokens, gpt2) differs from the target's (262 144, llama)"
    assert vocab_mismatch(SMOL, GEMMA) == \
        "the draft's vocabulary (262 144 tokens, llama) differs from the target's (49 152, gpt2)"


def test_a_missing_or_corrupt_file_is_a_clear_error(tmp_path):
    with pytest.raises(GGUFError, match=r"^the draft model cannot be read: cannot open .*missing\.gguf"):
        vocab_mismatch(SMOL, tmp_path / "missing.gguf")
    notes = tmp_path / "notes.gguf"
    notes.write_text("hello")
    with pytest.raises(GGUFError, match=r"^the target model cannot be read: notes\.gguf is not a GGUF"):
        vocab_mismatch(notes, SMOL)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(SMOL.read_bytes()[:300_000])  # inside the vocabulary
    with pytest.raises(GGUFError, match="the draft model cannot be read"):
        vocab_mismatch(SMOL, cut)
    bare = tmp_path / "bare.gguf"  # a well-formed GGUF without a vocabulary
    w = gguf.GGUFWriter(str(bare), "llama")
    w.add_tensor("x", np.zeros(4, dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(GGUFError, match="bare.gguf has no tokenizer.ggml.tokens"):
        vocab_mismatch(SMOL, bare)


def test_sizes_within_the_slack_pass_beyond_it_fail(tmp_path):
    # Converters pad a vocabulary to the config's size (Qwen2.5-7B: 128 more than 0.5B): allowed.
    base = words(3000)
    target = vocab_gguf(tmp_path / "t.gguf", base + [f"[PAD{i}]" for i in range(SIZE_SLACK)])
    assert vocab_mismatch(target, vocab_gguf(tmp_path / "d.gguf", base)) is None
    wider = vocab_gguf(tmp_path / "w.gguf", base + [f"[PAD{i}]" for i in range(SIZE_SLACK + 1)])
    assert vocab_mismatch(wider, tmp_path / "d.gguf") == \
        "the draft's vocabulary (3 000 tokens, gpt2) differs from the target's (3 129, gpt2)"


def test_a_different_token_text_is_named_and_the_first_ids_are_not_compared(tmp_path):
    base = words(2000)
    target = vocab_gguf(tmp_path / "t.gguf", base)
    renamed = ["<ctl>"] * FIRST_CHECKED + base[FIRST_CHECKED:]  # uploaders rename the first control tokens
    assert vocab_mismatch(target, vocab_gguf(tmp_path / "r.gguf", renamed)) is None
    late = base[:1999] + ["other"]
    assert vocab_mismatch(target, vocab_gguf(tmp_path / "l.gguf", late)) == \
        "the draft's token 1 999 is 'other', the target's is 'tok1999': their vocabularies differ"
    # the same length in bytes, so only a token-by-token comparison can see it
    swapped = base[:10] + ["tok11", "tok10"] + base[12:]
    assert "token 10 is 'tok11'" in vocab_mismatch(target, vocab_gguf(tmp_path / "s.gguf", swapped))
    # a short vocabulary (kept as a list by read_gguf) is compared the same way
    short = vocab_gguf(tmp_path / "short.gguf", words(100))
    assert vocab_mismatch(short, short) is None
    other = vocab_gguf(tmp_path / "s2.gguf", words(50) + ["x"] + words(100)[51:])
    assert "token 50 is 'x'" in vocab_mismatch(short, other)


def test_special_tokens_and_the_tokenizer_type_must_agree(tmp_path):
    base = words(1500)
    target = vocab_gguf(tmp_path / "t.gguf", base, bos=1, eos=2)
    assert vocab_mismatch(target, vocab_gguf(tmp_path / "e.gguf", base, bos=1, eos=3)) == \
        "the draft's special tokens differ from the target's: end-of-text token 3 in the draft, 2 in the target"
    spm = vocab_gguf(tmp_path / "spm.gguf", base, model="llama")
    assert "(1 500 tokens, llama) differs from the target's (1 500, gpt2)" in vocab_mismatch(target, spm)
    # A header that leaves an id out gets llama.cpp's default for its type (SentencePiece: bos 1, eos 2).
    spm_defaults = vocab_gguf(tmp_path / "spm0.gguf", base, model="llama", bos=None, eos=None)
    assert vocab_mismatch(spm, spm_defaults) is None
    # SentencePiece adds BOS unless the header says otherwise; a BPE header without the flag is unknown
    no_bos = vocab_gguf(tmp_path / "nb.gguf", base, model="llama", add_bos=False)
    assert "adds begin-of-text: no in the draft, yes in the target" in vocab_mismatch(spm, no_bos)
    assert vocab_mismatch(target, vocab_gguf(tmp_path / "bpe.gguf", base, add_bos=True)) is None


def test_the_token_array_is_read_as_stored(tmp_path):
    path = vocab_gguf(tmp_path / "v.gguf", ["a", "日本"] * 700)
    span, data = array_bytes(read_gguf(path), "tokenizer.ggml.tokens")
    assert span.count == 1400 and span.itype == 8 and len(data) == span.end - span.start == 700 * (8 + 1 + 8 + 6)
    assert data[:9] == b"\x01" + b"\0" * 7 + b"a"
