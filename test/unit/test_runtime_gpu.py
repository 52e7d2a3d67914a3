"""The cuda-python runtime on a real GPU. Needs no MLIR: these run on GPU hosts without the compiler, on the
PTX that `make gpu-inputs` (test/gpu_inputs.py) built where the compiler is, carried along."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
GPU_INPUTS = Path(os.environ.get("MLIR_TILE_GPU_INPUTS", Path(__file__).resolve().parents[2] / "build" / "gpu-inputs"))


def gpu_input(name: str) -> Path:
    """A PTX file of test/gpu_inputs.py's folder; the test skips, saying how to build it, where it is missing."""
    path = GPU_INPUTS / name
    if not path.exists():
        pytest.skip(f"{path} was not built: run `make gpu-inputs` where the compiler is and carry build/gpu-inputs "
                    f"(or set MLIR_TILE_GPU_INPUTS)")
    return path


def epilogue_cache() -> str:
    """The cache folder (`MLIR_TILE_CACHE_DIR`) of the epilogue kernels test/gpu_inputs.py built, which the
    library reads only where they were built from these sources (`kernels/<source_digest>`); the test skips,
    saying so, where they were built from others."""
    from mlir_tile.kernels.library import source_digest

    kernels = gpu_input("kernels")
    if not (kernels / source_digest()).is_dir():
        pytest.skip(f"{kernels} holds epilogue kernels of other sources than these: run `make gpu-inputs` again and "
                    f"carry build/gpu-inputs")
    return str(kernels.parent)

# Hand-written PTX: out[i] = in[i] * 3 + k for i < n.
SCALE_PTX = r"""
.version 7.8
.target sm_75
.address_size 64
.visible .entry scale(.param .u64 in, .param .u64 out, .param .u32 k, .param .u32 n) {
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p;
  ld.param.u64 %rd1, [in]; ld.param.u64 %rd2, [out]; ld.param.u32 %r1, [k]; ld.param.u32 %r6, [n];
  mov.u32 %r2, %tid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %ntid.x; mad.lo.u32 %r2, %r3, %r4, %r2;
  setp.ge.u32 %p, %r2, %r6; @%p ret;
  mul.wide.u32 %rd3, %r2, 4; add.s64 %rd4, %rd1, %rd3; add.s64 %rd5, %rd2, %rd3;
  ld.global.u32 %r5, [%rd4]; mad.lo.u32 %r5, %r5, 3, %r1; st.global.u32 [%rd5], %r5;
  ret;
}
"""


@pytest.fixture(scope="module")
def runtime():
    from mlir_tile.runtime import Runtime

    with Runtime() as rt:
        yield rt


