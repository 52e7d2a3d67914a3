"""Facts the contract needs, read off MLIR: operand memory, provable base alignment, the kernel's block
size and whether an op sits under thread-dependent control flow."""
from __future__ import annotations

import math
import re
from typing import NamedTuple

from mlir import ir

from mlir_tile import targets
from mlir_tile.contract import Operand

_SPACE_NAMES = {"workgroup": "shared", "private": "private", "global": "global"}
_SPACE_NUMBERS = {3: "shared", 5: "private", 1: "global", 0: "global"}

# Ops whose result is the same buffer at a (statically typed) offset: alignment of the base carries over.
_VIEW_OPS = {
    "memref.subview",
    "memref.reinterpret_cast",
    "memref.cast",
    "memref.collapse_shape",
    "memref.expand_shape",
    "memref.memory_space_cast",
}
_THREAD_ID_OPS = {
    "gpu.thread_id",
    "gpu.lane_id",
    "gpu.global_id",
    "nvvm.read.ptx.sreg.tid.x",
    "nvvm.read.ptx.sreg.tid.y",
    "nvvm.read.ptx.sreg.tid.z",
    "nvvm.read.ptx.sreg.laneid",
}
BLOCK_SIZE_ATTRIBUTES = ("known_block_size", "gpu.known_block_size")


def memory_space(memref: ir.MemRefType) -> str:
    space = memref.memory_space
    if space is None:
        return "global"
    if isinstance(space, ir.IntegerAttr):
        return _SPACE_NUMBERS.get(space.value, f"address space {space.value}")
    text = str(space)
    for name, role in _SPACE_NAMES.items():
        if text == f"#gpu.address_space<{name}>":
            return role
    return text


def operand_facts(value: ir.Value, facts: "FactCache | None" = None) -> Operand:
    """The contract's view of a memref value (the caller checked it is a memref)."""
    memref = ir.MemRefType(value.type)
    element = memref.element_type
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    extent = offset = multiple = None
    try:
        strides, static_offset = memref.get_strides_and_offset()
    except (ValueError, RuntimeError):
        strides, static_offset = [dynamic], dynamic
    if ir.ShapedType(memref).has_static_shape and dynamic not in strides:
        extent = sum((n - 1) * s for n, s in zip(memref.shape, strides)) + 1 if memref.shape else 1
    if static_offset != dynamic:
        offset = static_offset
    else:
        multiple = dynamic_offset_multiple(value)
    return Operand(
        memory=memory_space(memref),
        element_bits=_element_width(element),
        element_type=str(element),
        extent=extent,
        offset=offset,
        base_alignment=base_alignment(value, facts or FactCache()),
        offset_multiple=multiple,
    )


def _defining_op(value: ir.Value) -> ir.Operation | None:
    """The op that produces `value`; None for a block argument."""
    owner = value.owner
    return owner.operation if isinstance(owner, (ir.OpView, ir.Operation)) else None


def dynamic_offset_multiple(value: ir.Value) -> int | None:
    """What the element offset of a memref view is provably a multiple of, from the view op that made it
    (memref.subview: source offset + sum of offset * source stride; memref.reinterpret_cast: its offset)."""
    op = _defining_op(value)
    if op is None:
        return None
    if op.name in ("memref.cast", "memref.memory_space_cast", "memref.assume_alignment"):
        return _offset_multiple_of(op.operands[0])
    if op.name not in ("memref.subview", "memref.reinterpret_cast"):
        return None
    static_offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    dynamic_offsets = iter(op.operands[1 : 1 + sum(1 for o in static_offsets if o == _DYNAMIC)])
    if op.name == "memref.reinterpret_cast":
        (only,) = static_offsets
        return only if only != _DYNAMIC else value_multiple(next(dynamic_offsets))
    source = op.operands[0]
    source_strides, _ = ir.MemRefType(source.type).get_strides_and_offset()
    result = _offset_multiple_of(source)
    for static, stride in zip(static_offsets, source_strides):
        part = value_multiple(next(dynamic_offsets)) if static == _DYNAMIC else static
        if stride == _DYNAMIC:
            return None
        result = math.gcd(result, part * stride)
    return result or None


_DYNAMIC = -(2**63)  # ShapedType's dynamic marker for sizes, strides and offsets


def _offset_multiple_of(memref_value: ir.Value) -> int:
    """gcd-friendly: a static offset is a multiple of itself (0 of everything)."""
    _, offset = ir.MemRefType(memref_value.type).get_strides_and_offset()
    if offset != _DYNAMIC:
        return offset
    return dynamic_offset_multiple(memref_value) or 1


