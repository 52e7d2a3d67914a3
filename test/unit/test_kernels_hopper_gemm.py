"""The Hopper GEMM tile kernel (kernels/gemm/sm90.py) without a GPU: its PTX has the data path the module
describes (TMA loads on full barriers, a wgmma batch per k-tile, empty barriers, stmatrix into the C tile, TMA
stores waited for), ptxas -arch=sm_90a assembles it without spills or injected waits; the reference model
runs one CTA as the kernel does (TMA box writes, wgmma through the kernel's descriptors, stmatrix, the TMA
stores' reads) and gets numpy's C; the C tile's stmatrix layout and its TMA boxes are proven the same bytes;
the command line builds it with --arch sm_90a and refuses what it does not take."""
import re
import shutil
import subprocess
import sys

import pytest

from mlir_tile.kernels.gemm import sm90 as gemm_sm90, sm90_emulation as hopper_emulation, sm90_tiles as hopper_tiles
from mlir_tile.kernels.gemm.sm90_tiles import HopperConfig, hopper_config


@pytest.mark.parametrize("b_major, tile, element", [("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "specialized": False}, "f16"), ("kn", {"bm": 128, "bn": 256, "bk": 64, "stages": 3, "specialized": False}, "bf16"),
                                                    ("nk", {"bm": 64, "bn": 128, "bk": 64, "stages": 2, "specialized": False}, "bf16")])
def test_the_ptx_is_tma_wgmma_stmatrix_and_tma_stores(filecheck, tmp_path, b_major, tile, element):
    """Unspecialized: every warpgroup a consumer, thread 0 refilling the stages between its batches."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config(b_major, tile)
    ptx = compile_to_ptx(gemm_sm90.build_module(element, config))
    b_loads = 1 if b_major == "nk" else config.bn // 64
    filecheck(ptx, f"""
    CHECK: .target sm_90a
    CHECK: .visible .entry gemm(
    CHECK-COUNT-{config.stages}: mbarrier.init.shared.b64 [pipeline_full{{{{.*}}}}], {{{{%r[0-9]+}}}};
    CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
    CHECK: mbarrier.try_wait.parity.shared.b64
    CHECK: wgmma.fence.sync.aligned;
    CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n{config.bn}k16.f32.{element}.{element}
    CHECK: wgmma.commit_group.sync.aligned;
    CHECK: wgmma.wait_group.sync.aligned 1;
    CHECK: mbarrier.arrive.shared.b64
    CHECK: wgmma.wait_group.sync.aligned 0;
    CHECK: bar.sync 0;
    CHECK: stmatrix.sync.aligned.m8n8.x4.shared.b16
    CHECK: fence.proxy.async.shared::cta;
    CHECK-COUNT-{config.bn // 64}: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
    CHECK: cp.async.bulk.wait_group.read 0;
    """)
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster") == (config.stages + 1) * (1 + b_loads)
    assert "setmaxnreg" not in ptx
    _assembles(ptx, tmp_path)


@pytest.mark.parametrize("tile, entry, consumer", [({"bm": 128, "bn": 256, "bk": 64, "stages": 3}, 168, 232), ({"bm": 256, "bn": 128, "bk": 64, "stages": 3}, 96, 104),
                                                   ({"bm": 64, "bn": 128, "bk": 64, "stages": 4}, None, None), ({"bm": 128, "bn": 128, "bk": 64, "stages": 4, "persistent": True}, 168, 232)])
def test_the_warp_specialized_kernel_gives_the_producers_registers_to_the_consumers(filecheck, tmp_path, tile, entry,
                                                                                     consumer):
    """Warpgroup 0 produces (lowered to 40 registers where the block could not have 255 a thread), one thread
    loading every k-tile; the consumers (raised by exactly what it gave back: more would wait forever) run
    the batches, meet on named barrier 1 and store C."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config("nk", tile)
    ptx = compile_to_ptx(gemm_sm90.build_module("f16", config))
    consumers = 128 * config.consumers
    assert (config.rebalanced, config.entry_registers if config.rebalanced else None,
            config.consumer_registers if config.rebalanced else None) == (entry is not None, entry, consumer)
    if entry is not None:
        assert 128 * (entry - 40) >= consumers * (consumer - entry)  # what the consumers take, the producer gave
        filecheck(ptx, f"""
        CHECK-DAG: setmaxnreg.inc.sync.aligned.u32 {consumer};
        CHECK-DAG: setmaxnreg.dec.sync.aligned.u32 40;
        """)
    filecheck(ptx, f"""
    CHECK: .maxntid {config.threads}, 1, 1
    CHECK: wgmma.mma_async.sync.aligned.m64n{config.bn}k16
    CHECK: bar.sync 1, {consumers};
    CHECK: stmatrix.sync.aligned.m8n8.x4.shared.b16
    CHECK: bar.sync 1, {consumers};
    CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
    """)
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster") == 2  # the producer's loop: A's box, B's
    _assembles(ptx, tmp_path)


def _assembles(ptx: str, tmp_path) -> None:
    """ptxas -arch=sm_90a takes it: no spills, no wait injected or serialization (C75xx), setmaxnreg honoured."""
    if shutil.which("ptxas"):
        (tmp_path / "g.ptx").write_text(ptx)
        assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "g.ptx"), "-o", str(tmp_path / "g.cubin")],
                                   capture_output=True, text=True)
        assert assembled.returncode == 0, assembled.stderr
        assert "C75" not in assembled.stderr and " 0 bytes spill stores" in assembled.stderr, assembled.stderr


