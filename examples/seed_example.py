"""The specification's example, "interleaved shared rows and register slots 0, 2, 8, 10", written with
the mlir-tile builder API.

The shared tensor is (16,4,2):(8,1,128); the transfer views it as (2,2,8,4):(128,8,16,1) (first matrix:
even rows, second: odd rows, the last original axis selects the repeat) and loads it with two
`ldmatrix...x2` into register slots 0, 2, 8, 10 of a 12-slot register array that starts out holding the
sentinel -777. Each lane then writes its 12 slots to Out[lane, :].

    python examples/seed_example.py               # the kernel's IR, from the builder
    python examples/seed_example.py --demo        # IR, PTX, then the GPU run (or the emulator without a GPU)
    python examples/seed_example.py --ptx-out F   # write the PTX
    python examples/seed_example.py --cubin-out F # write the cubin (PTX assembled by nvJitLink)
    python examples/seed_example.py --run-ptx F   # run precompiled PTX on a GPU host (imports no MLIR)
    python examples/seed_example.py --run-cubin F # run a precompiled cubin on a GPU host
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from mlir_tile.algebra.layout import S, laneid

LDMATRIX = "ldmatrix.sync.aligned.m8n8.x2.shared.b16"
SHARED = S[(16, 4, 2):(8, 1, 128)]
REGISTERS = S[(2, 2, 8, 4):(8, 2, 4 @ laneid, 1 @ laneid)]
SHARED_STD = SHARED.rearrange("(r m) w k -> k m r w", r=8, m=2)
SENTINEL = 4294966519  # bit pattern of int32(-777)
# The copy into shared memory: lane l's pass q takes word l + 32 q of A in row-major order (lane = (2, 4, 4):
# the word's last coordinate, its middle one, the row within 4), per coordinate of A (16, 4, 2)
COPY = [S[((2, 4, 4), 4):((0, 0, 1), 4)], S[((2, 4, 4), 4):((0, 1, 0), 0)], S[((2, 4, 4), 4):((1, 0, 0), 0)]]
KERNEL_NAME = "matrix_kernel"
SHARED_WORDS = 256


def build_module(context=None):
    """kernel(A: memref<16x4x2xi32>, Out: memref<32x12xi32>), one warp; in `context`, else the current or
    the builder's shared default context."""
    from mlir_tile.builder import Kernel, transfer

    with Kernel(KERNEL_NAME, ["memref<16x4x2xi32>", "memref<32x12xi32>"], block=(32, 1, 1), context=context) as k:
        a, out = k.arguments
        lane = k.lane_id()
        sm = k.shared("sm", SHARED_WORDS, alignment=16)
        copied = k.identity_tensor((16, 4, 2)).partition(COPY)  # (lane, pass) -> A's coordinate
        with k.loop(0, 4) as q:  # each lane copies 4 of the 128 words of A into shared memory
            coordinate = list(copied[lane, q])
            k.store(k.load(a, coordinate), sm, [k.offset(SHARED, coordinate)])
        k.barrier()
        raw = k.registers(12)
        sentinel = k.constant(SENTINEL)
        for slot in range(12):
            k.store(sentinel, raw, [slot])
        transfer(LDMATRIX, raw, sm, dst_layout=REGISTERS, src_layout=SHARED_STD, scope="warp")
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


def shared_image(x: np.ndarray) -> np.ndarray:
    """Shared memory after the kernel's initialisation: A laid out by SHARED."""
    words = np.zeros(SHARED_WORDS, dtype=np.uint32)
    for coordinate in SHARED.coordinates():
        words[SHARED.offset(*coordinate)] = x[coordinate]
    return words


def emulated_table(x: np.ndarray) -> np.ndarray:
    """Out as the reference model computes it: the sentinel-filled registers after the transfer."""
    from mlir_tile.models.reference import emulate

    registers = np.full((32, 12), SENTINEL, dtype=np.uint32)
    return emulate(LDMATRIX, REGISTERS, SHARED_STD, registers, shared_image(x), scope="warp")


def run_on_gpu(code: str | bytes) -> np.ndarray:
    """Runs the kernel from PTX text or a cubin."""
    from mlir_tile.runtime import Runtime

    with Runtime() as runtime:
        load = runtime.load_cubin if isinstance(code, bytes) else runtime.load_ptx
        module = load(code, name="seed_example")
        _, out = module.launch(KERNEL_NAME, [inputs(), np.zeros((32, 12), dtype=np.uint32)], grid=1, block=32)
        print(f"ran {KERNEL_NAME} on {runtime.name}")
    return out


def print_table(table: np.ndarray) -> None:
    """Out[lane, slot] as int32, so untouched slots read -777."""
    print("lane | Out[lane, 0..11]")
    for lane, row in enumerate(table.view(np.int32)):
        print(f"{lane:4} | " + " ".join(f"{v:4}" for v in row))


def report(name: str, table: np.ndarray, expected: np.ndarray) -> bool:
    print(f"// ===== Out from the {name} =====")
    print_table(table)
    same = np.array_equal(table, expected)
    print(f"{name}: {'matches' if same else 'DIFFERS FROM'} the specification's expected table "
          f"({int((table != expected).sum())} of {expected.size} words differ)")
    if not same:
        for lane, slot in np.argwhere(table != expected)[:8]:
            print(f"  Out[{lane}, {slot}] = {table[lane, slot]}, expected {expected[lane, slot]}")
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The specification's ldmatrix example with mlir-tile")
    parser.add_argument("--demo", action="store_true", help="IR, PTX, then run it (GPU) or emulate it")
    parser.add_argument("--ptx-out", help="write the PTX to this file")
    parser.add_argument("--cubin-out", help="write the cubin (the PTX assembled for sm_90 by nvJitLink)")
    parser.add_argument("--run-ptx", help="run this PTX on the GPU and check the table (no MLIR needed)")
    parser.add_argument("--run-cubin", help="run this cubin on the GPU and check the table (no MLIR needed)")
    arguments = parser.parse_args(argv)
    expected = expected_table(inputs())
    if arguments.run_ptx or arguments.run_cubin:
        with open(arguments.run_ptx or arguments.run_cubin, "r" if arguments.run_ptx else "rb") as stream:
            return 0 if report("GPU", run_on_gpu(stream.read()), expected) else 1
    module = build_module()
    if not (arguments.demo or arguments.ptx_out or arguments.cubin_out):
        print(module)
        return 0
    from mlir_tile.compiler.compile import compile_to_ptx, cubin_of_ptx

    if arguments.demo:
        print("// ===== the kernel, built with the mlir-tile builder =====")
        print(module)
    ptx = compile_to_ptx(module)
    if arguments.ptx_out:
        with open(arguments.ptx_out, "w") as stream:
            stream.write(ptx)
    if arguments.cubin_out:
        with open(arguments.cubin_out, "wb") as stream:
            stream.write(cubin_of_ptx(ptx))
    if not arguments.demo:
        return 0
    print("// ===== PTX (tile-to-ptx{chip=sm_90}) =====")
    print(ptx)
    ok = report("reference emulator", emulated_table(inputs()), expected)
    from mlir_tile.runtime import gpu_available

    available, why = gpu_available()
    if not available:
        print(f"no GPU here ({why}): the transfer was checked with the reference emulator only")
        return 0 if ok else 1
    return 0 if report("GPU", run_on_gpu(ptx), expected) and ok else 1


if __name__ == "__main__":
    sys.exit(main())