def value_multiple(value: ir.Value) -> int:
    """The largest power of two (or constant) an integer/index value is provably a multiple of; 0 means
    the value is 0. Understands constants, muli, shli, andi with a constant mask, addi/subi and casts."""
    op = _defining_op(value)
    if op is None:
        return 1
    name = op.name
    if name == "arith.constant":
        return abs(ir.IntegerAttr(op.attributes["value"]).value)
    if name in ("arith.index_cast", "arith.index_castui", "arith.extui", "arith.extsi"):
        return value_multiple(op.operands[0])
    if name == "arith.muli":
        return value_multiple(op.operands[0]) * value_multiple(op.operands[1])
    if name in ("arith.addi", "arith.subi"):
        return math.gcd(value_multiple(op.operands[0]), value_multiple(op.operands[1]))
    if name == "arith.shli":
        shift = _defining_op(op.operands[1])
        if shift is not None and shift.name == "arith.constant":
            return value_multiple(op.operands[0]) << ir.IntegerAttr(shift.attributes["value"]).value
        return value_multiple(op.operands[0])
    if name == "arith.andi":  # the result's low zero bits are those of either operand
        parts = [value_multiple(operand) for operand in op.operands]
        return 0 if 0 in parts else max(part & -part for part in parts)
    return 1


def _element_width(element: ir.Type) -> int:
    """Bits of an integer or float element type; 0 for anything else (index, vectors, ...)."""
    return getattr(element, "width", 0)


def base_alignment(value: ir.Value, facts: "FactCache") -> int | None:
    """Bytes of alignment the IR proves for the buffer behind `value`, None when nothing is proved."""
    while True:
        op = _defining_op(value)
        if op is None:
            return None  # a block argument: nothing is known about who allocated it
        if op.name in _VIEW_OPS:
            value = op.operands[0]
            continue
        if op.name == "memref.assume_alignment":
            return _int_attribute(op, "alignment")
        if op.name in ("memref.alloca", "memref.alloc"):
            return _int_attribute(op, "alignment") or _natural_alignment(value)
        if op.name == "memref.get_global":
            declaration = facts.lookup_symbol(op, ir.FlatSymbolRefAttr(op.attributes["name"]).value)
            if declaration is None:
                return None
            return _int_attribute(declaration, "alignment") or _natural_alignment(value)
        return None


