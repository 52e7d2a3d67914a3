"""The reference model: what ldmatrix/stmatrix do, from the PTX ISA's description (no MLIR, no lowering).

PTX ISA, warp-level matrix load/store (m8n8, .b16): an 8x8 matrix of 16-bit elements is stored as 8 rows
of 16 bytes; for .xN, lanes 8*i .. 8*i+7 give the row addresses of matrix i (other lanes' addresses are
ignored). Each lane l holds one 32-bit register per matrix with the fragment elements
(row l//4, columns 2*(l%4) and 2*(l%4)+1) of that matrix, lower half first. With .trans the matrix is
transposed at 16-bit granularity: the register of lane l holds elements (2*(l%4), l//4) and
(2*(l%4)+1, l//4) of the stored matrix. stmatrix moves the same image the other way.

Which lane gives which address, and which register slot receives a matrix, come from the transfer's
layouts (the specification's code-generation rule): lane l of warp g provides &shared[g, t, (l//8)%N, l%8, 0]
and receives matrix i in slot reg[g, t, i, l//4, l%4].
"""
from __future__ import annotations

import numpy as np

from mlir_tile import contract
from mlir_tile.algebra.layout import Layout

LANES = 32


def _as_text(layout: Layout | str) -> str:
    return str(layout) if isinstance(layout, Layout) else layout


def emulate(opcode: str, dst_layout, src_layout, dst: np.ndarray, src: np.ndarray, scope: str = "warp",
            shared_offset: int = 0) -> np.ndarray:
    """Apply one transfer. ldmatrix: dst = registers (threads, slots), src = flat shared words.
    stmatrix: dst = flat shared words, src = registers. The shared layout is over a view `shared_offset`
    words into the shared words (the offset enters the layout's swizzle). Returns the new dst (other values
    unchanged). Raises ValueError (contract.ContractError) for an illegal transfer."""
    opcode_info = contract.parse_opcode(opcode)
    registers, shared = opcode_info.registers_and_shared(dst, src)
    registers = np.asarray(registers, dtype=np.uint32)
    shared = np.asarray(shared, dtype=np.uint32)
    if registers.ndim != 2 or shared.ndim != 1:
        raise ValueError("registers must be (threads, slots) and shared memory a flat array of words")
    threads, slots = registers.shape
    block = (threads, 1, 1) if scope == "cta" else None
    transfer = contract.verdict(contract.Query.of_layouts(opcode, *opcode_info.registers_and_shared(_as_text(dst_layout), _as_text(src_layout)),
                                        register_slots=slots, shared_words=shared.size, scope=scope, block_size=block,
                                        shared_offset=shared_offset)).require()
    if threads != transfer.scope.warps * LANES:
        raise ValueError(
            f"scope \"{scope}\" runs {transfer.scope.warps} warp(s): registers need "
            f"{transfer.scope.warps * LANES} threads, got {threads}"
        )
    registers, shared = registers.copy(), shared.copy()
    for warp in range(transfer.scope.warps):
        for repeat in transfer.repeats():
            if opcode_info.is_load:
                _ldmatrix(transfer, warp, repeat, registers, shared)
            else:
                _stmatrix(transfer, warp, repeat, registers, shared)
    return registers if opcode_info.is_load else shared