def test_launch_round_trips_numpy_arrays(runtime):
    module = runtime.load_ptx(SCALE_PTX, name="scale")
    data = np.random.default_rng(0).integers(0, 2**20, 1000, dtype=np.uint32)
    _, out = module.launch("scale", [data, np.zeros_like(data), np.uint32(7), np.uint32(data.size)],
                           grid=(data.size + 127) // 128, block=128)
    np.testing.assert_array_equal(out, data * 3 + 7)


def test_cubin_assembled_by_nvjitlink_runs(runtime):
    from mlir_tile.runtime.ptx import cubin_of_ptx

    major, minor = runtime.device.compute_capability
    module = runtime.load_cubin(cubin_of_ptx(SCALE_PTX, f"sm_{major}{minor}"), name="scale_cubin")
    data = np.arange(1000, dtype=np.uint32)
    _, out = module.launch("scale", [data, np.zeros_like(data), np.uint32(5), np.uint32(data.size)],
                           grid=8, block=128)
    np.testing.assert_array_equal(out, data * 3 + 5)


def test_bad_ptx_raises_with_the_driver_message_and_the_compiler_log(runtime):
    from mlir_tile.runtime import CudaError

    with pytest.raises(CudaError) as error:
        runtime.load_ptx(SCALE_PTX.replace("mad.lo.u32 %r5", "bogus.op %r5"), name="broken").kernel("scale")
    message = str(error.value)
    assert "broken" in message and "PTX compiler log" in message and "bogus" in message, message


def test_unknown_kernel_name_is_an_error(runtime):
    from mlir_tile.runtime import CudaError

    with pytest.raises(CudaError, match="no_such_kernel"):
        runtime.load_ptx(SCALE_PTX).kernel("no_such_kernel")


def test_thousands_of_launches_do_not_leak_device_memory(runtime):
    from cuda.bindings import driver

    module = runtime.load_ptx(SCALE_PTX, name="scale")
    data = np.arange(4096, dtype=np.uint32)
    arguments = [data, np.zeros_like(data), np.uint32(1), np.uint32(data.size)]
    module.launch("scale", arguments, grid=32, block=128)
    _, free_before, _ = driver.cuMemGetInfo()
    for _ in range(3000):
        module.launch("scale", arguments, grid=32, block=128)
    _, free_after, _ = driver.cuMemGetInfo()
    assert free_before - free_after < 4 << 20, f"device memory fell by {free_before - free_after} bytes"


def test_spec_example_ptx_on_the_gpu(runtime):
    """The run half: the spec example's PTX, as mlir-tile compiles it (test_compile.py checks its structure where
    it is compiled), gives the spec's table; no MLIR needed."""
    import seed_example

    out = seed_example.run_on_gpu(gpu_input("spec_example.ptx").read_text())
    np.testing.assert_array_equal(out, seed_example.expected_table(seed_example.inputs()))


def test_a_transfer_from_dynamic_shared_memory_beyond_48_kib(runtime):
    """The run half: the PTX (test_compile.py checks it where it is compiled) reads words past byte 49152 of
    dynamic shared memory; the launch opts the kernel in to the larger size."""
    import dynamic_shared

    out = dynamic_shared.run_on_gpu(gpu_input("dynamic_shared.ptx").read_text())
    np.testing.assert_array_equal(out, dynamic_shared.expected(dynamic_shared.inputs()))
    assert dynamic_shared.SHARED_BYTES > 48 * 1024


# Hand-written PTX: 1 KiB of static shared memory beside the last word of 48 KiB of dynamic shared memory.
STATIC_AND_DYNAMIC_PTX = r"""
.version 7.8
.target sm_75
.address_size 64
.extern .shared .align 16 .b8 dynamic[];
.shared .align 16 .b8 fixed[1024];
.visible .entry both(.param .u64 out, .param .u32 k) {
  .reg .b32 %r<6>; .reg .b64 %rd<2>;
  ld.param.u32 %r1, [k]; add.u32 %r2, %r1, 1;
  st.shared.u32 [dynamic+49148], %r1; st.shared.u32 [fixed+1020], %r2;
  bar.sync 0;
  ld.shared.u32 %r3, [dynamic+49148]; ld.shared.u32 %r4, [fixed+1020]; add.u32 %r5, %r3, %r4;
  ld.param.u64 %rd1, [out]; st.global.u32 [%rd1], %r5;
  ret;
}
"""


def test_dynamic_shared_memory_within_48_kib_beside_static_memory_opts_in(runtime):
    """48 KiB dynamic + 1 KiB static passes CUDA's 48 KiB without the opt-in, though the dynamic part alone
    does not (the mbarriers of a kernel are static shared memory beside its dynamic tiles)."""
    module = runtime.load_ptx(STATIC_AND_DYNAMIC_PTX, name="static_and_dynamic")
    (out,) = module.launch("both", [np.zeros(1, np.uint32), np.uint32(20)], grid=1, block=1, shared_bytes=48 * 1024)[:1]
    assert out[0] == 41


def test_more_dynamic_shared_memory_than_the_device_has_is_a_clear_error(runtime):
    from mlir_tile.runtime import CudaError

    import dynamic_shared

    module = runtime.load_ptx(gpu_input("dynamic_shared.ptx").read_text(), name="too_much")
    with pytest.raises(CudaError, match=r"300000 bytes of dynamic shared memory \(\+0 static\) is more than the \d+ a block can have"):
        module.launch(dynamic_shared.KERNEL, [dynamic_shared.inputs(), np.zeros((32, 4), np.uint32)], grid=1,
                      block=32, shared_bytes=300000)


def test_the_mma_tile_matches_numpy():
    """The run half: C = A x B (64x64x64, fp16 in, fp32 accumulate, fp16 out) with every fragment moved by
    tile.matrix_transfer from swizzled shared tiles."""
    import mma_tile

    ok, worst = mma_tile.check(mma_tile.run_on_gpu(gpu_input("mma_tile.ptx").read_text()))
    assert ok, f"largest error {worst}"


def test_the_s8_mma_tile_equals_numpy():
    """The run half: C = A x B^T (64x64x64, s8 in, s32 out) with every fragment moved by tile.matrix_transfer
    from the synthesized shared tiles: equal to numpy's int32 product, every element."""
    import mma_s8

    a, b = mma_s8.inputs()
    assert np.array_equal(mma_s8.run_on_gpu(gpu_input("mma_s8.ptx").read_text()), mma_s8.reference(a, b))


def test_launch_on_device_arrays_copies_nothing_and_uses_the_producers_stream(runtime):
    """torch tensors and CuPy arrays go in as pointers (DLPack / CUDA Array Interface), a Python int as a raw
    pointer; the kernel writes the producer's memory, on the producer's stream."""
    module = runtime.load_ptx(SCALE_PTX, name="scale")
    data = np.random.default_rng(1).integers(0, 2**20, 1000, dtype=np.uint32)
    expected = data * 3 + 7
    torch = pytest.importorskip("torch")
    from mlir_tile.runtime import torch_stream

    source = torch.from_numpy(data.view(np.int32)).cuda()
    out = torch.zeros_like(source)
    assert module.launch("scale", [source, out, np.uint32(7), np.uint32(data.size)], grid=8, block=128,
                         stream=torch.cuda.current_stream()) == []
    np.testing.assert_array_equal(out.cpu().numpy().view(np.uint32), expected)
    raw = torch.zeros_like(source)
    module.launch("scale", [source.data_ptr(), raw.data_ptr(), np.uint32(7), np.uint32(data.size)], grid=8, block=128,
                  stream=torch.cuda.current_stream().cuda_stream)
    np.testing.assert_array_equal(raw.cpu().numpy().view(np.uint32), expected)
    side, on_side = torch.cuda.Stream(), torch.zeros_like(source)
    with torch.cuda.stream(side):  # torch_stream: the current stream's handle, here not the default one
        assert torch_stream(source) == side.cuda_stream != torch.cuda.default_stream().cuda_stream
        module.launch("scale", [source, on_side, np.uint32(7), np.uint32(data.size)], grid=8, block=128,
                      stream=torch_stream(source))
    side.synchronize()
    np.testing.assert_array_equal(on_side.cpu().numpy().view(np.uint32), expected)
    cupy = pytest.importorskip("cupy")
    source_cupy, out_cupy = cupy.asarray(data), cupy.zeros(data.size, cupy.uint32)
    module.launch("scale", [source_cupy, out_cupy, np.uint32(7), np.uint32(data.size)], grid=8, block=128)
    runtime.stream.sync()
    np.testing.assert_array_equal(cupy.asnumpy(out_cupy), expected)


def test_a_host_array_that_is_not_numpy_is_refused(runtime):
    torch = pytest.importorskip("torch")
    from mlir_tile.runtime import CudaError

    module = runtime.load_ptx(SCALE_PTX, name="scale")
    with pytest.raises(CudaError, match="lives in host memory"):
        module.launch("scale", [torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32).cuda(),
                                np.uint32(1), np.uint32(4)], grid=1, block=32)


