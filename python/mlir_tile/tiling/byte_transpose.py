"""The transposition of an 8-bit tile by a warpgroup inside a kernel (pure Python, no MLIR): wgmma reads 8-bit
operands K-major only, so a tile TMA wrote as rows of K (N contiguous: fp8 B as a user holds it [K, N],
attention's V) is rewritten as rows of N (K contiguous) with ldmatrix.trans, byte permutes and stmatrix, as
FlashAttention-3 does for fp8 V. Every load and store is a `tile.matrix_transfer` the contract checks, and
the whole is proven on the reference model when it is made: each byte (k, n) of the source lands at (n, k)
of the target, and no load or store has a bank conflict.

A step of one warp moves 16 rows of K by 64 bytes of N. ldmatrix.x4.trans (b16) gives lane l (q = l % 4,
c = l / 4) of each 8-row matrix bytes 2c and 2c + 1 of the matrix's 16 bytes of N, in its rows 2q and 2q + 1.
Two loads X and Y whose matrices' rows are k = 0 1 4 5 10 11 14 15 and 2 3 6 7 8 9 12 13 give each lane the
four rows 4q .. 4q + 3 (the lower pair in X while q < 2, in Y from q = 2 on); two byte permutes make of them
the words (n, k 4q .. 4q + 3) of rows n = 2c and 2c + 1, which two stores P and Q (rows n = 0 2 4 6 9 11 13 15
and 1 3 5 7 8 10 12 14 of each 16) write as stmatrix rows: lane l gives word q of row c. Under the 128-byte
swizzle, rows k and k + 8 share a 16-byte bank quad, so the plain orders (0 1 4 5 8 9 12 13; n = 0 2 .. 14)
would each be 2-way conflicts; these touch 8 quads a matrix. Which permute a lane applies depends on its q and c:
`selectors` holds the one of each lane, derived from the layouts on the model (not written down by hand).

    t = byte_transpose(source_words, target_words)   # (k, n / 4) and (n, k / 4) word layouts, swizzled
    for step in t.steps:                             # a view of each tile at the step's words, per transfer
        ldmatrix X, Y; P = prmt(X, Y, selector P); Q = prmt(X, Y, selector Q); stmatrix P, Q
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from mlir_tile import contract
from mlir_tile.models.banks import transfer_wavefronts
from mlir_tile.algebra.layout import Layout, laneid, warpid

STEP_ROWS, STEP_WORDS, WARPS = 16, 16, 4  # a warp's step: 16 rows of K by 16 words (64 bytes) of N
LOAD = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
STORE = "stmatrix.sync.aligned.m8n8.x4.shared.b16"
# Each transfer's first row and the strides of its matrices' rows: loads X, Y (row r0 + 2 r1 + 4 r2 -> k) and
# stores P, Q (row c0 + 4 c1 -> n), as the module's text says
LOAD_ROWS = ((0, (2, 2, 2), (1, 4, 10)), (2, (2, 2, 2), (1, 4, 6)))
# with a key order (`byte_transpose`'s): X rows 0 .. 7 and Y 8 .. 15, which give lane q rows 2q, 2q + 1 and 2q + 8,
# 2q + 9: the keys an 8-bit wgmma A register holds where an accumulator thread held them (`atoms.a_key_order`)
PAIRED_LOAD_ROWS = ((0, (2, 2, 2), (1, 2, 4)), (8, (2, 2, 2), (1, 2, 4)))
STORE_ROWS = ((0, (4, 2), (2, 9)), (1, (4, 2), (2, 7)))
REGISTERS = Layout((WARPS, 4, 8, 4), (1 @ warpid, 1, 4 @ laneid, 1 @ laneid))  # (warp, matrix, row, word)


@dataclass(frozen=True)
class Transfer:
    opcode: str
    registers: Layout
    shared: Layout  # over a view of its tile starting `offset` words after a step's first word
    offset: int


@dataclass(frozen=True)
class ByteTranspose:
    source: Layout  # (rows of K, words of N)
    target: Layout  # (rows of N, words of K)
    loads: tuple[Transfer, Transfer]  # X, Y: scope "warpgroup", 4 register slots each
    stores: tuple[Transfer, Transfer]  # P, Q
    steps: tuple[tuple[int, int], ...]  # each step's first word in the source, in the target
    selectors: tuple[tuple[int, ...], tuple[int, ...]]  # prmt.b32 selector of P's word, of Q's, per lane (32)
    key_order: Layout | None = None  # source row k -> the target's column (None: k itself)

    def key_at(self, column: int) -> int:
        """The source row whose byte the target's `column` holds."""
        return column if self.key_order is None else _inverse(self.key_order)[column]


