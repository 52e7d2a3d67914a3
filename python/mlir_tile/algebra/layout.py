"""Layouts in the notation of the ldmatrix/stmatrix specification: `(2,2,8,4):(8,2,4@laneid,1@laneid)`.

A layout maps a coordinate of its shape to a memory offset (the sum of coordinate * stride over the axes
whose stride is a plain integer) and to a value on each thread axis (the sum over the axes whose stride is
`k@axis`). Offsets count 32-bit elements. This module imports no MLIR: the contract, the builder, the
reference emulator and the passes all share it.
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass
from typing import Iterator, Mapping, Union

THREAD_AXES = ("laneid", "warpid")
MAX_TEXT = 4096  # characters of layout text: a bound on what one op may ask the parser for
MAX_DEPTH = 8  # modes inside modes, in layout text
MAX_NESTING = 64  # tuples inside tuples of a Layout built in Python (the algebra nests deeper than text does)
MAX_ENUMERATED = 1 << 16  # coordinates a swizzled layout's cosize visits one by one
MAX_TABULATED = 4096  # coordinates of a mode that `linear_offset` tabulates


@dataclass(frozen=True)
class Axis:
    """A thread axis; `4 @ laneid` is the stride that adds 4 to the lane id per step of its coordinate."""

    name: str

    def __rmatmul__(self, scale: int) -> "ThreadStride":
        if not isinstance(scale, int) or isinstance(scale, bool):
            return NotImplemented
        return ThreadStride(scale, self.name)

    def __str__(self) -> str:
        return self.name


laneid = Axis("laneid")
warpid = Axis("warpid")


@dataclass(frozen=True)
class ThreadStride:
    scale: int
    axis: str

    def __str__(self) -> str:
        return f"{self.scale}@{self.axis}"

    def scaled(self, factor: int) -> "ThreadStride":
        return ThreadStride(self.scale * factor, self.axis)


Stride = Union[int, ThreadStride]


def _scale(stride: Stride, factor: int) -> Stride:
    return stride.scaled(factor) if isinstance(stride, ThreadStride) else stride * factor


@dataclass(frozen=True)
class Point:
    """Where one coordinate of a layout lands: a memory offset and a value per thread axis."""

    offset: int
    threads: Mapping[str, int]


@dataclass(frozen=True)
class Swizzle:
    """CuTe's `Sw<B,M,S>`: XOR bits [M+S, M+S+B) of an offset into bits [M, M+B). A bijection on offsets, and
    linear over XOR: swizzle(a ^ b) = swizzle(a) ^ swizzle(b)."""

    bits: int
    base: int
    shift: int

    def __post_init__(self) -> None:
        for name, value in (("B", self.bits), ("M", self.base), ("S", self.shift)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SWIZZLE_BITS:
                raise ValueError(f"swizzle {name}={value!r}: a non-negative integer of at most {MAX_SWIZZLE_BITS}")
        if self.bits and self.shift < self.bits:
            raise ValueError(f"swizzle {self}: S ({self.shift}) must be at least B ({self.bits}), or the bits it "
                             f"reads overlap the bits it changes")

    @property
    def period(self) -> int:
        """2^(B+M+S): adding a multiple of it to an offset adds the same to the swizzled offset."""
        return 1 << (self.bits + self.base + self.shift) if self.bits else 1

    @property
    def mask(self) -> int:
        """The bits the swizzle changes."""
        return ((1 << self.bits) - 1) << self.base

    def __call__(self, offset: int) -> int:
        return offset ^ ((offset >> self.shift) & self.mask)

    def __str__(self) -> str:
        return f"Sw<{self.bits},{self.base},{self.shift}>"

    def compose(self, layout: "Layout") -> "Layout":
        """`Sw<B,M,S> o layout`: the layout's memory offsets, swizzled."""
        return Layout(layout.shape, layout.stride, self)


Sw = Swizzle


MAX_SWIZZLE_BITS = 30

IntTuple = Union[int, tuple]


def _flatten(item) -> list:
    if isinstance(item, tuple):
        return [leaf for part in item for leaf in _flatten(part)]
    return [item]


