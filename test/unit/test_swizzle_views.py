"""A swizzle applies to the offset from the buffer, so a view of a swizzled tile reads what the same
coordinates of the whole tile read (CuTe's slices, TMA's swizzle modes): on the reference model, an x4 (and
its .trans) through a view at a random block of a random swizzled tile loads, lane by lane, what the ISA
model loads from the whole tile's addresses of those coordinates; a stmatrix through the view writes them.
And what the contract rejects about views: dynamic offsets and memref.view shifts that are not multiples of
the swizzle's period."""
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlir_tile import contract
from mlir_tile.algebra.layout import Layout, Swizzle
from mlir_tile.models.reference import emulate, ldmatrix_warp

REGISTERS = "((2,2),8,4):((1,2),4@laneid,1@laneid)"
TILES = [(64, 32, Swizzle(3, 2, 3)), (32, 64, Swizzle(3, 2, 3)), (64, 16, Swizzle(2, 2, 3)), (32, 8, Swizzle(1, 2, 3)),
         (128, 32, Swizzle(3, 2, 4)), (16, 32, Swizzle(2, 3, 3))]


def case(seed: int):
    rng = random.Random(seed)
    rows, pitch, swizzle = rng.choice(TILES)
    tile = Layout((rows, pitch), (pitch, 1), swizzle)
    row0, word0 = rng.randrange(rows - 15), 4 * rng.randrange((pitch - 8) // 4 + 1)
    trans = rng.random() < 0.5
    block = Layout(((2, 2), 8, 4), ((8 * pitch, 4), pitch, 1), swizzle)  # a 16x8-word block of the view
    return tile, block, row0, word0, trans, rng


# Six tiles, .trans or not, a random block of each: 150 derandomized cases reach every tile and setting many times.
@settings(max_examples=150, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_view_reads_the_whole_tiles_words_at_its_coordinates(seed):
    tile, block, row0, word0, trans, rng = case(seed)
    words = np.array([rng.getrandbits(32) for _ in range(tile.cosize)], dtype=np.uint32)
    opcode = f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16"
    offset = row0 * tile.stride[0] + word0
    loaded = emulate(opcode, REGISTERS, block, np.zeros((32, 4), dtype=np.uint32), words, shared_offset=offset)
    addresses = [tile.offset(row0 + 8 * (lane // 8 & 1) + lane % 8, word0 + 4 * (lane // 16)) for lane in range(32)]
    expected = ldmatrix_warp(4, trans, addresses, words)
    assert [list(map(int, row)) for row in loaded] == [list(map(int, row)) for row in expected]


@settings(max_examples=50, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_store_through_a_view_writes_the_whole_tiles_words(seed):
    tile, block, row0, word0, _, rng = case(seed)
    registers = np.array([[rng.getrandbits(32) for _ in range(4)] for _ in range(32)], dtype=np.uint32)
    offset = row0 * tile.stride[0] + word0
    stored = emulate("stmatrix.sync.aligned.m8n8.x4.shared.b16", block, REGISTERS,
                     np.zeros(tile.cosize, dtype=np.uint32), registers, shared_offset=offset)
    for matrix in range(4):
        for lane in range(32):
            row, word = divmod(lane, 4)
            address = tile.offset(row0 + 8 * (matrix & 1) + row, word0 + 4 * (matrix >> 1) + word)
            assert stored[address] == registers[lane][matrix]


def verdict(offset=0, offset_multiple=None, base_shift=None):
    shared = contract.Operand("shared", extent=4096, offset=offset, offset_multiple=offset_multiple,
                              base_alignment=1024, base_shift=base_shift)
    registers = contract.Operand("private", extent=4)
    return contract.verdict(contract.Query("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "warp", REGISTERS,
                                           "Sw<3,2,3> o ((2,2),8,4):((256,4),32,1)", registers, shared))


@pytest.mark.parametrize("multiple, legal", [(256, True), (512, True), (128, False), (4, False), (None, False)])
def test_a_dynamic_view_offset_passes_through_the_swizzle_only_as_a_multiple_of_its_period(multiple, legal):
    transfer, violations = verdict(offset=None, offset_multiple=multiple)
    assert (transfer is not None) == legal
    if not legal:
        assert {v.rule for v in violations} == {"row-alignment"}
        assert any("period (256 words)" in str(v) for v in violations)


@pytest.mark.parametrize("shift, legal", [(None, True), (1024, True), (4096, True), (512, False), (1, False)])
def test_a_memref_view_may_move_a_swizzled_buffers_base_only_by_whole_periods(shift, legal):
    transfer, violations = verdict(base_shift=shift)
    assert (transfer is not None) == legal
    if not legal:
        assert "memref.view moved the buffer's base" in str(violations[0]) and "1024 bytes" in str(violations[0])
