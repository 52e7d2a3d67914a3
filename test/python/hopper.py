# RUN: %python %s | filecheck %s
"""Hopper's builder rules, each legal and illegal: the wgmma calls ([wgmma-*]: chip, warpgroup, operand,
descriptor, alignment, row block, K-major, accumulators, in flight: tiles and pipeline stages) and TMA's
([tma-*]: tile, box, alignment, column, swizzle-span, store-coordinate). A legal call prints the op it built; an illegal one its BuilderError, the [rule] tag first."""
import re

from mlir import ir
from mlir.dialects import arith

from mlir_tile.isa.atoms import wgmma
from mlir_tile.builder import BuilderError, Global, Kernel, TensorMap
from mlir_tile.algebra.layout import Layout
from mlir_tile.isa.tma import Box

ATOM = wgmma(64, "f16")
A, B = Box(128, 64, 16, 128).layout, Box(64, 64, 16, 128).layout


def case(name, body, chip="sm_90a", threads=256, cluster=None):
    """Build `body(k, a, b, accumulators, tensor_map)`; print the first wgmma or TMA op, or the error."""
    print(f"\nCASE: {name}")
    try:
        with Kernel("k", [TensorMap(), Global("f16")], block=(threads, 1, 1), chip=chip, context=ir.Context(),
                    cluster=cluster) as k:
            shared = k.dynamic_shared(alignment=1024)
            a = k.tensor(k.view(shared, (A.cosize,), "f16"), A)
            b = k.tensor(k.view(shared, (B.cosize,), "f16", byte_offset=16384), B)
            accumulators = k.accumulators(ATOM) if chip == "sm_90a" and threads % 128 == 0 else None
            body(k, a, b, accumulators, k.arguments[0])
    except BuilderError as error:
        print(f"error: {error}")
        return
    ops = re.findall(r"nvvm\.(?:wgmma\.mma_async|cp\.async\.bulk\.tensor\.[\w.]+|setmaxregister +[a-z]+ \d+|barrier id = [^:\n]+)",
                     str(k.module))
    print(f"built: {ops[0] if ops else 'nothing'}")


def product(k, a, b, accumulators, _, **options):
    k.wgmma(ATOM, a, b, accumulators, a_row_block=arith.divui(k.thread_id(), k.index(128)), **options)


# CHECK-LABEL: CASE: a K-major 128-byte batch
# CHECK: built: nvvm.wgmma.mma_async
case("a K-major 128-byte batch", product)
# CHECK-LABEL: CASE: wgmma on sm_90
# CHECK: error: [wgmma-chip] wgmma: warpgroup instructions (wgmma, setmaxnreg) run on sm_90a only, the kernel targets sm_90
case("wgmma on sm_90", lambda k, a, b, _, m: k.wgmma(ATOM, a, b, None), chip="sm_90")
# CHECK-LABEL: CASE: a block of 96 threads
# CHECK: error: [wgmma-warpgroup] wgmma: a warpgroup is 128 consecutive threads
case("a block of 96 threads", lambda k, a, b, _, m: k.wgmma(ATOM, a, b, None), threads=96)
# CHECK-LABEL: CASE: a global tensor as A
# CHECK: error: [wgmma-operand] wgmma: a is a rank-2 shared Tensor
case("a global tensor as A", lambda k, a, b, acc, m: k.wgmma(ATOM, k.tensor(k.arguments[1], (128, 64)), b, acc))
# CHECK-LABEL: CASE: A's rows unswizzled 128 bytes apart
# CHECK: error: [wgmma-descriptor] wgmma: a: no wgmma descriptor reads (128,64):(64,1) (16-bit elements) at (0, 0): {{.*}} reads operand element (1, 0) at byte 16 of the tile, the layout puts it at 128
case("A's rows unswizzled 128 bytes apart",
     lambda k, a, b, acc, m: k.wgmma(ATOM, k.tensor(a.memory, Layout((128, 64), (64, 1))), b, acc))
# CHECK-LABEL: CASE: a tile 512 bytes in
# CHECK: error: [wgmma-alignment] wgmma: b's 128-byte swizzled tile must start on 1024 bytes, but 512 bytes are proven
case("a tile 512 bytes in", lambda k, a, b, acc, m: k.wgmma(ATOM, a, k.tensor(k.view(
    k.dynamic_shared(alignment=1024), (B.cosize,), "f16", byte_offset=512), B), acc))
