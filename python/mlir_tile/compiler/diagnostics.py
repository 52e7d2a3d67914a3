"""Diagnostics as the drivers report them: `Diag` (severity, file:line:col, message) made from MLIR's
diagnostics, and `PipelineFailure`, the one error a pipeline run raises (naming the failed pass, with a
reproducer)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from mlir import ir

PIPELINE_LOCATION = "<pass pipeline>"  # where an error in the pipeline text (not in the IR) is reported
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
    def from_location(cls, severity: str, location: ir.Location, message: str) -> "Diag":
        if location.is_a_file():
            return cls(severity, location.filename, location.start_line, location.start_col, message)
        return cls(severity, None, None, None, message)

    @classmethod
    def from_error(cls, error: ir.MLIRError) -> list["Diag"]:
        found = [d for diagnostic in error.error_diagnostics for d in cls.from_mlir(diagnostic)]
        return found or [cls("error", None, None, None, str(error))]

    def shifted(self, lines: int, source_name: str) -> "Diag":
        """This diagnostic with its line, and the places its message names, `lines` further down in
        `source_name` (for a part of a split input)."""
        if not lines:
            return self
        place = re.compile(rf"\(at {re.escape(source_name)}:(\d+):(\d+)\)")
        message = place.sub(lambda m: f"(at {source_name}:{int(m.group(1)) + lines}:{m.group(2)})", self.message)
        line = self.line + lines if self.line is not None and self.file == source_name else self.line
        return Diag(self.severity, self.file, line, self.column, message)

    def __str__(self) -> str:
        if self.line is not None:
            where = f"{self.file}:{self.line}:{self.column}"
        else:
            where = self.file if self.file is not None else "loc(unknown)"
        return f"{where}: {self.severity}: {self.message}"


class PipelineFailure(Exception):
    """A step failed: `element` names it (None for a parse error), `diagnostics` say why, and `reproducer`
    holds the IR the step received when it was not the first."""

    def __init__(self, element: str | None, diagnostics: list[Diag], reproducer: str | None = None):
        self.element, self.diagnostics, self.reproducer = element, diagnostics, reproducer
        super().__init__("\n".join(str(d) for d in diagnostics))

    def __reduce__(self):  # pickled from its fields, not from its message
        return type(self), (self.element, self.diagnostics, self.reproducer)

    def hint(self, input_name: str, reproducer_path: str | None = None) -> str | None:
        """Which pass failed and how to run it alone; None for a failure before any pass. The IR the pass
        received (when it was not the input itself) is written to `reproducer_path` only when one is given,
        as mlir-opt writes a reproducer only when asked."""
        if self.element is None:
            return None
        command = f"--pass-pipeline='builtin.module({self.element})'"
        if self.reproducer is None:
            return f"pass '{self.element}' failed; reproduce with: tile-opt {input_name} {command}"
        if reproducer_path is None:
            return (f"pass '{self.element}' failed; --mlir-pass-pipeline-crash-reproducer=FILE writes the IR it "
                    f"received to FILE, to reproduce with tile-opt FILE {command}")
        try:
            with open(reproducer_path, "w") as stream:
                stream.write(self.reproducer)
        except OSError as error:
            return (f"pass '{self.element}' failed; error: cannot write the reproducer '{reproducer_path}': "
                    f"{error.strerror or error}")
        return f"pass '{self.element}' failed; reproduce with: tile-opt {reproducer_path} {command}"

    def shifted(self, lines: int, source_name: str) -> "PipelineFailure":
        """This failure with its diagnostics `lines` further down in `source_name` (a part of a split input)."""
        return PipelineFailure(self.element, [d.shifted(lines, source_name) for d in self.diagnostics], self.reproducer)

    def report(self, input_name: str, reproducer_path: str | None = None) -> str:
        hint = self.hint(input_name, reproducer_path)
        return "\n".join([str(d) for d in self.diagnostics] + ([hint] if hint else []))
