"""CuTe's tensors in the builder: a memory value (a global argument, a shared view, register storage) or the
coordinates themselves (an identity tensor), seen through a layout, tiled and sliced as CuTe does.

A global matrix's extents and strides are kernel arguments, so a global tensor's layout is flat modes whose
extents and strides are ints or index values (CuTe's dynamic integers); shared and register tensors keep
their static `Layout` (nested, swizzled), whose offsets `Kernel.offset` emits. All index arithmetic of an
access is made here, folding what is static, so a kernel written on tensors holds none:

    mA = k.tensor(a, (m, depth), (depth, 1))                  # A, row-major M x K
    gA = local_tile(mA, (128, 32), (m_tile, None))            # (128, 32, k_tiles): the CTA's rows, each k-tile
    cA = local_tile(k.identity_tensor((m, depth)), (128, 32), (m_tile, None))
    k.copy(gA[None, None, k_tile], sA, valid=cA[None, None, k_tile].residue())

`t[coordinate]` with an entry per mode reads the element (a memory tensor) or gives the coordinate (an
identity tensor); `None` entries keep their modes (CuTe's `_`) and the result is the sliced tensor.
"""
from __future__ import annotations

import functools
from typing import Sequence

from mlir import ir
from mlir.dialects import arith

from mlir_tile.builder.common import (BuilderError, check_visible, count, enclosing_blocks, is_int, memref_value,
                                      values_in)
from mlir_tile.algebra.layout import Layout, as_layout

Integer = int | ir.Value  # an extent, stride or coordinate: static, or an index value


def _here(method):
    """A call on a tensor: its kernel is being built, and every value the tensor holds and every value among the
    arguments is visible where the call builds (a tensor made inside a loop that has ended cannot be used after
    it, as no value made there can)."""
    @functools.wraps(method)
    def call(self, *arguments, **keywords):
        what = f"{type(self).__name__}.{method.__name__.strip('_')}"
        kernel = self.kernel
        if not getattr(kernel, "_open", False):
            raise BuilderError(f"{what}: its kernel '{kernel.name}' is not being built; use a tensor inside the "
                               f"kernel's `with` block")
        here = enclosing_blocks(ir.InsertionPoint.current.block)
        check_visible(values_in([*self.held(), *arguments, *keywords.values()]), what, here)
        return method(self, *arguments, **keywords)
    return call


class Tensor:
    """`memory` (a 1-D memref) from element `base` on, through `layout`: a static `Layout` (shared or register
    memory, maybe swizzled: the swizzle applies to the offset from `base`) or flat `shape` and `stride` of
    Integers (a global tensor, `Kernel.tensor`)."""

    def __init__(self, kernel, memory: ir.Value, layout: Layout | None = None, shape: Sequence[Integer] = (),
                 stride: Sequence[Integer] = (), base: Integer = 0):
        self.kernel, self.memory, self.layout, self.base = kernel, memory, layout, base
        self.shape = tuple(layout.sizes) if layout is not None else tuple(shape)
        self.stride = tuple(stride)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def held(self) -> list:
        """The IR values the tensor holds (its base, extents and strides)."""
        return [self.base, *self.shape, *self.stride]

    @_here
    def offset(self, coordinate: Sequence) -> ir.Value:
        """The element offset in `memory` of a coordinate (an entry per mode: ints or index values; a static
        layout also takes CuTe's nested (value, int) form, see `Kernel.offset`)."""
        _full(self, coordinate, "offset")
        coordinate, k = _coordinate(coordinate, self), self.kernel
        if self.layout is not None:
            return _add(k, self.base, k.offset(self.layout, list(coordinate)), emit=True)
        return k.as_index(_dot(k, self.base, coordinate, self.stride))

    @_here
    def __getitem__(self, coordinate):
        coordinate = _coordinate(coordinate, self)
        if any(c is None for c in coordinate):
            return self._sliced(coordinate)
        return self.load(coordinate)

    @_here
    def load(self, coordinate: Sequence, where: ir.Value | None = None) -> ir.Value:
        """The element at `coordinate`; with `where` (an i1), that element where it holds, else the tensor's
        first (no branch: a tensor of one element or more stands in for one that is not there)."""
        offset = self.offset(coordinate)
        if where is not None:
            offset = arith.select(where, offset, self.kernel.as_index(self.base))
        return self.kernel.load(self.memory, [offset])

    @_here
    def __setitem__(self, coordinate, value: ir.Value) -> None:
        self.kernel.store(value, self.memory, [self.offset(_coordinate(coordinate, self))])

    def _sliced(self, coordinate) -> "Tensor":
        if self.layout is not None:
            raise BuilderError(f"slicing: a tensor with a static layout ({self.layout}) is read whole or by "
                               f"coordinates; slice global tensors (Kernel.tensor) or identity tensors")
        kept = [axis for axis, c in enumerate(coordinate) if c is None]
        fixed = [0 if c is None else c for c in coordinate]
        return Tensor(self.kernel, self.memory, shape=[self.shape[a] for a in kept],
                      stride=[self.stride[a] for a in kept], base=_dot(self.kernel, self.base, fixed, self.stride))

    @_here
    def local_tile(self, tiler: Sequence[int], coordinate: Sequence) -> "Tensor":
        return Tensor(self.kernel, self.memory, **_tiled(self, tiler, coordinate, self.stride, self.base))

    @_here
    def domain_offset(self, origin: Sequence) -> "Tensor":
        """The tensor from coordinate `origin` on (CuTe's domain_offset): its extents what is left past it."""
        _full(self, origin, "domain_offset")
        origin, k = _coordinate(origin, self), self.kernel
        return Tensor(k, self.memory, shape=[_sub(k, s, _sum(k, o)) for s, o in zip(self.shape, origin)],
                      stride=self.stride, base=_dot(k, self.base, origin, self.stride))

    def __repr__(self) -> str:
        return f"Tensor({_text(self.shape)}:{_text(self.stride) if self.layout is None else self.layout})"


