"""The Hopper GEMM's fused steps (`gemm/sm90_fused.py`) and grouped forms (masked, contiguous) without a GPU: fp8's promoted
accumulation and its blockwise scales, fused SwiGLU (its pairs proven, its weights' interleave), the masked
and contiguous grouped GEMMs, each in the PTX, by ptxas (no spills) and, where it applies, on the reference model's CTA; what
each configuration refuses. Their GPU half: test_runtime_gpu.py and test_kernels_ops_hopper_gpu.py."""
import re

import pytest

from mlir_tile.kernels import epilogues
from mlir_tile.kernels.gemm import sm90 as gemm_sm90, sm90_emulation as hopper_emulation, sm90_fused
from mlir_tile.kernels.gemm.sm90_tiles import hopper_config
from test_kernels_hopper_gemm import _assembles


@pytest.mark.parametrize("bn", [128, 192])
def test_fp8_promoted_accumulation_adds_each_k_tiles_partials_into_fp32(tmp_path, bn):
    """`promote` (fp8's precise accumulation): each k-tile's batch summed by wgmma into partials of its own (the
    fast kernel's 4 m64nNk32 a k-tile), waited for (the stage then released), BN / 2 fp32 adds a k-tile into the
    accumulators, which no wgmma writes; assembled without spills at BN 128 and 192 (accumulators and partials
    192 registers a thread at most: BN 256 is refused); one CTA on the reference model (the data path) is the
    scaled exact product."""
    from dataclasses import replace

    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config("nk", {"bm": 128, "bn": bn, "bk": 128, "stages": 4, "promote": True}, "e4m3")
    ptx, fast = (compile_to_ptx(gemm_sm90.build_module("e4m3", x)) for x in (config, replace(config, promote=False)))
    adds = [len(re.findall(r"\badd(?:\.\w+)*\.f32\b", x)) for x in (ptx, fast)]
    assert str(config).endswith("_fp8_promote_sm90a") and adds[0] == adds[1] + bn // 2
    atom = f"wgmma.mma_async.sync.aligned.m64n{bn}k32.f32.e4m3.e4m3"
    assert ptx.count(atom) == fast.count(atom) == 4
    waits = [[len(re.findall(rf"wgmma\.wait_group\.sync\.aligned\s+{n};", x)) for n in (0, 1)] for x in (ptx, fast)]
    assert waits == [[2, 0], [1, 1]]  # (a k-tile's batch waited for whole, not the k-tile before's; the epilogue's)
    assert "give C as numpy does" in hopper_emulation.emulate(config, 2, "e4m3")
    _assembles(ptx, tmp_path)


@pytest.mark.parametrize("major, tile, element", [("nk", {"bm": 128, "bn": 256, "bk": 64, "stages": 3}, "bf16"),
                                                   ("kn", {"bm": 256, "bn": 128, "bk": 64, "stages": 4, "consumer_rows": 128}, "f16")])
def test_fused_swiglu_pairs_each_gate_with_its_up_in_a_thread_and_stores_half_the_columns(tmp_path, major, tile,
                                                                                        element):
    """Fused SwiGLU (`swiglu`): B's rows gate and up weights interleaved a block of 8 at a time, so that each
    output column's two factors lie in one thread's accumulators (`swiglu_pairs`, proven by the atoms' layouts:
    slots 8 i + q and 8 i + 4 + q); C's tile BN / 2 wide (its stmatrix and TMA stores half the plain kernel's),
    one silu a column (an exp2 each); assembled without spills; one CTA on the reference model is silu(gate) * up
    of numpy's product."""
    from dataclasses import replace

    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config(major, {**tile, "swiglu": True}, element)
    assert sm90_fused.swiglu_pairs(config.bn, element)[:5] == ((0, 4), (1, 5), (2, 6), (3, 7), (8, 12))
    assert config.c_columns == config.bn // 2 and gemm_sm90.boxes(config)["c"] == gemm_sm90.boxes(replace(config, swiglu=False))["c"]
    ptx, plain = (compile_to_ptx(gemm_sm90.build_module(element, x)) for x in (config, replace(config, swiglu=False)))
    stores = "cp.async.bulk.tensor.2d.global.shared"
    assert 2 * ptx.count("stmatrix") == plain.count("stmatrix") and 2 * ptx.count(stores) == plain.count(stores)
    assert ptx.count("ex2.approx") == config.consumer_rows // 64 * config.bn // 4
    assert "give C as numpy does" in hopper_emulation.emulate(config, 2, element)
    _assembles(ptx, tmp_path)


