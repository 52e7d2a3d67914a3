"""The rules about the instruction and where it runs: its attributes, opcode, scope, participation, layout
text and target. Each takes the `Query`; the three parsers (opcode, scope, layouts) also return what they
parsed, which the later stages read."""
from __future__ import annotations

import math

from mlir_tile.isa import targets
from mlir_tile.contract.model import (ATTRIBUTES, SCOPES, WARP_SIZE, WARPGROUP_WARPS, ContractError, Opcode,
                                      Query, Rule, Scope, Violation, parse_opcode)
from mlir_tile.algebra.layout import Layout, as_layout


def check_attributes(query: Query) -> list[Violation]:
    return [
        Violation(
            Rule.ATTRIBUTES,
            f"unexpected attribute '{name}': instruction parameters are only {', '.join(ATTRIBUTES)}; opcode "
            f"qualifiers go in the opcode string and predication (pred) is not supported",
        )
        for name in query.extra_attributes
    ]


def parse_opcode_rule(query: Query) -> tuple[Opcode | None, list[Violation]]:
    try:
        return parse_opcode(query.opcode), []
    except ContractError as error:
        return None, error.violations


def parse_scope(query: Query) -> tuple[Scope | None, list[Violation]]:
    scope, block_size = query.scope, query.block_size
    if scope == "warp":
        return Scope("warp", 1), []
    if scope == "warpgroup":
        return Scope("warpgroup", WARPGROUP_WARPS), []
    if scope == "cta":
        if block_size is None:
            return None, [
                Violation(
                    Rule.SCOPE,
                    "scope \"cta\" needs the block size: add known_block_size = array<i32: X, Y, Z> to the "
                    "enclosing gpu.func (or constant block sizes to the gpu.launch), or use scope \"warp\"",
                )
            ]
        threads = math.prod(block_size)
        if threads % WARP_SIZE or targets.block_size_problem(block_size):
            return None, []  # the participation rule reports the partial warp or the impossible block
        return Scope("cta", threads // WARP_SIZE), []
    if scope == "thread":
        return None, [
            Violation(
                Rule.SCOPE,
                "scope \"thread\" (the specification's default) cannot issue ldmatrix/stmatrix: they are "
                "warp-collective; use scope \"warp\" (or \"warpgroup\"/\"cta\" with a leading group axis)",
            )
        ]
    return None, [Violation(Rule.SCOPE, f"unknown scope {scope!r}; use one of: {', '.join(SCOPES)}")]


def check_all_lanes(query: Query) -> list[Violation]:
    if not query.divergence:
        return []
    return [
        Violation(
            Rule.PARTICIPATION,
            f"all 32 lanes (of every warp its scope spans) must execute the transfer, but {query.divergence}; "
            f"move the transfer out of thread-dependent control flow (predicate the data, not the instruction)",
        )
    ]


def check_whole_warps(query: Query) -> list[Violation]:
    block_size = query.block_size
    if block_size is None:
        return []
    problem = targets.block_size_problem(block_size)
    if problem:
        return [Violation(Rule.PARTICIPATION, f"known_block_size {tuple(block_size)} {problem}")]
    threads = math.prod(block_size)
    unit = WARPGROUP_WARPS * WARP_SIZE if query.scope == "warpgroup" else WARP_SIZE
    if threads % unit == 0:
        return []
    return [
        Violation(
            Rule.PARTICIPATION,
            f"known_block_size {tuple(block_size)} has {threads} threads, not a multiple of {unit}: "
            f"a partially populated {'warpgroup' if unit > WARP_SIZE else 'warp'} cannot execute the "
            f"transfer; round the block size up to a multiple of {unit}",
        )
    ]


def parse_layouts(query: Query) -> tuple[dict[str, Layout], list[Violation]]:
    """The parsed layouts by role ("dst", "src"), and a violation for each that does not parse."""
    layouts, found = {}, []
    for role, text in (("dst", query.dst_layout), ("src", query.src_layout)):
        try:
            layouts[role] = as_layout(text)
        except ValueError as error:
            found.append(Violation(Rule.LAYOUT_SYNTAX, f"{role}_layout: {error}"))
    return layouts, found


def check_device_code(query: Query, opcode: Opcode) -> list[Violation]:
    if query.device_code:
        return []
    return [Violation(Rule.TARGET, "the transfer is in host code, outside any gpu.module or gpu.launch body; "
                                   "ldmatrix/stmatrix run on the GPU: put it in a gpu.func of a gpu.module")]


def check_nvidia_targets(query: Query, opcode: Opcode) -> list[Violation]:
    return [
        Violation(Rule.TARGET, f"the gpu.module also targets {target}, but {opcode.instruction} is an NVIDIA "
                               f"instruction and mlir-tile compiles for NVVM targets only; remove that target (or "
                               f"move the transfer into a gpu.module of its own for NVIDIA GPUs)")
        for target in query.foreign_targets
    ]


def check_chip(query: Query, opcode: Opcode) -> list[Violation]:
    """The chip is known and new enough for the instruction; the PTX version too."""
    chip, ptx = query.chip, query.ptx
    if chip is None or not query.device_code:
        return []
    if targets.features_problem(query.features):
        return [Violation(Rule.TARGET, f"the gpu.module's #nvvm.target: {targets.features_problem(query.features)}; "
                                       f"it is the one feature LLVM is given")]
    needed = targets.MINIMUM_ARCHITECTURE[opcode.instruction]
    problem = targets.chip_problem(chip, needed)
    if problem:
        return [Violation(Rule.TARGET, f"the gpu.module's #nvvm.target: chip {problem}")]
    if targets.architecture(chip) < needed:
        return [
            Violation(
                Rule.TARGET,
                f"{opcode.instruction} needs sm_{needed} or newer, but the gpu.module targets {chip}; compile for "
                f"sm_{needed} or later (e.g. tile-to-ptx{{chip={targets.DEFAULT_CHIP}}}), or drop {chip} from "
                f"its targets",
            )
        ]
    needed_ptx = max(targets.MINIMUM_PTX[opcode.instruction], targets.CHIP_MINIMUM_PTX[chip])
    if ptx is not None and ptx > targets.MAXIMUM_PTX:
        return [Violation(Rule.TARGET, f"the gpu.module's #nvvm.target asks for PTX {targets.ptx_version_text(ptx)} "
                                       f"(features +ptx{ptx}), but {targets.ptx_feature_problem(chip, ptx)}; use "
                                       f"+ptx{targets.MAXIMUM_PTX} or lower, or leave the PTX version out")]
    if ptx is None and targets.CHIP_MINIMUM_PTX[chip] < needed_ptx:
        return [
            Violation(
                Rule.TARGET,
                f"the gpu.module's #nvvm.target names no PTX version, so LLVM uses {chip}'s lowest, "
                f"{targets.ptx_version_text(targets.CHIP_MINIMUM_PTX[chip])}, but {opcode.instruction} needs PTX "
                f"{targets.ptx_version_text(needed_ptx)}; add features = \"+ptx{needed_ptx}\" to the #nvvm.target",
            )
        ]
    if ptx is None or ptx >= needed_ptx:
        return []
    version = targets.ptx_version_text
    return [
        Violation(
            Rule.TARGET,
            f"the gpu.module's #nvvm.target asks for PTX {version(ptx)} (features +ptx{ptx}), but "
            f"{opcode.instruction} needs PTX {version(targets.MINIMUM_PTX[opcode.instruction])} and {chip} needs "
            f"{version(targets.CHIP_MINIMUM_PTX[chip])}; use +ptx{needed_ptx} or later, or leave the PTX version out",
        )
    ]
