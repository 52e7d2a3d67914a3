"""`tile-verify-matrix-transfer`: checks every `tile.matrix_transfer` against the legality contract.

Before (an x2 load whose second row starts at byte 72):

    "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,8,4):(1,4@laneid,1@laneid)">,
        src_layout = #tile.layout<"(2,8,4):(128,18,1)">} : (...) -> ()

After: the IR is unchanged when every transfer is legal; otherwise one error per broken rule at the op:

    in.mlir:3:3: error: 'tile.matrix_transfer' op [row-alignment] src_layout (2,8,4):(128,18,1): shared row
    (matrix=0, row=1, word=0) starts at byte 72 (element 18), not a multiple of 16; ...

and the pass fails. The rules live in `mlir_tile.contract`; the facts come through `passes.adapter`.
"""
from __future__ import annotations

from mlir import ir

from mlir_tile.models.banks import transfer_wavefronts
from mlir_tile.analysis.adapter import diagnostic, transfer_ops, transfer_verdict
from mlir_tile.analysis.ir_facts import FactCache
from mlir_tile.passes.registry import Option, PassDefinition, parse_boolean
from mlir_tile.passes.remarks import report


def verify_matrix_transfer(root: ir.Operation, pass_, warn_bank_conflicts: bool = False) -> None:
    facts = FactCache()
    failed = False
    for op in transfer_ops(root):
        transfer, violations = transfer_verdict(op, facts)
        for violation in violations:
            diagnostic(op, violation)
        failed = failed or bool(violations)
        if transfer is not None and warn_bank_conflicts:
            wavefronts = transfer_wavefronts(transfer)
            if wavefronts.worst > wavefronts.minimum:
                report(op, "warning", wavefronts.remark(transfer.opcode.instruction))
    if failed:
        pass_.signal_pass_failure()


PASS = PassDefinition(
    "tile-verify-matrix-transfer",
    "Check every tile.matrix_transfer against the ldmatrix/stmatrix legality contract",
    verify_matrix_transfer,
    (Option("warn-bank-conflicts", parse_boolean, False, "warn at each transfer with bank conflicts (tile-analyze-"
                                                    "bank-conflicts' model)"),),
)

