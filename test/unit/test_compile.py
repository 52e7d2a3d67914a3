"""compile_to_ptx on the spec example. The build half of the GPU test: the PTX that the GPU test
(test_runtime_gpu.py) runs is checked in, and must be exactly what mlir-tile compiles now, so the GPU half
(on a host without MLIR) and this half (on a host without a GPU) together test the whole path. And a
pipeline's failure as a process pool hands it back: pickled whole."""
import pickle
from pathlib import Path

import pytest
from mlir import ir
from mlir.dialects import arith, gpu

import seed_example
from kernel_example import with_build_options
from mlir_tile.builder import Global, Kernel
from mlir_tile.compile import PipelineError, compile_to_ptx

SPEC_EXAMPLE_PTX = Path(__file__).with_name("Inputs") / "spec_example.ptx"


def test_spec_example_ptx_is_what_mlir_tile_compiles():
    compiled = compile_to_ptx(seed_example.build_module())
    assert compiled == SPEC_EXAMPLE_PTX.read_text(), (
        "the compiled PTX changed: if the change is intended, run "
        "`python examples/seed_example.py --ptx-out test/unit/Inputs/spec_example.ptx`")


def test_dynamic_shared_example_ptx_is_what_mlir_tile_compiles():
    """The build half of the dynamic-shared-memory GPU test (examples/dynamic_shared.py)."""
    import dynamic_shared

    compiled = compile_to_ptx(dynamic_shared.build_module())
    assert ".extern .shared .align 16 .b8 __dynamic_shmem__0[];" in compiled
    assert compiled == (SPEC_EXAMPLE_PTX.parent / "dynamic_shared.ptx").read_text(), (
        "the compiled PTX changed: if intended, run "
        "`python examples/dynamic_shared.py --ptx-out test/unit/Inputs/dynamic_shared.ptx`")


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
    assert compiled == (SPEC_EXAMPLE_PTX.parent / "mma_tile.ptx").read_text(), (
        "the compiled PTX changed: if intended, run `python examples/mma_tile.py --ptx-out test/unit/Inputs/mma_tile.ptx`")


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
    assert compiled == (SPEC_EXAMPLE_PTX.parent / "mma_s8.ptx").read_text(), (
        "the compiled PTX changed: if intended, run `python examples/mma_s8.py --ptx-out test/unit/Inputs/mma_s8.ptx`")


def test_gemm_example_ptx_is_what_mlir_tile_compiles():
    """The build half of the GEMM GPU test (examples/gemm.py): two main loops (CTAs inside M and N while the
    k-tile copied lies inside K, then the rest), each per k-tile eight 16-byte cp.async with one base per thread
    and immediate offsets, 16 ldmatrix.x4 (A, B with .trans) and 64 mma; the first loop's copies carry no
    zero-fill operand."""
    import re

    import gemm

    compiled = compile_to_ptx(gemm.build_module())
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
    build = {"dtype": "f16", "b_major": "kn", "align": 16, "tile": "128x128x32s4"}  # the example's defaults
    assert with_build_options(compiled, build) == (Path(__file__).with_name("Inputs") / "gemm.ptx").read_text(), (
        "the compiled PTX changed: if intended, run `python examples/gemm.py --ptx-out test/unit/Inputs/gemm.ptx`")


def test_the_persistent_gemm_is_three_k_tile_loops_in_a_tile_loop():
    """The persistent kernel (bf16, B [N, K]) runs the non-persistent kernel's step in three k-tile loops a C
    tile: copies inside K without a zero-fill operand, the K tail's with one, then the next tile's first 3
    k-tiles without; each per k-tile twelve 16-byte cp.async, 32 ldmatrix.x4 and 128 mma; the prologue copies
    the first tile's 3 k-tiles unpredicated (K >= 192) and loads one k16 block's fragments."""
    import re

    import gemm

    compiled = compile_to_ptx(gemm.build_module("bf16", gemm.variant(gemm.PERSISTENT, 16, b_major="nk")))
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
    import gemm

    inputs = Path(__file__).with_name("Inputs")
    split = compile_to_ptx(gemm.build_module("f16", gemm.SPLIT_CHECKED))
    assert gemm.SPLIT_CHECKED.split_k and gemm.SPLIT_CHECKED.align == 2
    assert "stmatrix" not in split and split.count("st.global.b32") == 32  # 64 x 64 fp32 over 128 threads
    reduce = compile_to_ptx(gemm.build_reduce_module("f16"))
    assert "add.rn.f32" in reduce and reduce.count("cvt.rn.f16.f32") == 1
    regenerate = ("if intended, run: python -c 'import sys; sys.path.insert(0, \"examples\"); import gemm; "
                  "from mlir_tile.compile import compile_to_ptx as c; from pathlib import Path as P; "
                  "P(\"test/unit/Inputs/gemm_split.ptx\").write_text(c(gemm.build_module(\"f16\", gemm.SPLIT_CHECKED))); "
                  "P(\"test/unit/Inputs/gemm_reduce.ptx\").write_text(c(gemm.build_reduce_module(\"f16\")))'")
    assert split == (inputs / "gemm_split.ptx").read_text(), f"the split-K kernel's PTX changed: {regenerate}"
    assert reduce == (inputs / "gemm_reduce.ptx").read_text(), f"the reduction's PTX changed: {regenerate}"


def test_attention_example_ptx_is_what_mlir_tile_compiles():
    """The build half of the attention GPU test (examples/attention.py, d = 64): per key tile, 16 ldmatrix.x4 of
    K, 16 ldmatrix.x4.trans of V, 128 mma.sync, 68 ex2.approx.ftz (16 probabilities and a correction per row,
    4 rows a thread) and 8 xor shuffles; twice (the tiles without and with the mask), and Q's 8 x4 once. Four
    barriers: before Q's fragments, one per turn of each loop (the copies it issued visible, the stage they
    overwrite next free), before the O tile's rows."""
    import re

    import attention

    compiled = compile_to_ptx(attention.build_module())
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", compiled)) == 8 + 2 * 16
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans", compiled)) == 2 * 16
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32", compiled)) == 2 * 128
    assert len(re.findall(r"ex2\.approx\.ftz\.f32", compiled)) == 2 * 68
    assert len(re.findall(r"shfl\.sync\.bfly\.b32", compiled)) == 2 * 8 + 8  # + the row sums once
    assert len(re.findall(r"stmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", compiled)) == 8
    assert len(re.findall(r"bar\.sync", compiled)) == 4
    build = {"dtype": "f16", "head_dim": 64, "causal": False, "tuned": False}  # the example's defaults
    assert with_build_options(compiled, build) == (Path(__file__).with_name("Inputs") / "attention.ptx").read_text(), (
        "the compiled PTX changed: if intended, run `python examples/attention.py --ptx-out test/unit/Inputs/attention.ptx`")


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