def _natural_alignment(value: ir.Value) -> int:
    return max(1, _element_width(ir.MemRefType(value.type).element_type) // 8)


def _int_attribute(op: ir.Operation, name: str) -> int | None:
    if name not in op.attributes:
        return None
    return ir.IntegerAttr(op.attributes[name]).value


class FactCache:
    """What one pass run computes once and asks many times: a symbol table per symbol scope, a
    uniformity analysis per kernel, and the facts of each memref value (a run's transfers mostly share
    their buffers). (Looking symbols up by walking the module made verification quadratic in the number
    of transfers.) Valid while the run creates and erases no memref values, which the tile passes don't."""

    def __init__(self) -> None:
        self._symbol_tables: dict = {}
        self._uniformity: dict = {}
        self._operands: dict = {}

    def operand(self, value: ir.Value) -> Operand:
        """operand_facts(value), once per value."""
        if value not in self._operands:
            self._operands[value] = operand_facts(value, self)
        return self._operands[value]

    def lookup_symbol(self, op: ir.Operation, name: str) -> ir.Operation | None:
        scope = op.parent
        while scope is not None:
            if scope.name in ("builtin.module", "gpu.module"):
                if scope not in self._symbol_tables:
                    self._symbol_tables[scope] = ir.SymbolTable(scope)
                table = self._symbol_tables[scope]
                if name in table:
                    return table[name].operation
            scope = scope.parent
        return None

    def uniformity(self, op: ir.Operation) -> "Uniformity | None":
        """The kernel's analysis, or None when `op` cannot be divergent: it sits directly in the body of
        a single-block kernel, so no branch or loop can leave lanes behind."""
        kernel = enclosing_kernel(op)
        if kernel is None or (op.parent == kernel and len(kernel.regions[0].blocks) == 1):
            return None
        if kernel not in self._uniformity:
            self._uniformity[kernel] = Uniformity(kernel)
        return self._uniformity[kernel]


FUNCTION_OPS = ("gpu.func", "func.func", "llvm.func")


def enclosing(op: ir.Operation | None, names: tuple[str, ...]) -> ir.Operation | None:
    """The nearest of `op` and its ancestors whose name is in `names`."""
    while op is not None and op.name not in names:
        op = op.parent
    return op


def enclosing_kernel(op: ir.Operation) -> ir.Operation | None:
    """The function holding `op`, or `op` itself when it is one."""
    return enclosing(op, FUNCTION_OPS)


def block_size(op: ir.Operation) -> tuple[int, ...] | None:
    kernel = enclosing_kernel(op)
    if kernel is None:
        return None
    for name in BLOCK_SIZE_ATTRIBUTES:
        if name in kernel.attributes:
            return tuple(ir.DenseI32ArrayAttr(kernel.attributes[name]))
    return None


_NVVM_TARGET = re.compile(r"#nvvm\.target(?:<(?P<options>.*)>)?$", re.S)
CHIP_OPTION = re.compile(r'chip = "(?P<chip>[^"]*)"')  # in the text of an #nvvm.target
_PTX_FEATURE = re.compile(r'features = "[^"]*\+ptx(?P<ptx>\d+)')


class NvvmTarget(NamedTuple):
    chip: str
    ptx: int | None  # the PTX ISA version x 10 of a `+ptxNN` feature; None: LLVM picks one for the chip


def nvvm_target(op: ir.Operation) -> NvvmTarget | None:
    """The #nvvm.target of the gpu.module holding `op` (or `op` itself); None when it has none."""
    scope = op
    while scope is not None and scope.name != "gpu.module":
        scope = scope.parent
    if scope is None or "targets" not in scope.attributes:
        return None
    for target in ir.ArrayAttr(scope.attributes["targets"]):
        match = _NVVM_TARGET.match(str(target))
        if match:
            options = match.group("options") or ""
            chip, ptx = CHIP_OPTION.search(options), _PTX_FEATURE.search(options)
            return NvvmTarget(chip.group("chip") if chip else targets.DEFAULT_NVVM_CHIP, int(ptx.group("ptx")) if ptx else None)
    return None


def target_arguments(op: ir.Operation) -> dict:
    """contract.check's `chip` and `ptx` arguments for the gpu.module holding `op` (none without a target)."""
    target = nvvm_target(op)
    return {"chip": target.chip, "ptx": target.ptx} if target else {}


class Uniformity:
    """A conservative forward analysis: which values may differ between the threads of a warp.

    Sources are the thread/lane id ops and loads from private memory; every op result with a divergent
    operand is divergent; values merged by scf.for/scf.while/block arguments become divergent when any
    incoming value is. Over-approximation only rejects more, never accepts a divergent transfer.
    """

    def __init__(self, function: ir.Operation):
        self.divergent: set = set()
        self.divergent_branches: list[ir.Operation] = []
        changed = True
        while changed:
            self._changed = False
            self._visit(function)
            changed = self._changed

    def is_divergent(self, value: ir.Value) -> bool:
        return value in self.divergent

    def _mark(self, values) -> None:
        for value in values:
            if value not in self.divergent:
                self.divergent.add(value)
                self._changed = True

    def _visit(self, op: ir.Operation) -> None:
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    self._visit_op(child.operation)

    def _visit_op(self, op: ir.Operation) -> None:
        name = op.name
        divergent_operand = any(o in self.divergent for o in op.operands)
        if name in _THREAD_ID_OPS or divergent_operand:
            self._mark(op.results)
        if name == "memref.load" and memory_space(ir.MemRefType(op.operands[0].type)) == "private":
            self._mark(op.results)
        if name in ("scf.for", "scf.while") and divergent_operand:
            for region in op.regions:
                for block in region.blocks:
                    self._mark(block.arguments)
        if name in ("scf.yield", "scf.condition") and any(o in self.divergent for o in op.operands):
            parent = op.parent
            self._mark(parent.results)
            if parent.name in ("scf.for", "scf.while"):
                for region in parent.regions:
                    for block in region.blocks:
                        self._mark(list(block.arguments)[1:] if parent.name == "scf.for" else block.arguments)
        if name in ("cf.br", "cf.cond_br", "cf.switch"):
            if name != "cf.br" and op.operands[0] in self.divergent and op not in self.divergent_branches:
                self.divergent_branches.append(op)
            for successor in op.successors:
                if divergent_operand:
                    self._mark(successor.arguments)
        self._visit(op)

    def divergence_reason(self, op: ir.Operation) -> str | None:
        """Why `op` might run with some lanes inactive, or None."""
        child = op
        scope = op.parent
        while scope is not None and scope.name not in ("gpu.func", "func.func"):
            if scope.name == "scf.if" and scope.operands[0] in self.divergent:
                return f"it is inside an scf.if{_at(scope)} whose condition depends on the thread id"
            if scope.name == "scf.for" and any(o in self.divergent for o in list(scope.operands)[:3]):
                return f"it is inside an scf.for{_at(scope)} whose bounds or step depend on the thread id"
            if scope.name == "scf.while" and self._while_condition_divergent(scope):
                return f"it is inside an scf.while{_at(scope)} whose condition depends on the thread id"
            child, scope = scope, scope.parent
        if scope is not None:
            for branch in self.divergent_branches:
                if _same_region(branch, child) and not _in_entry_block(child):
                    return f"its block can be reached through a branch{_at(branch)} whose condition depends on the thread id"
        return None

    def _while_condition_divergent(self, loop: ir.Operation) -> bool:
        for block in loop.regions[0].blocks:
            for inner in block.operations:
                if inner.operation.name == "scf.condition" and inner.operation.operands[0] in self.divergent:
                    return True
        return False


def _same_region(a: ir.Operation, b: ir.Operation) -> bool:
    return a.parent == b.parent


def _in_entry_block(op: ir.Operation) -> bool:
    parent = op.parent
    entry = parent.regions[0].blocks[0]
    return any(candidate.operation == op for candidate in entry.operations)


def _at(op: ir.Operation) -> str:
    """` (at file:line:col)` for an op with a file location; nothing for one built without (Python)."""
    location = op.location
    if location.is_a_file():
        return f" (at {location.filename}:{location.start_line}:{location.start_col})"
    return ""
