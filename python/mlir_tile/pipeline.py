"""Running a pipeline of tile and upstream passes on a module, one element at a time, so that a failure
names its pass and can hand back the IR the failing pass received."""
from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass

from mlir import ir

from mlir_tile.passes import expand, step_manager

SEVERITY = {
    ir.DiagnosticSeverity.ERROR: "error",
    ir.DiagnosticSeverity.WARNING: "warning",
    ir.DiagnosticSeverity.NOTE: "note",
    ir.DiagnosticSeverity.REMARK: "remark",
}


@dataclass
class Diag:
    severity: str
    file: str | None
    line: int | None
    column: int | None
    message: str

    @classmethod
    def from_mlir(cls, diagnostic, severity: str | None = None) -> list["Diag"]:
        location = diagnostic.location
        file = line = column = None
        if location.is_a_file():
            file, line, column = location.filename, location.start_line, location.start_col
        own = cls(severity or SEVERITY[diagnostic.severity], file, line, column, diagnostic.message)
        return [own] + [n for note in diagnostic.notes for n in cls.from_mlir(note, "note")]

    @classmethod
    def from_error(cls, error: ir.MLIRError) -> list["Diag"]:
        found = [d for diagnostic in error.error_diagnostics for d in cls.from_mlir(diagnostic)]
        return found or [cls("error", None, None, None, str(error))]

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.file is not None else "loc(unknown)"
        return f"{where}: {self.severity}: {self.message}"


class PipelineFailure(Exception):
    """A step failed: `element` names it (None for a parse error), `diagnostics` say why, and `reproducer`
    holds the IR the step received when it was not the first."""

    def __init__(self, element: str | None, diagnostics: list[Diag], reproducer: str | None = None):
        self.element, self.diagnostics, self.reproducer = element, diagnostics, reproducer
        super().__init__("\n".join(str(d) for d in diagnostics))

    def reproducer_command(self, input_name: str) -> str:
        """The tile-opt command that runs the failed step alone on the IR it received."""
        source = input_name
        if self.reproducer is not None:
            handle, source = tempfile.mkstemp(prefix="tile-repro-", suffix=".mlir")
            with os.fdopen(handle, "w") as stream:
                stream.write(self.reproducer)
        return f"tile-opt {source} --pass-pipeline='builtin.module({self.element})'"

    def report(self, input_name: str) -> str:
        lines = [str(d) for d in self.diagnostics]
        if self.element is not None:
            lines.append(f"pass '{self.element}' failed; reproduce with: {self.reproducer_command(input_name)}")
        return "\n".join(lines)


def run_pipeline(module: ir.Operation, elements: list[str], print_after_all: bool = False) -> None:
    """Run each (expanded) pipeline element as its own step on a builtin.module operation."""
    context = module.context
    for position, element in enumerate(expand(elements)):
        before = module.get_asm(enable_debug_info=True) if position else None
        try:
            manager = step_manager(element, context)
        except ValueError as error:
            raise PipelineFailure(element, [Diag("error", None, None, None, str(error))]) from None
        try:
            manager.run(module)
        except ir.MLIRError as error:
            raise PipelineFailure(element, Diag.from_error(error), before) from None
        except RuntimeError as error:  # a Python pass raised: report it as that pass's failure
            message = str(error).strip().splitlines()[-1]
            raise PipelineFailure(element, [Diag("error", None, None, None, f"internal error: {message}")], before) from None
        if print_after_all:
            sys.stderr.write(f"// -----// IR Dump After {element} //----- //\n{module}\n")
