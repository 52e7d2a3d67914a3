"""An 8-bit block tile C = A x B^T on tensor cores: 64x64x64, s8 in, s32 accumulate and out, 4 warps, with
every fragment moved by tile.matrix_transfer from shared tiles in the layout `mlir_tile.tiling.synthesize` picks.

    python examples/mma_s8.py --demo               # the kernel's transfers in the PTX; the GPU run if any
    python examples/mma_s8.py --ptx-out k.ptx      # needs MLIR
    python examples/mma_s8.py --run-ptx k.ptx      # needs a GPU, no MLIR
    python examples/mma_s8.py --emulate            # the transfers on the reference model: no GPU, no MLIR

A (m x k) and B (n x k: k contiguous, as mma.m16n8k32's col B wants; 8-bit data cannot be transposed by
.trans) are 64 rows of 64 bytes (16 words). For such rows, and for the 16-byte writer that copies them in,
`synthesize(Tile(64, 64, 8))` gives Sw<2,2,3>: every ldmatrix phase and every writer phase conflict-free. Warp
w computes rows 16w..16w+15 of C: per 32-byte k-block, its A fragment is one ldmatrix.x4 and the B fragments of
two n-blocks one ldmatrix.x4 (`mlir_tile.tiling.fragments.mma_m16n8k32_a/_b`), then eight mma.sync.m16n8k32; the
s32 accumulators go to global memory directly (stmatrix moves 16-bit elements only).
"""
from __future__ import annotations

import sys

import numpy as np

from mlir_tile.isa.atoms import MMA_M16N8K32
from mlir_tile.tiling.synthesize import Tile, synthesize

KERNEL = "mma_s8"
M = N = K = 64
ROW_WORDS = K // 4  # 64 bytes a row
WORDS = M * ROW_WORDS
LAYOUT = synthesize(Tile(M, K, element_bits=8))
SWIZZLE = LAYOUT.swizzle
LDMATRIX = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
# A: warp (4):(16 rows), k-block (2):(8 words = 32 bytes), the four 8x8 matrices of a 16x32-byte block in mma
# order (2,2):(8 rows, 4 words), rows (8), words (4):(1). Slots: k-block * 4 + a_i.
A_SHARED = f"{SWIZZLE} o (4,2,(2,2),8,4):({16 * ROW_WORDS},8,({8 * ROW_WORDS},4),{ROW_WORDS},1)"
A_REGISTERS = "(4,2,4,8,4):(1@warpid,4,1,4@laneid,1@laneid)"
# B (n x k): every warp reads all of it (warp stride 0); n-pair (4):(16 rows), k-block (2):(8 words), matrices
# (2,2):(4 words: k 16..31, 8 rows: the next n-block). Slots: n-pair * 8 + k-block * 4 + (b0, b1 of n-block
# 2p; b0, b1 of 2p+1).
B_SHARED = f"{SWIZZLE} o (4,4,2,(2,2),8,4):(0,{16 * ROW_WORDS},8,(4,{8 * ROW_WORDS}),{ROW_WORDS},1)"
B_REGISTERS = "(4,4,2,4,8,4):(1@warpid,8,4,1,4@laneid,1@laneid)"
STAGED = f"({WORDS // 128},128):(128,1)"  # the copies into the tiles: (pass, thread) -> word thread + 128 pass
# C's accumulators, (thread, slot) -> row and -> column (the PTX ISA's C fragment of m16n8k32): thread (lane in
# quad, quad, warp), slot n-block * 4 + c_i; c0, c1 at (quad, 2 lane + 0/1), c2, c3 eight rows further, warp w
# rows 16w..16w+15
C_PLACES = ("((4,8,4),(2,2,8)):((0,1,16),(0,8,0))", "((4,8,4),(2,2,8)):((2,0,0),(1,0,8))")


def swizzle_words(index: np.ndarray) -> np.ndarray:
    return index ^ ((index >> SWIZZLE.shift) & SWIZZLE.mask)