def _nesting(item) -> int:
    """How deep tuples nest in `item` (0 for an integer), level by level: no recursion, whatever the depth."""
    depth, level = 0, [item]
    while depth <= MAX_NESTING and any(isinstance(x, tuple) for x in level):
        level = [part for x in level if isinstance(x, tuple) for part in x]
        depth += 1
    return depth


def _congruent(shape, stride) -> bool:
    if isinstance(shape, tuple) != isinstance(stride, tuple):
        return False
    if isinstance(shape, tuple):
        return len(shape) == len(stride) and all(_congruent(a, b) for a, b in zip(shape, stride))
    return True


def _canonical(item):
    """A mode without redundant parentheses: a tuple of one mode is that mode (CuTe prints no `((4))`)."""
    if isinstance(item, tuple):
        parts = tuple(_canonical(part) for part in item)
        return parts[0] if len(parts) == 1 else parts
    return item


@dataclass(frozen=True)
class Layout:
    """shape:stride in CuTe's notation and semantics. A mode (a top-level axis) may itself be a tuple of modes:
    its coordinate is an integer below the product of its extents, split colexicographically (the first
    sub-mode varies fastest). An optional swizzle (`Sw<B,M,S> o shape:stride`) applies to the memory offset."""

    shape: tuple
    stride: tuple
    swizzle: Swizzle | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.shape, tuple) or not isinstance(self.stride, tuple):
            raise ValueError(f"layout shape and stride are tuples, got {self.shape!r} and {self.stride!r}")
        for what, item in (("shape", self.shape), ("stride", self.stride)):
            if _nesting(item) > MAX_NESTING:  # checked before any recursive walk of the tuples
                raise ValueError(f"layout {what} nests tuples more than {MAX_NESTING} deep")
        if self.swizzle is not None and not isinstance(self.swizzle, Swizzle):
            raise ValueError(f"layout swizzle is a Swizzle (Sw<B,M,S>) or None, got {self.swizzle!r}")
        if len(self.shape) != len(self.stride) or not _congruent(self.shape, self.stride):
            raise ValueError(
                f"layout shape {_tuple_text(self.shape)} and stride {_tuple_text(self.stride)} do not have the same "
                f"modes ({len(self.shape)} and {len(self.stride)} axes, nested alike)"
            )
        for position, extent in enumerate(_flatten(self.shape)):
            if not isinstance(extent, int) or isinstance(extent, bool) or extent < 1:
                raise ValueError(f"layout axis {position} has extent {extent!r}; extents are positive integers")
        for position, stride in enumerate(_flatten(self.stride)):
            if isinstance(stride, ThreadStride):
                if stride.axis not in THREAD_AXES:
                    raise ValueError(
                        f"layout axis {position} has stride {stride}: unknown thread axis '{stride.axis}' "
                        f"(known: {', '.join(THREAD_AXES)})"
                    )
                if self.swizzle is not None:
                    raise ValueError(f"layout with stride {stride}: a swizzle applies to memory offsets, so a "
                                     f"swizzled layout has no thread strides")
            elif not isinstance(stride, int) or isinstance(stride, bool):
                raise ValueError(f"layout axis {position} has stride {stride!r}; strides are integers or k@axis")
        object.__setattr__(self, "shape", tuple(_canonical(m) for m in self.shape))
        object.__setattr__(self, "stride", tuple(_canonical(m) for m in self.stride))

    # ----- text -----
    def __str__(self) -> str:
        if self.rank == 1 and not isinstance(self.shape[0], tuple):  # CuTe writes a rank-1 layout 8:1
            text = f"{self.shape[0]}:{self.stride[0]}"
        else:
            text = f"{_tuple_text(self.shape)}:{_tuple_text(self.stride)}"
        return f"{self.swizzle} o {text}" if self.swizzle else text

    @classmethod
    def parse(cls, text: str) -> "Layout":
        """The layout of `text` (CuTe's notation), one object per text: a Layout is immutable, and a transfer's
        layouts are read from its attributes by the builder, the verifier and the lowering alike."""
        return _parsed(text) if isinstance(text, str) else _LayoutParser(text).parse()

    # ----- size -----
    @property
    def rank(self) -> int:
        """The number of modes (top-level axes)."""
        return len(self.shape)

    @functools.cached_property
    def sizes(self) -> tuple[int, ...]:
        """Each mode's size: the product of its extents (its coordinate's range)."""
        return tuple(math.prod(_flatten(mode)) for mode in self.shape)

    @functools.cached_property
    def _modes(self) -> tuple[tuple[tuple[int, Stride], ...], ...]:
        return tuple(tuple(zip(_flatten(shape), _flatten(stride))) for shape, stride in zip(self.shape, self.stride))

    @property
    def size(self) -> int:
        return math.prod(self.sizes)

    @property
    def is_flat(self) -> bool:
        return all(not isinstance(mode, tuple) for mode in self.shape)

    def mode(self, axis: int) -> list[tuple[int, Stride]]:
        """Mode `axis` as (extent, stride) pairs, first sub-mode (the fastest) first."""
        return list(self._modes[axis])

    def flat_strides(self, axis: int) -> list[Stride]:
        return [stride for _, stride in self.mode(axis)]

    @property
    def memory_strides(self) -> tuple[int, ...]:
        """Each axis's memory stride (0 for an axis mapped to a thread axis), for a flat, unswizzled layout."""
        if not self.is_flat or self.swizzle:
            raise ValueError(f"layout {self} is nested or swizzled: it has no single stride per axis")
        return tuple(0 if isinstance(s, ThreadStride) else s for s in self.stride)

    def _memory_leaves(self):
        return [(n, 0 if isinstance(s, ThreadStride) else s) for n, s in zip(_flatten(self.shape), _flatten(self.stride))]

    @property
    def min_offset(self) -> int:
        return sum(min(0, (n - 1) * s) for n, s in self._memory_leaves())

    @functools.cached_property
    def cosize(self) -> int:
        """One past the largest memory offset the layout reaches (for a swizzled layout of more than
        MAX_ENUMERATED coordinates, a bound on it: the swizzle can set every bit it changes)."""
        if self.swizzle is None:
            return sum(max(0, (n - 1) * s) for n, s in self._memory_leaves()) + 1
        if self.size <= MAX_ENUMERATED:  # every offset reached, each leaf's steps added at once
            import numpy as np  # (here: the package imports without numpy, for its source digest)

            reached = np.zeros(1, dtype=np.int64)
            for n, s in self._memory_leaves():
                reached = np.unique(reached[:, None] + np.arange(n, dtype=np.int64) * s)
            return int(self.swizzle(reached).max()) + 1
        return (sum(max(0, (n - 1) * s) for n, s in self._memory_leaves()) | self.swizzle.mask) + 1

    # ----- evaluation -----
    def _check_coordinate(self, coord: tuple[int, ...]) -> None:
        if len(coord) != self.rank:
            raise ValueError(f"coordinate {coord} has {len(coord)} entries; layout {self} has rank {self.rank}")
        for position, (c, n) in enumerate(zip(coord, self.sizes)):
            if not isinstance(c, int) or not 0 <= c < n:
                raise ValueError(f"coordinate {coord} is outside layout {self}: axis {position} has extent {n}")

    def _leaves(self, coord: tuple[int, ...]):
        """(sub-coordinate, stride) of every leaf, each mode's coordinate split colexicographically."""
        for axis, c in enumerate(coord):
            for extent, stride in self._modes[axis]:
                yield c % extent, stride
                c //= extent

    def linear_offset(self, *coord: int) -> int:
        """The memory offset before the swizzle."""
        tables = self._mode_offsets
        if tables is not None and len(coord) == len(tables):  # the contract's checks ask this by the thousand
            total = 0
            for c, table in zip(coord, tables):
                if type(c) is not int or not 0 <= c < len(table):
                    self._check_coordinate(coord)  # raises, saying which axis
                total += table[c]
            return total
        self._check_coordinate(coord)
        if self._flat_memory_strides is not None:  # the common case, without splitting coordinates
            return sum(c * s for c, s in zip(coord, self._flat_memory_strides))
        return sum(c * s for c, s in self._leaves(coord) if not isinstance(s, ThreadStride))

    @functools.cached_property
    def _mode_offsets(self) -> tuple[tuple[int, ...], ...] | None:
        """Per mode, the memory offset of each of its coordinates (thread strides count 0): an offset is then
        one lookup a mode. None where a mode is too large to tabulate (MAX_TABULATED coordinates)."""
        if any(size > MAX_TABULATED for size in self.sizes):
            return None
        tables = []
        for axis, size in enumerate(self.sizes):
            table = []
            for c in range(size):
                offset = 0
                for extent, stride in self._modes[axis]:
                    if not isinstance(stride, ThreadStride):
                        offset += c % extent * stride
                    c //= extent
                table.append(offset)
            tables.append(tuple(table))
        return tuple(tables)

    @functools.cached_property
    def _flat_memory_strides(self) -> tuple[int, ...] | None:
        if not self.is_flat:
            return None
        return tuple(0 if isinstance(s, ThreadStride) else s for s in self.stride)

    def offset(self, *coord: int) -> int:
        offset = self.linear_offset(*coord)
        return self.swizzle(offset) if self.swizzle else offset

    def __call__(self, *coord: int) -> Point:
        self._check_coordinate(coord)
        threads: dict[str, int] = {}
        offset = 0
        for c, s in self._leaves(coord):
            if isinstance(s, ThreadStride):
                threads[s.axis] = threads.get(s.axis, 0) + c * s.scale
            else:
                offset += c * s
        return Point(self.swizzle(offset) if self.swizzle else offset, threads)

    def __getitem__(self, axis: int) -> "Layout":
        """Mode `axis` as a layout of its own (CuTe's layout<i>), without the swizzle."""
        return Layout((self.shape[axis],), (self.stride[axis],))

    def __iter__(self) -> Iterator["Layout"]:
        """The modes, each a layout: `block, rest = zipped_divide(tile, tiler)`."""
        return (self[axis] for axis in range(self.rank))

    def coordinates(self) -> Iterator[tuple[int, ...]]:
        return itertools.product(*(range(n) for n in self.sizes))

    # ----- transformations -----
    def rearrange(self, pattern: str, **sizes: int) -> "Layout":
        """einops-style axis regrouping: `(r m) w k -> k m r w` splits axis 0 into r (outer) and m (inner),
        then permutes. A parenthesised group on the right merges axes into one mode: a single stride where
        the outer axis's stride is the inner's times its extent, else a nested mode (inner sub-mode first)."""
        if not self.is_flat or self.swizzle:
            raise ValueError(f"rearrange works on flat, unswizzled layouts; {self} is not one")
        return _rearrange(self, pattern, sizes)


