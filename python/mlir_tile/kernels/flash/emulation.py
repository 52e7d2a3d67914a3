"""The FlashAttention-2-form kernel's CTA on the reference model (`--emulate`)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from mlir_tile.kernels.common import LOG2E
from mlir_tile.kernels.flash.reference import reference
from mlir_tile.kernels.flash.sm80 import tiled
from mlir_tile.kernels.flash.sm80_tiles import Config


def emulate(config: Config = Config(), seq: int = 96, causal: bool = True) -> str:
    """One CTA (one head, seq positions: two key tiles, a tail) on the reference model: Q's, K's and V's
    fragments by the ISA model from their swizzled tiles, each lane's checked against the PTX ISA's tables;
    S from them; the online softmax as the kernel computes it; P's A fragment built from S's accumulators by
    `fragments.c_as_a_operand` and read back through the A table; O through stmatrix, against numpy.
    AssertionError otherwise."""
    from mlir_tile.isa.halves import UNIT_ROUNDOFF, decode, encode

    config = replace(config, causal=causal)
    scores, output = tiled(config)
    rows, d, m_blocks, element = config.rows, config.head_dim, scores.m_blocks, config.element
    rng = np.random.default_rng(5)
    q, k, v = (encode(rng.uniform(-1, 1, (seq, d)), element) for _ in range(3))  # bit patterns
    q_warps = _emulated_q(config, scores, _padded(q[:rows], rows))  # the first CTA's query rows
    peak = np.full((config.warps, 16 * m_blocks), -np.inf, np.float32)
    total = np.zeros_like(peak)
    out = np.zeros((config.warps, 16 * m_blocks, d), np.float32)
    for tile in range(-(-seq // config.keys)):
        keys = slice(tile * config.keys, (tile + 1) * config.keys)
        kv = (_padded(k[keys], config.keys), _padded(v[keys], config.keys))
        for warp, (k_t, v_warp) in enumerate(_emulated_kv(config, scores, output, *kv)):
            s = (decode(q_warps[warp], element) @ decode(k_t, element)) * np.float32(LOG2E / math.sqrt(d))
            query = 16 * m_blocks * warp + np.arange(16 * m_blocks)[:, None]
            key = tile * config.keys + np.arange(config.keys)[None, :]
            s = np.where((key < seq) & ((key <= query) if causal else True), s, -np.inf)
            new_peak = np.maximum(peak[warp], s.max(1))
            correction = np.exp2(peak[warp] - new_peak)
            p = np.exp2(s - new_peak[:, None]).astype(np.float32)
            total[warp] = total[warp] * correction + p.sum(1)
            peak[warp] = new_peak
            p_warp = _p_fragment(config, p, element)
            out[warp] = out[warp] * correction[:, None] + decode(p_warp, element) @ decode(v_warp, element)
    queries = min(seq, rows)
    o = _emulated_o(config, output, encode((out / total[:, :, None]).reshape(rows, d), element), queries)
    expected, _ = reference(*(decode(x, element)[None] for x in (q, k, v)), causal)
    error = float(np.abs(decode(o, element) - expected[0, :queries]).max())
    assert error <= 8 * UNIT_ROUNDOFF[element], f"O differs from numpy by {error}"
    return (f"reference model: one {rows}-row {element} CTA, {seq} positions{' causal' if causal else ''}: every lane's Q, K "
            f"and V fragments hold what the PTX ISA's tables say, P is S's accumulators, and O through stmatrix "
            f"matches numpy (largest error {error:.1e})")


def _padded(matrix, count):  # zero rows past the sequence, as the copies' zero-fill leaves them
    return np.concatenate([matrix, np.zeros((count - len(matrix), matrix.shape[1]), np.uint16)])


def _fragments(config: Config, transfer, words):  # each thread's registers after one transfer, by the ISA model
    from mlir_tile.models.reference import emulate as run_transfer

    return run_transfer(transfer.opcode, transfer.registers, transfer.shared,
                        np.zeros((config.threads, transfer.slots), np.uint32), words, "cta", transfer.shared_offset)


def _emulated_q(config: Config, scores, q_tile):
    """Each warp's query rows, as its A fragments hold them (each element checked against the A table)."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.models.reference import b16_half, b16_tile_words

    m_blocks = scores.m_blocks
    q_regs = _fragments(config, scores.a.whole, b16_tile_words(scores.a.tile, q_tile))
    q_warps = np.zeros((config.warps, 16 * m_blocks, config.head_dim), np.uint16)
    for warp, lane in ((w, l) for w in range(config.warps) for l in range(32)):
        for block, mi, register, part in ((b, m, r, h) for b in range(scores.a.k_blocks) for m in range(m_blocks)
                                          for r in range(4) for h in range(2)):
            row, col = fragment_element("a16", lane, register, part)
            got = b16_half(q_regs[32 * warp + lane, scores.a_slots(mi, block)[register]], part)
            assert got == q_tile[16 * (warp * m_blocks + mi) + row, 16 * block + col], ("Q", warp, lane)
            q_warps[warp, 16 * mi + row, 16 * block + col] = got
    return q_warps


