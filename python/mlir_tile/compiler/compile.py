"""From a module holding tile ops to PTX text, and on to a cubin, in-process (no GPU needed).

The caller's module is never changed: a copy is compiled. The chip is the IR's (`#nvvm.target`); `chip` fills
it in where the IR names none, and contradicting the IR is an error (tile-set-nvvm-target). A gpu.module
with several #nvvm.targets, like a module with several gpu.modules, compiles to one PTX text for each.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from mlir import ir
from mlir.dialects.gpu import ObjectAttr

from mlir_tile.isa import targets
from mlir_tile.compiler.diagnostics import Diag, PipelineFailure
from mlir_tile.passes.registry import TILE_TO_PTX
from mlir_tile.compiler.pipeline import run_pipeline
from mlir_tile.runtime.ptx import CompileError, cubin_of_ptx

_PTX_TARGET = re.compile(r"^\.target\s+(sm_\w+)", re.M)
PYTHON_MODULE = "<python module>"  # how errors name a module that was built in Python, not read from a file


class PtxText(NamedTuple):
    module: str  # the gpu.module's name
    chip: str  # the chip of its #nvvm.target this text is for
    text: str


class PipelineError(CompileError):
    """A pass failed: `failure` holds its diagnostics (with locations) and the failing pass."""

    def __init__(self, failure: PipelineFailure, source_name: str | None):
        self.failure, self.source_name = failure, source_name
        if source_name is not None or failure.element is None or failure.reproducer is None:
            super().__init__(failure.report(source_name or PYTHON_MODULE))
            return
        super().__init__("\n".join([str(d) for d in failure.diagnostics] + [
            f"pass '{failure.element}' failed; the IR it received is this error's failure.reproducer (run it with "
            f"tile-opt FILE --pass-pipeline='builtin.module({failure.element})')"]))

    def __reduce__(self):  # pickled from its failure, not from its message
        return type(self), (self.failure, self.source_name)


def compile_to_ptx_texts(module: ir.Module | ir.Operation, chip: str | None = None, *,
                         source_name: str | None = None) -> list[PtxText]:
    """The PTX of each gpu.module for each of its NVVM targets, in order; a copy of `module` is compiled.
    `source_name` names the file the module was parsed from, if any (for the diagnostics and the hint)."""
    if chip is not None:
        targets.require_chip(chip)  # a TargetError before any pipeline is built
    misplaced = _nested_gpu_modules(module.operation)
    if misplaced:
        raise PipelineError(PipelineFailure(None, misplaced), source_name)
    copy = module.operation.clone()
    try:
        run_pipeline(copy, [TILE_TO_PTX.step(chip=chip)], input_is_file=source_name is not None)
    except PipelineFailure as failure:
        copy.erase()
        raise PipelineError(failure, source_name) from None
    texts = []
    for op in copy.regions[0].blocks[0].operations:
        if op.operation.name == "gpu.binary":
            name = ir.StringAttr(op.operation.attributes["sym_name"]).value
            for attribute in ir.ArrayAttr(op.operation.attributes["objects"]):
                text = ObjectAttr(attribute).object.decode()
                texts.append(PtxText(name, ptx_chip(text), text))
    copy.erase()
    if not texts:
        raise PipelineError(PipelineFailure(None, [_located(module.operation, "the module has no gpu.module to compile: "
                                                                              "kernels live in a gpu.module")]), source_name)
    return texts


def _located(op: ir.Operation, message: str) -> Diag:
    location = op.location
    if location.is_a_file():
        return Diag("error", location.filename, location.start_line, location.start_col, message)
    return Diag("error", None, None, None, message)


def _nested_gpu_modules(root: ir.Operation) -> list[Diag]:
    """An error at each gpu.module that is not at the top level of the module (tile-to-ptx, like
    gpu-module-to-binary, compiles those alone: a nested one would be left out without a word)."""
    found = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "gpu.module" and op.parent is not None and op.parent.parent is not None:
            found.append(_located(op, f"gpu.module @{ir.StringAttr(op.attributes['sym_name']).value} is inside "
                                      f"a '{op.parent.name}', not at the top level of the module: only top-level "
                                      f"gpu.modules are compiled; move it out"))
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def compile_to_ptx(module: ir.Module | ir.Operation, chip: str | None = None, *,
                   source_name: str | None = None) -> str:
    """The PTX of the module's one gpu.module (tile-to-ptx on a copy). Several gpu.modules (or targets) make
    several PTX texts, each with its own header, which one text cannot hold: use compile_to_ptx_texts."""
    texts = compile_to_ptx_texts(module, chip, source_name=source_name)
    if len(texts) > 1:
        names = ", ".join(f"@{t.module} ({t.chip})" for t in texts)
        raise CompileError(f"{source_name or PYTHON_MODULE}: error: the module compiles to {len(texts)} PTX "
                           f"texts ({names}), and one PTX text holds one: use compile_to_ptx_texts, or "
                           f"tile-translate --mlir-to-ptx, which writes each")
    return texts[0].text


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
