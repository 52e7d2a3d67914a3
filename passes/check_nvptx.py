"""`tile-check-nvptx`: rejects, with a diagnostic at the op, what the NVPTX backend would stop the process on
or ptxas would reject, in every gpu.module (with or without tile ops) before the backend sees it.

Before:

    gpu.module @m [#nvvm.target<chip = "sm_90", features = "+ptx60">] {
      gpu.func @"a b"() kernel attributes {known_block_size = array<i32: 2048, 1, 1>} { gpu.return }
    }

After: the IR unchanged, and three errors, at the gpu.module (PTX 6.0 is older than sm_90 allows: LLVM stops
with "PTX version 6.0 does not support target sm_90"), and at the gpu.func (its name is no PTX identifier:
"Symbol name with unsupported characters"; a block of 2048 threads: ptxas rejects .maxntid). The pass fails.
"""
from __future__ import annotations

from mlir import ir

from mlir_tile import targets
from mlir_tile.passes.ir_facts import BLOCK_SIZE_ATTRIBUTES, FactCache, nvvm_targets
from mlir_tile.passes.registry import PassDefinition
from mlir_tile.passes.uniformity import is_kernel

_SYMBOL_OPS = ("gpu.func", "func.func", "llvm.func", "memref.global", "llvm.mlir.global")


def check_nvptx(root: ir.Operation, pass_) -> None:
    problems: list[tuple[ir.Location, str]] = []
    facts = FactCache()

    def check(op):
        name = op.name
        if name == "gpu.module":
            for target in nvvm_targets(op):
                problem = targets.chip_problem(target.chip)
                if problem is None and targets.features_problem(target.features):
                    problem = targets.features_problem(target.features)
                elif problem is None and target.ptx is not None:
                    problem = targets.ptx_feature_problem(target.chip, target.ptx)
                    problem = problem and f"features +ptx{target.ptx} asks for PTX {targets.ptx_version_text(target.ptx)}, but {problem}"
                elif problem:
                    problem = f"chip {problem}"
                if problem:
                    problems.append((op.location, f"[target] this gpu.module's #nvvm.target: {problem}"))
        if name == "memref.global" and "alignment" in op.attributes:
            alignment = ir.IntegerAttr(op.attributes["alignment"]).value
            if alignment > targets.MAX_ALIGNMENT:
                problems.append((op.location, f"[operands] alignment {alignment} is above the {targets.MAX_ALIGNMENT} "
                                              f"bytes ptxas accepts"))
        if name in _SYMBOL_OPS and _in_gpu_module(op) and "sym_name" in op.attributes:
            symbol = ir.StringAttr(op.attributes["sym_name"]).value
            if not targets.PTX_IDENTIFIER.fullmatch(symbol):
                problems.append((op.location, f"[target] '{symbol}' is not a PTX identifier (a letter, then letters, "
                                              f"digits, _ or $; or _ or $ first); rename it"))
        if name == "gpu.func":
            for attribute in BLOCK_SIZE_ATTRIBUTES:
                if attribute in op.attributes:
                    size = tuple(ir.DenseI32ArrayAttr(op.attributes[attribute]))
                    problem = targets.block_size_problem(size)
                    if problem:
                        problems.append((op.location, f"[participation] {attribute} {size} {problem}"))
            used = facts.static_shared_bytes(op) if is_kernel(op) else 0
            if used > targets.STATIC_SHARED_BYTES:
                problems.append((op.location, f"[bounds] the kernel declares {used} bytes of static shared memory, "
                                              f"more than the {targets.STATIC_SHARED_BYTES} a kernel can declare; use "
                                              f"gpu.dynamic_shared_memory for more"))
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    root.walk(check, ir.WalkOrder.PRE_ORDER)
    for location, message in problems:
        location.emit_error(message)
    if problems:
        pass_.signal_pass_failure()


def _in_gpu_module(op: ir.Operation) -> bool:
    parent = op.parent
    return parent is not None and parent.name == "gpu.module"


PASS = PassDefinition(
    "tile-check-nvptx",
    "Reject what the NVPTX backend would stop the process on, or ptxas reject: unknown chips, PTX versions out "
    "of range, names that are no PTX identifiers, impossible block sizes, over 48 KiB of static shared memory",
    check_nvptx,
)
