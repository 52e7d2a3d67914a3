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

from mlir_tile import targets
from mlir_tile.passes.ir_facts import CHIP_OPTION
from mlir_tile.passes.registry import Option, PassDefinition


def set_nvvm_target(root: ir.Operation, pass_, chip: str | None = None) -> None:
    """`chip` None: fill in the default chip and accept whatever chip the IR names."""
    failed = False
    asked, chip = chip, chip or targets.DEFAULT_CHIP

    def fill_in(op):
        nonlocal failed
        if op.name != "gpu.module":
            return ir.WalkResult.ADVANCE
        texts = [str(t) for t in ir.ArrayAttr(op.attributes["targets"])] if "targets" in op.attributes else []
        nvvm = [i for i, t in enumerate(texts) if t.startswith("#nvvm.target")]
        if not nvvm:
            texts.append(f'#nvvm.target<chip = "{chip}">')
        for i in nvvm:
            named = CHIP_OPTION.search(texts[i])
            if named and asked and named.group("chip") != asked:
                op.location.emit_error(
                    f"[target] this gpu.module's #nvvm.target names chip {named.group('chip')}, but the pipeline "
                    f"asks for chip={chip}; the IR's target decides: compile without the chip option, or change "
                    f"the target in the IR")
                failed = True
            elif not named:
                texts[i] = (f'#nvvm.target<chip = "{chip}">' if texts[i] == "#nvvm.target"
                            else texts[i].replace("#nvvm.target<", f'#nvvm.target<chip = "{chip}", ', 1))
        op.attributes["targets"] = ir.ArrayAttr.get([ir.Attribute.parse(t) for t in texts])
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
