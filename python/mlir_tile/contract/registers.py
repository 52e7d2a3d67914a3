"""The rules on a checked transfer's registers: which lane owns each word, and the register slots inside
their memref and (for loads) distinct."""
from __future__ import annotations

from typing import Iterable

from mlir_tile.contract.model import ROWS, WORDS, Rule, Transfer, Violation, tuple_text
from mlir_tile.algebra.layout import Layout, ThreadStride


def mode_strides(layout: Layout) -> Iterable[tuple[int, object]]:
    """(mode, stride) of every leaf stride, nested modes included."""
    for axis in range(layout.rank):
        for stride in layout.flat_strides(axis):
            yield axis, stride


def check_register_swizzle(transfer: Transfer) -> list[Violation]:
    layout, role = transfer.registers, transfer.register_role
    if layout.swizzle is None:
        return []
    return [Violation(Rule.REGISTER_OWNER, f"{role}_layout {layout}: registers are not memory, so a register "
                                           f"layout takes no swizzle; swizzle the shared layout")]


def check_warp_strides(transfer: Transfer) -> list[Violation]:
    """@warpid only on the group axis, as 1@warpid, and the group axis nothing else."""
    layout, scope, role = transfer.registers, transfer.scope, transfer.register_role
    found = []
    for axis, stride in mode_strides(layout):
        is_group_axis = transfer.group_rank and axis == 0 and len(layout.mode(0)) == 1
        if isinstance(stride, ThreadStride) and stride.axis == "warpid":
            if not scope.has_group_axis:
                found.append(Violation(Rule.REGISTER_OWNER, f"{role}_layout {layout} axis {axis} has stride {stride}, "
                                                            f"but scope \"warp\" has no group axis; @warpid is only "
                                                            f"for the leading group axis of scope \"warpgroup\" or "
                                                            f"\"cta\""))
            elif not is_group_axis or stride.scale != 1:
                found.append(Violation(Rule.REGISTER_OWNER, f"{role}_layout {layout} axis {axis} has stride {stride}; "
                                                            f"only the leading group axis maps to warps, with stride "
                                                            f"1@warpid"))
        elif transfer.group_rank and axis == 0:
            found.append(Violation(Rule.REGISTER_OWNER, f"{role}_layout {layout}: the group axis must have stride "
                                                        f"1@warpid (warp g of the {scope.name} holds the registers of "
                                                        f"group coordinate g), got {stride}"))
    return found


def check_lane_axes(transfer: Transfer) -> list[Violation]:
    """Only the row and word axes map to lanes."""
    layout, role = transfer.registers, transfer.register_role
    for axis, stride in mode_strides(layout):
        if axis < layout.rank - 2 and isinstance(stride, ThreadStride) and stride.axis == "laneid":
            return [Violation(Rule.REGISTER_OWNER, f"{role}_layout {layout} axis {axis} has stride {stride}; lanes "
                                                   f"are fixed by the instruction (word (matrix,row,word) goes to "
                                                   f"lane 4*row+word), so only the row and word axes map to @laneid")]
    return []


def check_lane_of_each_word(transfer: Transfer) -> list[Violation]:
    """Word (i, j, w) in lane 4j+w at the matrix's own slot. The strides are linear, so one matrix at repeat 0
    proves every coordinate."""
    layout, role = transfer.registers, transfer.register_role
    origin = (0,) * (layout.rank - 2)
    for row in range(ROWS):
        for word in range(WORDS):
            point = layout(*origin, row, word)
            owner = point.threads.get("laneid", 0)
            expected = WORDS * row + word
            if owner == expected and point.offset == 0:
                continue
            text = transfer.coordinate_text(origin + (row, word))
            if owner != expected:
                problem = (f"register word {text} is mapped to lane {owner}, but the instruction delivers it to lane "
                           f"4*row+word = {expected}")
            else:
                problem = (f"register word {text} is mapped to register slot offset {point.offset} of its matrix; "
                           f"row and word select the lane, not a register")
            return [Violation(Rule.REGISTER_OWNER, f"{role}_layout {layout}: {problem}; give the row axis stride "
                                                   f"4@laneid and the word axis 1@laneid")]
    return []


def _register_slots(transfer: Transfer) -> Iterable[tuple[int, str]]:
    """(slot, where) of each (repeat, matrix), `where` as the diagnostics name it."""
    for repeat in transfer.repeats():
        for matrix in range(transfer.opcode.count):
            where = f"(repeat={tuple_text(repeat)}, matrix={matrix})" if repeat else f"(matrix={matrix})"
            yield transfer.register_slot(repeat, matrix), where


def check_register_bounds(transfer: Transfer) -> list[Violation]:
    extent, role, layout = transfer.register_operand.extent, transfer.register_role, transfer.registers
    offset = transfer.register_operand.offset
    if extent is None or offset is None:
        return []
    for slot, where in _register_slots(transfer):
        if not 0 <= slot - offset < extent:
            return [
                Violation(
                    Rule.BOUNDS,
                    f"{role}_layout {layout}: register slot {slot} of {where} is outside {role}, which has "
                    f"{extent} slots per thread{f' from its offset {offset}' if offset else ''}; enlarge the "
                    f"register memref or change the register strides",
                )
            ]
    return []


def check_register_overlap(transfer: Transfer) -> list[Violation]:
    if not transfer.opcode.is_load or transfer.register_operand.offset is None:
        return []
    role, layout = transfer.register_role, transfer.registers
    writers: dict[int, str] = {}
    for slot, where in _register_slots(transfer):
        if slot in writers:
            return [
                Violation(
                    Rule.REGISTER_OVERLAP,
                    f"{role}_layout {layout}: loaded register slot {slot} is written by both {writers[slot]} and "
                    f"{where}; loaded slots must be distinct, so give the repeat and matrix axes strides that "
                    f"separate them",
                )
            ]
        writers[slot] = where
    return []
