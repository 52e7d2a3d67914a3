"""mlir_tile.kernels.gemm without a GPU: every transfer of a one-CTA GEMM on the reference model against the PTX ISA's
fragment tables and C against numpy, for each B layout and tile; ptxas assembles every variant, sm_80 (no
stmatrix) and split-K ones included, the 16-byte ones without spills; Matmul's split-K rule."""
import re
import shutil
import subprocess

import pytest

from mlir_tile.kernels.gemm import emulation as gemm_emulation, sm80 as gemm_sm80, sm80_tiles as gemm_tiles
from mlir_tile.compiler.compile import compile_to_ptx


@pytest.mark.parametrize("config", [gemm_tiles.Config(), gemm_tiles.Config(b_major="nk"), gemm_tiles.Config(bk=64, stages=3),
                                    gemm_tiles.Config(bn=256, warps=(2, 4)), gemm_tiles.Config(bk=128, stages=2),
                                    gemm_tiles.variant(gemm_tiles.PERSISTENT, 16, b_major="nk")], ids=str)
def test_a_cta_of_the_gemm_computes_the_product_on_the_reference_model(config):
    assert "matches numpy" in gemm_emulation.emulate(config, k_tiles=2 if config.bk == 32 else 1)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
@pytest.mark.parametrize("chip, config", [(chip, config) for chip in ("sm_90", "sm_80")
                                           for config in gemm_tiles.VARIANTS + gemm_tiles.SPLIT_VARIANTS
                                           if chip == "sm_90" or not (config.persistent or config.split_k
                                                                      or config.align != 16)], ids=str)
def test_every_variant_assembles_without_spills(tmp_path, chip, config):
    """(The persistent kernel is sm_90's only; a split-K kernel, whose fp32 partials take no stmatrix, is the
    same code for both chips: assembled for sm_90. sm_80's kernels differ from sm_90's in C's store alone, which
    the 16-byte variants take; the narrower copies' main loops are sm_90's: assembled there.)"""
    ptx = tmp_path / "gemm.ptx"
    ptx.write_text(compile_to_ptx(gemm_sm80.build_module("bf16", config, chip=chip)))
    assembled = subprocess.run(["ptxas", f"-arch={chip}", "-v", str(ptx), "-o", str(tmp_path / "gemm.cubin")],
                               capture_output=True, text=True)
    assert assembled.returncode == 0, assembled.stderr
    spilled = int(re.search(r"(\d+) bytes spill stores", assembled.stderr).group(1))
    assert spilled == 0 if config.align == 16 else spilled <= 64, assembled.stderr  # narrower copies: a few words
    assert ("stmatrix" in ptx.read_text()) == (chip == "sm_90" and not config.split_k)  # a partial: fp32 pairs


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
@pytest.mark.parametrize("element", ["f16", "bf16"])
def test_the_split_k_reduction_assembles(tmp_path, element):
    ptx = tmp_path / "reduce.ptx"
    ptx.write_text(compile_to_ptx(gemm_sm80.build_reduce_module(element)))
    assembled = subprocess.run(["ptxas", "-arch=sm_90", "-v", str(ptx), "-o", str(tmp_path / "reduce.cubin")],
                               capture_output=True, text=True)
    assert assembled.returncode == 0 and "0 bytes spill stores" in assembled.stderr, assembled.stderr
    assert f"cvt.rn.{element}.f32" in ptx.read_text()  # one rounding, after the fp32 sum


@pytest.mark.parametrize("m, n, depth, config, splits", [
    (127, 1000, 4097, gemm_tiles.Config(bm=64, bn=64, align=2), 4),  # 32 tiles: 4 fill 132 SMs, 129 k-tiles allow 4
    (256, 1024, 8192, gemm_tiles.Config(), 8),  # 16 tiles: 8 fill the SMs
    (127, 1000, 1024, gemm_tiles.Config(bm=64, bn=64, align=2), 1),  # 32 k-tiles: one split's least
    (127, 1000, 2048, gemm_tiles.Config(bm=64, bn=64, align=2), 2),  # 64 k-tiles: two splits of 32
    (1024, 1024, 1024, gemm_tiles.Config(), 1),  # 64 tiles, but 32 k-tiles
    (1, 1, 1 << 20, gemm_tiles.Config(), gemm_tiles.MAX_SPLITS),  # one tile, 32768 k-tiles: the cap
    (4096, 4096, 4096, gemm_tiles.Config(), 1),  # 1024 tiles fill the SMs
    (1000, 1000, 8192, gemm_tiles.Config(), 2),  # 64 tiles, under 0.9 x 132: 2 splits make 128 CTAs
])
def test_split_k_only_where_the_tiles_leave_sms_idle(m, n, depth, config, splits):
    assert gemm_tiles.pick_splits(m, n, depth, 132, config) == splits


