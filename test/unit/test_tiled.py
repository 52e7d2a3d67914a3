"""Tiled fragments of m16n8k16 over a CTA: every operand's transfer is legal, covers its tile (A and B once for
each warp that reads them, C once), per k16 block too; and on the ISA's reference model each lane's register
slots hold the elements the PTX ISA's fragment tables put there, for the warp's blocks (A, B as K x N with
.trans and as N x K, C through stmatrix)."""
import itertools

import numpy as np
import pytest

from mlir_tile.tiling.fragments import fragment_element
from mlir_tile.algebra.layout import Layout, Swizzle
from mlir_tile.models.reference import emulate
from mlir_tile.tiling.synthesize import Tile, synthesize
from mlir_tile.tiling.tiled import tiled_mma_m16n8k16

CONFIGS = [((2, 2), (128, 128, 32), "kn"), ((2, 2), (128, 128, 32), "nk"), ((1, 4), (64, 128, 64), "kn"),
           ((4, 1), (128, 32, 16), "nk"), ((2, 2), (128, 128, 64), "kn", "k-block-major A")]


def tiles(config):
    (wm, wn), (bm, bn, bk), major, *k_block_major = config
    def tile(rows, words):
        swizzle = Swizzle(3, 2, 3) if words % 32 == 0 else Swizzle(2, 2, 3) if words % 16 == 0 else Swizzle(1, 2, 3)
        return Layout((rows, words), (words, 1), swizzle)
    a = tile(bm, bk // 2)
    if k_block_major:  # A's k16 blocks one after another, each contiguous: synthesize's k-block-major choice
        a = synthesize(Tile(bm, bk), writer=False, k_block_major=True).layout(Tile(bm, bk))
    b = tile(bk, bn // 2) if major == "kn" else tile(bn, bk // 2)
    return tiled_mma_m16n8k16((wm, wn), (bm, bn, bk), a, b, tile(bm, bn // 2), major)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_every_operand_covers_its_tile_whole_and_per_k16_block(config):
    tiled = tiles(config)
    for operand in (tiled.a, tiled.b, tiled.c):
        proof = operand.coverage()
        assert len(proof.movers) == operand.tile.size
        blocks = [operand.k_block(k) for k in range(operand.k_blocks)]
        assert operand.coverage(blocks).movers.keys() == proof.movers.keys()


def halves(words: np.ndarray, offset: int) -> tuple[int, int]:
    word = int(words[offset])
    return word & 0xFFFF, word >> 16


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_each_lane_holds_the_fragment_the_isa_tables_say(config):
    tiled = tiles(config)
    (wm, wn), _, major, *_ = config
    rng = np.random.default_rng(7)
    threads = 32 * wm * wn
    for operand in (tiled.a, tiled.b):
        words = rng.integers(0, 2**32, operand.tile.cosize, dtype=np.uint32)
        t = operand.whole
        registers = emulate(t.opcode, t.registers, t.shared, np.zeros((threads, t.slots), np.uint32), words, "cta")
        for warp, lane in itertools.product(range(wm * wn), range(32)):
            wn_, wm_ = warp % wn, warp // wn
            thread = 32 * warp + lane
            for k in range(operand.k_blocks):
                if operand.name == "a":
                    for m, register in itertools.product(range(tiled.m_blocks), range(4)):
                        row, col = fragment_element("a16", lane, register, 0)
                        row += 16 * (wm_ * tiled.m_blocks + m)
                        col += 16 * k
                        slot = tiled.a_slots(m, k)[register]
                        assert registers[thread, slot] == words[operand.tile.offset(row, col // 2)]
                else:
                    for n, register in itertools.product(range(tiled.n_blocks), range(2)):
                        kk, nn = fragment_element("b16", lane, register, 0)  # part 0; part 1 is k + 1
                        kk, nn = kk + 16 * k, nn % 8 + 8 * (wn_ * tiled.n_blocks + n)
                        slot = tiled.b_slots(n, k)[register]
                        if major == "kn":  # K x N: the two halves of a register are rows k and k + 1 of column n
                            low = halves(words, operand.tile.offset(kk, nn // 2))[nn % 2]
                            high = halves(words, operand.tile.offset(kk + 1, nn // 2))[nn % 2]
                            assert int(registers[thread, slot]) == low | high << 16
                        else:  # N x K: one word of row n holds k and k + 1
                            assert registers[thread, slot] == words[operand.tile.offset(nn, kk // 2)]


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_stmatrix_writes_each_packed_c_pair_where_the_fragment_table_puts_it(config):
    tiled = tiles(config)
    (wm, wn), *_ = config
    t = tiled.c.whole
    threads = 32 * wm * wn
    registers = np.random.default_rng(3).integers(0, 2**32, (threads, t.slots), dtype=np.uint32)
    shared = emulate(t.opcode, t.shared, t.registers, np.zeros(tiled.c.tile.cosize, np.uint32), registers, "cta")
    for warp, lane in itertools.product(range(wm * wn), range(32)):
        wn_, wm_ = warp % wn, warp // wn
        for m, n, pair in itertools.product(range(tiled.m_blocks), range(tiled.n_blocks), range(2)):
            # packed C pair `pair` of n8 block n: (c0,c1) is row g, (c2,c3) row g + 8 ("c16" registers 0 and 1)
            row, col = fragment_element("c16", lane, pair, 0)
            row += 16 * (wm_ * tiled.m_blocks + m)
            col = col % 8 + 8 * (wn_ * tiled.n_blocks + n)
            assert shared[tiled.c.tile.offset(row, col // 2)] == registers[32 * warp + lane, tiled.c_slots(m, n)[pair]]


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_each_warps_own_transfer_does_its_part_of_the_ctas(config):
    """one_warp: warp w's scope "warp" transfer, on a view starting where its part does, loads the registers
    the CTA-wide transfer gives warp w (A and B, whole and per k16 block), and the warps' stores one after
    another write what the CTA's stmatrix writes; the emulator checks each against the contract."""
    tiled = tiles(config)
    (wm, wn), *_ = config
    threads, rng = 32 * wm * wn, np.random.default_rng(11)
    for operand in (tiled.a, tiled.b):
        words = rng.integers(0, 2**32, operand.tile.cosize, dtype=np.uint32)
        for t in [operand.whole] + [operand.k_block(k) for k in range(operand.k_blocks)]:
            everyone = emulate(t.opcode, t.registers, t.shared, np.zeros((threads, t.slots), np.uint32), words, "cta",
                               t.shared_offset)
            own, starts = t.one_warp()
            for warp in range(wm * wn):
                mine = emulate(own.opcode, own.registers, own.shared, np.zeros((32, own.slots), np.uint32), words,
                               "warp", own.shared_offset + starts.offset(warp))
                assert (mine == everyone[32 * warp:32 * warp + 32]).all(), (operand.name, warp)
    t = tiled.c.whole
    registers = rng.integers(0, 2**32, (threads, t.slots), dtype=np.uint32)
    everyone = emulate(t.opcode, t.shared, t.registers, np.zeros(tiled.c.tile.cosize, np.uint32), registers, "cta")
    own, starts = t.one_warp()
    words = np.zeros(tiled.c.tile.cosize, np.uint32)
    for warp in range(wm * wn):
        words = emulate(own.opcode, own.shared, own.registers, words, registers[32 * warp:32 * warp + 32], "warp",
                        starts.offset(warp))
    assert (words == everyone).all()


@pytest.mark.parametrize("warps, tile", [((2, 2), (128, 128, 64)), ((1, 4), (64, 128, 128)), ((4, 1), (128, 32, 32))],
                         ids=str)
def test_s8_fragments_hold_the_bytes_the_isa_tables_say(warps, tile):
    """m16n8k32 (s8): A and B (N x K) transfers cover their tiles, and every byte of every lane's registers is the
    one the PTX ISA's m16n8k32 fragment tables put there."""
    from mlir_tile.tiling.tiled import tiled_mma_m16n8k32

    (wm, wn), (bm, bn, bk) = warps, tile
    def words(rows, count):
        swizzle = Swizzle(3, 2, 3) if count % 32 == 0 else Swizzle(2, 2, 3) if count % 16 == 0 else Swizzle(1, 2, 3)
        return Layout((rows, count), (count, 1), swizzle)
    tiled = tiled_mma_m16n8k32(warps, tile, words(bm, bk // 4), words(bn, bk // 4))
    assert tiled.c is None and tiled.a.k_blocks == bk // 32
    rng = np.random.default_rng(11)
    threads = 32 * wm * wn
    for operand in (tiled.a, tiled.b):
        assert len(operand.coverage().movers) == operand.tile.size
        memory = rng.integers(0, 2**32, operand.tile.cosize, dtype=np.uint32)
        t = operand.whole
        registers = emulate(t.opcode, t.registers, t.shared, np.zeros((threads, t.slots), np.uint32), memory, "cta")
        def byte(row, column):
            return int(memory[operand.tile.offset(row, column // 4)]) >> (8 * (column % 4)) & 0xFF
        for warp, lane in itertools.product(range(wm * wn), range(32)):
            wn_, wm_ = warp % wn, warp // wn
            for k, part in itertools.product(range(operand.k_blocks), range(4)):
                if operand.name == "a":
                    for m, register in itertools.product(range(tiled.m_blocks), range(4)):
                        row, column = fragment_element("a8", lane, register, part)
                        value = int(registers[32 * warp + lane, tiled.a_slots(m, k)[register]]) >> (8 * part) & 0xFF
                        assert value == byte(row + 16 * (wm_ * tiled.m_blocks + m), column + 32 * k)
                else:
                    for n, register in itertools.product(range(tiled.n_blocks), range(2)):
                        row, column = fragment_element("b8", lane, register, part)  # n-block 0's b0, b1
                        value = int(registers[32 * warp + lane, tiled.b_slots(n, k)[register]]) >> (8 * part) & 0xFF
                        assert value == byte(row + 8 * (wn_ * tiled.n_blocks + n), column + 32 * k)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_accumulator_coordinates_are_the_isa_c32_fragment_in_the_warp_grid(config):
    """Every thread's f32 accumulator slot lies, by `accumulator_coordinates`, where the ISA's c32 table puts
    accumulator c_i of the warp's (m16, n8) block (`accumulator_block`), in the warp's part of the tile (warp
    w = n + WN * m covers rows m * BM/WM and columns n * BN/WN onwards); and the slots of all threads cover the
    BM x BN tile once."""
    tiled = tiles(config)
    (wm, wn), (bm, bn, _) = tiled.warps, tiled.tile
    rows, columns = tiled.accumulator_coordinates()
    seen = np.zeros((bm, bn), int)
    for thread in range(32 * wm * wn):
        warp, lane = divmod(thread, 32)
        for mi, ni in itertools.product(range(tiled.m_blocks), range(tiled.n_blocks)):
            for i, slot in enumerate(tiled.accumulator_block(mi, ni)):
                row, column = fragment_element("c32", lane, i, 0)
                expected = (warp // wn * bm // wm + 16 * mi + row, warp % wn * bn // wn + 8 * ni + column)
                assert (rows(thread, slot).offset, columns(thread, slot).offset) == expected, (thread, slot)
                seen[expected] += 1
    assert (seen == 1).all()
    assert rows.sizes == (32 * wm * wn, tiled.accumulator_slots)
