"""From a module holding tile ops to PTX text, and on to a cubin, in-process (no GPU needed)."""
from __future__ import annotations

from mlir import ir
from mlir.dialects.gpu import ObjectAttr

from mlir_tile import targets
from mlir_tile.diagnostics import PipelineFailure
from mlir_tile.pipeline import run_pipeline
from mlir_tile.ptx import CompileError, cubin_of_ptx


def compile_to_ptx(module: ir.Module | ir.Operation, chip: str = targets.DEFAULT_CHIP, *, source_name: str | None = None) -> str:
    """PTX for every gpu.module of `module` (tile-to-ptx{chip=...}); the module is lowered in place.
    `source_name` names the file the module was parsed from, if any (for the reproducer command)."""
    op = module.operation
    try:
        run_pipeline(op, [f"tile-to-ptx{{chip={chip}}}"], input_is_file=source_name is not None)
    except PipelineFailure as failure:
        raise CompileError(failure.report(source_name or "<python module>")) from None
    return ptx_of(op)


def compile_to_cubin(module: ir.Module | ir.Operation, chip: str = targets.DEFAULT_CHIP, *, source_name: str | None = None) -> bytes:
    """compile_to_ptx, then the PTX assembled for `chip` by nvJitLink (the ptxas of the CUDA toolkit, as a
    library): a cubin that a GPU host loads without JIT-compiling anything."""
    return cubin_of_ptx(compile_to_ptx(module, chip, source_name=source_name), chip)


def ptx_of(module: ir.Operation) -> str:
    """The PTX text of the gpu.binary ops that gpu-module-to-binary{format=isa} left in `module`."""
    texts = []
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name != "gpu.binary":
            continue
        for attribute in ir.ArrayAttr(op.operation.attributes["objects"]):
            texts.append(ObjectAttr(attribute).object.decode())
    if not texts:
        raise CompileError("no gpu.binary in the module: run gpu-module-to-binary{format=isa} first")
    return "\n".join(texts)
