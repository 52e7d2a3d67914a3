"""The rules on each shared row of a checked transfer: rows whole, inside the buffer, 16-byte aligned, and
no two stmatrix rows of one instruction (or of two warps) writing the same words."""
from __future__ import annotations

import itertools
from typing import Iterable

from mlir_tile.contract.model import ROW_BYTES, WORD_BYTES, WORDS, Rule, Transfer, Violation
from mlir_tile.contract.registers import mode_strides
from mlir_tile.algebra.layout import ThreadStride


def check_shared_row(transfer: Transfer) -> list[Violation]:
    layout, role = transfer.shared, transfer.shared_role
    threads = [(axis, s) for axis, s in mode_strides(layout) if isinstance(s, ThreadStride)]
    if threads:
        axis, stride = threads[0]
        return [
            Violation(
                Rule.SHARED_ROW,
                f"{role}_layout {layout} axis {axis} has thread stride {stride}; the shared layout gives memory "
                f"strides only (lane 8*matrix+row provides row (matrix,row)'s address by definition)",
            )
        ]
    if layout.is_flat and layout.swizzle is None:
        if layout.stride[-1] != 1:  # linear: one row speaks for all
            return [
                Violation(
                    Rule.SHARED_ROW,
                    f"{role}_layout {layout}: the word axis has stride {layout.stride[-1]}, so a row's words are at "
                    f"offsets {', '.join(str(w * layout.stride[-1]) for w in range(WORDS))}: a gap inside a 16-byte "
                    f"row; each shared row is 4 consecutive 32-bit words (word stride 1)",
                )
            ]
        return []
    for head in itertools.product(*(range(n) for n in layout.sizes[:-1])):  # nested or swizzled: every row
        words = [transfer.shared_word(head + (word,)) for word in range(WORDS)]
        if words != list(range(words[0], words[0] + WORDS)):
            return [
                Violation(
                    Rule.SHARED_ROW,
                    f"{role}_layout {layout}: shared row {transfer.coordinate_text(head + (0,))} has its words at "
                    f"offsets {', '.join(map(str, words))}{' (after the swizzle)' if layout.swizzle else ''}, not 4 "
                    f"consecutive words; each 16-byte row must stay whole: a word mode of stride 1 and a swizzle "
                    f"that keeps the low 2 bits of a word offset (Sw<B,M,S> with M >= 2 in word units)",
                )
            ]
    return []


def _shared_rows(transfer: Transfer) -> Iterable[tuple[tuple[int, ...], int]]:
    """(coordinate of word 0, offset from the memref's first element) of every shared row."""
    static = transfer.shared_operand.static_offset
    for head in itertools.product(*(range(n) for n in transfer.shared.sizes[:-1])):
        coord = head + (0,)
        yield coord, transfer.shared_word(coord) - static


def check_shared_bounds(transfer: Transfer) -> list[Violation]:
    extent, role, layout = transfer.shared_operand.extent, transfer.shared_role, transfer.shared
    if extent is None:
        return []
    # A swizzle of the offset from the buffer may move a row of a view before the view's start: still inside
    # the buffer, which begins `static offset` elements earlier.
    lowest = -transfer.shared_operand.static_offset if layout.swizzle else 0
    for coord, relative in _shared_rows(transfer):
        if not (lowest <= relative and relative + WORDS <= extent):
            return [
                Violation(
                    Rule.BOUNDS,
                    f"{role}_layout {layout}: shared row {transfer.coordinate_text(coord)} covers elements "
                    f"{relative}..{relative + WORDS - 1}, outside {role}'s {extent} elements; enlarge the buffer "
                    f"or change the strides",
                )
            ]
    return []


def check_buffer_alignment(transfer: Transfer) -> list[Violation]:
    operand, role = transfer.shared_operand, transfer.shared_role
    if operand.base_alignment is not None and operand.base_alignment >= ROW_BYTES:
        return []
    proven = "no alignment" if operand.base_alignment is None else f"only {operand.base_alignment}-byte alignment"
    return [
        Violation(
            Rule.ROW_ALIGNMENT,
            f"{role}: the IR proves {proven} for the shared buffer, but every row must start 16-byte aligned; "
            f"declare it with memref.global ... {{alignment = 16 : i64}} (or memref.alloca/alloc "
            f"{{alignment = 16}}, or memref.assume_alignment %buf, 16; in the builder: alignment=16 on "
            f"k.shared / k.dynamic_shared, a view's offset a multiple of 16 bytes)",
        )
    ]


