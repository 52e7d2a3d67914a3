"""Layout offsets as IR: the one emitter of a mode's offset at a coordinate value and of a swizzle, shared by the
lowering (`passes/lower.py`, in i32) and the builder (`builder/memory.py`, in index), one layer below both.

`constant(n)` makes an integer constant of the type the caller computes in; every function emits only `arith`
ops of that type. Sub-coordinates are colexicographic (CuTe's order), extracted with shifts and masks where the
extents are powers of two.
"""
from __future__ import annotations

from typing import Callable

from mlir import ir
from mlir.dialects import arith

Constant = Callable[[int], ir.Value]


def mode_offset(value: ir.Value, mode: list[tuple[int, int]], constant: Constant) -> ir.Value | None:
    """The memory offset of a mode's coordinate `value` (below the mode's size; `mode` its (extent, stride)
    leaves): each sub-coordinate times its stride, summed. None where every term is 0 (extents 1, strides 0)."""
    terms, below = [], 1
    for position, (extent, stride) in enumerate(mode):
        if extent > 1 and stride:
            part = value
            if below > 1:
                part = (arith.shrui(part, constant(below.bit_length() - 1)) if power_of_two(below)
                        else arith.divui(part, constant(below)))
            if position < len(mode) - 1:
                part = (arith.andi(part, constant(extent - 1)) if power_of_two(extent)
                        else arith.remui(part, constant(extent)))
            terms.append(scaled(part, stride, constant))
        below *= extent
    if not terms:
        return None
    offset = terms[0]
    for term in terms[1:]:
        offset = arith.addi(offset, term)
    return offset


def swizzled(offset: ir.Value, swizzle, constant: Constant) -> ir.Value:
    """`offset ^ ((offset >> S) & mask)`: Sw<B,M,S> in three instructions."""
    moved = arith.shrui(offset, constant(swizzle.shift))
    return arith.xori(offset, arith.andi(moved, constant(swizzle.mask)))


def scaled(value: ir.Value, factor: int, constant: Constant) -> ir.Value:
    """value * factor: a shift for a power of two."""
    if factor == 1:
        return value
    if power_of_two(factor):
        return arith.shli(value, constant(factor.bit_length() - 1))
    return arith.muli(value, constant(factor))


def power_of_two(number: int) -> bool:
    return number > 0 and number & (number - 1) == 0
