"""engine/config/buffers.py: an unfilled buffer is a plain bytearray of the asked size that a
writer fills, cuts and hands to ctypes like any other."""

import ctypes

import pytest

from engine.config.buffers import unfilled


def test_an_unfilled_buffer_is_a_bytearray_that_takes_writes_cuts_and_ctypes_views():
    data = unfilled(3 << 20)
    assert type(data) is bytearray and len(data) == 3 << 20
    view = (ctypes.c_uint8 * len(data)).from_buffer(data)  # as llama_seam.save_state writes it
    ctypes.memset(view, 7, 1000)
    del view
    del data[1000:]
    assert bytes(data) == b"\x07" * 1000
    assert unfilled(0) == bytearray()


def test_a_negative_size_is_refused():
    with pytest.raises(ValueError):
        unfilled(-1)
