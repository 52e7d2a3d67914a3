"""compile_to_ptx on the examples: the build half of the GPU tests. The PTX's structure is checked where it
is compiled (FileCheck, instruction counts); test/gpu_inputs.py builds the same PTX for the GPU half
(test_runtime_gpu.py, on a host without MLIR), so the two halves together test the whole path. And a
pipeline's failure as a process pool hands it back: pickled whole."""
import pickle
import shutil
import subprocess

import pytest
from mlir import ir
from mlir.dialects import arith, gpu

import seed_example
from mlir_tile.builder import Global, Kernel
from mlir_tile.compiler.compile import PipelineError, compile_to_ptx


def test_spec_example_ptx_is_two_ldmatrix_x2_and_the_table_stores(filecheck):
    """The spec's example: two x2 (one per repeat, the second at an immediate offset from the first's
    address), the loaded words stored to slots 0, 2, 8 and 10 of each thread's row, the rest -777."""
    filecheck(compile_to_ptx(seed_example.build_module()), """
    CHECK: .target sm_90
    CHECK: .visible .entry matrix_kernel(
    CHECK: .maxntid 32, 1, 1
    CHECK-NOT: .local
    CHECK: ldmatrix.sync.aligned.m8n8.x2.shared.b16 {[[A:%r[0-9]+]], [[B:%r[0-9]+]]}, [[[P:%rd[0-9]+]]];
    CHECK-NEXT: ldmatrix.sync.aligned.m8n8.x2.shared.b16 {[[C:%r[0-9]+]], [[D:%r[0-9]+]]}, [[[P]]+512];
    CHECK-NOT: ldmatrix
    CHECK: st.global.b32 [[[O:%rd[0-9]+]]], [[A]];
    CHECK-NEXT: st.global.b32 [[[O]]+4], -777;
    CHECK-NEXT: st.global.b32 [[[O]]+8], [[B]];
    CHECK: st.global.b32 [[[O]]+32], [[C]];
    CHECK: st.global.b32 [[[O]]+40], [[D]];
    CHECK-NOT: ldmatrix
    """)


def test_dynamic_shared_example_ptx_reads_past_48_kib_through_one_x4_trans(filecheck):
    """The build half of the dynamic-shared-memory GPU test (examples/dynamic_shared.py): the buffer is the
    extern dynamic array, filled by a loop of 32-bit stores up to 49408 bytes, then one ldmatrix.x4.trans."""
    import dynamic_shared

    filecheck(compile_to_ptx(dynamic_shared.build_module()), """
    CHECK: .extern .shared .align 16 .b8 __dynamic_shmem__0[];
    CHECK: .visible .entry from_dynamic_shared(
    CHECK: mov.b64 [[BASE:%rd[0-9]+]], __dynamic_shmem__0;
    CHECK: st.shared.b32
    CHECK: setp.ne.b64 {{%p[0-9]+}}, {{%rd[0-9]+}}, 49408;
    CHECK: bar.sync 0;
    CHECK: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
    CHECK-NOT: ldmatrix
    CHECK-NOT: .local
    """)


def test_mma_example_ptx_is_what_mlir_tile_compiles():
    """The build half of the mma GPU test (examples/mma_tile.py): each 16x16 fragment block is one x4, 32 mma,
    no local memory."""
    import re

    import mma_tile

    compiled = compile_to_ptx(mma_tile.build_module())
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared", compiled)) == 4  # A: 4 k-blocks
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans", compiled)) == 16  # B: 4 k x 4 n-pairs
    assert len(re.findall(r"stmatrix\.sync\.aligned\.m8n8\.x4\.shared", compiled)) == 4  # C: 4 n-pairs
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32", compiled)) == 32
    assert ".local" not in compiled


def test_s8_mma_example_ptx_is_what_mlir_tile_compiles():
    """The build half of the s8 mma GPU test (examples/mma_s8.py): A and B fragments one x4 per 16x32-byte block
    from the synthesized Sw<2,2,3> tiles, 16 integer mma, no local memory."""
    import re

    import mma_s8

    compiled = compile_to_ptx(mma_s8.build_module())
    assert str(mma_s8.SWIZZLE) == "Sw<2,2,3>"
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", compiled)) == 2 + 8  # A: 2 k-blocks; B: x 4 n-pairs
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k32\.row\.col\.s32\.s8\.s8\.s32", compiled)) == 16
    assert ".local" not in compiled