class _LayoutFactory:
    """`S[(2,2,8,4):(8,2,4@laneid,1@laneid)]` builds a Layout the way the specification writes it."""

    def __getitem__(self, item) -> Layout:
        if not isinstance(item, slice) or item.step is not None:
            raise ValueError("write a layout as S[shape:stride], e.g. S[(8,4):(4,1)]")
        shape, stride = item.start, item.stop
        shape = shape if isinstance(shape, tuple) else (shape,)
        stride = stride if isinstance(stride, tuple) else (stride,)
        return Layout(tuple(shape), tuple(stride))


S = _LayoutFactory()


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> Layout:
    return _LayoutParser(text).parse()


def as_layout(value: "Layout | str") -> Layout:
    return value if isinstance(value, Layout) else Layout.parse(value)


def _on_layouts(function):
    """`function` of the algebra, taking its layout arguments as Layouts or their text (`make_layout`: every
    argument; the others: the first); anything else is a ValueError naming the function."""
    every = function.__name__ == "make_layout"

    @functools.wraps(function)
    def checked(*arguments, **keywords):
        if not arguments:
            raise ValueError(f"{function.__name__}: takes a layout (a Layout or its text)")
        layouts = arguments if every else arguments[:1]
        converted = []
        for value in layouts:
            if not isinstance(value, (Layout, str)):
                raise ValueError(f"{function.__name__}: takes a layout (a Layout or its text), got {value!r}")
            converted.append(as_layout(value))
        return function(*converted, *arguments[len(layouts):], **keywords)
    return checked


