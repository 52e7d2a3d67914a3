"""The specification's example, "interleaved shared rows and register slots 0, 2, 8, 10", written with
the mlir-tile builder API.

The shared tensor is (16,4,2):(8,1,128); the transfer views it as (2,2,8,4):(128,8,16,1) (first matrix:
even rows, second: odd rows, the last original axis selects the repeat) and loads it with two
`ldmatrix...x2` into register slots 0, 2, 8, 10 of a 12-slot register array that starts out holding the
sentinel -777. Each lane then writes its 12 slots to Out[lane, :].

    python examples/seed_example.py          # prints the kernel's IR
"""
from __future__ import annotations

import numpy as np
from mlir.dialects import arith

from mlir_tile.builder import Kernel, matrix_transfer
from mlir_tile.layout import S, laneid

LDMATRIX = "ldmatrix.sync.aligned.m8n8.x2.shared.b16"
SHARED = S[(16, 4, 2):(8, 1, 128)]
REGISTERS = S[(2, 2, 8, 4):(8, 2, 4 @ laneid, 1 @ laneid)]
SHARED_STD = SHARED.rearrange("(r m) w k -> k m r w", r=8, m=2)
SENTINEL = 4294966519  # bit pattern of int32(-777)
KERNEL_NAME = "matrix_kernel"
SHARED_WORDS = 256


def build_module():
    """kernel(A: memref<16x4x2xi32>, Out: memref<32x12xi32>), one warp."""
    with Kernel(KERNEL_NAME, ["memref<16x4x2xi32>", "memref<32x12xi32>"], block=(32, 1, 1)) as k:
        a, out = k.arguments
        lane = k.lane_id()
        sm = k.shared("sm", SHARED_WORDS, alignment=16)
        for q in range(4):  # each lane copies 4 of the 128 words of A into shared memory
            n = arith.addi(lane, k.index(32 * q))
            coordinate = [
                arith.divui(n, k.index(8)),
                arith.remui(arith.divui(n, k.index(2)), k.index(4)),
                arith.remui(n, k.index(2)),
            ]
            k.store(k.load(a, coordinate), sm, [k.offset(SHARED, coordinate)])
        k.barrier()
        raw = k.registers(12)
        sentinel = k.constant(SENTINEL)
        for slot in range(12):
            k.store(sentinel, raw, [slot])
        matrix_transfer(LDMATRIX, raw, sm, dst_layout=REGISTERS, src_layout=SHARED_STD, scope="warp")
        for slot in range(12):
            k.store(k.load(raw, [slot]), out, [lane, slot])
    return k.module


def inputs() -> np.ndarray:
    return np.arange(128, dtype=np.uint32).reshape(16, 4, 2)


def expected_table(x: np.ndarray) -> np.ndarray:
    """The specification's expected Out, computed exactly as the specification writes it."""
    expected = np.full((32, 12), SENTINEL, dtype=np.uint32)
    for lane in range(32):
        for k in range(2):
            for matrix in range(2):
                expected[lane, 8 * k + 2 * matrix] = x[2 * (lane // 4) + matrix, lane % 4, k]
    return expected


def main() -> None:
    print(build_module())


if __name__ == "__main__":
    main()
