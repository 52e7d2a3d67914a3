"""`tile-check-nvptx`: rejects, with a diagnostic at the op, what the NVPTX backend would stop the process on
or ptxas would reject, in every gpu.module (with or without tile ops) before the backend sees it: targets
other than NVVM ones, unknown chips and PTX versions, NVVM instructions the module's chips cannot run
(`nvvm.ldmatrix`, `nvvm.stmatrix`, `nvvm.mma.sync`, `nvvm.cp.async.*`: each target of the module is checked),
names that are no PTX identifiers, impossible block sizes and too much static shared memory.

Before:

    gpu.module @m [#nvvm.target<chip = "sm_90">, #nvvm.target<chip = "sm_80">] {
      gpu.func @"a b"(%p: !llvm.ptr<3>, %v: i32) kernel attributes {known_block_size = array<i32: 2048, 1, 1>} {
        nvvm.stmatrix %p, %v {layout = #nvvm.mma_layout<row>, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>,
                              eltType = #nvvm.ld_st_matrix_elt_type<b16>} : !llvm.ptr<3>, i32
        gpu.return
      }
    }

After: the IR unchanged, and three errors: at the gpu.func (its name is no PTX identifier: "Symbol name with
unsupported characters"; a block of 2048 threads: ptxas rejects .maxntid) and at the nvvm.stmatrix
(stmatrix.m8n8 needs sm_90 or newer, but the gpu.module targets sm_80: LLVM stops with "Cannot select:
intrinsic"). The pass fails.
"""
from __future__ import annotations

import re

from mlir import ir

from mlir_tile.isa import targets
from mlir_tile.contract import Rule, Violation
from mlir_tile.analysis.ir_facts import BLOCK_SIZE_ATTRIBUTES, FactCache, enclosing, foreign_targets, nvvm_targets
from mlir_tile.passes.registry import PassDefinition
from mlir_tile.analysis.uniformity import is_kernel

# gpu ops that convert-gpu-to-nvvm (MLIR 22) marks illegal without a pattern, and what to write instead.
_NO_NVVM_LOWERING = {
    "gpu.subgroup_id": "a warp's index is gpu.thread_id x divided by 32 (the builder's warp_id)",
    "gpu.num_subgroups": "the warps of a block are its gpu.block_dim product divided by 32",
    "gpu.subgroup_size": "a warp is 32 lanes on every NVIDIA GPU: use the constant 32",
}
_SYMBOL_OPS = ("gpu.func", "func.func", "llvm.func", "memref.global", "llvm.mlir.global")
_SHAPE = re.compile(r"m = (\d+), n = (\d+)(?:, k = (\d+))?")
_MMA_TYPE = re.compile(r"#nvvm\.mma_type<(\w+)>")
_OPERAND_TYPES = {"vector<2xf16>": "f16", "f64": "f64", "f32": "tf32"}


def check_nvptx(root: ir.Operation, pass_) -> None:
    problems: list[tuple[ir.Location, Violation]] = []
    facts = FactCache()
    module_targets: dict = {}

    def check(op):
        name = op.name
        if name == "gpu.module":
            problems.extend((op.location, violation) for violation in _module_problems(op))
            module_targets[op] = [t for t in nvvm_targets(op) if targets.chip_problem(t.chip) is None]
        if name.startswith("nvvm."):
            problems.extend((op.location, violation) for violation in _instruction_problems(op, module_targets))
        if name in _NO_NVVM_LOWERING and enclosing(op, ("gpu.module",)) is not None:
            problems.append((op.location, Violation(Rule.TARGET, f"{name} has no lowering to NVVM (upstream's "
                                                                  f"convert-gpu-to-nvvm leaves it illegal); "
                                                                  f"{_NO_NVVM_LOWERING[name]}")))
        if name in ("memref.global", "llvm.mlir.global") and "alignment" in op.attributes:
            problem = targets.alignment_problem(ir.IntegerAttr(op.attributes["alignment"]).value)
            if problem:
                problems.append((op.location, Violation(Rule.OPERANDS, f"{problem}; 16 is all a transfer needs")))
        if name in _SYMBOL_OPS and _in_gpu_module(op) and "sym_name" in op.attributes:
            symbol = ir.StringAttr(op.attributes["sym_name"]).value
            if not targets.PTX_IDENTIFIER.fullmatch(symbol):
                problems.append((op.location, Violation(Rule.TARGET, f"'{symbol}' is not a PTX identifier (a letter, "
                                                                     f"then letters, digits, _ or $; or _ or $ first); "
                                                                     f"rename it")))
        if name == "gpu.func":
            for attribute in BLOCK_SIZE_ATTRIBUTES:
                if attribute in op.attributes:
                    size = tuple(ir.DenseI32ArrayAttr(op.attributes[attribute]))
                    problem = targets.block_size_problem(size)
                    if problem:
                        problems.append((op.location, Violation(Rule.PARTICIPATION, f"{attribute} {size} {problem}")))
            problem = targets.static_shared_problem(facts.static_shared_bytes(op) if is_kernel(op) else 0)
            if problem:
                problems.append((op.location, Violation(Rule.BOUNDS, problem)))
        return ir.WalkResult.ADVANCE

    root.walk(check, ir.WalkOrder.PRE_ORDER)
    for location, violation in problems:
        location.emit_error(str(violation))
    if problems:
        pass_.signal_pass_failure()