class Coordinates:
    """An identity tensor (CuTe's `make_identity_tensor`): the value at a coordinate is the coordinate of the
    whole tensor it was tiled from, `origin` + the coordinate; `extent` is that whole tensor's shape, against
    which `inside` and `residue` make the predicates of a tile's accesses."""

    def __init__(self, kernel, shape: Sequence[Integer], extent: Sequence[Integer], origin: Sequence[Integer],
                 stride: Sequence[tuple]):
        self.kernel, self.shape, self.extent = kernel, tuple(shape), tuple(extent)
        self.origin, self.stride = tuple(origin), tuple(stride)  # stride: per mode, a step along each dimension

    @property
    def rank(self) -> int:
        return len(self.shape)

    def held(self) -> list:
        """The IR values the tensor holds (its extents and origin)."""
        return [*self.shape, *self.extent, *self.origin]

    @_here
    def __getitem__(self, coordinate):
        coordinate = _coordinate(coordinate, self)
        k = self.kernel
        if any(c is None for c in coordinate):
            kept = [axis for axis, c in enumerate(coordinate) if c is None]
            fixed = [0 if c is None else c for c in coordinate]
            return Coordinates(k, [self.shape[a] for a in kept], self.extent, self._at(fixed),
                               [self.stride[a] for a in kept])
        return tuple(k.as_index(c) for c in self._at(coordinate))

    def _at(self, coordinate) -> tuple:
        k = self.kernel
        return tuple(_dot(k, start, coordinate, [step[d] for step in self.stride]) for d, start in enumerate(self.origin))

    @_here
    def local_tile(self, tiler: Sequence[int], coordinate: Sequence) -> "Coordinates":
        k = self.kernel
        tiled = _tiled(self, tiler, coordinate, self.stride, self.origin, vector=True)
        return Coordinates(k, tiled["shape"], self.extent, tiled["base"], tiled["stride"])

    @_here
    def domain_offset(self, origin: Sequence) -> "Coordinates":
        """The coordinates from `origin` on (CuTe's domain_offset): the value at 0 is `origin`'s."""
        origin = _coordinate(origin, self)
        shape = [_sub(self.kernel, s, _sum(self.kernel, o)) for s, o in zip(self.shape, origin)]
        return Coordinates(self.kernel, shape, self.extent, self._at(origin), self.stride)

    @_here
    def partition(self, layouts: Sequence[Layout]) -> "Partition":
        """These coordinates as a thread-value partition reaches them (CuTe's `thr_mma.partition_C(cC)`):
        `layouts[d]` maps the partition's coordinate (e.g. (thread, slot)) to the position along dimension d
        of the tile at this tensor's origin (`TiledMma.accumulator_coordinates()`)."""
        if not isinstance(layouts, (list, tuple)) or len(layouts) != len(self.origin):
            raise BuilderError(f"partition: a layout per dimension ({len(self.origin)}), got {layouts!r}")
        try:
            layouts = [as_layout(layout) for layout in layouts]
        except ValueError as error:
            raise BuilderError(f"partition: {error}") from None
        if any(layout.swizzle is not None for layout in layouts):
            raise BuilderError("partition: a thread-value layout has no swizzle")
        return Partition(self, layouts)

    @_here
    def coordinate_of(self, index: ir.Value) -> tuple:
        """The coordinate of element `index` of this tensor in row-major order (CuTe's idx2crd with
        LayoutRight), index values: the last dimension's remainder, the rest's quotients."""
        k, point = self.kernel, []
        index = k.as_index(index)
        for extent in reversed(self.shape[1:]):
            point.append(arith.remui(index, k.as_index(extent)))
            index = arith.divui(index, k.as_index(extent))
        return tuple(k.as_index(c) for c in self[tuple([index, *reversed(point)])])

    @_here
    def residue(self, dimensions: Sequence[int] | None = None) -> tuple:
        """How many of the whole tensor's coordinates lie at or past this tensor's first, per dimension (CuTe's
        residue: a tile's valid rows and columns, for copies that zero-fill the rest), as index values; only
        in `dimensions` (all by default), None in the others (known inside)."""
        if dimensions is not None and not isinstance(dimensions, (list, tuple)):
            raise BuilderError(f"residue: dimensions are a list of the tensor's dimensions, got {dimensions!r}")
        k = self.kernel
        return tuple(k.as_index(_sub(k, e, o)) if dimensions is None or d in dimensions else None
                     for d, (e, o) in enumerate(zip(self.extent, self.origin)))

    @_here
    def holds(self, tile: Sequence[int]) -> ir.Value:
        """Whether a `tile` from this tensor's first coordinate lies wholly inside the whole tensor (an i1)."""
        if not isinstance(tile, (list, tuple)) or len(tile) != len(self.origin):
            raise BuilderError(f"holds: a tile extent per dimension ({len(self.origin)}), got {tile!r}")
        tile = [count(extent, "holds: tile extent") for extent in tile]
        k, result = self.kernel, None
        for start, extent, size in zip(self.origin, self.extent, tile):
            test = k.compare("ule", _add(k, start, size, emit=True), extent)
            result = test if result is None else arith.andi(result, test)
        return result

    @_here
    def clamped(self, coordinate: Sequence) -> tuple:
        """The whole tensor's coordinate of `coordinate`, each entry clamped to the last inside (unsigned): an
        always-valid place to read at."""
        k = self.kernel
        return tuple(k.minimum(p, _sub(k, e, 1)) for p, e in zip(self[_coordinate(coordinate, self)], self.extent))

    @_here
    def inside(self, coordinate: Sequence, dimensions: Sequence[int] | None = None, start: Sequence | None = None
               ) -> ir.Value:
        """Whether the element at `coordinate` lies inside the whole tensor (CuTe's `elem_less(c, shape)`),
        unsigned, in the `dimensions` given (all by default): an i1 value. With `start` (a coordinate of the
        whole tensor), whether it lies at or past `start` instead (a region the extent is known to hold)."""
        return _inside(self.kernel, self[_coordinate(coordinate, self)], self.extent, dimensions, start)


