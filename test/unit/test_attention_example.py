"""examples/attention.py without a GPU: a CTA on the reference model (every fragment against the ISA's tables, O
against numpy), every kernel `Attention` runs assembles with ptxas without spills, and unsupported ones are
ValueErrors."""
import re
import shutil
import subprocess
from dataclasses import replace

import pytest

import attention
from mlir_tile.compile import compile_to_ptx


# the kernels `Attention` runs: each configuration with TUNED's CTA where it has one
PICKED = [replace(config, **attention.TUNED.get((config.head_dim, config.causal), {})) for config in attention.CONFIGS]


@pytest.mark.parametrize("config, seq, causal", [(attention.Config(), 96, True),
                                                 (attention.Config(head_dim=128), 70, False),
                                                 (PICKED[attention.CONFIGS.index(attention.Config(head_dim=128))], 70,
                                                  False)], ids=str)
def test_a_cta_computes_attention_on_the_reference_model(config, seq, causal):
    """Q, K and V fragments against the ISA's tables, P from S's accumulators, O through stmatrix vs numpy."""
    assert "matches numpy" in attention.emulate(config, seq, causal)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
@pytest.mark.parametrize("config", PICKED, ids=str)
def test_every_configuration_assembles_without_spills(tmp_path, config):
    ptx = tmp_path / "attention.ptx"
    ptx.write_text(compile_to_ptx(attention.build_module(config)))
    assembled = subprocess.run(["ptxas", "-arch=sm_90", "-v", str(ptx), "-o", str(tmp_path / "a.cubin")],
                               capture_output=True, text=True)
    assert assembled.returncode == 0, assembled.stderr
    assert re.search(r"\b0 bytes spill stores", assembled.stderr), assembled.stderr


@pytest.mark.parametrize("config", [attention.Config(head_dim=96), attention.Config(element="f32")], ids=str)
def test_unsupported_configurations_are_value_errors(config):
    with pytest.raises(ValueError, match="head dims 64 and 128, f16 and bf16"):
        attention.build_module(config)
