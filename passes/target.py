"""`tile-set-nvvm-target{chip=sm_90}`: fills in the chip where the IR names none; the IR's target decides.

Before:

    gpu.module @kernels [#nvvm.target<chip = "sm_80">] { ... }
    gpu.module @more { ... }
    gpu.module @bare [#nvvm.target<O = 3>] { ... }

After (chip=sm_80):

    gpu.module @kernels [#nvvm.target<chip = "sm_80">] { ... }
    gpu.module @more [#nvvm.target<chip = "sm_80">] { ... }
    gpu.module @bare [#nvvm.target<O = 3, chip = "sm_80">] { ... }

With chip=sm_90 the first gpu.module is an error at its location ([target]: it targets sm_80); nothing is
silently retargeted. Without the option, gpu.modules that name no chip get targets.DEFAULT_CHIP. Other options of a target are kept; non-NVVM targets are left alone. The verifier reads
the chip from here (stmatrix needs sm_90), so the chip is filled in before verification, not after.
"""
from __future__ import annotations

from mlir import ir

from mlir_tile.isa import targets
from mlir_tile.contract import Rule, Violation
from mlir_tile.passes.registry import Option, PassDefinition


def set_nvvm_target(root: ir.Operation, pass_, chip: str | None = None) -> None:
    """`chip` None: fill in the default chip and accept whatever chip the IR names."""
    failed = False
    asked, chip = chip, chip or targets.DEFAULT_CHIP

    def fill_in(op):
        nonlocal failed
        if op.name != "gpu.module":
            return ir.WalkResult.ADVANCE
        attributes = list(ir.ArrayAttr(op.attributes["targets"])) if "targets" in op.attributes else []
        parsed = [targets.NvvmTarget.parse(str(attribute)) for attribute in attributes]
        if not any(parsed):
            attributes.append(ir.Attribute.parse(targets.NvvmTarget.for_chip(chip).attribute))
        for position, target in enumerate(parsed):
            if target is None:
                continue
            if target.chip_named and asked and target.chip != asked:
                op.location.emit_error(str(Violation(
                    Rule.TARGET, f"this gpu.module's #nvvm.target names chip {target.chip}, but the pipeline asks "
                                 f"for chip={chip}; the IR's target decides: compile without the chip option, or "
                                 f"change the target in the IR")))
                failed = True
            elif not target.chip_named:
                attributes[position] = ir.Attribute.parse(target.with_chip(chip).attribute)
        op.attributes["targets"] = ir.ArrayAttr.get(attributes)
        return ir.WalkResult.SKIP

    root.walk(fill_in, ir.WalkOrder.PRE_ORDER)
    if failed:
        pass_.signal_pass_failure()


PASS = PassDefinition(
    "tile-set-nvvm-target",
    "Give every gpu.module that names no chip an #nvvm.target for the chip; a different chip in the IR is an error",
    set_nvvm_target,
    (Option("chip", targets.require_chip, None,
            f"the chip for gpu.modules that name none (default {targets.DEFAULT_CHIP}); one that names another is an error"),),
)
