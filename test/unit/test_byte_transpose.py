"""The in-kernel transposition of 8-bit tiles (byte_transpose.py) on the reference model: random bytes written
through the source tile's layout come out of the target tile's layout as numpy's transpose; its loads and
stores are conflict-free where the plain row orders are not; each lane's byte permute is what the layouts
need (a wrong one misplaces bytes); tiles that are no whole steps are refused. And prmt's model against the
PTX ISA's examples."""
import numpy as np
import pytest

from mlir_tile.tiling import byte_transpose

from mlir_tile.models import reference
from mlir_tile.algebra.layout import Layout, Swizzle

SWIZZLE_128B_WORDS = Swizzle(3, 2, 3)  # TMA's 128-byte swizzle on 32-bit words
SWIZZLE_WORDS = {128: SWIZZLE_128B_WORDS, 64: Swizzle(2, 2, 3)}  # by the bytes of a row


def _tiles(k: int, n: int, boxes: int = 1):
    """A k x n staging tile of `boxes` boxes side by side (as TMA writes B [K, N]) and the n x k K-major
    target (B [N, K], rows of k bytes), each swizzled as TMA and wgmma would for its rows, in words."""
    words = n // 4 // boxes
    source = Layout((k, (words, boxes)), (words, (1, k * words)), SWIZZLE_WORDS[4 * words])
    target = Layout((n, k // 4), (k // 4, 1), SWIZZLE_WORDS[k])
    return source, target


def _write(tile: Layout, matrix: np.ndarray) -> np.ndarray:
    """The words of tile `tile` holding the bytes of `matrix` (rows x 4 * words)."""
    words = np.zeros(tile.cosize, np.uint32)
    data = words.view(np.uint8)
    for row, column in np.ndindex(matrix.shape):
        data[4 * tile.offset(row, column // 4) + column % 4] = matrix[row, column]
    return words


def _read(tile: Layout, words: np.ndarray) -> np.ndarray:
    rows, columns = tile.sizes[0], 4 * tile.sizes[1]
    data = words.view(np.uint8)
    return np.array([[data[4 * tile.offset(r, c // 4) + c % 4] for c in range(columns)] for r in range(rows)], np.uint8)


@pytest.mark.parametrize("k, n, boxes", [(128, 256, 2), (128, 128, 1), (64, 64, 1)])
def test_random_bytes_come_out_transposed(k, n, boxes):
    source, target = _tiles(k, n, boxes)
    plan = byte_transpose.byte_transpose(source, target)
    matrix = np.random.default_rng(k + n).integers(0, 256, (k, n), dtype=np.uint8)
    moved = byte_transpose.emulate(plan, _write(source, matrix), np.zeros(target.cosize, np.uint32))
    assert (_read(target, moved) == matrix.T).all()
    assert len(plan.steps) == k * n // (16 * 64 * byte_transpose.WARPS)


# FlashAttention-3's fp8 P: accumulator column j is A's column sigma(j) (the PTX ISA's fragments: per 32 keys,
# j = e + 2q + 8h + 16g -> e + 2h + 4q + 16g), written down here from the ISA's figures, not from atoms
P_KEY_ORDER = Layout.parse("((2,4,2,2,4)):((1,4,2,16,32))")


def _sigma(j: int) -> int:
    e, q, h, g, s = j % 2, j // 2 % 4, j // 8 % 2, j // 16 % 2, j // 32
    return e + 2 * h + 4 * q + 16 * g + 32 * s


@pytest.mark.parametrize("k, n, boxes", [(128, 128, 1), (128, 256, 2)])
def test_with_a_key_order_each_key_lands_at_its_column_in_that_order(k, n, boxes):
    """V [keys, d] rewritten as V^T with key j at column sigma(j): conflict-free, the selectors the plain pairs
    of rows give (0x6420 / 0x7531, P and Q swapped for lanes 16-31 so that a store's rows avoid one another)."""
    source, target = _tiles(k, n, boxes)
    plan = byte_transpose.byte_transpose(source, target, P_KEY_ORDER)
    matrix = np.random.default_rng(k + n).integers(0, 256, (k, n), dtype=np.uint8)
    moved = _read(target, byte_transpose.emulate(plan, _write(source, matrix), np.zeros(target.cosize, np.uint32)))
    assert all((moved[:, _sigma(j)] == matrix[j]).all() for j in range(k))
    p, q = plan.selectors
    assert p == (0x6420,) * 16 + (0x7531,) * 16 and q == (0x7531,) * 16 + (0x6420,) * 16


@pytest.mark.parametrize("order, message", [
    (Layout.parse("((2,64)):((64,1))"), "each 16 among themselves"),  # a permutation, but across 16-row steps
    (Layout.parse("((2,4,2,2,4)):((1,4,2,16,16))"), "permutes the 128 rows"),
    (Layout.parse("(128,1):(1,1)"), "permutes the 128 rows")])
def test_a_key_order_that_leaves_its_steps_or_is_no_permutation_is_refused(order, message):
    source, target = _tiles(128, 128)
    with pytest.raises(ValueError, match=message):
        byte_transpose.byte_transpose(source, target, order)


def test_each_lane_permutes_by_its_own_selector():
    """Lanes 0-15 make row 2c in P, 16-31 row 2c + 1 (c = lane / 4); lanes with q = lane % 4 >= 2 hold the lower
    pair of rows in Y: the selectors say so, and one lane's wrong selector misplaces its bytes."""
    source, target = _tiles(64, 64)
    plan = byte_transpose.byte_transpose(source, target)
    p, q = plan.selectors
    assert p[0] == 0x6420 and p[2] == 0x2064 and p[16] == 0x7531 and p[18] == 0x3175
    assert all(p[lane] ^ q[lane] == 0x1111 for lane in range(32))
    wrong = (p[:5] + (q[5],) + p[6:], q)
    matrix = np.random.default_rng(1).integers(0, 256, (64, 64), dtype=np.uint8)
    moved = byte_transpose.emulate(plan, _write(source, matrix), np.zeros(target.cosize, np.uint32), wrong)
    assert not (_read(target, moved) == matrix.T).all()


def test_the_plain_row_order_is_refused_for_its_bank_conflicts(monkeypatch):
    """Rows k = 0 1 4 5 8 9 12 13 of one matrix: k and k + 8 share a bank quad under the 128-byte swizzle."""
    monkeypatch.setattr(byte_transpose, "LOAD_ROWS", ((0, (2, 2, 2), (1, 4, 8)), (2, (2, 2, 2), (1, 4, 8))))
    with pytest.raises(ValueError, match="2-way conflict"):
        byte_transpose.byte_transpose(*_tiles(64, 64))


@pytest.mark.parametrize("source_swizzle, target_swizzle", [(None, Swizzle(2, 2, 3)),
                                                             (Swizzle(2, 2, 3), SWIZZLE_128B_WORDS)])
def test_swizzles_that_leave_bank_conflicts_are_refused(source_swizzle, target_swizzle):
    """Unswizzled 64-byte rows, and rows of 64 bytes under the 128-byte swizzle (two rows a 128-byte line)."""
    source = Layout((64, 16), (16, 1), source_swizzle)
    target = Layout((64, 16), (16, 1), target_swizzle)
    with pytest.raises(ValueError, match="2-way conflict|4-way conflict|8-way conflict"):
        byte_transpose.byte_transpose(source, target)


@pytest.mark.parametrize("source, target", [
    (Layout((32, 16), (16, 1), SWIZZLE_128B_WORDS), Layout((64, 8), (8, 1))),  # K of 32 rows: no whole step
    (Layout((64, 8), (8, 1), SWIZZLE_128B_WORDS), Layout((32, 16), (16, 1))),  # N of 32 bytes
    (Layout((64, 16), (16, 1), SWIZZLE_128B_WORDS), Layout((32, 16), (16, 1))),  # a target of other extents
])
def test_tiles_that_are_no_whole_steps_are_refused(source, target):
    with pytest.raises(ValueError, match="a source of K rows"):
        byte_transpose.byte_transpose(source, target)


@pytest.mark.parametrize("a, b, selector, expected", [
    (0x33221100, 0x77665544, 0x3210, 0x33221100),  # the identity
    (0x33221100, 0x77665544, 0x7654, 0x77665544),  # b's bytes
    (0x33221100, 0x77665544, 0x6420, 0x66442200),  # the even bytes
    (0x33221100, 0x77665544, 0x7531, 0x77553311),
    (0x00008000, 0, 0x0009, 0x000000FF),  # bit 3: byte 1's sign (0x80) replicated
    (0x00007F00, 0, 0x0009, 0x00000000),
])
def test_prmt_is_the_isas_default_mode(a, b, selector, expected):
    assert reference.prmt(a, b, selector) == expected