@pytest.mark.parametrize("m, n, element, b_major, tile", [
    (8192, 8192, "f16", "kn", gemm_tiles.TILES[0]),  # 128 x 256, 64-wide k-tiles in 4 stages
    (8192, 8192, "f16", "nk", gemm_tiles.TILES[0]),
    (8192, 8192, "bf16", "nk", gemm_tiles.PERSISTENT),  # persistent 128 x 256, 64-wide k-tiles in 4 stages
    (2048, 2048, "bf16", "nk", gemm_tiles.PERSISTENT),  # 128 tiles cover 0.9 of the SMs
    (100, 65536, "bf16", "nk", gemm_tiles.TILES[1]),  # M < 128: not persistent; 128 x 256, 128-wide k-tiles in 2 stages
    (8192, 8192, "bf16", "kn", {}),  # 128 x 128
    (2048, 1536, "f16", "kn", {}),  # 16 x 6 = 96 CTAs of 128 x 256 cover under 0.9 of 132 SMs
    (2048, 2048, "f16", "nk", gemm_tiles.TILES[0]),  # 16 x 8 = 128 cover them
    (1000, 3000, "bf16", "nk", {}),
])
def test_the_tile_follows_the_element_the_b_layout_and_the_sms_it_fills(m, n, element, b_major, tile):
    assert gemm_tiles.pick_tile(m, n, 4096, 132, element=element, align=16, b_major=b_major) == tile


def test_the_persistent_tile_only_where_it_is_built():
    """Rows on 8 bytes have no persistent variant, nor K under its 3 k-tiles ahead: the next tile."""
    assert gemm_tiles.pick_tile(8192, 8192, 8192, 132, element="bf16", align=8, b_major="nk") == gemm_tiles.TILES[1]
    assert gemm_tiles.pick_tile(8192, 8192, 184, 132, element="bf16", align=16, b_major="nk") == gemm_tiles.TILES[1]
    assert gemm_tiles.pick_tile(8192, 8192, 192, 132, element="bf16", align=16, b_major="nk") == gemm_tiles.PERSISTENT
    persistent = gemm_tiles.variant(gemm_tiles.PERSISTENT, 16, b_major="nk")
    assert [persistent.takes(*sizes) for sizes in ((128, 256, 192), (127, 256, 192), (128, 255, 192), (128, 256, 184))] \
        == [True, False, False, False]
    with pytest.raises(ValueError, match="persistent"):
        gemm_sm80.build_module("bf16", gemm_tiles.Config(**gemm_tiles.PERSISTENT, b_major="kn"))
    with pytest.raises(ValueError, match="give sms"):
        gemm_tiles.variant(gemm_tiles.PERSISTENT, 16, b_major="nk").grid(4096, 4096)
    assert gemm_tiles.variant(gemm_tiles.PERSISTENT, 16, b_major="nk").grid(4096, 4096, sms=132) == 132
    assert gemm_tiles.variant(gemm_tiles.PERSISTENT, 16, b_major="nk").grid(256, 512, sms=132) == 4


def test_the_persistent_kernel_traps_on_sizes_it_does_not_take():
    """M < 128 or N < 256 would move an edge tile before the matrix, K < 192 leave a tile's first k-tiles
    outside K: the kernel traps first (Matmul and the command line refuse such sizes), and CTAs past the
    tiles skip the loop."""
    ptx = compile_to_ptx(gemm_sm80.build_module("bf16", gemm_tiles.variant(gemm_tiles.PERSISTENT, 16, b_major="nk")))
    m = re.search(r"ld\.param\.b64\s+(%rd\d+), \[gemm_param_3\];", ptx).group(1)
    n_units, k_units = (re.search(rf"ld\.param\.b64\s+(%rd\d+), \[gemm_param_{i}\];", ptx).group(1) for i in (4, 5))
    n, depth = (re.search(rf"shl\.b64\s+(%rd\d+), {units}, 3;", ptx).group(1) for units in (n_units, k_units))
    takes = re.search(rf"setp\.gt\.u64\s+(%p\d+), {m}, 127;\s+setp\.gt\.u64\s+(%p\d+), {n}, 255;\s+"
                      rf"and\.pred\s+(%p\d+), \1, \2;\s+setp\.gt\.u64\s+(%p\d+), {depth}, 191;\s+"
                      rf"and\.pred\s+(%p\d+), \3, \4;\s+@\5 bra\s+\S+;\s+bra\.uni\s+(\$L__BB0_\d+);", ptx)
    assert takes and re.search(rf"{re.escape(takes.group(6))}:\s+trap;", ptx), "M >= 128, N >= 256, K >= 192, else trap"
    assert ptx.count("trap;") == 1
