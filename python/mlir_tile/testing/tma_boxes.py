"""A GPU differential bundle for TMA's box writes: one kernel per box (each swizzle mode), whose one thread
loads the box at a coordinate of a global matrix into a shared tile (upstream's `nvgpu.tma.async.load`,
completing on an mbarrier) and whose threads then copy the tile's memory as it lies to global memory; the
host compares it, byte for byte, with the reference model's write (`reference.tma_box_write`) of the same
box, zero past the matrix's edges. Inner coordinates are multiples of 16 bytes (`tma.INNER_COORDINATE_BYTES`).

    build(folder)              # here, with MLIR: tma_<rows>x<columns>_<swizzle>.ptx per box
    run(folder, seed)          # on the GPU host (no MLIR): the boxes at random coordinates, tails included
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from mlir_tile.tma import INNER_COORDINATE_BYTES, Box

BOXES = [Box(64, 64, 16, 128), Box(64, 32, 16, 64), Box(64, 16, 16, 32), Box(32, 64, 16, 0), Box(32, 32, 32, 128)]
KERNEL, THREADS = "tma_box", 128
ELEMENT = {16: "i16", 32: "i32"}


def name(box: Box) -> str:
    return f"tma_{box.rows}x{box.columns}_{box.element_bits}b_{box.swizzle_bytes}"


def kernel_text(box: Box) -> str:
    """tma_box(map, out, row, column): the box at (row, column) of the map's matrix into a shared tile, then
    out[i] = the tile's element i in memory order."""
    element, count = ELEMENT[box.element_bits], box.rows * box.columns
    tile = f"memref<{box.rows}x{box.columns}x{element}, #gpu.address_space<workgroup>>"
    swizzle = f"swizzle_{box.swizzle_bytes}b" if box.swizzle_bytes else "none"
    return f"""
!map = !nvgpu.tensormap.descriptor<tensor = {tile}, swizzle = {swizzle}, l2promo = none, oob = zero, interleave = none>
!barrier = !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>>
module attributes {{gpu.container_module}} {{
  gpu.module @kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {{
    memref.global "private" @tile : {tile} {{alignment = 1024}}
    gpu.func @{KERNEL}(%map_pointer: !llvm.ptr, %out: memref<{count}x{element}>, %row: index, %column: index) kernel
        attributes {{known_block_size = array<i32: {THREADS}, 1, 1>}} {{
      %map = builtin.unrealized_conversion_cast %map_pointer : !llvm.ptr to !map
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %columns = arith.constant {box.columns} : index
      %count = arith.constant {count} : index
      %threads = arith.constant {THREADS} : index
      %bytes = arith.constant {count * box.element_bits // 8} : index
      %tid = gpu.thread_id x
      %tile = memref.get_global @tile : {tile}
      %barrier = nvgpu.mbarrier.create -> !barrier
      %first = arith.cmpi eq, %tid, %c0 : index
      nvgpu.mbarrier.init %barrier[%c0], %c1, predicate = %first : !barrier
      gpu.barrier
      scf.if %first {{
        nvgpu.tma.async.load %map[%column, %row], %barrier[%c0] to %tile : !map, !barrier -> {tile}
        nvgpu.mbarrier.arrive.expect_tx %barrier[%c0], %bytes : !barrier
      }}
      %phase = arith.constant false
      %ticks = arith.constant 10000000 : index
      nvgpu.mbarrier.try_wait.parity %barrier[%c0], %phase, %ticks : !barrier
      scf.for %i = %tid to %count step %threads {{
        %r = arith.divui %i, %columns : index
        %c = arith.remui %i, %columns : index
        %value = memref.load %tile[%r, %c] : {tile}
        memref.store %value, %out[%i] : memref<{count}x{element}>
      }}
      gpu.return
    }}
  }}
}}
"""


def build(folder: Path) -> None:
    from mlir import ir

    from mlir_tile.compile import compile_to_ptx

    folder.mkdir(parents=True, exist_ok=True)
    for box in BOXES:
        with ir.Context():
            (folder / f"{name(box)}.ptx").write_text(compile_to_ptx(ir.Module.parse(kernel_text(box)), chip="sm_90a"))


def expected(matrix: np.ndarray, box: Box, row: int, column: int) -> np.ndarray:
    """What the reference model's TMA write leaves in the tile's bytes, as the kernel copies them out."""
    from mlir_tile.reference import tma_box_write

    values = np.zeros((box.rows, box.columns), matrix.dtype)
    inside = matrix[row:row + box.rows, column:column + box.columns]
    values[:inside.shape[0], :inside.shape[1]] = inside
    shared = np.zeros(box.rows * box.columns * matrix.itemsize, np.uint8)
    tma_box_write(values, box.swizzle_bytes, shared)
    return shared.view(matrix.dtype)


def run(folder: Path, seed: int = 0, placements: int = 6) -> list[str]:
    """Each box at `placements` random coordinates of a random matrix (the last ones across its edges): the
    mismatches against the reference model (empty: every byte as the model says)."""
    from mlir_tile.runtime import Runtime

    rng, failures = np.random.default_rng(seed), []
    with Runtime() as runtime:
        for box in BOXES:
            dtype = {16: np.uint16, 32: np.uint32}[box.element_bits]
            rows, columns = 200, 8 * (37 if box.element_bits == 16 else 19)  # rows on 16 bytes
            matrix = rng.integers(1, 2**16 - 1, (rows, columns)).astype(dtype)
            source = runtime.to_device(matrix)
            tensor_map = runtime.to_device(runtime.tensor_map(int(source.handle), (rows, columns),
                                                              columns * matrix.itemsize, box))
            module = runtime.load_ptx((folder / f"{name(box)}.ptx").read_text(), name=name(box))
            step = INNER_COORDINATE_BYTES // matrix.itemsize  # (an inner coordinate off 16 bytes: illegal)
            for placement in range(placements):
                edge = placement >= placements // 2
                row = int(rng.integers(rows - box.rows // 2, rows) if edge else rng.integers(0, rows - box.rows))
                column = step * int(rng.integers((columns - box.columns // 2) // step, columns // step) if edge else
                                    rng.integers(0, (columns - box.columns) // step))
                (out,) = module.launch(KERNEL, [int(tensor_map.handle), np.zeros(box.rows * box.columns, dtype), row,
                                                column], grid=1, block=THREADS)
                want = expected(matrix, box, row, column)
                if not np.array_equal(out, want):
                    first = int(np.flatnonzero(out != want)[0])
                    failures.append(f"{name(box)} at ({row}, {column}): element {first} of the tile's memory is "
                                    f"{out[first]}, the model says {want[first]}")
            source.close()
            tensor_map.close()
    return failures
