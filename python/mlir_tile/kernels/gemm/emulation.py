"""The mma.sync GEMM's CTA on the reference model (`--emulate`): transfers, fragments and C by the ISA's model."""
from __future__ import annotations

import numpy as np

from mlir_tile.kernels.gemm.reference import check, inputs
from mlir_tile.kernels.gemm.sm80 import tiled_mma
from mlir_tile.kernels.gemm.sm80_tiles import Config, DEFAULT


def emulate(config: Config = DEFAULT, k_tiles: int = 2, element: str = "f16") -> str:
    """A one-CTA GEMM (bm x bn x k_tiles * bk, of `element`) on the reference model: each k-tile's A and B tiles placed
    in shared words by their layouts, every transfer (A, B by ldmatrix, C by stmatrix) run by the ISA model
    with each lane's fragments checked against the PTX ISA's tables, the mma.sync products from those
    fragments, and C read back through the C tile's layout against numpy. AssertionError otherwise."""
    from mlir_tile.isa.halves import decode

    tiled = tiled_mma(config)
    (wm, wn), depth = config.warps, k_tiles * config.bk
    a, b = inputs(config.bm, config.bn, depth, seed=3, element=element)  # bit patterns
    accumulators = np.zeros((wm, wn, 16 * tiled.m_blocks, 8 * tiled.n_blocks), np.float32)
    for k_tile in range(k_tiles):
        columns = slice(k_tile * config.bk, (k_tile + 1) * config.bk)
        for warp, (a_warp, b_warp) in enumerate(_emulated_fragments(config, tiled, a, b, columns)):
            accumulators[warp // wn, warp % wn] += decode(a_warp, element) @ decode(b_warp, element)
    c = _emulated_c(config, tiled, _packed(config, tiled, accumulators, element))
    assert check(c, a, b, element)[0], "C"
    return (f"reference model: a {config.bm} x {config.bn} x {depth} {element} CTA ({config}): every lane's A and B "
            f"fragments hold what the PTX ISA's tables say, and C through stmatrix matches numpy")


def _emulated_fragments(config: Config, tiled, a, b, columns):
    """Per warp, the (A, B) matrices its lanes' fragments of one k-tile hold, by the ISA model's transfers,
    each element checked against the PTX ISA's fragment tables."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.models.reference import b16_half, b16_tile_words
    from mlir_tile.models.reference import emulate as run_transfer

    (wm, wn), threads = config.warps, config.threads
    b_source = b[columns] if config.b_major == "kn" else np.ascontiguousarray(b.T)[:, columns]
    loaded = {}
    for operand, matrix in ((tiled.a, a[:, columns]), (tiled.b, b_source)):
        t = operand.whole
        loaded[operand.name] = run_transfer(t.opcode, t.registers, t.shared, np.zeros((threads, t.slots), np.uint32),
                                            b16_tile_words(operand.tile, matrix), "cta")
    for warp in range(wm * wn):
        wn_, wm_ = warp % wn, warp // wn
        a_warp = np.zeros((16 * tiled.m_blocks, config.bk), np.uint16)
        b_warp = np.zeros((config.bk, 8 * tiled.n_blocks), np.uint16)
        # per operand: its table, registers per block, blocks, slots, where a (block, index, row, column) of the
        # table lies in the warp's matrix, and that matrix's element in the whole one
        operands = (("a", "a16", 4, tiled.m_blocks, tiled.a_slots, a_warp,
                     lambda block, i, r, c: (16 * i + r, 16 * block + c),
                     lambda r, c: a[16 * wm_ * tiled.m_blocks + r, columns][c]),
                    ("b", "b16", 2, tiled.n_blocks, tiled.b_slots, b_warp,
                     lambda block, i, r, c: (16 * block + r, 8 * i + c),
                     lambda r, c: b[columns][r, 8 * wn_ * tiled.n_blocks + c]))
        for lane, block in ((lane, block) for lane in range(32) for block in range(tiled.a.k_blocks)):
            for name, table, registers, count, slots_of, warp_matrix, place, whole in operands:
                for i, register, part in ((i, r, h) for i in range(count) for r in range(registers) for h in range(2)):
                    row, col = place(block, i, *fragment_element(table, lane, register, part))
                    value = b16_half(loaded[name][32 * warp + lane, slots_of(i, block)[register]], part)
                    assert value == whole(row, col), (name.upper(), 32 * warp + lane, block, i, register)
                    warp_matrix[row, col] = value
        yield a_warp, b_warp


def _packed(config: Config, tiled, accumulators, element: str):
    """Each thread's packed C registers (the ISA's c16 pairs) from the warps' accumulator matrices."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.isa.halves import encode

    (wm, wn) = config.warps
    packed = np.zeros((config.threads, tiled.c.whole.slots), np.uint32)
    for warp, lane in ((warp, lane) for warp in range(wm * wn) for lane in range(32)):
        for mi, ni in ((mi, ni) for mi in range(tiled.m_blocks) for ni in range(tiled.n_blocks)):
            for pair, slot in enumerate(tiled.c_slots(mi, ni)):
                bits = 0
                for part in range(2):  # c16 register `pair`: the fp16 pair of accumulators 2 pair, + 1
                    row, col = fragment_element("c16", lane, pair, part)
                    value = accumulators[warp // wn, warp % wn][16 * mi + row, 8 * ni + col % 8]
                    bits |= int(encode(value, element)) << (16 * part)
                packed[32 * warp + lane, slot] = bits
    return packed


def _emulated_c(config: Config, tiled, packed):
    """C as the kernel's stmatrix leaves it in shared memory, read back through the C tile's layout: one
    CTA-wide transfer, or (persistent) in bands of rows through a region of one band, each warp of the band
    its own transfer on a subview at its start, the band read back by its own layout."""
    from mlir_tile.algebra.layout import Layout
    from mlir_tile.algebra.words import unpack_b32
    from mlir_tile.models.reference import emulate as run_transfer

    t, layout, (wm, wn) = tiled.c.whole, unpack_b32(tiled.c.tile), config.warps
    if not config.persistent:
        halves = run_transfer(t.opcode, t.shared, t.registers, np.zeros(tiled.c.tile.cosize, np.uint32), packed,
                              "cta").view(np.uint16)
        return np.array([[halves[layout(row, col).offset] for col in range(config.bn)] for row in range(config.bm)],
                        np.uint16)
    own, starts = t.one_warp()
    parts, band_words = wm, tiled.c.tile.cosize // wm
    band = Layout((config.bm // parts, config.bn), layout.stride, layout.swizzle)
    bands = []
    for part in range(parts):
        tile_words = np.zeros(tiled.c.tile.cosize, np.uint32)  # the C tile's view; its band lies in the region
        for warp in range(part * wn, (part + 1) * wn):
            start = starts.offset(warp)
            tile_words[start:] = run_transfer(own.opcode, own.shared, own.registers, tile_words[start:],
                                              packed[32 * warp:32 * (warp + 1)], "warp")
        halves = tile_words[part * band_words:(part + 1) * band_words].view(np.uint16)
        bands.append([[halves[band(row, col).offset] for col in range(config.bn)] for row in range(band.sizes[0])])
    return np.array(sum(bands, []), np.uint16)
