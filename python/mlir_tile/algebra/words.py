"""Layouts of 16-bit (or 8-bit) elements seen as the 32-bit words holding them, and back."""
from __future__ import annotations

from mlir_tile.algebra.layout import Layout, Swizzle, ThreadStride, _on_layouts


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
