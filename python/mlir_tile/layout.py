"""Layouts in the notation of the ldmatrix/stmatrix specification: `(2,2,8,4):(8,2,4@laneid,1@laneid)`.

A layout maps a coordinate of its shape to a memory offset (the sum of coordinate * stride over the axes
whose stride is a plain integer) and to a value on each thread axis (the sum over the axes whose stride is
`k@axis`). Offsets count 32-bit elements. This module imports no MLIR: the contract, the builder, the
reference emulator and the passes all share it.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Iterator, Mapping, Union

THREAD_AXES = ("laneid", "warpid")
MAX_TEXT = 4096  # characters of layout text: a bound on what one op may ask the parser for


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
class Layout:
    shape: tuple[int, ...]
    stride: tuple[Stride, ...]

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.stride):
            raise ValueError(
                f"layout shape {_tuple_text(self.shape)} has {len(self.shape)} axes but stride "
                f"{_tuple_text(self.stride)} has {len(self.stride)}"
            )
        for position, extent in enumerate(self.shape):
            if not isinstance(extent, int) or isinstance(extent, bool) or extent < 1:
                raise ValueError(f"layout axis {position} has extent {extent!r}; extents are positive integers")
        for position, stride in enumerate(self.stride):
            if isinstance(stride, ThreadStride):
                if stride.axis not in THREAD_AXES:
                    raise ValueError(
                        f"layout axis {position} has stride {stride}: unknown thread axis '{stride.axis}' "
                        f"(known: {', '.join(THREAD_AXES)})"
                    )
            elif not isinstance(stride, int) or isinstance(stride, bool):
                raise ValueError(f"layout axis {position} has stride {stride!r}; strides are integers or k@axis")

    # ----- text -----
    def __str__(self) -> str:
        return f"{_tuple_text(self.shape)}:{_tuple_text(self.stride)}"

    @classmethod
    def parse(cls, text: str) -> "Layout":
        return _LayoutParser(text).parse()

    # ----- size -----
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def memory_strides(self) -> tuple[int, ...]:
        """Each axis's memory stride; 0 for an axis mapped to a thread axis."""
        return tuple(0 if isinstance(s, ThreadStride) else s for s in self.stride)

    @property
    def min_offset(self) -> int:
        return sum(min(0, (n - 1) * s) for n, s in zip(self.shape, self.memory_strides))

    @property
    def cosize(self) -> int:
        """One past the largest memory offset the layout reaches."""
        return sum(max(0, (n - 1) * s) for n, s in zip(self.shape, self.memory_strides)) + 1

    # ----- evaluation -----
    def _check_coordinate(self, coord: tuple[int, ...]) -> None:
        if len(coord) != self.rank:
            raise ValueError(f"coordinate {coord} has {len(coord)} entries; layout {self} has rank {self.rank}")
        for position, (c, n) in enumerate(zip(coord, self.shape)):
            if not 0 <= c < n:
                raise ValueError(f"coordinate {coord} is outside layout {self}: axis {position} has extent {n}")

    def offset(self, *coord: int) -> int:
        self._check_coordinate(coord)
        return sum(c * s for c, s in zip(coord, self.memory_strides))

    def __call__(self, *coord: int) -> Point:
        self._check_coordinate(coord)
        threads: dict[str, int] = {}
        offset = 0
        for c, s in zip(coord, self.stride):
            if isinstance(s, ThreadStride):
                threads[s.axis] = threads.get(s.axis, 0) + c * s.scale
            else:
                offset += c * s
        return Point(offset, threads)

    def coordinates(self) -> Iterator[tuple[int, ...]]:
        return itertools.product(*(range(n) for n in self.shape))

    # ----- transformations -----
    def rearrange(self, pattern: str, **sizes: int) -> "Layout":
        """einops-style axis regrouping: `(r m) w k -> k m r w` splits axis 0 into r (outer) and m (inner),
        then permutes. A parenthesised group on the right merges axes, which needs the outer axis's stride
        to equal the inner axis's stride times the inner extent."""
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


def as_layout(value: "Layout | str") -> Layout:
    return value if isinstance(value, Layout) else Layout.parse(value)


def _tuple_text(items) -> str:
    return "(" + ",".join(str(i) for i in items) + ")"


class _LayoutParser:
    _TOKEN = re.compile(r"\s*(?:(?P<int>-?\d+)|(?P<name>[A-Za-z_]\w*)|(?P<punct>[():,@]))")

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
        shape = self.parse_tuple(self.parse_extent)
        self.expect(":")
        stride_column = self.peek()[2]
        stride = self.parse_tuple(self.parse_stride)
        kind, text, column = self.peek()
        if kind != "end":
            raise self.error(column, f"unexpected '{text}' after the strides")
        if len(shape) != len(stride):
            raise self.error(
                stride_column, f"{len(shape)} extents but {len(stride)} strides; give one stride per extent"
            )
        return Layout(shape, stride)

    def parse_tuple(self, parse_item) -> tuple:
        self.expect("(")
        items = [parse_item()]
        while self.peek()[1] == ",":
            self.index += 1
            items.append(parse_item())
        self.expect(")")
        return tuple(items)

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
    shape: list[int] = []
    stride: list[Stride] = []
    for group in right:
        extent, merged = axes[group[-1]]
        for outer in reversed(group[:-1]):
            outer_extent, outer_stride = axes[outer]
            if outer_stride != _scale(merged, extent) and outer_extent > 1:
                raise ValueError(
                    f"rearrange pattern '{pattern}': cannot merge ({' '.join(group)}) into one axis: "
                    f"'{outer}' has stride {outer_stride} but merging needs {_scale(merged, extent)} "
                    f"(stride of the next axis times its extent)"
                )
            extent *= outer_extent
        shape.append(extent)
        stride.append(merged)
    return Layout(tuple(shape), tuple(stride))


def pack_b16_as_b32(layout: Layout) -> Layout:
    """View a layout over 16-bit elements (half/bf16) as a layout over the b32 words that hold them.

    The axis with memory stride 1 pairs adjacent elements into one word, so its extent halves and the pair
    axis disappears; every other memory stride halves. This is a view of the same bytes, not a conversion.
    """
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
