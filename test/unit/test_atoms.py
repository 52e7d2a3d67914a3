"""The MMA atoms (atoms.py) against the PTX ISA's fragment tables (`fragments.fragment_element`, written from
the ISA's "Matrix Fragments for mma.m16n8k16 / m16n8k32"): every lane, register and part of A, B (one n8 block:
the table's first two registers) and C; an atom's thread-value layouts cover its tiles once per value; the
tiled mma's accumulator coordinates are the atom's C tiled over warps and blocks."""
import pytest

from mlir_tile.atoms import ATOMS, MMA_M16N8K16, MMA_M16N8K32
from mlir_tile.fragments import fragment_element
from mlir_tile.tiled import tiled_mma_m16n8k16
from mlir_tile.synthesize import Tile, synthesize

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
