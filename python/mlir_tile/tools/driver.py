"""What `tile-opt` and `tile-translate` share: splitting the input, parsing each part into a module with
file locations the way mlir-opt does, and collecting the diagnostics that are not errors."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from mlir import ir

from mlir_tile.dialect import make_context
from mlir_tile.diagnostics import Diag, PipelineFailure

SPLIT_MARKER = re.compile(r"^// -----\s*$", re.M)


def split_buffer(text: str | bytes, split: bool) -> list[str | bytes]:
    """The input, or its `// -----` parts, each padded with newlines so that its line numbers are those of
    the whole file (diagnostics then point into the file the user wrote). Bytecode is never split."""
    if not split or isinstance(text, bytes):
        return [text]
    chunks, start = [], 0
    for match in list(SPLIT_MARKER.finditer(text)) + [None]:
        end = match.start() if match else len(text)
        chunks.append("\n" * text.count("\n", 0, start) + text[start:end])
        if match:
            start = match.end()
    return chunks


class Session:
    """One context (with `tile` loaded) and a collector for diagnostics that are not errors."""

    def __init__(self, allow_unregistered: bool = False):
        self.context = make_context()
        self.context.allow_unregistered_dialects = allow_unregistered
        self.collected: list[Diag] = []
        self._owned_modules: list[ir.Module] = []
        self.context.attach_diagnostic_handler(self._collect)

    def _collect(self, diagnostic) -> bool:
        self.collected.extend(Diag.from_mlir(diagnostic))
        return True

    def parse(self, text: str | bytes, source_name: str) -> ir.Operation:
        """Parse like mlir-opt: one top-level builtin.module is the module; other ops get an implicit one.
        Returns the builtin.module operation."""
        with self.context:
            if isinstance(text, bytes):  # bytecode: always one builtin.module
                try:
                    module = ir.Module.parse(text)
                except ir.MLIRError as error:
                    raise PipelineFailure(None, Diag.from_error(error)) from None
                self._owned_modules.append(module)
                return module.operation
            try:
                op = ir.Operation.parse(text, source_name=source_name)
            except ir.MLIRError as error:
                if "source must contain a single top-level operation" not in str(error):
                    raise PipelineFailure(None, Diag.from_error(error)) from None
                return self.parse(_wrap_in_module(text), source_name)
            if op.operation.name == "builtin.module":
                return op.operation
            module = ir.Module.create(loc=ir.Location.file(source_name, 1, 1))
            module.body.append(op.operation)
            self._owned_modules.append(module)  # the Module object owns the IR its operation points into
            return module.operation

def _wrap_in_module(text: str) -> str:
    """An explicit module around several top-level ops; only columns on the first line move."""
    return "module {" + text + "\n}"


class InputError(Exception):
    """The input cannot be read as MLIR text; the message says why."""


BYTECODE_MAGIC = b"ML\xefR"


def read_input(path: str) -> tuple[str | bytes, str]:
    """(text, or MLIR bytecode as bytes; name for locations) of a file, or of standard input for '-'."""
    name = "<stdin>" if path == "-" else path
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as error:
        raise InputError(f"cannot read input: {error}") from None
    if data.startswith(BYTECODE_MAGIC):
        return data, name
    try:
        return data.decode("utf-8"), name
    except UnicodeDecodeError as error:
        raise InputError(f"cannot read input: {name} is not UTF-8 text (byte 0x{data[error.start]:02x} at "
                         f"offset {error.start})") from None
