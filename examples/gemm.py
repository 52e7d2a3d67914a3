"""C = A x B on tensor cores, written with the builder alone: fp16 or bf16 in, fp32 accumulate, the input type
out; A row-major M x K, B row-major K x N, C row-major M x N.

    python examples/gemm.py --demo               # the main loop's transfers and mma in the PTX; a GPU run if any
    python examples/gemm.py --ptx-out g.ptx      # needs MLIR
    python examples/gemm.py --run-ptx g.ptx      # needs a GPU, no MLIR: a 1000 x 1016 x 504 product checked
    python examples/gemm.py --emulate            # the CTA's transfers on the reference model: no GPU, no MLIR

One CTA of 4 warps (2 x 2, 64 x 64 each) computes a 128 x 128 tile of C, walking K in 32-wide k-tiles through
a 4-stage cp.async pipeline in dynamic shared memory (64 KiB). Per k-tile: wait for the oldest stage, a
barrier, the copies of the k-tile three ahead (CuTe's TiledCopy: 16-byte chunks, one base address per thread
and immediate offsets, rows and columns past the matrix zero-filled), then A and B fragments by one
ldmatrix.x4 / ldmatrix.x4.trans transfer each (the CTA layouts of `mlir_tile.tiled`, from the algebra) and 64
mma.sync m16n8k16. The epilogue packs the accumulators, stores them with stmatrix into a swizzled C tile and
writes 16-byte rows to global memory where they lie inside C.

Kernel parameters (any cuda-python, CuPy or torch user can launch the PTX): `gemm(a, b, c, m, n8, k8)`, three
pointers to 16-byte aligned arrays and three 64-bit integers: M, and N / 8 and K / 8 (N and K are multiples
of 8: every row is whole 16-byte chunks; M is any). Grid (ceil(N / 128), ceil(M / 128)), block 128, 65536
bytes of dynamic shared memory.
"""
from __future__ import annotations

import sys

import numpy as np

KERNEL = "gemm"
BM, BN, BK, STAGES, WARPS = 128, 128, 32, 4, (2, 2)
THREADS = 32 * WARPS[0] * WARPS[1]
HALF = 2  # bytes of an element
STAGE_BYTES = (BM * BK + BK * BN) * HALF
SHARED_BYTES = STAGES * STAGE_BYTES
SHAPE = (1000, 1016, 504)  # the checked product: M not a multiple of the tile, N and K not of 128 or 32