def build_module(context=None):
    from mlir_tile import contract
    from mlir_tile.builder import Kernel, transfer
    from mlir_tile.algebra.layout import Layout

    words = f"memref<{WORDS}xi32>"
    with Kernel(KERNEL, [words, words, f"memref<{M * N}xi32>"], block=(128, 1, 1), context=context) as k:
        a_global, b_global, c_global = k.arguments
        tid = k.thread_id()
        tiles = {name: k.shared(name, WORDS, alignment=max(contract.aligned_for(Layout.parse(layout)) for layout in (A_SHARED, B_SHARED))) for name in ("a_tile", "b_tile")}
        for source, tile in ((a_global, tiles["a_tile"]), (b_global, tiles["b_tile"])):
            rows, swizzled = k.tensor(source, STAGED), k.tensor(tile, f"{SWIZZLE} o {STAGED}")
            with k.loop(0, WORDS // 128) as step:
                swizzled[step, tid] = rows[step, tid]
        k.barrier()
        a, b = k.registers(8), k.registers(32)
        transfer(LDMATRIX, a, tiles["a_tile"], dst_layout=A_REGISTERS, src_layout=A_SHARED, scope="warpgroup")
        transfer(LDMATRIX, b, tiles["b_tile"], dst_layout=B_REGISTERS, src_layout=B_SHARED, scope="warpgroup")
        accumulators = k.registers(32)
        for slot in range(32):
            k.store(k.constant(0), accumulators, [slot])
        for k_block in range(2):
            for n_block in range(8):
                pair, second = divmod(n_block, 2)
                b_slot = pair * 8 + k_block * 4 + 2 * second
                k.mma(MMA_M16N8K32, a, [k_block * 4 + i for i in range(4)], b, [b_slot, b_slot + 1],
                               accumulators, [n_block * 4 + i for i in range(4)])
        c, place = k.tensor(c_global, (M, N)), k.identity_tensor((M, N)).partition(C_PLACES)
        for slot in range(32):
            c[place[tid, slot]] = k.load(accumulators, [slot])
    return k.module


def inputs() -> tuple[np.ndarray, np.ndarray]:
    """A (m x k) and B as n x k, s8 over the whole range (wrapping is not reached: |sum| <= 64 * 128 * 128)."""
    rng = np.random.default_rng(17)
    return rng.integers(-128, 128, (M, K), dtype=np.int8), rng.integers(-128, 128, (N, K), dtype=np.int8)


def as_words(matrix: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(matrix).view(np.uint32).reshape(-1)


def reference(a: np.ndarray, b_n_by_k: np.ndarray) -> np.ndarray:
    return a.astype(np.int32) @ b_n_by_k.astype(np.int32).T


def run_on_gpu(ptx: str) -> np.ndarray:
    from mlir_tile.runtime import Runtime

    a, b = inputs()
    with Runtime() as runtime:
        module = runtime.load_ptx(ptx, name=KERNEL)
        _, _, c = module.launch(KERNEL, [as_words(a), as_words(b), np.zeros(M * N, np.uint32)], grid=1, block=128)
    return c.view(np.int32).reshape(M, N)


def swizzled_words(matrix: np.ndarray) -> np.ndarray:
    """A 64x64 s8 matrix as the shared tile the kernel's copy makes: word i at the swizzle of i."""
    tile = np.zeros(WORDS, np.uint32)
    tile[swizzle_words(np.arange(WORDS))] = as_words(matrix)
    return tile


def emulate_transfers() -> None:
    """The kernel's two transfers on the reference model (no GPU, no MLIR): every byte each lane's A and B
    fragment registers receive is where the PTX ISA's m16n8k32 fragment tables put it. Raises AssertionError
    otherwise."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.models.reference import emulate

    a, b = inputs()
    loaded_a = emulate(LDMATRIX, A_REGISTERS, A_SHARED, np.zeros((128, 8), np.uint32), swizzled_words(a), "warpgroup")
    loaded_b = emulate(LDMATRIX, B_REGISTERS, B_SHARED, np.zeros((128, 32), np.uint32), swizzled_words(b), "warpgroup")
    for thread in range(128):
        warp, lane = divmod(thread, 32)
        for k_block in range(2):
            for register in range(4):
                for part in range(4):
                    row, column = fragment_element("a8", lane, register, part)
                    byte = int(loaded_a[thread, 4 * k_block + register]) >> (8 * part) & 0xFF
                    assert byte == a.view(np.uint8)[16 * warp + row, 32 * k_block + column], ("A", thread, k_block)
                    for pair in range(4):
                        n, k_index = fragment_element("b8", lane, register, part)
                        byte = int(loaded_b[thread, 8 * pair + 4 * k_block + register]) >> (8 * part) & 0xFF
                        assert byte == b.view(np.uint8)[16 * pair + n, 32 * k_block + k_index], ("B", thread, pair)


def run_and_check(ptx: str) -> tuple[bool, str]:
    a, b = inputs()
    equal = bool(np.array_equal(run_on_gpu(ptx), reference(a, b)))
    return equal, f"GPU: C equals numpy's int32 product: {equal}"


def emulate() -> str:
    emulate_transfers()
    return "reference model: every fragment register of A and B holds the bytes the PTX ISA assigns"


def main() -> int:
    from mlir_tile.kernels.command_line import main as example_main

    return example_main(__doc__, build_module, run_and_check, emulate)


if __name__ == "__main__":
    sys.exit(main())
