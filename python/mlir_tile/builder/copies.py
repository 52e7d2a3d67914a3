"""Copies from global to shared memory: one cp.async (`nvgpu.device_async_copy`), its groups, and whole tiles
spread over the block with destinations from the shared layout (CuTe's TiledCopy), asynchronous or, for rows
of any alignment, element by element."""
from __future__ import annotations

from typing import NamedTuple, Sequence

from mlir import ir
from mlir.dialects import arith, llvm, memref, nvgpu, nvvm, vector

from mlir_tile.builder.common import BuilderError, count, is_int, memref_value, typed_value
from mlir_tile.algebra.layout import Layout
from mlir_tile.analysis.ir_facts import access_alignment, constant_int, folded_int, upper_bound, value_multiple

ASYNC_COPY_BYTES = (4, 8, 16)  # cp.async's sizes
ASYNC_TOKEN = "!nvgpu.device.async.token"


class TileChunks(NamedTuple):
    layout: Layout
    chunk: int  # elements a chunk
    row: ir.Value  # the thread's first chunk's row
    col: ir.Value  # and column (the same in every pass)
    rows_before: list[int]  # each pass's rows past `row`


class Copies:
    def copy_async(self, dst: ir.Value, dst_indices: Sequence, src: ir.Value, src_indices: Sequence, *,
                   bytes: int = 16, valid: ir.Value | int | None = None, whole: bool = False) -> ir.Value:
        """`cp.async` of `bytes` (4, 8 or 16) from global `src[src_indices]` to shared `dst[dst_indices]`
        (`nvgpu.device_async_copy`; 16 bytes bypass L1, `.cg`). `valid`: how many leading elements to read
        (an index value, clamped to 0..all); the rest are zero-filled, so a tile's tail needs no branch (with
        none valid, no byte is read). `whole`: `valid` is 0 or all, proven (a constant or a select of the
        two: no clamp is emitted, as copy_tile_async does). Both addresses' alignment is proven or BuilderError. Returns the copy's
        token for `commit_group`."""
        self._require("copy_async", "nvvm.cp.async.shared.global")
        memref_value(dst, "copy_async dst", "shared"), memref_value(src, "copy_async src", "global")
        self._touch(dst, "a cp.async", writes=True)
        if not isinstance(whole, bool):
            raise BuilderError(f"copy_async: whole is True or False, got {whole!r}")
        if bytes not in ASYNC_COPY_BYTES:
            raise BuilderError(f"copy_async: cp.async copies {ASYNC_COPY_BYTES} bytes, got {bytes!r}")
        element_type = ir.MemRefType(dst.type).element_type
        if element_type != ir.MemRefType(src.type).element_type:
            raise BuilderError(f"copy_async: dst and src hold different elements ({dst.type} and {src.type})")
        width = getattr(element_type, "width", 0) // 8
        if not width or bytes % width:
            raise BuilderError(f"copy_async: {bytes} bytes is no whole number of {element_type} elements")
        elements = bytes // width
        places = {}
        for name, buffer, indices in (("dst", dst, dst_indices), ("src", src, src_indices)):
            _, places[name], _ = self._vector_access(f"copy_async {name}", buffer, indices, elements, False)
        count_valid = None
        if valid is not None and whole:
            count_valid = self.as_index(valid)
            constant, bound = constant_int(count_valid), upper_bound(count_valid)
            if (constant is not None and constant not in (0, elements)) or bound is None or bound > elements:
                found = constant if constant is not None else "not proven" if bound is None else f"up to {bound}"
                raise BuilderError(f"copy_async: whole=True takes a valid proven to be 0 or all {elements} elements "
                                   f"(a select of the two), got {found}; leave whole out to clamp it")
        elif valid is not None:
            clamped = arith.maxsi(self.as_index(valid), self.index(0))
            count_valid = arith.minsi(clamped, self.index(elements))
        return nvgpu.device_async_copy(dst, places["dst"], src, places["src"], ir.IntegerAttr.get(
            ir.IndexType.get(), elements), src_elements=count_valid, bypass_l1=bytes == 16 or None)

    def commit_group(self, tokens: Sequence[ir.Value]) -> ir.Value:
        """`cp.async.commit_group` of the copies behind `tokens`."""
        if not isinstance(tokens, (list, tuple)) or not tokens:
            raise BuilderError(f"commit_group: a list of the tokens of copy_async calls, got {tokens!r}")
        tokens = [typed_value(t, "commit_group", ASYNC_TOKEN) for t in tokens]
        return nvgpu.device_async_create_group(tokens)

    def wait_groups(self, group: ir.Value, pending: int = 0) -> None:
        """`cp.async.wait_group pending`: wait until at most `pending` of this thread's committed groups are
        in flight (`group`: the latest commit_group's token; a barrier then makes the copies visible to the
        block)."""
        typed_value(group, "wait_groups", ASYNC_TOKEN)
        if not _dominates(group, ir.InsertionPoint.current.block):
            raise BuilderError("wait_groups: this commit_group's token was made inside a loop or branch that has "
                               "ended; pass a token made before it (the wait counts groups, not tokens)")
        count(pending, "wait_groups: pending", minimum=0)
        nvgpu.device_async_wait(group, num_groups=pending)

    def copy_tile(self, dst: ir.Value, dst_layout: Layout | str, src: ir.Value, src_origin: ir.Value | int,
                  src_row_stride: ir.Value | int, *, rows: int, cols: int, valid_rows: ir.Value | int,
                  valid_cols: ir.Value | int) -> None:
        """copy_tile_async's tile, for sources of any alignment (a row stride that is no multiple of 16
        bytes): each thread reads its chunks' elements one by one (an element past (valid_rows, valid_cols)
        reads element `src_origin` instead, which exists, and stores 0) and writes each chunk to shared
        memory as one 16-byte store at the layout's planned offset. Synchronous: a barrier makes it visible."""
        self._tile_source(dst, src, "copy_tile")
        chunks = self.tile_chunks(dst, dst_layout, rows, cols, what="copy_tile")
        chunk, row, col, rows_before = chunks.chunk, chunks.row, chunks.col, chunks.rows_before
        element_type = ir.MemRefType(dst.type).element_type
        zero = arith.constant(element_type, 0.0 if isinstance(element_type, ir.FloatType) else 0)
        origin, stride = self.as_index(src_origin), self.as_index(src_row_stride)
        limit_rows, limit_cols = self.as_index(valid_rows), self.as_index(valid_cols)
        for (view, index), before in zip(self.chunk_addresses(dst, chunks), rows_before):
            tile_row = arith.addi(row, self.index(before))
            row_inside = arith.cmpi(arith.CmpIPredicate.slt, tile_row, limit_rows)
            start = arith.addi(origin, arith.muli(tile_row, stride))
            values = []
            for e in range(chunk):
                column = arith.addi(col, self.index(e))
                inside = arith.andi(row_inside, arith.cmpi(arith.CmpIPredicate.slt, column, limit_cols))
                at = arith.select(inside, arith.addi(start, column), origin)
                values.append(arith.select(inside, memref.load(src, [at]), zero))
            packed = vector.from_elements(ir.VectorType.get([chunk], element_type), values)
            self.store_vector(packed, view, [index])

    def _tile_source(self, dst: ir.Value, src: ir.Value, what: str) -> None:
        """A tile's source: a global memref of the shared destination's elements."""
        memref_value(dst, f"{what} dst", "shared"), memref_value(src, f"{what} src", "global")
        if ir.MemRefType(dst.type).element_type != ir.MemRefType(src.type).element_type:
            raise BuilderError(f"{what}: src holds {ir.MemRefType(src.type).element_type} elements, dst "
                               f"{ir.MemRefType(dst.type).element_type}; a tile copy does not convert")

    def tile_chunks(self, tile: ir.Value, layout: Layout | str, rows: int, cols: int, chunk_bytes: int = 16,
                    what: str = "tile_chunks") -> "TileChunks":
        """How the block shares a rows x cols tile of `tile`'s elements in `chunk_bytes` chunks: thread t takes
        chunk t + j * threads of a row-major walk (one warp's chunks are whole rows), so its chunks are at row
        `row` + each of `rows_before`, column `col`. BuilderError when the block cannot share it evenly."""
        memref_value(tile, what, "shared")
        count(rows, f"{what}: rows"), count(cols, f"{what}: cols"), count(chunk_bytes, f"{what}: chunk_bytes")
        layout = self._layout_fits(tile, layout, what)
        if layout.rank != 2 or layout.sizes != (rows, cols):
            raise BuilderError(f"{what}: the layout {layout} is not a {rows} x {cols} layout (row, col)")
        width = getattr(ir.MemRefType(memref_value(tile, what).type).element_type, "width", 0) // 8
        chunk = chunk_bytes // width if width and chunk_bytes % width == 0 else 0
        threads = self.block[0] * self.block[1] * self.block[2]
        if not chunk or cols % chunk or (rows * cols // chunk) % threads or threads % (cols // chunk):
            raise BuilderError(f"{what}: {threads} threads cannot share a {rows} x {cols} tile in {chunk_bytes}-byte "
                               f"chunks evenly (cols a multiple of {chunk or f'{chunk_bytes} bytes'}, whole rows per "
                               f"pass)")
        if self.block[1:] != (1, 1):
            raise BuilderError(f"{what}: the block {self.block} is not one-dimensional")
        per_row = cols // chunk
        thread = self.thread_id()
        row = arith.divui(thread, self.index(per_row)) if per_row > 1 else thread
        col = arith.muli(arith.remui(thread, self.index(per_row)), self.index(chunk)) if per_row > 1 else self.index(0)
        rows_before = [j * threads // per_row for j in range(rows * cols // chunk // threads)]
        return TileChunks(layout, chunk, row, col, rows_before)

    def chunk_addresses(self, tile: ir.Value, chunks: "TileChunks") -> list[tuple[ir.Value, ir.Value]]:
        """Each pass's chunk of this thread (`tile_chunks`) as (view, index) into `tile`, planned: one
        per-thread base and constants the instructions carry as immediates."""
        if not isinstance(chunks, TileChunks):
            raise BuilderError(f"chunk_addresses: chunks come from tile_chunks, got {type(chunks).__name__}")
        return self.planned(tile, chunks.layout, [[(chunks.row, r), chunks.col] for r in chunks.rows_before],
                            chunks.chunk)

    def tma_load(self, dst, tensor_map: ir.Value, coordinate: Sequence, barriers: ir.Value,
                 index: ir.Value | int = 0, multicast: int | None = None) -> "Box":
        """A TMA load (`cp.async.bulk.tensor.2d`, sm_90) of the box at `coordinate` (row, column of the tensor
        map's matrix; or matrix, row, column of a 3-D map's, `.3d`) into the shared tensor `dst` (`Kernel.tensor`
        of a shared view at its start, through the
        tile's layout), completing on mbarrier `index` of `barriers` (`mbarriers`) once its bytes have landed:
        count them there with `expect_bytes`. One thread issues it (under `if_`: each thread that runs it loads
        the box). Returns the `tma.Box` (extents and swizzle mode) that the tile's layout asks for, for which
        the host encodes the tensor map (`Runtime.tensor_map`). BuilderError where no box writes the layout
        (naming the element that differs), where the tile's start is not proven aligned to the swizzle's
        repeat, or the column not proven a multiple of 16 bytes (an illegal instruction on the H200). A swizzled
        box narrower than its swizzle's span lays its rows a span apart (`[tma-swizzle-span]`): the tile's
        layout must too (`Box.layout`). Coordinates may be negative or past the matrix: those elements read 0.
        `multicast`: a mask of the cluster's CTA ranks (`Kernel(..., cluster=...)`) the box lands in, each at the
        tile's offset, each completing its own mbarrier `index` (each expects the box's bytes)."""
        box, start, coordinates = self._tma_box("tma_load", dst, tensor_map, coordinate)
        self._touch(dst.memory, "a TMA load", writes=True)
        i32 = ir.IntegerType.get_signless(32)
        # the destination in the cluster's shared window (address space 7), which this CTA's own is part of
        destination = llvm.addrspacecast(llvm.PointerType.get(7), llvm.inttoptr(llvm.PointerType.get(3), start))
        mask = None
        if multicast is not None:
            self._clustered("tma_load")
            size = self.cluster[0] * self.cluster[1] * self.cluster[2]
            if not is_int(multicast) or not 0 < multicast < 1 << size:
                raise BuilderError(f"[cluster] tma_load: multicast is a mask of the cluster's {size} CTA ranks (1 to "
                                   f"{(1 << size) - 1}), got {multicast!r}")
            mask = arith.constant(ir.IntegerType.get_signless(16), multicast)
        nvvm.cp_async_bulk_tensor_shared_cluster_global(
            destination, tensor_map, [arith.index_cast(i32, c) for c in coordinates], self._mbarrier(barriers, index), [],
            multicast_mask=mask)
        return box

    def _tma_tile(self, what: str, tile) -> "Box":
        """The TMA box whose write `tile` (a rank-2 shared tensor from its memory's start) is, or BuilderError."""
        from mlir_tile.builder.tensor import Tensor
        from mlir_tile.isa.tma import TmaMismatch, box_for

        if not isinstance(tile, Tensor) or tile.layout is None or tile.rank != 2 or not (is_int(tile.base) and tile.base == 0):
            raise BuilderError(f"[tma-tile] {what}: the tile is a rank-2 shared Tensor through its layout, from its "
                               f"memory's start, got {tile!r}")
        memory = ir.MemRefType(memref_value(tile.memory, f"{what} tile", "shared").type)
        if memory.get_strides_and_offset() != ([1], 0):
            raise BuilderError(f"[tma-tile] {what}: the tile's memory is a 1-D view from its start (k.view), got {memory}")
        try:
            return box_for(tile.layout, getattr(memory.element_type, "width", 0))
        except TmaMismatch as error:
            raise BuilderError(f"[tma-box] {what}: {error}") from None

    def _tma_box(self, what: str, tile, tensor_map: ir.Value, coordinate: Sequence):
        """(the box, the tile's shared address as an i64, the coordinates innermost first: column, row and the
        matrix of a 3-D map) of a TMA load or store of `tile` at `coordinate`, every fact the instruction needs
        proven: the tile's layout is a box's, its start on the swizzle's repeat, the column on 16 bytes."""
        from mlir_tile.isa.tma import ALIGNMENT, INNER_COORDINATE_BYTES

        self._require(what, "nvvm.cp.async.bulk.tensor.shared.cluster.global")
        box = self._tma_tile(what, tile)
        typed_value(tensor_map, f"{what} tensor_map", "!llvm.ptr")
        element_bits = box.element_bits
        proven = access_alignment(tile.memory, [self.index(0)])
        if proven is None or proven < ALIGNMENT[box.swizzle_bytes]:
            mode = f"{box.swizzle_bytes}-byte " if box.swizzle_bytes else "un"
            raise BuilderError(f"[tma-alignment] {what}: the box's {mode}swizzled tile must start "
                               f"on {ALIGNMENT[box.swizzle_bytes]} bytes, but {proven or 'no alignment'} "
                               f"{'bytes are' if proven else 'is'} proven (dynamic_shared(alignment=...), views at "
                               f"multiples of it)")
        if not isinstance(coordinate, (list, tuple)) or len(coordinate) not in (2, 3):
            raise BuilderError(f"{what}: coordinate is (row, column) of the matrix, or (matrix, row, column) of a 3-D "
                               f"tensor map's matrices (a box of one matrix), got {coordinate!r}")
        *outer, row, column = (self.as_index(c) for c in coordinate)
        if value_multiple(column) * element_bits // 8 % INNER_COORDINATE_BYTES:
            raise BuilderError(f"[tma-column] {what}: the column must be a proven multiple of {INNER_COORDINATE_BYTES} "
                               f"bytes ({INNER_COORDINATE_BYTES * 8 // element_bits} elements); a TMA access at another "
                               f"column is an illegal instruction")
        i64 = ir.IntegerType.get_signless(64)
        return box, arith.index_cast(i64, memref.extract_aligned_pointer_as_index(tile.memory)), [column, row, *outer]

    def tma_store(self, src, tensor_map: ir.Value, coordinate: Sequence) -> "Box":
        """A TMA store (`cp.async.bulk.tensor.2d.global.shared::cta`) of the shared tensor `src` (through its
        tile's layout, which must be a TMA box's: as for `tma_load`) to the box at `coordinate` (row, column) of
        the tensor map's matrix, or (matrix, row, column) of a 3-D map's (`.3d`: a box of one matrix, so that it
        stops at that matrix's last row), rows and columns past the matrix left alone (no predicate), committed as one
        bulk group: `tma_store_wait` before the tile's memory is written again or the kernel ends. The tile's
        writes must reach the async proxy first: every writer's `async_proxy_fence`, then a barrier. One
        thread issues it. Returns the box, for the host's tensor map, which `Runtime.tensor_map(...,
        store=True)` encodes only for rows of whole 16-byte chunks (`[tma-store-chunks]`: the hardware writes a
        row's last chunk whole). `[tma-store-coordinate]`: a coordinate the IR fixes to a negative value is
        refused (the hardware's illegal instruction); one it does not fix is the kernel's to keep non-negative
        (the library's are: block and tile indices times tile extents)."""
        box, source, coordinates = self._tma_out("tma_store", src, tensor_map, coordinate)
        nvvm.cp_async_bulk_tensor_global_shared_cta(tensor_map, source, coordinates)
        nvvm.cp_async_bulk_commit_group()
        return box

    def _tma_out(self, what: str, src, tensor_map: ir.Value, coordinate: Sequence):
        """(the box, the tile's shared pointer, the i32 coordinates) of a TMA store or reduction from `src`, its
        coordinates checked (`[tma-store-coordinate]`) as well as `_tma_box`'s facts."""
        from mlir_tile.isa.tma import check_store_coordinates

        box, start, coordinates = self._tma_box(what, src, tensor_map, coordinate)
        try:
            check_store_coordinates([folded_int(c) for c in coordinates])
        except ValueError as error:
            tag, _, reason = str(error).partition(" ")
            raise BuilderError(f"{tag} {what}: {reason}") from None
        i32 = ir.IntegerType.get_signless(32)
        return (box, llvm.inttoptr(llvm.PointerType.get(3), start),
                [arith.index_cast(i32, c) for c in coordinates])

    def tma_reduce_add(self, src, tensor_map: ir.Value, coordinate: Sequence) -> "Box":
        """A TMA reduction (`cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add.tile.bulk_group`): the fp32
        shared tensor `src` added element by element into the box at `coordinate` of the tensor map's matrix,
        each element's addition atomic (several CTAs may add into one box, in no order: a backward's dQ over its
        key blocks). The box, its coordinates and its issue as `tma_store`'s (one thread; the writers'
        `async_proxy_fence` and a barrier first; `tma_store_wait` before the tile is written again); the tensor
        map typed float32 (`Runtime.tensor_map(..., floats=True)`: the hardware adds as the map's type says).
        `[tma-reduce-element]`: a tile of another element type is refused."""
        element = ir.MemRefType(memref_value(getattr(src, "memory", src), "tma_reduce_add").type).element_type
        if element != ir.F32Type.get():
            raise BuilderError(f"[tma-reduce-element] tma_reduce_add: an f32 tile (the sums of fp32 partials), got "
                               f"{element}")
        box, source, coordinates = self._tma_out("tma_reduce_add", src, tensor_map, coordinate)
        nvvm.cp_async_bulk_tensor_reduce(tensor_map, source, nvvm.TMAReduxKind.ADD, coordinates,
                                         mode=nvvm.TMAStoreMode.TILE)
        nvvm.cp_async_bulk_commit_group()
        return box

    def tma_store_wait(self, pending: int = 0, complete: bool = False) -> None:
        """`cp.async.bulk.wait_group.read pending`: this thread's TMA stores but the newest `pending` have read
        their tiles (the tiles may be written again; the global writes go on). `complete=True`:
        `cp.async.bulk.wait_group pending`, until their global writes are done (before `release_flag`)."""
        if not is_int(pending) or not 0 <= pending <= 7:
            raise BuilderError(f"tma_store_wait: pending is 0 to 7, got {pending!r}")
        if not isinstance(complete, bool):
            raise BuilderError(f"tma_store_wait: complete is True or False, got {complete!r}")
        self._require("tma_store_wait", "nvvm.cp.async.bulk.wait_group")
        nvvm.cp_async_bulk_wait_group(pending, read=None if complete else True)

    def expect_bytes(self, barriers: ir.Value, index: ir.Value | int, box: "Box", copies: int = 1) -> None:
        """`mbarrier.arrive.expect_tx`: this thread's arrival on mbarrier `index`, the phase also waiting for the
        bytes of `copies` TMA loads of `box` (one arrival of the phase's `arrivals`; several copies: the boxes
        the cluster's CTAs multicast into this one)."""
        from mlir_tile.isa.tma import Box

        if not isinstance(box, Box):
            raise BuilderError(f"expect_bytes: the tma.Box that tma_load returned, got {box!r}")
        count(copies, "expect_bytes: copies", maximum=16)
        nvvm.mbarrier_arrive_expect_tx(ir.IntegerType.get_signless(64), self._mbarrier(barriers, index),
                                       self.constant(copies * box.bytes))

    def copy_tile_async(self, dst: ir.Value, dst_layout: Layout | str, src: ir.Value, src_origin: ir.Value | int,
                        src_row_stride: ir.Value | int, *, rows: int, cols: int, valid_rows: ir.Value | int | None = None,
                        valid_cols: ir.Value | int | None = None, chunk_bytes: int = 16) -> list[ir.Value]:
        """A rows x cols tile of row-major global `src` (element (r, c) at src_origin + r * src_row_stride + c)
        copied into shared `dst` at `dst_layout`'s offset of (r, c), by every thread of the block in 16-byte
        (or `chunk_bytes`: 8, 4, for rows aligned only so) cp.async chunks (CuTe's TiledCopy): thread t copies
        chunk t + j * threads, a row-major walk (`tile_chunks`), so one warp's chunks are whole rows.
        Destinations come from the layout through `planned`: one per-thread base and constants. Elements at or
        past (valid_rows, valid_cols) are zero-filled. Returns the copies' tokens."""
        if chunk_bytes not in ASYNC_COPY_BYTES:
            raise BuilderError(f"copy_tile_async: cp.async copies {ASYNC_COPY_BYTES} bytes, got {chunk_bytes!r}")
        self._tile_source(dst, src, "copy_tile_async")
        chunks = self.tile_chunks(dst, dst_layout, rows, cols, chunk_bytes, what="copy_tile_async")
        chunk, row, col, rows_before = chunks.chunk, chunks.row, chunks.col, chunks.rows_before
        stride = self.as_index(src_row_stride)
        source = arith.addi(arith.addi(self.as_index(src_origin), arith.muli(row, stride)), col)
        column_inside = column_limit = None  # for whole chunks a predicate, else the elements left in the row
        whole_chunks = True
        if valid_cols is not None:
            limit = self.as_index(valid_cols)
            # valid_cols a proven multiple of the chunk: every chunk is all in or all out, so its size is a
            # select of all or nothing (a predicate in SASS) instead of a clamp (a partial copy's address math)
            whole_chunks = value_multiple(limit) % chunk == 0
            if whole_chunks:
                column_inside = arith.cmpi(arith.CmpIPredicate.slt, col, limit)
            else:
                column_limit = arith.subi(limit, col)
        destinations = self.chunk_addresses(dst, chunks)
        tokens = []
        for before, (view, destination) in zip(rows_before, destinations):
            at = source if before == 0 else arith.addi(source, arith.muli(self.index(before), stride))
            inside = None
            if valid_rows is not None:
                inside = arith.cmpi(arith.CmpIPredicate.slt, arith.addi(row, self.index(before)),
                                    self.as_index(valid_rows))
            if column_inside is not None:
                inside = column_inside if inside is None else arith.andi(inside, column_inside)
            if inside is None:
                valid = column_limit
            else:
                valid = arith.select(inside, column_limit if column_limit is not None else self.index(chunk),
                                     self.index(0))
            tokens.append(self.copy_async(view, [destination], src, [at], bytes=chunk_bytes, valid=valid,
                                          whole=whole_chunks))
        return tokens


def _dominates(value: ir.Value, block: ir.Block) -> bool:
    """Whether `value`'s block is `block` or encloses it (a use there sees the value)."""
    owner = value.owner
    home = owner.operation.block if isinstance(owner, (ir.Operation, ir.OpView)) else owner
    while block is not None:
        if block == home:
            return True
        parent = block.owner
        block = parent.operation.block if parent is not None and parent.operation.parent is not None else None
    return False
