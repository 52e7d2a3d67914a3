"""fp8 quantization by blocks (issue 62, `fp8_training`: DeepSeek-V3's recipe): x [rows, columns] of 16-bit
floats into e4m3 [rows, columns] under one fp32 scale a block of `block_rows` x 128 (a row's 1 x 128 of
activations and gradients, or a weight's 128 x 128), each block's largest |x| at e4m3's 448 (a block of zeros:
scale 1), in one pass over x where torch's ops made three (the blocks' largest in a reduction, the division into
an fp32 copy, the cast).

A block's row of 128 columns is read by 16 consecutive lanes, 16 bytes (8 elements) each, so a CTA of 256 threads
holds 16 such rows. `block_rows` 1: a CTA takes 16 blocks, one a half-warp (its largest a butterfly over the 16
lanes); 128: one block, each half-warp 8 of its rows, 16 apart (its largest over the warp, then over the CTA's 8
warps through shared memory). Each value is divided by its block's scale in fp32 (as torch's division is) and
rounded to nearest e4m3 (`cvt.rn.satfinite`: the largest, 448, stays 448 where the scale's rounding would take
it past). Columns and rows past the matrix read as zeros, so a last block's scale is over the values it has; none
of them is written. `transposed` (a weight gradient's operands, dw = dy^T x: both by 1 x 128 blocks along the
tokens): x [T, C] into x^T [C, T16], T16 = T rounded up to 16 (TMA's rows) written as zeros past T, a CTA 128
tokens of 64 columns (`_QuantizeTransposed`), where a copy of x^T and a pass over it did it before.

Kernel parameters: `quantize(x, q, scales, rows, pieces, blocks)`: x (16-bit) and q (e4m3) [rows, 8 x pieces]
row-major on 16 bytes, scales fp32 [ceil(rows / block_rows), blocks], blocks = ceil(8 x pieces / 128);
transposed `quantize(x, q, scales, tokens, pieces, column_tiles, padded)`: x [tokens, 8 x pieces], q [8 x pieces,
16 x padded], scales [8 x pieces, ceil(16 x padded / 128)], column_tiles = ceil(pieces / 8). Grid
`QuantizeConfig.grid`, block THREADS.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import partial

from mlir_tile.isa.targets import WARPGROUP_CHIP, runs_warpgroup_kernels
from mlir_tile.kernels.gemm.sm90_tiles import BLOCK  # (a block's columns: the GEMMs' blockwise scales')

THREADS = 256
PIECE = 8  # elements a lane reads: 16 bytes of 16-bit ones
LANES = BLOCK // PIECE  # a block's row: a half-warp
E4M3_LARGEST = 448.0
BLOCK_ROWS = (1, BLOCK)
ROWS = 16  # x^T's rows (the tokens) a multiple of it, zeros past T: fp8 rows on TMA's 16 bytes


@dataclass(frozen=True)
class QuantizeConfig:
    element: str = "bf16"
    block_rows: int = 1  # 1 (a row's 1 x 128 blocks) or 128 (128 x 128 blocks)
    transposed: bool = False  # x [T, C] quantized as x^T [C, T_padded] by its rows' 1 x 128 blocks (a weight
    # gradient's operands: dw = dy^T x, both along the tokens), T_padded a multiple of 16 past T written as zeros

    def __post_init__(self) -> None:
        if self.element not in ("f16", "bf16") or self.block_rows not in BLOCK_ROWS or (
                self.transposed and self.block_rows != 1):
            raise ValueError(f"quantize: f16 or bf16 values in blocks of {' or '.join(map(str, BLOCK_ROWS))} rows "
                             f"x {BLOCK} (transposed: 1); got {self.element}, {self.block_rows}"
                             f"{', transposed' if self.transposed else ''}")

    def __str__(self) -> str:
        return f"quantize_{self.element}_{self.block_rows}x{BLOCK}{'_transposed' if self.transposed else ''}_sm90a"

    def grid(self, rows: int, blocks: int) -> int:
        """CTAs over the scales' blocks of `rows` rows and `blocks` blocks a row of them (transposed: over x's
        `rows` tokens, in tiles of 128, and `blocks` tiles of 64 of its columns)."""
        row_blocks = -(-rows // self.block_rows)
        if self.transposed:
            return -(-rows // BLOCK) * blocks
        return -(-row_blocks * blocks // (THREADS // LANES)) if self.block_rows == 1 else row_blocks * blocks


def shipped_kernels(chip: str):
    """(name, build) of the quantizers a chip of e4m3 conversions (sm_89 on; the library's: Hopper's) runs."""
    if runs_warpgroup_kernels(chip):
        for element in ("f16", "bf16"):
            for block_rows, transposed in ((1, False), (BLOCK, False), (1, True)):
                config = QuantizeConfig(element, block_rows, transposed)
                yield str(config), partial(build_module, config)


def build_module(config: QuantizeConfig, context=None):
    """The kernel of `config` (see the module's text)."""
    from mlir_tile.builder import Global, Kernel

    parameters = [Global(config.element), Global("i8"), Global("f32"), "index", "index", "index"]
    with Kernel("quantize", parameters + ["index"] * config.transposed, block=(THREADS, 1, 1), chip=WARPGROUP_CHIP,
                context=context) as k:
        (_QuantizeTransposed if config.transposed else _Quantize)(k, config).build()
    return k.module


class _Quantize:
    def __init__(self, k, config: QuantizeConfig):
        from mlir_tile.builder.integers import with_operators
        from mlir_tile.builder.tensor import in_units

        self.k, self.config = k, config
        self.x, self.q, self.scales = k.arguments[:3]
        self.rows, self.blocks = (with_operators(a) for a in (k.arguments[3], k.arguments[5]))
        self.columns = in_units(k, k.arguments[4], PIECE)  # (a multiple of PIECE: each piece on 16 bytes, proven)
        thread = k.thread_id()
        self.lane, self.half_warp = thread % LANES, thread // LANES

    def build(self) -> None:
        k = self.k
        if self.config.block_rows == 1:  # this half-warp's block: a row's
            block = k.block_id() * (THREADS // LANES) + self.half_warp
            inside = k.compare("ult", block, self.rows * self.blocks)
            block = k.select(inside, block, k.index(0))
            row, column_block = block // self.blocks, block % self.blocks
            pieces = [self.piece(row, column_block, inside)]
            largest = k.warp_reduce(self.largest(pieces), "max", lanes=LANES)
            scale = _scale(k, largest)
            with k.if_(inside & k.leads_lanes(LANES)):
                k.store(scale, self.scales, [row * self.blocks + column_block])
        else:  # the CTA's block, 8 rows a half-warp
            row_block, column_block = k.block_id() // self.blocks, k.block_id() % self.blocks
            first = row_block * BLOCK + self.half_warp
            pieces = [self.piece(first + (THREADS // LANES) * i, column_block)
                      for i in range(BLOCK * LANES // THREADS)]
            scale = _scale(k, self.block_largest(self.largest(pieces)))
            with k.if_(k.compare("eq", k.thread_id(), 0)):
                k.store(scale, self.scales, [row_block * self.blocks + column_block])
        for row, column, values, present in pieces:
            self.store(row, column, values, scale, present)

    def piece(self, row, column_block, inside=None):
        """(row, its first column, the 8 values as fp32, whether they are in the matrix) of this lane's piece
        of `row`'s block `column_block` (`inside`: and the block is one of the matrix's): zeros where the piece
        lies past the matrix (`_piece`)."""
        k = self.k
        column = column_block * BLOCK + self.lane * PIECE
        present = k.compare("ult", row, self.rows) & k.compare("ult", column, self.columns)
        if inside is not None:
            present = inside & present
        return row, column, _piece(k, self.x, row * self.columns + column, present), present

    def largest(self, pieces):
        """The largest |value| of this lane's pieces."""
        from mlir import ir
        from mlir.dialects import arith, math, vector

        return functools.reduce(arith.maximumf, [
            vector.reduction(ir.F32Type.get(), vector.CombiningKind.MAXIMUMF, math.absf(values))
            for _, _, values, _ in pieces])

    def block_largest(self, largest):
        """The CTA's largest of each thread's `largest`: over each warp, then over the warps in shared memory."""
        from mlir.dialects import arith

        k = self.k
        warps = THREADS // 32
        per_warp = k.shared("largest", warps, "f32")
        largest = k.warp_reduce(largest, "max")
        with k.if_(k.leads_lanes(32)):
            k.store(largest, per_warp, [k.warp_id()])
        k.barrier()
        return functools.reduce(lambda result, warp: arith.maximumf(result, k.load(per_warp, [warp])),
                                range(1, warps), k.load(per_warp, [0]))

    def store(self, row, column, values, scale, present) -> None:
        """The piece's values over the scale, rounded to e4m3, as 8 bytes of q where the piece is in the matrix."""
        from mlir import ir
        from mlir.dialects import vector

        k = self.k
        words = [_rounded(k, [vector.extract(values, [], [4 * word + i]) for i in range(4)], scale) for word in range(2)]
        pair = vector.from_elements(ir.VectorType.get([2], ir.IntegerType.get_signless(32)), words)
        packed = vector.bitcast(ir.VectorType.get([PIECE], ir.IntegerType.get_signless(8)), pair)
        with k.if_(present):
            k.store_vector(packed, self.q, [row * self.columns + column])


class _QuantizeTransposed:
    """x [T, C] as x^T [C, T_padded] by 1 x 128 blocks along T: a CTA takes 128 tokens of 64 of x's columns, warp
    w the 8 columns of piece w, lane g tokens 4g to 4g + 3 (one piece each), so that a column's block is one
    warp's (its largest a butterfly over the 32 lanes); each lane writes its 4 tokens of a column as one i32 of
    x^T's row (a warp: 128 bytes of it). Tokens from T to T_padded are zeros, written; the rest past it are not."""

    def __init__(self, k, config: QuantizeConfig):
        from mlir_tile.builder.integers import with_operators
        from mlir_tile.builder.tensor import in_units

        self.k = k
        self.x, self.q, self.scales = k.arguments[:3]
        self.tokens, self.tiles = (with_operators(a) for a in (k.arguments[3], k.arguments[5]))
        self.columns = in_units(k, k.arguments[4], PIECE)
        self.padded = with_operators(in_units(k, k.arguments[6], ROWS))  # (x^T's rows on 16 bytes, proven)
        self.warp, self.lane = k.thread_id() // 32, k.thread_id() % 32

    def build(self) -> None:
        from mlir import ir
        from mlir.dialects import arith, math, vector

        k = self.k
        token_tile, column_tile = k.block_id() // self.tiles, k.block_id() % self.tiles
        first_token = token_tile * BLOCK + self.lane * 4
        column = column_tile * (8 * PIECE) + self.warp * PIECE
        pieces = []
        for token in (first_token + i for i in range(4)):
            present = k.compare("ult", token, self.tokens) & k.compare("ult", column, self.columns)
            pieces.append(_piece(k, self.x, token * self.columns + column, present))
        blocks = (self.padded + (BLOCK - 1)) // BLOCK  # (the scales' columns)
        word = ir.VectorType.get([1], ir.IntegerType.get_signless(32))
        for j in range(PIECE):  # x's column `column + j`: x^T's row
            values = [vector.extract(piece, [], [j]) for piece in pieces]
            largest = functools.reduce(arith.maximumf, [math.absf(value) for value in values])
            scale = _scale(k, k.warp_reduce(largest, "max"))
            row = column + j
            there = k.compare("ult", row, self.columns)
            rounded = vector.from_elements(word, [_rounded(k, values, scale)])
            with k.if_(there & k.compare("ult", first_token, self.padded)):
                k.store_vector(vector.bitcast(ir.VectorType.get([4], ir.IntegerType.get_signless(8)), rounded),
                               self.q, [row * self.padded + first_token])
            with k.if_(there & k.compare("eq", self.lane, 0)):
                k.store(scale, self.scales, [row * blocks + token_tile])


class Quantizer:
    """(e4m3 [R, C], fp32 scales [ceil(R / block_rows), ceil(C / 128)]) of a 16-bit torch tensor x [R, C] (C a
    multiple of 8) by the `quantize` kernel of the library's chip, on torch's current stream (`transposed`: of x^T
    [C, R16], R16 = R rounded up to a multiple of 16 with zeros, in 1 x 128 blocks along R); x read where it is (a
    view that is not row-major on 16 bytes copied first), one launch plan a shape. ValueError for what it does
    not take."""

    def __init__(self, library):
        from mlir_tile.kernels.common import Plans

        self.library, self.plans = library, Plans()

    def __call__(self, x, block_rows: int, transposed: bool = False):
        import torch

        from mlir_tile.kernels.common import on_16_bytes
        from mlir_tile.runtime import torch_stream

        element = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(x.dtype)
        if element is None or x.dim() != 2 or x.shape[1] % PIECE or not x.is_cuda:
            raise ValueError(f"quantize: a 2-D float16 or bfloat16 CUDA tensor of columns a multiple of {PIECE}, got "
                             f"{x.dtype} {tuple(x.shape)} on {x.device}")
        config = QuantizeConfig(element, block_rows, transposed)
        rows, columns = x.shape
        shape = (columns, -(-rows // ROWS) * ROWS) if transposed else (rows, columns)
        q = torch.empty(shape, dtype=torch.float8_e4m3fn, device=x.device)
        scales = torch.empty(-(-shape[0] // block_rows), -(-shape[1] // BLOCK), dtype=torch.float32, device=x.device)
        if q.numel() == 0:
            return q, scales
        x = on_16_bytes(x.contiguous())
        launch = self.plans.of((config, rows, columns), lambda: self._plan(config, rows, columns))
        launch(torch_stream(x), x.data_ptr(), q.data_ptr(), scales.data_ptr())
        return q, scales

    def _plan(self, config: QuantizeConfig, rows: int, columns: int):
        from mlir_tile.runtime import POINTER

        module = self.library.module(str(config), partial(build_module, config))
        if config.transposed:  # (x's tokens, its pieces, its tiles of 64 columns, x^T's row in ROWS)
            sizes = [rows, columns // PIECE, -(-columns // (8 * PIECE)), -(-rows // ROWS)]
        else:
            sizes = [rows, columns // PIECE, -(-columns // BLOCK)]
        return module.prepare("quantize", [POINTER] * 3 + sizes, grid=config.grid(rows, sizes[2]), block=THREADS)


def _scale(k, largest):
    """A block's scale: its largest |value| / 448, or 1 for a block of zeros."""
    from mlir.dialects import arith

    positive = arith.cmpf(arith.CmpFPredicate.OGT, largest, k.constant(0.0, "f32"))
    return arith.select(positive, arith.divf(largest, k.constant(E4M3_LARGEST, "f32")), k.constant(1.0, "f32"))


def _rounded(k, values, scale):
    """Four fp32 values over their block's scale (IEEE division, as torch's), rounded to e4m3 in one i32 word."""
    from mlir.dialects import arith

    return k.pack_f8([arith.divf(value, scale) for value in values])


def _piece(k, x, at, present):
    """The 8 values of x from element `at` as fp32, zeros where the piece is not `present` (past the matrix: its
    load then of the first piece, which every call has)."""
    from mlir import ir
    from mlir.dialects import arith, vector

    floats = ir.VectorType.get([PIECE], ir.F32Type.get())
    loaded = arith.extf(floats, k.load_vector(x, [k.select(present, at, k.index(0))], PIECE))
    return arith.select(present, loaded, vector.broadcast(floats, k.constant(0.0, "f32")))
