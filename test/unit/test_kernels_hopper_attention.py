"""mlir_tile.kernels.hopper_attention: attention on Hopper's path, the build half (the GPU half is
test_runtime_gpu.py's test_attention_on_hoppers_path_matches_numpy): its tiles and boxes, the PTX's structure
(TMA loads by the producer, S by wgmma from shared memory, P V in the RS form, setmaxnreg), ptxas without
spills for every head dim, mask and element, and what it refuses."""
import re
import shutil
import subprocess

import pytest

from mlir_tile.kernels import hopper_attention
from mlir_tile.kernels.hopper_attention import HopperAttentionConfig

CONFIGS = [HopperAttentionConfig(d, causal, element) for d in (64, 128) for causal in (False, True)
           for element in ("f16", "bf16")]


def test_the_tiles_are_boxes_of_64_columns_and_v_is_read_mn_major():
    """Q (rows x d) and K (keys x d): boxes of 64 columns side by side, 128-byte swizzled (one box a tensor
    map); V as P V's B: (d, keys) of K's layout, d contiguous in each box."""
    config = HopperAttentionConfig(128)
    layouts, box = hopper_attention.tiles(config), hopper_attention.boxes(config)
    assert (box["q"].rows, box["q"].columns, box["k"].rows, box["k"].columns) == (128, 64, 128, 64)
    assert box["k"] == box["v"] and box["q"].swizzle_bytes == 128
    k_layout, v_layout = layouts["k"], layouts["v"]
    assert all(v_layout.offset(column, key) == k_layout.offset(key, column) for key in range(128) for column in range(128))
    assert k_layout.offset(0, 64) == 128 * 64  # the second box after the first


def test_each_accumulator_slot_is_one_of_a_threads_two_rows():
    from mlir_tile.atoms import wgmma

    assert hopper_attention._row_halves(wgmma(128, "f16")) == [slot % 4 // 2 for slot in range(64)]


def _ptx(config: HopperAttentionConfig) -> str:
    from mlir_tile.compile import compile_to_ptx

    return compile_to_ptx(hopper_attention.build_module(config))


def test_the_ptx_is_tma_then_wgmma_from_shared_then_p_v_from_registers(filecheck):
    """d 128, 128 keys a tile, two consumers: the producer lowers its registers and loads by TMA on mbarriers;
    a consumer raises its registers, waits for Q, issues key tile 0's S = Q K^T (8 k16 steps, descriptors
    for both operands) and its exp2s, then in each of two loops (without and with the mask) a tile's S beside
    the previous tile's P V (8 k16 steps with A in registers), and the last P V after them."""
    config = HopperAttentionConfig(128)
    ptx = _ptx(config)
    filecheck(ptx, """
    CHECK: .entry attention(
    CHECK: setmaxnreg.inc.sync.aligned.u32 {{\\s*}}232;
    CHECK: mbarrier.try_wait.parity
    CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}
    CHECK: ex2.approx
    CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{.*}}}, {{{.*}}}, %rd{{[0-9]+}}
    """)
    assert config.consumer_registers == 232 and re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", ptx)
    issued = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16 \{[^}]*\}, (\{|%rd)", ptx)
    assert issued.count("%rd") == 3 * 128 // 16 and issued.count("{") == 3 * 128 // 16
    assert ptx.count("cp.async.bulk.tensor.2d") == 3 * 128 // 64  # Q's boxes, then K's and V's
    assert config.shared_bytes == 128 * 128 * 2 + 3 * 2 * 128 * 128 * 2  # Q, then 3 stages of K and V


@pytest.mark.parametrize("config", CONFIGS + [HopperAttentionConfig(128, True, "bf16", keys=64, stages=4),
                                              HopperAttentionConfig(64, False, "f16", stages=2)], ids=str)
def test_every_configuration_assembles_without_spills(tmp_path, config):
    """The shipped kernels, and S narrower than O (64 keys a tile at d 128) and two stages."""
    if not shutil.which("ptxas"):
        pytest.skip("ptxas is not installed")
    (tmp_path / "a.ptx").write_text(_ptx(config))
    assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "a.ptx"), "-o", str(tmp_path / "a.cubin")],
                               capture_output=True, text=True)
    assert assembled.returncode == 0, assembled.stderr
    assert "C75" not in assembled.stderr and " 0 bytes spill stores" in assembled.stderr, assembled.stderr


@pytest.mark.parametrize("options, message", [
    (dict(head_dim=96), "head dims 64 and 128"), (dict(element="f32"), "f16 and bf16"),
    (dict(keys=100), "keys a multiple of 64"), (dict(consumers=4), "1 to 3 consumers"),
    (dict(stages=4), "more than the 232448 a block may use")])
def test_what_the_kernel_does_not_take_is_a_value_error(options, message):
    with pytest.raises(ValueError, match=message):
        HopperAttentionConfig(**options)


def test_the_command_line_builds_hoppers_attention_and_refuses_what_it_does_not_take(tmp_path):
    from test_kernels_command_line import example

    ran = example("attention.py", "--ptx-out", tmp_path / "a.ptx", "--arch", "sm_90a", "--head-dim", "128")
    assert ran.returncode == 0, ran.stderr
    first = (tmp_path / "a.ptx").read_text().split("\n", 1)[0]
    assert '"arch": "sm_90a"' in first and '"head_dim": 128' in first
    for options, message in ((["--tuned", "--ptx-out", tmp_path / "b.ptx"], "--tuned picks the sm_80 kernel"), (["--emulate"], "Hopper's runs on the GPU")):
        ran = example("attention.py", "--arch", "sm_90a", *options)
        assert ran.returncode == 2 and message in ran.stderr and "Traceback" not in ran.stderr, ran.stderr


def test_the_sm90_library_ships_each_hopper_attention_kernel():
    """Every (d, mask, element) `HopperAttention` picks is among the kernels the wheel ships for sm_90, none for
    sm_80."""
    from mlir_tile.kernels import ship

    names = {name for name, _ in ship.kernels("sm_90")}
    assert {str(config) for config in CONFIGS} <= names
    assert not any(name.startswith("attention_") and name.endswith("_sm90a") for name, _ in ship.kernels("sm_80"))
