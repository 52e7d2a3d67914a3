"""examples/attention.py without a GPU: its transfers cover their tiles and S's accumulators are P's A fragment
(the reference model), every configuration assembles with ptxas, and unsupported ones are ValueErrors."""
import re
import shutil
import subprocess

import pytest

import attention
from mlir_tile.compile import compile_to_ptx


def test_the_transfers_cover_their_tiles_and_p_is_the_a_fragment():
    assert "cover their tiles" in attention.emulate()


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
@pytest.mark.parametrize("config", attention.CONFIGS, ids=str)
def test_every_configuration_assembles(tmp_path, config):
    ptx = tmp_path / "attention.ptx"
    ptx.write_text(compile_to_ptx(attention.build_module(config)))
    assembled = subprocess.run(["ptxas", "-arch=sm_90", "-v", str(ptx), "-o", str(tmp_path / "a.cubin")],
                               capture_output=True, text=True)
    assert assembled.returncode == 0, assembled.stderr
    assert int(re.search(r"(\d+) bytes spill stores", assembled.stderr).group(1)) <= 32, assembled.stderr


@pytest.mark.parametrize("config", [attention.Config(head_dim=96), attention.Config(element="f32")], ids=str)
def test_unsupported_configurations_are_value_errors(config):
    with pytest.raises(ValueError, match="head dims 64 and 128, f16 and bf16"):
        attention.build_module(config)