def _inside(k, point, extent, dimensions, start) -> ir.Value:
    every = range(len(point))
    if dimensions is not None and (not isinstance(dimensions, (list, tuple)) or any(
            not is_int(d) or d not in every for d in dimensions)):
        raise BuilderError(f"inside: dimensions are a list of the tensor's dimensions {list(every)}, got {dimensions!r}")
    if start is not None and (not isinstance(start, (list, tuple)) or len(start) != len(point)):
        raise BuilderError(f"inside: start is a coordinate of the whole tensor ({len(point)} entries), got {start!r}")
    tests = [k.compare("ult", point[d], extent[d]) if start is None else k.compare("uge", point[d], start[d])
             for d in (range(len(point)) if dimensions is None else dimensions)]
    if not tests:
        raise BuilderError("inside: no dimension to test")
    result = tests[0]
    for test in tests[1:]:
        result = arith.andi(result, test)
    return result


class Partition:
    """Coordinates seen through a thread-value partition: see `Coordinates.partition`."""

    def __init__(self, coordinates: Coordinates, layouts: Sequence[Layout]):
        self.coordinates, self.layouts = coordinates, list(layouts)
        self.kernel = coordinates.kernel

    def held(self) -> list:
        return self.coordinates.held()

    @_here
    def __getitem__(self, coordinate) -> tuple:
        """The whole tensor's coordinate of the partition's element `coordinate` (ints or index values)."""
        k = self.coordinates.kernel
        coordinate = list(coordinate) if isinstance(coordinate, (list, tuple)) else [coordinate]
        point = []
        for start, layout in zip(self.coordinates.origin, self.layouts):
            dynamic, constant = k.offset_parts(layout, coordinate)
            point.append(k.as_index(_add(k, _add(k, start, 0 if dynamic is None else dynamic), constant)))
        return tuple(point)

    @_here
    def inside(self, coordinate, dimensions: Sequence[int] | None = None) -> ir.Value:
        """Whether the partition's element `coordinate` lies inside the whole tensor (see Coordinates.inside)."""
        return _inside(self.coordinates.kernel, self[coordinate], self.coordinates.extent, dimensions, None)


