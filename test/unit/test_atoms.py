"""The atoms (atoms.py) against the PTX ISA's fragment tables (`fragments.fragment_element`, written from the
ISA's "Matrix Fragments for mma.m16n8k16 / m16n8k32"): every lane, register and part of the MMA atoms' A, B (one
n8 block: the table's first two registers) and C, and of the copy atoms' 16 x 16 blocks (ldmatrix and stmatrix:
A's and packed C's, .trans: B's K x N, from an N x K tile: B's transposed); the non-transposing copy atoms'
values are the words their matrix order places; thread-value layouts cover their tiles once per value; the tiled
mma's accumulator coordinates are the atom's C tiled over warps and blocks."""
import pytest

from mlir_tile.isa.atoms import (ATOMS, COPY_ATOMS, LDMATRIX_X4, LDMATRIX_X4_NK, LDMATRIX_X4_TRANS, MMA_M16N8K16,
                             MMA_M16N8K32, STMATRIX_X4, block_layout)
from mlir_tile.tiling.fragments import fragment_element
from mlir_tile.tiling.tiled import tiled_mma_m16n8k16
from mlir_tile.tiling.synthesize import Tile, synthesize

TABLES = {MMA_M16N8K16: ("a16", "b16", "c32"), MMA_M16N8K32: ("a8", "b8", "c32")}


@pytest.mark.parametrize("atom", ATOMS, ids=lambda atom: atom.name)
def test_every_lane_and_value_is_the_isas(atom):
    a_table, b_table, c_table = TABLES[atom]
    a_count, b_count, c_count = atom.registers
    for lane in range(32):
        for register in range(a_count):
            for part in range(atom.per_register):
                assert atom.fragment("a", lane, register, part) == fragment_element(a_table, lane, register, part)
        for register in range(b_count):  # the table's B registers: (k half, n-block); n-block 0's are 0 and 1
            for part in range(atom.per_register):
                row, column = fragment_element(b_table, lane, register, part)
                expected = (row, column) if b_table == "b16" else (column, row)  # b8's table is n x k
                assert atom.fragment("b", lane, register, part) == expected
        for register in range(c_count):
            assert atom.fragment("c", lane, register) == fragment_element(c_table, lane, register, 0)


@pytest.mark.parametrize("atom", ATOMS, ids=lambda atom: atom.name)
def test_each_operands_values_cover_its_tile_once(atom):
    m, n, k = atom.shape
    for layout, shape in ((atom.a, (m, k)), (atom.b, (k, n)), (atom.c, (m, n))):
        places = [layout.coordinate(t, v) for t in range(32) for v in range(layout.rows.sizes[1])]
        assert sorted(places) == [(r, c) for r in range(shape[0]) for c in range(shape[1])]


def test_the_tiled_mmas_accumulators_are_the_atoms_c_over_warps_and_blocks():
    tile = lambda rows, columns: synthesize(Tile(rows, columns)).layout(Tile(rows, columns))  # noqa: E731
    tiled = tiled_mma_m16n8k16((2, 4), (128, 256, 32), tile(128, 32), tile(32, 256), tile(128, 256))
    rows, columns = tiled.accumulator_coordinates()
    for thread in range(0, 256, 7):
        warp_m, warp_n, lane = thread // 32 // 4, thread // 32 % 4, thread % 32
        for mi in range(tiled.m_blocks):
            for ni in range(tiled.n_blocks):
                for register, slot in enumerate(tiled.accumulator_block(mi, ni)):
                    row, column = MMA_M16N8K16.fragment("c", lane, register)
                    assert (rows.offset(thread, slot), columns.offset(thread, slot)) == (
                        16 * (tiled.m_blocks * warp_m + mi) + row, 8 * (tiled.n_blocks * warp_n + ni) + column)


COPY_TABLES = {LDMATRIX_X4: ("a16", False), STMATRIX_X4: ("c16", False), LDMATRIX_X4_TRANS: ("b16", False),
               LDMATRIX_X4_NK: ("b16", True)}


@pytest.mark.parametrize("atom", COPY_ATOMS, ids=lambda atom: f"{atom.opcode} {atom.order}")
def test_each_copy_atoms_values_are_the_isas_block(atom):
    table, transposed = COPY_TABLES[atom]
    for lane in range(32):
        for register in range(4):
            for part in range(2):
                row, column = fragment_element(table, lane, register, part)
                assert atom.values.coordinate(lane, part + 2 * register) == ((column, row) if transposed else
                                                                             (row, column))
    places = sorted(atom.values.coordinate(t, v) for t in range(32) for v in range(8))
    assert places == [(r, c) for r in range(16) for c in range(16)]


@pytest.mark.parametrize("atom", [LDMATRIX_X4, STMATRIX_X4, LDMATRIX_X4_NK], ids=lambda atom: str(atom.order))
def test_a_lanes_register_holds_the_word_its_matrix_order_places(atom):
    """Without .trans, lane l's register r holds word l % 4 of row l / 4 of matrix r: where the block's layout
    (rows of 8 words) puts it is where the values say its two halves lie."""
    block = block_layout(8, atom.order, None)
    for lane in range(32):
        for register in range(4):
            word = block.offset(register, lane // 4, lane % 4)
            assert [atom.values.coordinate(lane, part + 2 * register) for part in range(2)] == [
                (word // 8, 2 * (word % 8) + part) for part in range(2)]