def test_the_gemm_example_matches_numpy():
    """The run half: mlir_tile.kernels.gemm (the builder's 4-stage cp.async GEMM) on 1000 x 1016 x 504, whose M is no
    multiple of the tile and N, K none of 128 or 32, against numpy within fp16 rounding."""
    from mlir_tile.kernels.gemm import checks as gemm_checks

    ok, line = gemm_checks.run_and_check(gpu_input("gemm.ptx").read_text())
    assert ok, line


@pytest.mark.parametrize("name", ["gemm_hopper.ptx", "gemm_hopper_bf16_kn.ptx", "gemm_hopper_persistent.ptx",
                                  "gemm_hopper_cluster.ptx", "gemm_hopper_bf16_kn_cluster.ptx",
                                  "gemm_hopper_persistent_cluster.ptx", "gemm_hopper_wide.ptx",
                                  "gemm_hopper_bf16_kn_wide.ptx"])
@pytest.mark.parametrize("shape", [(1000, 1016, 504), (1, 8, 8), (129, 72, 8), (333, 200, 1000), (2048, 2048, 2048)])
def test_the_hopper_gemm_is_numpys_product(runtime, name, shape):
    """Hopper's path (TMA loads on mbarriers, wgmma, stmatrix, TMA stores; B [N, K] f16 and [K, N] bf16) on
    products with tails in M, N and K (zero-filled loads, clipped stores), fewer k-tiles than stages, a
    single row; in clusters of 2 CTAs sharing B's k-tiles by multicast (a cluster's second CTA past M when its
    rows of tiles are); consumers of 128 rows (two batches a k-tile, "...w")."""
    from mlir_tile.kernels.gemm import checks as gemm_checks

    ptx = gpu_input(name).read_text()
    built = json.loads(ptx.split("\n", 1)[0].removeprefix("// mlir-tile example built with: "))
    ok, line = gemm_checks.run_and_check(ptx, **built, shape=shape)
    assert ok, line


