"""examples/gemm.py without a GPU: every transfer of a one-CTA GEMM on the reference model against the PTX ISA's
fragment tables and C against numpy, for each B layout and tile; ptxas assembles every variant, sm_80 (no
stmatrix) included, the 16-byte one without spills."""
import re
import shutil
import subprocess

import pytest

import gemm
from mlir_tile.compile import compile_to_ptx


@pytest.mark.parametrize("config", [gemm.Config(), gemm.Config(b_major="nk"), gemm.Config(bk=64, stages=3),
                                    gemm.Config(bn=256, warps=(2, 4))], ids=str)
def test_a_cta_of_the_gemm_computes_the_product_on_the_reference_model(config):
    assert "matches numpy" in gemm.emulate(config, k_tiles=2 if config.bk == 32 else 1)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
@pytest.mark.parametrize("chip", ["sm_90", "sm_80"])
@pytest.mark.parametrize("config", gemm.VARIANTS, ids=str)
def test_every_variant_assembles_without_spills(tmp_path, chip, config):
    ptx = tmp_path / "gemm.ptx"
    ptx.write_text(compile_to_ptx(gemm.build_module("bf16", config, chip=chip)))
    assembled = subprocess.run(["ptxas", f"-arch={chip}", "-v", str(ptx), "-o", str(tmp_path / "gemm.cubin")],
                               capture_output=True, text=True)
    assert assembled.returncode == 0, assembled.stderr
    spilled = int(re.search(r"(\d+) bytes spill stores", assembled.stderr).group(1))
    assert spilled == 0 if config.align == 16 else spilled <= 64, assembled.stderr  # narrower copies: a few words
    assert ("stmatrix" in ptx.read_text()) == (chip == "sm_90")
