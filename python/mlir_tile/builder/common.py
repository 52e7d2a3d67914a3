"""What every part of the builder shares: its error, type parsing, argument checks and source locations."""
from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import Sequence

from mlir import ir

from mlir_tile import targets

WORKGROUP = "#gpu.address_space<workgroup>"
PRIVATE = "#gpu.address_space<private>"


class BuilderError(ValueError):
    """The builder was used in a way that cannot make IR; the message says what and how to fix it."""


def parse_type(text: ir.Type | str) -> ir.Type:
    """A type, or its text parsed in the current context (BuilderError when it is none)."""
    if isinstance(text, ir.Type):
        return text
    if not isinstance(text, str) or not text.strip():  # the parser asserts on an empty buffer
        raise BuilderError(f"expected an MLIR type or its text (such as 'i32'), got {text!r}")
    try:
        return ir.Type.parse(text)
    except ir.MLIRError as error:
        raise BuilderError(f"'{text}' is not an MLIR type: {error}") from None


def count(value, what: str, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BuilderError(f"{what} must be an integer of at least {minimum}, got {value!r}")
    return value


def identifier(name, what: str) -> str:
    if not isinstance(name, str) or not targets.PTX_IDENTIFIER.fullmatch(name):
        raise BuilderError(f"{what} {name!r} is not a PTX identifier (a letter, then letters, digits, _ or $)")
    return name


def memref_type(shape: Sequence[int], element: str = "i32", space: str | None = None) -> ir.MemRefType:
    """`memref_type((16, 4, 2))` is memref<16x4x2xi32> in the current context."""
    extents = [count(n, "a memref extent") for n in shape]
    try:
        return ir.MemRefType.get(extents, parse_type(element), memory_space=ir.Attribute.parse(space) if space else None)
    except ir.MLIRError as error:
        raise BuilderError(f"no memref of {element!r} elements: {error}") from None


def memref_value(value, what: str) -> ir.Value:
    if not isinstance(value, ir.Value) or not isinstance(value.type, ir.MemRefType):
        raise BuilderError(f"{what}: expected a memref value, got {value!r}")
    return value


_BUILDER_FILES = {str(path) for path in Path(__file__).parent.glob("*.py")} | {contextlib.__file__}


def caller_location(context: ir.Context) -> ir.Location:
    """The file and line of the first caller outside mlir_tile's builder: where a diagnostic about what it
    built should point (an op built from Python has no MLIR text to point into)."""
    frame = inspect.currentframe()
    while frame is not None and frame.f_code.co_filename in _BUILDER_FILES:
        frame = frame.f_back
    if frame is None:
        return ir.Location.unknown(context)
    return ir.Location.file(frame.f_code.co_filename, frame.f_lineno, 1, context=context)
