"""Read a GGUF file's header, metadata and tensor table without loading weights.

Used to give a clear error for files that are not GGUF or are truncated before llama.cpp
ever sees them, and for memory accounting (engine/models/kv_math.py): per-tensor shapes, ggml types
and byte sizes come from the tensor table, never from the weights themselves.

Why not the `gguf` package's `GGUFReader` (it is a dependency, and this module takes its type table
from it): it returns the same metadata and tensor table (types, shapes, sizes), but it maps the whole
file and builds a numpy view per element of every array, so the vocabulary (150k-260k strings, read
on every plan and load) dominates. Measured with bench/gguf_read.py, best of 3 (this module |
GGUFReader), 2026-12-03: SmolLM2-135M 12 ms | 2.0 s and +0 | +125 MB; Gemma-3-270M 29 ms | 10.2 s
and +0 | +652 MB; a Qwen2.5-7B-shaped file (151 936 tokens, 339 tensors) 36 ms | 7.1 s and +0 |
+459 MB. Here long arrays are skipped (their length kept), and a truncated file gets a sentence
("is truncated: its tensors need at least N bytes") instead of a numpy reshape error.
"""

from __future__ import annotations

import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

GGUF_MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")
_CHUNK = 1 << 20  # bytes read at a time while skipping a string array
# Arrays longer than this (token lists, scores) are skipped, only their length is kept; per-layer
# arrays (head counts, SWA patterns) are far shorter and must survive.
_MAX_KEPT_ARRAY = 1024
# ggml type id -> (elements per block, bytes per block), from the gguf package's table.
_BLOCK = {int(t): sizes for t, sizes in GGML_QUANT_SIZES.items()}


class GGUFError(ValueError):
    """The file is not a usable GGUF model; the message says why in plain words."""


def ggml_type_name(type_id: int) -> str:
    try:
        return GGMLQuantizationType(type_id).name
    except ValueError:
        return f"type{type_id}"


