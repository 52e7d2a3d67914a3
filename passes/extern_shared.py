"""`tile-extern-dynamic-shared`: makes the zero-sized workgroup globals that convert-gpu-to-nvvm creates for
`gpu.dynamic_shared_memory` external declarations, as CUDA's `extern __shared__ char smem[];` is.

Before (after convert-gpu-to-nvvm):

    llvm.mlir.global internal @__dynamic_shmem__0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>

After:

    llvm.mlir.global external @__dynamic_shmem__0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>

Why: an internal global of zero bytes is an object that every access overruns, so LLVM deleted every load
and store through it (a kernel that reads dynamic shared memory compiled to `{ ret; }`, upstream's pipeline
too); an external one is the `.extern .shared .align 16 .b8 name[]` that the launch's dynamic size backs.

A gpu.module with `tile.dynamic_shared_alignment = N` (the builder's `dynamic_shared(alignment=N)`, which
also tells the verifier through `memref.assume_alignment`) gets `.align N`: ptxas then places the dynamic
window on an N-byte boundary, which makes the assumption true (a swizzle's period, for instance).
"""
from __future__ import annotations

from mlir import ir

from mlir_tile.dialect import ALIGNMENT_ATTRIBUTE
from mlir_tile.passes.registry import PassDefinition

WORKGROUP_ADDRESS_SPACE = 3


def extern_dynamic_shared(root: ir.Operation, pass_) -> None:
    external = ir.Attribute.parse("#llvm.linkage<external>")

    def rewrite(op):
        if op.name == "llvm.mlir.global" and _is_zero_sized_workgroup_array(op):
            op.attributes["linkage"] = external
            module = op.parent
            if module is not None and ALIGNMENT_ATTRIBUTE in module.attributes:
                wanted = ir.IntegerAttr(module.attributes[ALIGNMENT_ATTRIBUTE]).value
                current = ir.IntegerAttr(op.attributes["alignment"]).value if "alignment" in op.attributes else 1
                op.attributes["alignment"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), max(wanted, current))
        return ir.WalkResult.ADVANCE

    root.walk(rewrite, ir.WalkOrder.PRE_ORDER)


def _is_zero_sized_workgroup_array(op: ir.Operation) -> bool:
    attributes = op.attributes
    if "addr_space" not in attributes or ir.IntegerAttr(attributes["addr_space"]).value != WORKGROUP_ADDRESS_SPACE:
        return False
    return str(ir.TypeAttr(attributes["global_type"]).value).startswith("!llvm.array<0 x")


PASS = PassDefinition(
    "tile-extern-dynamic-shared",
    "Make the zero-sized workgroup globals of gpu.dynamic_shared_memory external (.extern .shared), so LLVM "
    "keeps the accesses through them",
    extern_dynamic_shared,
)
