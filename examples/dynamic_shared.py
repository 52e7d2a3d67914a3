"""A transfer from dynamic shared memory beyond 48 KiB, end to end: the kernel built with the builder
(`k.dynamic_shared()` seen as words through `k.view`), its PTX, and its run on a GPU checked against the
reference model.

    python examples/dynamic_shared.py --ptx-out kernel.ptx     # needs MLIR
    python examples/dynamic_shared.py --run-ptx kernel.ptx     # needs a GPU, no MLIR
"""
from __future__ import annotations

import sys

import numpy as np

KERNEL = "from_dynamic_shared"
OPCODE = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
REGISTERS = "(4,8,4):(1,4@laneid,1@laneid)"
SHARED = "(4,8,4):(4096,4,1)"  # matrix 3 starts at word 12288: byte 49152, past the 48 KiB default
WORDS = 12352  # a multiple of the 32 threads that copy it in
SHARED_BYTES = 4 * WORDS


def build_module(context=None):
    from mlir_tile.builder import Kernel, transfer

    with Kernel(KERNEL, [f"memref<{WORDS}xi32>", "memref<32x4xi32>"], block=(32, 1, 1), context=context) as k:
        data, out = k.arguments
        words = k.view(k.dynamic_shared(), (WORDS,))
        lane = k.lane_id()
        passes = (WORDS // 32, 32)  # the copy: pass, lane
        source, destination = k.tensor(data, passes), k.tensor(words, passes)
        with k.loop(0, WORDS // 32) as step:
            destination[step, lane] = source[step, lane]
        k.barrier()
        registers = k.registers(4)
        transfer(OPCODE, registers, words, dst_layout=REGISTERS, src_layout=SHARED)
        for slot in range(4):
            k.store(k.load(registers, [slot]), out, [lane, slot])
    return k.module


def inputs() -> np.ndarray:
    return np.random.default_rng(7).integers(0, 2**32, WORDS, dtype=np.uint32)


def expected(data: np.ndarray) -> np.ndarray:
    from mlir_tile.models.reference import emulate

    return emulate(OPCODE, REGISTERS, SHARED, np.zeros((32, 4), np.uint32), data)


def run_on_gpu(ptx: str) -> np.ndarray:
    from mlir_tile.runtime import Runtime

    with Runtime() as runtime:
        module = runtime.load_ptx(ptx, name=KERNEL)
        _, out = module.launch(KERNEL, [inputs(), np.zeros((32, 4), np.uint32)], grid=1, block=32,
                               shared_bytes=SHARED_BYTES)
    return out


def run_and_check(ptx: str) -> tuple[bool, str]:
    out = run_on_gpu(ptx)
    differ = int((out != expected(inputs())).sum())
    return not differ, f"GPU: {SHARED_BYTES} bytes of dynamic shared memory; {differ} of {out.size} words differ"


def main() -> int:
    from mlir_tile.kernels.command_line import main as example_main

    return example_main(__doc__, build_module, run_and_check)


if __name__ == "__main__":
    sys.exit(main())
