"""C = A x B on tensor cores, written with the builder alone: fp16 or bf16 in, fp32 accumulate, the input type

The default `Config`: one CTA of 4 warps (2 x 2, 64 x 64 each) computes a 128 x 128 tile of C (CTAs in
groups of 8 tile rows, for L2), walking K in 32-wide k-tiles through a 4-stage cp.async pipeline in dynamic
shared memory (64 KiB). Per k16 block: the fragments of the next block by one ldmatrix.x4 / ldmatrix.x4.trans
transfer each (the CTA layouts of `mlir_tile.tiling.tiled`, from the algebra; two register buffers), and 32
mma.sync m16n8k16 on this block's; at a k-tile's first block, the copies of the k-tile three ahead (CuTe's
TiledCopy: 16-byte chunks, one base address per thread and immediate offsets, rows and columns past the
matrix zero-filled); before its last, the wait for the next k-tile and a barrier. CTAs inside M and N run
a twin of that loop without the zero-fill while the k-tile they copy lies inside K. The epilogue packs the
accumulators, stores them with stmatrix into a swizzled C tile and writes 16-byte rows inside C (sm_80, which
has no stmatrix: each lane's accumulator pairs directly). `Matmul` picks the tile per product (`pick_tile`).

Kernel parameters (any cuda-python, CuPy or torch user can launch the PTX; `Matmul` does it for torch
tensors): `gemm(a, b, c, m, n_units, k_units)`, three pointers to arrays aligned to `align` bytes, and three
64-bit integers: M, N / unit and K / unit, where unit = align / 2 elements (align 16: N and K multiples of 8,
16-byte cp.async; 8 and 4: narrower copies; 2: any N and K, element copies). Grid ceil(M / 128) *
ceil(N / 128) (one dimension), block 128, `Config.shared_bytes` of dynamic shared memory.

The persistent kernel (`Config.persistent`, the 128 x 256 x 64 tile in 4 stages with B [N, K] and rows on 16
bytes, `--tile 128x256x64s4p`; `Matmul` takes it for bf16 with B [N, K] where its tiles fill the SMs):
the same parameters, grid min(tiles, SMs), `Config.shared_bytes` (the stages and a 64-row band of the C
tile). CTA c walks C tiles c, c + grid, ...; each tile's last 3 k-tiles' steps copy the next tile's first
3, so they land while this one finishes, and each tile's C goes out through the band in two halves. Edge
tiles move back inside M and N, so it takes M >= 128, N >= 256 and K >= 192 (it traps otherwise).

Split-K (`Config.split_k`, which `Matmul` takes where the C tiles leave SMs idle and K is long: `pick_splits`):
`gemm(a, b, partials, m, n_units, k_units, splits)`, grid `splits` times the tiles; CTA `tile + s * tiles`
walks k-tiles s * ceil(k_tiles / splits) onwards and writes its fp32 product to `partials` [splits, M, N]
(zeros where no k-tile is left for it); then `gemm_reduce(partials, c, M * N, splits)`
(`build_reduce_module`) sums each element over the splits in order and rounds it once.
"""
from __future__ import annotations

from mlir_tile.isa.targets import DEFAULT_CHIP, has_instruction
from mlir_tile.kernels.common import epilogue_suffix, for_each_arm, operand_parameters
from mlir_tile.kernels.epilogues import Choice, Epilogue
from mlir_tile.kernels.gemm.sm80_tiles import Config, DEFAULT, HALF


KERNEL = "gemm"


def tiled_mma(config: Config = DEFAULT):
    """The CTA's transfers from the shared tiles' layouts (in 32-bit words; `synthesize` picks each tile's
    swizzle so that every ldmatrix, stmatrix and 16-byte copy phase is conflict-free)."""
    from mlir_tile.tiling.synthesize import Tile, synthesize
    from mlir_tile.tiling.tiled import tiled_mma_m16n8k16

    def tile(rows, columns):
        shape = Tile(rows, columns)
        return synthesize(shape).layout(shape)

    b = tile(config.bk, config.bn) if config.b_major == "kn" else tile(config.bn, config.bk)
    return tiled_mma_m16n8k16(config.warps, (config.bm, config.bn, config.bk), tile(config.bm, config.bk), b,
                              tile(config.bm, config.bn), config.b_major)