def _provided_addresses(transfer: contract.Transfer, warp: int, repeat: tuple) -> list[int]:
    """The word address each lane supplies (the code-generation rule)."""
    count = transfer.opcode.count
    return [transfer.shared_offset(warp, repeat, (lane // 8) % count, lane % 8) for lane in range(LANES)]


def _receiving_slot(transfer: contract.Transfer, warp: int, repeat: tuple, matrix: int, lane: int) -> tuple[int, int]:
    """(thread, slot) that holds lane `lane`'s register for `matrix`, read from the register layout."""
    coordinate = ((warp,) if transfer.group_rank else ()) + repeat + (matrix, lane // 4, lane % 4)
    point = transfer.registers(*coordinate)
    thread = point.threads.get("warpid", 0) * LANES + point.threads.get("laneid", 0)
    return thread, transfer.register_operand.offset + point.offset


def _ldmatrix(transfer, warp, repeat, registers, shared) -> None:
    words = ldmatrix_warp(transfer.opcode.count, transfer.opcode.trans, _provided_addresses(transfer, warp, repeat), shared)
    for lane in range(LANES):
        for matrix in range(transfer.opcode.count):
            thread, slot = _receiving_slot(transfer, warp, repeat, matrix, lane)
            registers[thread, slot] = words[lane][matrix]


def _stmatrix(transfer, warp, repeat, registers, shared) -> None:
    words = [[0] * transfer.opcode.count for _ in range(LANES)]
    for lane in range(LANES):
        for matrix in range(transfer.opcode.count):
            words[lane][matrix] = int(registers[_receiving_slot(transfer, warp, repeat, matrix, lane)])
    stmatrix_warp(transfer.opcode.count, transfer.opcode.trans, _provided_addresses(transfer, warp, repeat), words, shared)


# ----- one warp-wide instruction, as the PTX ISA describes it -----
def _halves(word: int) -> tuple[int, int]:
    return word & 0xFFFF, word >> 16


def _fragment_position(lane: int, half: int, trans: bool) -> tuple[int, int]:
    """(row, column) of the 8x8 b16 matrix held in half `half` of lane `lane`'s register."""
    row, column = lane // 4, 2 * (lane % 4) + half
    return (column, row) if trans else (row, column)


def ldmatrix_warp(count: int, trans: bool, addresses: list[int], shared: np.ndarray) -> list[list[int]]:
    """`ldmatrix...x{count}[.trans]` for one warp: lane l supplied word address `addresses[l]`; returns
    each lane's `count` destination words. Only lanes 8*i..8*i+7 are read for matrix i."""
    words = [[0] * count for _ in range(LANES)]
    for matrix in range(count):
        image = np.zeros((8, 8), dtype=np.uint32)
        for row in range(8):
            start = addresses[8 * matrix + row]
            for word in range(4):
                image[row, 2 * word], image[row, 2 * word + 1] = _halves(int(shared[start + word]))
        for lane in range(LANES):
            low = image[_fragment_position(lane, 0, trans)]
            high = image[_fragment_position(lane, 1, trans)]
            words[lane][matrix] = int(low) | (int(high) << 16)
    return words


def stmatrix_warp(count: int, trans: bool, addresses: list[int], words: list[list[int]], shared: np.ndarray) -> None:
    """`stmatrix...x{count}[.trans]` for one warp: lane l's `count` source words are `words[l]`; row r of
    matrix i goes to the address lane 8*i+r supplied."""
    for matrix in range(count):
        image = np.zeros((8, 8), dtype=np.uint32)
        for lane in range(LANES):
            low, high = _halves(words[lane][matrix])
            image[_fragment_position(lane, 0, trans)] = low
            image[_fragment_position(lane, 1, trans)] = high
        for row in range(8):
            start = addresses[8 * matrix + row]
            for word in range(4):
                shared[start + word] = int(image[row, 2 * word]) | (int(image[row, 2 * word + 1]) << 16)


def prmt(a: int, b: int, selector: int) -> int:
    """`prmt.b32 d, a, b, selector` (the default mode), as the PTX ISA describes it: byte i of d is byte
    (nibble i of the selector) & 7 of the eight bytes of b:a (a's are 0-3), or that byte's sign bit
    replicated where the nibble's bit 3 is set."""
    source, result = (int(a) & 0xFFFFFFFF) | (int(b) & 0xFFFFFFFF) << 32, 0
    for i in range(4):
        nibble = selector >> 4 * i & 0xF
        byte = source >> 8 * (nibble & 7) & 0xFF
        if nibble & 8:
            byte = 0xFF if byte & 0x80 else 0
        result |= byte << 8 * i
    return result


def b16_tile_words(layout: Layout, values: np.ndarray) -> np.ndarray:
    """The shared words of a (rows, words) tile layout whose 16-bit elements are `values` (rows x 2 * words,
    any 16-bit dtype): element (r, c) in half c % 2 of word layout(r, c // 2), what a copy of the rows leaves
    in shared memory (a swizzle included)."""
    words = np.zeros(layout.cosize, np.uint32)
    rows, columns = values.shape
    bits = np.ascontiguousarray(values).view(np.uint16)
    for row in range(rows):
        for column in range(columns):
            words[layout.offset(row, column // 2)] |= int(bits[row, column]) << (16 * (column % 2))
    return words


def b16_half(word: int, part: int) -> np.uint16:
    """Half `part` (0: low) of a 32-bit register or shared word."""
    return np.uint16(int(word) >> (16 * part) & 0xFFFF)


def _tma_pitch(row_bytes: int, swizzle_bytes: int) -> int:
    """Where a box's rows lie in shared memory, as the H100 lays them: a swizzled box's rows a whole span apart
    (32, 64, 128 bytes; a narrower row's span keeps its other bytes), an unswizzled box's rows back to back."""
    return max(row_bytes, swizzle_bytes)


def _tma_chunk(start: int, pitch: int, bits: int, row: int, chunk: int) -> int:
    """The shared byte address of row `row`'s 16-byte chunk `chunk`: start + row x pitch + 16 chunk, its bits
    [4, 4 + B) xor'ed with its bits [7, 7 + B)."""
    address = start + row * pitch + 16 * chunk
    return address ^ ((address >> 7) & ((1 << bits) - 1)) << 4


def tma_box_read(shared: np.ndarray, swizzle_bytes: int, rows: int, row_bytes: int, start: int = 0) -> np.ndarray:
    """What a tiled TMA store reads of a box (rows x row_bytes) from the byte array `shared` from byte `start`:
    row r's 16-byte chunk c from the address a load of the box writes it to (`tma_box_write`)."""
    bits, pitch = {0: 0, 32: 1, 64: 2, 128: 3}[swizzle_bytes], _tma_pitch(row_bytes, swizzle_bytes)
    out = np.zeros((rows, row_bytes), np.uint8)
    for row in range(rows):
        for chunk in range(row_bytes // 16):
            address = _tma_chunk(start, pitch, bits, row, chunk)
            out[row, 16 * chunk:16 * chunk + 16] = shared[address:address + 16]
    return out


def tma_box_write(box: np.ndarray, swizzle_bytes: int, shared: np.ndarray, start: int = 0) -> None:
    """A tiled TMA load's write of `box` (rows x columns of any element type) into the byte array `shared` from
    byte `start`, as the tensor map's swizzle mode defines it: row r's bytes at start + r x the pitch (the row's
    bytes unswizzled, the swizzle's span swizzled: a narrower row leaves the rest of its span alone), each
    16-byte chunk's address then with its bits [4, 4 + B) xor'ed with its bits [7, 7 + B), B = log2(swizzle
    bytes / 16) (none: unswizzled)."""
    rows = box.shape[0]
    data = np.ascontiguousarray(box).view(np.uint8).reshape(rows, -1)
    row_bytes = data.shape[1]
    bits, pitch = {0: 0, 32: 1, 64: 2, 128: 3}[swizzle_bytes], _tma_pitch(row_bytes, swizzle_bytes)
    for row in range(rows):
        for chunk in range(row_bytes // 16):
            address = _tma_chunk(start, pitch, bits, row, chunk)
            shared[address:address + 16] = data[row, 16 * chunk:16 * chunk + 16]


def tma_box_store(box: np.ndarray, destination: np.ndarray, row: int, column_byte: int, matrix_row_bytes: int) -> None:
    """A tiled TMA store's write of `box` (rows x bytes, what `tma_box_read` read) at (row, column_byte) into
    `destination` (a matrix's rows of bytes, each its row pitch long) whose rows hold `matrix_row_bytes`: rows
    past the matrix are left alone exactly, columns in whole 16-byte chunks: a chunk that starts inside a row is
    written whole, even where the row ends inside it (what the H100 does; loads clip exactly)."""
    for r in range(box.shape[0]):
        if not 0 <= row + r < destination.shape[0]:
            continue
        for chunk in range(0, box.shape[1], 16):
            if 0 <= column_byte + chunk < matrix_row_bytes:
                destination[row + r, column_byte + chunk:column_byte + chunk + 16] = box[r, chunk:chunk + 16]


# ----- wgmma (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate": the shared memory matrix
# layout, the matrix descriptor, the register fragments), written from the ISA's text -----
WARPGROUP = 128


def wgmma_operand(shared: np.ndarray, descriptor: int, k_major: bool, element_bits: int, rows: int) -> np.ndarray:
    """The `rows` x K operand (K = 32 bytes of elements) that wgmma reads from the byte array `shared` (the
    CTA's shared window from address 0) through the 64-bit `descriptor`, as raw element bits (uint8/16/32).

    The descriptor: start address bits 0-13, leading dimension byte offset 16-29, stride dimension byte offset
    32-45 (each >> 4), swizzle mode 62-63 (0 none, 1 128B, 2 64B, 3 32B); base offset 0. The operand is made
    of core matrices of 8 x 16 bytes. K-major: a core matrix is 8 rows (M/N) of 16 bytes of K. Unswizzled, its
    rows are 16 bytes apart, the core matrix next along K is LBO further, the one 8 rows down SBO further.
    Swizzled by W bytes, a row is W bytes of K (the core matrices of a row side by side), 8 rows W bytes apart
    form the pattern, the next 8 rows SBO further; LBO is not used. MN-major: a core matrix is 8 K-rows of 16
    bytes of M/N. Unswizzled, its K-rows are 16 bytes apart, the core matrix next along M/N is SBO further,
    the one 8 K down LBO further. Swizzled by W bytes, a K-row holds W bytes of M/N, 8 K-rows W bytes apart,
    the next W bytes of M/N LBO further, the next 8 K SBO further. The swizzle: address bits [4, 4+b) xor'ed
    with bits [7, 7+b), b = log2(W / 16), on the shared address."""
    start, leading, stride = ((descriptor >> shift & 0x3FFF) << 4 for shift in (0, 16, 32))
    width = {0: 0, 1: 128, 2: 64, 3: 32}[descriptor >> 62 & 3]
    size = element_bits // 8
    per_chunk, columns = 16 // size, 32 // size
    out = np.zeros((rows, columns), {1: np.uint8, 2: np.uint16, 4: np.uint32}[size])
    for row in range(rows):
        for column in range(columns):
            if k_major:
                core_row, core, across = row % 8, row // 8, column * size  # `across`: bytes along the row
                if width:
                    address = start + core * stride + core_row * width + across
                else:
                    address = start + core * stride + (across // 16) * leading + core_row * 16 + across % 16
            else:
                k_row, k_group, across = column % 8, column // 8, row * size
                if width:
                    address = start + (across // width) * leading + k_group * stride + k_row * width + across % width
                else:
                    address = start + (across // 16) * stride + k_group * leading + k_row * 16 + across % 16
            if width:
                bits = {128: 3, 64: 2, 32: 1}[width]
                address ^= ((address >> 7) & ((1 << bits) - 1)) << 4
            out[row, column] = int.from_bytes(shared[address:address + size].tobytes(), "little")
    return out


def wgmma_accumulator_position(thread: int, value: int) -> tuple[int, int]:
    """(row, column) of the m64nN accumulator D that register `value` of warpgroup thread `thread` holds: warp w
    holds rows 16 w to 16 w + 15; in it, lane l's d[4 j + i] is row l / 4 (+ 8 for i = 2, 3), column 8 j +
    2 (l % 4) + i % 2."""
    warp, lane = divmod(thread, 32)
    group, i = divmod(value, 4)
    return 16 * warp + lane // 4 + 8 * (i // 2), 8 * group + 2 * (lane % 4) + i % 2
