"""llama.cpp's sequence state split by position and joined again, and the cold files that grow by
segments with it (engine/kv/state_format.py, engine/kv/cold.py). Synthetic states here follow the
layout byte for byte; the model tests check it on states llama.cpp wrote (test_kv_tiers.py)."""

import struct

import numpy as np
import pytest

from engine.kv import state_format
from engine.kv.cold import MAX_SEGMENTS, ColdTier
from engine.kv.tiers import Snapshot

FACTS = {"model_name": "m.gguf", "n_ctx": 4096}
IDENT = "m.gguf:1"
N_LAYER, K_ROW, N_EMBD_V, EL = 3, 16, 4, 2


def state(positions, v_trans=1) -> bytearray:
    """A state in llama.cpp's layout whose K and V bytes are a function of (layer, position)."""
    pos = np.asarray(positions, dtype="<i4")
    n = len(pos)
    out = bytearray(struct.pack("<Iii", 0x67676C61, 0, 1) + struct.pack("<I", n))
    for p in pos:
        out += struct.pack("<iIi", int(p), 1, 0)
    out += struct.pack("<II", v_trans, N_LAYER)
    for layer in range(N_LAYER):
        out += struct.pack("<iQ", 1, K_ROW)
        out += bytes(((pos[:, None] * 7 + layer + np.arange(K_ROW)) % 251).astype(np.uint8).tobytes())
    for layer in range(N_LAYER):
        if v_trans:
            out += struct.pack("<iII", 1, EL, N_EMBD_V)
            data = (np.arange(N_EMBD_V)[:, None, None] * 3 + pos[None, :, None] * 5 + layer + np.arange(EL)) % 253
        else:
            out += struct.pack("<iQ", 1, N_EMBD_V * EL)
            data = (pos[:, None] * 5 + layer + np.arange(N_EMBD_V * EL)) % 253
        out += data.astype(np.uint8).tobytes()
    return out


@pytest.mark.parametrize("v_trans", [0, 1])
def test_a_state_splits_by_position_and_joins_back_byte_for_byte(v_trans):
    whole = state(range(300), v_trans)
    parsed = state_format.parse(whole)
    assert parsed is not None and parsed.n_cells == 300 and bytes(state_format.to_bytes(parsed)) == bytes(whole)
    pos = parsed.positions()
    head, tail = state_format.select(parsed, pos < 256), state_format.select(parsed, pos >= 256)
    assert bytes(state_format.to_bytes(tail)) == bytes(state(range(256, 300), v_trans))  # a state of its own
    joined = state_format.join([state_format.parse(state_format.to_bytes(head)),
                                state_format.parse(state_format.to_bytes(tail))])
    assert bytes(state_format.to_bytes(joined)) == bytes(whole)
    assert bytes(state_format.joined_bytes([state_format.parse(state_format.to_bytes(head)),
                                            state_format.parse(state_format.to_bytes(tail))])) == bytes(whole)


def test_other_shapes_do_not_parse():
    whole = state(range(40))
    assert state_format.parse(whole + state(range(40))) is None  # two caches (sliding window): not this layout
    assert state_format.parse(whole[:-1]) is None  # short
    two_streams = bytearray(whole)
    two_streams[8:12] = struct.pack("<I", 2)
    assert state_format.parse(two_streams) is None
    with pytest.raises(ValueError):
        state_format.join([state_format.parse(state(range(4), 0)), state_format.parse(state(range(4, 8), 1))])


def snap(n, cid=5, **kw) -> Snapshot:
    return Snapshot(IDENT, cid, list(range(1000, 1000 + n)), state(range(n), **kw))


def test_a_state_that_extends_the_file_appends_only_its_new_cells(tmp_path):
    cold = ColdTier(tmp_path, budget_bytes=10**9)
    path = cold.write(snap(300), FACTS)
    size = path.stat().st_size
    assert cold.write(snap(320), FACTS) == path
    assert cold.stats.written == 1 and cold.stats.appended == 1
    assert path.stat().st_size - size < len(state(range(20))) + 20 * 4 + 64  # the 20 new cells, not the chat
    loaded = cold.load(5, IDENT, FACTS)
    assert loaded.tokens == list(range(1000, 1320)) and bytes(loaded.data) == bytes(state(range(320)))
    assert cold.peek(5, IDENT, FACTS, list(range(1000, 1400))) == 320
    assert cold.token_count(path, path.stat().st_mtime) == 320