def _emulated_kv(config: Config, scores, output, k_tile, v_tile):
    """Per warp, (K^T, V) of a key tile as the warp's B fragments hold them (K as the N x K operand, V with
    .trans), each element checked against the B table."""
    from mlir_tile.models.reference import b16_tile_words

    k_words, v_words = b16_tile_words(scores.b.tile, k_tile), b16_tile_words(output.b.tile, v_tile)
    k_regs = [_fragments(config, scores.b.k_block(block), k_words) for block in range(scores.b.k_blocks)]
    v_regs = [_fragments(config, output.b.k_block(block), v_words) for block in range(output.b.k_blocks)]
    for warp in range(config.warps):
        yield (_b_matrix(scores, k_regs, warp, lambda kk, nn: k_tile[nn, kk], "K"),
               _b_matrix(output, v_regs, warp, lambda kk, nn: v_tile[kk, nn], "V"))


def _b_matrix(tiled_mma, registers, warp: int, source, name: str):
    """The (k x n) B matrix a warp's fragments hold, block by block; `source(k, n)` the element they must."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.models.reference import b16_half

    n_blocks = tiled_mma.n_blocks
    matrix = np.zeros((16 * len(registers), 8 * n_blocks), np.uint16)
    for block, lane in ((b, l) for b in range(len(registers)) for l in range(32)):
        for ni, register, part in ((n, r, h) for n in range(n_blocks) for r in range(2) for h in range(2)):
            kk, nn = fragment_element("b16", lane, register, part)
            got = b16_half(registers[block][32 * warp + lane, tiled_mma.b_slots(ni, 0)[register]], part)
            assert got == source(16 * block + kk, 8 * ni + nn), (name, warp, lane)
            matrix[16 * block + kk, 8 * ni + nn] = got
    return matrix


def _p_fragment(config: Config, p, element: str):
    """P's A fragment of a warp: each lane packs its own accumulators (the c32 table) by c_as_a_operand's plan,
    read back through the A table."""
    from mlir_tile.tiling.fragments import c_as_a_operand, fragment_element
    from mlir_tile.isa.halves import encode

    m_blocks = p.shape[0] // 16
    p_warp = np.zeros((16 * m_blocks, config.keys), np.uint16)
    for lane in range(32):
        for mi, block in ((m, b) for m in range(m_blocks) for b in range(config.keys // 16)):
            for register, (n_offset, low, high) in enumerate(c_as_a_operand()):
                for part, accumulator in enumerate((low, high)):
                    row, col = fragment_element("c32", lane, accumulator, 0)
                    probability = encode(p[16 * mi + row, 8 * (2 * block + n_offset) + col], element)
                    a_row, a_col = fragment_element("a16", lane, register, part)
                    p_warp[16 * mi + a_row, 16 * block + a_col] = probability
    return p_warp


def _emulated_o(config: Config, output, result, queries: int):
    """O's first `queries` rows as stmatrix of the packed (c16) registers leaves them in the tile."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.algebra.words import unpack_b32
    from mlir_tile.models.reference import emulate as run_transfer

    d, m_blocks = config.head_dim, output.m_blocks
    packed = np.zeros((config.threads, output.c.whole.slots), np.uint32)
    for warp, lane in ((w, l) for w in range(config.warps) for l in range(32)):
        for mi, ni in ((m, n) for m in range(m_blocks) for n in range(d // 8)):
            for pair, slot in enumerate(output.c_slots(mi, ni)):
                for part in range(2):
                    row, col = fragment_element("c16", lane, pair, part)
                    bits = result[16 * (warp * m_blocks + mi) + row, 8 * ni + col % 8]
                    packed[32 * warp + lane, slot] |= int(bits) << (16 * part)
    t = output.c.whole
    o_words = run_transfer(t.opcode, t.shared, t.registers, np.zeros(output.c.tile.cosize, np.uint32), packed, "cta")
    layout, halves = unpack_b32(output.c.tile), o_words.view(np.uint16)
    return np.array([[halves[layout(row, col).offset] for col in range(d)] for row in range(queries)], np.uint16)
