"""The builder's wgmma asynchrony (builder/asynchrony.py): a batch's accumulators (and register A) read,
written or transferred while its group is in flight, and writes into the bytes of a shared tile it reads,
are a BuilderError [wgmma-in-flight] at the call, through waits that leave it in flight, branches that may
not run and a loop's next iteration; what the waits cover builds."""
import pytest

from mlir_tile.builder import BuilderError

from mlir_tile.compiler.compile import compile_to_ptx
from test_builder_warpgroup import ATOM, _kernel, _refused


def test_reading_accumulators_in_flight_is_refused_at_the_read():
    def body(k, a, b, out):
        accumulators = k.accumulators(ATOM)
        k.wgmma(ATOM, a, b, accumulators)
        k.load(accumulators.registers, [0])
    _refused(body, r"\[wgmma-in-flight\] a load of the m64n64k16 accumulators at .*test_builder_asynchrony.py:\d+")


def test_a_wait_that_leaves_the_group_in_flight_does_not_cover_it():
    def body(k, a, b, out):
        accumulators, other = k.accumulators(ATOM), k.accumulators(ATOM)
        k.wgmma(ATOM, a, b, accumulators)
        k.wgmma(ATOM, a, b, other)
        k.wgmma_wait(1)
        k.load(accumulators.registers, [0])  # the older group: retired
        k.store(k.constant(0.0, "f32"), other.registers, [0])  # the newer: still in flight
    _refused(body, r"\[wgmma-in-flight\] a store of the m64n64k16 accumulators")


def test_a_read_before_the_loops_wait_is_refused_for_the_next_iteration():
    def body(k, a, b, out):
        accumulators = k.accumulators(ATOM)
        with k.loop(0, 4):
            k.load(accumulators.registers, [0])  # first iteration fine; the next sees the group in flight
            k.wgmma(ATOM, a, b, accumulators)
        k.wgmma_wait(0)
    _refused(body, r"\[wgmma-in-flight\] a load .* in the loop's next iteration")


def test_a_wait_in_a_branch_does_not_cover_the_path_around_it():
    def body(k, a, b, out):
        accumulators = k.accumulators(ATOM)
        k.wgmma(ATOM, a, b, accumulators)
        with k.if_(k.compare("eq", k.thread_id(), 0)):
            k.wgmma_wait(0)
            k.load(accumulators.registers, [0])  # fine here, after the wait on this path
        k.load(accumulators.registers, [1])
    _refused(body, r"\[wgmma-in-flight\] a load")


def test_a_chained_loop_with_the_wait_after_it_builds():
    def body(k, a, b, out):
        accumulators = k.accumulators(ATOM)
        with k.loop(0, 4):
            k.wgmma(ATOM, a, b, accumulators)
        k.wgmma_wait(0, [accumulators])
        k.tensor(out, (1 << 16,))[k.global_thread_id()] = k.load(accumulators.registers, [0])
    assert "wgmma.mma_async" in compile_to_ptx(_kernel(body))


def test_a_transfer_of_accumulators_in_flight_is_refused():
    from mlir_tile.builder import transfer

    def body(k, a, b, out):
        accumulators = k.accumulators(ATOM)
        k.wgmma(ATOM, a, b, accumulators)
        transfer("stmatrix.sync.aligned.m8n8.x4.shared.b16", a.memory, accumulators.registers,
                 dst_layout="(4,8,4):(64,8,1)", src_layout="(4,8,4):(1,4@laneid,1@laneid)")
    _refused(body, r"\[wgmma-in-flight\] a transfer \(stmatrix")


@pytest.mark.parametrize("write, message", [
    ("store", r"\[wgmma-in-flight\] a store at .*test_builder_asynchrony.py:\d+ writes bytes 16384 to 24575 of the shared "
              r"tile a wgmma group still reads \(bytes 16384 to 24575\)"),
    ("transfer", r"\[wgmma-in-flight\] a transfer \(stmatrix.*\) at .* writes bytes 0 to 2047 of the shared tile"),
    ("next iteration", r"\[wgmma-in-flight\] a store at .*, in the loop's next iteration writes bytes 16384 to 24575"),
])
def test_writing_a_tile_a_batch_reads_before_the_wait_is_refused(write, message):
    from mlir_tile.builder import transfer

    def body(k, a, b, out):
        accumulators = k.accumulators(ATOM)
        if write == "next iteration":
            with k.loop(0, 4):
                k.store(k.load(b.memory, [0]), b.memory, [0])  # the next iteration's batch still reads it
                k.wgmma(ATOM, a, b, accumulators)
            k.wgmma_wait(0)
            return
        k.wgmma(ATOM, a, b, accumulators)
        if write == "store":
            k.store(k.load(b.memory, [0]), b.memory, [0])
        else:
            words = k.view(k.dynamic_shared(alignment=1024), (512,), "i32")
            transfer("stmatrix.sync.aligned.m8n8.x4.shared.b16", words, k.registers(4),
                     dst_layout="(4,8,4):(32,4,1)", src_layout="(4,8,4):(1,4@laneid,1@laneid)")
    _refused(body, message)


