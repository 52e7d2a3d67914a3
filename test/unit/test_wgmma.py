"""wgmma descriptors (wgmma.py) against the reference model's operand fetch (reference.wgmma_operand, written
from the ISA's text): for random operand tiles of each major, swizzle mode and element size, at every K step
and row block, the descriptor `descriptor_for` derives reads through the model exactly the matrix the tile's
layout holds; layouts no descriptor reads are refused naming the element; the accumulator's thread-value
layout is the ISA's fragment."""
import random

import numpy as np
import pytest

from mlir_tile.isa.atoms import wgmma
from mlir_tile.algebra.layout import Layout, Swizzle
from mlir_tile.models.reference import wgmma_accumulator_position, wgmma_operand
from mlir_tile.testing.wgmma_operands import random_tile
from mlir_tile.isa.tma import ALIGNMENT, Box
from mlir_tile.isa.wgmma import Descriptor, WgmmaMismatch, descriptor_for

DTYPES = {8: np.uint8, 16: np.uint16}


def _placed(layout: Layout, values: np.ndarray, start: int, window: int) -> np.ndarray:
    """The shared window with the tile's element (i, j) where its layout puts it, from byte `start`."""
    shared = np.zeros(window, np.uint8)
    elements = shared[start:].view(values.dtype)
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            elements[layout.offset(i, j)] = values[i, j]
    return shared