class Tensors:
    """The kernel's calls that make tensors and copy between them."""

    def tensor(self, memory: ir.Value, layout: Layout | str | Sequence[Integer], stride: Sequence[Integer] | None = None,
               base: Integer = 0) -> Tensor:
        """A tensor of `memory`: through a static layout (a `Layout` or its text: shared or register memory), or
        of extents `layout` and strides `stride` (Integers: a global matrix, e.g. `(m, depth), (depth, 1)`;
        without strides, row-major: CuTe's LayoutRight)."""
        memref_value(memory, "tensor")
        base = as_integer(self, base, "tensor: base")
        if stride is None and isinstance(layout, (list, tuple)):
            stride, step = [], 1
            for extent in reversed(layout):
                stride.insert(0, step)
                step = _mul(self, step, as_integer(self, extent, "tensor: extent"))
        if stride is None:
            try:
                layout = as_layout(layout)
            except ValueError as error:
                raise BuilderError(f"tensor: {error}") from None
            self._layout_fits(memory, layout, "tensor")
            return Tensor(self, memory, layout, base=base)
        if not isinstance(layout, (list, tuple)) or not isinstance(stride, (list, tuple)) or len(layout) != len(stride):
            raise BuilderError(f"tensor: extents and strides, one of each per mode, got {layout!r} and {stride!r}")
        return Tensor(self, memory, shape=[as_integer(self, e, "tensor: extent") for e in layout],
                      stride=[as_integer(self, s, "tensor: stride") for s in stride], base=base)

    def identity_tensor(self, shape: Sequence[Integer]) -> "Coordinates":
        """CuTe's `make_identity_tensor(shape)`: each coordinate's value is itself."""
        if not isinstance(shape, (list, tuple)) or not shape:
            raise BuilderError(f"identity_tensor: a shape (extents, ints or index values), got {shape!r}")
        shape = tuple(as_integer(self, s, "identity_tensor: shape") for s in shape)
        units = [tuple(int(d == axis) for d in range(len(shape))) for axis in range(len(shape))]
        return Coordinates(self, shape, shape, (0,) * len(shape), units)

    def copy(self, src: Tensor, dst: Tensor, *, valid: Sequence = (None, None), chunk_bytes: int = 16,
             asynchronous: bool = True) -> list[ir.Value]:
        """A tile of a global tensor (rows of unit stride) into a shared tensor of the same extents, by the
        whole block (`copy_tile_async`'s tiled copy: `chunk_bytes` cp.async chunks, destinations from the
        shared layout), elements at or past `valid` (rows, columns: a `Coordinates.residue()`, None where the
        tile is known inside) zero-filled. `asynchronous=False`: rows of any alignment, element by element
        (`copy_tile`: synchronous, returns no tokens). Returns the copies' tokens."""
        for name, tensor, static in (("src", src, False), ("dst", dst, True)):
            if not isinstance(tensor, Tensor) or tensor.rank != 2 or (tensor.layout is not None) != static:
                raise BuilderError(f"copy: {name} is a rank-2 {'shared' if static else 'global'} Tensor "
                                   f"({'a static layout' if static else 'Kernel.tensor of extents and strides'}), "
                                   f"got {tensor!r}")
        if not (is_int(src.stride[1]) and src.stride[1] == 1):
            raise BuilderError(f"copy: the source's rows are read in chunks: its column stride must be 1, got "
                               f"{src.stride[1] if is_int(src.stride[1]) else 'a value'}")
        if not isinstance(valid, (list, tuple)) or len(valid) != 2:
            raise BuilderError(f"copy: valid is (rows, columns), each None or an Integer, got {valid!r}")
        rows, cols = dst.shape
        if not is_int(dst.base) or dst.base:
            raise BuilderError("copy: the shared tensor starts at its memory's first element (a view at the tile)")
        origin, row_stride = self.as_index(src.base), self.as_index(src.stride[0])
        if not asynchronous:
            return self.copy_tile(dst.memory, dst.layout, src.memory, origin, row_stride, rows=rows, cols=cols,
                                  valid_rows=valid[0] if valid[0] is not None else rows,
                                  valid_cols=valid[1] if valid[1] is not None else cols) or []
        return self.copy_tile_async(dst.memory, dst.layout, src.memory, origin, row_stride, rows=rows, cols=cols,
                                    valid_rows=valid[0], valid_cols=valid[1], chunk_bytes=chunk_bytes)