def test_writing_other_bytes_or_after_the_wait_builds():
    def body(k, a, b, out):
        accumulators = k.accumulators(ATOM)
        k.wgmma(ATOM, a, b, accumulators)
        elsewhere = k.view(k.dynamic_shared(alignment=1024), (64,), "f16", byte_offset=32768)
        k.store(k.load(b.memory, [0]), elsewhere, [0])  # past both tiles
        k.wgmma_wait(0)
        k.store(k.load(b.memory, [0]), b.memory, [0])
    assert "wgmma.mma_async" in compile_to_ptx(_kernel(body))


def _pipelined(k, schedule, narrow: bool = False):
    """A TmaPipeline over 3 stages of a 64 x 64 A and B tile each (`narrow`: its stages in 32 bits);
    `schedule(k, pipeline, step)`, where step(t) waits for k-tile t and issues its batch, builds the consumer's
    loop over k-tiles 1 to 7."""
    from mlir_tile.builder.schedule import StageRing, TmaPipeline
    from mlir_tile.isa.tma import Box

    box = Box(64, 64, 16, 128)
    ring = StageRing(k, k.dynamic_shared(alignment=1024), 3, [("f16", 64 * 64), ("f16", 64 * 64)], narrow=narrow)
    pipeline = TmaPipeline(k, ring, consumer_warps=4, loads=2)
    accumulators = k.accumulators(ATOM)

    def step(t):
        pipeline.wait(t)
        a, b = (k.tensor(view, box.layout) for view in ring.views(ring.stage(t)))
        k.wgmma(ATOM, a, b, accumulators)

    with k.loop(1, 8) as t:
        schedule(k, pipeline, step, t)
    k.wgmma_wait(0, [accumulators])


def _stage_kernel(schedule, narrow: bool = False):
    from mlir import ir

    from mlir_tile.builder import Kernel, TensorMap

    with Kernel("k", [TensorMap()], block=(128, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        _pipelined(k, schedule, narrow)
    return k.module


def _release_the_one_before(k, pipeline, step, t):  # the mainloop of CUTLASS's and the Hopper GEMM's consumers
    from mlir.dialects import arith

    step(t)
    k.wgmma_wait(1)
    pipeline.release(arith.subi(t, k.index(1)))


@pytest.mark.parametrize("narrow", [False, True])
def test_releasing_the_stage_before_the_batch_in_flight_builds(narrow):
    """Batch t in flight (wgmma_wait(1)), the stage of t - 1 released: proven another of the 3 stages; the
    previous iteration's batch is retired by the wait before the release (a narrow ring's stages, divided in 32
    bits, proven the same way)."""
    assert "mbarrier.arrive" in compile_to_ptx(_stage_kernel(_release_the_one_before, narrow))


@pytest.mark.parametrize("case, message", [
    ("release before the wait", r"\[wgmma-in-flight\] TmaPipeline.release at .*test_builder_asynchrony.py:\d+ frees or "
                                r"writes k-tile t's stage of a pipeline whose k-tile t's stage a wgmma group still "
                                r"reads; wgmma_wait"),
    ("release t - 3", r"TmaPipeline.release .* frees or writes k-tile t-3's stage of a pipeline whose k-tile t's stage "
                      r"a wgmma group still reads"),
    ("no wait at all", r"TmaPipeline.release .*, in the loop's next iteration frees or writes k-tile t-1's stage of a "
                       r"pipeline whose an earlier iteration's k-tile's stage a wgmma group still reads \(not proven "
                       r"another of its 3 stages\)"),
    ("a k-tile of its own", r"TmaPipeline.release .* \(not proven another of its 3 stages\)"),
    ("a store into the stage", r"\[wgmma-in-flight\] a store at .* frees or writes k-tile t's stage"),
])
@pytest.mark.parametrize("narrow", [False, True])
def test_freeing_or_writing_a_stage_a_batch_may_still_read_is_refused(case, message, narrow):
    """The stage of k-tile t released, or written, while the batch reading it is in flight; a release three
    k-tiles back (the same of 3 stages); without any wait, the release of t - 1 meets the previous
    iteration's batch in the loop's next iteration; a k-tile computed apart from t cannot be proven another
    stage."""
    from mlir.dialects import arith

    def schedule(k, pipeline, step, t):
        step(t)
        if case == "release before the wait":
            pipeline.release(t)
        elif case == "release t - 3":
            k.wgmma_wait(1)
            pipeline.release(arith.subi(t, k.index(3)))
        elif case == "no wait at all":
            pipeline.release(arith.subi(t, k.index(1)))
        elif case == "a k-tile of its own":
            k.wgmma_wait(1)
            pipeline.release(arith.muli(t, k.index(2)))
        else:
            view = pipeline.ring.views(pipeline.ring.stage(t))[1]
            k.store(k.load(view, [0]), view, [0])
    with pytest.raises(BuilderError, match=message):
        _stage_kernel(schedule, narrow)