def _module_problems(module: ir.Operation) -> list[Violation]:
    found = [Violation(Rule.TARGET, f"this gpu.module targets {target}: mlir-tile compiles for NVIDIA GPUs (#nvvm.target) "
                                    f"only, and its LLVM has no other GPU backend; remove that target")
             for target in foreign_targets(module)]
    for target in nvvm_targets(module):
        problem = targets.chip_problem(target.chip)
        if problem:
            problem = f"chip {problem}"
        elif targets.features_problem(target.features):
            problem = targets.features_problem(target.features)
        elif target.ptx is not None and targets.ptx_feature_problem(target.chip, target.ptx):
            problem = (f"features +ptx{target.ptx} asks for PTX {targets.ptx_version_text(target.ptx)}, but "
                       f"{targets.ptx_feature_problem(target.chip, target.ptx)}")
        if problem:
            found.append(Violation(Rule.TARGET, f"this gpu.module's #nvvm.target: {problem}"))
    return found


def _instruction_problems(op: ir.Operation, module_targets: dict) -> list[Violation]:
    shape = _SHAPE.search(str(op.attributes["shape"])) if "shape" in op.attributes else None
    shape_text = "m{}n{}{}".format(shape[1], shape[2], f"k{shape[3]}" if shape[3] else "") if shape else None
    name = op.name
    if name.startswith("nvvm.mbarrier") and len(op.operands) and str(op.operands[0].type) == "!llvm.ptr<7>":
        name += ".shared::cluster"  # on a cluster peer's barrier: another, newer form
    requirement = targets.nvvm_requirement(name, shape_text, _mma_type(op) if name == "nvvm.mma.sync" else None)
    module = enclosing(op, ("gpu.module",))
    if requirement is None or module is None:
        return []
    found = []
    for target in module_targets.get(module, ()):
        problem = targets.requirement_problem(requirement, target.chip, target.ptx)
        if problem and Violation(Rule.TARGET, f"{op.name}: {problem}") not in found:
            found.append(Violation(Rule.TARGET, f"{op.name}: {problem}"))
    return found


def _mma_type(op: ir.Operation) -> str | None:
    """The A multiplicand's PTX type: the attribute, or what the operand type implies (as the op infers it)."""
    if "multiplicandAPtxType" in op.attributes:
        match = _MMA_TYPE.search(str(op.attributes["multiplicandAPtxType"]))
        return match.group(1) if match else None
    return _OPERAND_TYPES.get(str(op.operands[0].type)) if len(op.operands) else None


def _in_gpu_module(op: ir.Operation) -> bool:
    parent = op.parent
    return parent is not None and parent.name == "gpu.module"


PASS = PassDefinition(
    "tile-check-nvptx",
    "Reject what the NVPTX backend would stop the process on, or ptxas reject: targets other than NVVM, unknown "
    "chips, PTX versions out of range, NVVM instructions the chips cannot run, names that are no PTX "
    "identifiers, impossible block sizes, over 48 KiB of static shared memory",
    check_nvptx,
)
