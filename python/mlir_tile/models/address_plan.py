"""How the lowering addresses each repeat of a checked transfer (pure Python, no MLIR).

Every lane's shared address is `lane part + repeat part`: the lane part (row, matrix and warp of the lane,
from the layout's row, matrix and group modes) is computed once per function, the repeat part is a constant.
Unswizzled, each repeat is one constant added to the lane's pointer, which the NVPTX backend folds into the
instruction's immediate. Swizzled (`Sw<B,M,S>` of the offset), the swizzle of a sum is not the sum of
swizzles, so each repeat takes the cheapest form that is exact for every lane of the scope, decided here by
evaluating every lane:

    "shift"    swizzle(lane + c) == swizzle(lane) + K for every lane: the swizzled lane part, K in the immediate
    "xor"      lane & c == 0 for every lane (no carries, so lane + c == lane ^ c, and the swizzle is linear over
               xor): swizzle(lane) ^ swizzle(low) + high, one xor, where c = low + high and high, the top bits
               of c that the swizzle leaves alone, is the immediate
    "swizzle"  otherwise swizzle(lane + c): an add and the swizzle's three instructions

`offsets(plan, ...)` evaluates a plan lane by lane, so tests compare it with the layout itself.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir_tile.contract import Transfer, WARP_SIZE


@dataclass(frozen=True)
class RepeatAddress:
    form: str  # "plain" (unswizzled), "shift", "xor" or "swizzle"
    operand: int  # xor: swizzle(c), the value xored; swizzle: c, the value added before the swizzle; else 0
    immediate: int  # elements added last: the instruction's immediate (c, the memref's static offset
                    # included, is inside the swizzle when there is one)
    slots: tuple[int, ...]  # the register slot of each matrix


@dataclass(frozen=True)
class AddressPlan:
    repeats: tuple[RepeatAddress, ...]

    @property
    def forms(self) -> tuple[str, ...]:
        return tuple(repeat.form for repeat in self.repeats)


def lane_parts(transfer: Transfer) -> list[int]:
    """The unswizzled lane part of the address (repeat 0), for every lane of every warp of the scope."""
    count, repeat = transfer.opcode.count, (0,) * len(transfer.repeat_shape)
    return [transfer.shared_linear_offset(warp, repeat, (lane // 8) % count, lane % 8)
            for warp in range(transfer.scope.warps) for lane in range(WARP_SIZE)]


def address_plan(transfer: Transfer) -> AddressPlan:
    swizzle, static = transfer.shared.swizzle, transfer.shared_operand.static_offset
    lanes = lane_parts(transfer) if swizzle is not None else []
    repeats = []
    for repeat in transfer.repeats():
        constant = static + transfer.shared_linear_offset(0, repeat, 0, 0)  # the static offset enters the swizzle
        slots = tuple(transfer.register_slot(repeat, matrix) for matrix in range(transfer.opcode.count))
        if swizzle is None:
            repeats.append(RepeatAddress("plain", 0, constant, slots))
            continue
        shift = swizzle(lanes[0] + constant) - swizzle(lanes[0])
        if all(swizzle(lane + constant) - swizzle(lane) == shift for lane in lanes):
            repeats.append(RepeatAddress("shift", 0, shift, slots))
        elif all(lane & constant == 0 for lane in lanes):
            low, high = _xor_and_immediate(constant, lanes, swizzle)
            repeats.append(RepeatAddress("xor", swizzle(low), high, slots))
        else:
            repeats.append(RepeatAddress("swizzle", constant, 0, slots))
    return AddressPlan(tuple(repeats))


def _xor_and_immediate(constant: int, lanes: list[int], swizzle) -> tuple[int, int]:
    """constant = low + high, high its top bits, as many as can be: (swizzle(lane) ^ swizzle(low)) + high ==
    swizzle(lane + constant) for every lane. The part the swizzle leaves alone (whole rows of the tile, say)
    then goes to the instruction's immediate, and repeats that differ only there share one xor'd register
    (a kernel's loop keeps one per column, not one per row and column)."""
    for bit in range(constant.bit_length()):
        high = constant >> bit << bit
        low = constant - high
        if all((swizzle(lane) ^ swizzle(low)) + high == swizzle(lane + constant) for lane in lanes):
            return low, high
    return constant, 0  # all of it xor'd


def offsets(plan: AddressPlan, transfer: Transfer) -> list[list[int]]:
    """Each repeat's element offset for every lane of the scope (as `lane_parts` orders them), as the code
    the plan describes computes it."""
    swizzle = transfer.shared.swizzle
    result = []
    for repeat in plan.repeats:
        row = []
        for lane in lane_parts(transfer):
            if repeat.form == "plain":
                value = lane
            elif repeat.form == "shift":
                value = swizzle(lane)
            elif repeat.form == "xor":
                value = swizzle(lane) ^ repeat.operand
            else:
                value = swizzle(lane + repeat.operand)
            row.append(value + repeat.immediate)
        result.append(row)
    return result
