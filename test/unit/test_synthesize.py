"""Synthesized layouts are conflict-free by the bank model for every block transfer and the 16-byte writer,
cross-checked through the contract's Transfer (the same path the verifier and the remark take), and the known
answers come out: 128-byte rows of halves get CuTe's 128-byte swizzle, Sw<3,2,3> in words."""
import itertools

import pytest

from mlir_tile import contract
from mlir_tile.models.banks import transfer_wavefronts
from mlir_tile.algebra.layout import Layout, Swizzle, laneid
from mlir_tile.tiling.synthesize import Tile, synthesize, writer_wavefronts

TILES = [Tile(rows, columns, bits) for bits, rows, columns in itertools.product(
    (16,), (16, 64, 128), (16, 32, 64, 128, 256))] + [Tile(rows, columns, 8) for rows, columns in
                                                        ((16, 32), (64, 64), (64, 128), (128, 128), (32, 256))]


@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"{t.rows}x{t.columns}x{t.element_bits}")
def test_every_tile_gets_a_conflict_free_layout_without_extra_memory(tile):
    choice = synthesize(tile)
    assert choice.conflict_free and choice.pitch == tile.row_words, choice.describe(tile)
    # the same through the contract: row band 0 and row band b as the two values of a repeat mode, the column
    # blocks as another (a thread's registers bound one transfer to 255 words), as an x4, .trans and stmatrix
    columns = tile.row_words // 8
    for band in range(max(1, tile.rows // 16)):
        shared = Layout((2, columns, (2, 2), 8, 4), (16 * choice.pitch * band, 8, (8 * choice.pitch, 4), choice.pitch, 1),
                        choice.swizzle)
        registers = Layout((2, columns, 4, 8, 4), (4 * columns, 4, 1, 4 @ laneid, 1 @ laneid))
        for opcode in ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                       "stmatrix.sync.aligned.m8n8.x4.shared.b16"):
            if band == 0 and opcode.startswith("stmatrix"):
                continue  # two repeats over the same rows: a program-order overwrite, fine, but not this check
            transfer = contract.verdict(contract.Query.of_layouts(opcode, registers, shared, register_slots=8 * columns,
                                                shared_words=tile.rows * choice.pitch)).require()
            assert transfer_wavefronts(transfer).worst == 4


@pytest.mark.parametrize("tile, swizzle", [(Tile(64, 64), Swizzle(3, 2, 3)), (Tile(64, 32), Swizzle(2, 2, 3)),
                                           (Tile(64, 128, 8), Swizzle(3, 2, 3))])
def test_known_answers(tile, swizzle):
    assert synthesize(tile).swizzle == swizzle


def test_an_unswizzled_128_byte_row_tile_is_8_way_conflicted():
    from mlir_tile.tiling.synthesize import Choice, _cost

    wavefronts, minimum = _cost(Tile(64, 64), Choice(None, 32, 0, 0), writer=False)
    assert wavefronts == 8 * minimum


@pytest.mark.parametrize("tile", [Tile(64, 64), Tile(128, 32), Tile(64, 128, 8)], ids=str)
def test_the_block_layout_addresses_the_rows_the_cost_counts(tile):
    """Choice.block_layout (what users write in the IR) puts each block's rows where the synthesis counted them."""
    choice = synthesize(tile)
    layout = choice.block_layout(tile)
    for band, column, matrix, row in itertools.product(range(tile.rows // 16), range(tile.row_words // 8), range(4),
                                                       range(8)):
        expected = choice.address(16 * band + 8 * (matrix & 1) + row, 8 * column + 4 * (matrix >> 1))
        assert layout.offset(band, column, matrix, row, 0) == expected


def test_the_command_line(capsys):
    from mlir_tile.tools.synthesize import main

    assert main(["64", "64"]) == 0
    out = capsys.readouterr().out
    assert "64x64 16-bit tile: Sw<3,2,3> o (64,32):(32,1): 8192 bytes, conflict-free" in out
    assert "16-byte-vector writer: 64 wavefronts, minimum 64" in out
    assert "every block as one x4 in mma order: Sw<3,2,3> o (4,4,(2,2),8,4):(512,8,(256,4),32,1)" in out
    for bad in (["10", "64"], ["100000", "100000"], ["16", "-64"]):
        with pytest.raises(SystemExit) as exit_:
            main(bad)
        assert exit_.value.code == 2
    assert "more than any chip's shared memory" in capsys.readouterr().err


def test_any_address_function_is_costed_like_a_choice():
    """What benchmarks/triton_comparison.py relies on: another tool's layout, given as (row, word) -> word
    offset, is costed exactly as the same layout given as a Choice."""
    from mlir_tile.tiling.synthesize import Choice, block_wavefronts, writer_wavefronts

    tile = Tile(64, 64)
    for choice in (Choice(None, 32, 0, 0), Choice(Swizzle(3, 2, 3), 32, 0, 0), Choice(Swizzle(2, 2, 3), 32, 0, 0)):
        address = lambda row, word, c=choice: c.address(row, word)
        assert block_wavefronts(tile, address) == block_wavefronts(tile, choice)
        assert writer_wavefronts(tile, address) == writer_wavefronts(tile, choice)
    assert block_wavefronts(tile, lambda row, word: 32 * row + word) == (512, 64)  # 128-byte rows: 8-way


@pytest.mark.parametrize("tile", [Tile(128, 32), Tile(128, 64), Tile(64, 64), Tile(64, 128), Tile(128, 64, 8)], ids=str)
def test_the_k_block_major_arrangement_is_offered_and_conflict_free_for_the_transfers(tile):
    """Each 8-word column block (a k16 block) contiguous, rows x 8 words: the x4 transfers are conflict-free
    under Sw<1,2,3>, with no extra memory; its layout addresses what the cost counts; where a row-major 16-byte
    writer then conflicts (its 8 lanes of a phase span column blocks that start on the same bank), synthesize
    says so rather than hides it."""
    choice = synthesize(tile, writer=False, k_block_major=True)
    assert choice.conflict_free and choice.block_stride == 8 * tile.rows and choice.pitch == 8
    layout = choice.layout(tile)
    assert layout.cosize == tile.rows * tile.row_words
    assert all(layout(row, word).offset == choice.address(row, word)
               for row in range(tile.rows) for word in range(tile.row_words))
    with_writer = synthesize(tile, k_block_major=True)
    written, minimum = writer_wavefronts(tile, with_writer)
    assert ("conflict-free" in with_writer.describe(tile)) == with_writer.conflict_free
    if tile == Tile(128, 32):  # 4 chunks a row: a phase's 8 lanes cover 2 column blocks, 1024 words apart
        assert written == 2 * minimum and not with_writer.conflict_free