def test_a_torn_append_loses_that_append_only_and_the_next_one_repairs_it(tmp_path):
    cold = ColdTier(tmp_path, budget_bytes=10**9)
    path = cold.write(snap(300), FACTS)
    whole = path.stat().st_size
    cold.write(snap(330), FACTS)
    with open(path, "r+b") as f:  # killed halfway through writing the segment
        f.truncate(whole + (path.stat().st_size - whole) // 2)
    loaded = cold.load(5, IDENT, FACTS)
    assert loaded.tokens == list(range(1000, 1300)) and bytes(loaded.data) == bytes(state(range(300)))
    assert not cold.stats.rejected
    assert cold.write(snap(340), FACTS) == path and cold.stats.appended == 2  # over the torn tail
    loaded = cold.load(5, IDENT, FACTS)
    assert loaded.tokens == list(range(1000, 1340)) and bytes(loaded.data) == bytes(state(range(340)))


def test_a_damaged_first_segment_is_rejected_and_a_damaged_later_one_shortens_the_file(tmp_path):
    cold = ColdTier(tmp_path, budget_bytes=10**9)
    path = cold.write(snap(300), FACTS)
    whole = path.stat().st_size
    cold.write(snap(310), FACTS)
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF  # in the second segment's state
    path.write_bytes(bytes(raw))
    assert cold.load(5, IDENT, FACTS).tokens == list(range(1000, 1300))
    raw[whole - 5] ^= 0xFF  # the first one too
    path.write_bytes(bytes(raw))
    assert cold.load(5, IDENT, FACTS) is None and not path.exists()
    assert sum(cold.stats.rejected.values()) == 1


def test_a_state_that_does_not_extend_the_file_or_does_not_parse_is_written_whole(tmp_path):
    cold = ColdTier(tmp_path, budget_bytes=10**9)
    cold.write(snap(300), FACTS)
    edited = snap(310)
    edited.tokens[10] = 7  # an edit early in the chat: the file's tokens are no prefix
    cold.write(edited, FACTS)
    opaque = Snapshot(IDENT, 5, edited.tokens + [1, 2], bytearray(b"\x01" * 5000))  # not llama.cpp's layout
    cold.write(opaque, FACTS)
    assert cold.stats.written == 3 and cold.stats.appended == 0
    assert bytes(cold.load(5, IDENT, FACTS).data) == b"\x01" * 5000


def test_past_the_segment_limit_the_file_is_rewritten_whole(tmp_path):
    cold = ColdTier(tmp_path, budget_bytes=10**9)
    for i in range(MAX_SEGMENTS + 1):
        cold.write(snap(300 + i), FACTS)
    assert cold.stats.appended == MAX_SEGMENTS - 1 and cold.stats.written == 2
    loaded = cold.load(5, IDENT, FACTS)
    assert loaded.tokens == list(range(1000, 1300 + MAX_SEGMENTS)) and \
        bytes(loaded.data) == bytes(state(range(300 + MAX_SEGMENTS)))


def test_a_complete_but_damaged_last_append_is_replaced_by_the_next(tmp_path):
    cold = ColdTier(tmp_path, budget_bytes=10**9)
    path = cold.write(snap(300), FACTS)
    cold.write(snap(310), FACTS)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF  # the append's length is all there, its bytes are not (a crash, a bad sector)
    path.write_bytes(bytes(raw))
    assert cold.write(snap(320), FACTS) == path and cold.stats.appended == 2
    loaded = cold.load(5, IDENT, FACTS)
    assert loaded.tokens == list(range(1000, 1320)) and bytes(loaded.data) == bytes(state(range(320)))
