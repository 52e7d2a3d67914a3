"""The coverage proof: the trial GEMM's A operand, derived by CuTe's algebra, moves every word of its
128x32-half tile twice (once for each of the two warps that share a row band), each by one lane; the
x2-stmatrix epilogue class (NVIDIA/cutlass PR #3345) is an error naming the uncovered word; a transfer
pair that moves a word twice, or a word outside the tile, is named too."""
import pytest

from mlir_tile import contract
from mlir_tile.models.coverage import CoverageError, prove_coverage
from mlir_tile.algebra.layout import Layout, Swizzle
from mlir_tile.algebra.operations import composition, make_layout, tiled_divide
from mlir_tile.isa.atoms import MMA_ORDER

L = Layout.parse
GEMM_A = "Sw<2,2,3> o ((2,2),2,4,(2,2),8,4):((0,1024),8,256,(128,4),16,1)"  # written by hand in the trial GEMM
GEMM_A_REGISTERS = "(4,2,4,4,8,4):(1@warpid,16,4,1,4@laneid,1@laneid)"


def gemm_a_shared() -> Layout:
    """The A operand of a 128x128x32 CTA tile, 4 warps as (2 along N, 2 along M), in six lines of algebra."""
    block, m_blocks, k_blocks = tiled_divide(L("(128,16):(16,1)"), (L("16:1"), L("8:1")))  # 16x8-word blocks
    per_warp, warp_rows = composition(m_blocks, L("(4,2):(1,4)"))  # 4 m-blocks a warp, 2 warp rows
    warps = make_layout(L("2:0"), warp_rows)  # the two warps of a row band read the same A
    layout = make_layout(warps, k_blocks, per_warp, *composition(block, MMA_ORDER))
    return Layout(layout.shape, layout.stride, Swizzle(2, 2, 3))


def checked(opcode, registers, shared, slots, words, scope="warp", threads=32):
    query = contract.Query.of_layouts(opcode, registers, shared, register_slots=slots, shared_words=words,
                                      scope=scope, block_size=(threads, 1, 1))
    return contract.verdict(query).require()


def test_the_gemm_a_layout_comes_out_of_the_algebra():
    assert str(gemm_a_shared()) == GEMM_A


def test_the_gemm_a_operand_covers_its_tile_once_per_warp_of_a_row_band():
    transfer = checked("ldmatrix.sync.aligned.m8n8.x4.shared.b16", GEMM_A_REGISTERS, gemm_a_shared(), 32, 2048,
                       scope="cta", threads=128)
    proof = prove_coverage([transfer], Layout((128, 16), (16, 1), Swizzle(2, 2, 3)), copies=2)
    assert len(proof.movers) == 2048 and all(len(m) == 2 and m[0].warp != m[1].warp for m in proof.movers.values())
    with pytest.raises(CoverageError, match=r"moved 2 times where 1 is needed"):
        prove_coverage([transfer], Layout((128, 16), (16, 1), Swizzle(2, 2, 3)))


def test_an_x2_stmatrix_epilogue_that_misses_half_its_fragment_is_named():
    tile = L("(16,8):(8,1)")  # one warp's 16x16-half C fragment pair
    whole = checked("stmatrix.sync.aligned.m8n8.x4.shared.b16", "((2,2),8,4):((1,2),4@laneid,1@laneid)",
                    "((2,2),8,4):((64,4),8,1)", 4, 128)
    assert len(prove_coverage([whole], tile).movers) == 128
    half = checked("stmatrix.sync.aligned.m8n8.x2.shared.b16", "(2,8,4):(1,4@laneid,1@laneid)",
                   "(2,8,4):(64,8,1)", 2, 128)
    with pytest.raises(CoverageError, match=r"tile word \(0, 4\) \(shared word 4\) is moved by no lane.*64 of the tile's 128"):
        prove_coverage([half], tile)


def test_a_word_moved_twice_or_outside_the_tile_is_named():
    x4 = checked("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "((2,2),8,4):((1,2),4@laneid,1@laneid)",
                 "((2,2),8,4):((64,4),8,1)", 4, 256)
    with pytest.raises(CoverageError, match=r"tile word \(0, 0\) \(shared word 0\) is moved 2 times.*transfer 0 .*transfer 1"):
        prove_coverage([x4, x4], L("(16,8):(8,1)"))
    with pytest.raises(CoverageError, match=r"outside the tile"):
        prove_coverage([x4], L("(8,8):(8,1)"))
