"""Python builder API: `tile.matrix_transfer` ops and the GPU kernels around them.

    with Kernel("matrix_kernel", ["memref<16x4x2xi32>", "memref<32x12xi32>"], block=(32, 1, 1)) as k:
        sm = k.shared("sm", 256)
        regs = k.registers(12)
        matrix_transfer(LDMATRIX, regs, sm, dst_layout=..., src_layout=..., scope="warp")
    print(k.module)

`matrix_transfer` checks the contract while building, through the adapter the verifier pass uses (one
verdict: the same rules, facts and messages), so a Python user sees an illegal transfer where it is written.

Errors: an illegal transfer raises `contract.ContractError`; any other misuse (a type text that does not
parse, a non-integer size, an impossible block, an unknown chip, a name that is no PTX identifier) raises
`BuilderError`. Both are ValueErrors; the builder raises no other exception.
"""
from __future__ import annotations

import contextlib
import inspect
from typing import Sequence

from mlir import ir
from mlir.dialects import arith, gpu, llvm, memref, nvvm, scf

from mlir_tile import contract, targets
from mlir_tile.dialect import load_dialect
from mlir_tile.dialect.tile import MatrixTransferOp
from mlir_tile.layout import Layout, as_layout
from mlir_tile.passes.adapter import transfer_verdict

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


