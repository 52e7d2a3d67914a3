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
        if self.size <= MAX_ENUMERATED:
            return max(self.offset(*c) for c in self.coordinates()) + 1
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


@_on_layouts
def unpack_b32(layout: Layout, per_word: int = 2) -> Layout:
    """A row-major (rows, words) tile layout, swizzled or not, seen as (rows, elements) of the `per_word`
    16-bit (2) or 8-bit (4) elements each word holds: the same bytes, so element (r, c) lies in word
    (r, c // per_word) of the word layout; a swizzle `Sw<B,M,S>` of word offsets is `Sw<B,M+log2 per_word,S>`
    of element offsets (what a copy of 16-byte chunks into a tile that transfers read needs)."""
    if per_word not in (2, 4):
        raise ValueError(f"unpack_b32: 2 or 4 elements per word, got {per_word}")
    if not layout.is_flat or layout.rank != 2 or layout.stride[1] != 1 or isinstance(layout.stride[0], ThreadStride):
        raise ValueError(f"unpack_b32: a (rows, words):(pitch, 1) layout, got {layout}")
    swizzle = layout.swizzle
    if swizzle is not None:
        swizzle = Swizzle(swizzle.bits, swizzle.base + per_word.bit_length() - 1, swizzle.shift)
    return Layout((layout.shape[0], layout.shape[1] * per_word), (layout.stride[0] * per_word, 1), swizzle)


def words_of(layout: Layout, per_word: int) -> Layout:
    """A rank-2 (rows, columns) tile layout over elements of 32 / `per_word` bits (per_word 2 or 4), swizzled or
    not, seen as the layout of the 32-bit words holding them (`unpack_b32`'s inverse, nested modes allowed):
    the one leaf of stride 1 counts words, every other stride is divided by per_word, a swizzle `Sw<B,M,S>` of
    element offsets is `Sw<B,M-log2 per_word,S>` of word offsets. Proven for every element: (r, c) is part c %
    per_word of word (r, c // per_word); ValueError otherwise."""
    if per_word not in (2, 4) or layout.rank != 2:
        raise ValueError(f"words_of: a rank-2 layout and 2 or 4 elements a word, got {layout}, {per_word}")

    def divided(shape, stride):
        if isinstance(shape, tuple):
            parts = [divided(s, d) for s, d in zip(shape, stride)]
            return tuple(p[0] for p in parts), tuple(p[1] for p in parts)
        if isinstance(stride, ThreadStride) or (stride != 1 and stride % per_word) or (stride == 1 and shape % per_word):
            raise ValueError(f"words_of: {layout} has a mode {shape}:{stride} that does not run along whole words")
        return (shape // per_word, 1) if stride == 1 else (shape, stride // per_word)

    shape, stride = divided(layout.shape, layout.stride)
    swizzle, shift = layout.swizzle, per_word.bit_length() - 1
    if swizzle is not None:
        if swizzle.bits and swizzle.base < shift:
            raise ValueError(f"words_of: the swizzle of {layout} moves parts of words")
        swizzle = Swizzle(swizzle.bits, swizzle.base - shift, swizzle.shift) if swizzle.bits else swizzle
    words = Layout(shape, stride, swizzle)
    if words.sizes[1] * per_word != layout.sizes[1]:
        raise ValueError(f"words_of: the columns of {layout} are not the words' of {words}")
    rows, columns = layout.sizes
    for r in range(rows):
        for c in range(columns):
            if layout.offset(r, c) != per_word * words.offset(r, c // per_word) + c % per_word:
                raise ValueError(f"words_of: element ({r}, {c}) of {layout} is not where the word layout {words} has it")
    return words


@_on_layouts
def pack_b16_as_b32(layout: Layout) -> Layout:
    """View a layout over 16-bit elements (half/bf16) as a layout over the b32 words that hold them.

    The axis with memory stride 1 pairs adjacent elements into one word, so its extent halves and the pair
    axis disappears; every other memory stride halves. This is a view of the same bytes, not a conversion.
    """
    if not layout.is_flat or layout.swizzle:
        raise ValueError(f"b32 view of {layout}: only flat, unswizzled layouts")
    unit_axes = [i for i, s in enumerate(layout.stride) if s == 1 and not isinstance(s, ThreadStride)]
    if len(unit_axes) != 1:
        raise ValueError(f"b32 view of {layout}: needs exactly one axis of memory stride 1 (the packed pair axis)")
    (unit,) = unit_axes
    if layout.shape[unit] % 2:
        raise ValueError(
            f"b32 view of {layout}: axis {unit} has odd extent {layout.shape[unit]}; "
            f"two adjacent 16-bit elements share one word"
        )
    shape, stride = [], []
    for i, (n, s) in enumerate(zip(layout.shape, layout.stride)):
        if i == unit:
            shape.append(n // 2)
            stride.append(1)
        elif isinstance(s, ThreadStride):
            shape.append(n)
            stride.append(s)
        else:
            if s % 2:
                raise ValueError(
                    f"b32 view of {layout}: axis {i} has odd stride {s}, so its elements start in the "
                    f"middle of a 32-bit word"
                )
            shape.append(n)
            stride.append(s // 2)
    return Layout(tuple(shape), tuple(stride))


# ----- CuTe's layout algebra -----
# Functions of layouts with integer strides, with CuTe's names and semantics (cute/layout.hpp; the pure-Python
# pycute is the oracle the tests compare with). A layout is handled as CuTe's pair (shape, stride) of integer
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
