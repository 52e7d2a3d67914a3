"""The backward's two passes over rows, beside its kernel (`sm90_backward`): each one read of [rows, d] 16-bit
tensors, where torch's ops made several (fp32 copies, a product and a sum; a gather, a scale and a rounding):

- `prepare`: for each row of O and dO (a query token of a head), D = rowsum(dO O) in fp32 and the forward's
  log-sum-exp times log2(e), written at the row's place in the statistics;
- `finish`: dQ's row = dQaccum's row at that place times the softmax scale, rounded to 16 bits.

A row is read by d / 8 consecutive lanes, 16 bytes (8 elements) each; a CTA of 256 threads takes 256 / (d / 8)
rows. The rows are O's, dO's and dQ's in memory: [batch x heads, seq, d] (token t of head h at row h x seq + t)
or, packed, [total_q, heads, d] (at t x heads + h). A row's place in the statistics and dQaccum is h x padded + t,
packed h x padded + places[t] (`backward.packed_rows`: FlashAttention-3's padded rows, int32 on the device); the
forward's log-sum-exp is at h x tokens + t in both ([batch x heads, seq] and [heads, total_q]).

Kernel parameters: `attention_backward_prepare(o, do, lse, lse_log2, delta, [places,] tokens, heads, padded)` and
`attention_backward_finish(dq_sums, dq, [places,] tokens, heads, padded)`: 16-bit O, dO, dQ and fp32 lse,
statistics and dQaccum as pointers; `tokens` a head's rows, `heads` the heads (batch x heads where not packed),
`padded` the statistics' and dQaccum's rows a head. Grid `RowsConfig.grid`, block `THREADS`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mlir_tile.isa.targets import WARPGROUP_CHIP
from mlir_tile.kernels.common import LOG2E
from mlir_tile.kernels.flash.row_pieces import PIECE, THREADS, PieceRows

PASSES = ("prepare", "finish")


@dataclass(frozen=True)
class RowsConfig(PieceRows):
    step: str  # one of PASSES
    head_dim: int = 128
    element: str = "bf16"
    packed: bool = False  # [total_q, heads, d] with each token's place read from `places`

    def __post_init__(self) -> None:
        if self.step not in PASSES or self.rows_refused():
            raise ValueError(f"attention backward rows: a pass of {PASSES}, a head dim that is a multiple of {PIECE} "
                             f"up to {32 * PIECE}, f16 or bf16; got {self.step}, {self.head_dim}, {self.element}")

    @property
    def kernel(self) -> str:
        return f"attention_backward_{self.step}"

    def __str__(self) -> str:
        return f"{self.kernel}_d{self.head_dim}_{self.element}{'_varlen' if self.packed else ''}_sm90a"


def build_module(config: RowsConfig, context=None):
    """The kernel of `config` (see the module's text)."""
    from mlir_tile.builder import Global, Kernel

    tensors = ([Global(config.element)] * 2 + [Global("f32")] * 3 if config.step == "prepare"
               else [Global("f32"), Global(config.element)])
    places = [Global("i32")] if config.packed else []
    with Kernel(config.kernel, tensors + places + ["index"] * 3, block=(THREADS, 1, 1), chip=WARPGROUP_CHIP,
                context=context) as k:
        row = _Row(k, config, k.arguments[len(tensors):])
        (_prepare if config.step == "prepare" else _finish)(k, config, row, *k.arguments[:len(tensors)])
    return k.module


class _Row:
    """This lane's row (clamped to row 0 past the last, so that every lane loads and shuffles) and its first
    column; whether the row is there; its token's log-sum-exp index and its place in the statistics and
    dQaccum."""

    def __init__(self, k, config: RowsConfig, arguments):
        from mlir_tile.builder.integers import with_operators

        places = arguments[0] if config.packed else None
        tokens, heads, padded = (with_operators(a) for a in arguments[-3:])
        thread = k.thread_id()
        row = k.block_id() * (THREADS // config.lanes) + thread // config.lanes
        self.inside = k.compare("ult", row, tokens * heads)
        self.row = with_operators(k.select(self.inside, row, 0))
        self.column = (thread % config.lanes) * PIECE
        if config.packed:
            token, head = self.row // heads, self.row % heads
            place = k.as_index(k.load(places, [token]), unsigned_from="i32")
        else:
            head, token = self.row // tokens, self.row % tokens
            place = token
        self.statistic, self.lse = head * padded + place, head * tokens + token

    def vector_at(self, row, d: int) -> int:
        return row * d + self.column


def _prepare(k, config: RowsConfig, row: _Row, o, do, lse, lse_log2, delta) -> None:
    from mlir import ir
    from mlir.dialects import arith, vector

    floats = ir.VectorType.get([PIECE], ir.F32Type.get())
    at = row.vector_at(row.row, config.head_dim)
    o_piece, do_piece = (arith.extf(floats, k.load_vector(x, [at], PIECE)) for x in (o, do))
    product = vector.reduction(ir.F32Type.get(), vector.CombiningKind.ADD, arith.mulf(o_piece, do_piece))
    total = k.warp_reduce(product, "add", lanes=config.lanes)
    with k.if_(row.inside & k.leads_lanes(config.lanes)):
        k.store(total, delta, [row.statistic])
        k.store(arith.mulf(k.load(lse, [row.lse]), k.constant(LOG2E, "f32")), lse_log2, [row.statistic])


def _finish(k, config: RowsConfig, row: _Row, dq_sums, dq) -> None:
    from mlir import ir
    from mlir.dialects import arith, vector

    floats, halves = (ir.VectorType.get([PIECE], kind) for kind in (ir.F32Type.get(), ir.MemRefType(
        dq.type).element_type))
    scale = vector.broadcast(floats, k.constant(1 / math.sqrt(config.head_dim), "f32"))
    at = row.vector_at(row.statistic, config.head_dim)
    quarters = [k.load_vector(dq_sums, [at + 4 * i], 4) for i in range(PIECE // 4)]
    sums = vector.shuffle(*quarters, list(range(PIECE)))
    with k.if_(row.inside):
        k.store_vector(arith.truncf(halves, arith.mulf(sums, scale)), dq, [row.vector_at(row.row, config.head_dim)])
