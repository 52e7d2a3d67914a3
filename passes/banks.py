"""`tile-analyze-bank-conflicts`: a remark at each tile.matrix_transfer with its shared-memory wavefronts.

Before (the specification's example):

    "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", ...
        src_layout = #tile.layout<"(2,2,8,4):(128,8,16,1)">} : (...) -> ()

After: the IR unchanged, and

    in.mlir:3:3: remark: [banks] 2 x ldmatrix.x2: 8 wavefronts per instruction, minimum 2 (4-way conflict);
        tile-widen-matrix-transfer issues it as 1 x ldmatrix.x4

The model is `mlir_tile.models.banks`; the hint, where the contract allows a wider transfer, `mlir_tile.models.widen`.
Illegal transfers get no remark (the verifier reports them).
"""
from __future__ import annotations

from mlir import ir

from mlir_tile.models.banks import transfer_wavefronts
from mlir_tile.analysis.adapter import transfer_ops, transfer_verdict
from mlir_tile.analysis.ir_facts import FactCache
from mlir_tile.passes.registry import PassDefinition
from mlir_tile.passes.remarks import report
from mlir_tile.models.widen import widened


def analyze_bank_conflicts(root: ir.Operation, pass_) -> None:
    facts = FactCache()
    for op in transfer_ops(root):
        transfer, violations = transfer_verdict(op, facts)
        if transfer is None:
            continue
        text = transfer_wavefronts(transfer).remark(transfer.opcode.instruction)
        wide = widened(transfer)
        if wide is not None:  # fewer instructions for the same wavefronts: issue slots left for other work
            instructions = len(list(wide.repeats()))
            text += (f"; tile-widen-matrix-transfer issues it as {instructions} x "
                     f"{wide.opcode.instruction}.x{wide.opcode.count}")
        report(op, "remark", text)


PASS = PassDefinition(
    "tile-analyze-bank-conflicts",
    "A remark at each transfer: its shared-memory wavefronts per instruction against the minimum (bank conflicts)",
    analyze_bank_conflicts,
)
