"""Facts the contract needs, read off MLIR: operand memory, provable base alignment, the kernel's block
size and whether an op sits under thread-dependent control flow."""
from __future__ import annotations

import math
from typing import NamedTuple

from mlir import ir

from mlir_tile.isa import targets
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


def operand_facts(value: ir.Value, facts: "FactCache | None" = None, launch: ir.Operation | None = None) -> Operand:
    """The contract's view of a memref value (the caller checked it is a memref), as used inside `launch` (a
    gpu.launch, or None): gpu-kernel-outlining makes every value from outside the launch body an argument of
    the kernel, except constants, so the facts stop there as they will after outlining."""
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
        multiple = dynamic_offset_multiple(value, launch=launch)
    origin, alignment, allocation_layout, base_shift = buffer_origin(value, facts or FactCache(), launch)
    return Operand(
        memory=memory_space(memref),
        element_bits=_element_width(element),
        element_type=str(element),
        extent=extent,
        offset=offset,
        base_alignment=alignment,
        offset_multiple=multiple,
        origin=origin,
        contiguous=_is_contiguous(memref.shape, strides),
        allocation_layout=allocation_layout,
        base_shift=base_shift,
    )


def _is_contiguous(shape, strides) -> bool:
    """Row-major with no gaps: every offset from 0 to the extent is an element."""
    expected = 1
    for extent, stride in reversed(list(zip(shape, strides))):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def defining_op(value: ir.Value, launch: ir.Operation | None = None) -> ir.Operation | None:
    """The op that produces `value`; None for a block argument, and for a value that comes into the gpu.launch
    `launch` from outside (an argument of the outlined kernel) unless a constant makes it."""
    owner = value.owner
    op = owner.operation if isinstance(owner, (ir.OpView, ir.Operation)) else None
    if op is None or launch is None or op.name == "arith.constant" or _is_inside(op, launch):
        return op
    return None


def _is_inside(op: ir.Operation, ancestor: ir.Operation) -> bool:
    op, ancestor = op.operation, ancestor.operation
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent
    return False


def _comes_from_outside(value: ir.Value, launch: ir.Operation | None) -> bool:
    """Whether `value` is defined outside the gpu.launch `launch` (by an op, or as a block argument)."""
    if launch is None:
        return False
    owner = value.owner
    return not _is_inside(owner.owner if isinstance(owner, ir.Block) else owner, launch)


_PROOF_DEPTH = 64  # deeper chains of views or arithmetic prove nothing more: bounded work, no deep recursion
_WORD_BITS = 64  # index arithmetic wraps at 2^64: no power of two above it is provable


def dynamic_offset_multiple(value: ir.Value, depth: int = _PROOF_DEPTH, launch: ir.Operation | None = None) -> int | None:
    """The power of two the element offset of a memref view is provably a multiple of, from the view op that
    made it (memref.subview: source offset + sum of offset * source stride; memref.reinterpret_cast: its
    offset); None when nothing is proven."""
    op = defining_op(value, launch)
    if op is None or depth == 0:
        return None
    if op.name in ("memref.cast", "memref.memory_space_cast", "memref.assume_alignment"):
        return _offset_multiple_of(op.operands[0], depth - 1, launch)
    if op.name not in ("memref.subview", "memref.reinterpret_cast"):
        return None
    static_offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    dynamic_offsets = iter(op.operands[1 : 1 + sum(1 for o in static_offsets if o == _DYNAMIC)])
    if op.name == "memref.reinterpret_cast":
        (only,) = static_offsets
        return _power_of_two(only) if only != _DYNAMIC else value_multiple(next(dynamic_offsets), launch=launch) or None
    source = op.operands[0]
    source_strides, _ = ir.MemRefType(source.type).get_strides_and_offset()
    result = _offset_multiple_of(source, depth - 1, launch)
    for static, stride in zip(static_offsets, source_strides):
        part = value_multiple(next(dynamic_offsets), launch=launch) if static == _DYNAMIC else _power_of_two(static)
        if stride == _DYNAMIC:
            return None
        result = math.gcd(result, _product(part, _power_of_two(stride)))
    return result or None


_DYNAMIC = -(2**63)  # ShapedType's dynamic marker for sizes, strides and offsets


def _offset_multiple_of(memref_value: ir.Value, depth: int, launch: ir.Operation | None) -> int:
    """gcd-friendly: a static offset is a multiple of its power-of-two part (0 of everything)."""
    _, offset = ir.MemRefType(memref_value.type).get_strides_and_offset()
    if offset != _DYNAMIC:
        return _power_of_two(offset)
    return dynamic_offset_multiple(memref_value, depth, launch) or 1