def build_module(element: str = "f16", config: Config = DEFAULT, chip: str = DEFAULT_CHIP, context=None,
                 epilogue: Epilogue | Choice | None = None):
    """The kernel for `chip`: sm_90 stores C through stmatrix and a swizzled C tile with 16-byte stores;
    sm_80 (no stmatrix) stores each thread's accumulator pairs directly. `config.persistent`: see
    `Config.persistent` (sm_90, rows on 16 bytes, B [N, K]). `epilogue` (see `epilogues`): applied to
    each accumulator before it is rounded, its operands the kernel's arguments after the sizes (a split-K
    kernel leaves it to `build_reduce_module`'s)."""
    from mlir_tile.builder import Global, Kernel

    if config.persistent and (not has_instruction(chip, "stmatrix") or config.align != 16 or config.b_major != "nk" or config.split_k
                              or not config.pipelined):
        raise ValueError(f"gemm: a persistent kernel is built for sm_90, rows on 16 bytes, B [N, K], pipelined, "
                         f"without split-K; got {config} for {chip}")
    parameters = [Global(element), Global(element), Global("f32" if config.split_k else element), "index", "index",
                  "index"]
    if config.split_k:
        parameters.append("index")
    elif epilogue is not None:
        parameters += operand_parameters(epilogue, element)
    with Kernel(KERNEL, parameters, block=(config.threads, 1, 1), chip=chip, context=context) as k:
        _Gemm(k, element, config, chip, epilogue).build()
    return k.module