def local_tile(tensor, tiler: Sequence[int], coordinate: Sequence):
    """CuTe's `local_tile`: the tensor divided into tiles of `tiler`, the tile at `coordinate` (tile
    indices, ints or index values); a `None` entry keeps that mode's tiles as a trailing mode of
    ceil(extent / tile) tiles (CuTe's `_`), so the result's modes are the tile's, then the kept ones."""
    if not isinstance(tensor, (Tensor, Coordinates)):
        raise BuilderError(f"local_tile: a Tensor or an identity tensor, got {type(tensor).__name__}")
    return tensor.local_tile(tiler, coordinate)


def ceil_div(kernel, a: Integer, b: int) -> Integer:
    """ceil(a / b) of a non-negative Integer and a positive int, folded where a is static."""
    count(b, "ceil_div: divisor")
    if is_int(a):
        return -(-a // b)
    if b == 1:
        return a
    return arith.divui(arith.addi(kernel.as_index(a), kernel.index(b - 1)), kernel.index(b))


def whole_tiles(kernel, a: Integer, b: int) -> Integer:
    """How many whole tiles of `b` an extent `a` holds (floor(a / b)), folded where a is static."""
    count(b, "whole_tiles: tile")
    if is_int(a):
        return a // b
    return a if b == 1 else arith.divui(kernel.as_index(a), kernel.index(b))


def in_units(kernel, units: ir.Value, unit: int) -> Integer:
    """An extent passed as a count of `unit`s (a kernel parameter N / 8 makes N a proven multiple of 8, so
    rows start on 16 bytes), in elements."""
    return _mul(kernel, units, unit)


def _tiled(tensor, tiler, coordinate, stride, base, vector: bool = False) -> dict:
    """shape, stride and base of `local_tile(tensor, tiler, coordinate)` (strides: ints or vectors of them)."""
    k, what = tensor.kernel, "local_tile"
    if tensor.__class__ is Tensor and tensor.layout is not None:
        raise BuilderError(f"{what}: a tensor with a static layout ({tensor.layout}) is tiled by its layout's "
                           f"algebra (Layout.zipped_divide); local_tile takes global and identity tensors")
    if not isinstance(tiler, (list, tuple)) or len(tiler) != tensor.rank:
        raise BuilderError(f"{what}: a tile extent per mode of the rank-{tensor.rank} tensor, got {tiler!r}")
    tiler = [count(t, f"{what}: tile extent") for t in tiler]
    coordinate = _coordinate(coordinate, tensor)
    scale = (lambda step, t: tuple(_mul(k, s, t) for s in step)) if vector else (lambda step, t: _mul(k, step, t))
    tile_strides = [scale(s, t) for s, t in zip(stride, tiler)]
    fixed = [0 if c is None else c for c in coordinate]
    if vector:
        base = tuple(_dot(k, b, fixed, [step[d] for step in tile_strides]) for d, b in enumerate(base))
    else:
        base = _dot(k, base, fixed, tile_strides)
    kept = [a for a, c in enumerate(coordinate) if c is None]
    return dict(shape=[*tiler, *(ceil_div(k, tensor.shape[a], tiler[a]) for a in kept)],
                stride=[*stride, *(tile_strides[a] for a in kept)], base=base)


def _coordinate(coordinate, tensor) -> tuple:
    if isinstance(coordinate, list):
        coordinate = tuple(coordinate)
    if not isinstance(coordinate, tuple):
        coordinate = (coordinate,)
    if len(coordinate) != tensor.rank:
        raise BuilderError(f"a coordinate of the rank-{tensor.rank} tensor {_text(tensor.shape)} has {tensor.rank} "
                           f"entries (None keeps a mode), got {len(coordinate)}: {coordinate!r}")
    for c in coordinate:
        pair = isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], ir.Value) and is_int(c[1])
        if c is not None and not is_int(c) and not isinstance(c, ir.Value) and not pair:
            raise BuilderError(f"a coordinate entry is an int, an index value, (value, int) for their sum, or None, "
                               f"got {c!r}")
    return coordinate