def _tuple_text(items) -> str:
    return "(" + ",".join(_tuple_text(i) if isinstance(i, tuple) else str(i) for i in items) + ")"


class _LayoutParser:
    _TOKEN = re.compile(r"\s*(?:(?P<int>-?[0-9]+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[():,@<>]))", re.ASCII)

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise ValueError(f"layout text must be a string, got {type(text).__name__}")
        if len(text) > MAX_TEXT:
            raise ValueError(f"layout text of {len(text)} characters is longer than {MAX_TEXT}; no transfer needs one")
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        position, end = 0, len(text.rstrip())
        while position < end:
            match = self._TOKEN.match(text, position)
            if not match:
                column = position + len(text[position:position + 64]) - len(text[position:position + 64].lstrip())
                raise self.error(column, "unexpected character")
            kind = match.lastgroup
            self.tokens.append((kind, match.group(kind), match.start(kind)))
            position = match.end()
        self.index = 0

    def error(self, column: int, what: str) -> ValueError:
        return ValueError(
            f"malformed layout '{self.text}' at column {column + 1}: {what}; "
            f"expected '(extents):(strides)' such as '(2,8,4):(32,4@laneid,1@laneid)'"
        )

    def peek(self) -> tuple[str, str, int]:
        return self.tokens[self.index] if self.index < len(self.tokens) else ("end", "", len(self.text))

    def expect(self, value: str) -> None:
        kind, text, column = self.peek()
        if text != value or kind != "punct":
            found = "end of text" if kind == "end" else f"'{text}'"
            raise self.error(column, f"expected '{value}' but found {found}")
        self.index += 1

    def parse(self) -> Layout:
        swizzle = self.parse_swizzle() if self.peek()[1] == "Sw" else None
        scalar = self.peek()[0] == "int"  # CuTe's rank-1 text: 8:1
        shape = (self.parse_extent(),) if scalar else self.parse_tuple(self.parse_extent, 0)
        self.expect(":")
        stride_column = self.peek()[2]
        stride = (self.parse_stride(),) if scalar else self.parse_tuple(self.parse_stride, 0)
        kind, text, column = self.peek()
        if kind != "end":
            raise self.error(column, f"unexpected '{text}' after the strides")
        if not _congruent(shape, stride):
            raise self.error(
                stride_column, f"{len(_flatten(shape))} extents but {len(_flatten(stride))} strides, or nested "
                               f"differently; give one stride per extent, in the same parentheses"
            )
        try:
            return Layout(shape, stride, swizzle)
        except ValueError as error:
            raise self.error(0, str(error)) from None

    def parse_swizzle(self) -> Swizzle:
        self.index += 1
        self.expect("<")
        values = [self.parse_int()[0]]
        for _ in range(2):
            self.expect(",")
            values.append(self.parse_int()[0])
        self.expect(">")
        kind, text, column = self.peek()
        if text != "o":
            raise self.error(column, "expected 'o' (composition) after the swizzle, as in Sw<3,2,3> o (8,32):(32,1)")
        self.index += 1
        try:
            return Swizzle(*values)
        except ValueError as error:
            raise self.error(column, str(error)) from None

    def parse_tuple(self, parse_item, depth: int) -> tuple:
        if depth > MAX_DEPTH:
            raise self.error(self.peek()[2], f"modes nest more than {MAX_DEPTH} deep")
        self.expect("(")
        items = [self.parse_mode(parse_item, depth)]
        while self.peek()[1] == ",":
            self.index += 1
            items.append(self.parse_mode(parse_item, depth))
        self.expect(")")
        return tuple(items)

    def parse_mode(self, parse_item, depth: int):
        return self.parse_tuple(parse_item, depth + 1) if self.peek()[1] == "(" else parse_item()

    def parse_int(self) -> tuple[int, int]:
        kind, text, column = self.peek()
        if kind != "int":
            found = "end of text" if kind == "end" else f"'{text}'"
            raise self.error(column, f"expected an integer but found {found}")
        self.index += 1
        return int(text), column

    def parse_extent(self) -> int:
        value, column = self.parse_int()
        if value < 1:
            raise self.error(column, f"extent {value} is not positive")
        return value

    def parse_stride(self) -> Stride:
        value, _ = self.parse_int()
        if self.peek()[1] != "@":
            return value
        self.index += 1
        kind, text, column = self.peek()
        if kind != "name":
            raise self.error(column, "expected a thread axis name after '@'")
        if text not in THREAD_AXES:
            raise self.error(column, f"unknown thread axis '{text}' (known: {', '.join(THREAD_AXES)})")
        self.index += 1
        return ThreadStride(value, text)


