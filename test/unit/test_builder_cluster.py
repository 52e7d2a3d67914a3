"""Thread block clusters in the builder (builder/cluster.py, Kernel(cluster=...), tma_load(multicast=...)):
the kernel's required cluster shape, the rank, the cluster barrier, a multicast TMA load and an arrival on a
peer's mbarrier lower to what PTX names them and ptxas -arch=sm_90a assembles; what cannot be is a
BuilderError [cluster] (no cluster, more than 8 CTAs, a chip before sm_90, a mask past the cluster)."""
import shutil
import subprocess

import pytest
from mlir import ir

from mlir_tile.builder import BuilderError, Kernel, TensorMap
from mlir_tile.compiler.compile import compile_to_ptx
from mlir_tile.isa.tma import Box

BOX = Box(64, 64, 16, 128)


def _cluster_kernel(body, cluster=(2, 1, 1), chip="sm_90a"):
    with Kernel("k", [TensorMap()], block=(128, 1, 1), chip=chip, cluster=cluster, context=ir.Context()) as k:
        tile = k.tensor(k.view(k.dynamic_shared(alignment=1024), (64 * 64,), "f16"), BOX.layout)
        body(k, tile, k.mbarriers("stage", 1, 1), k.arguments[0])
    return k.module


def test_a_cluster_kernel_multicasts_and_arrives_on_its_peer(filecheck, tmp_path):
    """mbarriers of a cluster kernel: initialized, fenced for the cluster and met by every CTA of it (no peer's
    multicast or arrival reaches them before), not by bar.sync alone."""
    def body(k, tile, barriers, tensor_map):
        k.cluster_barrier()
        with k.if_(k.compare("eq", k.cluster_rank(), 0)):
            k.tma_load(tile, tensor_map, (0, 0), barriers, multicast=0b11)
        k.arrive_remote(barriers, 0, 1)
    ptx = compile_to_ptx(_cluster_kernel(body))
    filecheck(ptx, """
    CHECK: .explicitcluster
    CHECK-NEXT: .reqnctapercluster 2, 1, 1
    CHECK: mbarrier.init.shared.b64
    CHECK-NOT: bar.sync
    CHECK: fence.mbarrier_init.release.cluster;
    CHECK-NEXT: barrier.cluster.arrive.aligned;
    CHECK-NEXT: barrier.cluster.wait.aligned;
    CHECK: barrier.cluster.arrive.aligned;
    CHECK-NEXT: barrier.cluster.wait.aligned;
    CHECK: %cluster_ctarank
    CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster
    CHECK: mapa.shared::cluster.u64
    CHECK: mbarrier.arrive.release.cluster.shared::cluster.b64
    """)
    if shutil.which("ptxas"):
        (tmp_path / "k.ptx").write_text(ptx)
        assembled = subprocess.run(["ptxas", "-arch=sm_90a", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                                   capture_output=True, text=True)
        assert assembled.returncode == 0, assembled.stderr


@pytest.mark.parametrize("cluster, chip, message", [
    ((3, 3, 1), "sm_90a", r"\[cluster\] Kernel: a cluster of 9 CTAs is more than the portable 8"),
    ((2, 1, 1), "sm_80", r"\[cluster\] Kernel: thread block clusters need sm_90 or newer"),
    ((2, 0, 1), "sm_90a", r"\[cluster\] Kernel: a cluster is \(x, y, z\) positive CTA counts"),
])
def test_clusters_the_chip_cannot_run_are_refused(cluster, chip, message):
    with pytest.raises(BuilderError, match=message):
        Kernel("k", [], block=(128, 1, 1), chip=chip, cluster=cluster)


@pytest.mark.parametrize("call, message", [
    (lambda k, tile, barriers, m: k.cluster_rank(), r"\[cluster\] cluster_rank: the kernel is not built for clusters"),
    (lambda k, tile, barriers, m: k.tma_load(tile, m, (0, 0), barriers, multicast=1),
     r"\[cluster\] tma_load: the kernel is not built for clusters"),
])
def test_cluster_calls_need_a_cluster_kernel(call, message):
    with pytest.raises(BuilderError, match=message):
        _cluster_kernel(call, cluster=None)


@pytest.mark.parametrize("call, message", [
    (lambda k, tile, barriers, m: k.tma_load(tile, m, (0, 0), barriers, multicast=0b100),
     r"\[cluster\] tma_load: multicast is a mask of the cluster's 2 CTA ranks \(1 to 3\), got 4"),
    (lambda k, tile, barriers, m: k.arrive_remote(barriers, 0, 2), r"\[cluster\] arrive_remote: rank 0 to 1"),
])
def test_a_mask_or_rank_past_the_cluster_is_refused(call, message):
    with pytest.raises(BuilderError, match=message):
        _cluster_kernel(call)
