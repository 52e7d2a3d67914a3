"""The Hopper GEMM's CTA on the reference model (`--emulate --arch sm_90a`): TMA, wgmma's fetch, stmatrix."""
from __future__ import annotations

from mlir_tile.kernels.common import SWIZZLE_COLUMNS, output_element
from mlir_tile.tiling.tiled import packed_slot
from mlir_tile.kernels.gemm.sm90 import a_parts, b_parts, tiles, transposition
from mlir_tile.kernels.gemm.sm90_checks import inputs_and_check
from mlir_tile.kernels.gemm.sm90_tiles import ELEMENT_BYTES, HopperConfig


def emulate(config: HopperConfig = HopperConfig(), k_tiles: int = 2, element: str = "f16") -> str:
    """One CTA (BM x BN x k_tiles * BK) on the reference model, as the kernel runs it: each k-tile's boxes
    written into a stage by TMA's model (`_stage`), every warpgroup's wgmma operands fetched through the
    descriptors the kernel issues (`wgmma.descriptor_for` of the stage's layouts) by the ISA's model and
    multiplied, the accumulators (placed by the ISA's fragment) packed and written into the C tile by stmatrix's
    model, and the C boxes read by the TMA store's model (`_c_tile`): C against numpy. AssertionError
    otherwise."""
    import numpy as np

    from mlir_tile.isa import fp8, halves
    from mlir_tile.isa.wgmma import descriptor_for
    from mlir_tile.models import reference

    if config.split_k:
        raise ValueError("hopper gemm: a split-K CTA's result rests on the other splits' partials and flags in "
                         "global memory, which the model of one CTA has not: `run_and_check` checks it on the GPU")
    layouts, depth, bits = tiles(config), k_tiles * config.bk, config.element_bits
    a, b, scales, check = inputs_and_check(config.bm, config.bn, depth, element, 3, config.row_scales,
                                           config.block_scales, config.swiglu, config.row_blocks)  # b: K x N
    if config.a_rows:  # (M at most a_rows: the model's stage holds zeros past them where the kernel's holds what it
        a[config.a_rows:] = 0  # held, which reaches only C's rows past M, clipped by its store)
    decode = fp8.decode if element == "e4m3" else halves.decode
    accumulators = np.zeros((config.bm // 64, 64, config.bn))  # by 64-row band (a consumer's batch)
    a_bytes, k_step = config.parts[0] * bits // 8, 256 // bits  # a wgmma's K: 32 bytes
    for k_tile in range(k_tiles):
        stage = _stage(config, a, b, k_tile, a_bytes)
        # (blockwise scales: each k-tile's products times its row's scale and the tile's block's, as promoted)
        factor = (scales[0][:, k_tile, None] * (scales[1][None, :, k_tile] if config.row_blocks else scales[1][0, k_tile])
                  if config.block_scales else 1.0)
        for group in range(config.bm // 64):
            partial = np.zeros((64, config.bn))
            for step in range(config.bk // k_step):
                fetched = []
                for name, rows, origin, at in (("a", 64, (64 * group, k_step * step), 0),
                                               ("b", config.bn, (0, k_step * step), a_bytes)):
                    fields, start = descriptor_for(layouts[name], bits, rows, k_step, origin)
                    fetched.append(decode(reference.wgmma_operand(stage, fields.bits(at + start), fields.major == "K",
                                                                  bits, rows), element))
                partial += fetched[0] @ fetched[1].T
            accumulators[group] += partial * (factor[64 * group:64 * (group + 1)] if config.block_scales else 1.0)
    if config.swiglu:  # (C's columns silu(gate) * up, the pairs `sm90_fused.swiglu_pairs` proves a thread holds)
        from mlir_tile.kernels.gemm.reference import swiglu

        accumulators = np.stack([swiglu(band) for band in accumulators])
    ok, worst = check(_c_tile(config, layouts, accumulators, () if config.block_scales else scales, element))
    assert ok, f"C differs from numpy by up to {worst}"
    return (f"reference model: a {config.bm} x {config.bn} x {depth} {element} CTA on Hopper's path ({config}): TMA's "
            f"box writes, wgmma's operand fetches through the kernel's descriptors, stmatrix into the C tile and the "
            f"TMA stores' reads give C as numpy does (largest error {worst:.2e})")


def _stage(config: HopperConfig, a, b, k_tile: int, a_bytes: int):
    """The stage's bytes once k-tile `k_tile`'s A and B boxes are in: TMA's box writes (B [K, N] given transposed:
    through the staging stage and the kernel's byte transposition; a cluster: each CTA's part of each box)."""
    import numpy as np

    from mlir_tile.models import reference
    from mlir_tile.tiling import byte_transpose

    bits = config.element_bits
    stage, columns = np.zeros(config.stage_bytes // config.stages, np.uint8), slice(k_tile * config.bk,
                                                                                    (k_tile + 1) * config.bk)
    given_a = a[:, columns] if config.a_major == "mk" else a[:, columns].T  # A's rows as its tensor map has them
    for first, box in a_parts(config):  # (A [K, M]: a box every 64 rows of BM)
        reference.tma_box_write(np.ascontiguousarray(given_a[:, first // config.bk:first // config.bk + box.columns]
                                                     if config.a_major == "km" else given_a[:box.rows]),
                                128, stage, first * bits // 8)
    given = b[columns].T if config.b_major == "nk" else b[columns]  # B's rows as its tensor map has them
    if config.transposed:  # TMA's boxes into the staging stage, rewritten K-major into the stage
        staged = np.zeros(config.bk * config.bn, np.uint8)
        for first, box in b_parts(config):
            reference.tma_box_write(np.ascontiguousarray(given[:, first // config.bk:first // config.bk + box.columns]),
                                    128, staged, first)
        plan = transposition(config)
        moved = byte_transpose.emulate(plan, staged.view(np.uint32), np.zeros(plan.target.cosize, np.uint32))
        stage[a_bytes:a_bytes + moved.nbytes] = moved.view(np.uint8)
        return stage
    for first, part in b_parts(config):  # each cluster CTA's part of each box
        for rank in range(config.cluster):
            row0, column0 = rank * part.rows, 0 if config.b_major == "nk" else first // config.bk
            reference.tma_box_write(np.ascontiguousarray(given[row0:row0 + part.rows, column0:column0 + part.columns]),
                                    128, stage, a_bytes + (first + row0 * part.columns) * bits // 8)
    return stage


def _c_tile(config: HopperConfig, layouts: dict, accumulators, scales, element: str):
    """C (BM x BN, 16-bit words) as the TMA stores read it from the C tile each consumer's stmatrix wrote its
    accumulators (times the row and column scales) into."""
    import numpy as np

    from mlir_tile.isa import halves
    from mlir_tile.isa.tma import column_boxes
    from mlir_tile.models import reference
    from mlir_tile.tiling.tiled import tiled_store_c

    scale = np.outer(np.resize(scales[0], config.bm), np.resize(scales[1], config.bn)) if scales else 1.0
    band = tiled_store_c(4, layouts["c_band"])
    words = np.zeros(layouts["c_words"].cosize, np.uint32)
    for group in range(config.bm // 64):  # each consumer's stmatrix into its rows, from its first word
        packed = np.zeros((128, band.whole.slots), np.uint32)
        for thread in range(128):
            product = (accumulators[group] * (scale[64 * group:64 * (group + 1)] if scales else 1.0)).astype(np.float32)
            for block in range(config.c_columns // 8):
                for half in range(2):
                    pair = [product[reference.wgmma_accumulator_position(thread, 4 * block + 2 * half + i)]
                            for i in range(2)]
                    pair = halves.encode(np.array(pair), output_element(element))
                    packed[thread, packed_slot(block, half)] = int(pair[0]) | int(pair[1]) << 16
        start = 64 * SWIZZLE_COLUMNS // 2 * group
        words[start:] = reference.emulate(band.whole.opcode, band.whole.shared, band.whole.registers, words[start:],
                                          packed, "warpgroup")
    shared = words.view(np.uint8)
    out = np.zeros((config.bm, config.c_columns), np.uint16)
    for first, box in column_boxes(layouts["c"], 16, SWIZZLE_COLUMNS):
        read = reference.tma_box_read(shared, 128, box.rows, box.columns * ELEMENT_BYTES, first * ELEMENT_BYTES)
        out[:, first // config.bm:first // config.bm + box.columns] = read.view(np.uint16)
    return out