# CHECK-LABEL: CASE: a row block past A
# CHECK: error: [wgmma-row-block] wgmma: a_row_block is 0 to 1 (a has 2 blocks of 64 rows), got 2
case("a row block past A", lambda k, a, b, acc, m: k.wgmma(ATOM, a, b, acc, a_row_block=2))
# CHECK-LABEL: CASE: an MN-major fp8 B
# CHECK: error: [wgmma-k-major] wgmma m64n64k32.e4m3: b must be K-major
case("an MN-major fp8 B", lambda k, a, b, acc, m: k.wgmma(
    wgmma(64, "e4m3"), k.tensor(k.view(k.dynamic_shared(alignment=1024), (16384,), "i8"), Box(128, 128, 8, 128).layout),
    k.tensor(k.view(k.dynamic_shared(alignment=1024), (8192,), "i8"),
             Layout(((16, 4), (8, 16)), ((1, 128), (16, 512)))), k.accumulators(wgmma(64, "e4m3"))))
# CHECK-LABEL: CASE: another atom's accumulators
# CHECK: error: [wgmma-accumulators] wgmma: accumulators are Kernel.accumulators(atom) of this atom (m64n64k16)
case("another atom's accumulators", lambda k, a, b, acc, m: k.wgmma(ATOM, a, b, k.accumulators(wgmma(32))))
# CHECK-LABEL: CASE: reading the accumulators after the wait
# CHECK: built: nvvm.wgmma.mma_async
case("reading the accumulators after the wait", lambda k, a, b, acc, m: (
    product(k, a, b, acc, m), k.wgmma_wait(0, [acc]), k.load(acc.registers, [0])))
# CHECK-LABEL: CASE: reading the accumulators in flight
# CHECK: error: [wgmma-in-flight] a load of the m64n64k16 accumulators at {{.*}}hopper.py:[[# @LINE + 1]]: a wgmma group using them is still in flight
case("reading the accumulators in flight", lambda k, a, b, acc, m: (product(k, a, b, acc, m), k.load(acc.registers, [0])))
# CHECK-LABEL: CASE: a TMA load of the A tile
# CHECK: built: nvvm.cp.async.bulk.tensor.shared.cluster.global
case("a TMA load of the A tile", lambda k, a, b, acc, m: k.tma_load(a, m, (0, 64), k.mbarriers("loaded", 1, 1)))
# CHECK-LABEL: CASE: a TMA store of a global tensor
# CHECK: error: [tma-tile] tma_store: the tile is a rank-2 shared Tensor
case("a TMA store of a global tensor", lambda k, a, b, acc, m: k.tma_store(k.tensor(k.arguments[1], (64, 64)), m, (0, 0)))
# CHECK-LABEL: CASE: a TMA store of a tile no box reads
# CHECK: error: [tma-box] tma_store: no TMA box writes (64,64):(1,64)
case("a TMA store of a tile no box reads", lambda k, a, b, acc, m: k.tma_store(
    k.tensor(b.memory, Layout((64, 64), (1, 64))), m, (0, 0)))
# CHECK-LABEL: CASE: a TMA store 512 bytes in
# CHECK: error: [tma-alignment] tma_store: the box's 128-byte swizzled tile must start on 1024 bytes
case("a TMA store 512 bytes in", lambda k, a, b, acc, m: k.tma_store(k.tensor(k.view(
    k.dynamic_shared(alignment=1024), (B.cosize,), "f16", byte_offset=512), B), m, (0, 0)))
# CHECK-LABEL: CASE: a TMA store at column 4
# CHECK: error: [tma-column] tma_store: the column must be a proven multiple of 16 bytes (8 elements)
case("a TMA store at column 4", lambda k, a, b, acc, m: k.tma_store(b, m, (0, 4)))
# CHECK-LABEL: CASE: a TMA store of the B tile
# CHECK: built: nvvm.cp.async.bulk.tensor.global.shared.cta
case("a TMA store of the B tile", lambda k, a, b, acc, m: k.tma_store(b, m, (0, 64)))
# CHECK-LABEL: CASE: S as the register A of S V
# CHECK: built: nvvm.wgmma.mma_async
case("S as the register A of S V", lambda k, a, b, acc, m: (
    product(k, a, b, acc, m), k.wgmma_wait(0, [acc]),
    k.wgmma(ATOM, k.accumulators_as_a(acc, ATOM), b, k.accumulators(ATOM))))
# CHECK-LABEL: CASE: S as an fp8 register A of a 16-bit B
# CHECK: error: [wgmma-operand] wgmma m64n64k32.e4m3: b's memory holds 8-bit elements
case("S as an fp8 register A of a 16-bit B", lambda k, a, b, acc, m: k.wgmma(
    wgmma(64, "e4m3"), k.accumulators_as_a(acc, wgmma(64, "e4m3")), b, k.accumulators(wgmma(64, "e4m3"))))
