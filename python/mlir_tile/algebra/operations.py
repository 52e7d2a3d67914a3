"""CuTe's layout algebra on `Layout`s: functions of layouts with integer strides, with CuTe's names and
semantics (cute/layout.hpp; the pure-Python pycute is the oracle the tests compare with)."""
from __future__ import annotations

import math

from mlir_tile.algebra.layout import Layout, Swizzle, ThreadStride, _flatten, _on_layouts, _tuple_text, as_layout


# A layout is handled as CuTe's pair (shape, stride) of integer
# tuples: a rank-1 layout is its one mode, so `8:1` is Layout((8,), (1,)). Where CuTe leaves an input
# undefined (strides that do not divide, a layout that is not injective where one must be) the functions
# raise ValueError saying which condition fails.

def _pair(layout: Layout, integer_strides: bool = True) -> tuple:
    """CuTe's (shape, stride) of a layout: a rank-1 layout of an integer mode is that integer (`8:1`)."""
    if integer_strides and any(isinstance(s, ThreadStride) for s in _flatten(layout.stride)):
        raise ValueError(f"layout {layout}: the layout algebra works on integer strides, not thread strides")
    if layout.rank == 1 and not isinstance(layout.shape[0], tuple):
        return layout.shape[0], layout.stride[0]
    return layout.shape, layout.stride


def _submodes(layout: Layout, count: int) -> list[Layout]:
    """The `count` sub-modes of a rank-1 layout whose mode holds that many (itself when `count` is 1)."""
    if count == 1:
        return [layout]
    return [Layout((shape,), (stride,)) for shape, stride in zip(layout.shape[0], layout.stride[0])]


def _layout(shape, stride, swizzle: Swizzle | None = None) -> Layout:
    if isinstance(shape, tuple):
        return Layout(shape, stride, swizzle) if shape else Layout((1,), (0,), swizzle)
    return Layout((shape,), (stride,), swizzle)


