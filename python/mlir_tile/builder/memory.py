"""Memory: shared buffers and views, register storage, the address of any coordinate of a layout (and the plan
of many: one base per thread), and scalar and vector loads and stores whose alignment is proven."""
from __future__ import annotations

import math
from typing import Sequence

from mlir import ir
from mlir.dialects import arith, gpu, memref, vector

from mlir_tile.isa import targets
from mlir_tile.builder.common import (PRIVATE, WORKGROUP, BuilderError, caller_location, count, identifier, location_text, is_int,
                                      memref_type, memref_value, power_of_two)
from mlir_tile.dialect import ALIGNMENT_ATTRIBUTE
from mlir_tile.algebra.layout import Layout, as_layout
from mlir_tile.isa.tma import boxes_at
from mlir_tile.analysis.ir_facts import access_alignment, constant_int, upper_bound, value_multiple
from mlir_tile.analysis.offsets import mode_offset, swizzled

VECTOR_BYTES = (2, 4, 8, 16)  # ld/st widths PTX has (.b16, .b32, .v2.b32, .v4.b32)


class Memory:
    # ----- storage -----
    def shared(self, name: str, elements: int, element: str = "i32", alignment: int = 16) -> ir.Value:
        """A workgroup `memref.global` with the given alignment, and its `memref.get_global` here. Its name is
        unique in the kernel's gpu.module (not the kernel's, not another buffer's); a kernel declares at most
        48 KiB statically (dynamic_shared for more)."""
        identifier(name, "shared buffer name")
        if name in self.symbols:
            raise BuilderError(f"shared: the name {name!r} is taken in this gpu.module (the kernel or another "
                               f"shared buffer); give each buffer its own name")
        power_of_two(alignment, "shared alignment")
        kind = memref_type((elements,), element, WORKGROUP)
        used = self.static_shared_bytes + elements * _element_bytes(kind)
        problem = targets.static_shared_problem(used)
        if problem:
            raise BuilderError(f"shared {name!r}: {problem}")
        with ir.InsertionPoint.at_block_begin(self.gpu_module.bodyRegion.blocks[0]):
            memref.GlobalOp(name, ir.TypeAttr.get(kind), sym_visibility="private", alignment=alignment)
        self.symbols.add(name)
        self.static_shared_bytes = used
        return memref.get_global(kind, name)

    def shared_bytes(self, name: str, size: int, alignment: int = 16) -> ir.Value:
        """A workgroup buffer of `size` bytes (an i8 `memref.global`), to be seen through `view`s: one
        buffer, an element-typed view for the code around a transfer and a word view for the transfer."""
        return self.shared(name, size, "i8", alignment)

    def dynamic_shared(self, alignment: int = 16) -> ir.Value:
        """The block's dynamic shared memory (`gpu.dynamic_shared_memory`, bytes); its size is the launch's
        (`launch(shared_bytes=...)`, over 48 KiB allowed). CUDA aligns it to 16 bytes; a larger power of two
        (a swizzle's period) is declared in the PTX (`.extern .shared .align N`, which places it so) and
        proven to the verifier (`memref.assume_alignment`)."""
        power_of_two(alignment, "dynamic_shared alignment", minimum=16)
        kind = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], ir.IntegerType.get_signless(8),
                                 memory_space=ir.Attribute.parse(WORKGROUP))
        buffer = gpu.dynamic_shared_memory(kind)
        if alignment == 16:
            return buffer
        attributes = self.gpu_module.operation.attributes
        if ALIGNMENT_ATTRIBUTE in attributes:
            alignment = max(alignment, ir.IntegerAttr(attributes[ALIGNMENT_ATTRIBUTE]).value)
        attributes[ALIGNMENT_ATTRIBUTE] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), alignment)
        return memref.assume_alignment(buffer, alignment)

    def view(self, buffer: ir.Value, shape: Sequence[int], element: str = "i32",
             byte_offset: int | ir.Value = 0, element_offset: ir.Value | None = None) -> ir.Value:
        """`memref.view` of a byte buffer (shared_bytes, dynamic_shared) as `shape` elements of `element`,
        starting `byte_offset` bytes in (an int, or an index value such as a pipeline stage's offset) and
        `element_offset` elements further (an index value: a warp's part of a tile): a view of the same bytes,
        not a conversion. The alignment proof follows it (a byte offset proven a multiple of 16 keeps 16-byte
        rows aligned; of a swizzle's period, keeps the swizzle's place)."""
        source = ir.MemRefType(memref_value(buffer, "view").type)
        if (not isinstance(source.element_type, ir.IntegerType) or source.element_type.width != 8 or source.rank != 1
                or source.get_strides_and_offset() != ([1], 0)):
            raise BuilderError(f"view: the buffer must be 1-D bytes (i8) from its start (a buffer, not a subview of "
                               f"one: memref.view takes no offset layout), got {source}")
        if not isinstance(byte_offset, ir.Value) and (not is_int(byte_offset) or byte_offset < 0):
            raise BuilderError(f"view: byte_offset must be a non-negative integer or an index value, got "
                               f"{byte_offset!r}")
        kind = memref_type(shape, element, str(source.memory_space) if source.memory_space else None)
        offset = self.as_index(byte_offset)
        width = _element_bytes(kind)
        if element_offset is not None:
            offset = arith.addi(offset, arith.muli(self.as_index(element_offset), self.index(width)))
        if value_multiple(offset) % width:
            raise BuilderError(f"view: byte_offset {byte_offset if is_int(byte_offset) else '(a value)'} is not a "
                               f"proven multiple of the {width}-byte {kind.element_type} elements")
        if source.has_static_shape:
            last = upper_bound(offset)
            if last is None:
                raise BuilderError(f"view: the byte_offset value has no proven bound, so the view cannot be "
                                   f"proven inside its {source.shape[0]}-byte buffer (compute it from constants, "
                                   f"thread ids or a remainder)")
            if last + math.prod(kind.shape) * width > source.shape[0]:
                raise BuilderError(f"view: {kind} at byte offset up to {last} passes the end of the "
                                   f"{source.shape[0]}-byte buffer")
        return memref.view(kind, buffer, offset, [])

    def boxes(self, buffer: ir.Value, at: int | ir.Value, layout: Layout | str, element: str, columns: int):
        """A tile of `layout` (of `element`s) from byte `at` of `buffer` as TMA's boxes of `columns` columns side
        by side (`tma.boxes_at`, each box proven): yields, box by box, (its first column, its tensor), which a
        TMA load writes or a TMA store reads. (A generator: each box's view is built where the caller uses it.)"""
        width = _element_bytes(memref_type((1,), element, None))
        for first, column, box in boxes_at(layout, 8 * width, columns):
            view = self.view(buffer, (box.rows * box.columns,), element, at + first * width)
            yield column, self.tensor(view, box.layout)

    def subview(self, buffer: ir.Value, offset: int, size: int) -> ir.Value:
        """`memref.subview` of a 1-D buffer: `size` elements from element `offset` (compile-time), as CuTe
        slices a tensor; a swizzled layout over it keeps the swizzle's place (the slicing rule)."""
        kind = ir.MemRefType(memref_value(buffer, "subview").type)
        if kind.rank != 1:
            raise BuilderError(f"subview: a 1-D buffer, got {kind}")
        count(offset, "subview offset", minimum=0)
        count(size, "subview size")
        if kind.shape[0] != ir.ShapedType.get_dynamic_size() and offset + size > kind.shape[0]:
            raise BuilderError(f"subview: elements {offset}..{offset + size - 1} pass the end of {kind}")
        return memref.subview(buffer, [offset], [size], [1])

    def registers(self, slots: int, element: str = "i32") -> ir.Value:
        """Per-thread register storage: a private `memref.alloca`, at the kernel's start (LLVM keeps only the
        allocas of the entry block in registers, and loops built before this call become blocks)."""
        kind = memref_type((slots,), element, PRIVATE)
        with ir.InsertionPoint.at_block_begin(self.body):
            return memref.alloca(kind, [], [])

    # ----- addresses -----
    def offset(self, layout: Layout | str, coordinates: Sequence) -> ir.Value:
        """The memory offset of a coordinate of a memory layout (nested modes, a swizzle), as index arithmetic.

        One coordinate per mode: an int, an index value, or `(value, int)` for value + int on a mode with one
        leaf (the int's part folds into the constant: one base per thread, constant offsets per copy). The
        constant parts fold into one constant; swizzled, that constant is one xor with the swizzled
        thread-dependent part where the two share no bit (the swizzle is linear over xor), else the sum is
        swizzled."""
        layout, dynamic, constant, largest = self._split_offset(layout, coordinates)
        swizzle = layout.swizzle
        if dynamic is None:
            return self.index(swizzle(constant) if swizzle else constant)
        if swizzle is None:
            return dynamic if constant == 0 else arith.addi(dynamic, self.index(constant))
        if _above(constant, largest):  # no carries: the sum is an xor, and the swizzle is linear over xor
            thread_part, moved = swizzled(dynamic, swizzle, self.index), swizzle(constant)
            if constant == 0:
                return thread_part
            return (arith.addi if _above(moved, largest) else arith.xori)(thread_part, self.index(moved))
        return swizzled(dynamic if constant == 0 else arith.addi(dynamic, self.index(constant)), swizzle, self.index)

    def offset_parts(self, layout: Layout | str, coordinates: Sequence) -> tuple[ir.Value | None, int]:
        """`offset`'s two parts for a layout without a swizzle: the coordinates' thread-dependent part (index
        arithmetic, None where there is none) and the constant, so that a caller adding a base of its own adds
        it before the constant (accesses differing only in the constant then share base + the thread part)."""
        layout, dynamic, constant, _ = self._split_offset(layout, coordinates)
        if layout.swizzle is not None:
            raise BuilderError(f"offset_parts: {layout} is swizzled, so its offset does not split into a sum; use "
                               f"offset")
        return dynamic, constant

    def _split_offset(self, layout, coordinates, emit: bool = True) -> tuple[Layout, ir.Value | None, int, int]:
        """(layout, thread-dependent part as index arithmetic or None, constant part, the thread-dependent
        part's largest value or -1 when unknown), before the swizzle; with emit=False no IR is built (the
        thread-dependent part is then None)."""
        try:
            layout = as_layout(layout)
        except ValueError as error:
            raise BuilderError(f"offset: {error}") from None
        if not isinstance(coordinates, (list, tuple)) or len(coordinates) != layout.rank:
            raise BuilderError(f"offset: layout {layout} has {layout.rank} modes; give one coordinate per mode, "
                               f"got {coordinates!r}")
        if any(not isinstance(stride, int) for axis in range(layout.rank) for stride in layout.flat_strides(axis)):
            raise BuilderError(f"offset: layout {layout} has thread strides; an offset is of a memory layout")
        constant, dynamic, largest = 0, None, 0
        for axis, (coordinate, size) in enumerate(zip(coordinates, layout.sizes)):
            leaves = layout.mode(axis)
            if isinstance(coordinate, tuple) and len(coordinate) == 2 and is_int(coordinate[1]):
                if len(leaves) != 1:
                    raise BuilderError(f"offset: a (value, int) coordinate needs a mode with one leaf; mode {axis} "
                                       f"of {layout} is {leaves}")
                coordinate, shift = coordinate
                if not 0 <= shift < size:
                    raise BuilderError(f"offset: constant part {shift} of mode {axis} is outside its size {size}")
                constant += shift * leaves[0][1]
            if is_int(coordinate):
                if not 0 <= coordinate < size:
                    raise BuilderError(f"offset: coordinate {coordinate} of mode {axis} is outside its size {size}")
                below = 1
                for extent, stride in leaves:
                    constant += coordinate // below % extent * stride
                    below *= extent
                continue
            value = self.as_index(coordinate)
            bound = upper_bound(value) if len(leaves) == 1 else None  # a single leaf: the value's own range
            for extent, stride in leaves:
                top = extent - 1 if bound is None else min(extent - 1, bound)
                if extent > 1 and stride:
                    largest = largest + top * stride if stride > 0 and largest >= 0 else -1
            term = mode_offset(value, leaves, self.index) if emit else None
            if term is not None:
                dynamic = term if dynamic is None else arith.addi(dynamic, term)
        return layout, dynamic, constant, largest

    def planned(self, buffer: ir.Value, layout: Layout | str, coordinates: Sequence[Sequence],
                elements: int = 1) -> list[tuple[ir.Value, ir.Value]]:
        """The (buffer, index) of each coordinate of `layout` in the 1-D `buffer`, planned as the transfer's
        lowering is: where the coordinates share their thread-dependent parts and the swizzle leaves every
        constant part whole (its bits above the thread-dependent part's and the swizzle's), one per-thread base
        view (`memref.subview` at the swizzled base) indexed by compile-time constants, which LLVM folds into
        the instructions' immediate offsets; otherwise each offset in full. `elements`: how many elements
        each access reads from its index."""
        memref_value(buffer, "planned")
        if not isinstance(coordinates, (list, tuple)) or any(not isinstance(c, (list, tuple)) for c in coordinates):
            raise BuilderError(f"planned: coordinates is a list of coordinates (one per access, each a list with one "
                               f"entry per mode), got {coordinates!r}")
        count(elements, "planned: elements")
        self._layout_fits(buffer, layout, "planned")
        coordinates = [list(c) for c in coordinates]
        splits = [self._split_offset(layout, c, emit=False) for c in coordinates]  # checks each coordinate
        parts = [[c[0] if isinstance(c, tuple) else None if is_int(c) else c for c in point] for point in coordinates]
        if not splits:
            return []
        layout, _, _, largest = splits[0]
        swizzle = layout.swizzle
        if (len(coordinates) == 1 or any(not _same_parts(p, parts[0]) for p in parts[1:])
                or all(p is None for p in parts[0])
                or (swizzle is not None and not all(_above(c, largest) and swizzle(c) == c for _, _, c, _ in splits))):
            return [(buffer, self.offset(layout, c)) for c in coordinates]
        origin = [part if part is not None else 0 for part in parts[0]]
        _, dynamic, _, _ = self._split_offset(layout, origin)
        if dynamic is None:  # the values fall on modes of extent 1 or stride 0: every offset is a constant
            dynamic = self.index(0)
        base = swizzled(dynamic, swizzle, self.index) if swizzle else dynamic
        extent = max(c for _, _, c, _ in splits) + elements
        view = memref.subview(memref_value(buffer, "planned"), [base], [extent], [1])
        return [(view, self.index(c)) for _, _, c, _ in splits]

    # ----- loads and stores -----
    def load(self, buffer: ir.Value, indices: Sequence[ir.Value | int]) -> ir.Value:
        places = self._indices(buffer, indices, "load")
        self._touch(buffer, "a load")
        return memref.load(buffer, places)

    def store(self, value: ir.Value, buffer: ir.Value, indices: Sequence[ir.Value | int]) -> None:
        if not isinstance(value, ir.Value) or value.type != ir.MemRefType(memref_value(buffer, "store").type).element_type:
            raise BuilderError(f"store: the value must be an ir.Value of the buffer's element type, got {value!r}")
        places = self._indices(buffer, indices, "store")
        self._touch(buffer, "a store", writes=True)
        memref.store(value, buffer, places)

    def _touch(self, buffer: ir.Value, what: str, writes: bool = False) -> None:
        """A read or write of `buffer` by the program: refused while a wgmma group owns it (or, a write,
        reads it)."""
        if not self._wgmma_internal:
            self.wgmma_groups.access(buffer, what, lambda: _where(self.context), writes)

    def _stage_freed(self, ring, k_tile, what: str) -> None:
        """`what` lets k-tile `k_tile`'s stage of StageRing `ring` be written: refused while a wgmma group may
        read it (`asynchrony`)."""
        self.wgmma_groups.stage_written(id(ring), ring.stages, k_tile, what, lambda: _where(self.context))

    def load_vector(self, buffer: ir.Value, indices: Sequence[ir.Value | int], elements: int, *,
                    assume_aligned: bool = False) -> ir.Value:
        """`elements` consecutive elements along the last dimension from `buffer[indices]`, as one 2/4/8/16-byte
        access (`vector.load` with its alignment): the alignment is proven from the buffer (a Global's declared
        alignment, a shared buffer's, a view's offset) and the indices, else BuilderError. `assume_aligned`
        is the explicit opt-out: the caller promises the alignment."""
        kind, places, alignment = self._vector_access("load_vector", buffer, indices, elements, assume_aligned)
        self._touch(buffer, "a vector load")
        return vector.load(kind, buffer, places, alignment=alignment)

    def store_vector(self, value: ir.Value, buffer: ir.Value, indices: Sequence[ir.Value | int], *,
                     assume_aligned: bool = False) -> None:
        """`value` (a vector) stored at `buffer[indices]` as one access whose alignment is proven as for
        load_vector (without it, LLVM splits a global vector store into 4-byte stores)."""
        if not isinstance(value, ir.Value) or not isinstance(value.type, ir.VectorType):
            raise BuilderError(f"store_vector: the value must be a vector value, got {value!r}")
        elements = ir.VectorType(value.type).shape
        kind, places, alignment = self._vector_access("store_vector", buffer, indices, elements[0] if len(elements) == 1
                                                      else 0, assume_aligned)
        if kind != value.type:
            raise BuilderError(f"store_vector: a {value.type} cannot be stored to {buffer.type} (wanted {kind})")
        self._touch(buffer, "a vector store", writes=True)
        vector.store(value, buffer, places, alignment=alignment)

    def _vector_access(self, what, buffer, indices, elements, assume_aligned):
        kind = ir.MemRefType(memref_value(buffer, what).type)
        count(elements, f"{what}: elements", maximum=16)
        places = self._indices(buffer, indices, what)
        nbytes = elements * _element_bytes(kind)
        if nbytes not in VECTOR_BYTES:
            raise BuilderError(f"{what}: {elements} x {kind.element_type} is {nbytes} bytes; an access is one of "
                               f"{VECTOR_BYTES} bytes")
        strides, _ = kind.get_strides_and_offset()
        if kind.rank == 0 or strides[-1] != 1:
            raise BuilderError(f"{what}: the elements must be consecutive: {kind}'s last dimension has stride "
                               f"{strides[-1] if kind.rank else None}")
        last = constant_int(places[-1])
        if last is not None and kind.shape[-1] != ir.ShapedType.get_dynamic_size() and last + elements > kind.shape[-1]:
            raise BuilderError(f"{what}: elements {last}..{last + elements - 1} pass the end of the last dimension "
                               f"({kind.shape[-1]})")
        if not assume_aligned:
            proven = access_alignment(buffer, places)
            if proven is None or proven < nbytes:
                raise BuilderError(
                    f"{what}: a {nbytes}-byte access needs {nbytes}-byte alignment, but "
                    f"{'no alignment of the buffer is proven' if proven is None else f'only {proven} bytes are proven'} "
                    f"at these indices (declare the buffer's alignment, e.g. Global('f16', alignment=16), make the "
                    f"indices multiples of {nbytes} bytes, or pass assume_aligned=True to promise it)")
        return ir.VectorType.get([elements], kind.element_type), places, nbytes

    def _indices(self, buffer: ir.Value, indices, what: str = "access") -> list[ir.Value]:
        """The indices as index values; a constant one (an int or an arith.constant) is checked against its
        dimension's extent where that is static."""
        kind = ir.MemRefType(memref_value(buffer, what).type)
        if not isinstance(indices, (list, tuple)) or len(indices) != kind.rank:
            raise BuilderError(f"{what}: the buffer has rank {kind.rank}, but the indices are {indices!r}")
        places = [self.as_index(i) for i in indices]
        for dimension, (place, extent) in enumerate(zip(places, kind.shape)):
            constant = constant_int(place)
            if constant is not None and (constant < 0 or (extent != ir.ShapedType.get_dynamic_size() and constant >= extent)):
                raise BuilderError(f"{what}: index {constant} of dimension {dimension} is outside {kind} (0 to "
                                   f"{extent - 1 if extent >= 0 else 'its dynamic extent'})")
        return places

    def _layout_fits(self, buffer: ir.Value, layout: Layout | str, what: str) -> Layout:
        """The layout, once its offsets are proven inside the 1-D `buffer` (no negative offset, its cosize
        within a static extent)."""
        try:
            layout = as_layout(layout)
        except ValueError as error:
            raise BuilderError(f"{what}: {error}") from None
        kind = ir.MemRefType(memref_value(buffer, what).type)
        if kind.rank != 1:
            raise BuilderError(f"{what}: a layout's offsets index a 1-D buffer, got {kind}")
        extent = kind.shape[0]
        if layout.min_offset < 0:
            raise BuilderError(f"{what}: layout {layout} reaches offset {layout.min_offset}, before the buffer's start")
        if extent != ir.ShapedType.get_dynamic_size() and layout.cosize > extent:
            raise BuilderError(f"{what}: layout {layout} reaches offset {layout.cosize - 1}, past the end of "
                               f"{buffer.type} ({extent} elements)")
        return layout


def _element_bytes(kind: ir.MemRefType) -> int:
    element = kind.element_type
    return 8 if isinstance(element, ir.IndexType) else max(1, element.width // 8)


def _same_parts(a: list, b: list) -> bool:
    """Whether two coordinates' thread-dependent parts are the same values (None: a constant coordinate)."""
    return len(a) == len(b) and all(x is y or (x is not None and y is not None and x == y) for x, y in zip(a, b))


def _above(constant: int, largest: int) -> bool:
    """Whether every bit of `constant` is above the bits of values up to `largest` (-1: unknown)."""
    return largest >= 0 and constant >> largest.bit_length() << largest.bit_length() == constant


def _where(context: ir.Context) -> str:
    """`at file:line` of the user's call, for a diagnostic raised later than the call (at a loop's end)."""
    return f"at {location_text(caller_location(context))}"