def test_gemm_example_ptx_is_what_mlir_tile_compiles():
    """The build half of the GEMM GPU test (mlir_tile.kernels.gemm): two main loops (CTAs inside M and N while the
    k-tile copied lies inside K, then the rest), each per k-tile eight 16-byte cp.async with one base per thread
    and immediate offsets, 16 ldmatrix.x4 (A, B with .trans) and 64 mma; the first loop's copies carry no
    zero-fill operand."""
    import re

    from mlir_tile.kernels.gemm import sm80 as gemm_sm80

    compiled = compile_to_ptx(gemm_sm80.build_module())
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", compiled)) == 2 * 8 + 4  # loops, prologue
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans", compiled)) == 2 * 8 + 4
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32", compiled)) == 2 * 64
    assert len(re.findall(r"stmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", compiled)) == 16
    copies = re.findall(r"cp\.async\.cg\.shared\.global \[%rd\d+(\+\d+)?\], \[%rd\d+(?:\+\d+)?\], 16(, %r\d+)?;", compiled)
    assert len(copies) == 5 * 8  # 3 prologue k-tiles and the two loops'
    assert sum(1 for _, size in copies if not size) == 8  # the predicate-free loop's
    assert sum(1 for offset, _ in copies if not offset) == 3  # one base (prologue, each loop), the rest immediates
    assert ".local" not in compiled
    assert ".extern .shared .align 2048" in compiled  # the B tile's swizzle Sw<3,2,4> repeats every 2048 bytes


def test_the_persistent_gemm_is_three_k_tile_loops_in_a_tile_loop():
    """The persistent kernel (bf16, B [N, K]) runs the non-persistent kernel's step in three k-tile loops a C
    tile: copies inside K without a zero-fill operand, the K tail's with one, then the next tile's first 3
    k-tiles without; each per k-tile twelve 16-byte cp.async, 32 ldmatrix.x4 and 128 mma; the prologue copies
    the first tile's 3 k-tiles unpredicated (K >= 192) and loads one k16 block's fragments."""
    import re

    from mlir_tile.kernels.gemm import sm80 as gemm_sm80, sm80_tiles as gemm_tiles

    compiled = compile_to_ptx(gemm_sm80.build_module("bf16", gemm_tiles.variant(gemm_tiles.PERSISTENT, 16, b_major="nk")))
    copies = re.findall(r"cp\.async\.cg\.shared\.global \[%rd\d+(?:\+\d+)?\], \[%rd\d+(?:\+\d+)?\], 16(, %r\d+)?;", compiled)
    assert len(copies) == 3 * 12 + 3 * 12  # the prologue's 3 k-tiles, the three loops'
    assert sum(1 for size in copies if size) == 12  # only the K tail's loop zero-fills
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", compiled)) == 8 + 3 * 32
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32", compiled)) == 3 * 128
    assert compiled.count("bar.sync") == 1 + 3 + 3  # the prologue's, a k-tile's in each loop, the two bands'
    assert ".local" not in compiled


def test_gemm_split_k_ptx_is_what_mlir_tile_compiles():
    """The build half of the split-K GPU test: SPLIT_CHECKED (64 x 64 tiles, element copies) writes its partial
    as fp32 pairs (no stmatrix); the reduction sums in fp32 and rounds once."""
    from mlir_tile.kernels.gemm import sm80 as gemm_sm80, sm80_tiles as gemm_tiles

    split = compile_to_ptx(gemm_sm80.build_module("f16", gemm_tiles.SPLIT_CHECKED))
    assert gemm_tiles.SPLIT_CHECKED.split_k and gemm_tiles.SPLIT_CHECKED.align == 2
    assert "stmatrix" not in split and split.count("st.global.b32") == 32  # 64 x 64 fp32 over 128 threads
    reduce = compile_to_ptx(gemm_sm80.build_reduce_module("f16"))
    assert "add.rn.f32" in reduce and reduce.count("cvt.rn.f16.f32") == 1


def test_attention_example_ptx_is_what_mlir_tile_compiles():
    """The build half of the attention GPU test (mlir_tile.kernels.attention, d = 64): per key tile, 16 ldmatrix.x4 of
    K, 16 ldmatrix.x4.trans of V, 128 mma.sync, 68 ex2.approx.ftz (16 probabilities and a correction per row,
    4 rows a thread) and 8 xor shuffles; twice (the tiles without and with the mask), and Q's 8 x4 once. Four
    barriers: before Q's fragments, one per turn of each loop (the copies it issued visible, the stage they
    overwrite next free), before the O tile's rows."""
    import re

    from mlir_tile.kernels.flash import sm80 as flash_sm80

    compiled = compile_to_ptx(flash_sm80.build_module())
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", compiled)) == 8 + 2 * 16
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans", compiled)) == 2 * 16
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32", compiled)) == 2 * 128
    assert len(re.findall(r"ex2\.approx\.ftz\.f32", compiled)) == 2 * 68
    assert len(re.findall(r"shfl\.sync\.bfly\.b32", compiled)) == 2 * 8 + 8  # + the row sums once
    assert len(re.findall(r"stmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", compiled)) == 8
    assert len(re.findall(r"bar\.sync", compiled)) == 4


