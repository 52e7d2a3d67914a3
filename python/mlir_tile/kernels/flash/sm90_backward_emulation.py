"""Attention's backward kernel (`sm90_backward`) on the reference model, every CTA of a small problem as the
kernel runs it: TMA's box writes of K, V, Q, dO and the statistics rows into the CTA's shared bytes, wgmma's
operand fetches through the descriptors the kernel issues (`wgmma.descriptor_for` of its tiles) by the ISA's
model, P^T and dS^T as the kernel computes them, dS^T written by stmatrix's model and read back as dQ's A, dQ's
fp32 tile read by the TMA reductions' box reads and added, dK and dV written by stmatrix and stored by the TMA
stores' model (rows past the head clipped): dQ, dK, dV against `reference.reference_backward` (numpy, fp32).
The pipelines' barriers are not modelled: the GPU test checks those (test_attention_backward_gpu.py)."""
from __future__ import annotations

import math

import numpy as np

from mlir_tile.kernels.common import LOG2E
from mlir_tile.kernels.flash.sm90_backward import (BOX_COLUMNS, FLOAT_BOX_COLUMNS, KEYS, BackwardConfig, tiles)
from mlir_tile.tiling.tiled import packed_slot


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
        for n0 in range(0, seq, KEYS):
            _cta(config, kv_head, n0, seq, group, (q, k, v, grad), statistics, dq_sums, (dk, dv))
    dq = dq_sums[:, :seq] / np.float32(math.sqrt(d))
    expected = reference_backward(values[0], *repeated, values[3], config.causal)
    got = [dq] + [decode(x.view(np.uint16), element).reshape(kv_heads, seq, d) for x in (dk, dv)]
    expected = [expected[0]] + [x.reshape(kv_heads, group, seq, d).sum(1) for x in expected[1:]]
    worst = max(float(np.abs(g - e).max()) / max(float(np.abs(e).max()), 1e-6) for g, e in zip(got, expected))
    assert worst <= 4 * UNIT_ROUNDOFF[element], f"the emulated backward differs from numpy by {worst:.2e} (relative)"
    return worst