def check_row_starts(transfer: Transfer) -> list[Violation]:
    operand, role, layout = transfer.shared_operand, transfer.shared_role, transfer.shared
    for coord, relative in _shared_rows(transfer):
        start = operand.static_offset + relative  # a dynamic offset adds a multiple of 4 words
        if (start * WORD_BYTES) % ROW_BYTES:
            offset = f", memref offset {operand.offset} included" if operand.offset else ""
            return [
                Violation(
                    Rule.ROW_ALIGNMENT,
                    f"{role}_layout {layout}: shared row {transfer.coordinate_text(coord)} starts at byte "
                    f"{start * WORD_BYTES} (element {start}{offset}), not a multiple of 16; make every "
                    f"matrix/row/repeat stride and the region start a multiple of 4 words",
                )
            ]
    return []


def check_swizzle_origin(transfer: Transfer) -> list[Violation]:
    """A swizzle applies to the offset from the buffer: a dynamic view offset passes through it only as a
    multiple of its period."""
    operand, swizzle = transfer.shared_operand, transfer.shared.swizzle
    if swizzle is None:
        return []
    if operand.base_shift is not None and operand.base_shift % (swizzle.period * WORD_BYTES):
        proven = f"a multiple of {operand.base_shift} bytes" if operand.base_shift > 1 else "nothing"
        return [Violation(Rule.ROW_ALIGNMENT, f"{transfer.shared_role}_layout {transfer.shared}: a memref.view moved "
                                              f"the buffer's base by an amount the IR proves {proven} about, but the "
                                              f"swizzle applies to the offset from the buffer, so only a multiple of "
                                              f"its period ({swizzle.period * WORD_BYTES} bytes) may move it; view at "
                                              f"such a multiple, or take a memref.subview (its offset enters the "
                                              f"swizzle)")]
    if operand.offset is not None or (operand.offset_multiple or 1) % swizzle.period == 0:
        return []
    proven = f"a multiple of {operand.offset_multiple} elements" if operand.offset_multiple else "nothing"
    return [Violation(Rule.ROW_ALIGNMENT, f"{transfer.shared_role}_layout {transfer.shared}: the swizzle applies to "
                                          f"the offset from the buffer, and the view's dynamic offset enters it; the IR "
                                          f"proves {proven} about that offset, but only a multiple of the swizzle's "
                                          f"period ({swizzle.period} words) passes through it; make the offset a "
                                          f"multiple of {swizzle.period}, or put the position into the layout")]


def check_swizzle_alignment(transfer: Transfer) -> list[Violation]:
    """A swizzle is a function of the offset from the buffer; the buffer aligned to its period puts that
    offset's pattern on the same banks as the address's (and makes it TMA's swizzle of the address)."""
    operand, swizzle = transfer.shared_operand, transfer.shared.swizzle
    if swizzle is None or swizzle.period * WORD_BYTES <= ROW_BYTES:
        return []
    needed = swizzle.period * WORD_BYTES
    if operand.base_alignment is not None and operand.base_alignment >= needed:
        return []
    proven = "no alignment" if operand.base_alignment is None else f"only {operand.base_alignment}-byte alignment"
    return [Violation(Rule.ROW_ALIGNMENT, f"{transfer.shared_role}_layout {transfer.shared}: the swizzle repeats every "
                                          f"{needed} bytes of the offset from the buffer, but the IR proves {proven} "
                                          f"for the buffer; declare it with {{alignment = {needed} : i64}} (or "
                                          f"memref.assume_alignment %buf, {needed}; in the builder: alignment={needed} "
                                          f"on k.shared / k.dynamic_shared, a view's offset a multiple of {needed} "
                                          f"bytes), so that the swizzled offsets sit on the banks the swizzle was "
                                          f"chosen for, as TMA's swizzle modes require")]


def check_store_race(transfer: Transfer) -> list[Violation]:
    if transfer.opcode.is_load:
        return []
    group, role, layout = transfer.group_rank, transfer.shared_role, transfer.shared
    writers: dict[int, tuple[int, ...]] = {}
    for coord, start in _shared_rows(transfer):
        writer = writers.setdefault(start, coord)
        if writer is coord:
            continue
        same_warp = writer[:group] == coord[:group]
        if same_warp and writer[group:-3] != coord[group:-3]:
            continue  # a later repeat of the same warp overwrites in program order: no race
        return [
            Violation(
                Rule.STORE_RACE,
                f"{role}_layout {layout}: stmatrix rows {transfer.coordinate_text(writer)} and "
                f"{transfer.coordinate_text(coord)} both write elements {start}..{start + WORDS - 1} "
                f"{'in one instruction' if same_warp else 'from different warps'}; destination rows must not "
                f"overlap",
            )
        ]
    return []


