"""Split-KV's combine (flash-decoding's second pass), beside the kernel whose splits it sums (`sm90`,
`split_kv`): each split s wrote, for each row (a query token of a head), O_s normalized by its own sum and its
log-sum-exp lse_s (-inf, O_s 0, where its keys held none the row sees). The row's

    O = sum_s exp(lse_s - M) O_s / sum_s exp(lse_s - M),  lse = M + log sum_s exp(lse_s - M),  M = max_s lse_s

rounded to 16 bits (O 0 and lse -inf where no split saw a key). A row is read by d / 8 consecutive lanes, 8
fp32 elements each, the splits shared out among them (`_combine`); a CTA of `CombineConfig.threads` takes
threads / (d / 8) rows.

Kernel parameters: `attention_combine(o_splits, lse_splits, o, lse, splits, tokens, heads)`: o_splits fp32
[splits, tokens, heads, d], lse_splits fp32 [splits, heads, tokens], O 16-bit [tokens, heads, d], lse fp32
[heads, tokens]. Grid `CombineConfig.grid(tokens x heads)`, block `CombineConfig.threads`. Launched as the
dependent of the split kernel (`prepare(..., dependent=True)`), which lets it start as its CTAs begin (`launch_dependents`): its
launch and its rows' addresses run under the splits' work, its reads after `wait_for_prerequisites`.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir_tile.isa.targets import WARPGROUP_CHIP
from mlir_tile.kernels.common import LOG2E
from mlir_tile.kernels.flash.row_pieces import PIECE, PieceRows

KERNEL = "attention_combine"  # (a lane sums PIECE elements of a row: two 16-byte loads of each split's fp32 O)


@dataclass(frozen=True)
class CombineConfig(PieceRows):
    head_dim: int = 128
    element: str = "bf16"
    threads = 64  # (a decode step's few rows over more SMs: each of its rows reads every split's O, 128 KB a CTA of
    # 256 threads at batch 1 x 32 heads, d 128, 16 splits)

    def __post_init__(self) -> None:
        if self.rows_refused():
            raise ValueError(f"attention combine: a head dim that is a multiple of {PIECE} up to {32 * PIECE}, f16 "
                             f"or bf16; got {self.head_dim}, {self.element}")

    def __str__(self) -> str:
        return f"{KERNEL}_d{self.head_dim}_{self.element}_sm90a"


def build_module(config: CombineConfig, context=None):
    """The kernel of `config` (see the module's text)."""
    from mlir_tile.builder import Global, Kernel

    with Kernel(KERNEL, [Global("f32"), Global("f32"), Global(config.element), Global("f32"), "index", "index",
                         "index"], block=(config.threads, 1, 1), chip=WARPGROUP_CHIP, fast_math=True, context=context) as k:
        _combine(k, config, *k.arguments)
    return k.module


def _combine(k, config: CombineConfig, o_splits, lse_splits, o, lse, splits, tokens, heads) -> None:
    """This lane's piece of its row. The row's lanes share out the splits (lane r the splits r, r + lanes, ...), so
    that a chunk of `lanes` splits costs one round trip, not one a split: each lane's log-sum-exps, the largest over
    the lanes by a butterfly; then a chunk at a time each lane's weight, and every split's O piece of the chunk
    loaded together (unrolled: their loads in flight at once) and summed with its weight from its lane."""
    from mlir import ir
    from mlir.dialects import arith, vector
    from mlir.dialects import math as math_dialect

    from mlir_tile.builder.integers import with_operators

    tokens, heads, splits, d, lanes = (with_operators(tokens), with_operators(heads), with_operators(splits),
                                       config.head_dim, config.lanes)
    thread = k.thread_id()
    row = k.block_id() * (config.threads // lanes) + thread // lanes
    inside = k.compare("ult", row, tokens * heads)
    row = with_operators(k.select(inside, row, 0))  # (past the last row: row 0's loads, nothing stored)
    token, head, lane = row // heads, row % heads, thread % lanes
    column, chunks, minus_infinity = lane * PIECE, (splits + (lanes - 1)) // lanes, k.constant(float("-inf"), "f32")

    def present(split):  # (whether the split is one; its index, 0 where not, so that every load is in bounds)
        there = k.compare("ult", split, splits)
        return there, k.select(there, split, 0)

    def lse_of(split):  # (-inf past the splits: weight 0)
        there, at = present(split)
        return arith.select(there, k.load(lse_splits, [(at * heads + head) * tokens + token]), minus_infinity)
    k.wait_for_prerequisites()  # (launched as the split kernel's dependent: its partials written and visible)
    with k.loop(0, chunks, carried=[minus_infinity]) as it:
        it.next(arith.maximumf(it.values[0], lse_of(with_operators(it.index) * lanes + lane)))
    largest = k.warp_reduce(it.results[0], "max", lanes=lanes)
    finite = arith.cmpf(arith.CmpFPredicate.ONE, largest, minus_infinity)
    base = arith.select(finite, largest, k.constant(0.0, "f32"))  # (no split saw a key: every weight 0)
    floats = ir.VectorType.get([PIECE], ir.F32Type.get())
    with k.loop(0, chunks, carried=[vector.broadcast(floats, k.constant(0.0, "f32")), k.constant(0.0, "f32")]) as it:
        first = with_operators(it.index) * lanes
        weight = k.exp2(arith.mulf(arith.subf(lse_of(first + lane), base), k.constant(LOG2E, "f32")))
        pieces = []  # (every load of the chunk issued before the first sum)
        for source in range(lanes):
            at = ((present(first + source)[1] * tokens + token) * heads + head) * d + column
            pieces.append(vector.shuffle(*(k.load_vector(o_splits, [at + 4 * i], 4) for i in range(2)),
                                         list(range(PIECE))))
        summed = it.values[0]
        for source, piece in enumerate(pieces):
            summed = vector.fma(vector.broadcast(floats, k.shuffle(weight, source, "idx", width=lanes)), piece,
                                summed)
        it.next(summed, arith.addf(it.values[1], weight))
    summed, total = it.results[0], k.warp_reduce(it.results[1], "add", lanes=lanes)
    seen = arith.cmpf(arith.CmpFPredicate.OGT, total, k.constant(0.0, "f32"))
    inverse = arith.select(seen, k.divide(k.constant(1.0, "f32"), total), k.constant(0.0, "f32"))
    halves = ir.VectorType.get([PIECE], ir.MemRefType(o.type).element_type)
    with k.if_(inside):
        k.store_vector(arith.truncf(halves, arith.mulf(summed, vector.broadcast(floats, inverse))), o,
                       [row * d + column])
    log_sum = arith.addf(base, arith.mulf(math_dialect.log2(total), k.constant(1 / LOG2E, "f32")))
    with k.if_(inside & k.leads_lanes(lanes)):
        k.store(arith.select(seen, log_sum, minus_infinity), lse, [head * tokens + token])
