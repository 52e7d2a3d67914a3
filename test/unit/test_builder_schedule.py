"""The schedules (builder/schedule.py): the tile order is Triton's grouped order (its tutorial's formula), split-K
shares the k-tiles as ceil division says, the stage ring places k-tiles round the stages, and the
predicate-free steps are the copies that lie inside the matrix; the index code interpreted (index_code)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from index_code import kernel, run
from mlir_tile.builder.schedule import KeyTiles, QueryTiles, SplitK, StageRing, TileOrder, predicate_free_steps
from mlir_tile.builder.tensor import local_tile
def grouped_order(m_tiles: int, n_tiles: int, group: int, tile: int) -> tuple[int, int]:
    """Triton's matmul tutorial: pid -> (pid_m, pid_n) with GROUP_SIZE_M."""
    in_group = group * n_tiles
    first_m = tile // in_group * group
    size = min(m_tiles - first_m, group)
    return first_m + tile % in_group % size, tile % in_group // size


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 2000), n=st.integers(1, 2000), group=st.sampled_from([1, 4, 8]), data=st.data())
def test_the_tile_order_is_tritons_grouped_order(m, n, group, data):
    m_tiles, n_tiles = -(-m // 128), -(-n // 64)
    tile = data.draw(st.integers(0, m_tiles * n_tiles - 1))

    def build(k, m_value, n_value, tile_value):
        order = TileOrder(k, (m_value, n_value), (128, 64), group)
        return [order.count, *order.coordinate(tile_value), *order.origin(tile_value, inside=True)]

    stored = run(kernel(3, build), [m, n, tile])
    pid_m, pid_n = grouped_order(m_tiles, n_tiles, group, tile)
    assert [stored[i] for i in range(3)] == [m_tiles * n_tiles, pid_m, pid_n]
    if m >= 128 and n >= 64:  # moved back inside: the tile's elements all lie inside
        assert (stored[3], stored[4]) == (min(pid_m * 128, m - 128), min(pid_n * 64, n - 64))


@settings(max_examples=30, deadline=None)
@given(depth=st.integers(1, 5000), splits=st.integers(1, 16), data=st.data())
def test_split_k_shares_the_k_tiles_as_evenly_as_ceil_allows(depth, splits, data):
    tiles = 7
    block = data.draw(st.integers(0, tiles * splits - 1))

    def build(k, depth_value, splits_value, block_value):
        split_k = SplitK(k, k.as_index(tiles), depth_value, 32, splits_value)
        split, tile = split_k.of_block(block_value)
        return [split, tile, *split_k.columns(split)]

    stored = run(kernel(3, build), [depth, splits, block])
    split = block // tiles
    k_tiles = list(range(0, depth, 32))
    per = -(-len(k_tiles) // splits)
    share = k_tiles[split * per:(split + 1) * per]
    first = split * per * 32
    assert [stored[i] for i in range(4)] == [split, block % tiles, first, min(depth, first + len(share) * 32)
                                             if share else first]


def test_the_stage_ring_places_k_tiles_round_the_stages():
    def build(k, k_tile, first):
        ring = StageRing(k, k.dynamic_shared(), 3, [("f16", 64), ("f32", 8)])
        return [ring.stage(k_tile, 2), ring.offset(ring.stage(k_tile, 0, first)), ring.after(first, k_tile),
                ring.stage(5), ring.bytes]

    assert run(kernel(2, build), [7, 1]) == {0: 0, 1: (1 + 7) % 3 * 160, 2: 2, 3: 2, 4: 160}


@pytest.mark.parametrize("m, depth, inside", [(256, 320, 8), (100, 320, 0), (256, 64, 0), (256, 96, 1)])
def test_predicate_free_steps_count_the_copies_inside_the_matrix(m, depth, inside):
    def build(k, m_value, depth_value):
        tiles = local_tile(k.identity_tensor((m_value, depth_value)), (128, 32), (0, None))
        return [predicate_free_steps(k, k.identity_tensor((m_value, depth_value)), (128, 32), tiles[None, None, 0], 2)]

    assert run(kernel(2, build), [m, depth]) == {0: inside}


@settings(max_examples=30, deadline=None)
@given(seq=st.integers(1, 3000), heads=st.integers(1, 6), reverse=st.booleans(), data=st.data())
def test_query_tiles_walk_each_heads_row_tiles(seq, heads, reverse, data):
    tiles = -(-seq // 128)
    block = data.draw(st.integers(0, heads * tiles - 1))

    def build(k, seq_value):
        order = QueryTiles(k, seq_value, 128, reverse)
        return [order.count, order.heads, *order.of_block(k.block_id())]

    stored = run(kernel(1, build), [seq], block=block, grid=heads * tiles)
    tile = block % tiles
    assert [stored[i] for i in range(4)] == [tiles, heads, block // tiles, tiles - 1 - tile if reverse else tile]


@settings(max_examples=30, deadline=None)
@given(seq=st.integers(1, 3000), heads=st.integers(1, 6), ctas=st.integers(1, 40), data=st.data())
def test_query_tiles_persistent_walk_deals_the_items_round_the_grid(seq, heads, ctas, data):
    """heads x row tiles items; CTA c of g takes c, c + g, ... below them (none where c is past the last)."""
    block = data.draw(st.integers(0, ctas - 1))

    def build(k, seq_value, heads_value):
        order = QueryTiles(k, seq_value, 128, heads=heads_value)
        return [order.heads, order.items, *order.persistent()]

    stored = run(kernel(2, build), [seq, heads], block=block, grid=ctas)
    items = heads * -(-seq // 128)
    assert [stored[i] for i in range(4)] == [heads, items, block, len(range(block, items, ctas))]


@settings(max_examples=25, deadline=None)
@given(seq=st.integers(1, 1200), heads=st.integers(1, 4), ctas=st.integers(1, 12))
def test_a_paired_walk_takes_every_item_once_each_pair_as_heavy_as_another(seq, heads, ctas):
    """QueryTiles(paired=True): over every CTA's walk, each (head, row tile) item exactly once; a CTA's items
    2m and 2m + 1 are one head's row tiles t and tiles - 1 - t (the longest first) wherever a head's row tiles
    are even in number, so every such pair holds as many causal rows as another."""
    def build(k, seq_value, heads_value, j):
        order = QueryTiles(k, seq_value, 128, reverse=True, heads=heads_value, paired=True)
        first, taken = order.persistent()
        return [taken, *order.of_block(order.walked(first, j))]

    tiles, compiled = -(-seq // 128), kernel(3, build)
    walks = {}
    for cta in range(ctas):
        taken = run(compiled, [seq, heads, 0], block=cta, grid=ctas)[0]
        walks[cta] = [tuple(run(compiled, [seq, heads, j], block=cta, grid=ctas)[i] for i in (1, 2))
                      for j in range(taken)]
    visited = [item for walk in walks.values() for item in walk]
    assert sorted(visited) == [(head, tile) for head in range(heads) for tile in range(tiles)]
    for walk in walks.values():
        for (head, tile), (other_head, other) in zip(walk[::2], walk[1::2]):
            if tiles % 2 == 0:
                assert other_head == head and tile + other == tiles - 1 and tile > other


@settings(max_examples=40, deadline=None)
@given(seq=st.integers(1, 3000), causal=st.booleans(), data=st.data())
def test_key_tiles_are_those_some_row_sees_and_unmasked_those_all_see_whole(seq, causal, data):
    rows, keys = 128, 64
    first_row = data.draw(st.integers(0, (seq - 1) // rows)) * rows
    tile, warp = data.draw(st.integers(0, -(-seq // keys))), data.draw(st.integers(0, 3))

    def build(k, seq_value, first_value, tile_value, warp_value):
        tiles = KeyTiles(k, seq_value, keys, first_value, rows=rows, causal=causal)
        return [tiles.count, tiles.unmasked, tiles.reaches(tile_value, warp_value, 32)]

    stored = run(kernel(4, build), [seq, first_row, tile, warp])
    last_row = first_row + rows - 1  # (the tile's rows past the sequence see what the others see)
    seen = [t for t in range(-(-seq // keys)) if not causal or t * keys <= last_row]
    whole = [t for t in seen if (t + 1) * keys <= seq and (not causal or (t + 1) * keys - 1 <= first_row)]
    assert [stored[0], stored[1]] == [len(seen), len(whole)]
    assert stored[2] == int(tile * keys <= first_row + 32 * (warp + 1) - 1)


def test_a_tma_pipelines_waits_take_their_parity_from_the_k_tile(filecheck):
    """The producer's acquire of k-tile t waits on the empty barrier with parity (t / stages + 1) mod 2 (the
    first round passes at once), the consumer's wait on the full barrier with t / stages mod 2; loads count on
    the full barrier with their bytes; releases are one arrival a warp."""
    from mlir import ir

    from mlir_tile.builder import Kernel, TensorMap
    from mlir_tile.builder.schedule import TmaPipeline
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.isa.tma import Box

    box = Box(64, 64, 16, 128)
    with Kernel("k", [TensorMap(), "index"], block=(128, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        tensor_map, k_tile = k.arguments
        ring = StageRing(k, k.dynamic_shared(alignment=1024), 3, [("f16", 64 * 64)])
        pipeline = TmaPipeline(k, ring, consumer_warps=4, loads=1)
        pipeline.acquire(k_tile)
        pipeline.load(k_tile, k.tensor(ring.views(ring.stage(k_tile))[0], box.layout), tensor_map, (0, 0))
        pipeline.wait(k_tile)
        pipeline.release(k_tile)
    filecheck(compile_to_ptx(k.module), """
    CHECK-COUNT-3: mbarrier.init.shared.b64 [pipeline_full{{.*}}], [[LOADS:%r[0-9]+]];
    CHECK-COUNT-3: mbarrier.init.shared.b64 [pipeline_empty{{.*}}], [[WARPS:%r[0-9]+]];
    CHECK: mul.hi.u64 {{%rd[0-9]+}}, {{%rd[0-9]+}}, -6148914691236517205;
    CHECK: and.b32 [[PARITY:%r[0-9]+]], {{%r[0-9]+}}, 1;
    CHECK: xor.b32 [[BEFORE:%r[0-9]+]], [[PARITY]], 1;
    CHECK: mbarrier.try_wait.parity.shared.b64 {{%p[0-9]+}}, [[[EMPTY:%rd[0-9]+]]], [[BEFORE]];
    CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes {{.*}}, [[[FULL:%rd[0-9]+]]];
    CHECK: mbarrier.arrive.expect_tx.shared.b64 {{%rd[0-9]+}}, [[[FULL]]], {{%r[0-9]+}};
    CHECK: mbarrier.try_wait.parity.shared.b64 {{%p[0-9]+}}, [[[FULL]]], [[PARITY]];
    CHECK: bar.warp.sync -1;
    CHECK: mbarrier.arrive.shared.b64 {{%rd[0-9]+}}, [[[EMPTY]]];
    """)


def test_a_narrow_rings_stages_and_phases_are_divided_in_32_bits(filecheck):
    """StageRing(narrow=True): k-tile t's stage (t mod 3) and phase (t / 3) by a 32-bit multiply-high, no 64-bit
    one; anything but True or False for narrow is refused."""
    from mlir import ir

    from mlir_tile.builder import BuilderError, Kernel
    from mlir_tile.builder.schedule import TmaPipeline
    from mlir_tile.compiler.compile import compile_to_ptx

    with Kernel("k", ["index"], block=(128, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        k_tile, = k.arguments
        ring = StageRing(k, k.dynamic_shared(alignment=1024), 3, [("f16", 64 * 64)], narrow=True)
        TmaPipeline(k, ring, consumer_warps=4, loads=1).wait(k_tile)
        with pytest.raises(BuilderError, match="narrow is True or False, got 1"):
            StageRing(k, k.dynamic_shared(alignment=1024), 3, [("f16", 64 * 64)], narrow=1)
    ptx = compile_to_ptx(k.module)
    filecheck(ptx, """
    CHECK: cvt.u32.u64 [[TILE:%r[0-9]+]], %rd{{[0-9]+}};
    CHECK: mul.hi.u32 {{%r[0-9]+}}, [[TILE]], -1431655765;
    CHECK: mbarrier.try_wait.parity.shared.b64
    """)
    assert "mul.hi.u64" not in ptx


def test_a_multicast_pipelines_stage_is_free_once_every_cta_of_the_cluster_released_it(filecheck):
    """TmaPipeline(multicast=True) in clusters of 2: each stage's empty barrier counts the consumer warps of
    both CTAs, a release arrives on the stage of each (lane r on CTA r's, through mapa), and a multicast load's
    arrival expects the box from each CTA of its mask."""
    from mlir import ir

    from mlir_tile.builder import Kernel, TensorMap
    from mlir_tile.builder.schedule import TmaPipeline
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.isa.tma import Box

    box = Box(32, 64, 16, 128)
    with Kernel("k", [TensorMap(), "index"], block=(128, 1, 1), chip="sm_90a", cluster=(2, 1, 1),
                context=ir.Context()) as k:
        tensor_map, k_tile = k.arguments
        ring = StageRing(k, k.dynamic_shared(alignment=1024), 2, [("f16", 32 * 64)])
        pipeline = TmaPipeline(k, ring, consumer_warps=4, loads=1, multicast=True)
        pipeline.load(k_tile, k.tensor(ring.views(ring.stage(k_tile))[0], box.layout), tensor_map, (0, 0),
                      multicast=0b11)
        pipeline.release(k_tile)
    filecheck(compile_to_ptx(k.module), """
    CHECK: mov.b32 [[WARPS:%r[0-9]+]], 8;
    CHECK-COUNT-2: mbarrier.init.shared.b64 [pipeline_empty{{.*}}], [[WARPS]];
    CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster
    CHECK: mov.b32 [[BYTES:%r[0-9]+]], 8192;
    CHECK-NEXT: mbarrier.arrive.expect_tx.shared.b64 {{%rd[0-9]+}}, [{{%rd[0-9]+}}], [[BYTES]];
    CHECK: bar.warp.sync -1;
    CHECK: setp.gt.u32 {{%p[0-9]+}}, [[LANE:%r[0-9]+]], 1;
    CHECK: mapa.shared::cluster.u64 {{%rd[0-9]+}}, {{%rd[0-9]+}}, [[LANE]];
    CHECK: mbarrier.arrive.release.cluster.shared::cluster.b64
    """)


@pytest.mark.parametrize("multicast, load, message", [
    (True, None, r"\[cluster\] TmaPipeline\(multicast=True\): the kernel is not built for clusters"),
    (False, 0b11, r"\[cluster\] TmaPipeline.load: a multicast load fills peers' stages"),
])
def test_a_multicast_needs_a_cluster_and_a_pipeline_that_waits_for_the_peers(multicast, load, message):
    from mlir import ir

    from mlir_tile.builder import BuilderError, Kernel, TensorMap
    from mlir_tile.builder.schedule import TmaPipeline
    from mlir_tile.isa.tma import Box

    box = Box(64, 64, 16, 128)
    with Kernel("k", [TensorMap()], block=(128, 1, 1), chip="sm_90a", cluster=None if multicast else (2, 1, 1),
                context=ir.Context()) as k:
        ring = StageRing(k, k.dynamic_shared(alignment=1024), 2, [("f16", 64 * 64)])
        with pytest.raises(BuilderError, match=message):
            pipeline = TmaPipeline(k, ring, 4, 1, multicast=multicast)
            pipeline.load(0, k.tensor(ring.views(0)[0], box.layout), k.arguments[0], (0, 0), multicast=load)


def test_a_tma_pipeline_is_made_of_a_stage_ring():
    from mlir import ir

    from mlir_tile.builder import BuilderError, Kernel
    from mlir_tile.builder.schedule import TmaPipeline

    with Kernel("k", [], block=(128, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        with pytest.raises(BuilderError, match="TmaPipeline: a StageRing"):
            TmaPipeline(k, k.dynamic_shared(), 4, 1)


def test_the_consumers_named_barriers_are_one_numbering():
    """`ConsumerBarriers`: 1 for every consumer, 2 + c a ping-pong consumer's turn (3 - c the other's, arrived
    on), 4 + c a consumer's own warps, in both Hopper kernels alike."""
    import re

    from mlir import ir

    from mlir_tile.builder import BuilderError, Kernel
    from mlir_tile.builder.schedule import ConsumerBarriers

    with Kernel("k", [], block=(384, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        barriers = ConsumerBarriers(k, 2)
        barriers.meet_all()
        barriers.wait_turn(1)
        barriers.pass_turn(1)
        barriers.meet(0)
        with pytest.raises(BuilderError, match="consumers"):
            ConsumerBarriers(k, 5)
    text = str(k.module)
    assert re.findall(r"nvvm\.barrier(\.arrive)? id = %c(\d+)_i32 number_of_threads = %c(\d+)_i32", text) == [
        ("", "1", "256"), ("", "3", "256"), (".arrive", "2", "256"), ("", "4", "128")]


def test_a_tile_wider_than_a_box_is_stored_box_by_box_at_its_columns(filecheck):
    """`Kernel.boxes` of a 64 x 256 bf16 tile (128-byte-swizzled boxes of 64 columns side by side) from byte
    16384: four boxes at columns 0, 64, 128 and 192, each view 8 KiB after the one before (a box is 64 rows of
    128 bytes), each a TMA store of that column."""
    from mlir import ir

    from mlir_tile.builder import Kernel, TensorMap
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.isa.tma import Box
    from mlir_tile.kernels.common import stored_tile

    with Kernel("k", [TensorMap()], block=(128, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        tensor_map, = k.arguments
        shared = k.dynamic_shared(alignment=1024)
        stored = [(column, k.tma_store(box, tensor_map, (0, column)))
                  for column, box in k.boxes(shared, 16384, stored_tile(64, 256)["c"], "bf16", 64)]
    assert stored == [(column, Box(64, 64, 16, 128)) for column in (0, 64, 128, 192)]
    filecheck(compile_to_ptx(k.module), """
    CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [{{.*}}], [__dynamic_shmem__0+16384];
    CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [{{.*}}], [__dynamic_shmem__0+24576];
    CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [{{.*}}], [__dynamic_shmem__0+32768];
    CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [{{.*}}], [__dynamic_shmem__0+40960];
    CHECK-NOT: cp.async.bulk.tensor
    """)


def test_an_fp32_tile_is_added_into_its_box_by_a_tma_reduction(filecheck):
    """`Kernel.tma_reduce_add`: an fp32 tile of 64 rows by 32 columns (128-byte rows, swizzled) added into the
    box at (row 64, column 32) of the map's matrix by one `cp.reduce.async.bulk.tensor ... .add` (a bulk group, as
    a store); a 16-bit tile is refused (the sums are fp32's), as is a float32 map of 16-bit boxes on the host."""
    import re

    from mlir import ir

    from mlir_tile.builder import BuilderError, Kernel, TensorMap
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.isa.tma import Box
    from mlir_tile.runtime import Runtime

    box = Box(64, 32, 32, 128)
    with Kernel("k", [TensorMap()], block=(128, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        tensor_map, = k.arguments
        shared = k.dynamic_shared(alignment=1024)
        tile = k.tensor(k.view(shared, (64 * 32,), "f32", 8192), box.layout)
        assert k.tma_reduce_add(tile, tensor_map, (64, 32)) == box
        k.tma_store_wait(0)
        halves = k.tensor(k.view(shared, (64 * 64,), "bf16", 0), Box(64, 64, 16, 128).layout)
        with pytest.raises(BuilderError, match=r"\[tma-reduce-element\] tma_reduce_add: an f32 tile"):
            k.tma_reduce_add(halves, tensor_map, (0, 0))
    ptx = compile_to_ptx(k.module)
    reduction = re.search(r"cp\.reduce\.async\.bulk\.tensor\.2d\.global\.shared::cta\.add\.tile\.bulk_group "
                          r"\[%rd\d+, \{(%r\d+), (%r\d+)\}\], \[%rd\d+\];", ptx)
    assert reduction and all(re.search(rf"mov\.b32 \t?{register}, {value};", ptx)
                             for register, value in zip(reduction.groups(), (32, 64)))
    filecheck(ptx, """
    CHECK: cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group
    CHECK-NEXT: cp.async.bulk.commit_group;
    CHECK: cp.async.bulk.wait_group.read 0;
    CHECK-NOT: cp.reduce.async.bulk
    """)
    with pytest.raises(ValueError, match="float32 elements are 32 bits, got a box of 16-bit ones"):
        Runtime.tensor_map(None, 0, (64, 64), 128, Box(64, 64, 16, 128), floats=True)


def test_flags_order_reductions_among_ctas(filecheck):
    """`wait_flag` spins on `ld.acquire.gpu` at flags[i] (4 bytes an index) until it holds the value, then fences
    the async proxy, so a TMA reduction after it follows the released writes; `tma_store_wait(complete=True)`
    waits for the writes themselves (no `.read`), `release_flag` fences then adds by `red.release.gpu`, and
    `clear_flag` stores 0 (`st.relaxed.gpu`) at flags[i]. A flag array that is not global i32 and a non-positive
    increment are refused."""
    from mlir import ir

    from mlir_tile.builder import BuilderError, Global, Kernel
    from mlir_tile.compiler.compile import compile_to_ptx

    with Kernel("k", [Global("i32"), Global("f32"), "index"], block=(32, 1, 1), chip="sm_90a",
                context=ir.Context()) as k:
        flags, floats, turn = k.arguments
        k.wait_flag(flags, 5, k.as_i32(k.as_index(turn)))
        k.tma_store_wait(0, complete=True)
        k.release_flag(flags, 5)
        k.clear_flag(flags, k.as_index(turn))
        with pytest.raises(BuilderError, match=r"clear_flag: flags are a global i32 array"):
            k.clear_flag(floats, 0)
        with pytest.raises(BuilderError, match=r"wait_flag: flags are a global i32 array"):
            k.wait_flag(floats, 0, 1)
        with pytest.raises(BuilderError, match=r"release_flag: increment a positive 32-bit int"):
            k.release_flag(flags, 0, 0)
    filecheck(compile_to_ptx(k.module), """
    CHECK: add.s64 [[FLAG:%rd[0-9]+]], %rd{{[0-9]+}}, 20;
    CHECK: [[SPIN:\\$L__BB0_[0-9]+]]:
    CHECK: ld.acquire.gpu.u32 [[SEEN:%r[0-9]+]], {{\\[}}[[FLAG]]{{\\]}};
    CHECK: setp.ne.b32 [[AGAIN:%p[0-9]+]], [[SEEN]], %r{{[0-9]+}};
    CHECK: @[[AGAIN]] bra [[SPIN]];
    CHECK-NEXT: // begin inline asm
    CHECK-NEXT: fence.proxy.async.global;
    CHECK: cp.async.bulk.wait_group 0;
    CHECK: fence.proxy.async.global;
    CHECK: red.release.gpu.add.u32 {{\\[}}[[FLAG]]{{\\]}}, %r{{[0-9]+}};
    CHECK: mov.b32 [[ZERO:%r[0-9]+]], 0;
    CHECK: st.relaxed.gpu.global.u32 {{\\[}}%rd{{[0-9]+}}{{\\]}}, [[ZERO]];
    """)