def _as_layout(value) -> Layout:
    """A tiler element: a Layout, a layout's text, or an integer n (the layout n:1)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return Layout((value,), (1,))
    return as_layout(value)


def _modes(layout: Layout) -> list[Layout]:
    return [layout[axis] for axis in range(layout.rank)]


@_on_layouts
def make_layout(*layouts: Layout) -> Layout:
    """The layout whose modes are the given layouts (each a mode, nested if it has several); thread strides
    are kept (this only regroups)."""
    pairs = [_pair(layout, integer_strides=False) for layout in layouts]
    return Layout(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))


def _unswizzled(layout: Layout, operation: str) -> Layout:
    if layout.swizzle is not None:
        raise ValueError(f"{operation}: {layout} is swizzled, and CuTe defines {operation} of a swizzled layout "
                         f"only where its result is the swizzle composed with the unswizzled one's (composition, "
                         f"logical_divide and the divides)")
    return layout


@_on_layouts
def coalesce(layout: Layout, profile=None) -> Layout:
    """The same function with as few modes as can express it (CuTe's coalesce): extents of 1 dropped, a mode
    merged into the one before when its stride is that one's extent times stride. With a tuple profile, each
    of the profile's modes is coalesced on its own (and the rest kept)."""
    _pair(layout)
    if isinstance(profile, tuple):
        if layout.rank < len(profile):
            raise ValueError(f"coalesce: profile {profile} has more modes than {layout}")
        modes = _modes(layout)
        return make_layout(
            *[coalesce(modes[i], profile[i]) for i in range(len(profile))], *modes[len(profile):])
    shapes, strides = [1], [0]
    for extent, stride in zip(_flatten(layout.shape), _flatten(layout.stride)):
        if extent == 1:
            continue
        if shapes[-1] == 1:
            shapes[-1], strides[-1] = extent, stride
        elif shapes[-1] * strides[-1] == stride:
            shapes[-1] *= extent
        else:
            shapes.append(extent)
            strides.append(stride)
    return Layout(tuple(shapes), tuple(strides), layout.swizzle)


@_on_layouts
def composition(a: Layout, b) -> Layout:
    """A o B: B's coordinates mapped through B to A's coordinates, then through A (CuTe's composition). `b` is a
    layout, an integer n (n:1), or a tuple with one tiler per leading mode of `a` (None keeps that mode). A
    swizzled `a` keeps its swizzle outside: (Sw o A) o B = Sw o (A o B)."""
    swizzle, a = a.swizzle, Layout(a.shape, a.stride)
    if isinstance(b, tuple):
        if a.rank < len(b):
            raise ValueError(f"composition: the tiler {b} has more modes than {a}")
        modes = _modes(a)
        result = make_layout(*[modes[i] if t is None else composition(modes[i], t) for i, t in enumerate(b)],
                             *modes[len(b):])
        return Layout(result.shape, result.stride, swizzle)
    b = _as_layout(b)
    if b.swizzle is not None:
        raise ValueError(f"composition: the right-hand layout {b} is swizzled; CuTe's composition of a layout with "
                         f"a swizzled one is no layout (compose the swizzle on the left)")
    shape, stride = _compose(_pair(a), _pair(b))
    return _layout(shape, stride, swizzle)


def _compose(a: tuple, b: tuple) -> tuple:
    """(shape, stride) of A o B for CuTe pairs: B by mode, each leaf of B through the coalesced A."""
    b_shape, b_stride = b
    if isinstance(b_shape, tuple):
        parts = [_compose(a, (s, d)) for s, d in zip(b_shape, b_stride)]
        return tuple(p[0] for p in parts), tuple(p[1] for p in parts)
    if b_stride == 0:
        return b_shape, 0
    flat = coalesce(_layout(*a))
    a_shapes, a_strides = list(_flatten(flat.shape)), list(_flatten(flat.stride))
    shapes, strides = [], []
    rest_shape, rest_stride = b_shape, b_stride
    for extent, stride in zip(a_shapes[:-1], a_strides[:-1]):
        if extent % rest_stride and rest_stride % extent:
            raise ValueError(f"composition: the stride {rest_stride} left of {_tuple_text((b_shape,))}:"
                             f"{_tuple_text((b_stride,))} and the extent {extent} of the left-hand layout's mode do "
                             f"not divide one another, so CuTe leaves A o B undefined")
        taken = min(max(1, extent // rest_stride), rest_shape)
        if taken != 1:
            shapes.append(taken)
            strides.append(rest_stride * stride)
        rest_shape //= taken
        rest_stride = -(-rest_stride // extent)
    if rest_shape != 1 or not shapes:
        shapes.append(rest_shape)
        strides.append(rest_stride * a_strides[-1])
    return (shapes[0], strides[0]) if len(shapes) == 1 else (tuple(shapes), tuple(strides))


@_on_layouts
def complement(layout: Layout, cotarget: int = 1) -> Layout:
    """The layout of the offsets below `cotarget` that `layout` does not reach, ordered so that (layout,
    complement) is injective (CuTe's complement)."""
    _unswizzled(layout, "complement")
    _pair(layout)
    shapes, strides, reached = [], [], 1
    for stride, extent in sorted(zip(_flatten(layout.stride), _flatten(layout.shape))):
        if stride == 0 or extent == 1:
            continue
        if reached > stride:
            raise ValueError(f"complement: {layout} is not injective (its mode {extent}:{stride} starts below "
                             f"offset {reached}, which the modes of smaller strides already reach), so CuTe leaves "
                             f"its complement undefined")
        shapes.append(stride // reached)
        strides.append(reached)
        reached = extent * stride
    shapes.append(-(-cotarget // reached))
    strides.append(reached)
    return coalesce(Layout(tuple(shapes), tuple(strides)))


@_on_layouts
def right_inverse(layout: Layout) -> Layout:
    """R with layout(R(i)) == i for every i below R's size, as large as possible (CuTe's right_inverse)."""
    _unswizzled(layout, "right_inverse")
    extents, strides = _flatten(layout.shape), _flatten(layout.stride)
    _pair(layout)
    positions = [math.prod(extents[:i]) for i in range(len(extents))]
    shapes, inverse_strides, reached = [], [], 1
    for stride, extent, position in sorted(zip(strides, extents, positions)):
        if extent == 1:
            continue
        if stride != reached:
            break
        shapes.append(extent)
        inverse_strides.append(position)
        reached = extent * stride
    return coalesce(Layout(tuple(shapes) or (1,), tuple(inverse_strides) or (0,)))


@_on_layouts
def left_inverse(layout: Layout) -> Layout:
    """L with L(layout(i)) == i for every coordinate i (CuTe's left_inverse: the right inverse of the layout
    completed by its complement)."""
    return right_inverse(make_layout(layout, complement(layout)))


@_on_layouts
def logical_divide(layout: Layout, tiler) -> Layout:
    """`layout` split by `tiler` into (the tile, the tiles): layout o (tiler, complement(tiler, size)), by mode
    for a tuple tiler (CuTe's logical_divide)."""
    if isinstance(tiler, tuple):
        return _by_mode(logical_divide, layout, tiler)
    tiler = _as_layout(tiler)
    return composition(layout, make_layout(tiler, complement(tiler, Layout(layout.shape, layout.stride).size)))


@_on_layouts
def logical_product(layout: Layout, tiler) -> Layout:
    """(layout, the tiler's layout of copies of it): (A, complement(A, size(A) * cosize(B)) o B), by mode for a
    tuple tiler (CuTe's logical_product)."""
    _unswizzled(layout, "logical_product")
    if isinstance(tiler, tuple):
        return _by_mode(logical_product, layout, tiler)
    tiler = _as_layout(tiler)
    return make_layout(layout, composition(complement(layout, layout.size * tiler.cosize), tiler))


def _by_mode(operation, layout: Layout, tilers: tuple) -> Layout:
    if layout.rank < len(tilers):
        raise ValueError(f"{operation.__name__}: the tiler has {len(tilers)} modes, more than {layout}")
    modes = _modes(layout)
    result = make_layout(*[modes[i] if t is None else operation(modes[i], t) for i, t in enumerate(tilers)],
                         *modes[len(tilers):])
    return Layout(result.shape, result.stride, layout.swizzle)


def _zipped(operation, layout: Layout, tiler) -> Layout:
    """((the tile's modes), (the rest)): CuTe's hierarchical unzip of a by-mode divide or product."""
    if tiler is None:
        return make_layout(Layout((1,), (0,)), layout)
    if not isinstance(tiler, tuple):
        return operation(layout, tiler)
    if layout.rank < len(tiler):
        raise ValueError(f"{operation.__name__}: the tiler has {len(tiler)} modes, more than {layout}")
    split = [_modes(_zipped(operation, mode, t)) for mode, t in zip(_modes(layout), tiler)]
    result = make_layout(make_layout(*[part[0] for part in split]),
                         make_layout(*[part[1] for part in split], *_modes(layout)[len(tiler):]))
    return Layout(result.shape, result.stride, layout.swizzle)


@_on_layouts
def zipped_divide(layout: Layout, tiler) -> Layout:
    return _zipped(logical_divide, layout, tiler)


@_on_layouts
def zipped_product(layout: Layout, tiler) -> Layout:
    return _zipped(logical_product, layout, tiler)


def _tiled(zipped: Layout, layout: Layout, tiler) -> Layout:
    """(tile, rest...): the second mode of a zipped result unpacked into its modes (one per mode of `layout`
    for a tuple tiler)."""
    tile, rest = _modes(zipped)
    if isinstance(tiler, tuple):
        count = layout.rank
    else:
        count = len(rest.shape[0]) if isinstance(rest.shape[0], tuple) else 1
    result = make_layout(tile, *_submodes(rest, count))
    return Layout(result.shape, result.stride, zipped.swizzle)


@_on_layouts
def tiled_divide(layout: Layout, tiler) -> Layout:
    return _tiled(zipped_divide(layout, tiler), layout, tiler)


@_on_layouts
def tiled_product(layout: Layout, tiler) -> Layout:
    return _tiled(zipped_product(layout, tiler), layout, tiler)


def _interleaved_product(block: Layout, tiler: Layout, block_first: bool) -> Layout:
    rank = max(block.rank, tiler.rank)
    padded = [make_layout(*_modes(layout), *[Layout((1,), (0,))] * (rank - layout.rank)) for layout in (block, tiler)]
    inner, outer = (_submodes(mode, rank) for mode in _modes(logical_product(*padded)))
    return make_layout(*[make_layout(x, y) if block_first else make_layout(y, x) for x, y in zip(inner, outer)])


@_on_layouts
def blocked_product(block: Layout, tiler: Layout) -> Layout:
    """The tiler's copies of `block`, each mode of the result (block mode, tiler mode): CuTe's blocked_product,
    the block's elements contiguous within each copy."""
    return _interleaved_product(block, _as_layout(tiler), True)


@_on_layouts
def raked_product(block: Layout, tiler: Layout) -> Layout:
    """Each mode of the result (tiler mode, block mode): CuTe's raked_product, the copies interleaved element by
    element."""
    return _interleaved_product(block, _as_layout(tiler), False)