@pytest.mark.parametrize("name", ["gemm_hopper_split.ptx", "gemm_hopper_bf16_kn_wide_split.ptx"])
@pytest.mark.parametrize("shape, splits", [((1000, 1016, 504), 3), ((1, 8, 8), 2), ((129, 72, 4096), 7),
                                           ((333, 200, 1000), 40), ((512, 512, 8192), 16)])
def test_the_split_k_hopper_gemm_partials_sum_to_numpys_product(runtime, name, shape, splits):
    """Split-K on Hopper's path in one launch: `splits` CTAs a C tile, each a run of k-tiles (none left for some
    with 40), the last adding the others' fp32 partials and storing C; launched twice on the same flags (each
    launch's last splits clear them for the next), both C right and the flags zero after."""
    from mlir_tile.kernels.gemm import sm90_checks as hopper_checks

    from mlir_tile.kernels.gemm import checks as gemm_checks, sm90_tiles as hopper_tiles

    ptx = gpu_input(name).read_text()
    built = json.loads(ptx.split("\n", 1)[0].removeprefix("// mlir-tile example built with: "))
    fields = {name: value for name, value in built.items() if name in hopper_tiles.TILE_FIELDS}
    tile = gemm_checks.hopper_tile(built["dtype"], built["b_major"], None, fields).tile
    ok, line = hopper_checks.run_and_check(ptx, dtype=built["dtype"], b_major=built["b_major"], tile=tile, shape=shape,
                                           splits=splits)
    assert ok, line


