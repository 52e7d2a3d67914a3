"""From a `Query` to the contract's `Verdict`: `CHECKS` lists every check with its rule and stage, and
`verdict` runs them stage by stage. Each stage needs what the one before established:

    parse      the opcode, the scope and the layouts            check(query) -> (value, violations)
    query      rules that need nothing parsed                   check(query)
    operands   rules on the operands (the opcode says which     check(query, opcode)
               one holds the registers)
    shape      once registers are private and shared shared     check(opcode, scope, registers, shared)
    transfer   every coordinate of the checked Transfer         check(transfer)

A check with `after` runs only when those checks found nothing (lane ownership before slots, whole rows
before their alignment), so one fault is not reported again as its consequences.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, NamedTuple

from mlir_tile.contract import instruction, operands, registers, shape, shared
from mlir_tile.contract.model import ContractError, Query, Rule, Transfer, Violation


@dataclass(frozen=True)
class Check:
    rule: Rule
    stage: str
    function: Callable
    after: tuple[Callable, ...] = ()


_OWNER = (registers.check_register_swizzle, registers.check_warp_strides, registers.check_lane_axes,
          registers.check_lane_of_each_word)

CHECKS: tuple[Check, ...] = (
    Check(Rule.OPCODE, "parse", instruction.parse_opcode_rule),
    Check(Rule.SCOPE, "parse", instruction.parse_scope),
    Check(Rule.LAYOUT_SYNTAX, "parse", instruction.parse_layouts),
    Check(Rule.ATTRIBUTES, "query", instruction.check_attributes),
    Check(Rule.PARTICIPATION, "query", instruction.check_all_lanes),
    Check(Rule.PARTICIPATION, "query", instruction.check_whole_warps),
    Check(Rule.TARGET, "operands", instruction.check_device_code),
    Check(Rule.TARGET, "operands", instruction.check_nvidia_targets),
    Check(Rule.TARGET, "operands", instruction.check_chip),
    Check(Rule.OPERANDS, "operands", operands.check_register_memory),
    Check(Rule.OPERANDS, "operands", operands.check_shared_memory),
    Check(Rule.OPERANDS, "operands", operands.check_element_types),
    Check(Rule.OPERANDS, "operands", operands.check_register_contiguity),
    Check(Rule.OPERANDS, "operands", operands.check_register_origin),
    Check(Rule.OPERANDS, "operands", operands.check_register_allocation_layout),
    Check(Rule.OPERANDS, "operands", operands.check_shared_origin),
    Check(Rule.OPERANDS, "operands", operands.check_shared_alignment_limit),
    Check(Rule.OPERANDS, "operands", operands.check_register_offset),
    Check(Rule.BOUNDS, "operands", operands.check_static_shapes),
    Check(Rule.BOUNDS, "operands", operands.check_shared_size),
    Check(Rule.BOUNDS, "operands", operands.check_register_size),
    Check(Rule.BOUNDS, "operands", operands.check_static_shared_memory),
    Check(Rule.ROW_ALIGNMENT, "operands", operands.check_dynamic_offset_alignment),
    Check(Rule.SHAPE, "shape", shape.check_shape),
    Check(Rule.REGISTER_OWNER, "transfer", registers.check_register_swizzle),
    Check(Rule.REGISTER_OWNER, "transfer", registers.check_warp_strides, _OWNER[:1]),
    Check(Rule.REGISTER_OWNER, "transfer", registers.check_lane_axes, _OWNER[:2]),
    Check(Rule.REGISTER_OWNER, "transfer", registers.check_lane_of_each_word, _OWNER[:3]),
    Check(Rule.BOUNDS, "transfer", registers.check_register_bounds, _OWNER),
    Check(Rule.REGISTER_OVERLAP, "transfer", registers.check_register_overlap, _OWNER),
    Check(Rule.SHARED_ROW, "transfer", shared.check_shared_row),
    Check(Rule.BOUNDS, "transfer", shared.check_shared_bounds, (shared.check_shared_row,)),
    Check(Rule.ROW_ALIGNMENT, "transfer", shared.check_buffer_alignment, (shared.check_shared_row,)),
    Check(Rule.ROW_ALIGNMENT, "transfer", shared.check_row_starts, (shared.check_shared_row,)),
    Check(Rule.ROW_ALIGNMENT, "transfer", shared.check_swizzle_origin),
    Check(Rule.ROW_ALIGNMENT, "transfer", shared.check_swizzle_alignment),
    Check(Rule.STORE_RACE, "transfer", shared.check_store_race, (shared.check_shared_row,)),
)

# Each rule and the functions that check it (the scope's group axis is part of the shape check).
RULE_CHECKS: dict[Rule, tuple[Callable, ...]] = {
    rule: tuple(check.function for check in CHECKS if check.rule is rule) for rule in Rule
}
RULE_CHECKS[Rule.SCOPE] += (shape.check_shape,)


def _stage(name: str) -> tuple[Check, ...]:
    return tuple(check for check in CHECKS if check.stage == name)


def _run(stage: str, *arguments) -> list[Violation]:
    found_by: dict[Callable, list[Violation]] = {}
    for check in _stage(stage):
        if any(found_by.get(earlier) for earlier in check.after):
            continue
        found_by[check.function] = check.function(*arguments)
    return [violation for found in found_by.values() for violation in found]


def check_transfer(transfer: Transfer) -> list[Violation]:
    """The per-coordinate rules of a transfer whose opcode, operands and shapes hold (the widening asks this
    of a wider form of a checked transfer)."""
    return _run("transfer", transfer)


class Verdict(NamedTuple):
    transfer: Transfer | None  # the checked transfer; None when any rule fails
    violations: tuple[Violation, ...]

    def require(self) -> Transfer:
        """The checked Transfer, or ContractError with every violation."""
        if self.violations:
            raise ContractError(self.violations)
        assert self.transfer is not None
        return self.transfer


def verdict(query: Query) -> Verdict:
    """Every violation of the contract by `query`, and the checked Transfer when there is none."""
    try:
        return _remembered_verdict(query)
    except TypeError:  # an unhashable attribute value (only from malformed input): judged without the cache
        return _verdict(query)


@functools.lru_cache(maxsize=4096)
def _remembered_verdict(query: Query) -> Verdict:
    return _verdict(query)


def _verdict(query: Query) -> Verdict:
    violations, parsed = [], {}
    for check in _stage("parse"):
        parsed[check.rule], found = check.function(query)
        violations += found
    violations += _run("query", query)
    opcode, scope, layouts = parsed[Rule.OPCODE], parsed[Rule.SCOPE], parsed[Rule.LAYOUT_SYNTAX]
    if opcode is None:
        return Verdict(None, tuple(violations))
    violations += _run("operands", query, opcode)
    register_operand, shared_operand = opcode.registers_and_shared(query.dst, query.src)
    wrong_memory = register_operand.memory != "private" or shared_operand.memory != "shared"
    if wrong_memory or len(layouts) < 2 or scope is None:
        return Verdict(None, tuple(violations))  # which layout describes registers is unknown: checking would mislead
    register_layout, shared_layout = layouts[opcode.register_role], layouts[opcode.shared_role]
    found = _run("shape", opcode, scope, register_layout, shared_layout)
    if found:
        return Verdict(None, tuple(violations + found))
    transfer = Transfer(opcode, scope, register_layout, shared_layout, register_operand, shared_operand)
    violations += check_transfer(transfer)
    return Verdict(None if violations else transfer, tuple(violations))
