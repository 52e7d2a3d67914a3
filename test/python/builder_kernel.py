# RUN: %python %s | filecheck %s
"""Whole kernels from the builder: arguments with declared alignment, ids, loop-carried values, conditionals
with results, proven-aligned vector access, async tile copies planned as one base per thread, fast math
and warp reductions, stage mbarriers and warp votes; the IR and the PTX the pipeline makes of it."""
import gc

from mlir import ir
from mlir.dialects import arith

from mlir_tile.builder import Global, Kernel
from mlir_tile.compiler.compile import compile_to_ptx


def run(f):
    print("\nTEST:", f.__name__)
    f()
    gc.collect()
    assert ir.Context._get_live_count() == 0, f"{f.__name__} leaked {ir.Context._get_live_count()} context(s)"
    return f


# CHECK-LABEL: TEST: test_global_arguments_reach_ptx_aligned
# CHECK: gpu.func @scale(%{{.*}}: memref<2147483647xf32> {llvm.align = 16 : i64}, %{{.*}}: index)
# CHECK: .param .u64 .ptr .align 16 scale_param_0
# CHECK: mov.u32 {{.*}}%ctaid.x
# CHECK: ld.global.v4.b32
# CHECK: st.global.v4.b32
@run
def test_global_arguments_reach_ptx_aligned():
    with Kernel("scale", [Global("f32"), "index"], block=(128, 1, 1), context=ir.Context()) as k:
        data, _ = k.arguments
        start = arith.muli(arith.addi(arith.muli(k.block_id(), k.block_size()), k.thread_id()), k.index(4))
        values = k.load_vector(data, [start], 4)
        k.store_vector(arith.addf(values, values), data, [start])
    print(k.func)
    print(compile_to_ptx(k.module))


# CHECK-LABEL: TEST: test_loop_carried_values_and_conditionals_with_results
# CHECK: %[[SUM:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32)
# CHECK: scf.yield %{{.*}} : f32
# CHECK: scf.if %{{.*}} -> (f32)
# CHECK: scf.yield %[[SUM]] : f32
# CHECK: } else {
@run
def test_loop_carried_values_and_conditionals_with_results():
    with Kernel("sums", [Global("f32"), "index"], context=ir.Context()) as k:
        data, n = k.arguments
        with k.loop(0, n, carried=[k.constant(0.0, "f32")]) as it:
            it.next(arith.addf(it.values[0], k.load(data, [it.index])))
        (total,) = it.results
        with k.if_(k.compare("ult", k.thread_id(), 1), ["f32"]) as branch:
            branch.otherwise(total)
            branch.done(k.constant(0.0, "f32"))
        k.store(branch.results[0], data, [k.thread_id()])
    print(k.func)


# CHECK-LABEL: TEST: test_a_swizzled_tile_copy_is_one_base_per_thread
# 128 x 64 f16 under Sw<3,3,3>, 128 threads: 8 chunks each, every destination and source an immediate offset
# CHECK: .shared .align 1024 .b8 tile[16384];
# CHECK: cp.async.cg.shared.global [%rd[[DST:[0-9]+]]], [%rd[[SRC:[0-9]+]]], 16, %r{{[0-9]+}};
# CHECK-NOT: xor
# CHECK: cp.async.cg.shared.global [%rd[[DST]]+2048], [%rd[[SRC]]+2048], 16, %r{{[0-9]+}};
# CHECK-NOT: xor
# CHECK: cp.async.cg.shared.global [%rd[[DST]]+14336], [%rd[[SRC]]+14336], 16, %r{{[0-9]+}};
# CHECK-NEXT: cp.async.commit_group;
# CHECK-NEXT: cp.async.wait_group 1;
@run
def test_a_swizzled_tile_copy_is_one_base_per_thread():
    with Kernel("copy", [Global("f16"), "index"], block=(128, 1, 1), context=ir.Context()) as k:
        source, rows = k.arguments
        tile = k.shared("tile", 128 * 64, "f16", alignment=1024)
        tokens = k.copy_tile_async(tile, "Sw<3,3,3> o (128,64):(64,1)", source, 0, 64, rows=128, cols=64,
                                   valid_rows=rows)
        k.wait_groups(k.commit_group(tokens), 1)
    print(compile_to_ptx(k.module))


def _softmax_row(fast_math):
    with Kernel("row", [Global("f32")], fast_math=fast_math, context=ir.Context()) as k:
        (data,) = k.arguments
        lane = k.lane_id()
        value = k.load(data, [lane])
        peak = k.warp_reduce(value, "max")
        weight = k.exp2(arith.subf(value, peak))
        k.store(k.divide(weight, k.warp_reduce(weight, "add")), data, [lane])
    return k


def _column_limited_copy(units):
    with Kernel("limited", [Global("f16"), "index"], block=(128, 1, 1), context=ir.Context()) as k:
        source, columns = k.arguments
        columns = arith.muli(columns, k.index(units)) if units > 1 else columns
        tile = k.shared("tile", 32 * 32, "f16", alignment=512)
        tokens = k.copy_tile_async(tile, "(32,32):(32,1)", source, 0, 32, rows=32, cols=32, valid_cols=columns)
        k.wait_groups(k.commit_group(tokens), 0)
    return k


