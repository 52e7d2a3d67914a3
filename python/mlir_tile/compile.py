"""From a module holding tile ops to PTX text, and on to a cubin, in-process (no GPU needed).

The caller's module is never changed: a copy is compiled. The chip is the IR's (`#nvvm.target`); `chip` fills
it in where the IR names none, and contradicting the IR is an error (tile-set-nvvm-target).
"""
from __future__ import annotations

import re

from mlir import ir
from mlir.dialects.gpu import ObjectAttr

from mlir_tile.diagnostics import PipelineFailure
from mlir_tile.pipeline import run_pipeline
from mlir_tile.ptx import CompileError, cubin_of_ptx

_PTX_TARGET = re.compile(r"^\.target\s+(sm_\w+)", re.M)


def compile_to_ptx_by_module(module: ir.Module | ir.Operation, chip: str | None = None, *,
                             source_name: str | None = None) -> dict[str, str]:
    """The PTX of each gpu.module (and each of its NVVM targets), by gpu.module name; a copy of `module` is
    compiled. `source_name` names the file the module was parsed from, if any (for the reproducer command)."""
    copy = module.operation.clone()
    pipeline = f"tile-to-ptx{{chip={chip}}}" if chip else "tile-to-ptx"
    try:
        run_pipeline(copy, [pipeline], input_is_file=source_name is not None)
    except PipelineFailure as failure:
        copy.erase()
        raise CompileError(failure.report(source_name or "<python module>")) from None
    texts = {}
    for op in copy.regions[0].blocks[0].operations:
        if op.operation.name != "gpu.binary":
            continue
        name = ir.StringAttr(op.operation.attributes["sym_name"]).value
        objects = [ObjectAttr(a).object.decode() for a in ir.ArrayAttr(op.operation.attributes["objects"])]
        for position, text in enumerate(objects):
            texts[name if len(objects) == 1 else f"{name}#{position}"] = text
    copy.erase()
    if not texts:
        raise CompileError("the module has no gpu.module to compile: kernels live in a gpu.module")
    return texts


def compile_to_ptx(module: ir.Module | ir.Operation, chip: str | None = None, *,
                   source_name: str | None = None) -> str:
    """The PTX of the module's one gpu.module (tile-to-ptx on a copy). Several gpu.modules (or targets) make
    several PTX texts, each with its own header, which one text cannot hold: use compile_to_ptx_by_module."""
    texts = compile_to_ptx_by_module(module, chip, source_name=source_name)
    if len(texts) > 1:
        raise CompileError(f"the module compiles to {len(texts)} PTX texts (gpu.modules/targets "
                           f"{', '.join(texts)}), and one PTX text holds one: use compile_to_ptx_by_module, or "
                           f"tile-translate --mlir-to-ptx on one gpu.module at a time")
    return next(iter(texts.values()))


def compile_to_cubin(module: ir.Module | ir.Operation, chip: str | None = None, *,
                     source_name: str | None = None) -> bytes:
    """compile_to_ptx, then the PTX assembled by nvJitLink (the ptxas of the CUDA toolkit, as a library) for
    the chip the PTX targets: a cubin that a GPU host loads without JIT-compiling anything."""
    ptx = compile_to_ptx(module, chip, source_name=source_name)
    return cubin_of_ptx(ptx, ptx_chip(ptx))


def ptx_chip(ptx: str) -> str:
    """The chip of a PTX text's `.target` line."""
    match = _PTX_TARGET.search(ptx)
    if not match:
        raise CompileError("the PTX has no .target line")
    return match.group(1)
