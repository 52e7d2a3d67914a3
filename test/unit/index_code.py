"""Index code interpreted: what a kernel's straight-line index arithmetic stores, for given kernel arguments and
thread, lane and block ids (the tensor and schedule tests' oracle is numpy, this only runs the IR)."""
from mlir import ir
from mlir.dialects import arith

from mlir_tile.builder import Kernel

_BINARY = {"arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b, "arith.muli": lambda a, b: a * b,
           "arith.divui": lambda a, b: a // b, "arith.remui": lambda a, b: a % b, "arith.minui": min,
           "arith.minsi": min, "arith.maxsi": max, "arith.andi": lambda a, b: a & b, "arith.ori": lambda a, b: a | b,
           "arith.xori": lambda a, b: a ^ b, "arith.shli": lambda a, b: a << b, "arith.shrui": lambda a, b: a >> b}
_COMPARE = {0: lambda a, b: a == b, 1: lambda a, b: a != b, 2: lambda a, b: a < b, 3: lambda a, b: a <= b,
            4: lambda a, b: a > b, 5: lambda a, b: a >= b, 6: lambda a, b: a < b, 7: lambda a, b: a <= b,
            8: lambda a, b: a > b, 9: lambda a, b: a >= b}  # arith.CmpIPredicate's numbering


def run(kernel: Kernel, arguments: list[int], thread: int = 0, block: int = 0, grid: int = 1) -> dict[int, int]:
    """What the kernel's straight-line code stores to its first argument (an index memref), by position, for
    these index arguments (after the first) and ids."""
    function = next(op for op in kernel.module.operation.regions[0].blocks[0].operations[0].regions[0].blocks[0]
                    .operations if op.operation.name == "gpu.func").operation
    entry = function.regions[0].blocks[0]
    values = {entry.arguments[i + 1]: value for i, value in enumerate(arguments)}
    stored = {}
    for op in (o.operation for o in entry.operations):
        operands = [values.get(v) for v in op.operands]
        ids = {"gpu.thread_id": thread, "gpu.block_id": block, "gpu.grid_dim": grid, "gpu.lane_id": thread % 32}
        if op.name in ids:
            values[op.result] = ids[op.name]
        elif op.name == "arith.constant" and isinstance(op.attributes["value"], ir.IntegerAttr):
            values[op.result] = ir.IntegerAttr(op.attributes["value"]).value
        elif op.name in _BINARY:
            values[op.result] = _BINARY[op.name](*operands)
        elif op.name == "arith.cmpi":
            values[op.result] = int(_COMPARE[ir.IntegerAttr(op.attributes["predicate"]).value](*operands))
        elif op.name == "arith.select":
            values[op.result] = operands[1] if operands[0] else operands[2]
        elif op.name == "arith.index_castui":
            values[op.result] = operands[0]
        elif op.name == "memref.store":
            stored[operands[2]] = operands[0]
    return stored


def kernel(sizes: int, build, block: int = 32) -> Kernel:
    """A kernel of an output memref and `sizes` index arguments; `build(k, *sizes)` returns the values to store."""
    with Kernel("k", ["memref<64xindex>", *["index"] * sizes], block=(block, 1, 1), context=ir.Context()) as k:
        out, *arguments = k.arguments
        for position, value in enumerate(build(k, *arguments)):
            if isinstance(value, ir.Value) and value.type == ir.IntegerType.get_signless(1):
                value = arith.index_castui(ir.IndexType.get(), value)
            k.store(k.as_index(value), out, [position])
    return k
