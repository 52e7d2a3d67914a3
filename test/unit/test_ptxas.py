"""Every combination (ld/st x .x1/.x2/.x4 x .trans x warp/warpgroup x repeats x i32/f32) compiles to PTX
with exactly one instruction of the opcode per repeat, no local memory, and CUDA 13.0's assembler (nvJitLink)
accepts it for sm_90."""
import itertools
import math
import re

import pytest
from mlir import ir

from mlir_tile.builder import Kernel, transfer
from mlir_tile.compiler.compile import compile_to_ptx
from mlir_tile.runtime.ptx import cubin_of_ptx

REPEATS = [(), (2,), (2, 3)]
COMBINATIONS = list(itertools.product(["ldmatrix", "stmatrix"], [1, 2, 4], [False, True], ["warp", "warpgroup"],
                                      REPEATS, ["i32", "f32"]))


def layouts(count, scope, repeats):
    """Registers: repeats and matrices packed into consecutive slots; shared: 512-byte matrices, repeats
    after them, each warp of a warpgroup its own region."""
    group = scope == "warpgroup"
    matrices = math.prod(repeats) * count
    slot_strides, span = [], count
    for extent in reversed(repeats):
        slot_strides.insert(0, span)
        span *= extent
    shared_strides, words = [], 32 * count
    for extent in reversed(repeats):
        shared_strides.insert(0, words)
        words *= extent
    shape = ",".join(str(n) for n in (((4,) if group else ()) + repeats + (count, 8, 4)))
    registers = ",".join(["1@warpid"] * group + [str(s) for s in slot_strides] + ["1", "4@laneid", "1@laneid"])
    shared = ",".join([str(words)] * group + [str(s) for s in shared_strides] + ["32", "4", "1"])
    return f"({shape}):({registers})", f"({shape}):({shared})", matrices, words * (4 if group else 1)


def build(instruction, count, trans, scope, repeats, element):
    registers_layout, shared_layout, slots, words = layouts(count, scope, repeats)
    threads = 128 if scope == "warpgroup" else 32
    opcode = f"{instruction}.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16"
    with Kernel("k", [f"memref<{threads}x{slots}x{element}>"], block=(threads, 1, 1), context=ir.Context()) as k:
        (out,) = k.arguments
        tid = k.thread_id("x")
        sm = k.shared("sm", words, element=element)
        registers = k.registers(slots, element=element)
        if instruction == "stmatrix":
            for slot in range(slots):
                k.store(k.load(out, [tid, slot]), registers, [slot])
            transfer(opcode, sm, registers, dst_layout=shared_layout, src_layout=registers_layout, scope=scope)
        else:
            transfer(opcode, registers, sm, dst_layout=registers_layout, src_layout=shared_layout, scope=scope)
            for slot in range(slots):
                k.store(k.load(registers, [slot]), out, [tid, slot])
    return opcode, compile_to_ptx(k.module), math.prod(repeats)


@pytest.mark.parametrize("instruction, count, trans, scope, repeats, element", COMBINATIONS,
                         ids=["-".join(map(str, c)) for c in COMBINATIONS])
def test_combination_compiles_and_the_assembler_accepts_it(instruction, count, trans, scope, repeats, element):
    opcode, ptx, instructions = build(instruction, count, trans, scope, repeats, element)
    assert len(re.findall(rf"^\s*{re.escape(opcode)}\s", ptx, re.M)) == instructions
    assert len(re.findall(r"^\s*(ldmatrix|stmatrix)\.", ptx, re.M)) == instructions
    assert ".local" not in ptx
    assert cubin_of_ptx(ptx, "sm_90")[:4] == b"\x7fELF"  # nvJitLink: CUDA 13.0's ptxas, always installed
