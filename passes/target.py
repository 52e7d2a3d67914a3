"""`tile-set-nvvm-target{chip=sm_90}`: makes every gpu.module target the given chip.

Before:

    gpu.module @kernels [#nvvm.target<chip = "sm_80">] { ... }
    gpu.module @more { ... }

After:

    gpu.module @kernels [#nvvm.target<chip = "sm_90">] { ... }
    gpu.module @more [#nvvm.target<chip = "sm_90">] { ... }

Other options of an existing #nvvm.target are kept; non-NVVM targets are left alone. The verifier reads
the chip from here (stmatrix needs sm_90), so the chip is set before verification, not after.
"""
from __future__ import annotations

from mlir import ir

from mlir_tile import targets
from mlir_tile.passes.ir_facts import CHIP_OPTION
from mlir_tile.passes.registry import Option, PassDefinition


def set_nvvm_target(root: ir.Operation, pass_, chip: str = targets.DEFAULT_CHIP) -> None:
    def retarget(op):
        if op.name != "gpu.module":
            return ir.WalkResult.ADVANCE
        targets_ = list(ir.ArrayAttr(op.attributes["targets"])) if "targets" in op.attributes else []
        texts = [str(t) for t in targets_]
        nvvm = [i for i, t in enumerate(texts) if t.startswith("#nvvm.target")]
        if not nvvm:
            texts.append(f'#nvvm.target<chip = "{chip}">')
        for i in nvvm:
            text = texts[i]
            if CHIP_OPTION.search(text):
                texts[i] = CHIP_OPTION.sub(f'chip = "{chip}"', text)
            elif text == "#nvvm.target":
                texts[i] = f'#nvvm.target<chip = "{chip}">'
            else:
                texts[i] = text.replace("#nvvm.target<", f'#nvvm.target<chip = "{chip}", ', 1)
        op.attributes["targets"] = ir.ArrayAttr.get([ir.Attribute.parse(t) for t in texts])
        return ir.WalkResult.SKIP

    root.walk(retarget, ir.WalkOrder.PRE_ORDER)


PASS = PassDefinition(
    "tile-set-nvvm-target",
    "Give every gpu.module an #nvvm.target for the chip (replacing the chip of an existing one)",
    set_nvvm_target,
    (Option("chip", targets.require_chip, targets.DEFAULT_CHIP, "the chip every gpu.module targets"),),
)
