"""The named mma fragment layouts against the PTX ISA's fragment tables (fragment_element), lane by lane and
register by register, through the reference model of ldmatrix/stmatrix; and each is one x4 transfer."""
import numpy as np
import pytest

from mlir_tile.tiling import fragments
from mlir_tile.algebra.layout import Sw
from mlir_tile.models.reference import emulate

ROWS, PITCH = 16, 40  # a 16-row tile, rows 40 words (160 bytes) apart


def tile_words(data16: np.ndarray) -> np.ndarray:
    """A tile of 16-bit elements (rows x columns) as row-pitched 32-bit words."""
    words = np.zeros(ROWS * PITCH, np.uint32)
    for row in range(data16.shape[0]):
        packed = data16[row].astype(np.uint32)
        words[row * PITCH : row * PITCH + packed.size // 2] = packed[0::2] | (packed[1::2] << 16)
    return words


@pytest.mark.parametrize("operand, layouts, opcode", [
    ("a16", fragments.mma_m16n8k16_a(PITCH), "ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
    ("b16", fragments.mma_m16n8k16_b_trans(PITCH), "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
])
def test_16_bit_fragments_load_what_the_isa_assigns(operand, layouts, opcode):
    data = np.random.default_rng(1).integers(0, 2**16, (16, 16), dtype=np.uint32)
    registers, shared = layouts
    loaded = emulate(opcode, registers, shared, np.zeros((32, 4), np.uint32), tile_words(data))
    for lane in range(32):
        for register in range(4):
            for half in range(2):
                row, column = fragments.fragment_element(operand, lane, register, half)
                assert (int(loaded[lane, register]) >> (16 * half)) & 0xFFFF == data[row, column], (lane, register)


@pytest.mark.parametrize("operand, layouts", [("a8", fragments.mma_m16n8k32_a(PITCH)),
                                              ("b8", fragments.mma_m16n8k32_b(PITCH))])
def test_8_bit_fragments_load_what_the_isa_assigns(operand, layouts):
    data = np.random.default_rng(2).integers(0, 256, (16, 32), dtype=np.uint32)
    as16 = data[:, 0::2] | (data[:, 1::2] << 8)
    registers, shared = layouts
    loaded = emulate("ldmatrix.sync.aligned.m8n8.x4.shared.b16", registers, shared, np.zeros((32, 4), np.uint32),
                     tile_words(as16))
    for lane in range(32):
        for register in range(4):
            for byte in range(4):
                row, column = fragments.fragment_element(operand, lane, register, byte)
                assert (int(loaded[lane, register]) >> (8 * byte)) & 0xFF == data[row, column], (lane, register)


def test_the_c_fragment_stores_where_the_isa_says():
    data = np.random.default_rng(3).integers(0, 2**16, (16, 16), dtype=np.uint32)
    registers_layout, shared = fragments.mma_m16n8k16_c(PITCH)
    packed = np.zeros((32, 4), np.uint32)
    for lane in range(32):
        for register in range(4):
            halves = [data[fragments.fragment_element("c16", lane, register, h)] for h in range(2)]
            packed[lane, register] = halves[0] | (halves[1] << 16)
    stored = emulate("stmatrix.sync.aligned.m8n8.x4.shared.b16", shared, registers_layout,
                     np.zeros(ROWS * PITCH, np.uint32), packed)
    np.testing.assert_array_equal(stored, tile_words(data))


def test_a_swizzled_tile_is_one_x4_too():
    registers, shared = fragments.mma_m16n8k16_a(32, Sw(3, 2, 3))
    assert str(shared) == "Sw<3,2,3> o ((2,2),8,4):((256,4),32,1)" and registers.sizes == shared.sizes == (4, 8, 4)


def test_the_mma_examples_transfers_on_the_reference_model():
    """examples/mma_tile.py's three warpgroup transfers over its swizzled tiles, without a GPU: each fragment
    register of A, B and C holds what the PTX ISA assigns (the GPU run checks C against numpy)."""
    import mma_tile

    mma_tile.emulate_transfers()


def test_the_s8_mma_examples_transfers_on_the_reference_model():
    """examples/mma_s8.py's two warpgroup transfers: each byte of each A and B fragment register is where the
    PTX ISA's m16n8k32 tables put it."""
    import mma_s8

    mma_s8.emulate_transfers()


def test_two_n8_blocks_of_accumulators_are_a_k16_block_of_a_in_registers():
    """Attention's P stays in registers: the packed C of n-blocks 2j, 2j+1 is the A fragment of k-block j."""
    from mlir_tile.tiling.fragments import c_as_a_operand

    assert c_as_a_operand() == [(0, 0, 1), (0, 2, 3), (1, 0, 1), (1, 2, 3)]
