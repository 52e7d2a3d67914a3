"""A block tile C = A x B on tensor cores: 64x64x64, fp16 in, fp32 accumulate, fp16 out, 4 warps, with every
fragment moved by tile.matrix_transfer from swizzled shared tiles.

    python examples/mma_tile.py --demo               # the kernel's transfers in the PTX; the GPU run if any
    python examples/mma_tile.py --ptx-out k.ptx      # needs MLIR
    python examples/mma_tile.py --run-ptx k.ptx      # needs a GPU, no MLIR
    python examples/mma_tile.py --emulate            # the transfers on the reference model: no GPU, no MLIR

A, B and C live in shared memory as 64 rows of 32 words (128-byte rows), swizzled Sw<3,2,3>, so every
ldmatrix/stmatrix phase is conflict-free. Warp w computes rows 16w..16w+15 of C: per 16-wide k-block, its A
fragment is one ldmatrix.x4, the B fragments of two n-blocks one ldmatrix.x4.trans, then eight mma.sync; the
accumulators, packed to fp16 pairs, go back with one stmatrix.x4 per two n-blocks. Each of the three transfers
is one warpgroup-scope op whose leading mode is the warp.
"""
from __future__ import annotations

import sys

import numpy as np

from mlir_tile.isa.atoms import MMA_M16N8K16

KERNEL = "mma_tile"
M = N = K = 64
WORDS = 64 * 32  # a 64x64 fp16 tile as 32-bit words
SWIZZLE = "Sw<3,2,3>"
LDMATRIX = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
# A: warp (4):(512 words = 16 rows), k-block (4):(8 words), the four 8x8 matrices of a 16x16 block in mma
# order (2,2):(256 = 8 rows, 4 words), rows (8):(32), words (4):(1). Slots: k-block * 4 + a_i.
A_SHARED = f"{SWIZZLE} o (4,4,(2,2),8,4):(512,8,(256,4),32,1)"
A_REGISTERS = "(4,4,4,8,4):(1@warpid,4,1,4@laneid,1@laneid)"
# B (k x n, row-major) with .trans: every warp reads all of it (warp stride 0); k-block (4):(512 words = 16 k
# rows), n-pair (4):(8 words = 16 columns). Slots: k-block * 16 + n-pair * 4 + (b0, b1 of n-block 2p; 2p+1).
B_SHARED = f"{SWIZZLE} o (4,4,4,(2,2),8,4):(0,512,8,(256,4),32,1)"
B_REGISTERS = "(4,4,4,4,8,4):(1@warpid,16,4,1,4@laneid,1@laneid)"
# C: warp rows as for A, n-pair (4):(8 words); slots n-pair * 4 + (c01, c23 of n-block 2p; of 2p+1).
C_SHARED = f"{SWIZZLE} o (4,4,(2,2),8,4):(512,8,(256,4),32,1)"
C_REGISTERS = "(4,4,4,8,4):(1@warpid,4,1,4@laneid,1@laneid)"
# The copies between global rows and the swizzled tiles: (pass, thread) -> word thread + 128 pass
STAGED = f"({WORDS // 128},128):(128,1)"
STAGED_SWIZZLED = f"{SWIZZLE} o {STAGED}"


