"""`tile-verify-matrix-transfer`: checks every `tile.matrix_transfer` against the legality contract.

Before (an x2 load whose third row starts at byte 72):

    "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,8,4):(1,4@laneid,1@laneid)">,
        src_layout = #tile.layout<"(2,8,4):(128,18,1)">} : (...) -> ()

After: the IR is unchanged when every transfer is legal; otherwise one error per broken rule at the op:

    in.mlir:3:3: error: 'tile.matrix_transfer' op [row-alignment] src_layout (2,8,4):(128,18,1): shared row
    (matrix=0, row=1, word=0) starts at byte 72 (element 18), not a multiple of 16; ...

and the pass fails. The rules themselves live in `mlir_tile.contract`.
"""
from __future__ import annotations

from mlir import ir

from mlir_tile import contract
from mlir_tile.dialect import ATTRIBUTE_NAMES, OP_NAME, layout_text, string_value
from mlir_tile.ir_facts import FactCache, block_size, target_arguments


def transfer_ops(root: ir.Operation) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def collect(op):
        if op.name == OP_NAME:
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    root.walk(collect, ir.WalkOrder.PRE_ORDER)
    return found


def op_violations(op: ir.Operation, facts: FactCache) -> tuple[contract.Transfer | None, list]:
    """The contract's verdict on one op, reading every fact from the IR."""
    structural = []
    attributes = {}
    for name in ATTRIBUTE_NAMES:
        if name not in op.attributes:
            structural.append(contract.Violation("attributes", f"missing attribute '{name}'"))
            continue
        attr = op.attributes[name]
        value = layout_text(attr) if name.endswith("_layout") else string_value(attr)
        if value is None:
            kind = '#tile.layout<"...">' if name.endswith("_layout") else "a string"
            structural.append(contract.Violation("attributes", f"attribute '{name}' must be {kind}, got {attr}"))
        attributes[name] = value
    memrefs = []
    for role, operand in zip(("dst", "src"), op.operands):
        if not isinstance(operand.type, ir.MemRefType):
            structural.append(contract.Violation("operands", f"{role} must be a memref, got {operand.type}"))
        memrefs.append(operand)
    if len(memrefs) != 2:
        structural.append(contract.Violation("operands", f"expected 2 operands (dst, src), got {len(memrefs)}"))
    if structural:
        return None, structural
    extra = [name for name in (a if isinstance(a, str) else a.name for a in op.attributes) if name not in ATTRIBUTE_NAMES]
    return contract.check(
        opcode=attributes["opcode"],
        scope=attributes["scope"],
        dst_layout=attributes["dst_layout"],
        src_layout=attributes["src_layout"],
        dst=facts.operand(memrefs[0]),
        src=facts.operand(memrefs[1]),
        extra_attributes=extra,
        block_size=block_size(op),
        divergence=uniformity.divergence_reason(op) if (uniformity := facts.uniformity(op)) else None,
        **target_arguments(op),
    )


def verify_matrix_transfer(root: ir.Operation, pass_) -> None:
    facts = FactCache()
    failed = False
    for op in transfer_ops(root):
        _, violations = op_violations(op, facts)
        for violation in violations:
            op.location.emit_error(f"'{OP_NAME}' op {violation}")
        failed = failed or bool(violations)
    if failed:
        pass_.signal_pass_failure()
