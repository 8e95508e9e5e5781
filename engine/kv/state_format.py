"""llama.cpp's per-sequence KV state, split by position and joined again: what lets a cold file
grow by the cells a chat added instead of being rewritten whole (engine/kv/cold.py).

The layout, as this wheel's llama.cpp writes it (llama-context.cpp `state_seq_get_data`,
llama-kv-cache.cpp `state_write`, `state_write_meta`, `state_write_data`), little-endian:

    u32 magic, i32 seq_id, u32 n_stream (1), u32 cell_count,
    cell_count × (i32 pos, u32 n_seq_id (1), i32 seq_id),
    u32 v_trans, u32 n_layer,
    per layer: i32 k_type, u64 k_row_bytes, cell_count rows
    V, per layer: i32 v_type, u64 v_row_bytes, cell_count rows          (v_trans 0)
              or: i32 v_type, u32 el_bytes, u32 n_embd_v, n_embd_v × cell_count elements  (v_trans 1)

A state of any other shape does not parse (`parse` answers None) and its file is written whole:
a sliding-window cache (two caches back to back), cells with M-RoPE extensions, several streams
or sequences. tests/test_kv_state_format.py pins the layout on states the demo model writes, so a
wheel that changes it fails there, by name.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from engine.config.buffers import unfilled

_U32, _I32, _U64 = struct.Struct("<I"), struct.Struct("<i"), struct.Struct("<Q")
_CELL = np.dtype([("pos", "<i4"), ("n_seq", "<u4"), ("seq", "<i4")])


class _Short(ValueError):
    pass


@dataclass
class KVState:
    """One sequence's cells: their positions and, per layer, their K and V data (views into the
    blob parsed, or arrays of their own after `select` / `join`)."""

    head: bytes  # magic, seq_id
    cells: np.ndarray  # _CELL records, in the state's cell order
    v_trans: int
    k: list[tuple[bytes, np.ndarray]]  # per layer: (type and row size, (cells, row bytes) uint8)
    v: list[tuple[bytes, np.ndarray]]  # same; transposed: (type, el bytes, n_embd), (n_embd, cells, el)

    @property
    def n_cells(self) -> int:
        return len(self.cells)

    def positions(self) -> np.ndarray:
        return self.cells["pos"]


class _Reader:
    def __init__(self, data):
        self.buf, self.at = memoryview(data), 0

    def take(self, n: int) -> memoryview:
        if self.at + n > len(self.buf):
            raise _Short()
        out = self.buf[self.at:self.at + n]
        self.at += n
        return out

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def i32(self) -> int:
        return _I32.unpack(self.take(4))[0]

    def u64(self) -> int:
        return _U64.unpack(self.take(8))[0]


def parse(data) -> KVState | None:
    """The state in `data` (bytes-like), or None where it is not a single plain KV cache."""
    r = _Reader(data)
    try:
        head = bytes(r.take(8))
        if r.u32() != 1:
            return None
        n = r.u32()
        cells = np.frombuffer(r.take(n * _CELL.itemsize), dtype=_CELL)
        if n and (np.any(cells["n_seq"] != 1) or np.any(cells["seq"] != _I32.unpack(head[4:])[0])):
            return None
        v_trans, n_layer = r.u32(), r.u32()
        if v_trans not in (0, 1) or n_layer == 0 or n_layer > 4096:
            return None
        k = []
        for _ in range(n_layer):
            hdr = bytes(r.take(12))
            row = _U64.unpack(hdr[4:])[0]
            k.append((hdr, np.frombuffer(r.take(n * row), dtype=np.uint8).reshape(n, row)))
        v = []
        for _ in range(n_layer):
            if v_trans:
                hdr = bytes(r.take(12))
                el, n_embd = _U32.unpack(hdr[4:8])[0], _U32.unpack(hdr[8:])[0]
                v.append((hdr, np.frombuffer(r.take(n_embd * n * el), dtype=np.uint8).reshape(n_embd, n, el)))
            else:
                hdr = bytes(r.take(12))
                row = _U64.unpack(hdr[4:])[0]
                v.append((hdr, np.frombuffer(r.take(n * row), dtype=np.uint8).reshape(n, row)))
    except (_Short, struct.error, ValueError):
        return None
    if r.at != len(r.buf):
        return None  # more follows (a sliding-window cache's second part): not this layout
    return KVState(head, cells, v_trans, k, v)


def select(state: KVState, keep: np.ndarray) -> KVState:
    """The cells where `keep` (a bool per cell) holds, in their order."""
    axis_v = 1 if state.v_trans else 0
    return KVState(state.head, state.cells[keep].copy(), state.v_trans,
                   [(h, a[keep]) for h, a in state.k], [(h, np.compress(keep, a, axis=axis_v)) for h, a in state.v])


def _check_joinable(parts: list[KVState]) -> None:
    first = parts[0]
    for p in parts[1:]:
        if (p.v_trans != first.v_trans or [h for h, _ in p.k] != [h for h, _ in first.k]
                or [h for h, _ in p.v] != [h for h, _ in first.v]):
            raise ValueError("KV states of different shapes cannot be joined")


def join(parts: list[KVState]) -> KVState:
    """The cells of `parts` one after the other (same model and cache types: checked)."""
    _check_joinable(parts)
    first = parts[0]
    axis_v = 1 if first.v_trans else 0
    return KVState(first.head, np.concatenate([p.cells for p in parts]), first.v_trans,
                   [(h, np.concatenate([p.k[i][1] for p in parts])) for i, (h, _) in enumerate(first.k)],
                   [(h, np.concatenate([p.v[i][1] for p in parts], axis=axis_v)) for i, (h, _) in enumerate(first.v)])


def joined_bytes(parts: list[KVState]) -> bytearray:
    """`to_bytes(join(parts))` with one copy of the data instead of two: each part's rows are
    copied straight to their place in the output (a cold restore of an 8k chat moves ~200 MB)."""
    _check_joinable(parts)
    first = parts[0]
    n = sum(p.n_cells for p in parts)
    out = unfilled(_size(first, n, parts))  # every byte is written below (checked at the end)
    view, at = memoryview(out), 0

    def put(b) -> None:
        nonlocal at
        b = memoryview(b).cast("B")
        view[at:at + len(b)] = b
        at += len(b)

    put(first.head)
    put(_U32.pack(1))
    put(_U32.pack(n))
    for p in parts:
        put(np.ascontiguousarray(p.cells).tobytes())
    put(_U32.pack(first.v_trans))
    put(_U32.pack(len(first.k)))
    for i, (hdr, _) in enumerate(first.k):
        put(hdr)
        for p in parts:
            put(np.ascontiguousarray(p.k[i][1]))
    for i, (hdr, arr) in enumerate(first.v):
        put(hdr)
        if first.v_trans:  # element-major: for each element, every part's cells in turn
            n_embd, el = arr.shape[0], arr.shape[2]
            dest = np.frombuffer(view[at:at + n_embd * n * el], dtype=np.uint8).reshape(n_embd, n, el)
            col = 0
            for p in parts:
                dest[:, col:col + p.n_cells] = p.v[i][1]
                col += p.n_cells
            at += n_embd * n * el
        else:
            for p in parts:
                put(np.ascontiguousarray(p.v[i][1]))
    if at != len(out):  # not an assert (-O drops those): unwritten bytes would be restored as KV
        raise ValueError(f"joined KV state wrote {at} of its {len(out)} bytes")
    return out


def _size(first: KVState, n: int, parts: list[KVState]) -> int:
    k = sum(12 + sum(p.k[i][1].nbytes for p in parts) for i in range(len(first.k)))
    v = sum(12 + sum(p.v[i][1].nbytes for p in parts) for i in range(len(first.v)))
    return 16 + n * _CELL.itemsize + 8 + k + v


def to_bytes(state: KVState) -> bytearray:
    """The state as llama.cpp reads it back (`llama_state_seq_set_data`), in one buffer."""
    return joined_bytes([state])
