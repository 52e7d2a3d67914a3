"""The fp8 quantization kernel (`kernels.gemm.quantize`) as built: what its config takes, its grid, and its PTX's
structure, each a 16-byte load a piece, torch's IEEE division (so that the GPU test can ask torch's bits of it),
e4m3's saturated rounding and 8-byte stores; ptxas assembles it without spills. (Its values against torch's
quantization: test_fp8_training_gpu.py.)"""
import re
import shutil
import subprocess

import pytest

from mlir_tile.kernels.gemm import quantize


@pytest.mark.parametrize("element, block_rows", [("e4m3", 1), ("f32", 1), ("bf16", 64), ("f16", 0)])
def test_a_quantizer_takes_16_bit_values_in_blocks_of_1_or_128_rows(element, block_rows):
    with pytest.raises(ValueError, match="f16 or bf16 values in blocks of 1 or 128 rows"):
        quantize.QuantizeConfig(element, block_rows)


@pytest.mark.parametrize("block_rows, rows, blocks, grid", [(1, 33, 3, 7), (1, 16, 1, 1), (1, 17, 1, 2),
                                                             (128, 33, 3, 3), (128, 129, 2, 4), (128, 128, 9, 9)])
def test_the_grid_covers_every_block_once(block_rows, rows, blocks, grid):
    """16 row blocks a CTA (a half-warp each) of 1 x 128; one a CTA of 128 x 128."""
    assert quantize.QuantizeConfig("bf16", block_rows).grid(rows, blocks) == grid


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
