"""Attention's backward kernel (`sm90_backward`) on the reference model, every CTA of a small problem as the
kernel runs it: TMA's box writes of K, V, Q, dO and the statistics rows into the CTA's shared bytes, wgmma's
operand fetches through the descriptors the kernel issues (`wgmma.descriptor_for` of its tiles) by the ISA's
model, P^T and dS^T as the kernel computes them, dS^T written by stmatrix's model and read back as dQ's A, dQ's
fp32 tile read by the TMA reductions' box reads and added, dK and dV written by stmatrix and stored by the TMA
stores' model (rows past the head clipped): dQ, dK, dV against `reference.reference_backward` (numpy, fp32).
The pipelines' barriers are not modelled: the GPU test checks those (test_attention_backward_gpu.py)."""
from __future__ import annotations

import functools
import math

import numpy as np

from mlir_tile.kernels.common import LOG2E
from mlir_tile.kernels.flash.sm90_backward_tiles import (BOX_COLUMNS, FLOAT_BOX_COLUMNS, BackwardConfig, band_steps,
                                                         tiles)
from mlir_tile.tiling.tiled import packed_slot


@functools.lru_cache(maxsize=None)
def _boxes(layout, bits: int, columns: int) -> list:
    """`tma.boxes_at`, once a tile (the model writes and reads the same tiles' boxes block after block)."""
    from mlir_tile.isa.tma import boxes_at

    return boxes_at(layout, bits, columns)


@functools.lru_cache(maxsize=None)
def _descriptor(layout, rows: int, origin: tuple):
    """`wgmma.descriptor_for` a 16-bit operand's K step, once."""
    from mlir_tile.isa.wgmma import descriptor_for

    return descriptor_for(layout, 16, rows, 16, origin)


def emulate(config: BackwardConfig, seq: int = 150, heads: int = 2, kv_heads: int = 1, seed: int = 3) -> float:
    """dQ, dK and dV of random q, dO [heads, seq, d] and k, v [kv_heads, seq, d] by the emulated CTAs, against
    numpy's backward: returns the largest error over the gradients' largest value; AssertionError past 4 units
    of the element's rounding (P^T and dS^T are rounded to it for dV, dK and dQ, as the kernel's are)."""
    from mlir_tile.isa.halves import UNIT_ROUNDOFF, decode, encode
    from mlir_tile.kernels.flash.reference import reference, reference_backward

    rng, d, element = np.random.default_rng(seed), config.head_dim, config.element
    group = heads // kv_heads
    q, grad = (encode(rng.uniform(-1, 1, (heads, seq, d)), element) for _ in range(2))
    k, v = (encode(rng.uniform(-1, 1, (kv_heads, seq, d)), element) for _ in range(2))
    values = [decode(x, element) for x in (q, k, v, grad)]
    repeated = [np.repeat(x, group, 0) for x in values[1:3]]
    o, lse = reference(values[0], *repeated, config.causal)
    o = decode(encode(o, element), element)  # (O as the forward gives it: rounded)
    padded = config.padded(seq)
    statistics = np.zeros((2, heads, padded), np.float32)
    statistics[0] = np.inf
    statistics[0, :, :seq], statistics[1, :, :seq] = lse * np.float32(LOG2E), (values[3] * o).sum(-1)
    dq_sums = np.zeros((heads, padded, d), np.float32)
    dk, dv = (np.zeros((kv_heads, seq, d * 2), np.uint8) for _ in range(2))  # (bytes, as the 3-D stores write)
    for kv_head in range(kv_heads):
        for n0 in range(0, seq, config.keys):
            _cta(config, kv_head, n0, seq, group, (q, k, v, grad), statistics, dq_sums, (dk, dv))
    dq = dq_sums[:, :seq] / np.float32(math.sqrt(d))
    expected = reference_backward(values[0], *repeated, values[3], config.causal)
    got = [dq] + [decode(x.view(np.uint16), element).reshape(kv_heads, seq, d) for x in (dk, dv)]
    expected = [expected[0]] + [x.reshape(kv_heads, group, seq, d).sum(1) for x in expected[1:]]
    worst = max(float(np.abs(g - e).max()) / max(float(np.abs(e).max()), 1e-6) for g, e in zip(got, expected))
    assert worst <= 4 * UNIT_ROUNDOFF[element], f"the emulated backward differs from numpy by {worst:.2e} (relative)"
    return worst