# CHECK-LABEL: CASE: a TMA store through a 3-D map
# CHECK: built: nvvm.cp.async.bulk.tensor.global.shared.cta
case("a TMA store through a 3-D map", lambda k, a, b, acc, m: k.tma_store(b, m, (3, 0, 64)))
# CHECK-LABEL: CASE: a TMA store at row -64
# CHECK: error: [tma-store-coordinate] tma_store: a TMA store's coordinate 1 (innermost first) is -64: a store starting at a negative coordinate is an illegal instruction
case("a TMA store at row -64", lambda k, a, b, acc, m: k.tma_store(b, m, (k.index(-64), 0)))
# CHECK-LABEL: CASE: a TMA store at a row folded to -8
# CHECK: error: [tma-store-coordinate] tma_store: a TMA store's coordinate 1 (innermost first) is -8
case("a TMA store at a row folded to -8", lambda k, a, b, acc, m: k.tma_store(
    b, m, (arith.subi(k.index(56), arith.muli(k.index(2), k.index(32))), 0)))
# CHECK-LABEL: CASE: a TMA load at row -64
# CHECK: built: nvvm.cp.async.bulk.tensor.shared.cluster.global
case("a TMA load at row -64", lambda k, a, b, acc, m: k.tma_load(b, m, (k.index(-64), 0), k.mbarriers("loaded", 1, 1)))
# CHECK-LABEL: CASE: a TMA store of 16-byte rows densely swizzled
# CHECK: error: [tma-box] tma_store: no TMA box writes Sw<1,3,3> o ((8,2),8):((8,64),1) {{.*}} [tma-swizzle-span] a box's rows of 16 bytes lie a whole 32-byte span apart
case("a TMA store of 16-byte rows densely swizzled", lambda k, a, b, acc, m: k.tma_store(
    k.tensor(k.view(k.dynamic_shared(alignment=1024), (128,), "f16"), "Sw<1,3,3> o ((8,2),8):((8,64),1)"), m, (0, 0)))
# CHECK-LABEL: CASE: a TMA load of 16-byte rows a span apart
# CHECK: built: nvvm.cp.async.bulk.tensor.shared.cluster.global
case("a TMA load of 16-byte rows a span apart", lambda k, a, b, acc, m: k.tma_load(
    k.tensor(k.view(k.dynamic_shared(alignment=1024), (256,), "f16"), Box(16, 8, 16, 32).layout), m, (0, 0),
    k.mbarriers("loaded", 1, 1)))
# CHECK-LABEL: CASE: a TMA load of 16-byte rows a span apart in half their bytes
# CHECK: error: tensor: layout Sw<1,3,3> o (16,8):(16,1) reaches offset 255, past the end of memref<128xf16
case("a TMA load of 16-byte rows a span apart in half their bytes", lambda k, a, b, acc, m: k.tma_load(
    k.tensor(k.view(k.dynamic_shared(alignment=1024), (128,), "f16"), Box(16, 8, 16, 32).layout), m, (0, 0),
    k.mbarriers("loaded", 1, 1)))
# CHECK-LABEL: CASE: a TMA store at four coordinates
# CHECK: error: tma_store: coordinate is (row, column) of the matrix, or (matrix, row, column)
case("a TMA store at four coordinates", lambda k, a, b, acc, m: k.tma_store(b, m, (0, 3, 0, 64)))


def packed_again(k, acc, b, wait: bool):
    """S packed into P, P V issued, S packed into the same P again (a loop's next P), with or without the wait."""
    p = k.accumulators_as_a(acc, ATOM)
    output = k.accumulators(ATOM)
    k.wgmma(ATOM, p, b, output)
    if wait:
        k.wgmma_wait(0, [output])
    return k.accumulators_as_a(acc, ATOM, into=p)


# CHECK-LABEL: CASE: P packed again once its P V is done
# CHECK: built: nvvm.wgmma.mma_async
case("P packed again once its P V is done", lambda k, a, b, acc, m: (
    product(k, a, b, acc, m), k.wgmma_wait(0, [acc]), packed_again(k, acc, b, wait=True)))
# CHECK-LABEL: CASE: P packed again while its P V is in flight
# CHECK: error: [wgmma-in-flight] {{.*}}register A operand
case("P packed again while its P V is in flight", lambda k, a, b, acc, m: (
    product(k, a, b, acc, m), k.wgmma_wait(0, [acc]), packed_again(k, acc, b, wait=False)))
# CHECK-LABEL: CASE: P packed into a fragment of another atom
# CHECK: error: accumulators_as_a: into is a Fragment of m64n64k16 over 4 K steps
case("P packed into a fragment of another atom", lambda k, a, b, acc, m: k.accumulators_as_a(
    acc, ATOM, into=k.accumulators_as_a(k.accumulators(wgmma(128, "f16")), wgmma(128, "f16"))))