class _Gemm:
    """The GEMM kernel `build_module` builds into `k`: A, B and C as tensors, the tile order and the shared
    stages and register storage (made here, in the order the kernel's IR has them); `build` emits the main
    loop (`element_copies`, `pipelined`, `unpipelined` or `persistent`) and the epilogue. Every address and
    predicate comes from the tensors (`mlir_tile.builder.tensor`) and the schedule (`builder.schedule`)."""

    def __init__(self, k, element: str, config: Config, chip: str, epilogue):
        from mlir_tile import contract
        from mlir_tile.builder.schedule import SplitK, StageRing, TileOrder
        from mlir_tile.builder.tensor import in_units
        from mlir_tile.algebra.words import unpack_b32

        self.k, self.element, self.config, self.chip, self.epilogue = k, element, config, chip, epilogue
        self.tiled = tiled = tiled_mma(config)
        self.a_halves, self.b_halves, self.c_halves = (unpack_b32(o.tile) for o in (tiled.a, tiled.b, tiled.c))
        a, b, c, self.m, n_units, k_units = k.arguments[:6]
        self.splits, self.extras = (k.arguments[6:], []) if config.split_k else ([], k.arguments[6:])
        # N and K come as counts of `unit`s: every row then starts on `align` bytes, provably
        self.n, self.depth = in_units(k, n_units, config.unit), in_units(k, k_units, config.unit)
        self.order = TileOrder(k, (self.m, self.n), (config.bm, config.bn), config.group)
        self.block, self.k_columns = k.block_id(), (0, self.depth)  # the CTA's C tile, its columns of A
        self.mA = k.tensor(a, (self.m, self.depth))
        self.mB = k.tensor(b, (self.depth, self.n) if config.b_major == "kn" else (self.n, self.depth))
        self.mC = k.tensor(c, (self.m, self.n))
        if config.split_k:  # the split's fp32 partial product goes to its M x N slice of the workspace
            split_k = SplitK(k, self.order.count, self.depth, config.bk, self.splits[0])
            split, self.block = split_k.of_block(self.block)
            self.k_columns = split_k.columns(split)
            self.mC = k.tensor(c, (self.splits[0], self.m, self.n))[split, None, None]
        self.cC = k.identity_tensor((self.m, self.n))
        # the buffer starts on the longest swizzle period, so that every stage's swizzle keeps its banks
        self.shared = k.dynamic_shared(alignment=max(contract.aligned_for(o.tile) for o in (tiled.a, tiled.b, tiled.c)))
        self.ring = StageRing(k, self.shared, config.stages, [(element, config.bm * config.bk),
                                                              (element, config.bk * config.bn)])
        self.accumulators = k.registers(tiled.accumulator_slots, "f32")
        self.zero = k.constant(0.0, "f32")
        self.clear_accumulators()
        self.c_regs = k.registers(tiled.c.whole.slots)
        self.parts = config.warps[0] if config.persistent else 1

    def build(self) -> None:
        from mlir.dialects import llvm

        k, config = self.k, self.config
        if config.persistent:  # edge tiles move back inside M and N, which only M >= bm and N >= bn allow, and a
            # tile's first k-tiles are copied during the tile before: else trap (Matmul and the command line
            # refuse such sizes before launching)
            with k.if_(k.compare("ult", self.m, config.bm) | k.compare("ult", self.n, config.bn)
                       | k.compare("ult", self.depth, (config.stages - 1) * config.bk)):
                llvm.intr_trap()
            with k.if_(k.compare("ult", self.block, self.order.count)):  # a grid past the tiles: the rest idle
                self.persistent()
            return
        self.origin = self.order.origin(self.block)
        self.operands = self.operand_tiles(self.origin)
        if config.align == HALF:
            group = self.element_copies()
        else:
            group = self.pipelined() if config.pipelined else self.unpipelined()
        if group is not None:
            k.wait_groups(group, 0)
        self.epilogue_out()

    def epilogue_out(self) -> None:
        """C out: a split's fp32 partial into its slice of the workspace, sm_80's pair stores, or sm_90's
        stmatrix through shared memory."""
        k, origin = self.k, self.origin
        if self.config.split_k:
            _store_accumulators(k, self.config, self.tiled, self.accumulators, self.mC, self.cC, origin, "f32")
            return
        k.barrier()
        if not has_instruction(self.chip, "stmatrix"):
            _store_accumulators(k, self.config, self.tiled, self.accumulators, self.mC, self.cC, origin, self.element,
                                self.epilogue, self.extras)
            return
        self.store_c(origin, origin, 0)

    # ----- the pieces of the main loops -----
    def operand_tiles(self, origin) -> list:
        """(tiles, coordinates, K's mode) of A and B for the C tile at element `origin`: the tile's rows of A and
        columns of B by k-tile from the CTA's first column of K on (tile x k-tiles), their coordinates for
        the predicates, and which of the tile's two modes runs along K."""
        from mlir_tile.builder.tensor import local_tile

        k, config = self.k, self.config
        (row0, col0), (k_start, k_end) = origin, self.k_columns
        along_k = ((self.mA, (row0, k_start), (config.bm, config.bk), (self.m, k_end), 1),)
        if config.b_major == "kn":
            along_k += ((self.mB, (k_start, col0), (config.bk, config.bn), (k_end, self.n), 0),)
        else:
            along_k += ((self.mB, (col0, k_start), (config.bn, config.bk), (self.n, k_end), 1),)
        tiles = []
        for tensor, start, tiler, extents, k_mode in along_k:
            by_k = (0, None) if k_mode == 1 else (None, 0)
            tiles.append((local_tile(tensor.domain_offset(start), tiler, by_k),
                          local_tile(k.identity_tensor(extents).domain_offset(start), tiler, by_k), k_mode))
        return tiles

    def clear_accumulators(self) -> None:
        for slot in range(self.tiled.accumulator_slots):
            self.k.store(self.zero, self.accumulators, [slot])

    def load(self, operands, k_tile, stage, inside_mn=False, inside_k=False, asynchronous=True):
        """The copies of k-tile `k_tile` of `operands` (`operand_tiles`) into `stage`, zero past the matrix
        (and its group, asynchronous); `inside_mn`, `inside_k`: the tiles' rows and columns of M or N, of K
        are known to lie inside the matrix, so the copies take no predicate for them."""
        k, tokens = self.k, []
        for (tiles, coordinates, k_mode), view, layout in zip(operands, self.ring.views(stage),
                                                              (self.a_halves, self.b_halves)):
            known = [inside_mn, inside_mn]
            known[k_mode] = inside_k
            valid = coordinates[None, None, k_tile].residue([d for d in range(2) if not known[d]])
            tokens += k.copy(tiles[None, None, k_tile], k.tensor(view, layout), valid=valid,
                             chunk_bytes=self.config.align, asynchronous=asynchronous)
        return k.commit_group(tokens) if asynchronous else None

    def fragments(self, stage, block, buffers) -> None:
        """ldmatrix of one k16 block (all of them: block None) of `stage`."""
        from mlir_tile.builder import transfer

        k, tiled = self.k, self.tiled
        for operand, registers, words in zip((tiled.a, tiled.b), buffers, self.ring.views(stage, "i32")):
            t = operand.whole if block is None else operand.k_block(block)
            if t.shared_offset:  # the block's view of the stage: the swizzle keeps its place
                words = k.subview(words, t.shared_offset, operand.tile.cosize - t.shared_offset)
            transfer(t.opcode, registers, words, dst_layout=t.registers, src_layout=t.shared, scope="cta")

    def multiply(self, buffers, blocks_in_buffers: int) -> None:
        tiled = self.tiled
        for block in range(blocks_in_buffers):
            for mi in range(tiled.m_blocks):
                for ni in range(tiled.n_blocks):
                    self.k.mma(tiled.atom, buffers[0], tiled.a_slots(mi, block), buffers[1], tiled.b_slots(ni, block),
                                        self.accumulators, tiled.accumulator_block(mi, ni), self.element)

    def start_pipeline(self, copy_ahead, first_stage):
        """The pipelined loop's prologue: the copies of the first `stages - 1` k-tiles (`copy_ahead(j)` issues
        k-tile j's and returns its group), the wait for the first and the fragments of its first k16 block
        (in `first_stage`); returns the last group and the two register buffers."""
        k, tiled, stages = self.k, self.tiled, self.config.stages
        for ahead in range(stages - 1):
            group = copy_ahead(ahead)
        blocks = tiled.a.k_blocks
        buffers = [(k.registers(tiled.a.whole.slots // blocks), k.registers(tiled.b.whole.slots // blocks))
                   for _ in range(2)]
        k.wait_groups(group, stages - 2)
        k.barrier()
        self.fragments(first_stage, 0, buffers[0])
        return group, buffers

    def pipelined_step(self, stage_of, buffers, group, copy) -> None:
        """One k-tile of the pipelined loop: block b's fragments loaded while block b - 1's are multiplied, at
        the first block the copies (`copy()`: of the k-tile `stages - 1` ahead, into the stage the step before
        read), before the last the wait for the next k-tile and a barrier. `stage_of(ahead)`: the stage of the
        k-tile `ahead` after this one."""
        k, blocks = self.k, self.tiled.a.k_blocks
        for block in range(blocks):
            if block == blocks - 1:  # the next k-tile has landed, and nobody reads this one's stage any more
                k.wait_groups(group, self.config.stages - 2)
                k.barrier()
                self.fragments(stage_of(1), 0, buffers[(block + 1) % 2])
            else:
                self.fragments(stage_of(0), block + 1, buffers[(block + 1) % 2])
            if block == 0:
                copy()
            self.multiply(buffers[block % 2], 1)

    # ----- the main loops -----
    def element_copies(self):
        """Rows of any alignment: element copies into one stage, waited for by each k-tile (no group)."""
        k, tiled = self.k, self.tiled
        a_regs, b_regs = k.registers(tiled.a.whole.slots), k.registers(tiled.b.whole.slots)
        first = k.index(0)
        with k.loop(0, self.operands[0][1].shape[2]) as k_tile:
            k.barrier()  # everyone is done with the stage
            self.load(self.operands, k_tile, first, asynchronous=False)
            k.barrier()
            self.fragments(first, None, (a_regs, b_regs))
            self.multiply((a_regs, b_regs), tiled.a.k_blocks)
        return None

    def pipelined(self):
        """Block b of k-tile t loaded while block b - 1 is multiplied. CTAs inside M and N first run the steps
        whose copies (of k-tile + stages - 1) lie inside K with no predicate (CUTLASS's predicate-free main
        loop), then every CTA the rest with them. Returns the last copies' group."""
        from mlir_tile.builder.schedule import predicate_free_steps

        k, ring, ahead = self.k, self.ring, self.config.stages - 1
        group, buffers = self.start_pipeline(lambda j: self.load(self.operands, j, ring.stage(j)),
                                             ring.stage(0))
        a_tiles = self.operands[0][1]

        def k_tile_step(k_tile, inside):
            self.pipelined_step(lambda after: ring.stage(k_tile, after), buffers, group, lambda: self.load(
                self.operands, ring.later(k_tile, ahead), ring.stage(k_tile, ahead), inside, inside))

        unpredicated = predicate_free_steps(k, self.cC.domain_offset(self.origin), (self.config.bm, self.config.bn),
                                            a_tiles[None, None, 0], ahead)
        with k.loop(0, unpredicated) as k_tile:
            k_tile_step(k_tile, inside=True)
        with k.loop(unpredicated, a_tiles.shape[2]) as k_tile:
            k_tile_step(k_tile, inside=False)
        return group

    def unpipelined(self):
        """Each k-tile's fragments all at once after its copies landed. Returns the last copies' group."""
        k, tiled, ring, stages = self.k, self.tiled, self.ring, self.config.stages
        for ahead in range(stages - 1):
            group = self.load(self.operands, ahead, ring.stage(ahead))
        a_regs, b_regs = k.registers(tiled.a.whole.slots), k.registers(tiled.b.whole.slots)
        with k.loop(0, self.operands[0][1].shape[2]) as k_tile:
            k.wait_groups(group, stages - 2)  # k-tile `k_tile` has landed (this thread's part)
            k.barrier()  # everyone's part, and everyone is done with the stage the next copies overwrite
            self.load(self.operands, ring.later(k_tile, stages - 1), ring.stage(k_tile, stages - 1))
            self.fragments(ring.stage(k_tile), None, (a_regs, b_regs))
            self.multiply((a_regs, b_regs), tiled.a.k_blocks)
        return group

    def persistent(self) -> None:
        """The persistent kernel's loops (`Config.persistent`): CTA `cta` of the grid walks C tiles cta, cta +
        grid, ... (the outer loop), each tile's k-tiles by the non-persistent kernel's step (the inner loops:
        the copies of the k-tile `stages - 1` ahead, unpredicated while it lies inside K), but its last
        `stages - 1` steps copy the next tile's first k-tiles, so they land while this tile finishes; then the
        tile's C goes out (`store_c`, in bands through a region of its own after the stages) while the next
        tile's first fragments wait in registers. Tiles at the edges of M and N are moved back inside (M >= bm,
        N >= bn): no copy needs a row predicate, and the epilogue stores only the tile's own elements; K >=
        (stages - 1) * bk, so a tile's first k-tiles lie inside K."""
        from mlir_tile.builder.schedule import PersistentSteps

        k, config, ring, order = self.k, self.config, self.ring, self.order
        ahead = config.stages - 1
        cta, own_tiles = order.persistent()
        first_operands = self.operand_tiles(order.origin(cta, inside=True))
        group, buffers = self.start_pipeline(lambda j: self.load(first_operands, j, ring.stage(j), True, True),
                                             ring.stage(0))
        with k.loop(0, own_tiles, carried=[cta, k.index(0)]) as turn:  # the tile, its first k-tile's stage
            tile, first_stage = turn.values
            # the origins recomputed where needed (divisions once a tile) rather than held across the loops
            origin = order.origin(tile, inside=True)
            operands = self.operand_tiles(origin)
            steps = PersistentSteps(k, operands[0][1][None, None, 0], config.bk, ahead)

            def step(k_tile, copied_operands, copied, inside_k):  # copying k-tile `copied` of their tile
                self.pipelined_step(lambda after: ring.stage(k_tile, after, first_stage), buffers, group,
                                    lambda: self.load(copied_operands, copied, ring.stage(k_tile, ahead, first_stage),
                                                      True, inside_k))

            with k.loop(0, steps.inside_k) as k_tile:
                step(k_tile, operands, ring.later(k_tile, ahead), True)
            with k.loop(steps.inside_k, steps.last_copies) as k_tile:
                step(k_tile, operands, ring.later(k_tile, ahead), False)
            next_operands = self.operand_tiles(order.origin(order.following(tile), inside=True))
            with k.loop(steps.last_copies, steps.k_tiles) as k_tile:
                step(k_tile, next_operands, steps.of_next_tile(k_tile), True)
            self.store_c(order.origin(tile), order.origin(tile, inside=True), config.stages * config.stage_bytes)
            self.clear_accumulators()
            turn.next(order.step(tile), ring.after(first_stage, steps.k_tiles))
        k.wait_groups(group, 0)

    # ----- the sm_90 epilogue -----
    def store_c(self, origin, first, region: int) -> None:
        """C's tile (from element `first`) packed, through shared memory at byte `region` by stmatrix and out
        in 16-byte rows: in `parts` bands of rows, one warp row's each (then the region holds one band: bm *
        bn / parts elements), only the elements at or past `origin` (a persistent kernel's tile moved back
        inside M and N: the rest are the tiles' before it) and inside M and N."""
        from mlir_tile.algebra.layout import Layout

        k, tiled, config, parts = self.k, self.tiled, self.config, self.parts
        place = self.cC.domain_offset(first).partition(tiled.accumulator_coordinates())

        def pack(finish):
            for mi in range(tiled.m_blocks):
                for ni in range(tiled.n_blocks):
                    values = [finished(k, place, self.accumulators, slot, finish)
                              for slot in tiled.accumulator_block(mi, ni)]
                    for pair, slot in enumerate(tiled.c_slots(mi, ni)):
                        k.store(k.pack_f16(values[2 * pair], values[2 * pair + 1], self.element), self.c_regs, [slot])

        for_each_arm(k, self.epilogue, self.extras, self.cC.extent, pack)
        rows, part_bytes = config.bm // parts, config.bm * config.bn * HALF // parts
        warp_index = k.warp_id() if parts > 1 else None
        # a band's rows: each band's swizzle is the first's (a band is whole swizzle periods)
        band = self.c_halves if parts == 1 else Layout((rows, config.bn), self.c_halves.stride, self.c_halves.swizzle)
        for part in range(parts):
            self._c_into_shared(region - part * part_bytes, part, warp_index)
            k.barrier()
            self._band_out(band, rows, part, region, origin, first)

    def _c_into_shared(self, tile_at: int, part: int, warp_index) -> None:
        """stmatrix of the packed C into the C tile at byte `tile_at` (where it lies so that band `part` lies in
        the region): one CTA-wide transfer, or in bands each warp of the band its own part on a subview at its
        start (which enters the swizzle)."""
        from mlir_tile.builder import transfer

        k, tiled, config = self.k, self.tiled, self.config
        t, (own, starts) = tiled.c.whole, tiled.c.whole.one_warp()
        if self.parts == 1:
            transfer(t.opcode, k.view(self.shared, (tiled.c.tile.cosize,), "i32", k.index(tile_at)), self.c_regs,
                     dst_layout=t.shared, src_layout=t.registers, scope="cta")
            return
        if part:
            k.barrier()  # everyone has read the band before
        for warp in range(part * config.warps[1], (part + 1) * config.warps[1]):
            with k.if_(k.compare("eq", warp_index, warp)):
                whole = k.view(self.shared, (tiled.c.tile.cosize,), "i32", k.index(tile_at))
                start = starts.offset(warp)
                transfer(own.opcode, k.subview(whole, start, tiled.c.tile.cosize - start), self.c_regs,
                         dst_layout=own.shared, src_layout=own.registers, scope="warp")

    def _band_out(self, band, rows: int, part: int, region: int, origin, first) -> None:
        """Band `part` of C's tile at `first` (`rows` rows at byte `region`) out to global memory in 16-byte
        chunks, or pieces of `unit` elements where N is not a multiple of 8, each inside C (and, persistent, at
        or past `origin`)."""
        from mlir.dialects import vector

        k, config = self.k, self.config
        c_tile = k.view(self.shared, (rows * config.bn,), self.element, k.index(region))
        chunks = k.tile_chunks(c_tile, band, rows, config.bn)  # 16-byte chunks of the band
        g_c, c_c = self.mC.domain_offset(first), self.cC.domain_offset(first)
        start = origin if config.persistent else None
        for (view, index), rows_before in zip(k.chunk_addresses(c_tile, chunks), chunks.rows_before):
            at = ((chunks.row, part * rows + rows_before), chunks.col)
            place = g_c.offset(at)  # outside the branches, where the chunks share its parts
            if config.unit == 8:  # with N a multiple of 8: whole chunks
                with k.if_(c_c.inside(at, start=start)):
                    k.store_vector(k.load_vector(view, [index], 8), g_c.memory, [place])
                continue
            chunk = k.load_vector(view, [index], 8)
            for e in range(0, 8, config.unit):  # pieces of `unit` elements, each inside C or outside it
                piece_at = (at[0], (chunks.col, e))
                piece_place = g_c.offset(piece_at)
                with k.if_(c_c.inside(piece_at)):
                    piece = vector.shuffle(chunk, chunk, list(range(e, e + config.unit)))  # elements e, e + 1, ...
                    if config.unit == 1:
                        k.store(vector.extract(piece, [], [0]), g_c.memory, [piece_place])
                    else:
                        k.store_vector(piece, g_c.memory, [piece_place])


def _store_accumulators(k, config, tiled, accumulators, g_c, c_c, origin, element, epilogue=None, extras=()):
    """Without stmatrix (sm_80), or a split's fp32 partial (element "f32", `g_c` its slice of the workspace):
    each thread stores its accumulator pairs (c0, c1 and c2, c3 of each block: one row, two adjacent columns,
    where `TiledMma.accumulator_coordinates` puts them) of the C tile at `origin` to `g_c`, as one store of
    the pair (4 bytes, 8 in fp32) per pair inside C (`c_c`, C's coordinates); `epilogue` applied first."""
    place = c_c.domain_offset(origin).partition(tiled.accumulator_coordinates())
    for_each_arm(k, epilogue, extras, c_c.extent, lambda finish: _store_pairs(k, config, tiled, accumulators, g_c,
                                                                             c_c, place, element, finish))


def _store_pairs(k, config, tiled, accumulators, g_c, c_c, place, element, finish) -> None:
    from mlir import ir
    from mlir.dialects import arith, vector

    pair_type, half = ir.VectorType.get([2], ir.Type.parse(element)), ir.Type.parse(element)
    for mi in range(tiled.m_blocks):
        for ni in range(tiled.n_blocks):
            for pair in range(2):
                slots = tiled.accumulator_block(mi, ni)[2 * pair:2 * pair + 2]
                row, column = place[k.thread_id(), slots[0]]
                values = [finished(k, place, accumulators, slot, finish) for slot in slots]
                low, high = (v if element == "f32" else arith.truncf(half, v) for v in values)
                if config.unit > 1:  # N even: the pair lies inside C or outside it, on 4 bytes
                    at = g_c.offset((row, column))
                    with k.if_(c_c.inside((row, column))):
                        k.store_vector(vector.from_elements(pair_type, [low, high]), g_c.memory, [at])
                    continue
                for e, value in enumerate((low, high)):
                    at = g_c.offset((row, (column, e)))
                    with k.if_(c_c.inside((row, (column, e)))):
                        k.store(value, g_c.memory, [at])


def finished(k, place, accumulators, slot: int, finish):
    """Accumulator `slot`, `finish` (an epilogue's arm: see `for_each_arm`) applied at its place in C (`place`:
    C's coordinates as the tiled mma's accumulators partition them) where there is one."""
    value = k.load(accumulators, [slot])
    return value if finish is None else finish(value, *place[k.thread_id(), slot])


REDUCE_KERNEL, REDUCE_THREADS = "gemm_reduce", 256


def build_reduce_module(element: str = "f16", chip: str = DEFAULT_CHIP, context=None, epilogue: Epilogue | Choice | None = None):
    """C from a split-K product's partials: `gemm_reduce(partials, c, m, n, splits, *operands)`, `partials`
    fp32 [splits, M, N] (the split_k kernel's workspace), `c` M x N elements of `element`. Thread i of the
    grid sums element i over the splits in order (the same sum every run), applies `epilogue` (its operands
    after `splits`) and rounds it once. Grid ceil(M * N / REDUCE_THREADS), block REDUCE_THREADS."""
    from mlir import ir
    from mlir.dialects import arith

    from mlir_tile.builder import Global, Kernel

    parameters = [Global("f32"), Global(element), "index", "index", "index"]
    parameters += operand_parameters(epilogue, element) if epilogue is not None else []
    with Kernel(REDUCE_KERNEL, parameters, block=(REDUCE_THREADS, 1, 1), chip=chip, context=context) as k:
        partials, c, m, n, splits, *extras = k.arguments
        m_partials, m_c, c_c = k.tensor(partials, (splits, m, n)), k.tensor(c, (m, n)), k.identity_tensor((m, n))
        row, column = c_c.coordinate_of(k.global_thread_id())
        with k.if_(c_c.inside((row, column), dimensions=[0])):  # past M x N: past the last row
            with k.loop(0, splits, carried=[k.constant(0.0, "f32")]) as it:
                it.next(arith.addf(it.values[0], m_partials[it.index, row, column]))
            total = it.results[0]

            def store(finish):
                value = total if finish is None else finish(total, row, column)
                m_c[row, column] = arith.truncf(ir.Type.parse(element), value)

            for_each_arm(k, epilogue, extras, (m, n), store)
    return k.module


def kernel_name(element: str, config: Config, epilogue: Epilogue | Choice | None = None) -> str:
    """The name a kernel's PTX is kept under (see `library`): what it computes."""
    return f"{KERNEL}_{element}_{config}{epilogue_suffix(epilogue)}"


def reduce_name(element: str, epilogue: Epilogue | Choice | None = None) -> str:
    return f"{REDUCE_KERNEL}_{element}{epilogue_suffix(epilogue)}"