@pytest.mark.parametrize("b_major, tile, element", [("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "cluster": 2}, "f16"), ("kn", {"bm": 128, "bn": 64, "bk": 64, "stages": 4, "cluster": 4}, "bf16"),
                                                    ("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 3, "persistent": True, "cluster": 2}, "bf16")])
def test_a_cluster_shares_b_by_multicast(filecheck, tmp_path, b_major, tile, element):
    """Clusters of 2 or 4 CTAs on adjacent row tiles of one column of C: each CTA's producer loads its A and
    its rank's rows of each of B's boxes, multicast to the whole cluster, its arrival expecting the parts
    of every CTA (the stage's bytes in all); the barriers are fenced and met by the cluster before any
    load, a stage's empty barrier counts every CTA's consumer warps, each release arrives on every CTA's,
    and no CTA leaves before the cluster meets again."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config(b_major, tile)
    ptx = compile_to_ptx(gemm_sm90.build_module(element, config))
    b_loads = 1 if b_major == "nk" else config.bn // 64
    part_bytes = config.parts[1] * 2 // b_loads // config.cluster
    filecheck(ptx, f"""
    CHECK: .reqnctapercluster {config.cluster}, 1, 1
    CHECK-COUNT-{config.stages}: mbarrier.init.shared.b64 [pipeline_full{{{{.*}}}}], {{{{%r[0-9]+}}}};
    CHECK: fence.mbarrier_init.release.cluster;
    CHECK-NEXT: barrier.cluster.arrive.aligned;
    CHECK: mov.b32 [[WARPS:%r[0-9]+]], {4 * config.consumers * config.cluster};
    CHECK-COUNT-{config.stages}: mbarrier.init.shared.b64 [pipeline_empty{{{{.*}}}}], [[WARPS]];
    CHECK: fence.mbarrier_init.release.cluster;
    CHECK: mapa.shared::cluster.u64
    CHECK: mbarrier.arrive.release.cluster.shared::cluster.b64
    CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [
    CHECK: mbarrier.arrive.expect_tx.shared.b64
    CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster
    CHECK: mbarrier.arrive.expect_tx.shared.b64
    CHECK: barrier.cluster.arrive.aligned;
    CHECK-NEXT: barrier.cluster.wait.aligned;
    CHECK-NEXT: ret;
    """)
    assert ptx.count(".multicast::cluster") == b_loads and "%cluster_ctarank" in ptx
    expected = {int(bytes_) for bytes_ in re.findall(r"mov\.b32 \t?%r\d+, (\d+);\n\s*mbarrier\.arrive\.expect_tx", ptx)}
    assert expected <= {config.parts[0] * 2, part_bytes * config.cluster} and part_bytes * config.cluster in expected
    assert gemm_sm90.boxes(config)["b"].rows * 64 * 2 == part_bytes
    _assembles(ptx, tmp_path)
    assert "give C as numpy does" in hopper_emulation.emulate(config, 2, element)


def test_a_clusters_grid_is_whole_clusters_of_row_tiles():
    """1000 x 1016 in 128 x 256 tiles, clusters of 2: 4 x 4 clusters (the last's second row tile past M); a
    persistent grid of whole clusters, one CTA an SM at most."""
    assert hopper_config("nk", {"bm": 128, "bn": 256, "bk": 64, "stages": 3, "cluster": 2}).grid(1000, 1016, 132) == 32
    assert hopper_config("nk", {"bm": 128, "bn": 256, "bk": 64, "stages": 3, "persistent": True, "cluster": 2}).grid(8192, 8192, 132) == 132
    assert hopper_config("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "persistent": True, "cluster": 4}).grid(8192, 8192, 130) == 128
    assert hopper_config("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "cluster": 4}).grid(1, 8, 132) == 4


@pytest.mark.parametrize("b_major, tile, element", [("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4}, "f16"), ("kn", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "specialized": False}, "bf16"),
                                                    ("kn", {"bm": 64, "bn": 256, "bk": 64, "stages": 2}, "f16"), ("nk", {"bm": 256, "bn": 64, "bk": 64, "stages": 2}, "bf16")])
def test_one_cta_on_the_reference_model_is_numpys_product(b_major, tile, element):
    assert "give C as numpy does" in hopper_emulation.emulate(hopper_config(b_major, tile), 2, element)


@pytest.mark.parametrize("b_major, tile, element", [("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4}, "bf16"),
                                                    ("kn", {"bm": 256, "bn": 128, "bk": 64, "stages": 4,
                                                            "consumer_rows": 128}, "f16")])
def test_a_given_k_by_m_is_read_mn_major_in_a_box_every_64_rows(filecheck, b_major, tile, element):
    """A [K, M] (`a_major` "km", A^T of a backward's dB): a k-tile's A is BM / 64 TMA boxes of BK rows by 64
    columns of A [K, M], side by side, each counted on the stage's barrier as B's are; wgmma reads it MN-major (its
    transpose flag for A set); one CTA on the reference model is numpy's product."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config(b_major, tile, element, a_major="km")
    assert [first for first, _ in gemm_sm90.a_parts(config)] == [64 * 64 * j for j in range(config.bm // 64)]
    assert gemm_sm90.boxes(config)["a"].rows == 64 and gemm_sm90.boxes(config)["a"].columns == 64
    ptx = compile_to_ptx(gemm_sm90.build_module(element, config))
    filecheck(ptx, """
    CHECK: wgmma.mma_async.sync.aligned.m64n{{[0-9]+}}k16.f32.{{[bf]+16}}.{{[bf]+16}} {{.*}}, p, 1, 1, 1, {{[01]}};
    """)
    b_boxes = 1 if b_major == "nk" else config.bn // 64
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier") == config.bm // 64 + b_boxes
    assert ptx.count("mbarrier.arrive.expect_tx") == config.bm // 64 + b_boxes  # (a stage's loads, each counted)
    assert "give C as numpy does" in hopper_emulation.emulate(config, 2, element)
    with pytest.raises(ValueError, match="A 'mk' .* or 'km'"):
        hopper_config(b_major, tile, "e4m3" if b_major == "nk" else element, a_major="km" if b_major == "nk" else "x")


def test_a_c_tile_stored_by_stmatrix_is_the_a_tile_read_transposed():
    """A band of accumulators stored as C (`stored_tile(64, BM)`: 64 rows, BM columns in 128-byte-swizzled boxes
    of 64) lies as the A [K, M] tile of K 64 and M BM (`a_major` "km") reads it, element (k, m) at one place:
    attention's backward stores dS^T so and multiplies dS K from it (docs/notes/attention-backward.md)."""
    from mlir_tile.kernels.common import stored_tile

    for bm in (64, 128, 256):
        c = stored_tile(64, bm)["c"]
        a = gemm_sm90.tiles(hopper_config("nk", {"bm": bm, "bn": 64, "bk": 64, "stages": 2}, "bf16",
                                          a_major="km"))["a"]
        assert all(c.offset(k, m) == a.offset(m, k) for m in range(bm) for k in range(64))


def test_the_c_tile_is_its_tma_boxes_and_the_stmatrix_layouts_bytes():
    from mlir_tile.isa.tma import Box, column_boxes

    layouts = gemm_sm90.tiles(HopperConfig(bm=128, bn=256))
    assert column_boxes(layouts["c"], 16, 64) == [(128 * 64 * j, Box(128, 64, 16, 128)) for j in range(4)]
    assert layouts["c_words"].cosize * 2 == layouts["c"].cosize


def test_column_boxes_names_the_element_where_a_tile_is_no_box():
    from mlir_tile.algebra.layout import Layout, Swizzle
    from mlir_tile.isa.tma import TmaMismatch, column_boxes

    padded = Layout((64, (64, 2)), (64, (1, 64 * 64 + 8)), Swizzle(3, 3, 3))  # the second box 8 elements late
    with pytest.raises(TmaMismatch, match="columns 64 to 127 .* are no TMA box"):
        column_boxes(padded, 16, 64)


@pytest.mark.parametrize("fields, message", [
    (dict(bm=96), "BM 64 to 256"), (dict(bn=96), "multiples of 64"), (dict(bk=32), "BK 64"),
    (dict(stages=1), "2 stages or more"), (dict(b_major="mk"), "B 'nk' or 'kn'"),
    (dict(persistent=True, specialized=False), "a persistent kernel is warp-specialized"),
    (dict(cluster=3), "clusters of 1, 2 or 4 CTAs"), (dict(cluster=2, specialized=False), "got 2, unspecialized"),
    (dict(cluster=2, b_major="kn", bn=128), "clusters with B \\[K, N\\] take BN 64"),
    (dict(bm=256, bn=256, consumer_rows=128), "at most 128 registers"),
    (dict(bm=256, consumer_rows=128, specialized=False), "128: warp-specialized"),
    (dict(bm=192, consumer_rows=128), "64 or 128 rows of BM"), (dict(consumer_rows=96), "64 or 128 rows of BM"),
    (dict(split_k=True, persistent=True), "split-K is warp-specialized, not persistent"),
    (dict(split_k=True, element_bits=8, bk=128), "split-K is .* 16-bit"),
])
def test_configurations_outside_the_kernel_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        HopperConfig(**fields)
    with pytest.raises(ValueError, match="a tile's fields are bm, bn, .*; got threads"):
        hopper_config("nk", {"bm": 128, "threads": 256})


def test_a_consumer_of_128_rows_issues_two_batches_a_k_tile(filecheck, tmp_path):
    """256 x 128 with two consumers of 128 rows (CUTLASS's cooperative tile; "w"): each k-tile two batches, one
    per 64-row block of A (row blocks 2 c and 2 c + 1), waited down to those two before the stage before is
    released; 384 threads, the consumers raised to 232 registers; C stored in four 64-row bands."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config("nk", {"bm": 256, "bn": 128, "bk": 64, "stages": 4, "consumer_rows": 128})
    assert (config.consumers, config.threads, config.accumulator_registers, config.consumer_registers) == (2, 384, 128, 232)
    ptx = compile_to_ptx(gemm_sm90.build_module("f16", config))
    filecheck(ptx, """
    CHECK: mbarrier.try_wait.parity.shared.b64
    CHECK: wgmma.fence.sync.aligned;
    CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16
    CHECK: wgmma.commit_group.sync.aligned;
    CHECK: wgmma.fence.sync.aligned;
    CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16
    CHECK: wgmma.commit_group.sync.aligned;
    CHECK: wgmma.wait_group.sync.aligned 2;
    CHECK: mbarrier.arrive.shared.b64
    """)
    assert ptx.count("wgmma.mma_async") == 8 and ptx.count("stmatrix") == 2 * 128 // 16
    assert re.search(r"setmaxnreg.inc.sync.aligned.u32\s+232;", ptx)
    _assembles(ptx, tmp_path)
    assert "give C as numpy does" in hopper_emulation.emulate(config, 1)


@pytest.mark.parametrize("major, tile", [("nk", {"bm": 256, "bn": 128, "bk": 64, "stages": 4, "consumer_rows": 128, "uniform": True}), ("kn", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "uniform": True})])
def test_a_uniform_kernel_broadcasts_the_warpgroups_index(tmp_path, major, tile):
    """"b" (`uniform`): the warpgroup's index broadcast from lane 0 (an index in two halves: two shuffles), the
    kernel otherwise the same: it assembles, and one CTA on the reference model gives numpy's product."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config(major, tile)
    assert config.uniform and str(config).endswith("_uniform_sm90a")
    ptx = compile_to_ptx(gemm_sm90.build_module("bf16", config))
    assert len(re.findall(r"shfl\.sync\.idx\.b32\s+%r\d+, %r\d+, 0, 31, -1;", ptx)) == 2
    _assembles(ptx, tmp_path)
    assert "give C as numpy does" in hopper_emulation.emulate(config, 1, "bf16")


@pytest.mark.parametrize("a_rows, bn", [(8, 64), (16, 128)])
def test_a_decode_tile_loads_a_box_of_as_many_rows_of_a_as_m_has(tmp_path, a_rows, bn):
    """`a_rows` (decode, M <= a_rows): A's TMA box and each stage's expected bytes are those rows' (a_rows x 128 bytes
    beside B's box), the kernel otherwise the decode tile's; one CTA on the reference model (A's rows past a_rows
    zero, the stage's too) gives numpy's product; a box that is not whole 8-row swizzle atoms below BM is refused."""
    from dataclasses import replace

    from mlir_tile.compiler.compile import compile_to_ptx

    config = replace(hopper_config("nk", {"bm": 64, "bn": bn, "bk": 64, "stages": 8}), a_rows=a_rows)
    assert gemm_sm90.boxes(config)["a"].rows == a_rows and str(config).endswith(f"_a{a_rows}_sm90a")
    ptx = compile_to_ptx(gemm_sm90.build_module("bf16", config))
    expected = sorted(int(x) for x in re.findall(r"mov\.b32\s+%r\d+, (\d+);\s+mbarrier\.arrive\.expect_tx", ptx))
    assert expected == sorted([a_rows * 128, bn * 128]), expected
    _assembles(ptx, tmp_path)
    assert "give C as numpy does" in hopper_emulation.emulate(config, 2, "bf16")
    for refused in (12, 64, 0.5):
        with pytest.raises(ValueError, match="a_rows"):
            replace(config, a_rows=refused)


@pytest.mark.parametrize("major, tile, element", [("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "split_k": True}, "f16"), ("kn", {"bm": 256, "bn": 128, "bk": 64, "stages": 4, "consumer_rows": 128, "split_k": True}, "bf16")])
def test_a_split_k_kernel_reduces_its_splits_in_one_launch(filecheck, tmp_path, major, tile, element):
    """Split-K ("k") in one launch: the workspace, the flags and the splits after the sizes; each CTA's tile and
    split from its block (`SplitK`), its run of k-tiles loaded at the split's first column. A split but the
    last stores its accumulators as fp32 pairs (8 bytes) under C's bounds, meets the other consumers and counts
    itself on its tile's flag (`red.release.gpu`); the last waits for the count (`ld.acquire.gpu`), clears the
    flag, adds each split's pairs in a loop over the splits, and stores C as the unsplit kernel does (stmatrix,
    TMA stores)."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config(major, tile)
    assert config.split_k and str(config).endswith("_splitk_sm90a")
    ptx = compile_to_ptx(gemm_sm90.build_module(element, config))
    filecheck(ptx, """
    CHECK: .param .align 64 .b8 gemm_param_2[128],
    CHECK: .param .u64 .ptr .align 16 gemm_param_6,
    CHECK-NEXT: .param .u64 .ptr .align 16 gemm_param_7,
    CHECK-NEXT: .param .u64 gemm_param_8
    CHECK: wgmma.mma_async.sync.aligned
    CHECK: st.global.v2.b32
    CHECK: bar.sync 1, 256;
    CHECK: red.release.gpu.add.u32 [[[FLAG:%rd[0-9]+]]], %r{{[0-9]+}};
    CHECK: ld.acquire.gpu.u32 %r{{[0-9]+}}, [[[FLAG]]];
    CHECK: st.relaxed.gpu.global.u32 [[[FLAG]]], %r{{[0-9]+}};
    CHECK: bar.sync 1, 256;
    CHECK: ld.global.v2.b32
    CHECK: add.rn.f32
    CHECK: stmatrix.sync.aligned
    CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
    """)
    pairs = config.accumulator_registers // 2  # (a consumer's: each built once)
    assert ptx.count("st.global.v2.b32") == pairs and ptx.count("ld.global.v2.b32") == pairs
    _assembles(ptx, tmp_path)


def test_ping_pong_consumers_take_turns_at_a_persistent_walk(filecheck, tmp_path):
    """"...wg": two consumers of all 128 rows, consumer c taking the walk's turns c, c + 2, ...: its main loop
    waits on named barrier 2 + c (after the first turn) and lets the other's start by arriving on 3 - c once it
    waited for its k-tiles; each stage is read by one consumer (4 warps release it); each consumer's epilogue
    meets its own warps (barrier 4 + c) and stores its own C tile after the stages."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config("nk", {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "consumer_rows": 128, "persistent": True, "pingpong": True})
    assert (config.pingpong, config.persistent, config.consumers, config.stage_readers) == (True, True, 2, 4)
    assert config.shared_bytes == config.stage_bytes + 2 * 128 * 128 * 2
    ptx = compile_to_ptx(gemm_sm90.build_module("f16", config))
    barriers = sorted(set(re.findall(r"bar\.(sync|arrive)\s+(\d+), (\d+)", ptx)))
    assert barriers == [("arrive", "2", "256"), ("arrive", "3", "256"), ("sync", "2", "256"), ("sync", "3", "256"),
                        ("sync", "4", "128"), ("sync", "5", "128")]
    assert ptx.count("wgmma.mma_async") == 2 * 2 * 4  # each consumer's branch: two batches of 4 k16 steps
    _assembles(ptx, tmp_path)
    with pytest.raises(ValueError, match="ping-pong consumers are persistent"):
        hopper_config("nk", {"bm": 256, "bn": 128, "bk": 64, "stages": 4, "consumer_rows": 128, "persistent": True, "pingpong": True})


def _gemm(*arguments):
    return subprocess.run([sys.executable, "-m", "mlir_tile.kernels.gemm", *map(str, arguments)], capture_output=True,
                          text=True, timeout=600)


def test_the_command_line_builds_the_hopper_gemm(tmp_path, filecheck):
    ran = _gemm("--ptx-out", tmp_path / "g.ptx", "--arch", "sm_90a", "--b-major", "nk")
    assert ran.returncode == 0, ran.stderr
    filecheck((tmp_path / "g.ptx").read_text(), """
    CHECK: // mlir-tile example built with: {"dtype": "f16", "b_major": "nk", "align": 16, "arch": "sm_90a"}
    CHECK: .target sm_90a
    CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16
    """)


@pytest.mark.parametrize("options, message", [(["--align", "8"], "rows on 16 bytes: --align 16"),
                                              (["--bn", "96"], "multiples of 64"),
                                              (["--tile", {"bm": 128, "bn": 256, "bk": 64, "stages": 4}], "--tile names the mma.sync path's tiles")])
def test_the_command_line_refuses_what_the_hopper_gemm_does_not_take(tmp_path, options, message):
    ran = _gemm("--ptx-out", tmp_path / "g.ptx", "--arch", "sm_90a", *options)
    assert ran.returncode == 2 and message in ran.stderr and "Traceback" not in ran.stderr, ran.stderr


def test_a_persistent_kernel_walks_its_tiles_with_the_pipeline_running_on():
    """Persistent: one CTA an SM at most; the C tile after the stages (the producer is already loading the next
    tile's k-tiles into them); the consumers release a tile's last stage and clear the accumulators after
    its epilogue; the producer's and the consumers' k-tile counts run on across tiles (the stage and parity
    of walk turn t's k-tile j are those of t x k-tiles + j)."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config("nk", {"bm": 128, "bn": 256, "bk": 64, "stages": 3, "persistent": True})
    assert config.persistent and config.specialized
    assert config.grid(1000, 1016, 132) == 32 and config.grid(8192, 8192, 132) == 132
    assert config.shared_bytes == config.stage_bytes + 128 * 256 * 2
    ptx = compile_to_ptx(gemm_sm90.build_module("f16", config))
    assert "%nctaid.x" in ptx  # the walk steps by the grid
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster") == 2 and ptx.count("setmaxnreg") == 2


@pytest.mark.parametrize("chip, sizes, tile, splits, aligned, takes", [
    ("sm_90", (4096, 4096, 4096), None, None, True, True),
    ("sm_80", (4096, 4096, 4096), None, None, True, False),  # no wgmma
    ("sm_90", (4096, 4096, 4100), None, None, True, False),  # K off 16 bytes: no TMA
    ("sm_90", (4096, 4092, 4096), None, None, True, False),  # N likewise
    ("sm_90", (4096, 4096, 4096), None, None, False, False),  # an address off 16 bytes
    ("sm_90", (4096, 4096, 4096), {"bm": 128, "bn": 128}, None, True, False),  # an mma.sync tile named
    ("sm_90", (4096, 4096, 4096), None, 2, True, False),  # the mma.sync path's split-K asked for
    ("sm_90", (256, 512, 8192), None, None, True, True),  # 8 tiles, deep K: Hopper's path splits K
    ("sm_90", (256, 512, 8192), None, 1, True, True),  # ... unless told not to
])
def test_matmul_takes_hoppers_path_where_tma_and_its_tiles_allow(chip, sizes, tile, splits, aligned, takes):
    from mlir_tile.kernels.gemm.launch import takes_hopper

    assert takes_hopper(chip, *sizes, tile=tile, splits=splits, aligned=aligned) is takes


@pytest.mark.parametrize("sizes, splits", [
    ((16, 4096, 4096), 4),  # 32 tiles of 128 x 128: 4 fill 128 SMs, and K has 4 runs of 1024
    ((256, 512, 8192), 8),  # 8 tiles, K 8 runs
    ((1, 11008, 4096), 1),  # 86 tiles: 132 // 86
    ((64, 4096, 11008), 4),  # 32 tiles: 132 // 32
    ((16, 4096, 1000), 1),  # K shorter than a run
    ((4096, 4096, 4096), 1),  # the tiles fill the SMs
    ((128, 128, 65536), 16),  # one tile: the most splits
])
def test_hoppers_path_splits_k_where_its_tiles_leave_sms_idle(sizes, splits):
    from mlir_tile.kernels.gemm.sm90_tiles import SMALL_TILE, library_splits

    assert library_splits(*sizes, hopper_config("nk", SMALL_TILE), sms=132, fill=0.9, most=16) == splits


@pytest.mark.parametrize("sizes, tile, splits, a_rows", [
    ((1, 4096, 4096), (64, 64, 8), 1, 8),  # 64 tiles: the most the SMs hold; K one run of 4096; A's first 8 rows
    ((128, 4096, 4096), (64, 64, 8), 1, 0),  # 2 x 64 tiles
    ((16, 11008, 4096), (64, 128, 8), 1, 16),  # 86 tiles (64 x 64's 172 pass the SMs)
    ((128, 11008, 4096), (128, 128, 6), 1, 0),  # 86 tiles of 128 rows
    ((64, 4096, 11008), (64, 64, 8), 2, 0),  # K two runs of 4096 at least, 128 CTAs
    ((17, 4096, 11008), (64, 64, 8), 2, 32),
    ((1, 20480, 4096, "kn"), (128, 128, 6), 1, 8),  # f16 B [K, N]'s 128 x 256 leaves SMs idle, every decode tile
    # passes them: the last
])
def test_decode_shaped_products_take_a_decode_tile_and_its_splits(sizes, tile, splits, a_rows):
    """M <= DECODE_ROWS with A [M, K] and no epilogue, where the measured tile leaves SMs idle: the decode tile
    with the most tiles the SMs hold at once, split-K where K gives each split 4096 at least, A's box the
    first DECODE_A_ROWS rows where M is no more."""
    from mlir_tile.kernels.epilogues import selectable
    from mlir_tile.kernels.gemm.sm90_tiles import SMALL_TILE, library_config, library_splits

    m, n, depth, major = (*sizes, "nk")[:4]
    config = library_config(m, n, major, sms=132, fill=0.9, element="f16" if major == "kn" else "bf16", decode=True)
    assert (config.bm, config.bn, config.stages, config.a_rows) == (*tile, a_rows)
    assert library_splits(m, n, depth, config, sms=132, fill=0.9, most=16) == splits
    for refused in ({"decode": False}, {"decode": True, "epilogue": selectable}):  # (A [K, M]; an epilogue)
        assert library_config(m, n, major, sms=132, fill=0.9, **refused) == hopper_config(major, SMALL_TILE)
    assert library_config(256, 1024, "nk", sms=132, fill=0.9, element="bf16", decode=True) == hopper_config(
        "nk", SMALL_TILE)  # (M past DECODE_ROWS)


def test_matmul_picks_the_measured_tile_where_it_fills_the_sms_and_no_choice_is_fused():
    """The measured table (hopper_tiles.json, the benchmark's data) names a tile the kernel takes for every dtype
    and B layout; Matmul runs it where its CTAs fill the SMs and the epilogue is none or one chain, else the
    128 x 128 one (a `Choice`'s arms spill beside the wide tile's accumulators)."""
    from mlir_tile.kernels.epilogues import bias, gelu_tanh, selectable
    from mlir_tile.kernels.gemm.sm90_tiles import SMALL_TILE, library_config, measured_tile

    for element in ("f16", "bf16", "e4m3"):
        for major in ("nk", "kn"):
            hopper_config(major, measured_tile(element, major), element)
    measured = hopper_config("nk", measured_tile("bf16", "nk"))
    assert library_config(4096, 4096, "nk", sms=132, fill=0.9, element="bf16") == measured
    assert library_config(1024, 1024, "kn", sms=132, fill=0.9) == hopper_config("kn", SMALL_TILE)  # 32 tiles of 256 x 128
    assert library_config(4096, 4096, "nk", sms=132, fill=0.9, epilogue=bias.then(gelu_tanh)) == hopper_config(
        "nk", measured_tile("f16", "nk"))
    assert library_config(4096, 4096, "nk", sms=132, fill=0.9, epilogue=selectable) == hopper_config("nk", SMALL_TILE)
    with pytest.raises(ValueError, match="no measured tile for e5m2:nk"):
        measured_tile("e5m2", "nk")


def test_the_sm90_library_ships_the_hopper_kernels_matmul_picks(filecheck, tmp_path):
    """Each (element, B layout, epilogue) with its tiles, bias + each shipped activation as a chain on the
    measured tiles, the small tile's split-K kernels for each element and B layout (plain and `selectable`: the
    last split applies the epilogue), the decode tiles' plain, whole and split, A [K, M]'s plain on each
    tile and split, fp8's for each B layout with per-tensor and per-row scales (fast and precise) and B [N, K]'s blockwise
    (1 x 128 / 128 x 128, and 1 x 128 for both: `ScaledMatmul`), the fused SwiGLU's for each 16-bit element and the grouped GEMMs' (masked, contiguous) for
    each 16-bit element and blockwise fp8 and the contiguous one's gradients' its router weights' (`row_scale`) and an expert's
    bias (`expert_bias`) (16-bit), named apart from the mma.sync kernels; a shipped chain's kernel on the measured tile
    assembles without spills."""
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.gemm import launch as gemm_launch
    from mlir_tile.kernels.epilogues import bias, gelu_tanh

    names = [name for name, _ in gemm_launch.shipped_kernels("sm_90")]
    hopper = [name for name in names if name.endswith("_sm90a") or "_sm90a_" in name]
    # (each 16-bit element and B layout, whole and split, A's whole box and its first DECODE_A_ROWS rows)
    decode = 2 * 2 * len(hopper_tiles.DECODE_TILES) * 2 * (1 + len(hopper_tiles.DECODE_A_ROWS))
    assert len(names) == len(set(names)) and len(hopper) == 2 * 2 * (2 + 1 + len(hopper_tiles.SHIPPED_ACTIVATIONS) + 2
                                                                     + 3) + 2 * 2 * 2 + 1 + 2 + 15 + decode
    assert sum("_splitk_" in name for name in hopper) == 12 + decode // 2
    assert sum("_akm_" in name for name in hopper) == 14
    assert sum("_e4m3_" in name for name in hopper) == 12 and any("_kn_ws_fp8_rowscales" in name for name in hopper)
    assert any(name.endswith("_blockscales_rowblocks_sm90a") for name in hopper)
    assert sum(name.endswith("_fp8_promote_sm90a") or name.endswith("_rowscales_promote_sm90a") for name in hopper) == 4
    assert any(name.endswith("_nk_ws_fp8_promote_blockscales_sm90a") for name in hopper)
    assert sum(name.endswith("_swiglu_sm90a") for name in hopper) == 2  # (f16's and bf16's: `swiglu_mm`)
    assert sum(name.endswith("_grouped_sm90a") for name in hopper) == 3  # (f16's, bf16's, fp8's: `grouped_mm`)
    assert sum(name.endswith("_grouped_contiguous_sm90a") for name in hopper) == 5  # (and dx's, 16-bit)
    assert sum(name.endswith("_grouped_raggedk_sm90a") for name in hopper) == 2  # (dw's, 16-bit)
    assert sum("_grouped_contiguous_sm90a_row_scale_" in name for name in hopper) == 2  # (router weights, 16-bit)
    assert sum("_grouped_contiguous_sm90a_expert_bias_" in name for name in hopper) == 2  # (a bias an expert)
    assert not any("_sm90a" in name for name, _ in gemm_launch.shipped_kernels("sm_80"))
    config = hopper_tiles.library_config(4096, 4096, "nk", sms=132, fill=0.9, epilogue=bias.then(gelu_tanh))
    _assembles(compile_to_ptx(gemm_sm90.build_module("bf16", config, epilogue=bias.then(gelu_tanh))), tmp_path)


def test_the_fp8_kernel_is_e4m3_wgmma_on_k_major_tiles_scaled_into_bf16(filecheck, tmp_path):
    """e4m3 A and B [N, K] in 128-byte rows of 128 elements (BK 128, 8-bit TMA boxes), m64nNk32 batches, the
    accumulators times scale_a x scale_b (read once from their one-element arrays) rounded to bf16 pairs."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config("nk", {"bm": 128, "bn": 128, "bk": 128, "stages": 4}, "e4m3")
    assert (config.bk, config.k_unit, config.stage_bytes) == (128, 16, 4 * (128 + 128) * 128)
    assert gemm_sm90.boxes(config)["a"].element_bits == 8 and gemm_sm90.boxes(config)["c"].element_bits == 16
    ptx = compile_to_ptx(gemm_sm90.build_module("e4m3", config))
    filecheck(ptx, """
    CHECK: .param .u64 {{.*}}gemm_param_6,
    CHECK-NEXT: .param .u64 {{.*}}gemm_param_7
    CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3
    CHECK: wgmma.wait_group.sync.aligned 0;
    CHECK: ld.global.b32 [[SCALE_A:%r[0-9]+]], [%rd{{[0-9]+}}];
    CHECK-NEXT: ld.global.b32 [[SCALE_B:%r[0-9]+]], [%rd{{[0-9]+}}];
    CHECK-NEXT: mul.rn.f32 [[SCALE:%r[0-9]+]], [[SCALE_A]], [[SCALE_B]];
    CHECK-NEXT: mul.rn.f32 [[LOW:%r[0-9]+]], %r{{[0-9]+}}, [[SCALE]];
    CHECK-NEXT: mul.rn.f32 [[HIGH:%r[0-9]+]], %r{{[0-9]+}}, [[SCALE]];
    CHECK-NEXT: cvt.rn.bf16x2.f32 %r{{[0-9]+}}, [[HIGH]], [[LOW]];
    CHECK: stmatrix.sync.aligned.m8n8.x4.shared.b16
    """)
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile") == 2  # A's box, B's
    _assembles(ptx, tmp_path)


@pytest.mark.parametrize("tile, row_scales", [({"bm": 128, "bn": 128, "bk": 128, "stages": 3, "cluster": 2}, False), (hopper_tiles.FP8_ROWS_TILE, True)])
def test_an_fp8_cta_on_the_reference_model_is_the_scaled_exact_product(tile, row_scales):
    assert "give C as numpy does" in hopper_emulation.emulate(hopper_config("nk", tile, "e4m3", row_scales), 2, "e4m3")


def test_row_scales_are_read_once_a_row_and_a_column_at_c_clamped_coordinates(filecheck, tmp_path):
    """Per-row scales: each thread loads its 2 rows' scale_a and its BN / 4 columns' scale_b once (clamped
    to M - 1 and N - 1: C's rows and columns past them are clipped by the store), then multiplies."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config("nk", hopper_tiles.FP8_ROWS_TILE, "e4m3", row_scales=True)
    ptx = compile_to_ptx(gemm_sm90.build_module("e4m3", config))
    assert ptx.count("ld.global.b32") == 2 + config.bn // 4 and ptx.count("min.u64") >= 2 + config.bn // 4
    _assembles(ptx, tmp_path)


def test_fp8_b_kn_is_transposed_by_the_producer_warpgroup(filecheck, tmp_path):
    """fp8 B [K, N]: TMA loads B's k-tile in 128-byte boxes into a staging stage; the producer warpgroup (kept at
    56 registers) waits for it, rewrites it K-major into the stage by ldmatrix.trans, prmt and stmatrix, fences
    it for the async proxy and arrives on the stage's full barrier beside A's load; its first thread loads
    k-tile t + 2 after each transposition; the consumers' batches read B K-major."""
    from mlir_tile.compiler.compile import compile_to_ptx

    config = hopper_config("kn", {"bm": 128, "bn": 128, "bk": 128, "stages": 3}, "e4m3")
    steps = len(gemm_sm90.transposition(config).steps)
    assert (config.transposed, config.threads, config.producer_registers, steps) == (True, 384, 56, 4)
    assert config.shared_bytes == 3 * (128 + 128) * 128 + hopper_tiles.TRANSPOSE_STAGES * 128 * 128
    ptx = compile_to_ptx(gemm_sm90.build_module("e4m3", config))
    filecheck(ptx, f"""
    CHECK: setmaxnreg.dec.sync.aligned.u32 56;
    CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
    CHECK: mbarrier.try_wait.parity.shared.b64
    CHECK-COUNT-{2 * steps}: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
    CHECK: fence.proxy.async.shared::cta;
    CHECK: mbarrier.arrive.shared.b64
    """)
    assert re.search(rf"setmaxnreg.inc.sync.aligned.u32\s+{config.consumer_registers};", ptx)
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3") == 4
    assert ptx.count("prmt.b32") == 8 * steps and ptx.count("stmatrix") == 2 * steps + config.bn // 16  # (+ C's)
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster") == 3 * (1 + len(gemm_sm90.b_parts(config)))
    _assembles(ptx, tmp_path)


def test_an_fp8_cta_with_b_kn_on_the_reference_model_is_the_scaled_exact_product():
    """TMA's boxes of B [K, N] into the staging stage, the transposition's loads, permutes and stores, wgmma
    reading the K-major result through the kernel's descriptors."""
    assert "give C as numpy does" in hopper_emulation.emulate(hopper_config("kn", {"bm": 128, "bn": 128, "bk": 128, "stages": 3}, "e4m3"), 2, "e4m3")


@pytest.mark.parametrize("call, message", [
    (lambda: hopper_config("kn", {"bm": 128, "bn": 256, "bk": 128, "stages": 2}, "e4m3"), "more than 2 stages"),
    (lambda: hopper_config("kn", {"bm": 128, "bn": 128, "bk": 128, "stages": 3, "persistent": True}, "e4m3"), "not persistent"),
    (lambda: hopper_config("kn", {"bm": 128, "bn": 256, "bk": 128, "stages": 4}, "e4m3"), "bytes of shared memory"),
    (lambda: hopper_config("nk", {"bm": 128, "bn": 256, "bk": 64, "stages": 4}, "e4m3"), "BK 64 or 128"),
    (lambda: gemm_sm90.build_module("e4m3", hopper_config("nk", {"bm": 128, "bn": 256, "bk": 64, "stages": 3})), "e4m3 with 8-bit ones"),
    (lambda: hopper_config("nk", {"bm": 128, "bn": 256, "bk": 64, "stages": 3}, "f16", row_scales=True), "row scales are fp8's"),
])
def test_fp8_configurations_outside_the_kernel_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