def _boxed_tile(rows: int, columns: int):
    """A rows x columns 16-bit tile as TMA loads it in boxes of rows x 64 columns side by side: element (r, c) at
    c // 64 boxes of rows x 64 in, r x 64 + c % 64 within (before the swizzle, which keeps a row's bytes)."""
    from mlir_tile.algebra.layout import Layout

    return Layout((rows, (BOX_COLUMNS, columns // BOX_COLUMNS)), (BOX_COLUMNS, (1, rows * BOX_COLUMNS)))


def _rows(matrix: np.ndarray, first: int, count: int) -> np.ndarray:
    """`count` rows of a 2-D map's matrix from `first`, zeros past its end (TMA's fill)."""
    out = np.zeros((count, matrix.shape[1]), matrix.dtype)
    taken = matrix[first:first + count]
    out[:len(taken)] = taken
    return out


def _write_tile(shared, layout, matrix_rows: np.ndarray, at: int, bits: int, columns: int) -> None:
    """A tile's TMA boxes (`columns` columns each) of `matrix_rows` written from byte `at`."""
    from mlir_tile.isa.tma import boxes_at
    from mlir_tile.models.reference import tma_box_write

    for first, column, box in boxes_at(layout, bits, columns):
        tma_box_write(np.ascontiguousarray(matrix_rows[:, column:column + box.columns]), box.swizzle_bytes, shared,
                      at + first * bits // 8)


def _fetch(shared, layout, at: int, rows: int, origin_row: int, depth: int, element: str) -> np.ndarray:
    """The rows x depth operand wgmma reads through the kernel's descriptors of `layout` from byte `at`, row
    `origin_row` on (decoded), K step by K step."""
    from mlir_tile.isa.halves import decode
    from mlir_tile.isa.wgmma import descriptor_for
    from mlir_tile.models.reference import wgmma_operand

    steps = []
    for step in range(depth // 16):
        fields, start = descriptor_for(layout, 16, rows, 16, (origin_row, 16 * step))
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


def _cta(config: BackwardConfig, kv_head: int, n0: int, seq: int, group: int, inputs, statistics, dq_sums,
         outputs) -> None:
    """One CTA: K/V head `kv_head`'s keys n0 .. n0 + 127, its group's query blocks in turn."""
    from mlir_tile.isa.halves import decode, encode
    from mlir_tile.isa.tma import boxes_at
    from mlir_tile.models.reference import tma_box_read, tma_box_store, tma_box_write

    q, k, v, grad = (x.reshape(-1, x.shape[-1]) for x in inputs)  # the 2-D maps' matrices
    d, element, rows, layouts = config.head_dim, config.element, config.rows, tiles(config)
    shared = np.zeros(config.shared_bytes, np.uint8)
    for part, matrix in enumerate((k, v)):
        _write_tile(shared, layouts["kv"], _rows(matrix, kv_head * seq + n0, KEYS), part * config.kv_bytes, 16,
                    BOX_COLUMNS)
    dk_acc, dv_acc = np.zeros((2, 64, d)), np.zeros((2, 64, d))
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
            ds_words = []
            for consumer in range(2):
                fetch = lambda tile, at, count, row0, depth: _fetch(shared, layouts[tile], at, count, row0, depth,
                                                                    element)
                s_t = fetch("kv", 0, 64, 64 * consumer, d) @ fetch("q", stage, rows, 0, d).T
                dp_t = fetch("kv", config.kv_bytes, 64, 64 * consumer, d) @ fetch("q", stage + config.block_bytes,
                                                                                   rows, 0, d).T
                key = n0 + 64 * consumer + np.arange(64)[:, None]
                query = q0 + np.arange(rows)[None, :]
                seen = (key < seq) & ((key <= query) if config.causal else True)
                p_t = np.where(seen, np.exp2(s_t * scale - row_statistics[0][None, :]), 0.0)
                ds_t = p_t * (dp_t - row_statistics[1][None, :])
                rounded = [decode(encode(x, element), element) for x in (p_t, ds_t)]
                dv_acc[consumer] += rounded[0] @ fetch("q_mn", stage + config.block_bytes, d, 0, rows).T
                dk_acc[consumer] += rounded[1] @ fetch("q_mn", stage, d, 0, rows).T
                ds_words.append(_stmatrix(layouts["ds_band"], ds_t, element))
            ds_tile = np.concatenate(ds_words).view(np.uint8)
            shared[config.ds_offset:config.ds_offset + ds_tile.size] = ds_tile
            share = config.dq_columns
            for consumer in range(d // share):
                k_part = consumer * KEYS * share * 2
                dq = fetch("ds_a", config.ds_offset, rows, 0, KEYS) @ fetch("k_dq", k_part, share, 0, KEYS).T
                first = config.dq_offset + consumer * rows * share * 4
                floats = shared[first:first + rows * share * 4].view(np.float32)
                for row in range(rows):
                    for column in range(share):
                        floats[layouts["dq"].offset(row, column)] = dq[row, column]
                for offset, column, box in boxes_at(layouts["dq"], 32, FLOAT_BOX_COLUMNS):
                    read = tma_box_read(shared, 128, box.rows, 4 * box.columns, first + 4 * offset).view(np.float32)
                    dq_sums[head, q0:q0 + rows, consumer * share + column:][:, :box.columns] += read
    whole = _boxed_tile(KEYS, d)  # (K's and V's tiles as TMA's boxes lie, independent of the kernel's)
    for part, (accumulators, scaled) in enumerate(((dk_acc, True), (dv_acc, False))):
        for consumer in range(2):
            values = accumulators[consumer] / (math.sqrt(d) if scaled else 1.0)
            words = _stmatrix(layouts["out_band"], values, element).view(np.uint8)
            band_at = part * config.kv_bytes + 2 * whole.offset(64 * consumer, 0)  # (the band's first element)
            shared[band_at:band_at + words.size] = words
            for offset, column, box in boxes_at(layouts["out"], 16, BOX_COLUMNS):
                read = tma_box_read(shared, 128, box.rows, 2 * box.columns, band_at + 2 * offset)
                tma_box_store(read, outputs[part][kv_head], n0 + 64 * consumer, 2 * column, 2 * d)
