"""The one path from a `tile.matrix_transfer` op to the contract's verdict.

The verifier pass, the lowering (whose precondition it is) and the Python builder all call
`transfer_verdict`, so they cannot disagree: every fact the contract needs (operand memory, offsets, proven
alignment, the kernel's block size, the chip, whether thread-dependent control flow surrounds the op) is read
here, from the IR, in one way.

    op --(MatrixTransferOp accessors, ir_facts)--> contract.Query --> contract.verdict --> (Transfer | None, violations)
"""
from __future__ import annotations

from mlir import ir

from mlir_tile import contract
from mlir_tile.dialect import OP_NAME
from mlir_tile.dialect.tile import MatrixTransferOp
from mlir_tile.analysis.ir_facts import FactCache
from mlir_tile.analysis.uniformity import divergence


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
    A gpu.module with several #nvvm.targets is compiled for each, so the op must be legal for every one.
    `facts` caches what a pass run asks many times; pass one per run (or none for a single op)."""
    facts = facts or FactCache()
    operation = op.operation
    place = facts.place(operation)
    fields = dict(
        opcode=op.opcode,
        scope=op.scope,
        dst_layout=op.dst_layout_text,
        src_layout=op.src_layout_text,
        dst=facts.operand(op.dst, place.launch),
        src=facts.operand(op.src, place.launch),
        extra_attributes=tuple(op.extra_attributes),
        block_size=facts.block_size(operation),
        # host code: a [target] error. A warp's transfer may sit under a branch that differs between warps
        # (warp specialization), a warpgroup's under one that differs between warpgroups, a block's under none
        divergence=divergence(facts, operation, op.scope if op.scope in ("warp", "warpgroup") else "cta")
        if place.device_code else None,
        device_code=place.device_code,
        static_shared_bytes=facts.static_shared_bytes(operation),
    )
    verdicts = [contract.verdict(contract.Query(**fields, **target)) for target in facts.targets(operation)]
    if len(verdicts) == 1:
        return verdicts[0].transfer, list(verdicts[0].violations)
    violations = []
    for found in verdicts:
        violations += [violation for violation in found.violations if violation not in violations]
    return (None if violations else verdicts[0].transfer), violations


def diagnostic(op: MatrixTransferOp, violation: contract.Violation, prefix: str = "") -> None:
    """Emit `violation` as an error at the op, the way every tile pass reports a rule."""
    op.operation.location.emit_error(f"'{OP_NAME}' op {prefix}{violation}")