# CHECK-LABEL: TEST: test_whole_chunks_are_copied_all_or_nothing
# A column limit that is a proven multiple of the 8-element chunk: each chunk's size is 16 or 0 bytes
# CHECK: selp.b32 [[SIZE:%r[0-9]+]], 16, 0, %p{{[0-9]+}};
# CHECK: cp.async.cg.shared.global [%rd{{[0-9]+}}], [%rd{{[0-9]+}}], 16, [[SIZE]];
# CHECK-LABEL: TEST: test_partial_chunks_are_clamped
# A column limit with no such proof: the size is the clamp of the limit minus the column, in elements
# CHECK: max.s64
# CHECK: min.s64
# CHECK: cp.async.cg.shared.global
@run
def test_whole_chunks_are_copied_all_or_nothing():
    print(compile_to_ptx(_column_limited_copy(units=8).module))


@run
def test_partial_chunks_are_clamped():
    print(compile_to_ptx(_column_limited_copy(units=1).module))


# CHECK-LABEL: TEST: test_fast_math_and_warp_reductions
# CHECK: shfl.sync.bfly.b32 {{.*}}, 16, 31, -1;
# CHECK: max.ftz.NaN.f32
# CHECK: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
# CHECK: ex2.approx.ftz.f32
# CHECK: add.rn.ftz.f32
# CHECK: div.approx.ftz.f32
# CHECK-LABEL: TEST: test_exact_math_without_fast_math
# CHECK-NOT: ex2.approx.ftz
# CHECK: div.rn.f32
@run
def test_fast_math_and_warp_reductions():
    print(compile_to_ptx(_softmax_row(fast_math=True).module))


@run
def test_exact_math_without_fast_math():
    print(compile_to_ptx(_softmax_row(fast_math=False).module))


def _two_stage_pipeline():
    """Stage s of 2: `full` completes when every thread's copies into it landed, `empty` when every warp has
    read it; turn t waits for the phase t // 2 of its stage."""
    with Kernel("stages", [Global("f32"), "index"], block=(128, 1, 1), fast_math=True, context=ir.Context()) as k:
        source, turns = k.arguments
        tile = k.shared("tile", 2 * 128, "f32")
        full, empty = k.mbarriers("full", 2, 128), k.mbarriers("empty", 2, 4)
        k.arrive(empty, 0, per_warp=True)
        k.arrive(empty, 1, per_warp=True)
        with k.loop(0, turns) as turn:
            stage, phase = arith.remui(turn, k.index(2)), arith.divui(turn, k.index(2))
            k.wait_phase(empty, stage, phase)
            k.commit_group([k.copy_async(tile, [arith.addi(arith.muli(stage, k.index(128)), k.thread_id())], source,
                                         [k.thread_id()], bytes=4)])
            k.arrive_on_copies(full, stage)
            k.wait_phase(full, stage, phase)
            value = k.load(tile, [arith.muli(stage, k.index(128))])
            with k.if_(k.any_lane(k.compare("ult", k.thread_id(), 1))):
                k.store(value, source, [k.thread_id()])
            k.arrive(empty, stage, per_warp=True)
    return k


# CHECK-LABEL: TEST: test_stage_mbarriers
# Thread 0 initializes each mbarrier with its arrivals a phase, then the block meets once
# CHECK: mbarrier.init.shared.b64 [full], [[THREADS:%r[0-9]+]];
# CHECK: mbarrier.init.shared.b64 [full+8], [[THREADS]];
# CHECK: bar.sync 0;
# CHECK: mbarrier.init.shared.b64 [empty], [[WARPS:%r[0-9]+]];
# CHECK: bar.sync 0;
# A warp's arrival: the warp meets, lane 0 arrives for it; then the loop never meets the block
# CHECK-NEXT: bar.warp.sync -1;
# CHECK: mbarrier.arrive.shared.b64 %rd{{[0-9]+}}, [empty];
# CHECK-NOT: bar.sync
# The turn: wait for the stage's empty phase (a try_wait on its parity until it completes), copy, arrive once
# the copies land, wait for the full phase
# CHECK: mbarrier.try_wait.parity.shared.b64 [[DONE:%p[0-9]+]], [%rd{{[0-9]+}}], %r{{[0-9]+}};
# CHECK-NEXT: not.pred [[AGAIN:%p[0-9]+]], [[DONE]];
# CHECK-NEXT: @[[AGAIN]] bra $L__BB{{[0-9_]+}};
# CHECK-NOT: bar.sync
# CHECK: cp.async.ca.shared.global
# CHECK: cp.async.mbarrier.arrive.noinc.shared.b64 [%rd{{[0-9]+}}];
# CHECK-NEXT: $L__BB{{[0-9_]+}}:
# CHECK-NEXT: mbarrier.try_wait.parity.shared.b64
# CHECK-NOT: bar.sync
# The warp-uniform branch, then the warp's arrival on `empty`
# CHECK: vote.sync.any.pred
# CHECK-NOT: bar.sync
# CHECK: mbarrier.arrive.shared.b64
# CHECK-NOT: bar.sync
# CHECK: ret;
@run
def test_stage_mbarriers():
    print(compile_to_ptx(_two_stage_pipeline().module))
