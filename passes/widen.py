"""`tile-widen-matrix-transfer`: the same transfer in fewer, wider instructions, where the contract allows.
Opt-in: never in the default pipelines (the specification's lowering repeats the written instruction).

Before (the specification's example: two x2, one per repeat):

    "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,2,8,4):(8,2,4@laneid,1@laneid)">,
        src_layout = #tile.layout<"(2,2,8,4):(128,8,16,1)">} : (...) -> ()

After (one x4: the repeat is the outer sub-mode of the matrix mode):

    "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"((2,2),8,4):((2,8),4@laneid,1@laneid)">,
        src_layout = #tile.layout<"((2,2),8,4):((8,128),16,1)">} : (...) -> ()

A widening the contract rejects (stmatrix rows of different repeats that overlap would race in one
instruction) is not made; illegal transfers are left to the verifier.
"""
from __future__ import annotations

from mlir import ir

from mlir_tile.dialect import layout_attr
from mlir_tile.analysis.adapter import transfer_ops, transfer_verdict
from mlir_tile.analysis.ir_facts import FactCache
from mlir_tile.passes.registry import PassDefinition
from mlir_tile.models.widen import widened


def widen_matrix_transfer(root: ir.Operation, pass_) -> None:
    facts = FactCache()
    for op in transfer_ops(root):
        transfer, _ = transfer_verdict(op, facts)
        wide = widened(transfer) if transfer is not None else None
        if wide is None:
            continue
        dst, src = wide.opcode.dst_and_src(wide.registers, wide.shared)
        attributes = op.operation.attributes
        attributes["opcode"] = ir.StringAttr.get(wide.opcode.text)
        attributes["dst_layout"], attributes["src_layout"] = layout_attr(dst), layout_attr(src)


PASS = PassDefinition(
    "tile-widen-matrix-transfer",
    "Opt-in: issue a transfer's .x1/.x2 repeats as fewer, wider instructions where the contract allows",
    widen_matrix_transfer,
)