@pytest.mark.parametrize("source_name", [None, "kernel.py"])
def test_a_pipeline_error_pickles_with_its_failure(source_name):
    """A PipelineError raised in a worker process reaches its parent whole: the failing pass, its
    diagnostics with their locations, the reproducer and the message (pickled from its message alone,
    it could not be rebuilt at all)."""
    with Kernel("k", [Global("i64")], block=(32, 1, 1), context=ir.Context()) as k:
        warp = arith.index_cast(ir.IntegerType.get_signless(64), gpu.subgroup_id())  # no lowering to NVVM
        k.store(warp, k.arguments[0], [k.thread_id()])
    with pytest.raises(PipelineError) as raised:
        compile_to_ptx(k.module, source_name=source_name)
    error, copy = raised.value, pickle.loads(pickle.dumps(raised.value))
    assert str(copy) == str(error) and "gpu.subgroup_id" in str(copy)
    assert (copy.failure.element, copy.failure.diagnostics, copy.failure.reproducer) == (
        error.failure.element, error.failure.diagnostics, error.failure.reproducer)


TMA_LOAD = """
!map = !nvgpu.tensormap.descriptor<tensor = memref<64x64xf16, #gpu.address_space<workgroup>>, swizzle = swizzle_128b,
                                   l2promo = none, oob = zero, interleave = none>
!barrier = !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>>
module attributes {gpu.container_module} {
  gpu.module @kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    memref.global "private" @tile : memref<64x64xf16, #gpu.address_space<workgroup>> {alignment = 1024}
    gpu.func @tma(%map_pointer: !llvm.ptr, %out: memref<64xf16>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %map = builtin.unrealized_conversion_cast %map_pointer : !llvm.ptr to !map
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %bytes = arith.constant 8192 : index
      %tid = gpu.thread_id x
      %tile = memref.get_global @tile : memref<64x64xf16, #gpu.address_space<workgroup>>
      %barrier = nvgpu.mbarrier.create -> !barrier
      %first = arith.cmpi eq, %tid, %c0 : index
      nvgpu.mbarrier.init %barrier[%c0], %c1, predicate = %first : !barrier
      gpu.barrier
      scf.if %first {
        nvgpu.tma.async.load %map[%c0, %c0], %barrier[%c0] to %tile : !map, !barrier -> memref<64x64xf16, #gpu.address_space<workgroup>>
        nvgpu.mbarrier.arrive.expect_tx %barrier[%c0], %bytes : !barrier
      }
      %phase = arith.constant false
      %ticks = arith.constant 10000000 : index
      nvgpu.mbarrier.try_wait.parity %barrier[%c0], %phase, %ticks : !barrier
      %value = memref.load %tile[%c0, %tid] : memref<64x64xf16, #gpu.address_space<workgroup>>
      memref.store %value, %out[%tid] : memref<64xf16>
      gpu.return
    }
  }
}
"""


def test_a_tma_load_completing_on_an_mbarrier_compiles_for_sm_90a(filecheck, tmp_path):
    """Hopper's data path through the pipeline (upstream nvgpu ops, the tensor map passed as a pointer): the
    bulk tensor copy completing on the mbarrier, the expected bytes, the wait by parity (inline PTX, which
    convert-nvvm-to-llvm makes), and ptxas -arch=sm_90a takes it."""
    with ir.Context():
        ptx = compile_to_ptx(ir.Module.parse(TMA_LOAD), chip="sm_90a")
    filecheck(ptx, """
    CHECK: .target sm_90a
    CHECK: mbarrier.init.shared.b64
    CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
    CHECK-SAME: [__mbarrier];
    CHECK: mbarrier.arrive.expect_tx.shared.b64 {{%rd[0-9]+}}, [__mbarrier], {{%r[0-9]+}};
    CHECK: mbarrier.try_wait.parity.shared.b64
    """)
    if shutil.which("ptxas"):
        (tmp_path / "tma.ptx").write_text(ptx)
        assembled = subprocess.run(["ptxas", "-arch=sm_90a", str(tmp_path / "tma.ptx"), "-o", str(tmp_path / "tma.cubin")],
                                   capture_output=True, text=True)
        assert assembled.returncode == 0, assembled.stderr