# CHECK-LABEL: CASE: the producer's registers lowered
# CHECK: built: nvvm.setmaxregister {{ +}}decrease 40
case("the producer's registers lowered", lambda k, a, b, acc, m: k.set_max_registers(40, "decrease"))
# CHECK-LABEL: CASE: registers not in eights
# CHECK: error: [setmaxnreg] set_max_registers: a count multiple of 8 from 24 to 256 and action 'increase' or 'decrease', got 100, 'increase'
case("registers not in eights", lambda k, a, b, acc, m: k.set_max_registers(100, "increase"))
# CHECK-LABEL: CASE: setmaxnreg on sm_90
# CHECK: error: [wgmma-chip] set_max_registers: warpgroup instructions (wgmma, setmaxnreg) run on sm_90a only
case("setmaxnreg on sm_90", lambda k, a, b, acc, m: k.set_max_registers(40, "decrease"), chip="sm_90")
# CHECK-LABEL: CASE: the consumers' barrier
# CHECK: built: nvvm.barrier id = %{{.*}} number_of_threads = %
case("the consumers' barrier", lambda k, a, b, acc, m: k.named_barrier(1, 128))
# CHECK-LABEL: CASE: barrier 0 as a named barrier
# CHECK: error: [named-barrier] named_barrier: index 1 to 15 and threads a multiple of 32 up to the block's 256, got 0, 128
case("barrier 0 as a named barrier", lambda k, a, b, acc, m: k.named_barrier(0, 128))
# CHECK-LABEL: CASE: writing B's tile while a batch reads it
# CHECK: error: [wgmma-in-flight] a store at {{.*}}hopper.py:{{[0-9]+}}, in the loop's next iteration writes bytes 16384 to 24575 of the shared tile a wgmma group still reads (bytes 16384 to 24575)
def refill_under_the_batch(k, a, b, acc, m):
    with k.loop(0, 2):
        k.store(k.load(b.memory, [0]), b.memory, [0])
        product(k, a, b, acc, m)


case("writing B's tile while a batch reads it", refill_under_the_batch)
# CHECK-LABEL: CASE: a TMA load multicast to both CTAs of a cluster
# CHECK: built: nvvm.cp.async.bulk.tensor.shared.cluster.global
case("a TMA load multicast to both CTAs of a cluster", lambda k, a, b, acc, m: k.tma_load(
    a, m, (0, 64), k.mbarriers("loaded", 1, 1), multicast=0b11), cluster=(2, 1, 1))
# CHECK-LABEL: CASE: a multicast past the cluster
# CHECK: error: [cluster] tma_load: multicast is a mask of the cluster's 2 CTA ranks (1 to 3), got 4
case("a multicast past the cluster", lambda k, a, b, acc, m: k.tma_load(
    a, m, (0, 64), k.mbarriers("loaded", 1, 1), multicast=0b100), cluster=(2, 1, 1))
# CHECK-LABEL: CASE: a cluster of 16 CTAs
# CHECK: error: [cluster] Kernel: a cluster of 16 CTAs is more than the portable 8
case("a cluster of 16 CTAs", product, cluster=(16, 1, 1))


def pipelined(release_back):
    """A consumer's loop over a 3-stage TmaPipeline: wait for k-tile t, its batch, wgmma_wait(1), then the
    release of k-tile t - release_back."""
    def body(k, a, b, acc, m):
        from mlir_tile.builder.schedule import StageRing, TmaPipeline

        ring = StageRing(k, k.dynamic_shared(alignment=1024), 3, [("f16", A.cosize), ("f16", B.cosize)], start=32768)
        pipeline = TmaPipeline(k, ring, consumer_warps=8, loads=2)
        with k.loop(1, 8) as t:
            pipeline.wait(t)
            stage_a, stage_b = ring.views(ring.stage(t))
            product(k, k.tensor(stage_a, A), k.tensor(stage_b, B), acc, m)
            k.wgmma_wait(1)
            pipeline.release(arith.subi(t, k.index(release_back)))
        k.wgmma_wait(0)
    return body


# CHECK-LABEL: CASE: releasing the stage before the batch in flight
# CHECK: built: nvvm.wgmma.mma_async
case("releasing the stage before the batch in flight", pipelined(1))
# CHECK-LABEL: CASE: releasing the stage of the batch in flight
# CHECK: error: [wgmma-in-flight] TmaPipeline.release at {{.*}}hopper.py:{{[0-9]+}} frees or writes k-tile t-3's stage of a pipeline whose k-tile t's stage a wgmma group still reads; wgmma_wait(...) for that group first
case("releasing the stage of the batch in flight", pipelined(3))