@pytest.mark.parametrize("shape", [(1000, 1016, 512), (1, 8, 16), (129, 72, 16), (333, 200, 1008), (2048, 2048, 2048)])
@pytest.mark.parametrize("row_scales", [False, True])
@pytest.mark.parametrize("b_major", ["nk", "kn"])
def test_the_fp8_hopper_gemm_is_the_scaled_exact_product(runtime, shape, row_scales, b_major):
    """e4m3 A and B [N, K] or [K, N] (transposed in the kernel), small integers (exact products and sums),
    per-tensor or per-row scales, C bf16: C is the bf16 of the exact product times the scales, with tails in
    M, N and K."""
    from mlir_tile.kernels.gemm import sm90_checks as hopper_checks, sm90_tiles as hopper_tiles

    if b_major == "kn":  # B's rows of N bytes on 16 bytes
        shape = (shape[0], -(-shape[1] // 16) * 16, shape[2])
    suffix = ("_kn" if b_major == "kn" else "") + ("_rows" if row_scales else "")
    ptx = gpu_input(f"gemm_hopper_e4m3{suffix}.ptx").read_text()
    tile = hopper_tiles.FP8_ROWS_TILE if row_scales else hopper_tiles.default_tile("e4m3", b_major)
    ok, line = hopper_checks.run_and_check(ptx, dtype="e4m3", b_major=b_major, tile=tile, shape=shape,
                                           row_scales=row_scales)
    assert ok, line


@pytest.mark.parametrize("shape", [(1000, 1016, 512), (1, 8, 16), (333, 200, 1008), (257, 136, 640), (2048, 2048, 2048)])
@pytest.mark.parametrize("scales", ["promote", "paired", "blockscales", "rowblocks"])
def test_the_promoted_fp8_hopper_gemm_is_the_scaled_exact_product(runtime, shape, scales):
    """fp8's precise accumulation (`HopperConfig.promote`: each k-tile's partials added into fp32), per-tensor
    scales or blockwise ones (`block_scales`: A's 1 x 128 and B's 128 x 128 blocks, or B's 1 x 128 too,
    `row_blocks`, a different power of two for each k-block, row and column (block), applied as each k-tile is
    added in), per-tensor with two partial sets (`paired`: K's k-tiles even and odd among the shapes), with tails
    in M, N and K: C is the bf16 of the exact product times the scales."""
    from mlir_tile.kernels.gemm import sm90_checks as hopper_checks

    ptx = gpu_input(f"gemm_hopper_e4m3_{scales}.ptx").read_text()
    tile = {"bm": 128, "bn": 128, "bk": 128, "stages": 4, "promote": True, "paired": scales == "paired",
            "block_scales": scales in ("blockscales", "rowblocks"), "row_blocks": scales == "rowblocks"}
    ok, line = hopper_checks.run_and_check(ptx, dtype="e4m3", b_major="nk", tile=tile, shape=shape)
    assert ok, line


@pytest.mark.parametrize("shape", [(1000, 1024, 512), (1, 16, 16), (333, 208, 1000), (2048, 4096, 2048)])
def test_the_fused_swiglu_hopper_gemm_is_silu_of_gate_times_up(runtime, shape):
    """Fused SwiGLU (`HopperConfig.swiglu`, bf16, B [N, K] with gate and up rows interleaved a block of 8 at a
    time): C [M, N / 2] is silu(gate) * up of numpy's product within C's rounding, with tails in M, N and K."""
    from mlir_tile.kernels.gemm import sm90_checks as hopper_checks

    ptx = gpu_input("gemm_hopper_bf16_swiglu.ptx").read_text()
    tile = {"bm": 128, "bn": 256, "bk": 64, "stages": 3, "swiglu": True}
    ok, line = hopper_checks.run_and_check(ptx, dtype="bf16", b_major="nk", tile=tile, shape=shape)
    assert ok, line


@pytest.mark.parametrize("shape", [(1, 1000, 504), (16, 1016, 1000), (7, 64, 16), (9, 4096, 4096)])
def test_a_decode_tiles_box_of_m_rows_of_a_gives_numpys_product(runtime, shape):
    """`HopperConfig.a_rows` 16 (bf16, 64 x 64 on 8 stages, B [N, K]): A's box of 16 rows where M is at most 16, the
    tile's other rows never loaded (only C's rows past M would read them, which the store clips): C is numpy's
    product within C's rounding, with tails in N and K."""
    from mlir_tile.kernels.gemm import sm90_checks as hopper_checks

    ptx = gpu_input("gemm_hopper_bf16_decode_a16.ptx").read_text()
    tile = {"bm": 64, "bn": 64, "bk": 64, "stages": 8, "a_rows": 16}
    ok, line = hopper_checks.run_and_check(ptx, dtype="bf16", b_major="nk", tile=tile, shape=shape)
    assert ok, line


@pytest.mark.parametrize("groups, rows, n, depth", [(5, 256, 200, 504), (1, 128, 8, 16), (9, 384, 1024, 2048)])
def test_the_grouped_hopper_gemm_computes_each_groups_counted_rows(runtime, groups, rows, n, depth):
    """The masked grouped GEMM (`HopperConfig.grouped`, MoE decode's layout): each group's own B, the counts read
    on the device (0, 1 and all rows among them), a tile past its count doing nothing: each group's counted rows
    of C against numpy's product."""
    from mlir_tile.kernels.gemm import sm90_checks as hopper_checks

    ptx = gpu_input("gemm_hopper_bf16_grouped.ptx").read_text()
    tile = {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "grouped": True}
    ok, line = hopper_checks.run_and_check_grouped(ptx, dtype="bf16", tile=tile, groups=groups, rows=rows, n=n,
                                                   depth=depth)
    assert ok, line


_PERSISTENT = {"bm": 128, "bn": 256, "bk": 64, "stages": 3, "persistent": True}
_PINGPONG = {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "consumer_rows": 128, "persistent": True, "pingpong": True}


@pytest.mark.parametrize("name, tile, ctas", [("gemm_hopper_persistent.ptx", _PERSISTENT, 1),
                                              ("gemm_hopper_persistent.ptx", _PERSISTENT, 5),
                                              ("gemm_hopper_persistent.ptx", _PERSISTENT, 13),
                                              ("gemm_hopper_persistent_cluster.ptx", {**_PERSISTENT, "cluster": 2}, 2),
                                              ("gemm_hopper_persistent_cluster.ptx", {**_PERSISTENT, "cluster": 2}, 6),
                                              ("gemm_hopper_pingpong.ptx", _PINGPONG, 1),
                                              ("gemm_hopper_pingpong.ptx", _PINGPONG, 5),
                                              ("gemm_hopper_pingpong.ptx", _PINGPONG, 13),
                                              ("gemm_hopper_pingpong.ptx", _PINGPONG, 64)])
def test_a_persistent_hopper_gemm_walks_the_tiles_of_any_grid(runtime, name, tile, ctas):
    """The persistent Hopper kernel on 1000 x 1016 x 504 (8 x 4 C tiles of 128 x 256) with 1, 5 and 13 CTAs,
    and in clusters of 2 (4 x 4 tiles of 256 x 256 for the clusters) with 1 and 3 clusters: each walks
    several tiles, its pipeline's stages and phases running on from one tile to the next; ping-pong (8 x 8
    tiles of 128 x 128, its two consumers taking turns) with 1, 5, 13 and 64 CTAs (one tile each: one
    consumer idle)."""
    from mlir_tile.kernels.gemm import sm90_checks as hopper_checks

    ok, line = hopper_checks.run_and_check(gpu_input(name).read_text(), dtype="f16", b_major="nk", tile=tile,
                                           shape=(1000, 1016, 504), ctas=ctas)
    assert ok, line


@pytest.mark.parametrize("grid, depth", [
    (16, 192),  # 7 CTAs past the 9 tiles; K of exactly the 3 k-tiles copied during the tile before
    (4, 264),  # CTAs walking 3, 2, 2 and 2 tiles; a k-tile inside K, one with a K tail, then the next tile's 3
])
def test_a_persistent_gemm_walks_the_tiles_of_any_grid(runtime, grid, depth):
    """The persistent kernel (gemm_bf16_nk_persistent.ptx) on 300 x 520 x K, 3 x 3 C tiles, launched
    with a caller's grid: past the tiles the extra CTAs do nothing, under them each CTA walks several tiles;
    C is the product."""
    from mlir_tile.kernels.gemm import reference as gemm_reference, sm80 as gemm_sm80, sm80_tiles as gemm_tiles

    config, (m, n) = gemm_tiles.configure("nk", 16, "128x256x64s4p"), (300, 520)
    a, b = gemm_reference.inputs(m, n, depth, element="bf16")
    module = runtime.load_ptx(gpu_input("gemm_bf16_nk_persistent.ptx").read_text(), name="persistent")
    _, _, c = module.launch(gemm_sm80.KERNEL, [a, np.ascontiguousarray(b.T), np.zeros((m, n), np.uint16), m, n // 8,
                                         depth // 8], grid=grid, block=config.threads, shared_bytes=config.shared_bytes)
    ok, worst = gemm_reference.check(c, a, b, "bf16")
    assert ok, worst


def test_split_k_partials_and_their_reduction_match_numpy(runtime):
    """The run half of split-K (mlir_tile.kernels.gemm's SPLIT_CHECKED: rows on 2 bytes, element copies) on 127 x 100
    x 1001 in 12 splits of 3 k-tiles, of which 32 exist: split s's fp32 partial is the product of A's and B's
    k-tiles 3s to 3s + 2 (the last split's none: zeros), and the reduction's fp16 C is A x B."""
    from mlir_tile.kernels.gemm import reference as gemm_reference, sm80 as gemm_sm80, sm80_tiles as gemm_tiles
    from mlir_tile.isa.halves import decode

    config, (m, n, depth), splits = gemm_tiles.SPLIT_CHECKED, (127, 100, 1001), 12
    a, b = gemm_reference.inputs(m, n, depth)  # fp16 bit patterns
    split = runtime.load_ptx(gpu_input("gemm_split.ptx").read_text(), name="gemm_split")
    _, _, partials, *_ = split.launch(gemm_sm80.KERNEL, [a, b, np.zeros(splits * m * n, np.float32), m, n, depth, splits],
                                      grid=config.grid(m, n, splits), block=config.threads,
                                      shared_bytes=config.shared_bytes)
    per_split = 3 * config.bk
    for s in range(splits):
        columns = slice(s * per_split, (s + 1) * per_split)
        expected = decode(a[:, columns], "f16") @ decode(b[columns], "f16")
        np.testing.assert_allclose(partials[s * m * n:(s + 1) * m * n].reshape(m, n), expected, rtol=1e-5, atol=1e-4)
    reducer = runtime.load_ptx(gpu_input("gemm_reduce.ptx").read_text(), name="gemm_reduce")
    _, c, *_ = reducer.launch(gemm_sm80.REDUCE_KERNEL, [partials, np.zeros(m * n, np.uint16), m, n, splits],
                              grid=-(-m * n // gemm_sm80.REDUCE_THREADS), block=gemm_sm80.REDUCE_THREADS)
    ok, worst = gemm_reference.check(c.reshape(m, n), a, b)
    assert ok, worst


def test_the_attention_example_matches_numpy():
    """The run half: mlir_tile.kernels.attention (d = 64, fp16) on 3 heads of 200 positions, a tail in the query and
    the key tiles, against numpy's softmax attention and log-sum-exp."""
    from mlir_tile.kernels.flash import checks as flash_checks

    ok, line = flash_checks.run_and_check(gpu_input("attention.ptx").read_text())
    assert ok, line


@pytest.mark.parametrize("name", ["attention_hopper_d128.ptx", "attention_hopper_bf16_d128_causal.ptx",
                                  "attention_hopper_bf16_d64.ptx", "attention_hopper_d64_causal.ptx",
                                  "attention_hopper_d256.ptx", "attention_hopper_bf16_d256_causal.ptx",
                                  "attention_hopper_e4m3_d128.ptx", "attention_hopper_e4m3_d128_causal.ptx",
                                  "attention_hopper_bf16_d128_pingpong.ptx", "attention_hopper_d128_persistent.ptx",
                                  "attention_hopper_d128_causal_launched.ptx",
                                  "attention_hopper_bf16_d64_persistent.ptx", "attention_hopper_d64_two_consumers.ptx",
                                  "attention_hopper_e4m3_d128_launched.ptx", "attention_hopper_bf16_d64_causal_lazy.ptx",
                                  "attention_hopper_d64_causal_three_ctas.ptx"])
@pytest.mark.parametrize("batch, heads, seq", [(1, 1, 1), (1, 3, 17), (2, 3, 200), (1, 2, 257), (1, 1, 1000),
                                               (1, 2, 2048)])
def test_attention_on_hoppers_path_matches_numpy(runtime, name, batch, heads, seq):
    """Hopper's attention (TMA, wgmma, P in registers as the A of P V, a producer warpgroup) on one position, tails
    in the query and key tiles, heads whose tiles reach into the next head's rows (masked, never stored) and many
    key tiles, f16 and bf16 (d 64, 128 and 256) and e4m3 (d 128: V transposed in the kernel; launched and
    persistent), causal and not, ping-pong on the launched grid and the persistent one (d 128's default, causal
    too), d 128 causal launched, the persistent grid at d 64 (three consumers, and two of 128 keys), three
    consumers launched (d 64's default for long sequences), lazy rescaling (e4m3's default; bf16 d 64 causal),
    one consumer in 3 CTAs an SM (d 64's pick for short ones): O and the log-sum-exp against numpy."""
    ok, line = _hopper_attention(runtime, name, batch=batch, heads=heads, seq=seq)
    assert ok, line


@pytest.mark.parametrize("name", ["attention_hopper_d128_persistent.ptx", "attention_hopper_bf16_d64_persistent.ptx",
                                  "attention_hopper_bf16_d128_causal.ptx",
                                  "attention_hopper_d64_causal_persistent.ptx", "attention_hopper_e4m3_d128.ptx",
                                  "attention_hopper_e4m3_d128_causal.ptx", "attention_hopper_e4m3_d128_o_in_stage.ptx",
                                  "attention_hopper_e4m3_d128_pingpong.ptx",
                                  "attention_hopper_bf16_d64_causal_two_ctas_walk.ptx"])
@pytest.mark.parametrize("batch, heads, seq, ctas", [(1, 5, 300, 2), (2, 3, 1000, 3), (1, 7, 129, 5), (1, 1, 2048, 1),
                                                     (2, 4, 100, 3)])
def test_a_persistent_attention_walks_many_items_on_a_few_ctas(runtime, name, batch, heads, seq, ctas):
    """The persistent grid on fewer CTAs than items: each CTA walks several (head, row tile) items, its K/V
    pipeline and (d 128) ping-pong turns running on across them, each item's Q loaded once the item before's
    last S is done, its O written apart from Q (d 64: O's own tile, once the stores before have read it; d 128:
    over the last key tile's stage) (items of one head and of the next, tails, one key tile an item, one CTA for
    all); causal (d 128's default, and one consumer at d 64), each head's row tiles paired longest with shortest, the K/V
    index carried on across items of unequal key tiles (an odd number of row tiles a head too); e4m3, its
    staging ring's index running on with the K/V one, O after the staged V tiles (with 5 stages, over the last key
    tile's stage); 2 CTAs an SM of one consumer walking (twice as many CTAs as SMs)."""
    ok, line = _hopper_attention(runtime, name, batch=batch, heads=heads, seq=seq, sms=ctas)
    assert ok, line


def _hopper_attention(runtime, name: str, **case) -> tuple[bool, str]:
    """The Hopper attention kernel of gpu input `name` on `case` (`flash.checks.run_and_check`)."""
    from mlir_tile.kernels.flash import checks as flash_checks

    if runtime.device.compute_capability != (9, 0):
        pytest.skip(f"Hopper's path needs sm_90; this GPU is sm_{''.join(map(str, runtime.device.compute_capability))}")
    ptx = gpu_input(name).read_text()
    built = json.loads(ptx.split("\n", 1)[0].removeprefix("// mlir-tile example built with: "))
    return flash_checks.run_and_check(ptx, **built, **case)


@pytest.mark.parametrize("name, written, arguments", [
    ("gemm.py", "gemm_bf16_nk.ptx", ["--shape", 1000, 1016, 504]),  # M no multiple of 128, N none of 256
    ("gemm.py", "gemm_bf16_nk_persistent.ptx", ["--shape", 1000, 1016, 504]),  # edge tiles moved inside, a K tail
    ("gemm.py", "gemm_bf16_nk_persistent.ptx", ["--shape", 2000, 3000, 200]),  # 192 tiles: CTAs take one or two
    ("attention.py", "attention_bf16_d128_causal.ptx", ["--batch", 2, "--heads", 3, "--seq", 257]),
])
def test_an_example_runs_its_ptx_with_the_options_it_was_built_with(name, written, arguments):
    """The run half of test_kernels_command_line.py's --ptx-out: bf16, B as [N, K] on the 128 x 256 tile (and on its
    persistent kernel), and the tuned d 128 causal attention, each taken from the PTX's first line, against
    numpy."""
    from test_kernels_command_line import example

    ran = example(name, "--run-ptx", gpu_input(written), *arguments)
    assert ran.returncode == 0 and "bf16" in ran.stdout and "matches numpy: True" in ran.stdout, ran.stdout + ran.stderr


def test_tma_box_writes_are_the_reference_models_byte_for_byte(runtime):
    """Each swizzle mode's box, and the narrow boxes of every swizzle and element size, at random coordinates of
    random matrices (inside, across the far edges, before the first row and column; rows ending inside a 16-byte
    chunk or not): the shared image's bytes as the kernel copies them out are the reference model's TMA write
    over the random bytes it held (a narrow box's rows a span apart, the rest of each span untouched)."""
    from mlir_tile.testing import tma_boxes

    if runtime.device.compute_capability < (9, 0):
        pytest.skip(f"TMA needs sm_90; this GPU is sm_{''.join(map(str, runtime.device.compute_capability))}")
    folder = gpu_input("tma")
    assert tma_boxes.run(folder, seed=int(os.environ.get("MLIR_TILE_TMA_SEED", "0"))) == []


def test_tma_stores_are_the_reference_models_and_the_unsafe_ones_are_refused(runtime):
    """Boxes of every element size, narrow and wide, stored into a matrix inside a wider allocation: the whole
    allocation is the model's store (nothing past the matrix written). Rows ending inside a 16-byte chunk: the
    store map is refused, and the map encoded as a load's shows the last chunk written whole, as the model says
    ([tma-store-chunks]); a negative coordinate is refused before the launch ([tma-store-coordinate])."""
    from mlir_tile.testing import tma_boxes

    if runtime.device.compute_capability < (9, 0):
        pytest.skip(f"TMA needs sm_90; this GPU is sm_{''.join(map(str, runtime.device.compute_capability))}")
    assert tma_boxes.run_stores(gpu_input("tma"), seed=int(os.environ.get("MLIR_TILE_TMA_SEED", "0"))) == []


def test_wgmma_operand_reads_are_the_reference_models_bit_for_bit(runtime):
    """wgmma on the H200 through random descriptors (every swizzle mode, major, element type: 9 kernels x 120
    descriptor pairs) against the reference model's operand fetch, through 150 random operand tiles built
    with the builder's `k.wgmma` against A B^T of what the layouts hold, and through 30 chains S = Q K^T, O = S V^T
    with S kept in registers as the RS form's A (MLIR_TILE_WGMMA_SEED picks the data and descriptors)."""
    from mlir_tile.testing import wgmma_operands

    ran, failures = wgmma_operands.run(gpu_input("wgmma"), seed=int(os.environ.get("MLIR_TILE_WGMMA_SEED", "0")))
    assert failures == [] and ran == len(wgmma_operands.DESCRIPTOR_KERNELS) * 120 + 150 + 30


def test_a_multicast_tma_load_lands_in_every_cta_of_its_cluster(runtime):
    """Clusters of 2 CTAs (the runtime's cluster launch): rank 0's one TMA load multicast into both CTAs'
    tiles, each completing on its own mbarrier; every CTA's tile is the reference model's box write."""
    from mlir_tile.testing import tma_boxes

    assert tma_boxes.run_multicast(gpu_input("tma"), seed=int(os.environ.get("MLIR_TILE_TMA_SEED", "0"))) == []