def test_swiglu_weights_interleave_gate_and_up_as_the_kernel_pairs_them():
    """`moe_ops.swiglu_weights` lays W_gate's and W_up's rows a block of 8 each in turn, so that the product's column
    16 i + x is gate feature 8 i + x and 16 i + 8 + x its up (`reference.swiglu`'s, the kernel's pairs): x @ w^T
    through `reference.swiglu` is silu(x W_gate^T) * (x W_up^T), in float64; F not a multiple of 8 is refused."""
    torch = pytest.importorskip("torch", reason="swiglu_weights is a torch function")
    from mlir_tile.kernels.gemm.reference import swiglu
    from mlir_tile.kernels.moe_ops import swiglu_weights

    x, gate, up = (torch.randn(*shape, dtype=torch.float64) for shape in ((5, 24), (40, 24), (40, 24)))
    product = (x @ swiglu_weights(gate, up).T).numpy()
    expected = torch.nn.functional.silu(x @ gate.T) * (x @ up.T)
    assert swiglu(product).shape == (5, 40) and abs(swiglu(product) - expected.numpy()).max() < 1e-12
    with pytest.raises(ValueError, match="F a multiple of 8"):
        swiglu_weights(gate[:12], up[:12])


def test_swiglu_mms_gradients_are_torchs_autograd_of_silu_gate_times_up():
    """`moe_ops.swiglu_gradients` (swiglu_mm's backward, its GEMMs given: here torch's in float64) on the
    interleaved weights: dx, and dW_gate and dW_up taken apart from the interleaved gradient, equal torch's
    autograd of silu(x W_gate^T) * (x W_up^T) in float64 (to fp32's rounding of dg and du)."""
    torch = pytest.importorskip("torch", reason="swiglu_mm's gradients are torch functions")
    import torch.nn.functional as F

    from mlir_tile.kernels import moe_ops

    generator = torch.Generator().manual_seed(6)
    x, gate, up = (torch.randn(rows, 40, generator=generator, dtype=torch.float64) for rows in (7, 24, 24))
    grad = torch.randn(7, 24, generator=generator, dtype=torch.float64)
    dx, dw = moe_ops.swiglu_gradients(
        x, moe_ops.swiglu_weights(gate, up), grad,
        lambda a, b, layout: a @ (b.T if layout == "nk" else b), lambda a, b: a.T @ b)
    inputs = [t.clone().requires_grad_() for t in (x, gate, up)]
    (F.silu(inputs[0] @ inputs[1].T) * (inputs[0] @ inputs[2].T)).backward(grad)
    assert torch.allclose(dx, inputs[0].grad, rtol=1e-5, atol=1e-5)
    assert torch.allclose(dw, moe_ops.swiglu_weights(inputs[1].grad, inputs[2].grad), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("element, tile", [("bf16", {"bm": 128, "bn": 128, "bk": 64, "stages": 4}),
                                           ("e4m3", {"bm": 128, "bn": 128, "bk": 128, "stages": 4, "promote": True,
                                                     "block_scales": True})])
def test_a_grouped_kernel_reads_its_groups_count_and_b_rows(tmp_path, element, tile):
    """The masked grouped GEMM (`grouped`): two parameters more (the counts' address, T), the tile's group and
    row within it one division (its count read once, before the roles split: a tile past it walks no k-tile in
    either role), B's box at its group's rows (group x N + the tile's column), blockwise fp8 scale_b at its
    group's blocks; assembled without spills."""
    from dataclasses import replace

    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config("nk", {**tile, "grouped": True}, element)
    ptx, dense = (compile_to_ptx(gemm_sm90.build_module(element, x)) for x in (config, replace(config, grouped=False)))
    assert str(config).endswith("_grouped_sm90a") and ptx.count(".param .u64") == dense.count(".param .u64") + 2
    assert ptx.count("div.u64") == dense.count("div.u64") + 1
    assert ptx.count("ld.global") == dense.count("ld.global") + 1  # (the tile's group's count)
    _assembles(ptx, tmp_path)


@pytest.mark.parametrize("element, tile", [("bf16", {"bm": 128, "bn": 128, "bk": 64, "stages": 4}),
                                           ("e4m3", {"bm": 128, "bn": 128, "bk": 128, "stages": 4, "promote": True,
                                                     "block_scales": True})])
def test_a_contiguous_grouped_kernel_locates_its_experts_rows_and_clips_cs_stores(tmp_path, element, tile):
    """The contiguous grouped GEMM (`contiguous`, torch._grouped_mm's layout): the masked kernel's parameters (the
    offsets' address, E), its C tile's expert and rows found before the roles split by a scan of the offsets (two
    loads a thread a pass, a warp's sum by 5 shuffles up, the warps' sums through shared memory between block
    barriers), C stored through a 3-D map (one `.3d` store a 64-column box, none 2-D) that clips the rows past the
    expert's; assembled without spills."""
    from dataclasses import replace

    from mlir_tile.compiler.compile import compile_to_ptx

    masked = hopper_config("nk", {**tile, "grouped": True}, element)
    ptx, dense = (compile_to_ptx(gemm_sm90.build_module(element, x)) for x in (replace(masked, contiguous=True),
                                                                              replace(masked, grouped=False)))
    assert str(replace(masked, contiguous=True)).endswith("_grouped_contiguous_sm90a")
    assert ptx.count(".param .u64") == dense.count(".param .u64") + 2
    assert ptx.count("shfl.sync.up") == 5 and ptx.count("bar.sync") == dense.count("bar.sync") + 3
    assert ptx.count("ld.global") == dense.count("ld.global") + 2  # (an expert's start and end)
    stores = re.findall(r"cp\.async\.bulk\.tensor\.(\d)d\.global\.shared::cta", ptx)
    assert stores == ["3"] * (tile["bn"] // 64)
    _assembles(ptx, tmp_path)


@pytest.mark.parametrize("which", [0, 1])
def test_the_contiguous_grouped_gemms_gradients_read_their_operands_through_3d_maps(tmp_path, which):
    """The contiguous form's gradients' kernels (`grouped_gradient_configs`): dx's reads w as B [K, N] through a
    3-D map (its expert's matrix: every B load `.3d`) and stores as the forward does; dw's (`ragged_k`, A and B
    read [K, M] and [K, N]) reads both through 3-D maps of BK rows (every load `.3d`: the k-tile past the
    expert's rows zeros), its k-tiles the expert's (no scan of the offsets: two loads), C a 3-D store into [E, M,
    N]; both assembled without spills."""
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.gemm.sm90_tiles import grouped_gradient_configs

    config = grouped_gradient_configs("bf16")[which]
    ptx = compile_to_ptx(gemm_sm90.build_module("bf16", config))
    loads = re.findall(r"cp\.async\.bulk\.tensor\.(\d)d\.shared::cluster\.global", ptx)
    stores = re.findall(r"cp\.async\.bulk\.tensor\.(\d)d\.global\.shared::cta", ptx)
    assert str(config).endswith(("_kn_ws_grouped_contiguous_sm90a", "_kn_akm_ws_grouped_raggedk_sm90a")[which])
    assert stores == ["3"] * (config.bn // 64)
    boxes = config.bn // 64 + (config.bm // 64 if which else 0)  # (B's 64-column boxes; dw's A too, in 64 of BM)
    assert loads == (["2"] if which == 0 else []) + ["3"] * boxes
    assert ptx.count("shfl.sync.up") == (5, 0)[which]
    _assembles(ptx, tmp_path)


def test_fp8_blockwise_scales_multiply_each_k_tiles_partials_as_they_are_added(tmp_path):
    """`block_scales` (DeepGEMM's 1 x 128 of A, 128 x 128 of B, on `promote`): a k-tile's scales read a step ahead
    (a thread's two rows' scale_a and the C tile's block of scale_b: 3 loads before the k-loop, k-tile 0's, and 3
    in it, the next k-tile's), each partial added in
    by an fma with its row's factor (BN / 2 a k-tile, no adds), C rounded without the per-tensor scales'
    multiply; assembled without spills; one CTA of 3 k-tiles on the reference model (a different power of two a
    k-block, row and column block) is the blockwise-scaled exact product."""
    from dataclasses import replace

    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config("nk", {"bm": 128, "bn": 128, "bk": 128, "stages": 4, "promote": True, "block_scales": True},
                           "e4m3")
    ptx, promoted = (compile_to_ptx(gemm_sm90.build_module("e4m3", x)) for x in (config, replace(config, block_scales=False)))
    assert str(config).endswith("_promote_blockscales_sm90a")
    assert ptx.count("fma.rn.f32") == promoted.count("fma.rn.f32") + config.bn // 2
    assert ptx.count("ld.global") == 6 and promoted.count("ld.global") == 2  # (per tensor: the two scales, once)
    assert ptx.count("mul.rn.f32") < promoted.count("mul.rn.f32")  # (no per-tensor multiply of C)
    assert "give C as numpy does" in hopper_emulation.emulate(config, 3, "e4m3")
    _assembles(ptx, tmp_path)


def test_fp8_scales_by_bs_rows_blocks_multiply_each_partial_by_its_rows_and_its_columns_scale(tmp_path):
    """`row_blocks` (a weight gradient's 1 x 128 blocks of both operands, DeepGEMM's 1d1d): scale_a's two rows a
    step ahead as `block_scales`' (4 loads, two before the k-loop), scale_b's 32 columns of a thread each k-tile
    under its wgmmas at constant offsets from its first column (16 pairs, one 8-byte load each: [K / 128, N
    padded] laid out MN-major by the host), each partial added in by an fma with its row's scale times its
    column's (BN / 2 multiplies more than `block_scales`' per-row factors); assembled without spills; one CTA of
    3 k-tiles on the reference model (a different power of two a k-block, row and column) is the exact
    product."""
    from dataclasses import replace

    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.gemm.sm90_fused import column_slots

    blocks = hopper_config("nk", {"bm": 128, "bn": 128, "bk": 128, "stages": 4, "promote": True, "block_scales": True},
                           "e4m3")
    config = replace(blocks, row_blocks=True)
    ptx, blockwise = (compile_to_ptx(gemm_sm90.build_module("e4m3", x)) for x in (config, blocks))
    assert str(config).endswith("_promote_blockscales_rowblocks_sm90a")
    distinct, of_slot, _ = column_slots(config.bn)
    assert len(distinct) == config.bn // 4 and of_slot[:8] == (0, 1, 0, 1, 2, 3, 2, 3)
    assert ptx.count("ld.global.v2.b32") == len(distinct) // 2 and ptx.count("ld.global.b32") == 4
    assert ptx.count("fma.rn.f32") == blockwise.count("fma.rn.f32")
    assert ptx.count("mul.rn.f32") >= blockwise.count("mul.rn.f32") + config.bn // 2 - 2
    assert "give C as numpy does" in hopper_emulation.emulate(config, 3, "e4m3")
    _assembles(ptx, tmp_path)


def test_paired_partials_add_each_k_tile_in_under_the_next_ones_wgmmas(tmp_path):
    """`paired` (two partial sets): k-tile 0 issued into the first; the k-loop by pairs, each k-tile's batch issued
    before the one before is waited for with a `wgmma.wait_group 1` (its own group left in flight: three such
    waits, the pair's two and the even tail's) and added in; the last k-tile's set added after a wait for all;
    four issue sites of BK / 32 m64n128k32 batches; assembled without spills (accumulators and two sets: 192
    registers); one CTA of 3 k-tiles on the reference model is the scaled exact product."""
    from dataclasses import replace

    from mlir_tile.compiler.compile import compile_to_ptx

    promoted = hopper_config("nk", {"bm": 128, "bn": 128, "bk": 128, "stages": 4, "promote": True}, "e4m3")
    config = replace(promoted, paired=True)
    ptx = compile_to_ptx(gemm_sm90.build_module("e4m3", config))
    assert str(config).endswith("_promote_paired_sm90a")
    assert ptx.count("wgmma.wait_group.sync.aligned 1;") == 3
    assert ptx.count("wgmma.mma_async") == 4 * config.bk // 32
    assert "give C as numpy does" in hopper_emulation.emulate(config, 3, "e4m3")
    _assembles(ptx, tmp_path)


@pytest.mark.parametrize("call, message", [
    (lambda: hopper_config("nk", {"bm": 128, "bn": 192, "bk": 128, "stages": 4, "promote": True, "paired": True}, "e4m3"), "two partial sets"),
    (lambda: hopper_config("nk", {"bm": 128, "bn": 128, "bk": 128, "stages": 4, "promote": True, "row_blocks": True}, "e4m3"), "blockwise scaling's"),
    (lambda: hopper_config("nk", {"bm": 128, "bn": 256, "bk": 128, "stages": 4, "promote": True}, "e4m3"), "at most 192 registers"),
    (lambda: hopper_config("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "promote": True}, "f16"), "promoted accumulation is fp8's"),
    (lambda: hopper_config("nk", {"bm": 128, "bn": 128, "bk": 128, "stages": 4, "block_scales": True}, "e4m3"), "blockwise scales are applied"),
    (lambda: hopper_config("nk", {"bm": 128, "bn": 192, "bk": 128, "stages": 4, "promote": True, "block_scales": True}, "e4m3"), "BN and BK 128"),
    (lambda: hopper_config("nk", {"bm": 128, "bn": 128, "bk": 128, "stages": 4, "swiglu": True}, "e4m3"), "SwiGLU takes 16-bit"),
    (lambda: hopper_config("kn", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "grouped": True}, "bf16"), "grouped GEMM takes B"),
    (lambda: hopper_config("kn", {"bm": 128, "bn": 256, "bk": 128, "stages": 4, "grouped": True, "contiguous": True}, "e4m3"), "grouped GEMM takes B"),
    (lambda: hopper_config("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "grouped": True, "split_k": True}, "bf16"), "not split"),
    (lambda: hopper_config("nk", {"bm": 128, "bn": 192, "bk": 64, "stages": 4, "swiglu": True}, "bf16"), "BN a multiple of 128"),
    (lambda: hopper_config("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "contiguous": True}, "bf16"), "a grouped GEMM's"),
    (lambda: hopper_config("kn", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "grouped": True, "ragged_k": True}, "bf16"), "ragged reduction"),
    (lambda: gemm_sm90.build_module("bf16", hopper_config("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "swiglu": True}, "bf16"),
                                    epilogue=epilogues.relu), "SwiGLU is the kernel's epilogue"),
    (lambda: gemm_sm90.build_module("bf16", hopper_config("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4}, "bf16"),
                                    epilogue=epilogues.expert_bias), "a grouped GEMM's \\(its N a group\\)"),
])
def test_fused_configurations_outside_the_kernel_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