def _count(value, what: str, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BuilderError(f"{what} must be an integer of at least {minimum}, got {value!r}")
    return value


def _identifier(name, what: str) -> str:
    if not isinstance(name, str) or not targets.PTX_IDENTIFIER.fullmatch(name):
        raise BuilderError(f"{what} {name!r} is not a PTX identifier (a letter, then letters, digits, _ or $)")
    return name


def memref_type(shape: Sequence[int], element: str = "i32", space: str | None = None) -> ir.MemRefType:
    """`memref_type((16, 4, 2))` is memref<16x4x2xi32> in the current context."""
    extents = [_count(n, "a memref extent") for n in shape]
    try:
        return ir.MemRefType.get(extents, parse_type(element), memory_space=ir.Attribute.parse(space) if space else None)
    except ir.MLIRError as error:
        raise BuilderError(f"no memref of {element!r} elements: {error}") from None


def matrix_transfer(
    opcode: str,
    dst: ir.Value,
    src: ir.Value,
    *,
    dst_layout: Layout | str,
    src_layout: Layout | str,
    scope: str = "warp",
    check: bool = True,
    loc: ir.Location | None = None,
    ip: ir.InsertionPoint | None = None,
) -> MatrixTransferOp:
    """Build `"tile.matrix_transfer"(dst, src)`; the result reads its attributes back as Python values
    (`op.dst_layout` is a Layout). Raises `contract.ContractError` for an illegal transfer, with the verdict
    the verifier pass gives on the same IR (the op is then not left in the IR); pass check=False to build one
    on purpose, e.g. for a diagnostics test."""
    load_dialect((loc or ir.Location.current).context)
    for what, text in (("opcode", opcode), ("scope", scope)):
        if not isinstance(text, str):
            raise BuilderError(f"matrix_transfer: {what} must be a string, got {text!r}")
    for what, value in (("dst", dst), ("src", src)):
        _memref_value(value, f"matrix_transfer {what}")
    for what, layout in (("dst_layout", dst_layout), ("src_layout", src_layout)):
        if not isinstance(layout, (Layout, str)):
            raise BuilderError(f"matrix_transfer: {what} must be a Layout or its text, got {layout!r}")
    loc = loc or caller_location((ip.block.owner.context if ip else ir.Location.current.context))
    op = MatrixTransferOp(opcode, dst, src, dst_layout=dst_layout, src_layout=src_layout, scope=scope, loc=loc, ip=ip)
    if check:
        _, violations = transfer_verdict(op)
        if violations:
            op.operation.erase()
            raise contract.ContractError(violations)
    return op


def caller_location(context: ir.Context) -> ir.Location:
    """The file and line of the first caller outside mlir_tile's builder: where a diagnostic about what it
    built should point (an op built from Python has no MLIR text to point into)."""
    frame = inspect.currentframe()
    while frame is not None and frame.f_code.co_filename in (__file__, contextlib.__file__):
        frame = frame.f_back
    if frame is None:
        return ir.Location.unknown(context)
    return ir.Location.file(frame.f_code.co_filename, frame.f_lineno, 1, context=context)


def _memref_value(value, what: str) -> ir.Value:
    if not isinstance(value, ir.Value) or not isinstance(value.type, ir.MemRefType):
        raise BuilderError(f"{what}: expected a memref value, got {value!r}")
    return value


class Kernel:
    """A module with one `gpu.module` holding one `gpu.func` kernel, built inside a `with` block.

    `min_blocks_per_sm` is CUDA's `__launch_bounds__(threads, min_blocks)`: ptxas limits registers so
    that many blocks fit on one SM.

    Entering creates the module (in a new context with `tile` loaded, unless one is current) and sets the
    insertion point at the kernel's body; leaving terminates the kernel with `gpu.return`.
    Arguments are types or their text; static memrefs are passed to the kernel as bare pointers.
    """

    def __init__(
        self,
        name: str,
        arguments: Sequence[ir.Type | str] = (),
        *,
        block: tuple[int, int, int] = (32, 1, 1),
        min_blocks_per_sm: int | None = None,
        chip: str = targets.DEFAULT_CHIP,
        module_name: str = "kernels",
        context: ir.Context | None = None,
    ):
        self.name = _identifier(name, "kernel name")
        self.module_name = _identifier(module_name, "gpu.module name")
        if not isinstance(block, (tuple, list)) or len(block) != 3:
            raise BuilderError(f"block must be (x, y, z), got {block!r}")
        self.block = tuple(_count(n, "a block extent") for n in block)
        problem = targets.block_size_problem(self.block)
        if problem:
            raise BuilderError(f"block {self.block} {problem}")
        problem = targets.chip_problem(chip)
        if problem:
            raise BuilderError(f"chip {problem}")
        self.chip = chip
        self.min_blocks_per_sm = None if min_blocks_per_sm is None else _count(min_blocks_per_sm, "min_blocks_per_sm")
        self._argument_specs = list(arguments)
        self.context = context or _current_context_or_new()
        load_dialect(self.context)
        self._location = caller_location(self.context)  # diagnostics on the kernel point at the Kernel(...) line
        self._scopes: list = []

    def __enter__(self) -> "Kernel":
        self._scopes = [self.context, self._location]
        for scope in self._scopes:
            scope.__enter__()
        try:
            self._build_kernel()
        except BaseException:  # leave no context entered behind: the caller may catch and go on
            for scope in reversed(self._scopes):
                scope.__exit__(None, None, None)
            raise
        self._insertion = ir.InsertionPoint(self.body)
        self._insertion.__enter__()
        return self

    def _build_kernel(self) -> None:
        types = [parse_type(t) for t in self._argument_specs]
        self.module = ir.Module.create()
        self.module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
        with ir.InsertionPoint(self.module.body):
            target = ir.Attribute.parse(f'#nvvm.target<chip = "{self.chip}">')
            self.gpu_module = gpu.GPUModuleOp(self.module_name, targets=ir.ArrayAttr.get([target]))
            self.gpu_module.bodyRegion.blocks.append()
        with ir.InsertionPoint(self.gpu_module.bodyRegion.blocks[0]):
            self.func = gpu.GPUFuncOp(
                ir.FunctionType.get(types, []), sym_name=self.name, kernel=True, known_block_size=list(self.block)
            )
        if self.min_blocks_per_sm:  # PTX .minnctapersm: registers are budgeted for this occupancy
            self.func.attributes["nvvm.minctasm"] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(32), self.min_blocks_per_sm
            )
        self.body = self.func.body.blocks.append(*types)
        self.arguments = list(self.body.arguments)

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            gpu.ReturnOp([])
        self._insertion.__exit__(kind, value, traceback)
        for scope in reversed(self._scopes):
            scope.__exit__(kind, value, traceback)

    # ----- storage -----
    def shared(self, name: str, elements: int, element: str = "i32", alignment: int = 16) -> ir.Value:
        """A workgroup `memref.global` with the given alignment, and its `memref.get_global` here."""
        _identifier(name, "shared buffer name")
        _count(alignment, "alignment")
        kind = memref_type((elements,), element, WORKGROUP)
        with ir.InsertionPoint.at_block_begin(self.gpu_module.bodyRegion.blocks[0]):
            memref.GlobalOp(name, ir.TypeAttr.get(kind), sym_visibility="private", alignment=alignment)
        return memref.get_global(kind, name)

    def shared_bytes(self, name: str, size: int, alignment: int = 16) -> ir.Value:
        """A workgroup buffer of `size` bytes (an i8 `memref.global`), to be seen through `view`s: one
        buffer, an element-typed view for the code around a transfer and a word view for the transfer."""
        return self.shared(name, size, "i8", alignment)

    def dynamic_shared(self) -> ir.Value:
        """The block's dynamic shared memory (`gpu.dynamic_shared_memory`, bytes, 16-byte aligned as CUDA
        guarantees); its size is the launch's (`Runtime...launch(shared_bytes=...)`, over 48 KiB allowed)."""
        kind = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], ir.IntegerType.get_signless(8),
                                 memory_space=ir.Attribute.parse(WORKGROUP))
        return gpu.dynamic_shared_memory(kind)

    def view(self, buffer: ir.Value, shape: Sequence[int], element: str = "i32", byte_offset: int = 0) -> ir.Value:
        """`memref.view` of a byte buffer (shared_bytes, dynamic_shared) as `shape` elements of `element`,
        starting `byte_offset` bytes in: a view of the same bytes, not a conversion. The alignment proof
        follows it (a byte offset that is a multiple of 16 keeps 16-byte rows aligned)."""
        source = ir.MemRefType(_memref_value(buffer, "view").type)
        if not isinstance(source.element_type, ir.IntegerType) or source.element_type.width != 8:
            raise BuilderError(f"view: the buffer must be bytes (i8), got {source}")
        if not isinstance(byte_offset, int) or byte_offset < 0:
            raise BuilderError(f"view: byte_offset must be a non-negative integer, got {byte_offset!r}")
        kind = memref_type(shape, element, str(source.memory_space) if source.memory_space else None)
        return memref.view(kind, buffer, self.index(byte_offset), [])

    def registers(self, slots: int, element: str = "i32") -> ir.Value:
        """Per-thread register storage: a private `memref.alloca`, at the kernel's start (LLVM keeps only the
        allocas of the entry block in registers, and loops built before this call become blocks)."""
        kind = memref_type((slots,), element, PRIVATE)
        with ir.InsertionPoint.at_block_begin(self.body):
            return memref.alloca(kind, [], [])

    # ----- mma.sync -----
    def mma_m16n8k16(self, a: ir.Value, a_slots: Sequence[int], b: ir.Value, b_slots: Sequence[int],
                     accumulators: ir.Value, c_slots: Sequence[int], element: str = "f16") -> None:
        """`mma.sync.aligned.m16n8k16.row.col.f32.{f16|bf16}.{f16|bf16}.f32` on the words that transfers filled:
        A from slots `a_slots` (a0..a3) of register storage `a`, B from `b_slots` (b0, b1) of `b`, and the f32
        accumulators in `c_slots` (c0..c3) of `accumulators`, updated in place. Every attribute of nvvm.mma.sync
        is set (the bindings abort the process when the multiplicand types are left to inference)."""
        if element not in ("f16", "bf16") or len(a_slots) != 4 or len(b_slots) != 2 or len(c_slots) != 4:
            raise BuilderError("mma_m16n8k16: element f16 or bf16, 4 A slots, 2 B slots and 4 accumulator slots")
        pair = ir.VectorType.get([2], parse_type(element))
        self._mma("m = 16, n = 8, k = 16", element, ir.F32Type.get(), a, a_slots, b, b_slots, accumulators, c_slots,
                  lambda word: llvm.bitcast(pair, word))

    def mma_m16n8k32(self, a: ir.Value, a_slots: Sequence[int], b: ir.Value, b_slots: Sequence[int],
                     accumulators: ir.Value, c_slots: Sequence[int], element: str = "s8",
                     saturate: bool = False) -> None:
        """`mma.sync.aligned.m16n8k32.row.col{.satfinite}.s32.{s8|u8}.{s8|u8}.s32`: A (four words of four 8-bit
        elements) from `a_slots` of `a`, B from `b_slots` (b0, b1) of `b`, the s32 accumulators in `c_slots`
        (i32 register storage) updated in place; wrapping on overflow unless `saturate`."""
        if element not in ("s8", "u8") or len(a_slots) != 4 or len(b_slots) != 2 or len(c_slots) != 4:
            raise BuilderError("mma_m16n8k32: element s8 or u8, 4 A slots, 2 B slots and 4 accumulator slots")
        overflow = ir.Attribute.parse(f"#nvvm.mma_int_overflow<{'satfinite' if saturate else 'wrapped'}>")
        self._mma("m = 16, n = 8, k = 32", element, ir.IntegerType.get_signless(32), a, a_slots, b, b_slots,
                  accumulators, c_slots, lambda word: word, int_overflow_behavior=overflow)

    def _mma(self, shape: str, element: str, accumulator: ir.Type, a, a_slots, b, b_slots, accumulators, c_slots,
             operand, **attributes) -> None:
        """One nvvm.mma.sync (row x col) with every attribute set: operands loaded from register storage
        (`operand` turns a loaded word into the multiplicand's type), results stored back to the accumulators."""
        for name, buffer in (("A", a), ("B", b), ("accumulator", accumulators)):
            element_type = ir.MemRefType(_memref_value(buffer, "mma").type).element_type
            wanted = accumulator if name == "accumulator" else None
            words = isinstance(element_type, (ir.IntegerType, ir.F32Type)) and (
                not isinstance(element_type, ir.IntegerType) or element_type.width == 32)
            if (wanted is not None and element_type != wanted) or not words:
                raise BuilderError(f"mma: the {name} registers hold 32-bit words{f' of {wanted}' if wanted else ''}, "
                                   f"got {element_type}")
        result = nvvm.mma_sync(
            ir.Type.parse(f"!llvm.struct<({', '.join([str(accumulator)] * 4)})>"),
            ir.Attribute.parse(f"#nvvm.shape<{shape}>"),
            ir.Attribute.parse("#nvvm.mma_layout<row>"), ir.Attribute.parse("#nvvm.mma_layout<col>"),
            [operand(self.load(a, [slot])) for slot in a_slots], [operand(self.load(b, [slot])) for slot in b_slots],
            [self.load(accumulators, [slot]) for slot in c_slots],
            multiplicand_a_ptx_type=ir.Attribute.parse(f"#nvvm.mma_type<{element}>"),
            multiplicand_b_ptx_type=ir.Attribute.parse(f"#nvvm.mma_type<{element}>"), **attributes)
        for position, slot in enumerate(c_slots):
            self.store(llvm.extractvalue(accumulator, result, [position]), accumulators, [slot])

    def pack_f16(self, low: ir.Value, high: ir.Value, element: str = "f16") -> ir.Value:
        """Two f32 values rounded to 16-bit floats in one i32 word, `low` in the low half (what stmatrix
        stores for a packed C/D fragment pair)."""
        i32, i16 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(16)
        half = parse_type(element)

        def bits(value):
            return arith.extui(i32, arith.bitcast(i16, arith.truncf(half, value)))

        return arith.ori(bits(low), arith.shli(bits(high), self.constant(16)))

    # ----- values -----
    def index(self, value: int) -> ir.Value:
        if not isinstance(value, int) or isinstance(value, bool) or not -(2**63) <= value < 2**63:
            raise BuilderError(f"an index constant must be a 64-bit integer, got {value!r}")
        return arith.constant(ir.IndexType.get(), value)

    def constant(self, value: int, element: str = "i32") -> ir.Value:
        kind = parse_type(element)
        if not isinstance(kind, ir.IntegerType) or not isinstance(value, int) or isinstance(value, bool):
            raise BuilderError(f"constant: an integer value of an integer type, got {value!r} of {element!r}")
        if isinstance(kind, ir.IntegerType) and kind.width == 32 and value >= 2**31:
            value -= 2**32  # a uint32 bit pattern as the i32 it is
        return arith.constant(kind, value)

    def lane_id(self) -> ir.Value:
        return gpu.lane_id()

    def thread_id(self, dimension: str = "x") -> ir.Value:
        if dimension not in ("x", "y", "z"):
            raise BuilderError(f"thread_id: the dimension is 'x', 'y' or 'z', got {dimension!r}")
        return gpu.thread_id(getattr(gpu.Dimension, dimension))

    def barrier(self) -> None:
        gpu.barrier()

    @contextlib.contextmanager
    def loop(self, lower: ir.Value | int, upper: ir.Value | int, step: ir.Value | int = 1):
        """`with k.loop(0, n) as i:` builds the body inside an `scf.for` over index values."""
        for_op = scf.ForOp(self._as_index(lower), self._as_index(upper), self._as_index(step))
        with ir.InsertionPoint(for_op.body):
            yield for_op.induction_variable
            scf.YieldOp([])

    def offset(self, layout: Layout | str, coordinates: Sequence[ir.Value | int]) -> ir.Value:
        """The memory offset of a coordinate of a memory layout (nested modes, a swizzle), as index arithmetic:
        one coordinate per mode, an int or an index value below the mode's size. Compile-time coordinates fold
        into one constant; swizzled, that constant is one xor with the swizzled thread-dependent part where the
        two share no bit (the swizzle is linear over xor), else the sum is swizzled."""
        try:
            layout = as_layout(layout)
        except ValueError as error:
            raise BuilderError(f"offset: {error}") from None
        if not isinstance(coordinates, (list, tuple)) or len(coordinates) != layout.rank:
            raise BuilderError(f"offset: layout {layout} has {layout.rank} modes; give one coordinate per mode, "
                               f"got {coordinates!r}")
        if any(not isinstance(stride, int) for axis in range(layout.rank) for stride in layout.flat_strides(axis)):
            raise BuilderError(f"offset: layout {layout} has thread strides; an offset is of a memory layout")
        constant, dynamic, largest = 0, None, 0  # largest: the thread-dependent part's largest value (-1: unknown)
        for axis, (coordinate, size) in enumerate(zip(coordinates, layout.sizes)):
            if isinstance(coordinate, int) and not isinstance(coordinate, bool):
                if not 0 <= coordinate < size:
                    raise BuilderError(f"offset: coordinate {coordinate} of mode {axis} is outside its size {size}")
                below = 1
                for extent, stride in layout.mode(axis):
                    constant += coordinate // below % extent * stride
                    below *= extent
                continue
            value = self._as_index(coordinate)
            below = 1
            for position, (extent, stride) in enumerate(layout.mode(axis)):
                if extent > 1 and stride:
                    digit = value if below == 1 else arith.divui(value, self.index(below))
                    if position < len(layout.mode(axis)) - 1:
                        digit = arith.remui(digit, self.index(extent))
                    term = digit if stride == 1 else arith.muli(digit, self.index(stride))
                    dynamic = term if dynamic is None else arith.addi(dynamic, term)
                    largest = largest + (extent - 1) * stride if stride > 0 and largest >= 0 else -1
                below *= extent
        swizzle = layout.swizzle
        if dynamic is None:
            return self.index(swizzle(constant) if swizzle else constant)
        if swizzle is None:
            return dynamic if constant == 0 else arith.addi(dynamic, self.index(constant))
        if largest >= 0 and constant >> largest.bit_length() << largest.bit_length() == constant:
            # every bit of the constant is above the thread-dependent part's: the sum is an xor (no carries)
            swizzled = self._swizzled(dynamic, swizzle)
            return swizzled if constant == 0 else arith.xori(swizzled, self.index(swizzle(constant)))
        return self._swizzled(dynamic if constant == 0 else arith.addi(dynamic, self.index(constant)), swizzle)

    def _swizzled(self, value: ir.Value, swizzle) -> ir.Value:
        moved = arith.shrui(value, self.index(swizzle.shift))
        return arith.xori(value, arith.andi(moved, self.index(swizzle.mask)))

    def load(self, buffer: ir.Value, indices: Sequence[ir.Value | int]) -> ir.Value:
        return memref.load(_memref_value(buffer, "load"), self._indices(buffer, indices))

    def store(self, value: ir.Value, buffer: ir.Value, indices: Sequence[ir.Value | int]) -> None:
        if not isinstance(value, ir.Value) or value.type != ir.MemRefType(_memref_value(buffer, "store").type).element_type:
            raise BuilderError(f"store: the value must be an ir.Value of the buffer's element type, got {value!r}")
        memref.store(value, buffer, self._indices(buffer, indices))

    def _indices(self, buffer: ir.Value, indices) -> list[ir.Value]:
        rank = ir.MemRefType(buffer.type).rank
        if len(indices) != rank:
            raise BuilderError(f"the buffer has rank {rank}, but {len(indices)} indices were given")
        return [self._as_index(i) for i in indices]

    def _as_index(self, value: ir.Value | int) -> ir.Value:
        if isinstance(value, ir.Value):
            if not isinstance(value.type, ir.IndexType):
                raise BuilderError(f"expected an index value, got one of type {value.type}")
            return value
        return self.index(value)


_default_context: ir.Context | None = None


def _current_context_or_new() -> ir.Context:
    """The current context, else one shared default context (creating a context registers every
    upstream dialect, which costs more than building a small kernel)."""
    global _default_context
    if ir.Context.current is not None:
        return ir.Context.current
    if _default_context is None:
        _default_context = ir.Context()
    return _default_context