_GROUP = re.compile(r"\(([^()]*)\)|([A-Za-z_]\w*)|(\S)")


def _parse_side(side: str, pattern: str) -> list[list[str]]:
    groups: list[list[str]] = []
    for match in _GROUP.finditer(side):
        if match.group(3):
            raise ValueError(f"rearrange pattern '{pattern}': unexpected '{match.group(3)}'")
        names = match.group(1).split() if match.group(1) is not None else [match.group(2)]
        if not names:
            raise ValueError(f"rearrange pattern '{pattern}': empty group '()'")
        groups.append(names)
    return groups


def _rearrange(layout: Layout, pattern: str, sizes: Mapping[str, int]) -> Layout:
    if pattern.count("->") != 1:
        raise ValueError(f"rearrange pattern '{pattern}' needs exactly one '->'")
    left_text, right_text = pattern.split("->")
    left, right = _parse_side(left_text, pattern), _parse_side(right_text, pattern)
    if len(left) != layout.rank:
        raise ValueError(
            f"rearrange pattern '{pattern}' names {len(left)} input axes but layout {layout} has rank {layout.rank}"
        )
    for name, size in sizes.items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"rearrange pattern '{pattern}': size {name}={size!r} is not a positive integer")
    axes: dict[str, tuple[int, Stride]] = {}
    for group, extent, stride in zip(left, layout.shape, layout.stride):
        unknown = [n for n in group if n not in sizes]
        if len(unknown) > 1:
            raise ValueError(f"rearrange pattern '{pattern}': give the size of all but one of {' '.join(unknown)}")
        known = math.prod(sizes[n] for n in group if n in sizes)
        if unknown:
            if extent % known:
                raise ValueError(
                    f"rearrange pattern '{pattern}': axis of extent {extent} does not split by {known}"
                )
            group_sizes = {n: sizes[n] if n in sizes else extent // known for n in group}
        else:
            group_sizes = {n: sizes[n] for n in group}
            if known != extent:
                raise ValueError(
                    f"rearrange pattern '{pattern}': group ({' '.join(group)}) has size {known} "
                    f"but the axis has extent {extent}"
                )
        inner = 1
        for name in reversed(group):
            if name in axes:
                raise ValueError(f"rearrange pattern '{pattern}': axis '{name}' appears twice on the left")
            axes[name] = (group_sizes[name], _scale(stride, inner))
            inner *= group_sizes[name]
    right_names = [n for group in right for n in group]
    if sorted(right_names) != sorted(axes):
        raise ValueError(
            f"rearrange pattern '{pattern}': the right side must use each left axis once "
            f"(left: {' '.join(axes)}; right: {' '.join(right_names)})"
        )
    shape: list[IntTuple] = []
    stride: list = []
    for group in right:
        modes = [list(axes[group[-1]])]  # inner first; an outer axis merges into the one before, or nests
        for outer in reversed(group[:-1]):
            outer_extent, outer_stride = axes[outer]
            if outer_extent == 1:
                continue
            extent, inner = modes[-1]
            if outer_stride == _scale(inner, extent) or extent == 1:
                modes[-1] = [extent * outer_extent, inner if extent > 1 else outer_stride]
            else:
                modes.append([outer_extent, outer_stride])
        shape.append(modes[0][0] if len(modes) == 1 else tuple(m[0] for m in modes))
        stride.append(modes[0][1] if len(modes) == 1 else tuple(m[1] for m in modes))
    return Layout(tuple(shape), tuple(stride))