def _full(tensor, coordinate, what: str) -> None:
    if not isinstance(coordinate, (list, tuple)) or len(coordinate) != tensor.rank or any(c is None for c in coordinate):
        raise BuilderError(f"{what}: an entry per mode of the rank-{tensor.rank} tensor, got {coordinate!r}")


def as_integer(kernel, value, what: str) -> Integer:
    """An extent or stride: a non-negative int, or an index value (BuilderError for anything else)."""
    if is_int(value):
        return count(value, what, minimum=0)
    return kernel.as_index(value)


def _dot(k, base: Integer, coordinate: Sequence, stride: Sequence[Integer]) -> Integer:
    """base + sum of coordinate * stride, folding the static terms; a (value, int) entry is their sum. The
    terms of static coordinates come last, so that accesses differing only in them share the rest (one base,
    then a constant or a loop-invariant step each)."""
    total, static = base, []
    for c, s in zip(coordinate, stride):
        value, shift = c if isinstance(c, tuple) else (None, c) if is_int(c) else (c, 0)
        if value is not None:
            total = _add(k, total, _mul(k, value, s))
        static.append(_mul(k, shift, s))
    total = _add(k, total, sum(term for term in static if is_int(term)))
    for term in static:
        if not is_int(term):
            total = _add(k, total, term)
    return total


def _add(k, a: Integer, b: Integer, emit: bool = False) -> Integer:
    if is_int(a) and is_int(b):
        return k.index(a + b) if emit else a + b
    if is_int(a) and a == 0:
        return b
    if is_int(b) and b == 0:
        return a
    return arith.addi(k.as_index(a), k.as_index(b))


def _sum(k, entry) -> Integer:
    """A coordinate entry's value: a (value, int) pair is their sum."""
    return _add(k, *entry) if isinstance(entry, tuple) else entry


def _sub(k, a: Integer, b: Integer) -> Integer:
    if is_int(a) and is_int(b):
        return a - b
    if is_int(b) and b == 0:
        return a
    return arith.subi(k.as_index(a), k.as_index(b))


def _mul(k, a: Integer, b: Integer) -> Integer:
    if is_int(a) and is_int(b):
        return a * b
    if is_int(a):
        a, b = b, a
    if is_int(b) and b in (0, 1):
        return 0 if b == 0 else a
    return arith.muli(k.as_index(a), k.as_index(b))


def _text(values) -> str:
    return "(" + ",".join(str(v) if is_int(v) else "?" for v in values) + ")"