def tiled_mma():
    """The CTA's transfers from the shared tiles' layouts (in 32-bit words, swizzled so that every ldmatrix,
    stmatrix and 16-byte copy phase is conflict-free)."""
    from mlir_tile.layout import Layout, Swizzle
    from mlir_tile.tiled import tiled_mma_m16n8k16

    a = Layout((BM, BK // 2), (BK // 2, 1), Swizzle(2, 2, 3))
    b = Layout((BK, BN // 2), (BN // 2, 1), Swizzle(3, 2, 3))
    c = Layout((BM, BN // 2), (BN // 2, 1), Swizzle(3, 2, 3))
    return tiled_mma_m16n8k16(WARPS, (BM, BN, BK), a, b, c, "kn")


def build_module(element: str = "f16", context=None):
    from mlir.dialects import arith

    from mlir_tile.builder import Global, Kernel, transfer
    from mlir_tile.layout import unpack_b32

    tiled = tiled_mma()
    a_halves, b_halves, c_halves = (unpack_b32(operand.tile) for operand in (tiled.a, tiled.b, tiled.c))
    with Kernel(KERNEL, [Global(element), Global(element), Global(element), "index", "index", "index"],
                block=(THREADS, 1, 1), context=context) as k:
        a, b, c, m, n8, k8 = k.arguments
        n, depth = arith.muli(n8, k.index(8)), arith.muli(k8, k.index(8))
        row0, col0 = arith.muli(k.block_id("y"), k.index(BM)), arith.muli(k.block_id("x"), k.index(BN))
        k_tiles = arith.divui(arith.addi(depth, k.index(BK - 1)), k.index(BK))
        shared = k.dynamic_shared(alignment=1024)  # the swizzles repeat every 1024 bytes at most
        a_regs, b_regs = k.registers(tiled.a.whole.slots), k.registers(tiled.b.whole.slots)
        accumulators = k.registers(4 * tiled.m_blocks * tiled.n_blocks, "f32")
        zero = k.constant(0.0, "f32")
        for slot in range(4 * tiled.m_blocks * tiled.n_blocks):
            k.store(zero, accumulators, [slot])

        def stage_offset(k_tile):
            return arith.muli(arith.remui(k_tile, k.index(STAGES)), k.index(STAGE_BYTES))

        def load_k_tile(k_tile):  # the copies of k-tile `k_tile` into its stage, zero past the matrix
            at, k0 = stage_offset(k_tile), arith.muli(k_tile, k.index(BK))
            a_tile = k.view(shared, (BM * BK,), element, at)
            b_tile = k.view(shared, (BK * BN,), element, arith.addi(at, k.index(BM * BK * HALF)))
            tokens = k.copy_tile_async(a_tile, a_halves, a, arith.addi(arith.muli(row0, depth), k0), depth,
                                       rows=BM, cols=BK, valid_rows=arith.subi(m, row0),
                                       valid_cols=arith.subi(depth, k0))
            tokens += k.copy_tile_async(b_tile, b_halves, b, arith.addi(arith.muli(k0, n), col0), n, rows=BK,
                                        cols=BN, valid_rows=arith.subi(depth, k0), valid_cols=arith.subi(n, col0))
            return k.commit_group(tokens)

        group = None
        for ahead in range(STAGES - 1):
            group = load_k_tile(k.index(ahead))
        with k.loop(0, k_tiles) as k_tile:
            k.wait_groups(group, STAGES - 2)  # k-tile `k_tile` has landed (this thread's part)
            k.barrier()  # everyone's part, and everyone is done with the stage the next copies overwrite
            load_k_tile(arith.addi(k_tile, k.index(STAGES - 1)))
            at = stage_offset(k_tile)
            for operand, registers, offset in ((tiled.a, a_regs, 0), (tiled.b, b_regs, BM * BK * HALF)):
                words = k.view(shared, (operand.tile.cosize,), "i32", arith.addi(at, k.index(offset)))
                t = operand.whole
                transfer(t.opcode, registers, words, dst_layout=t.registers, src_layout=t.shared, scope="cta")
            for block in range(tiled.a.k_blocks):
                for mi in range(tiled.m_blocks):
                    for ni in range(tiled.n_blocks):
                        k.mma_m16n8k16(a_regs, tiled.a_slots(mi, block), b_regs, tiled.b_slots(ni, block),
                                       accumulators, _accumulator_slots(tiled, mi, ni), element)
        k.wait_groups(group, 0)
        k.barrier()
        c_regs = k.registers(tiled.c.whole.slots)
        for mi in range(tiled.m_blocks):
            for ni in range(tiled.n_blocks):
                values = [k.load(accumulators, [slot]) for slot in _accumulator_slots(tiled, mi, ni)]
                for pair, slot in enumerate(tiled.c_slots(mi, ni)):
                    k.store(k.pack_f16(values[2 * pair], values[2 * pair + 1], element), c_regs, [slot])
        t = tiled.c.whole
        transfer(t.opcode, k.view(shared, (tiled.c.tile.cosize,), "i32"), c_regs, dst_layout=t.shared,
                 src_layout=t.registers, scope="cta")
        k.barrier()
        c_tile = k.view(shared, (BM * BN,), element)
        per_row = BN // 8
        thread = k.thread_id()
        row, col = arith.divui(thread, k.index(per_row)), arith.muli(arith.remui(thread, k.index(per_row)), k.index(8))
        passes = range(0, BM, THREADS // per_row)
        inside_columns = k.compare("ult", arith.addi(col0, col), n)
        for (view, index), rows_before in zip(k.planned(c_tile, c_halves, [[(row, r), col] for r in passes], 8), passes):
            global_row = arith.addi(arith.addi(row0, row), k.index(rows_before))
            inside = arith.andi(inside_columns, k.compare("ult", global_row, m))
            with k.if_(inside):
                chunk = k.load_vector(view, [index], 8)
                k.store_vector(chunk, c, [arith.addi(arith.muli(global_row, n), arith.addi(col0, col))])
    return k.module


def _accumulator_slots(tiled, mi: int, ni: int) -> list[int]:
    return [4 * (mi * tiled.n_blocks + ni) + i for i in range(4)]


def grid(m: int, n: int) -> tuple[int, int]:
    return (-(-n // BN), -(-m // BM))


def inputs(m: int, n: int, depth: int, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (m, depth)).astype(np.float16), rng.uniform(-1, 1, (depth, n)).astype(np.float16))


def check(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[bool, float]:
    """fp16 rounding of the fp32 product (half an ulp, 2^-11 relative) plus fp32 accumulation in another
    order than numpy's (K terms of at most 1: 1e-5 * K absolute)."""
    exact = a.astype(np.float32) @ b.astype(np.float32)
    error = np.abs(c.astype(np.float32) - exact)
    return bool((error <= 2**-10 * np.abs(exact) + 1e-5 * a.shape[1]).all()), float(error.max())


def run_and_check(ptx: str) -> tuple[bool, str]:
    from mlir_tile.runtime import Runtime

    m, n, depth = SHAPE
    a, b = inputs(m, n, depth)
    with Runtime() as runtime:
        module = runtime.load_ptx(ptx, name=KERNEL)
        _, _, c = module.launch(KERNEL, [a, b, np.zeros((m, n), np.float16), m, n // 8, depth // 8],
                                grid=grid(m, n), block=THREADS, shared_bytes=SHARED_BYTES)
    ok, worst = check(c, a, b)
    return ok, f"GPU: {m} x {n} x {depth} fp16 GEMM matches numpy: {ok} (largest error {worst:.2e})"


def emulate() -> str:
    """Every CTA transfer's coverage proof: each element of the A, B and C tiles moved once per reading warp."""
    tiled = tiled_mma()
    for operand in (tiled.a, tiled.b, tiled.c):
        operand.coverage()
    return (f"reference model: A ({tiled.a.whole.shared}), B and C transfers cover their tiles "
            f"({tiled.a.tile.size + tiled.b.tile.size + tiled.c.tile.size} words)")


def main() -> int:
    from kernel_example import main as example_main

    return example_main(__doc__, build_module, run_and_check, emulate)


if __name__ == "__main__":
    sys.exit(main())
