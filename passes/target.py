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

from mlir_tile.contract import NVPTX_CHIPS, known_chips
from mlir_tile.ir_facts import CHIP_OPTION


def set_nvvm_target(root: ir.Operation, pass_, chip: str = "sm_90") -> None:
    if chip not in NVPTX_CHIPS:  # the NVPTX backend would abort the process on it
        root.location.emit_error(f"tile-set-nvvm-target: '{chip}' is not a chip that LLVM's NVPTX backend "
                                 f"knows; use one of {known_chips()}")
        pass_.signal_pass_failure()
        return

    def retarget(op):
        if op.name != "gpu.module":
            return ir.WalkResult.ADVANCE
        targets = list(ir.ArrayAttr(op.attributes["targets"])) if "targets" in op.attributes else []
        texts = [str(t) for t in targets]
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
