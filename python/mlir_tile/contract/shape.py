"""The shape rule: both layouts end in the opcode's (N, 8, 4) atom, have one shape, lead with the scope's
group axis, and ask for no more words per thread than a thread has registers."""
from __future__ import annotations

import math

from mlir_tile.contract.model import MAX_REGISTERS, ROWS, WORDS, Opcode, Rule, Scope, Violation, tuple_text as _t
from mlir_tile.algebra.layout import Layout


def check_shape(opcode: Opcode, scope: Scope, registers: Layout, shared: Layout) -> list[Violation]:
    found = []
    atom = (opcode.count, ROWS, WORDS)
    for role, layout in ((opcode.register_role, registers), (opcode.shared_role, shared)):
        if layout.rank < 3 or layout.sizes[-3:] != atom:
            found.append(
                Violation(
                    Rule.SHAPE,
                    f"{role}_layout {layout} must end in (matrix,row,word) = {_t(atom)} for "
                    f"{opcode.text} (.x{opcode.count}); leading axes are "
                    f"{'the group axis, then ' if scope.has_group_axis else ''}repeats",
                )
            )
    if found:
        return found
    words = math.prod(registers.sizes[(1 if scope.has_group_axis else 0):-3]) * opcode.count
    if words > MAX_REGISTERS:
        return [
            Violation(
                Rule.SHAPE,
                f"the transfer moves {words} words per thread ({words // opcode.count} repeats x {opcode.count} "
                f"matrices), but a thread has at most {MAX_REGISTERS} registers, so they would spill to local "
                f"memory; split it into transfers of at most {MAX_REGISTERS} words",
            )
        ]
    if registers.sizes != shared.sizes:
        return [
            Violation(
                Rule.SHAPE,
                f"dst_layout and src_layout have different shapes: {_t(registers.sizes)} (registers) vs "
                f"{_t(shared.sizes)} (shared); both describe the same transfer coordinates (mode sizes; each mode "
                f"may nest differently on the two sides)",
            )
        ]
    if scope.has_group_axis and (registers.rank < 4 or registers.sizes[0] != scope.warps):
        return [
            Violation(
                Rule.SCOPE,
                f"scope \"{scope.name}\" has {scope.warps} warps, so both layouts need a leading group axis "
                f"of extent {scope.warps} (register stride 1@warpid); got shape {_t(registers.sizes)}",
            )
        ]
    return []
