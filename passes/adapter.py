"""The one path from a `tile.matrix_transfer` op to the contract's verdict.

The verifier pass, the lowering (whose precondition it is) and the Python builder all call
`transfer_verdict`, so they cannot disagree: every fact the contract needs (operand memory, offsets, proven
alignment, the kernel's block size, the chip, whether thread-dependent control flow surrounds the op) is read
here, from the IR, in one way.

    op --(MatrixTransferOp accessors, ir_facts)--> contract.check(...) --> (Transfer | None, [Violation])
"""
from __future__ import annotations

from mlir import ir

from mlir_tile import contract
from mlir_tile.dialect import OP_NAME
from mlir_tile.dialect.tile import MatrixTransferOp
from mlir_tile.passes.ir_facts import FactCache


def transfer_ops(root: ir.Operation) -> list[MatrixTransferOp]:
    """Every tile.matrix_transfer under `root`, in program order."""
    found: list[MatrixTransferOp] = []

    def collect(op):
        if op.name == OP_NAME:
            found.append(op.opview if isinstance(op, ir.Operation) else op)
        return ir.WalkResult.ADVANCE

    root.walk(collect, ir.WalkOrder.PRE_ORDER)
    return found


def transfer_verdict(
    op: MatrixTransferOp, facts: FactCache | None = None
) -> tuple[contract.Transfer | None, list[contract.Violation]]:
    """The contract's verdict on one op: the checked Transfer (None when a rule fails) and every violation.
    `facts` caches what a pass run asks many times; pass one per run (or none for a single op)."""
    facts = facts or FactCache()
    operation = op.operation
    device_code = facts.place(operation).device_code
    return contract.check(
        opcode=op.opcode,
        scope=op.scope,
        dst_layout=op.dst_layout_text,
        src_layout=op.src_layout_text,
        dst=facts.operand(op.dst),
        src=facts.operand(op.src),
        extra_attributes=op.extra_attributes,
        block_size=facts.block_size(operation),
        divergence=facts.divergence(operation) if device_code else None,  # host code: a [target] error
        device_code=device_code,
        static_shared_bytes=facts.static_shared_bytes(operation),
        **facts.target_arguments(operation),
    )


def diagnostic(op: MatrixTransferOp, violation: contract.Violation, prefix: str = "") -> None:
    """Emit `violation` as an error at the op, the way every tile pass reports a rule."""
    op.operation.location.emit_error(f"'{OP_NAME}' op {prefix}{violation}")
