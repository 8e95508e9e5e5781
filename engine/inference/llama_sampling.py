"""llama.cpp's sampling for the seam (engine/inference/llama_seam.py): a sampler chain and GBNF
grammars. It reads llama.cpp through the seam's handle (`_C` below), never importing llama_cpp
itself, so the seam stays the one importer and tests/test_llama_seam.py pins these uses too."""

from __future__ import annotations

import ctypes

from engine.inference import llama_seam


class _Seam:
    """llama_cpp's bindings as the seam loaded them (llama_seam.init())."""

    def __getattr__(self, name: str):
        return getattr(llama_seam._C, name)


_C = _Seam()


class Sampler:
    """A llama.cpp sampler chain for one answer, sampling from a Context's last logits: the one
    llama-cpp-python's Llama built (penalties over the last 64 tokens, then greedy at temperature 0,
    else top-k, typical 1.0, top-p, min-p, temperature, a seeded draw), so a seeded answer is the
    token sequence it was. llama_sampler_sample accepts the token it returns (penalties see it)."""

    PENALTY_LAST_N = 64

    def __init__(self, ctx: llama_seam.Context, n_vocab: int, *, temperature: float, top_k: int, top_p: float,
                 min_p: float, repeat_penalty: float, seed: int, grammar: Grammar | None = None):
        self._ctx = ctx
        self.grammar = grammar
        self._n_vocab = n_vocab
        self._candidates = None  # the token data array, made on the first constrained pick
        self.ptr = chain = _C.llama_sampler_chain_init(_C.llama_sampler_chain_default_params())
        add = lambda sampler: _C.llama_sampler_chain_add(chain, sampler)
        add(_C.llama_sampler_init_penalties(n_vocab, self.PENALTY_LAST_N, repeat_penalty, 0.0, 0.0))
        if temperature < 0.0:
            add(_C.llama_sampler_init_dist(seed))
        elif temperature == 0.0:
            add(_C.llama_sampler_init_greedy())
        else:
            add(_C.llama_sampler_init_top_k(top_k))
            add(_C.llama_sampler_init_typical(1.0, 1))
            add(_C.llama_sampler_init_top_p(top_p, 1))
            add(_C.llama_sampler_init_min_p(min_p, 1))
            add(_C.llama_sampler_init_temp(temperature))
            add(_C.llama_sampler_init_dist(seed))

    def sample(self, row: int = -1) -> int:
        """The next token from the logits of the last decode's token `row` (-1: its last), and
        accept it into the chain (and the grammar): rows past the last are a speculative draft's,
        sampled one after another as the tokens before them are accepted."""
        if self.grammar is None:
            return int(_C.llama_sampler_sample(self.ptr, self._ctx.ptr, row))
        # As llama.cpp's common sampler does: the chain picks, the grammar checks that one token,
        # and only a pick it rejects has the grammar filter the whole vocabulary (262k entries for
        # Gemma) before the chain picks again.
        logits = self._ctx.logits(row)
        token = self._pick(logits, constrained=False)
        if not self.grammar.allows(token, logits[token]):
            token = self._pick(logits, constrained=True)
        _C.llama_sampler_accept(self.grammar.ptr, token)
        _C.llama_sampler_accept(self.ptr, token)
        return token

    def _pick(self, logits, constrained: bool) -> int:
        import numpy as np  # here: only constrained answers need it

        if self._candidates is None:
            self._data = np.zeros(self._n_vocab, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
            self._data["id"] = np.arange(self._n_vocab, dtype=np.int32)
            self._candidates = _C.llama_token_data_array(
                data=self._data.ctypes.data_as(ctypes.POINTER(_C.llama_token_data)), size=0, selected=-1,
                sorted=False)
        self._data["logit"] = np.ctypeslib.as_array(logits, shape=(self._n_vocab,))
        self._data["p"] = 0.0
        self._data["id"] = np.arange(self._n_vocab, dtype=np.int32)  # samplers sort the array in place
        array = self._candidates
        array.size, array.selected, array.sorted = self._n_vocab, -1, False
        if constrained:
            _C.llama_sampler_apply(self.grammar.ptr, ctypes.byref(array))
        _C.llama_sampler_apply(self.ptr, ctypes.byref(array))
        return int(self._data["id"][array.selected])

    def close(self) -> None:
        if self.ptr:
            _C.llama_sampler_free(self.ptr)
        self.ptr = None
        if self.grammar is not None:
            self.grammar.close()

    def __del__(self) -> None:
        if _C is not None and getattr(self, "ptr", None):
            self.close()


class GrammarError(ValueError):
    """llama.cpp could not parse a GBNF grammar."""


class Grammar:
    """A GBNF grammar over a model's vocabulary: the tokens it allows next, given those accepted."""

    def __init__(self, model: llama_seam.Model | None, gbnf: str, root: str = "root"):
        # model None: parsed alone, to check it (it names no tokens); the parser recurses per nested
        # group, so a caller with a grammar it did not write uses a known stack (engine/config/threads.py)
        llama_seam.init()
        vocab = model.vocab if model is not None else None
        self.ptr = _C.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), root.encode("utf-8"))
        if not self.ptr:
            raise GrammarError("llama.cpp could not parse the grammar")

    def allows(self, token: int, logit: float) -> bool:
        one = _C.llama_token_data(token, logit, 0.0)
        single = _C.llama_token_data_array(data=ctypes.pointer(one), size=1, selected=-1, sorted=False)
        _C.llama_sampler_apply(self.ptr, ctypes.byref(single))
        return one.logit != float("-inf")

    def accept(self, token: int) -> None:
        """Advance past `token` (one `allows` said yes to: llama.cpp aborts on a token its grammar
        cannot take)."""
        _C.llama_sampler_accept(self.ptr, token)

    def close(self) -> None:
        if self.ptr:
            _C.llama_sampler_free(self.ptr)
        self.ptr = None

    def __del__(self) -> None:
        if _C is not None and getattr(self, "ptr", None):
            self.close()