def build_module(context=None):
    from mlir import ir
    from mlir.dialects import arith

    from mlir_tile import contract
    from mlir_tile.builder import Kernel, transfer
    from mlir_tile.algebra.layout import Layout

    words = f"memref<{WORDS}xi32>"
    with Kernel(KERNEL, [words, words, words], block=(128, 1, 1), context=context) as k:
        a_global, b_global, c_global = k.arguments
        tid = k.thread_id()
        tiles = {name: k.shared(name, WORDS, alignment=contract.aligned_for(Layout.parse(A_SHARED))) for name in ("a_tile", "b_tile", "c_tile")}

        def copy(source, destination, swizzle_destination):  # pass, thread: word thread + 128 pass of the tile
            rows, swizzled = k.tensor(source, STAGED), k.tensor(destination, STAGED_SWIZZLED)
            if not swizzle_destination:
                rows, swizzled = k.tensor(source, STAGED_SWIZZLED), k.tensor(destination, STAGED)
            with k.loop(0, WORDS // 128) as step:
                swizzled[step, tid] = rows[step, tid]

        copy(a_global, tiles["a_tile"], True)
        copy(b_global, tiles["b_tile"], True)
        k.barrier()
        a, b = k.registers(16), k.registers(64)
        transfer(LDMATRIX, a, tiles["a_tile"], dst_layout=A_REGISTERS, src_layout=A_SHARED, scope="warpgroup")
        transfer(LDMATRIX.replace("x4", "x4.trans"), b, tiles["b_tile"], dst_layout=B_REGISTERS,
                        src_layout=B_SHARED, scope="warpgroup")
        accumulators = k.registers(32, "f32")
        zero = arith.constant(ir.F32Type.get(), 0.0)
        for slot in range(32):
            k.store(zero, accumulators, [slot])
        issue_mmas(k, a, b, accumulators)
        c = k.registers(16)
        for n_block in range(8):
            pair, second = divmod(n_block, 2)
            values = [k.load(accumulators, [n_block * 4 + i]) for i in range(4)]
            k.store(k.pack_f16(values[0], values[1]), c, [pair * 4 + 2 * second])
            k.store(k.pack_f16(values[2], values[3]), c, [pair * 4 + 2 * second + 1])
        transfer(LDMATRIX.replace("ldmatrix", "stmatrix"), tiles["c_tile"], c, dst_layout=C_SHARED,
                        src_layout=C_REGISTERS, scope="warpgroup")
        k.barrier()
        copy(tiles["c_tile"], c_global, False)
    return k.module


def issue_mmas(k, a, b, accumulators) -> None:
    """A warp's 32 mma.sync of a 16x64x64 product: for each k-block, its A slots (4k..4k+3) with each n-block's
    B slots (two of the four its n-pair's x4.trans filled), into that n-block's four accumulators."""
    for k_block in range(4):
        for n_block in range(8):
            pair, second = divmod(n_block, 2)
            b_slot = k_block * 16 + pair * 4 + 2 * second
            k.mma(MMA_M16N8K16, a, [k_block * 4 + i for i in range(4)], b, [b_slot, b_slot + 1],
                           accumulators, [n_block * 4 + i for i in range(4)])


def inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    return (rng.uniform(-1, 1, (M, K)).astype(np.float16), rng.uniform(-1, 1, (K, N)).astype(np.float16))


def as_words(matrix: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(matrix).view(np.uint32).reshape(-1)


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)


def run_on_gpu(ptx: str) -> np.ndarray:
    from mlir_tile.runtime import Runtime

    a, b = inputs()
    with Runtime() as runtime:
        module = runtime.load_ptx(ptx, name=KERNEL)
        _, _, c = module.launch(KERNEL, [as_words(a), as_words(b), np.zeros(WORDS, np.uint32)], grid=1, block=128)
    return c.view(np.float16).reshape(M, N)


def swizzled_words(matrix: np.ndarray) -> np.ndarray:
    """A 64x64 fp16 matrix as the swizzled shared tile the kernel's copy makes: word i at Sw<3,2,3>(i)."""
    words, tile = as_words(matrix), np.zeros(WORDS, np.uint32)
    index = np.arange(WORDS)
    tile[index ^ ((index >> 3) & 28)] = words
    return tile


def emulate_transfers() -> None:
    """The kernel's three transfers on the reference model (no GPU, no MLIR): every fp16 value each lane's
    fragment registers receive (A, B) or hand to stmatrix (C) is where the PTX ISA's fragment tables put it.
    Raises AssertionError otherwise."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.models.reference import emulate

    a, b = inputs()
    c = reference(a, b)
    bits = {name: m.view(np.uint16) for name, m in (("a", a), ("b", b), ("c", c))}
    loaded_a = emulate(LDMATRIX, A_REGISTERS, A_SHARED, np.zeros((128, 16), np.uint32), swizzled_words(a), "warpgroup")
    loaded_b = emulate(LDMATRIX.replace("x4", "x4.trans"), B_REGISTERS, B_SHARED, np.zeros((128, 64), np.uint32),
                       swizzled_words(b), "warpgroup")
    packed_c = np.zeros((128, 16), np.uint32)
    for thread in range(128):
        warp, lane = divmod(thread, 32)
        for block in range(4):  # k-blocks for A and B, n-pairs for C
            for register in range(4):
                for half in range(2):
                    row, column = fragment_element("a16", lane, register, half)
                    word = int(loaded_a[thread, 4 * block + register]) >> (16 * half) & 0xFFFF
                    assert word == bits["a"][16 * warp + row, 16 * block + column], ("A", thread, block, register)
                    row, column = fragment_element("c16", lane, register, half)
                    packed_c[thread, 4 * block + register] |= int(bits["c"][16 * warp + row, 16 * block + column]) << (16 * half)
                    for pair in range(4):
                        k_row, n = fragment_element("b16", lane, register, half)
                        word = int(loaded_b[thread, 16 * block + 4 * pair + register]) >> (16 * half) & 0xFFFF
                        assert word == bits["b"][16 * block + k_row, 16 * pair + n], ("B", thread, block, pair)
    stored = emulate(LDMATRIX.replace("ldmatrix", "stmatrix"), C_SHARED, C_REGISTERS, np.zeros(WORDS, np.uint32),
                     packed_c, "warpgroup")
    assert np.array_equal(stored, swizzled_words(c)), "C"


def check(c: np.ndarray) -> tuple[bool, float]:
    """Within fp16 rounding of the fp32 product: each output is the fp32 sum rounded to fp16 (half an ulp),
    and the fp32 accumulation order differs from numpy's; 2^-9 relative plus 1e-3 absolute covers both."""
    a, b = inputs()
    exact = a.astype(np.float32) @ b.astype(np.float32)
    error = np.abs(c.astype(np.float32) - exact)
    return bool((error <= 2**-9 * np.abs(exact) + 1e-3).all()), float(error.max())


def run_and_check(ptx: str) -> tuple[bool, str]:
    ok, worst = check(run_on_gpu(ptx))
    return ok, f"GPU: C matches numpy within fp16 rounding: {ok} (largest error {worst:.2e})"


def emulate() -> str:
    emulate_transfers()
    return "reference model: every fragment register of A, B and C holds the fp16 values the PTX ISA assigns"


def main() -> int:
    from mlir_tile.kernels.command_line import main as example_main

    return example_main(__doc__, build_module, run_and_check, emulate)


if __name__ == "__main__":
    sys.exit(main())
