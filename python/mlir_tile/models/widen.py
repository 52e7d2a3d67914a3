"""Widening: the same transfer in fewer, wider instructions (pure Python). A transfer issued as .x1 or .x2 per
repeat can move two or four repeats' matrices in one instruction: the repeat mode becomes the outer sub-mode of
the matrix mode (matrix i' = i + N * t, colexicographic), on both layouts alike, so every (repeat, matrix) pair
still reads the same rows into the same register slots. Whether the wider transfer is legal (stmatrix rows
of one instruction must not overlap) is the contract's to say: `widened` asks it, for the pass
`tile-widen-matrix-transfer` and for the bank-conflict remark's hint."""
from __future__ import annotations

import re

from mlir_tile import contract
from mlir_tile.algebra.layout import Layout
from mlir_tile.algebra.operations import make_layout


def widen_layouts(opcode: str, registers: Layout, shared: Layout, group_rank: int):
    """(opcode, registers, shared) with repeat modes folded into the matrix mode while the count stays at most
    4, innermost repeat first; None when no repeat mode fits."""
    count = int(re.search(r"\.x(\d)", opcode).group(1))
    changed = False
    while True:
        repeats = range(group_rank, registers.rank - 3)
        fits = [a for a in repeats if registers.sizes[a] > 1 and count * registers.sizes[a] in (2, 4)]
        axis = fits[-1] if fits else None
        if axis is None:
            break
        count *= registers.sizes[axis]
        registers, shared = _fold(registers, axis), _fold(shared, axis)
        changed = True
    if not changed:
        return None
    return re.sub(r"\.x\d", f".x{count}", opcode, count=1), registers, shared


def _fold(layout: Layout, axis: int) -> Layout:
    """`layout` with mode `axis` moved into the matrix mode as its outer sub-mode."""
    matrix = layout.rank - 3
    modes = [make_layout(layout[matrix], layout[axis]) if position == matrix else layout[position]
             for position in range(layout.rank) if position != axis]
    folded = make_layout(*modes)
    return Layout(folded.shape, folded.stride, layout.swizzle)


def widened(transfer: contract.Transfer) -> contract.Transfer | None:
    """A checked transfer issued as fewer, wider instructions, checked by the contract; None when no repeat
    folds or the wider transfer breaks a rule. Only the shape and the per-coordinate rules can change: the
    operands, scope, target and participation are the written transfer's, which passed."""
    layouts = widen_layouts(transfer.opcode.text, transfer.registers, transfer.shared, transfer.group_rank)
    if layouts is None:
        return None
    opcode, registers, shared = layouts
    parsed = contract.parse_opcode(opcode)
    if contract.check_shape(parsed, transfer.scope, registers, shared):
        return None
    wide = contract.Transfer(parsed, transfer.scope, registers, shared, transfer.register_operand,
                             transfer.shared_operand)
    return None if contract.check_transfer(wide) else wide
