"""A GPU differential bundle for TMA's boxes (issue 57's rules): kernels built with the builder, one per box,
compared byte for byte on the GPU with the reference model (`reference.tma_box_write`, `tma_box_read`,
`tma_box_store`), which is written from the hardware's rules, not from `tma.Box`.

- Loads (`BOXES`): the block fills the box's whole shared image (`Box.shared_bytes`) with random bytes, then one
  thread loads the box at a coordinate of a global matrix into it (`Kernel.tma_load`, completing on an mbarrier
  that expects `Box.bytes`) and the block copies the image out: the model's write over the random bytes, zeros
  past the matrix's edges (before its first row and column too: negative coordinates), the padding of narrow
  swizzled boxes untouched ([tma-swizzle-span]). The matrices' rows end inside their 16-byte chunks half of the
  time (a view's pitch past them): loads clip exactly.
- Stores (`STORE_BOXES`): the block writes a random image, one thread stores the box (`Kernel.tma_store`) into a
  matrix inside a wider allocation; the whole allocation is compared with the model's store. Rows of whole
  16-byte chunks: nothing past the matrix changes. Rows that end inside a chunk: `Runtime.tensor_map(...,
  store=True)` refuses the map, and a map encoded as for a load shows the hardware writing the last chunk whole,
  as the model says ([tma-store-chunks]). A negative coordinate is refused before the launch
  ([tma-store-coordinate]).

    build(folder)              # here, with MLIR: one PTX per box
    run(folder, seed)          # on the GPU host (no MLIR): the loads at random coordinates, edges included
    run_stores(folder, seed)   # the stores, and the refusals
    run_multicast(folder)      # one load into every CTA of a 2-CTA cluster (multicast), each CTA's tile checked
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from mlir_tile.isa.targets import WARPGROUP_CHIP
from mlir_tile.isa.tma import INNER_COORDINATE_BYTES, Box, check_store_coordinates

NARROW = [Box(16, row_bytes * 8 // bits, bits, span) for span in (32, 64, 128) for row_bytes in (16, 32, 64)
          if row_bytes < span for bits in (8, 16, 32, 64)]  # every narrow row of every swizzle and element size
BOXES = [Box(64, 64, 16, 128), Box(64, 32, 16, 64), Box(64, 16, 16, 32), Box(32, 64, 16, 0), Box(32, 32, 32, 128),
         Box(16, 128, 8, 128), Box(16, 8, 64, 64)] + NARROW
STORE_BOXES = [Box(64, 64, 16, 128), Box(32, 32, 16, 0), Box(16, 8, 16, 32), Box(16, 4, 32, 64), Box(16, 16, 8, 128),
               Box(16, 2, 64, 32), Box(16, 16, 32, 64)]
KERNEL, STORE_KERNEL, THREADS = "tma_box", "tma_store_box", 128
ELEMENT = {8: "i8", 16: "i16", 32: "i32", 64: "i64"}
DTYPE = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
MATRIX_ROWS = 200


def name(box: Box, store: bool = False) -> str:
    return f"tma_{'store_' if store else ''}{box.rows}x{box.columns}_{box.element_bits}b_{box.swizzle_bytes}"


def _filled_image(k, box: Box, image):
    """The box's shared image (its `shared_bytes` from a 1024-byte start) as words, written by the block from
    the global words `image` and fenced for the async proxy: (the words' tensor, the box's tile, the passes)."""
    words = box.shared_bytes // 4
    if words % THREADS:
        raise ValueError(f"{box}: its image of {box.shared_bytes} bytes is no whole number of {THREADS} words")
    passes = (words // THREADS, THREADS)
    shared = k.dynamic_shared(alignment=1024)
    flat, given = k.tensor(k.view(shared, (words,), "i32"), passes), k.tensor(image, passes)
    for step in range(passes[0]):
        flat[step, k.thread_id()] = given[step, k.thread_id()]
    k.async_proxy_fence()  # (the block's writes come before the copy engine's)
    k.barrier()
    tile = k.tensor(k.view(shared, (box.shared_bytes * 8 // box.element_bits,), ELEMENT[box.element_bits]), box.layout)
    return flat, tile, passes


def build_module(box: Box):
    """tma_box(map, out, image, row, column_units): the shared image filled from `image`, the box at (row,
    column_units x 16 bytes) of the map's matrix loaded into it through the box's layout, then out = the image."""
    from mlir_tile.builder import Global, Kernel, TensorMap
    from mlir_tile.builder.tensor import in_units

    with Kernel(KERNEL, [TensorMap(), Global("i32"), Global("i32"), "index", "index"], block=(THREADS, 1, 1),
                chip=WARPGROUP_CHIP) as k:
        tensor_map, out, image, row, column_units = k.arguments
        column = in_units(k, column_units, INNER_COORDINATE_BYTES * 8 // box.element_bits)
        barriers = k.mbarriers("loaded", 1, 1)
        flat, tile, passes = _filled_image(k, box, image)
        with k.if_(k.compare("eq", k.thread_id(), 0)):
            k.expect_bytes(barriers, 0, k.tma_load(tile, tensor_map, (row, column), barriers))
        k.wait_phase(barriers, 0, 0)
        copied = k.tensor(out, passes)
        for step in range(passes[0]):
            copied[step, k.thread_id()] = flat[step, k.thread_id()]
    return k.module


def build_store_module(box: Box):
    """tma_store_box(map, image, row, column_units): the shared image written from `image`, then the box stored
    through its layout at (row, column_units x 16 bytes) of the map's matrix."""
    from mlir_tile.builder import Global, Kernel, TensorMap
    from mlir_tile.builder.tensor import in_units

    with Kernel(STORE_KERNEL, [TensorMap(), Global("i32"), "index", "index"], block=(THREADS, 1, 1),
                chip=WARPGROUP_CHIP) as k:
        tensor_map, image, row, column_units = k.arguments
        column = in_units(k, column_units, INNER_COORDINATE_BYTES * 8 // box.element_bits)
        _, tile, _ = _filled_image(k, box, image)
        with k.if_(k.compare("eq", k.thread_id(), 0)):
            k.tma_store(tile, tensor_map, (row, column))
            k.tma_store_wait(0)
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
                chip=WARPGROUP_CHIP, cluster=(CLUSTER, 1, 1)) as k:
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
    from mlir_tile.compiler.compile import compile_to_ptx

    folder.mkdir(parents=True, exist_ok=True)
    for box in BOXES:
        (folder / f"{name(box)}.ptx").write_text(compile_to_ptx(build_module(box)))
    for box in STORE_BOXES:
        (folder / f"{name(box, store=True)}.ptx").write_text(compile_to_ptx(build_store_module(box)))
    (folder / "tma_multicast.ptx").write_text(compile_to_ptx(build_multicast_module()))


