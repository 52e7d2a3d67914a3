"""`tile-grid-constant-tensor-maps`: a kernel's TMA tensor maps passed by value, as CUDA's `const __grid_constant__
CUtensorMap` parameters are (CUTLASS's and FlashAttention-3's form).

The builder marks the kernel's tensor-map arguments (`builder.TensorMap`) on its gpu.func as
`tile.tensor_maps = array<i64: ...>` (the lowering keeps a function's attributes, not its arguments' `llvm.byval`).
After the conversion to the LLVM dialect each such argument becomes

    %arg0: !llvm.ptr {llvm.byval = !llvm.array<128 x i8>, llvm.align = 64 : i64, nvvm.grid_constant}

which NVPTX emits as `.param .align 64 .b8 k_param_0[128]`, its address taken by `cvta.param` for the TMA
instructions (the 128 bytes are read in the parameter space, never copied to local memory).

Why: a map passed by pointer lives in global memory, so each call had to copy it from the host before the launch
(host time, and a copy that a CUDA graph's capture refuses); by value, the launch carries it, and a graph
keeps it with the kernel node.
"""
from __future__ import annotations

from mlir import ir

from mlir_tile.passes.registry import PassDefinition

MARK = "tile.tensor_maps"
MAP_BYTES, MAP_ALIGNMENT = 128, 64  # a CUtensorMap: 128 bytes on 64


def grid_constant_tensor_maps(root: ir.Operation, pass_) -> None:
    def rewrite(op):
        if op.name == "llvm.func" and MARK in op.attributes:
            marked = set(ir.DenseI64ArrayAttr(op.attributes[MARK]))
            arguments = (list(ir.ArrayAttr(op.attributes["arg_attrs"])) if "arg_attrs" in op.attributes
                         else [ir.DictAttr.get({})] * len(op.regions[0].blocks[0].arguments))
            by_value = {"llvm.byval": ir.TypeAttr.get(ir.Type.parse(f"!llvm.array<{MAP_BYTES} x i8>")),
                        "llvm.align": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), MAP_ALIGNMENT),
                        "nvvm.grid_constant": ir.UnitAttr.get()}
            op.attributes["arg_attrs"] = ir.ArrayAttr.get([
                ir.DictAttr.get({**{entry.name: entry.attr for entry in ir.DictAttr(attributes)}, **by_value})
                if index in marked else attributes for index, attributes in enumerate(arguments)])
            del op.attributes[MARK]
        return ir.WalkResult.ADVANCE

    root.walk(rewrite, ir.WalkOrder.PRE_ORDER)


PASS = PassDefinition(
    "tile-grid-constant-tensor-maps",
    "Pass the kernel arguments the builder marks as TMA tensor maps (tile.tensor_maps) by value: byval, 64-byte "
    "aligned, nvvm.grid_constant",
    grid_constant_tensor_maps,
)
