"""GPU differential testing, build side (needs MLIR): random legal transfers -> kernels -> PTX, with
inputs and the reference model's expected outputs, written as a bundle that `mlir_tile.testing.difftest_runner`
executes on any GPU host (cuda-python + numpy only).

    python -m mlir_tile.testing.difftest BUNDLE_DIR [--cases 500] [--seed 0] [--per-module 50]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
from pathlib import Path

import numpy as np
from mlir import ir
from mlir.dialects import arith, memref

from mlir_tile.builder import Kernel, transfer
from mlir_tile.compiler.compile import compile_to_ptx
from mlir_tile.contract import ContractError, aligned_for, parse_opcode
from mlir_tile.models.reference import emulate
from mlir_tile.testing.random_transfers import RandomTransfer, random_transfer
from mlir_tile.models.widen import widen_layouts

MAX_SHARED_WORDS = 8192  # 32 KiB: below the 48 KiB of static shared memory a kernel may declare


def view_words(case: RandomTransfer, view_offset: int) -> int:
    """The words of a view `view_offset` words into the buffer that hold every row: a swizzle of the offset from
    the buffer keeps a row inside its aligned block of 2^(M+B) words, which may end past the layout's cosize."""
    swizzle = case.shared_layout.swizzle
    if not view_offset or swizzle is None:
        return case.words
    block = 1 << swizzle.mask.bit_length()
    return -(-(view_offset + case.words) // block) * block - view_offset


def padded_words(case: RandomTransfer, view_offset: int = 0) -> int:
    return -(-(view_offset + view_words(case, view_offset)) // case.threads) * case.threads


def kernel_name(index: int) -> str:
    return f"case_{index}"


def dynamic_view_multiple(case: RandomTransfer) -> int:
    """What a dynamic view offset must be a multiple of, in words: the swizzle's period, or a 16-byte row."""
    return aligned_for(case.shared_layout) // 4


def build_case_kernel(module_kernel: Kernel, case: RandomTransfer, view_offset: int = 0, dynamic: bool = False) -> None:
    """Body: shared <- sm_in; registers <- regs_in[tid]; the transfer (on a memref.subview `view_offset`
    words into the shared buffer); regs_out[tid] <- registers; sm_out <- shared. A `dynamic` view's offset is
    computed at run time, as (block id + q) * the period (the block id is 0; the IR proves the multiple)."""
    k = module_kernel
    sm_in, regs_in, regs_out, sm_out = k.arguments
    tid = k.thread_id("x")
    words = padded_words(case, view_offset)
    sm = k.shared(f"{k.name}_sm", words, alignment=aligned_for(case.shared_layout))

    def copy(source, destination):
        with k.loop(0, words // case.threads) as step:
            index = arith.addi(tid, arith.muli(step, k.index(case.threads)))
            k.store(k.load(source, [index]), destination, [index])

    copy(sm_in, sm)
    k.barrier()
    registers = k.registers(case.slots)
    for slot in range(case.slots):
        k.store(k.load(regs_in, [tid, slot]), registers, [slot])
    offset = view_offset
    if dynamic:
        period = dynamic_view_multiple(case)
        offset = arith.muli(arith.addi(k.block_id(), k.index(view_offset // period)), k.index(period))
    view = sm if not view_offset else memref.subview(sm, [offset], [view_words(case, view_offset)], [1])
    dst, src = parse_opcode(case.opcode).dst_and_src(registers, view)
    transfer(case.opcode, dst, src, dst_layout=case.dst_layout, src_layout=case.src_layout, scope=case.scope)
    k.barrier()
    for slot in range(case.slots):
        k.store(k.load(registers, [slot]), regs_out, [tid, slot])
    copy(sm, sm_out)


def case_ptx(index: int, case: RandomTransfer, view_offset: int = 0, dynamic: bool = False) -> str:
    words, threads = padded_words(case, view_offset), case.threads
    arguments = [f"memref<{words}xi32>", f"memref<{threads}x{case.slots}xi32>",
                 f"memref<{threads}x{case.slots}xi32>", f"memref<{words}xi32>"]
    with Kernel(kernel_name(index), arguments, block=(threads, 1, 1), context=ir.Context()) as k:
        build_case_kernel(k, case, view_offset, dynamic)
    return compile_to_ptx(k.module)


def expected_outputs(case: RandomTransfer, registers: np.ndarray, shared: np.ndarray, view_offset: int = 0):
    if case.is_load:
        return emulate(case.opcode, case.dst_layout, case.src_layout, registers, shared, case.scope, view_offset), shared
    return registers, emulate(case.opcode, case.dst_layout, case.src_layout, shared, registers, case.scope, view_offset)


def draw_cases(count: int, seed: int) -> list[RandomTransfer]:
    rng, cases = random.Random(seed), []
    while len(cases) < count:
        case = random_transfer(rng)
        if padded_words(case) <= MAX_SHARED_WORDS:
            cases.append(case)
    return cases


def widened(case: RandomTransfer) -> RandomTransfer | None:
    """The case issued as fewer, wider instructions (mlir_tile.models.widen), when that exists and is legal."""
    layouts = widen_layouts(case.opcode, case.register_layout, case.shared_layout, 1 if case.scope != "warp" else 0)
    if layouts is None:
        return None
    opcode, registers, shared = layouts
    wide = dataclasses.replace(case, opcode=opcode, register_layout=registers, shared_layout=shared)
    try:
        emulate(wide.opcode, wide.dst_layout, wide.src_layout, np.zeros((case.threads, case.slots), np.uint32),
                np.zeros(case.words, np.uint32), case.scope) if wide.is_load else \
            emulate(wide.opcode, wide.dst_layout, wide.src_layout, np.zeros(case.words, np.uint32),
                    np.zeros((case.threads, case.slots), np.uint32), case.scope)
    except ContractError:
        return None
    return wide


def write_bundle(directory: Path, count: int, seed: int, widen: bool = False, views: bool = False) -> dict:
    """With `widen`, each kernel issues the widened transfer where there is one, and is checked against the
    reference model's outputs for the transfer as written. With `views`, each transfer works on a
    memref.subview at a random offset into its buffer (the offset enters a swizzle): every other one a
    compile-time offset of 4 to 252 words, the others one computed at run time, a multiple of the period."""
    directory.mkdir(parents=True, exist_ok=True)
    cases, manifest, arrays = draw_cases(count, seed), [], {}
    data = np.random.default_rng(seed)
    offsets = random.Random(seed + 1)
    ptx_texts = []
    for index, case in enumerate(cases):
        dynamic = views and index % 2 == 1
        view_offset = 4 * offsets.randrange(1, 64) if views else 0
        if dynamic:
            period = dynamic_view_multiple(case)
            view_offset = period * offsets.randrange(1, max(2, 256 // period + 1))
        registers = data.integers(0, 2**32, (case.threads, case.slots), dtype=np.uint32)
        shared = data.integers(0, 2**32, padded_words(case, view_offset), dtype=np.uint32)
        expected_registers, expected_shared = expected_outputs(case, registers, shared, view_offset)
        arrays.update({f"{index}_regs": registers, f"{index}_sm": shared,
                       f"{index}_regs_expected": expected_registers, f"{index}_sm_expected": expected_shared})
        built = (widened(case) if widen else None) or case
        ptx_texts.append(case_ptx(index, built, view_offset, dynamic))
        manifest.append({"index": index, "kernel": kernel_name(index), "opcode": built.opcode, "scope": case.scope,
                         "dst_layout": str(built.dst_layout), "src_layout": str(built.src_layout),
                         "threads": case.threads, "ptx": f"ptx/case_{index}.ptx", "widened": built is not case,
                         "view_offset": view_offset, "dynamic_view": dynamic})
    np.savez_compressed(directory / "arrays.npz", **arrays)
    (directory / "ptx").mkdir(exist_ok=True)
    for index, text in enumerate(ptx_texts):  # one PTX per case: a failing case is self-contained
        (directory / "ptx" / f"case_{index}.ptx").write_text(text)
    (directory / "manifest.json").write_text(json.dumps({"seed": seed, "cases": manifest}, indent=1))
    return {"cases": len(cases), "widened": sum(entry["widened"] for entry in manifest),
            "swizzled views": sum(1 for entry, case in zip(manifest, cases)
                                  if entry["view_offset"] and case.shared_layout.swizzle is not None),
            "dynamic views": sum(1 for entry in manifest if entry["dynamic_view"]),
            "dynamic swizzled views": sum(1 for entry, case in zip(manifest, cases)
                                          if entry["dynamic_view"] and case.shared_layout.swizzle is not None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle")
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--widen", action="store_true", help="build each widened transfer, check it as written")
    parser.add_argument("--views", action="store_true", help="each transfer on a subview at a random offset")
    arguments = parser.parse_args()
    print(write_bundle(Path(arguments.bundle), arguments.cases, arguments.seed, arguments.widen, arguments.views))


if __name__ == "__main__":
    main()