def box_values(matrix: np.ndarray, box: Box, row: int, column: int) -> np.ndarray:
    """The box's elements at (row, column) of `matrix` as a load gives them: zeros outside it, on every side."""
    values = np.zeros((box.rows, box.columns), matrix.dtype)
    rows, columns = matrix.shape
    r0, c0 = max(row, 0), max(column, 0)
    r1, c1 = min(row + box.rows, rows), min(column + box.columns, columns)
    if r0 < r1 and c0 < c1:
        values[r0 - row:r1 - row, c0 - column:c1 - column] = matrix[r0:r1, c0:c1]
    return values


def expected(matrix: np.ndarray, box: Box, row: int, column: int, image: np.ndarray | None = None) -> np.ndarray:
    """What the reference model's TMA write leaves in the box's shared image (`image`'s bytes before it, zeros
    by default), as the kernel copies it out (in the matrix's elements)."""
    from mlir_tile.models.reference import tma_box_write

    shared = (np.zeros(box.shared_bytes, np.uint8) if image is None else
              np.ascontiguousarray(image).view(np.uint8).copy())
    tma_box_write(box_values(matrix, box, row, column), box.swizzle_bytes, shared)
    return shared.view(matrix.dtype)


def _placements(rng, box: Box, rows: int, columns: int, step: int, count: int) -> list[tuple[int, int]]:
    """(row, column) of `count` boxes: inside, across the last row or column, and before the first (negative),
    columns on `step` elements (16 bytes)."""
    def column_in(low: int, high: int) -> int:
        return step * int(rng.integers(low // step, max(low // step + 1, high // step)))

    places = []
    for i in range(count):
        kind = i % 3
        if kind == 0:
            places.append((int(rng.integers(0, rows - box.rows)), column_in(0, columns - box.columns)))
        elif kind == 1:
            places.append((int(rng.integers(rows - box.rows // 2, rows)), column_in(columns - box.columns // 2, columns)))
        else:
            places.append((-int(rng.integers(1, box.rows)), -step * int(rng.integers(1, max(2, box.columns // step)))))
    return places


def _matrix(rng, box: Box, whole_chunks: bool) -> tuple[np.ndarray, int]:
    """A random allocation of MATRIX_ROWS rows and the matrix's columns inside it: 37 chunks of 16 bytes, or one
    element fewer (its rows end inside their last chunk, the pitch past them)."""
    dtype, step = DTYPE[box.element_bits], INNER_COORDINATE_BYTES * 8 // box.element_bits
    allocation = rng.integers(0, np.iinfo(dtype).max, (MATRIX_ROWS, 40 * step), dtype=dtype, endpoint=True)
    return allocation, 37 * step - (0 if whole_chunks else 1)


def _first_difference(out: np.ndarray, want: np.ndarray) -> str:
    """The first byte where `out` and `want` differ, how many do, and where the 16 bytes the model put at that
    chunk were found instead (a narrow box's rows, say, landing elsewhere)."""
    got, model = np.ascontiguousarray(out).view(np.uint8).ravel(), np.ascontiguousarray(want).view(np.uint8).ravel()
    wrong = np.flatnonzero(got != model)
    chunk = int(wrong[0]) // 16 * 16
    pattern = model[chunk:chunk + 16].tobytes()
    found = got.tobytes().find(pattern)
    return (f"byte {int(wrong[0])} is {int(got[wrong[0]])}, the model says {int(model[wrong[0]])} ({len(wrong)} bytes "
            f"differ); the model's chunk at byte {chunk} is {'at byte ' + str(found) if found >= 0 else 'nowhere'}")


def run(folder: Path, seed: int = 0, placements: int = 6) -> list[str]:
    """Each load box at `placements` random coordinates (inside, across the far edges, before the first row
    and column) of random matrices, rows of whole 16-byte chunks and not: the mismatches against the reference
    model (empty: every byte as the model says)."""
    from mlir_tile.runtime import Runtime

    rng, failures = np.random.default_rng(seed), []
    with Runtime() as runtime:
        for number, box in enumerate(BOXES):
            allocation, columns = _matrix(rng, box, whole_chunks=number % 2 == 0)
            source = runtime.to_device(allocation)
            tensor_map = runtime.tensor_map(int(source.handle), (MATRIX_ROWS, columns), allocation.strides[0], box)
            module = runtime.load_ptx((folder / f"{name(box)}.ptx").read_text(), name=name(box))
            step = INNER_COORDINATE_BYTES * 8 // box.element_bits  # (an inner coordinate off 16 bytes: illegal)
            for row, column in _placements(rng, box, MATRIX_ROWS, columns, step, placements):
                image = rng.integers(0, 2**32, box.shared_bytes // 4, dtype=np.uint32)
                (out, _) = module.launch(KERNEL, [tensor_map, np.zeros_like(image), image, row,
                                                  column // step], grid=1, block=THREADS, shared_bytes=box.shared_bytes)
                want = expected(allocation[:, :columns], box, row, column, image).view(np.uint32)
                if not np.array_equal(out, want):
                    failures.append(f"{name(box)} at ({row}, {column}) of {columns} columns: "
                                    f"{_first_difference(out, want)}")
            source.close()
    return failures


def _store_once(runtime, module, box: Box, allocation: np.ndarray, columns: int, row: int, column: int, rng,
                store_map: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """One store of a random image at (row, column) into a device copy of `allocation` whose first `columns`
    are the matrix: (the allocation after, the model's), the map encoded for stores or, `store_map` False, as
    for a load (what [tma-store-chunks] refuses). Refusals raise ValueError before the launch."""
    from mlir_tile.models.reference import tma_box_read, tma_box_store

    check_store_coordinates([column, row])  # (the coordinates are the kernel's arguments: checked here)
    image = rng.integers(0, 2**32, box.shared_bytes // 4, dtype=np.uint32)
    step = INNER_COORDINATE_BYTES * 8 // box.element_bits
    destination = runtime.to_device(allocation)
    try:
        tensor_map = runtime.tensor_map(int(destination.handle), (MATRIX_ROWS, columns), allocation.strides[0], box,
                                        store=store_map)
        module.launch(STORE_KERNEL, [tensor_map, image, row, column // step], grid=1, block=THREADS,
                      shared_bytes=box.shared_bytes)
        after = runtime.to_host(destination, allocation)
    finally:
        destination.close()
    want = allocation.copy()
    read = tma_box_read(image.view(np.uint8), box.swizzle_bytes, box.rows, box.row_bytes)
    itemsize = allocation.itemsize
    tma_box_store(read, want.view(np.uint8), row, column * itemsize, columns * itemsize)
    return after, want


def run_stores(folder: Path, seed: int = 0, placements: int = 6) -> list[str]:
    """Each store box at `placements` coordinates (inside, across the far edges) of a matrix of whole-chunk rows
    inside a wider allocation, and once across the last column of one whose rows end inside a chunk; then a
    negative coordinate: the mismatches against the model and the refusals missed (empty: all as said)."""
    from mlir_tile.runtime import Runtime

    rng, failures = np.random.default_rng(seed), []
    with Runtime() as runtime:
        for box in STORE_BOXES:
            module = runtime.load_ptx((folder / f"{name(box, store=True)}.ptx").read_text(), name=name(box, True))
            step = INNER_COORDINATE_BYTES * 8 // box.element_bits
            allocation, columns = _matrix(rng, box, whole_chunks=True)
            places = [p for p in _placements(rng, box, MATRIX_ROWS, columns, step, 3 * placements) if p[0] >= 0]
            for row, column in places[:placements]:
                after, want = _store_once(runtime, module, box, allocation, columns, row, column, rng)
                if not np.array_equal(after, want):
                    failures.append(f"{name(box, True)} at ({row}, {column}): {_first_difference(after, want)}")
            allocation, columns = _matrix(rng, box, whole_chunks=False)
            last = (columns // step) * step  # the chunk the matrix's rows end inside
            try:
                _store_once(runtime, module, box, allocation, columns, 0, last, rng)
                failures.append(f"{name(box, True)}: a store map of rows of {columns} elements was not refused")
            except ValueError as error:
                if "[tma-store-chunks]" not in str(error):
                    raise
            after, want = _store_once(runtime, module, box, allocation, columns, 0, last, rng, store_map=False)
            if not np.array_equal(after, want):  # (the model writes the last chunk whole: the rule's witness)
                failures.append(f"{name(box, True)} across column {columns}: {_first_difference(after, want)}")
            try:
                _store_once(runtime, module, box, allocation, 37 * step, -box.rows // 2, 0, rng)
                failures.append(f"{name(box, True)}: a store at row {-box.rows // 2} was not refused")
            except ValueError as error:
                if "[tma-store-coordinate]" not in str(error):
                    raise
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
        tensor_map = runtime.tensor_map(int(source.handle), (rows, columns), columns * 2, box)
        module = runtime.load_ptx((folder / "tma_multicast.ptx").read_text(), name="tma_multicast")
        grid = CLUSTER * clusters
        for placement in range(placements):
            edge = placement >= placements // 2
            row = int(rng.integers(rows - box.rows // 2, rows) if edge else rng.integers(0, rows - box.rows))
            column = 8 * int(rng.integers((columns - box.columns // 2) // 8, columns // 8) if edge else
                             rng.integers(0, (columns - box.columns) // 8))
            (out,) = module.launch("tma_multicast", [tensor_map, np.zeros((grid, box.rows * box.columns),
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
    return failures