def _rows(matrix: np.ndarray, first: int, count: int) -> np.ndarray:
    """`count` rows of a 2-D map's matrix from `first`, zeros past its end (TMA's fill)."""
    out = np.zeros((count, matrix.shape[1]), matrix.dtype)
    taken = matrix[first:first + count]
    out[:len(taken)] = taken
    return out


def _write_tile(shared, layout, matrix_rows: np.ndarray, at: int, bits: int, columns: int) -> None:
    """A tile's TMA boxes (`columns` columns each) of `matrix_rows` written from byte `at`."""
    from mlir_tile.models.reference import tma_box_write

    for first, column, box in _boxes(layout, bits, columns):
        tma_box_write(np.ascontiguousarray(matrix_rows[:, column:column + box.columns]), box.swizzle_bytes, shared,
                      at + first * bits // 8)


def _fetch(shared, layout, at: int, rows: int, origin_row: int, depth: int, element: str) -> np.ndarray:
    """The rows x depth operand wgmma reads through the kernel's descriptors of `layout` from byte `at`, row
    `origin_row` on (decoded), K step by K step."""
    from mlir_tile.isa.halves import decode
    from mlir_tile.models.reference import wgmma_operand

    steps = []
    for step in range(depth // 16):
        fields, start = _descriptor(layout, rows, (origin_row, 16 * step))
        steps.append(wgmma_operand(shared, fields.bits(at + start), fields.major == "K", 16, rows))
    return decode(np.concatenate(steps, 1), element).astype(np.float64)


def _stmatrix(band_layout, values: np.ndarray, element: str) -> np.ndarray:
    """A warpgroup's 64 x N accumulators rounded in pairs and written by stmatrix's model: the band's words."""
    from mlir_tile.isa.halves import encode
    from mlir_tile.models import reference
    from mlir_tile.tiling.tiled import tiled_store_c

    band = tiled_store_c(4, band_layout)
    packed = np.zeros((128, band.whole.slots), np.uint32)
    for thread in range(128):
        for block in range(values.shape[1] // 8):
            for half in range(2):
                pair = encode(np.array([values[reference.wgmma_accumulator_position(thread, 4 * block + 2 * half + i)]
                                        for i in range(2)]), element)
                packed[thread, packed_slot(block, half)] = int(pair[0]) | int(pair[1]) << 16
    return reference.emulate(band.whole.opcode, band.whole.shared, band.whole.registers,
                             np.zeros(band_layout.cosize, np.uint32), packed, "warpgroup")


def _write_band(shared, band_layout, words: np.ndarray, at: int) -> None:
    """A band's words as stmatrix writes them (`_stmatrix`) into shared memory from byte `at`: only those the
    band's layout covers (another consumer's band may lie between them)."""
    rows, columns = band_layout.sizes
    places = np.array([band_layout.offset(row, word) for row in range(rows) for word in range(columns)])
    shared.view(np.uint32)[at // 4 + places] = words[places]


def _cta(config: BackwardConfig, kv_head: int, n0: int, seq: int, group: int, inputs, statistics, dq_sums,
         outputs) -> None:
    """One CTA: K/V head `kv_head`'s keys n0 .. n0 + keys - 1, its group's query blocks in turn."""
    from mlir_tile.isa.halves import decode, encode
    from mlir_tile.models.reference import tma_box_read, tma_box_store, tma_box_write

    q, k, v, grad = (x.reshape(-1, x.shape[-1]) for x in inputs)  # the 2-D maps' matrices
    d, element, rows, layouts, steps = config.head_dim, config.element, config.rows, tiles(config), band_steps(config)
    keys, split, share = config.keys, config.split_columns, config.dq_columns
    shared = np.zeros(config.shared_bytes, np.uint8)
    for part, matrix in enumerate((k, v)):
        _write_tile(shared, layouts["kv"], _rows(matrix, kv_head * seq + n0, keys), part * config.kv_bytes, 16,
                    BOX_COLUMNS)
    dk_acc, dv_acc = np.zeros((2, 64, config.kv_columns)), np.zeros((2, 64, config.kv_columns))
    fetch = lambda tile, at, count, row0, depth: _fetch(shared, layouts[tile], at, count, row0, depth, element)
    scale = LOG2E / math.sqrt(d)
    first_block = n0 // rows if config.causal else 0
    for head in range(kv_head * group, (kv_head + 1) * group):
        for block in range(first_block, -(-seq // rows)):
            q0, stage = block * rows, 2 * config.kv_bytes  # (stage 0: the model keeps one block at a time)
            for part, matrix in enumerate((q, grad)):
                _write_tile(shared, layouts["q"], _rows(matrix, head * seq + q0, rows), stage + part * config.block_bytes,
                            16, BOX_COLUMNS)
            for part in range(2):  # (the statistics: one unswizzled box of a row each)
                tma_box_write(statistics[part, head, q0:q0 + rows][None], 0, shared,
                              config.statistics_offset + 4 * rows * part)
            row_statistics = [shared[config.statistics_offset + 4 * rows * part:][:4 * rows].view(np.float32)
                              for part in range(2)]
            for consumer in range(2):  # (its keys from key0, its rows of the block from row0)
                key0, row0 = (0, config.score_rows * consumer) if split else (64 * consumer, 0)
                band = slice(row0, row0 + config.score_rows)
                s_t, dp_t = (fetch("kv", part * config.kv_bytes, 64, key0, d) @ fetch(
                    "q_band", stage + part * config.block_bytes + consumer * steps["q_band"], config.score_rows, 0,
                    d).T for part in range(2))
                key = n0 + key0 + np.arange(64)[:, None]
                query = q0 + row0 + np.arange(config.score_rows)[None, :]
                seen = (key < seq) & ((key <= query) if config.causal else True)
                p_t = np.where(seen, np.exp2(s_t * scale - row_statistics[0][None, band]), 0.0)
                ds_t = p_t * (dp_t - row_statistics[1][None, band])
                if split:  # (both bands into their tiles; the products below read them)
                    for at, values in ((config.p_offset, p_t), (config.ds_offset, ds_t)):
                        _write_band(shared, layouts["ds_band"], _stmatrix(layouts["ds_band"], values, element),
                                    at + consumer * steps["ds_band"])
                    continue
                rounded = [decode(encode(x, element), element) for x in (p_t, ds_t)]
                dv_acc[consumer] += rounded[0] @ fetch("q_mn", stage + config.block_bytes, d, 0, rows).T
                dk_acc[consumer] += rounded[1] @ fetch("q_mn", stage, d, 0, rows).T
                _write_band(shared, layouts["ds_band"], _stmatrix(layouts["ds_band"], ds_t, element),
                            config.ds_offset + consumer * steps["ds_band"])
            for consumer in range(2 if split else 0):
                for accumulators, at, part in ((dv_acc, config.p_offset, 1), (dk_acc, config.ds_offset, 0)):
                    accumulators[consumer] += fetch("scores_a", at, 64, 0, rows) @ fetch(
                        "q_mn", stage + part * config.block_bytes + consumer * steps["q_mn"], config.kv_columns, 0,
                        rows).T
            for consumer in range(d // share):
                dq = fetch("ds_a", config.ds_offset, rows, 0, keys) @ fetch("k_dq", consumer * steps["k_dq"], share, 0,
                                                                            keys).T
                first = config.dq_offset + consumer * rows * share * 4
                floats = shared[first:first + rows * share * 4].view(np.float32)
                for row in range(rows):
                    for column in range(share):
                        floats[layouts["dq"].offset(row, column)] = dq[row, column]
                for offset, column, box in _boxes(layouts["dq"], 32, FLOAT_BOX_COLUMNS):
                    read = tma_box_read(shared, 128, box.rows, 4 * box.columns, first + 4 * offset).view(np.float32)
                    dq_sums[head, q0:q0 + rows, consumer * share + column:][:, :box.columns] += read
    bands = []  # (every consumer's bands written, as the kernel's, before any is stored: overlaps show)
    for part, (accumulators, scaled) in enumerate(((dk_acc, True), (dv_acc, False))):
        for consumer in range(2):  # (its band's first key and column)
            key0, column0 = (0, config.kv_columns * consumer) if split else (64 * consumer, 0)
            values = accumulators[consumer] / (math.sqrt(d) if scaled else 1.0)
            band_at = part * config.kv_bytes + consumer * steps["out_band"]
            _write_band(shared, layouts["out_band"], _stmatrix(layouts["out_band"], values, element), band_at)
            bands.append((part, band_at, key0, column0))
    for part, band_at, key0, column0 in bands:
        for offset, column, box in _boxes(layouts["out"], 16, BOX_COLUMNS):
            read = tma_box_read(shared, 128, box.rows, 2 * box.columns, band_at + 2 * offset)
            tma_box_store(read, outputs[part][kv_head], n0 + key0, 2 * (column0 + column), 2 * d)
