"""What every part of the builder shares: its error, type parsing, argument checks and source locations."""
from __future__ import annotations

import contextlib
import inspect
import re
import math
from pathlib import Path
from typing import Sequence

from mlir import ir

from mlir_tile.isa import targets
from mlir_tile.analysis.ir_facts import memory_space

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


MAX_EXTENT = 2**31 - 1  # the most elements of a buffer: every element a 32-bit index reaches


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def count(value, what: str, minimum: int = 1, maximum: int = MAX_EXTENT) -> int:
    if not is_int(value) or not minimum <= value <= maximum:
        raise BuilderError(f"{what} must be an integer from {minimum} to {maximum}, got {value!r}")
    return value


def power_of_two(value, what: str, minimum: int = 1, maximum: int = targets.MAX_ALIGNMENT) -> int:
    """An alignment: a power of two from `minimum` to `maximum` (by default, `targets.MAX_ALIGNMENT`)."""
    if not is_int(value) or not minimum <= value <= maximum or value & (value - 1):
        raise BuilderError(f"{what} must be a power of two from {minimum} to {maximum}, got {value!r}")
    return value


# The element types of buffers and registers (what the NVPTX backend loads and stores), and of scalars.
ELEMENT_TYPES = ("i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64", "index")
SCALAR_TYPES = ("i1",) + ELEMENT_TYPES


def element_type(text, what: str, allowed: tuple[str, ...] = ELEMENT_TYPES) -> ir.Type:
    """One of `allowed` (type texts), as a type (BuilderError naming `what` otherwise)."""
    kind = parse_type(text)
    if str(kind) not in allowed:
        raise BuilderError(f"{what}: the element type is one of {', '.join(allowed)}, got {text!r}")
    return kind


def typed_value(value, what: str, *types: str) -> ir.Value:
    """`value`, an ir.Value of one of `types` (their text), else BuilderError."""
    if not isinstance(value, ir.Value) or str(value.type) not in types:
        got = f"a value of type {value.type}" if isinstance(value, ir.Value) else repr(value)
        raise BuilderError(f"{what}: expected a value of type {' or '.join(types)}, got {got}")
    return value


def identifier(name, what: str) -> str:
    if not isinstance(name, str) or not targets.PTX_IDENTIFIER.fullmatch(name):
        raise BuilderError(f"{what} {name!r} is not a PTX identifier (a letter, then letters, digits, _ or $)")
    return name


def memref_type(shape: Sequence[int], element: str = "i32", space: str | None = None) -> ir.MemRefType:
    """`memref_type((16, 4, 2))` is memref<16x4x2xi32> in the current context: at most MAX_EXTENT elements of
    one of ELEMENT_TYPES."""
    if not isinstance(shape, (list, tuple)) or not shape:
        raise BuilderError(f"a memref shape is a non-empty list of extents, got {shape!r}")
    extents = [count(n, "a memref extent") for n in shape]
    if math.prod(extents) > MAX_EXTENT:
        raise BuilderError(f"a memref of shape {tuple(extents)} has more than {MAX_EXTENT} elements")
    kind = element_type(element, "memref")
    return ir.MemRefType.get(extents, kind, memory_space=ir.Attribute.parse(space) if space else None)


def memref_value(value, what: str, space: str | None = None) -> ir.Value:
    """`value`, a memref (in `space`: "global", "shared" or "private", when given), else BuilderError."""
    if not isinstance(value, ir.Value) or not isinstance(value.type, ir.MemRefType):
        got = f"a value of type {value.type}" if isinstance(value, ir.Value) else repr(value)
        raise BuilderError(f"{what}: expected a memref value, got {got}")
    if space is not None and memory_space(ir.MemRefType(value.type)) != space:
        raise BuilderError(f"{what}: expected a memref in {space} memory, got {value.type}")
    return value


def values_in(arguments, depth: int = 3):
    """The ir.Values among `arguments` and inside their lists and tuples (a coordinate's (value, int))."""
    for argument in arguments:
        if isinstance(argument, ir.Value):
            yield argument
        elif isinstance(argument, (list, tuple)) and depth:
            yield from values_in(argument, depth - 1)


def enclosing_blocks(block: ir.Block) -> list[ir.Block]:
    """`block` and every block that encloses it, innermost first: where a value visible in `block` is made."""
    blocks = []
    while block is not None:
        blocks.append(block)
        parent = block.owner
        block = parent.operation.block if parent is not None and parent.operation.parent is not None else None
    return blocks


def home_block(value: ir.Value) -> ir.Block:
    owner = value.owner
    return owner.operation.block if isinstance(owner, (ir.Operation, ir.OpView)) else owner


def _function_name(block: ir.Block) -> str | None:
    for enclosing in enclosing_blocks(block):
        op = enclosing.owner
        if op is not None and op.operation.name == "gpu.func":
            return ir.StringAttr(op.operation.attributes["sym_name"]).value
    return None


def check_visible(values, what: str, here: list[ir.Block]) -> None:
    """BuilderError naming the value and where it was made unless each value is visible in the innermost
    block of `here` (enclosing_blocks of the insertion point): made in it or in a block around it."""
    for value in values:
        home = home_block(value)
        if home in here:
            continue
        made = f"{value.owner.name}'s result" if isinstance(value.owner, (ir.Operation, ir.OpView)) else \
            "a block argument (a loop index or carried value)"
        theirs, ours = _function_name(home), _function_name(here[0])
        if theirs != ours or (here[-1] not in enclosing_blocks(home)):
            raise BuilderError(f"{what}: the value ({made}, of type {value.type}) was made in kernel "
                               f"'{theirs}', and cannot be used in kernel '{ours}'")
        raise BuilderError(f"{what}: the value ({made}, of type {value.type}) was made inside a loop or branch "
                           f"that has ended, and is not visible here; carry it out of the loop (loop(carried=...)) "
                           f"or the branch (if_(results=...))")


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


def location_text(location: ir.Location) -> str:
    """`file:line` of a file location (what `caller_location` makes), else the location as MLIR prints it."""
    text = str(location).removeprefix("loc(").removesuffix(")")
    match = re.fullmatch(r'"(.*)":(\d+):\d+', text)
    return f"{match.group(1)}:{match.group(2)}" if match else text


# An open Kernel's function -> the analyses its transfers' checks share (`FactCache(uniformities=...)`): one
# uniformity analysis of the kernel, extended as it grows, where a fresh one per transfer took about half of a
# GEMM's build time.
KERNEL_ANALYSES: dict = {}


def kernel_analyses(op: ir.Operation) -> dict | None:
    """The analyses of the open Kernel whose function holds `op`; None outside one (a fresh analysis then)."""
    parent = op.operation.parent
    while parent is not None:
        parent = parent.operation
        if parent in KERNEL_ANALYSES:
            return KERNEL_ANALYSES[parent]
        parent = parent.parent
    return None
