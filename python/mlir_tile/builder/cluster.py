"""Thread block clusters (sm_90): a kernel built with `Kernel(..., cluster=(x, y, z))` runs in clusters of
that many CTAs (the runtime launches it so: `launch(..., cluster=...)`), which see each other's shared memory:
their rank, a barrier of the whole cluster, an arrival on a peer CTA's mbarrier. TMA loads multicast into
the same offsets of several CTAs (`Kernel.tma_load(..., multicast=mask)`)."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm, nvvm

from mlir_tile.builder.common import BuilderError, is_int


class Clusters:
    def cluster_rank(self) -> ir.Value:
        """This CTA's rank in its cluster (`%cluster_ctarank`, 0 to the cluster's CTAs - 1), an index value."""
        self._clustered("cluster_rank")
        self._require("cluster_rank", "nvvm.read.ptx.sreg.cluster.ctarank")
        rank = nvvm.read_ptx_sreg_cluster_ctarank(ir.IntegerType.get_signless(32))
        return arith.index_castui(ir.IndexType.get(), rank)

    def cluster_barrier(self) -> None:
        """`barrier.cluster.arrive` and `.wait`: every thread of every CTA of the cluster arrives before any goes
        on; what each wrote to shared memory before it is visible to the others after it (a peer's mbarriers
        initialized before one arrives on them; no CTA leaving while a peer may still write into it)."""
        self._clustered("cluster_barrier")
        self._require("cluster_barrier", "nvvm.cluster.arrive")
        nvvm.cluster_arrive(aligned=True)
        nvvm.cluster_wait(aligned=True)

    def arrive_remote(self, barriers: ir.Value, index: ir.Value | int, rank: ir.Value | int) -> None:
        """`mbarrier.arrive.release.cluster.shared::cluster`: this thread's arrival on mbarrier `index` of
        `barriers` in the cluster's CTA `rank` (its own included): a consumer releasing a stage that a peer's
        multicast fills."""
        self._clustered("arrive_remote")
        self._require("arrive_remote", "nvvm.mbarrier.arrive.shared::cluster")
        size = self.cluster[0] * self.cluster[1] * self.cluster[2]
        if is_int(rank) and not 0 <= rank < size:
            raise BuilderError(f"[cluster] arrive_remote: rank 0 to {size - 1} of the cluster's CTAs, got {rank}")
        rank = arith.index_cast(ir.IntegerType.get_signless(32), self.as_index(rank))
        remote = nvvm.mapa(llvm.PointerType.get(7), self._mbarrier(barriers, index), rank)
        nvvm.mbarrier_arrive(None, remote, scope=nvvm.MemScopeKind.CLUSTER)

    def _clustered(self, what: str) -> None:
        if self.cluster is None:
            raise BuilderError(f"[cluster] {what}: the kernel is not built for clusters: Kernel(..., cluster=(x, y, z))")