def byte_transpose(source: Layout, target: Layout, key_order: Layout | None = None) -> ByteTranspose:
    """The transposition of `source` (rows of K by words of 4 bytes of N) into `target` (rows of N by words of
    4 bytes of K), both swizzled or not, by one warpgroup; byte (k, n) to (n, k), or with `key_order` (a rank-1
    permutation of K that keeps each 16 rows together: FlashAttention-3's fp8 V, whose keys P's registers hold
    in an order of their own) to (n, key_order(k)). ValueError where the tiles are not whole steps or the proof
    fails (a byte misplaced, a bank conflict)."""
    (rows, words), (target_rows, target_words) = source.sizes, target.sizes
    if rows % (STEP_ROWS * WARPS) or words % STEP_WORDS or (target_rows, target_words) != (4 * words, rows // 4):
        raise ValueError(f"byte transpose: a source of K rows by N / 4 words (K a multiple of {STEP_ROWS * WARPS}, "
                         f"N of {4 * STEP_WORDS}) into a target of N rows by K / 4 words; got {source} and {target}")
    if key_order is not None and (key_order.rank != 1 or key_order.size != rows
                                  or sorted(_inverse(key_order)) != list(range(rows))
                                  or any(key_order.offset(k) // STEP_ROWS != k // STEP_ROWS for k in range(rows))):
        raise ValueError(f"byte transpose: a key order permutes the {rows} rows, each 16 among themselves; got {key_order}")
    at, target_at = _offsets(source), _offsets(target)
    loads = tuple(Transfer(LOAD, REGISTERS, Layout(
        (WARPS, 4, shape, 4), (at(STEP_ROWS, 0), at(0, 4), tuple(at(s, 0) for s in strides), at(0, 1)), source.swizzle),
        at(first, 0)) for first, shape, strides in (LOAD_ROWS if key_order is None else PAIRED_LOAD_ROWS))
    stores = tuple(Transfer(STORE, REGISTERS, Layout(
        (WARPS, 4, shape, 4), (target_at(0, STEP_ROWS // 4), target_at(16, 0), tuple(target_at(s, 0) for s in strides),
                               target_at(0, 1)), target.swizzle),
        target_at(first, 0)) for first, shape, strides in STORE_ROWS)
    k_turns = rows // (STEP_ROWS * WARPS)  # the warps side by side along K, then along N
    steps = tuple((at(STEP_ROWS * WARPS * (s % k_turns), STEP_WORDS * (s // k_turns)),
                   target_at(4 * STEP_WORDS * (s // k_turns), STEP_ROWS * WARPS // 4 * (s % k_turns)))
                  for s in range(k_turns * words // STEP_WORDS))
    plan = ByteTranspose(source, target, loads, stores, steps, ((), ()), key_order)
    transpose = ByteTranspose(source, target, loads, stores, steps, _selectors(plan), key_order)
    _prove(transpose, source, target)
    return transpose


@functools.lru_cache(maxsize=None)
def _inverse(order: Layout) -> dict[int, int]:
    """{order(k): k} of a rank-1 layout."""
    return {order.offset(k): k for k in range(order.size)}


def _offsets(tile: Layout):
    """at(row, word): the tile's offset of that coordinate without its swizzle (the swizzle applies to a
    view's whole offset, as a transfer's layout keeps it)."""
    plain = Layout(tile.shape, tile.stride)
    return lambda row, word: plain.offset(row, word)


def emulate(transpose: ByteTranspose, source_words: np.ndarray, target_words: np.ndarray, selectors=None) -> np.ndarray:
    """The target's words after every step on the reference model (ldmatrix, prmt, stmatrix)."""
    from mlir_tile.models import reference

    selectors = selectors or transpose.selectors
    target = target_words.copy()
    lanes = np.arange(WARPS * 32) % 32
    for source_at, target_at in transpose.steps:
        x, y = (reference.emulate(t.opcode, t.registers, t.shared, np.zeros((WARPS * 32, 4), np.uint32), source_words,
                                  "warpgroup", source_at + t.offset) for t in transpose.loads)
        for store, selector in zip(transpose.stores, selectors):
            permuted = np.array([[reference.prmt(int(x[t, i]), int(y[t, i]), selector[lanes[t]]) for i in range(4)]
                                 for t in range(WARPS * 32)], np.uint32)
            target = reference.emulate(store.opcode, store.shared, store.registers, target, permuted, "warpgroup",
                                       target_at + store.offset)
    return target


def _tagged(tile: Layout, tag) -> np.ndarray:
    """The words of a (rows, words) tile of bytes whose byte (row, column) is tag(row, column)."""
    words = np.zeros(tile.cosize, np.uint32)
    data = words.view(np.uint8)
    rows, columns = tile.sizes[0], 4 * tile.sizes[1]
    for row in range(rows):
        for column in range(columns):
            data[4 * tile.offset(row, column // 4) + column % 4] = tag(row, column)
    return words


def _selectors(plan: ByteTranspose) -> tuple:
    """Each lane's prmt selector for P's and Q's words: from the model, which (k, n) each byte of X and Y
    holds (loads of tiles tagged with k, then with n) and which (n, k) each byte of P's and Q's words must
    hold (where stmatrix puts them); ValueError where a lane's selector differs between its registers."""
    from mlir_tile.models import reference

    loads, stores, step, source, target = plan.loads, plan.stores, plan.steps[0], plan.source, plan.target

    labels = []
    for tag in (lambda k, n: k % 256, lambda k, n: n % 256):
        words = _tagged(source, tag)
        labels.append([reference.emulate(t.opcode, t.registers, t.shared, np.zeros((WARPS * 32, 4), np.uint32), words,
                                         "warpgroup", step[0] + t.offset) for t in loads])
    where = {}
    for row in range(target.sizes[0]):
        for word in range(target.sizes[1]):
            where[target.offset(row, word)] = (row, 4 * word)  # (n, the word's first k)
    result = []
    for store in stores:
        ids = np.arange(WARPS * 32 * 4, dtype=np.uint32).reshape(WARPS * 32, 4) + 1
        placed = reference.emulate(store.opcode, store.shared, store.registers, np.zeros(target.cosize, np.uint32), ids,
                                   "warpgroup", step[1] + store.offset)
        per_lane: dict[int, set] = {}
        for offset in np.flatnonzero(placed):
            thread, slot = divmod(int(placed[offset]) - 1, 4)
            n, k0 = where[int(offset)]
            held = [(int(labels[0][j // 4][thread, slot]) >> 8 * (j % 4) & 0xFF,
                     int(labels[1][j // 4][thread, slot]) >> 8 * (j % 4) & 0xFF) for j in range(8)]
            try:
                nibbles = [held.index((plan.key_at(k0 + b) % 256, n % 256)) for b in range(4)]
            except ValueError:
                raise ValueError(f"byte transpose: lane {thread % 32}'s registers hold no byte of (n {n}, k "
                                 f"{[plan.key_at(k0 + b) for b in range(4)]})") from None
            per_lane.setdefault(thread % 32, set()).add(sum(j << 4 * b for b, j in enumerate(nibbles)))
        if any(len(found) != 1 for found in per_lane.values()) or len(per_lane) != 32:
            raise ValueError(f"byte transpose: a lane's permute differs between its registers: {per_lane}")
        result.append(tuple(per_lane[lane].pop() for lane in range(32)))
    return tuple(result)


def _prove(transpose: ByteTranspose, source: Layout, target: Layout) -> None:
    """Every byte (k, n) of the source at (n, k) of the target (at (n, key_order(k))), by the model (tiles
    tagged with k, then n); every load and store conflict-free by the bank model."""
    for tag in (lambda k, n: k % 256, lambda k, n: n % 256):
        moved = emulate(transpose, _tagged(source, tag), np.zeros(target.cosize, np.uint32)).view(np.uint8)
        for n in range(target.sizes[0]):
            for k in range(4 * target.sizes[1]):
                if moved[4 * target.offset(n, k // 4) + k % 4] != tag(transpose.key_at(k), n):
                    raise ValueError(f"byte transpose: byte (k {transpose.key_at(k)}, n {n}) of {source} is not at "
                                     f"(n {n}, column {k}) of {target}")
    for source_at, target_at in transpose.steps:
        for transfer, at, tile in ([(t, source_at, source) for t in transpose.loads]
                                   + [(t, target_at, target) for t in transpose.stores]):
            checked = contract.verdict(contract.Query.of_layouts(
                transfer.opcode, transfer.registers, transfer.shared, register_slots=4, shared_words=tile.cosize,
                scope="warpgroup", shared_offset=at + transfer.offset)).require()
            wavefronts = transfer_wavefronts(checked)
            if wavefronts.worst != wavefronts.minimum:
                raise ValueError(f"byte transpose: {wavefronts.remark(transfer.opcode)} at word {at + transfer.offset}")