def _power_of_two(number: int) -> int:
    """The largest power of two dividing `number` (0 for 0), capped where index arithmetic wraps."""
    number = abs(number)
    return min(number & -number, 1 << _WORD_BITS) if number else 0


def _product(a: int, b: int) -> int:
    return 0 if 0 in (a, b) else min(a * b, 1 << _WORD_BITS)


def value_multiple(value: ir.Value, depth: int = _PROOF_DEPTH, known: dict | None = None,
                   launch: ir.Operation | None = None) -> int:
    """The largest power of two an integer/index value is provably a multiple of; 0 means the value is 0.
    Understands constants, muli, shli by a constant, andi, addi/subi, min/max/select (one of their operands)
    and casts. Powers of two only: they survive the wrap-around of fixed-width arithmetic, other factors do not. Each value is visited once
    (`known`), so shared subexpressions cost nothing twice."""
    known = {} if known is None else known
    if value not in known:
        known[value] = _value_multiple(value, depth, known, launch)
    return known[value]


def _value_multiple(value: ir.Value, depth: int, known: dict, launch: ir.Operation | None) -> int:
    op = defining_op(value, launch)
    if depth == 0:
        return 1
    depth -= 1

    def of(operand: ir.Value) -> int:
        return value_multiple(operand, depth, known, launch)

    if op is None:  # an scf.for's induction variable: its lower bound plus multiples of its step
        block = value.owner
        loop = block.owner if isinstance(block, ir.Block) else None
        if loop is not None and loop.name == "scf.for" and ir.BlockArgument(value).arg_number == 0:
            return math.gcd(of(loop.operands[0]), of(loop.operands[2]))
        return 1
    name = op.name

    if name == "arith.constant":
        try:
            return _power_of_two(ir.IntegerAttr(op.attributes["value"]).value)
        except (ValueError, TypeError):  # not an integer constant
            return 1
    if name in ("arith.index_cast", "arith.index_castui", "arith.extui", "arith.extsi"):
        return of(op.operands[0])
    if name == "arith.muli":
        return _product(of(op.operands[0]), of(op.operands[1]))
    if name in ("arith.addi", "arith.subi", "arith.xori", "arith.ori",  # the low zero bits both have
                "arith.minsi", "arith.minui", "arith.maxsi", "arith.maxui"):  # or the result is one of them
        return math.gcd(of(op.operands[0]), of(op.operands[1]))
    if name == "arith.select":
        return math.gcd(of(op.operands[1]), of(op.operands[2]))
    if name in ("arith.shrui", "arith.divui"):  # x / 2^k keeps what is left of x's low zero bits
        amount = constant_int(op.operands[1])
        if amount is not None and amount > 0 and (name == "arith.shrui" or amount & (amount - 1) == 0):
            divisor = 1 << min(amount, _WORD_BITS) if name == "arith.shrui" else amount
            return max(of(op.operands[0]) // divisor, 1)
        return 1
    if name == "arith.shli":
        amount = defining_op(op.operands[1])
        if amount is not None and amount.name == "arith.constant":
            count = ir.IntegerAttr(amount.attributes["value"]).value
            return _product(of(op.operands[0]), 1 << min(max(count, 0), _WORD_BITS))
        return of(op.operands[0])
    if name == "arith.remui":  # x mod 2^k keeps x's low bits
        modulus = constant_int(op.operands[1])
        if modulus and modulus & (modulus - 1) == 0:
            return min(of(op.operands[0]) or modulus, modulus)
        return 1
    if name == "arith.andi":  # the result's low zero bits are those of either operand
        parts = [of(operand) for operand in op.operands]
        return 0 if 0 in parts else max(parts)
    return 1


def _element_width(element: ir.Type) -> int:
    """Bits of an integer or float element type; 0 for anything else (index, vectors, ...)."""
    return getattr(element, "width", 0)


class Origin(NamedTuple):
    op: str  # what allocated the buffer: the op's name (memref.global for a get_global), or "argument"
    alignment: int | None  # the bytes of alignment the IR proves for it; None when nothing is proved
    allocation_layout: str | None = None  # the allocation's memref layout, when it is not the identity
    base_shift: int | None = None  # what memref.view byte shifts are proven a multiple of (1: nothing); None: none


def buffer_origin(value: ir.Value, facts: "FactCache", launch: ir.Operation | None = None) -> Origin:
    """Who allocated the buffer behind `value` and what alignment the IR proves for it. Views keep the
    alignment of what they view, except that a memref.view's byte shift caps it at what the shift is proven
    a multiple of. Inside a gpu.launch, a buffer from outside is an argument of the outlined kernel."""
    proven, cap = None, None  # cap: what the memref.view shifts on the way are proven multiples of
    while True:
        op = defining_op(value, launch)
        if op is None:
            if _comes_from_outside(value, launch):
                return Origin("outside the gpu.launch", _capped(proven, cap), None, cap)
            declared = max(proven or 0, argument_alignment(value) or 0) or None
            return Origin("argument", _capped(declared, cap), None, cap)
        if op.name in _VIEW_OPS:
            value = op.operands[0]
            continue
        if op.name == "memref.view":  # bytes of the source at a (dynamic) byte shift, as a new element type
            moved = value_multiple(op.operands[1], launch=launch)
            if moved:  # 0: the shift is the constant 0
                cap = min(cap, moved) if cap else moved
            value = op.operands[0]
            continue
        if op.name == "memref.assume_alignment":
            proven = max(proven or 0, _int_attribute(op, "alignment") or 0) or None
            value = op.operands[0]
            continue
        if op.name in ("memref.alloca", "memref.alloc"):
            found = max(proven or 0, _int_attribute(op, "alignment") or _natural_alignment(value))
            return Origin(op.name, _capped(found, cap), _layout_unless_identity(ir.MemRefType(op.results[0].type)), cap)
        if op.name == "memref.get_global":
            declaration = facts.lookup_symbol(op, ir.FlatSymbolRefAttr(op.attributes["name"]).value)
            declared = (_int_attribute(declaration, "alignment") or _natural_alignment(value)) if declaration else 0
            return Origin("memref.global", _capped(max(proven or 0, declared) or None, cap), None, cap)
        if op.name == "gpu.dynamic_shared_memory":
            # CUDA aligns the dynamic shared memory base to 16 bytes (and convert-gpu-to-nvvm declares it so)
            return Origin(op.name, _capped(max(proven or 0, DYNAMIC_SHARED_ALIGNMENT), cap), None, cap)
        return Origin(op.name, _capped(proven, cap), None, cap)


def argument_alignment(value: ir.Value) -> int | None:
    """The `llvm.align` a function's argument declares (it reaches the PTX parameter as `.ptr .align N`, and
    the caller promises it); None for any other value."""
    block = value.owner
    if not isinstance(block, ir.Block) or block.owner is None:
        return None
    function = block.owner.operation
    if function.name not in ("gpu.func", "func.func", "llvm.func") or "arg_attrs" not in function.attributes:
        return None
    if block != function.regions[0].blocks[0]:
        return None
    attributes = ir.DictAttr(ir.ArrayAttr(function.attributes["arg_attrs"])[ir.BlockArgument(value).arg_number])
    return ir.IntegerAttr(attributes["llvm.align"]).value if "llvm.align" in attributes else None


def access_alignment(buffer: ir.Value, indices: list[ir.Value]) -> int | None:
    """The power of two (in bytes) the address of `buffer[indices]` is proven a multiple of: the buffer's
    proven base alignment, its view offset and each index times its stride, times the element's bytes.
    None when the base has no proven alignment."""
    memref = ir.MemRefType(buffer.type)
    facts = operand_facts(buffer)
    if facts.base_alignment is None:
        return None
    element_bytes = max(1, _element_width(memref.element_type) // 8)
    strides, _ = memref.get_strides_and_offset()
    elements = _power_of_two(facts.offset) if facts.offset is not None else (facts.offset_multiple or 1)
    known: dict = {}
    for index, stride in zip(indices, strides):
        elements = math.gcd(elements, 1 if stride == _DYNAMIC else
                            _product(value_multiple(index, known=known), _power_of_two(stride)))
    offset_bytes = _product(elements, element_bytes)
    return math.gcd(facts.base_alignment, offset_bytes) if offset_bytes else facts.base_alignment


def _layout_unless_identity(memref: ir.MemRefType) -> str | None:
    """The memref type's layout as text, or None when it is the identity (all the LLVM conversion allocates)."""
    return None if memref.affine_map == ir.AffineMap.get_identity(memref.rank) else str(memref.layout)


DYNAMIC_SHARED_ALIGNMENT = 16


def _capped(alignment: int | None, cap: int | None) -> int | None:
    if alignment is None or cap is None:
        return alignment
    return min(alignment, cap)


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
    of transfers.) Valid while the run creates and erases no memref values and no ops that hold transfers,
    which the tile passes don't."""

    def __init__(self, uniformities: dict | None = None) -> None:
        """`uniformities`: the analyses of a function that grows between runs (a builder's kernel, function ->
        Uniformity), each extended to the ops added since instead of redone; by default one per run."""
        self._symbol_tables: dict = {}
        self.uniformities: dict = uniformities if uniformities is not None else {}  # (`uniformity.divergence`'s)
        self.growing = uniformities is not None
        self._operands: dict = {}
        self._static_shared: dict = {}
        self._targets: dict = {}
        self._places: dict = {}
        self._block_sizes: dict = {}

    def place(self, op: ir.Operation) -> Place:
        """Where `op` sits, found once per parent op (the transfers of a block share their ancestors)."""
        parent = op.operation.parent
        if parent not in self._places:
            launch = enclosing(parent, ("gpu.launch",))
            self._places[parent] = Place(enclosing_function(parent), enclosing(parent, ("gpu.module",)),
                                         enclosing(parent, ("gpu.module", "gpu.launch")) is not None, launch)
        return self._places[parent]

    def block_size(self, op: ir.Operation) -> tuple[int, ...] | None:
        """block_size(op), once per function or gpu.launch."""
        place = self.place(op)
        key = place.launch or place.function
        if key not in self._block_sizes:
            self._block_sizes[key] = block_size(op, place.launch)
        return self._block_sizes[key]

    def static_shared_bytes(self, op: ir.Operation) -> int | None:
        """Bytes of the workgroup memref.globals that the function holding `op` uses (each once), which
        ptxas allocates statically; None outside a function."""
        function = op.operation if op.operation.name in FUNCTION_OPS else self.place(op).function
        if function is None:
            return None
        if function not in self._static_shared:
            used = {}

            def add(inner):
                if inner.name == "memref.get_global":
                    memref = ir.MemRefType(inner.results[0].type)
                    if memory_space(memref) == "shared" and ir.ShapedType(memref).has_static_shape:
                        name = ir.FlatSymbolRefAttr(inner.attributes["name"]).value
                        used[name] = math.prod(memref.shape) * max(1, _element_width(memref.element_type) // 8)
                return ir.WalkResult.ADVANCE

            function.walk(add, ir.WalkOrder.PRE_ORDER)
            self._static_shared[function] = sum(used.values())
        return self._static_shared[function]

    def operand(self, value: ir.Value, launch: ir.Operation | None = None) -> Operand:
        """operand_facts(value, launch), once per value and gpu.launch."""
        key = (value, launch)
        if key not in self._operands:
            self._operands[key] = operand_facts(value, self, launch)
        return self._operands[key]

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

    def targets(self, op: ir.Operation) -> list[dict]:
        """target_facts(op), once per gpu.module."""
        module = self.place(op).module
        if module not in self._targets:
            self._targets[module] = target_facts(op)
        return self._targets[module]


FUNCTION_OPS = ("gpu.func", "func.func", "llvm.func")


class Place(NamedTuple):
    function: ir.Operation | None  # the nearest enclosing function
    module: ir.Operation | None  # the nearest enclosing gpu.module
    device_code: bool  # inside a gpu.module or a gpu.launch body
    launch: ir.Operation | None = None  # the nearest enclosing gpu.launch (its body becomes a kernel)


def enclosing(op: ir.Operation | None, names: tuple[str, ...]) -> ir.Operation | None:
    """The nearest of `op` and its ancestors whose name is in `names`."""
    while op is not None and op.name not in names:
        op = op.parent
    return op


def enclosing_function(op: ir.Operation) -> ir.Operation | None:
    """The function holding `op`, or `op` itself when it is one."""
    return enclosing(op, FUNCTION_OPS)


def block_size(op: ir.Operation, launch: ir.Operation | None = None) -> tuple[int, ...] | None:
    """The block size of the kernel that runs `op`: a gpu.launch's constant block sizes (gpu-kernel-outlining
    writes them as the kernel's known_block_size), else the function's known_block_size."""
    if launch is not None:
        sizes = [constant_int(value) for value in _launch_block_sizes(launch)]
        return None if None in sizes else tuple(sizes)
    kernel = enclosing_function(op)
    if kernel is None:
        return None
    for name in BLOCK_SIZE_ATTRIBUTES:
        if name in kernel.attributes:
            return tuple(ir.DenseI32ArrayAttr(kernel.attributes[name]))
    return None


def upper_bound(value: ir.Value, depth: int = _PROOF_DEPTH) -> int | None:
    """The largest value an index/integer value can take, where the IR proves one: thread ids below the
    kernel's known block size, lane ids below 32, constants, and +, *, /, mod, shifts, masks, unsigned
    min/max and selects of those (unsigned); None when nothing is proven."""
    op = defining_op(value)
    if op is None or depth == 0:
        return None
    name, operands = op.name, op.operands

    def of(index: int) -> int | None:
        return upper_bound(operands[index], depth - 1)

    if name == "arith.constant":
        found = constant_int(value)
        return found if found is not None and found >= 0 else None
    if name == "gpu.lane_id":
        return 31
    if name == "gpu.thread_id":
        sizes = block_size(op)
        axis = "xyz".index(str(op.attributes["dimension"]).split()[-1].strip(">")[-1])
        return sizes[axis] - 1 if sizes else None
    if name in ("arith.index_cast", "arith.index_castui", "arith.extui"):
        return of(0)
    if name == "arith.remui":
        modulus, bound = constant_int(operands[1]), of(0)
        if modulus is None or modulus <= 0:
            return None
        return modulus - 1 if bound is None else min(bound, modulus - 1)
    if name == "arith.andi":
        bounds = [bound for bound in (of(0), of(1)) if bound is not None]
        return min(bounds) if bounds else None
    if name == "arith.select":
        bounds = [of(1), of(2)]
        return None if None in bounds else max(bounds)
    if name == "arith.minui":
        bounds = [bound for bound in (of(0), of(1)) if bound is not None]
        return min(bounds) if bounds else None
    if len(operands) < 2:
        return None
    first, second = of(0), of(1)
    if first is None or second is None:
        return None
    if name == "arith.addi":
        return first + second
    if name == "arith.muli":
        return first * second
    if name in ("arith.divui", "arith.shrui"):
        divisor = constant_int(operands[1])
        if divisor is None or divisor <= 0:
            return None
        return first // divisor if name == "arith.divui" else first >> divisor
    if name == "arith.shli":
        return first << second if second < _WORD_BITS else None
    if name in ("arith.ori", "arith.xori"):
        return (1 << max(first, second).bit_length()) - 1
    if name == "arith.maxui":
        return max(first, second)
    return None


def _launch_block_sizes(launch: ir.Operation) -> list[ir.Value]:
    view = launch.opview
    return [view.blockSizeX, view.blockSizeY, view.blockSizeZ]


def constant_int(value: ir.Value) -> int | None:
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return None
    try:
        return ir.IntegerAttr(op.attributes["value"]).value
    except (ValueError, TypeError):
        return None


def folded_int(value: ir.Value, depth: int = _PROOF_DEPTH) -> int | None:
    """The signed value of an integer/index value that the IR fixes: a constant, or +, -, * and casts of such
    (what a builder's arithmetic on constants leaves unfolded); None when it is not fixed."""
    op = defining_op(value)
    if op is None or depth == 0:
        return None
    if op.name == "arith.constant":
        return constant_int(value)
    if op.name in ("arith.index_cast", "arith.extsi"):
        return folded_int(op.operands[0], depth - 1)
    if op.name not in ("arith.addi", "arith.subi", "arith.muli"):
        return None
    first, second = (folded_int(operand, depth - 1) for operand in op.operands[:2])
    if first is None or second is None:
        return None
    return {"arith.addi": first + second, "arith.subi": first - second, "arith.muli": first * second}[op.name]


def _module_targets(module: ir.Operation) -> list[tuple[str, targets.NvvmTarget | None]]:
    """Each target attribute of a gpu.module as text, with its NvvmTarget (None for another kind)."""
    if "targets" not in module.attributes:
        return []
    texts = [str(target) for target in ir.ArrayAttr(module.attributes["targets"])]
    return [(text, targets.NvvmTarget.parse(text)) for text in texts]


def nvvm_targets(module: ir.Operation) -> list[targets.NvvmTarget]:
    """The #nvvm.targets of a gpu.module, in order."""
    return [target for _, target in _module_targets(module) if target is not None]


def foreign_targets(module: ir.Operation) -> tuple[str, ...]:
    """The targets of a gpu.module that are not #nvvm.targets (#rocdl.target, ...), as text."""
    return tuple(text for text, target in _module_targets(module) if target is None)


def target_facts(op: ir.Operation) -> list[dict]:
    """contract.Query's target fields for the gpu.module holding `op`, one dict per #nvvm.target (the module
    is compiled for each): chip, ptx, and the targets mlir-tile cannot compile for. One dict without a chip
    outside a gpu.module, or when the module names no NVVM target yet (the pipeline fills one in)."""
    module = enclosing(op.operation, ("gpu.module",))
    if module is None:
        return [{}]
    foreign = foreign_targets(module)
    found = [{"chip": target.chip, "ptx": target.ptx, "features": target.features, "foreign_targets": foreign}
             for target in nvvm_targets(module)]
    return found or [{"foreign_targets": foreign}]