@pytest.mark.parametrize("seed", range(24))
def test_the_derived_descriptor_reads_what_the_layout_holds_through_the_reference_model(seed):
    rng = random.Random(seed)
    bits = rng.choice([16, 16, 8])
    major, width = ("K" if bits == 8 else rng.choice(["K", "MN"])), rng.choice([0, 32, 64, 128])
    k_step = 256 // bits
    span = ((width or 16) * 8 // bits) if major == "K" else k_step
    depth = max(k_step, span) * rng.choice([1, 2])
    rows = 64 * rng.choice([1, 2]) if major == "K" else max(64, (width or 16) * 8 // bits) * rng.choice([1, 2])
    layout = random_tile(rng, major, width, bits, rows, depth)
    start = ALIGNMENT[width] * rng.randrange(1, 4)  # the tile's first byte, on its swizzle's repeat
    values = np.arange(1, rows * depth + 1, dtype=np.uint32).astype(DTYPES[bits]).reshape(rows, depth)
    if bits == 8:
        values = np.random.default_rng(seed).integers(1, 255, (rows, depth)).astype(np.uint8)
    shared = _placed(layout, values, start, start + layout.cosize * bits // 8 + 1024)
    for block in range(rows // 64):
        for step in range(depth // k_step):
            descriptor, offset = descriptor_for(layout, bits, 64, k_step, (64 * block, k_step * step))
            assert descriptor.major == major and descriptor.swizzle_bytes == width
            read = wgmma_operand(shared, descriptor.bits(start + offset), major == "K", bits, 64)
            assert np.array_equal(read, values[64 * block:64 * block + 64, k_step * step:k_step * step + k_step]), \
                (str(layout), block, step)


def test_cutes_k_major_128_byte_atom_is_lbo_1_sbo_64_mode_1():
    descriptor, start = descriptor_for(Box(64, 64, 16, 128).layout, 16, 64, 16, (0, 16))
    assert (descriptor, start) == (Descriptor("K", 128, 16, 1024), 32)  # the second K step: 32 bytes in
    assert descriptor.bits(1024 + start) == (1024 + 32) // 16 | 1 << 16 | 64 << 32 | 1 << 62
    assert str(descriptor.layout(64, 16, 16)) == "Sw<3,3,3> o ((8,8),16):((64,512),1)"


def test_an_mn_major_tile_of_two_boxes_reads_with_the_boxes_as_lbo():
    box = Box(64, 64, 16, 128)  # (k, n) boxes, 64 n wide: B as (n, k), the second 64 n a box further
    tile = Layout(((64, 2), 64), ((1, 4096), 64), box.layout.swizzle)
    assert descriptor_for(tile, 16, 128, 16, (0, 16)) == (Descriptor("MN", 128, 8192, 1024), 2048)


@pytest.mark.parametrize("layout, element_bits, wanted", [
    (Layout((64, 64), (64, 1)), 16, "reads operand element (1, 0) at byte 16 of the tile, the layout puts it at 128"),
    (Layout((64, 16), (16, 1), Swizzle(3, 3, 3)), 16, "element (1, 0) at byte 128 of the tile, the layout puts it at 32"),
    (Layout((64, 64), (64, 1), Swizzle(3, 4, 3)), 16, "the tile's swizzle Sw<3,4,3> is none of wgmma's modes"),
    (Layout((64, 16), (2, 128)), 16, "neither element (0, 1) nor (1, 0)"),
    (Layout((64, 24), (24, 1)), 16, "starts at byte 8 of its tile"),
])
def test_a_layout_no_descriptor_reads_is_refused_naming_the_element(layout, element_bits, wanted):
    origin = (0, 4) if "byte 8" in wanted else (0, 0)
    with pytest.raises(WgmmaMismatch) as caught:
        descriptor_for(layout, element_bits, 64, 16, origin)
    assert wanted in str(caught.value)


def test_an_operand_is_a_multiple_of_8_rows_by_32_bytes_inside_its_tile():
    with pytest.raises(WgmmaMismatch, match="multiple of 8 rows by 32 bytes"):
        descriptor_for(Box(64, 64, 16, 128).layout, 16, 64, 16, (0, 56))
    with pytest.raises(WgmmaMismatch, match="multiple of 8 rows by 32 bytes"):
        descriptor_for(Box(64, 64, 16, 128).layout, 16, 60, 16)
    with pytest.raises(WgmmaMismatch, match="elements of 8, 16 or 32 bits"):
        descriptor_for(Box(64, 64, 16, 128).layout, 64, 64, 16)


@pytest.mark.parametrize("fields, wanted", [
    (("KN", 0, 16, 16), "major is one of"), (("K", 16, 16, 16), "swizzle of"),
    (("K", 0, 8, 16), "leading byte offset is a multiple of 16"), (("K", 0, 16, 1 << 18), "stride byte offset"),
])
def test_descriptor_fields_outside_the_format_are_refused(fields, wanted):
    with pytest.raises(ValueError, match=wanted):
        Descriptor(*fields)
    with pytest.raises(ValueError, match="start address"):
        Descriptor("K", 0, 16, 16).bits(8)


@pytest.mark.parametrize("n", [8, 72, 256])
def test_the_accumulators_thread_value_layout_is_the_isas_fragment(n):
    atom = wgmma(n, "f16")
    assert all(atom.c.coordinate(t, v) == wgmma_accumulator_position(t, v) for t in range(128) for v in range(n // 2))
    assert {atom.c.coordinate(t, v) for t in range(128) for v in range(n // 2)} == \
        {(r, c) for r in range(64) for c in range(n)}


@pytest.mark.parametrize("n, element, wanted", [(0, "f16", "N a multiple of 8"), (264, "f16", "N a multiple of 8"),
                                                (12, "bf16", "N a multiple of 8"), (64, "tf32", "element one of")])
def test_wgmma_atoms_outside_the_isa_are_refused(n, element, wanted):
    with pytest.raises(ValueError, match=wanted):
        wgmma(n, element)


def test_fp8_atoms_read_32_elements_of_k_and_16_bit_atoms_16():
    assert wgmma(128, "e4m3").shape == (64, 128, 32) and not wgmma(128, "e5m2").transposable
    assert wgmma(128, "bf16").shape == (64, 128, 16) and wgmma(128, "bf16").transposable


def test_an_f16_accumulator_is_the_next_products_register_a_in_its_own_thread():
    from mlir_tile.isa.atoms import accumulators_as_a

    slots = accumulators_as_a(wgmma(64, "f16"), wgmma(128, "bf16"))
    # K step s: a0 (row l/4, columns 2(l%4)..) is n8 block 2s's c0 c1, a1 its c2 c3, a2 and a3 block 2s + 1's
    assert slots == tuple((8 * s + 2 * r, 8 * s + 2 * r + 1) for s in range(4) for r in range(4))


def test_16_bit_a_keeps_the_accumulators_order_and_8_bit_a_takes_fa3s():
    """An 8-bit A register holds 4 adjacent columns where an accumulator thread holds 2 and 2 eight further on:
    in the order that keeps every value in its thread, per 32 columns j = e + 2q + 8h + 16g -> e + 2h + 4q + 16g
    (FlashAttention-3's fp8 P), in which A's slots are a thread's c0 c1 c4 c5 (row r), c2 c3 c6 c7 (row r + 8)."""
    from mlir_tile.isa.atoms import a_key_order, accumulators_as_a

    assert a_key_order(wgmma(64, "f16"), wgmma(128, "bf16")) is None
    order = a_key_order(wgmma(128, "e4m3"), wgmma(64, "e4m3"))
    assert [order.offset(j) for j in range(32)] == [e + 2 * h + 4 * q + 16 * g for g in range(2) for h in range(2)
                                                    for q in range(4) for e in range(2)]
    assert all(order.offset(j) == order.offset(j % 32) + j // 32 * 32 for j in range(128))
    slots = accumulators_as_a(wgmma(128, "e4m3"), wgmma(64, "e4m3"), order)
    assert slots[:4] == ((0, 1, 4, 5), (2, 3, 6, 7), (8, 9, 12, 13), (10, 11, 14, 15)) and len(slots) == 16


def test_an_8_bit_a_register_would_need_a_shuffle():
    """... in the accumulators' own order."""
    from mlir_tile.isa.atoms import accumulators_as_a

    with pytest.raises(ValueError, match=r"A's element \(0, 4\) of thread 1 is accumulator slot 0 of thread 2: e4m3 "
                                         r"needs a shuffle"):
        accumulators_as_a(wgmma(64, "f16"), wgmma(64, "e4m3"))
