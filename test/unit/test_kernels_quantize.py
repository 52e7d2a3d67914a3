"""The fp8 quantization kernel (`kernels.gemm.quantize`) as built: what its config takes, its grid, and its PTX's
structure, each a 16-byte load a piece, torch's IEEE division (so that the GPU test can ask torch's bits of it),
e4m3's saturated rounding and 8-byte stores; ptxas assembles it without spills. (Its values against torch's
quantization: test_fp8_training_gpu.py.)"""
import re
import shutil
import subprocess

import pytest

from mlir_tile.kernels.gemm import quantize


@pytest.mark.parametrize("element, block_rows, transposed", [("e4m3", 1, False), ("f32", 1, False),
                                                             ("bf16", 64, False), ("f16", 0, False), ("bf16", 128, True)])
def test_a_quantizer_takes_16_bit_values_in_blocks_of_1_or_128_rows(element, block_rows, transposed):
    with pytest.raises(ValueError, match="f16 or bf16 values in blocks of 1 or 128 rows"):
        quantize.QuantizeConfig(element, block_rows, transposed)


@pytest.mark.parametrize("block_rows, transposed, rows, blocks, grid", [
    (1, False, 33, 3, 7), (1, False, 16, 1, 1), (1, False, 17, 1, 2), (128, False, 33, 3, 3), (128, False, 129, 2, 4),
    (128, False, 128, 9, 9), (1, True, 129, 3, 6), (1, True, 128, 1, 1)])
def test_the_grid_covers_every_block_once(block_rows, transposed, rows, blocks, grid):
    """16 row blocks a CTA (a half-warp each) of 1 x 128; one a CTA of 128 x 128; transposed, a CTA 128 tokens of
    64 columns (`blocks`: the column tiles)."""
    assert quantize.QuantizeConfig("bf16", block_rows, transposed).grid(rows, blocks) == grid


@pytest.mark.parametrize("block_rows", quantize.BLOCK_ROWS)
def test_a_quantizer_reads_each_piece_once_and_rounds_it_as_torch_does(block_rows, tmp_path):
    """Per lane: one 16-byte load a piece (1 or 8), the block's largest by butterflies of max (and through
    shared memory across the warps of a 128 x 128 block), eight IEEE divisions a piece (torch's: not a
    reciprocal's product), two cvt.rn.satfinite.e4m3x2 pairs and one 8-byte store a piece."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = quantize.QuantizeConfig("bf16", block_rows)
    ptx = compile_to_ptx(quantize.build_module(config))
    pieces = 1 if block_rows == 1 else 8
    assert len(re.findall(r"ld\.global\.v4\.b32", ptx)) == pieces
    assert len(re.findall(r"st\.global\.v2\.b32", ptx)) == pieces
    assert len(re.findall(r"cvt\.rn\.satfinite\.e4m3x2\.f32", ptx)) == 4 * pieces
    assert len(re.findall(r"div\.rn\.f32", ptx)) == 8 * pieces + 1 and "div.approx" not in ptx
    assert len(re.findall(r"shfl\.sync\.bfly", ptx)) == (4 if block_rows == 1 else 5)
    assert ("bar.sync" in ptx) == (block_rows == 128)
    if shutil.which("ptxas"):
        (tmp_path / "q.ptx").write_text(ptx)
        assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "q.ptx"), "-o",
                                    str(tmp_path / "q.cubin")], capture_output=True, text=True)
        assert assembled.returncode == 0 and " 0 bytes spill stores" in assembled.stderr, assembled.stderr


def test_a_transposed_quantizer_writes_a_warps_column_block_as_one_row_of_x_transposed(tmp_path):
    """x [T, C] into x^T's 1 x 128 blocks: a lane's 4 tokens of 8 columns in 4 16-byte loads, each column's block
    one warp's (5 butterflies a column), its 4 tokens over the scale as one 4-byte store into x^T's row (8 a
    lane, and 8 scales by the first lane), torch's IEEE divisions; no shared memory, no spills."""
    from mlir_tile.compiler.compile import compile_to_ptx

    ptx = compile_to_ptx(quantize.build_module(quantize.QuantizeConfig("f16", 1, True)))
    assert len(re.findall(r"ld\.global\.v4\.b32", ptx)) == 4 and len(re.findall(r"shfl\.sync\.bfly", ptx)) == 8 * 5
    assert len(re.findall(r"st\.global\.b32", ptx)) == 16 and len(re.findall(r"cvt\.rn\.satfinite\.e4m3x2", ptx)) == 16
    assert len(re.findall(r"div\.rn\.f32", ptx)) == 8 * (4 + 1) and "bar.sync" not in ptx
    if shutil.which("ptxas"):
        (tmp_path / "q.ptx").write_text(ptx)
        assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "q.ptx"), "-o",
                                    str(tmp_path / "q.cubin")], capture_output=True, text=True)
        assert assembled.returncode == 0 and " 0 bytes spill stores" in assembled.stderr, assembled.stderr
