"""A GPU differential bundle for TMA's box writes: one kernel per box (each swizzle mode), built with the builder,
whose one thread loads the box at a coordinate of a global matrix into a shared tile (`Kernel.tma_load`,
completing on an mbarrier) and whose threads then copy the tile's memory as it lies to global memory; the
host compares it, byte for byte, with the reference model's write (`reference.tma_box_write`) of the same
box, zero past the matrix's edges. Inner coordinates are multiples of 16 bytes (`tma.INNER_COORDINATE_BYTES`).

    build(folder)              # here, with MLIR: tma_<rows>x<columns>_<swizzle>.ptx per box
    run(folder, seed)          # on the GPU host (no MLIR): the boxes at random coordinates, tails included
    run_multicast(folder)      # one load into every CTA of a 2-CTA cluster (multicast), each CTA's tile checked
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


def build_module(box: Box):
    """tma_box(map, out, row, column_units): the box at (row, column_units x 16 bytes) of the map's matrix loaded
    by `Kernel.tma_load` into a shared tile through the box's layout, then out[i] = the tile's element i in
    memory order."""
    from mlir_tile.builder import Global, Kernel, TensorMap
    from mlir_tile.builder.tensor import in_units

    element, count = ELEMENT[box.element_bits], box.rows * box.columns
    passes = (count // THREADS, THREADS)
    with Kernel(KERNEL, [TensorMap(), Global(element), "index", "index"], block=(THREADS, 1, 1), chip="sm_90a") as k:
        tensor_map, out, row, column_units = k.arguments
        column = in_units(k, column_units, INNER_COORDINATE_BYTES * 8 // box.element_bits)
        view = k.view(k.dynamic_shared(alignment=1024), (count,), element)
        barriers = k.mbarriers("loaded", 1, 1)
        with k.if_(k.compare("eq", k.thread_id(), 0)):
            k.expect_bytes(barriers, 0, k.tma_load(k.tensor(view, box.layout), tensor_map, (row, column), barriers))
        k.wait_phase(barriers, 0, 0)
        tile, copied = k.tensor(view, passes), k.tensor(out, passes)
        for step in range(passes[0]):
            copied[step, k.thread_id()] = tile[step, k.thread_id()]
    return k.module


MULTICAST_BOX, CLUSTER = Box(64, 64, 16, 128), 2


def build_multicast_module(box: Box = MULTICAST_BOX):
    """tma_multicast(map, out, row, column_units), launched in clusters of CLUSTER CTAs: rank 0 loads the box
    once into the tile of every CTA of its cluster (`multicast`), each CTA waits for its own mbarrier and copies
    its tile's memory to out[cluster block, ...]: every copy must be the reference model's write."""
    from mlir_tile.builder import Global, Kernel, TensorMap
    from mlir_tile.builder.tensor import in_units

    element, count = ELEMENT[box.element_bits], box.rows * box.columns
    with Kernel("tma_multicast", [TensorMap(), Global(element), "index", "index"], block=(THREADS, 1, 1),
                chip="sm_90a", cluster=(CLUSTER, 1, 1)) as k:
        tensor_map, out, row, column_units = k.arguments
        column = in_units(k, column_units, INNER_COORDINATE_BYTES * 8 // box.element_bits)
        view = k.view(k.dynamic_shared(alignment=1024), (count,), element)
        barriers = k.mbarriers("loaded", 1, 1)  # (met by the cluster: initialized before a peer's multicast)
        with k.if_(k.compare("eq", k.thread_id(), 0)):
            k.expect_bytes(barriers, 0, box)
            with k.if_(k.compare("eq", k.cluster_rank(), 0)):
                k.tma_load(k.tensor(view, box.layout), tensor_map, (row, column), barriers, multicast=(1 << CLUSTER) - 1)
        k.wait_phase(barriers, 0, 0)
        passes = (count // THREADS, THREADS)
        tile, copied = k.tensor(view, passes), k.tensor(out, (k.grid_size(), *passes))
        for step in range(passes[0]):
            copied[k.block_id(), step, k.thread_id()] = tile[step, k.thread_id()]
        k.cluster_barrier()  # no CTA leaves while the multicast may still write into a peer
    return k.module


def build(folder: Path) -> None:
    from mlir_tile.compile import compile_to_ptx

    folder.mkdir(parents=True, exist_ok=True)
    for box in BOXES:
        (folder / f"{name(box)}.ptx").write_text(compile_to_ptx(build_module(box)))
    (folder / "tma_multicast.ptx").write_text(compile_to_ptx(build_multicast_module()))


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
                                                column // step], grid=1, block=THREADS,
                                       shared_bytes=box.rows * box.columns * matrix.itemsize)
                want = expected(matrix, box, row, column)
                if not np.array_equal(out, want):
                    first = int(np.flatnonzero(out != want)[0])
                    failures.append(f"{name(box)} at ({row}, {column}): element {first} of the tile's memory is "
                                    f"{out[first]}, the model says {want[first]}")
            source.close()
            tensor_map.close()
    return failures


def run_multicast(folder: Path, seed: int = 0, placements: int = 4, clusters: int = 3) -> list[str]:
    """The multicast kernel in `clusters` clusters at random coordinates (half across the edges): the
    mismatches of any CTA's tile against the reference model's write (empty: all as the model says)."""
    from mlir_tile.runtime import Runtime

    box, rng, failures = MULTICAST_BOX, np.random.default_rng(seed), []
    with Runtime() as runtime:
        rows, columns = 200, 8 * 37
        matrix = rng.integers(1, 2**16 - 1, (rows, columns)).astype(np.uint16)
        source = runtime.to_device(matrix)
        tensor_map = runtime.to_device(runtime.tensor_map(int(source.handle), (rows, columns), columns * 2, box))
        module = runtime.load_ptx((folder / "tma_multicast.ptx").read_text(), name="tma_multicast")
        grid = CLUSTER * clusters
        for placement in range(placements):
            edge = placement >= placements // 2
            row = int(rng.integers(rows - box.rows // 2, rows) if edge else rng.integers(0, rows - box.rows))
            column = 8 * int(rng.integers((columns - box.columns // 2) // 8, columns // 8) if edge else
                             rng.integers(0, (columns - box.columns) // 8))
            (out,) = module.launch("tma_multicast", [int(tensor_map.handle), np.zeros((grid, box.rows * box.columns),
                                                                                       np.uint16), row, column // 8],
                                   grid=grid, block=THREADS, shared_bytes=box.rows * box.columns * 2,
                                   cluster=CLUSTER)
            want = expected(matrix, box, row, column)
            for block in range(grid):
                if not np.array_equal(out[block], want):
                    first = int(np.flatnonzero(out[block] != want)[0])
                    failures.append(f"multicast at ({row}, {column}): CTA {block}'s element {first} is "
                                    f"{out[block][first]}, the model says {want[first]}")
        source.close()
        tensor_map.close()
    return failures