def ggml_nbytes(type_id: int, shape: tuple[int, ...]) -> int | None:
    """Bytes of a tensor (ggml_nbytes for a contiguous tensor), or None for an unknown type."""
    block = _BLOCK.get(type_id)
    if block is None:
        return None
    per_block, block_bytes = block
    rows = 1
    for d in shape[1:]:
        rows *= d
    return (shape[0] // per_block) * block_bytes * rows if shape else 0


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: ne0 (row length) first
    type_id: int  # ggml type
    offset: int  # from the start of the data section
    nbytes: int | None  # None when the ggml type is unknown to us

    @property
    def type_name(self) -> str:
        return ggml_type_name(self.type_id)

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class ArraySpan:
    """Where a metadata array's elements lie in the file (after its type and count)."""

    itype: int  # GGUF value type of the elements (8 = string)
    count: int
    start: int  # file offset of the first element
    end: int  # file offset just past the last one


@dataclass
class GGUFInfo:
    path: Path
    version: int
    n_tensors: int
    metadata: dict[str, Any] = field(default_factory=dict)
    file_size: int = 0
    data_end: int = 0  # bytes the tensor data needs, from tensor offsets and sizes
    tensors: list[TensorInfo] = field(default_factory=list)
    arrays: dict[str, ArraySpan] = field(default_factory=dict)  # metadata key -> where its array lies

    @property
    def arch(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def arch_value(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(f"{self.arch}.{key}", default)

    @property
    def chat_template(self) -> str | None:
        return self.metadata.get("tokenizer.chat_template")


class _Reader:
    def __init__(self, fh: BinaryIO, size: int):
        self.fh, self.size = fh, size
        self.span: ArraySpan | None = None  # where the last array read lies in the file

    def read(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise GGUFError("file ends inside its header (truncated download?)")
        return data

    def scalar(self, vtype: int) -> Any:
        fmt = _SCALARS.get(vtype)
        if fmt is None:
            raise GGUFError(f"unknown metadata value type {vtype}")
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.scalar(10)
        if n > self.size:
            raise GGUFError("corrupt metadata string length")
        return self.read(n).decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            itype, count = self.scalar(4), self.scalar(10)
            if count > self.size:
                raise GGUFError("corrupt metadata array length")
            start = self.fh.tell()
            if count > _MAX_KEPT_ARRAY:
                self._skip_array(itype, count)
                value: Any = _SkippedArray(count)
            else:
                value = [self.value(itype) for _ in range(count)]
            self.span = ArraySpan(itype, count, start, self.fh.tell())
            return value
        return self.scalar(vtype)

    def _skip_array(self, itype: int, count: int) -> None:
        if itype == _STRING:
            self._skip_strings(count)
        elif itype in _SCALARS:
            self.fh.seek(struct.calcsize(_SCALARS[itype]) * count, 1)
        else:
            for _ in range(count):
                self.value(itype)

    def _skip_strings(self, count: int) -> None:
        """Walk `count` length-prefixed strings a chunk at a time: one unpack_from per string, where
        reading each took three calls (bench/gguf_read.py)."""
        fh, unpack_from = self.fh, _U64.unpack_from
        buf, off, end = b"", 0, 0
        for _ in range(count):
            if off + 8 > end:
                buf = self._past(buf, off) + fh.read(_CHUNK)
                off, end = 0, len(buf)
                if end < 8:
                    raise GGUFError("file ends inside its header (truncated download?)")
            off += 8 + unpack_from(buf, off)[0]
        rest = self._past(buf, off)
        if rest:
            fh.seek(-len(rest), 1)  # give back what was read past the array

    def _past(self, buf: bytes, off: int) -> bytes:
        """What of the chunk `buf` lies after `off`; when `off` is beyond it (a string ran past the
        chunk), the file is read on to there and nothing is left."""
        if off <= len(buf):
            return buf[off:]
        if off - len(buf) > self.size:
            raise GGUFError("corrupt metadata string length")
        self.read(off - len(buf))
        return b""


@dataclass(frozen=True)
class _SkippedArray:
    length: int


def read_gguf(path: str | Path) -> GGUFInfo:
    """Parse header, metadata and tensor table; raise GGUFError with a reason if unusable.

    A file read before and unchanged since (same inode, size and modification time, set over two
    seconds before it was read) is not parsed again: a model load asks for its header three times
    (the plan, its longer-context try, the backend), each a Python loop over the whole vocabulary
    that the window's thread takes GIL turns with. The result is shared: treat it as read-only.
    """
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise GGUFError(f"cannot open {path}: {exc.strerror or exc}") from exc
    key = (str(path.absolute()), st.st_ino, st.st_size, st.st_mtime_ns)
    with _READ_LOCK:
        info = _READ.get(key)
        if info is not None:
            _READ.move_to_end(key)
            return info
    info = _read(path, st.st_size)
    if time.time_ns() - st.st_mtime_ns < _SETTLED_NS:
        return info  # written just now: a rewrite within the clock's tick would keep this mtime
    with _READ_LOCK:
        _READ[key] = info
        while len(_READ) > _READ_KEPT:
            _READ.popitem(last=False)
    return info


_READ: OrderedDict[tuple, GGUFInfo] = OrderedDict()  # the last files read, by (path, inode, size, mtime)
_READ_KEPT = 8
_READ_LOCK = threading.Lock()
# A file modified this recently is not kept: file times tick coarsely (a few ms), so a file rewritten
# in place at the same size within a tick looks unchanged (git's "racily clean" entries, the same way).
_SETTLED_NS = 2_000_000_000


def _read(path: Path, size: int) -> GGUFInfo:
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise GGUFError(f"cannot open {path}: {exc.strerror or exc}") from exc
    with fh:
        r = _Reader(fh, size)
        magic = fh.read(4)
        if magic != GGUF_MAGIC:
            raise GGUFError(f"{path.name} is not a GGUF model file (it starts with {magic[:4]!r}, expected b'GGUF')")
        version = r.scalar(4)
        if version not in (2, 3):
            raise GGUFError(f"unsupported GGUF version {version}")
        n_tensors, n_kv = r.scalar(10), r.scalar(10)
        if n_tensors > 1_000_000 or n_kv > 1_000_000:
            raise GGUFError("corrupt GGUF header (absurd tensor/metadata counts)")
        info = GGUFInfo(path, version, n_tensors, file_size=size)
        for _ in range(n_kv):
            key = r.string()
            vtype = r.scalar(4)
            info.metadata[key] = r.value(vtype)
            if vtype == _ARRAY and r.span is not None:
                info.arrays[key] = r.span
        max_end = 0
        for _ in range(n_tensors):
            name = r.string()
            n_dims = r.scalar(4)
            if n_dims > 8:
                raise GGUFError(f"corrupt tensor table ({name!r} has {n_dims} dimensions)")
            shape = struct.unpack(f"<{n_dims}Q", r.read(8 * n_dims))
            type_id, offset = r.scalar(4), r.scalar(10)
            nbytes = ggml_nbytes(type_id, shape)
            info.tensors.append(TensorInfo(name, shape, type_id, offset, nbytes))
            max_end = max(max_end, offset + (nbytes or 0))
        align = int(info.metadata.get("general.alignment", 32))
        data_start = -(-fh.tell() // align) * align
        info.data_end = data_start + max_end
        if info.data_end > size:
            raise GGUFError(
                f"{path.name} is truncated: its tensors need at least {info.data_end} bytes, the file has {size}"
            )
    return info


def array_bytes(info: GGUFInfo, key: str) -> tuple[ArraySpan, bytes]:
    """A metadata array's elements as stored (strings: a u64 length, then the UTF-8 bytes), read
    again from the file. read_gguf skips long arrays; two vocabularies compare byte for byte this
    way (engine/models/draft_pair.py) without building 150k Python strings for each.

    Raises:
        GGUFError: the file has no such array, or changed or went away since it was read.
    """
    span = info.arrays.get(key)
    if span is None:
        raise GGUFError(f"{info.path.name} has no {key}")
    try:
        with info.path.open("rb") as fh:
            if fh.seek(0, 2) != info.file_size:
                raise GGUFError(f"{info.path.name} changed while it was being read")
            fh.seek(span.start)
            data = fh.read(span.end - span.start)
    except OSError as exc:
        raise GGUFError(f"cannot read {info.path}: {exc.strerror or exc}") from exc
    if len(data) != span.end - span.start:
        raise GGUFError(f"{info.path.name} is truncated inside {key}")
    return span, data
