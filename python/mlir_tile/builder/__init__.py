"""Python builder API: GPU kernels around `tile.matrix_transfer`, with upstream dialects underneath.

    with Kernel("matrix_kernel", [Global("f16"), "index"], block=(128, 1, 1)) as k:
        a, n = k.arguments
        sm = k.shared("sm", 256)
        regs = k.registers(12)
        transfer(LDMATRIX, regs, sm, dst_layout=..., src_layout=..., scope="warp")
    print(k.module)

Parts: `kernel` (the kernel, arguments, ids, values, loops and conditionals), `memory` (buffers, views,
layout offsets and planned addresses, proven-aligned vector access), `copies` (cp.async, its groups, tiles;
TMA loads and stores), `compute` (the checked transfer, mma.sync, fast math, shuffles, mbarriers), `tensor`
(CuTe's tensors and partitions), `schedule` (tile orders, stage rings, the TMA pipeline), `warpgroup` (wgmma
from shared tensors or registers, accumulators, setmaxnreg, named barriers), `cluster` (thread block clusters:
rank, barrier, arrivals on a peer, TMA multicast) and `asynchrony` (which wgmma groups are in flight, and what
they own). `transfer` checks the contract while building, through the adapter
the verifier pass uses, so a Python user sees an illegal transfer where it is written.

Errors: an illegal transfer raises `contract.ContractError`; any other misuse (a type text that does not
parse, a non-integer size, an impossible block, an unknown chip, an alignment that cannot be proven) raises
`BuilderError`. Both are ValueErrors; the builder raises no other exception.
"""
from mlir_tile.builder.common import BuilderError, caller_location, memref_type, parse_type
from mlir_tile.builder.compute import transfer
from mlir_tile.builder.kernel import Global, Kernel, TensorMap

__all__ = ["BuilderError", "Global", "Kernel", "TensorMap", "caller_location", "memref_type", "parse_type", "transfer"]
