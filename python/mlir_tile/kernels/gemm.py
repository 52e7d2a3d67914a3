"""C = A x B on tensor cores, written with the builder alone: fp16 or bf16 in, fp32 accumulate, the input type
out; A row-major M x K, B row-major K x N (or N x K: the weight of torch.nn.functional.linear), C row-major
M x N, any M, N, K >= 1.

    python -m mlir_tile.kernels.gemm --demo               # the main loop's transfers and mma in the PTX; a GPU run if any
    python -m mlir_tile.kernels.gemm --ptx-out g.ptx      # needs MLIR
    python -m mlir_tile.kernels.gemm --run-ptx g.ptx      # needs a GPU, no MLIR: a 1000 x 1016 x 504 product checked
    python -m mlir_tile.kernels.gemm --emulate            # a CTA's transfers and product on the reference model

Options choose the kernel: --dtype f16|bf16, --b-major kn|nk (B as [K, N] or [N, K]), --align 16|8|4|2 (the
bytes rows start on; 2: any sizes), --tile (one of `Matmul`'s, e.g. 128x256x64s4) and --arch (sm_90, the
default: this module's mma.sync kernel; sm_90a: `hopper_gemm`'s, TMA and wgmma, tiles BMxBNx64sS[u|p][cN]); and the
product the GPU run checks: --shape M N K. --ptx-out records the kernel's options in the PTX's first line, and --run-ptx runs
the PTX as built (`python -m mlir_tile.kernels.gemm --ptx-out g.ptx --dtype bf16 --b-major nk`, then on the GPU host
`python -m mlir_tile.kernels.gemm --run-ptx g.ptx --shape 4096 4096 4096`).

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

import sys
from dataclasses import dataclass
from functools import partial

import numpy as np

from mlir_tile.kernels.epilogues import Choice, Epilogue, selectable

KERNEL = "gemm"
HALF = 2  # bytes of an element
SHAPE = (1000, 1016, 504)  # the checked product: M not a multiple of the tile, N and K not of 128 or 32


@dataclass(frozen=True)
class Config:
    """A CTA tile (bm x bn, k-tiles of bk), its warp grid, the pipeline's stages and the block order's group:
    `group` consecutive CTAs walk down `group` rows of tiles before moving right, so that they share A's and
    B's tiles in L2 (Triton's GROUP_SIZE_M)."""
    bm: int = 128
    bn: int = 128
    bk: int = 32
    warps: tuple[int, int] = (2, 2)
    stages: int = 4
    group: int = 8
    pipelined: bool = True  # fragments one k16 block ahead, in two register buffers (CUTLASS's mainloop)
    b_major: str = "kn"  # B as K x N (row-major [K, N]), or "nk": N x K (torch.nn.functional.linear's weight)
    align: int = 16  # bytes every row of A, B and C starts on: N and K multiples of align / 2 (cp.async of that
    # size; 2: any sizes, element copies)
    split_k: bool = False  # the k-tiles shared out among `splits` CTAs per C tile (a run-time parameter), each
    # writing its fp32 partial product to a workspace that `build_reduce_module`'s kernel sums into C
    persistent: bool = False  # one CTA an SM (the grid: min(tiles, SMs)) walking C tiles cta, cta + grid, ...,
    # the next tile's first k-tiles copied during this one's last (`_persistent_loop`); takes M >= bm, N >= bn
    # and K >= (stages - 1) * bk (sm_90, B [N, K], rows on 16 bytes)

    @property
    def threads(self) -> int:
        return 32 * self.warps[0] * self.warps[1]

    @property
    def stage_bytes(self) -> int:
        return (self.bm * self.bk + self.bk * self.bn) * HALF

    @property
    def shared_bytes(self) -> int:  # the stages, or the epilogue's C tile where it is larger (persistent: the
        # stages and a band of C's tile beside them)
        if self.persistent:
            return self.stages * self.stage_bytes + self.bm * self.bn * HALF // self.warps[0]
        return max(self.stages * self.stage_bytes, 0 if self.split_k else self.bm * self.bn * HALF)

    def tiles(self, m: int, n: int) -> int:  # C tiles of an M x N product
        return -(-m // self.bm) * -(-n // self.bn)

    def grid(self, m: int, n: int, splits: int = 1, sms: int | None = None) -> int:
        """CTAs to launch for an M x N product: one per C tile (and split), persistent one per SM (`sms`) at
        most."""
        if self.persistent and sms is None:
            raise ValueError("gemm: a persistent kernel's grid is min(tiles, SMs): give sms")
        return min(self.tiles(m, n), sms) if self.persistent else self.tiles(m, n) * splits

    def takes(self, m: int, n: int, depth: int) -> bool:
        """Whether the kernel computes an M x N x K product (the persistent one moves edge tiles inside M and N
        and copies a tile's first `stages - 1` k-tiles during the tile before it)."""
        return not self.persistent or (m >= self.bm and n >= self.bn and depth >= (self.stages - 1) * self.bk)

    def sizes_taken(self) -> str:  # what `takes` says, for the errors
        return f"M >= {self.bm}, N >= {self.bn} and K >= {(self.stages - 1) * self.bk}"

    def __str__(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk}_w{self.warps[0]}x{self.warps[1]}_s{self.stages}_g{self.group}"
                f"{'_p' if self.pipelined else ''}_{self.b_major}_a{self.align}{'_split' if self.split_k else ''}"
                f"{'_persistent' if self.persistent else ''}")

    @property
    def unit(self) -> int:  # elements N and K are multiples of: the kernel takes N / unit and K / unit
        return self.align // HALF


DEFAULT = Config()


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


def build_module(element: str = "f16", config: Config = DEFAULT, chip: str = "sm_90", context=None,
                 epilogue: Epilogue | Choice | None = None):
    """The kernel for `chip`: sm_90 stores C through stmatrix and a swizzled C tile with 16-byte stores;
    sm_80 (no stmatrix) stores each thread's accumulator pairs directly. `config.persistent`: see
    `Config.persistent` (sm_90, rows on 16 bytes, B [N, K]). `epilogue` (see `epilogues`): applied to
    each accumulator before it is rounded, its operands the kernel's arguments after the sizes (a split-K
    kernel leaves it to `build_reduce_module`'s)."""
    from mlir_tile.builder import Global, Kernel

    if config.persistent and (chip != "sm_90" or config.align != 16 or config.b_major != "nk" or config.split_k
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
        from mlir.dialects import arith, llvm

        k, config = self.k, self.config
        if config.persistent:  # edge tiles move back inside M and N, which only M >= bm and N >= bn allow, and a
            # tile's first k-tiles are copied during the tile before: else trap (Matmul and the command line
            # refuse such sizes before launching)
            with k.if_(arith.ori(arith.ori(k.compare("ult", self.m, config.bm), k.compare("ult", self.n, config.bn)),
                                 k.compare("ult", self.depth, (config.stages - 1) * config.bk))):
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
        if int(self.chip.removeprefix("sm_").rstrip("a")) < 90:
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


def for_each_arm(k, epilogue, extras, sizes, emit) -> None:
    """`emit(finish)` emits the store code, `finish(value, row, column)` the epilogue on one accumulator (None
    where there is none): once, or for a `Choice` once per arm, inside the branch where its selector holds
    (one branch a thread around the whole epilogue)."""
    if epilogue is None:
        emit(None)
        return
    operands = epilogue.operands
    if isinstance(epilogue, Epilogue):
        emit(partial(_apply, k, epilogue, sizes, extras, operands))
        return
    selector = extras[[operand.name for operand in operands].index(epilogue.selector)]
    for code, arm in enumerate(epilogue.arms):
        with k.if_(k.compare("eq", selector, code)):
            emit(partial(_apply, k, arm, sizes, extras, operands))


def _apply(k, epilogue, sizes, extras, operands, value, row, column):
    return epilogue.apply(k, value, row, column, *sizes, extras, operands)


def operand_parameters(epilogue, element: str) -> list:
    """The kernel parameters of an epilogue's operands: arrays of C's element, fp32 scalars."""
    from mlir_tile.builder import Global

    kinds = {"scalar": "f32", "integer": "index"}
    return [kinds.get(operand.kind) or Global(element, alignment=HALF) for operand in epilogue.operands]


REDUCE_KERNEL, REDUCE_THREADS = "gemm_reduce", 256


def build_reduce_module(element: str = "f16", chip: str = "sm_90", context=None, epilogue: Epilogue | Choice | None = None):
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


# The CTA tiles `Matmul` picks from, largest first: 128 x 256 by 8 warps reads the fewest shared bytes per
# mma, the default 128 x 128 keeps more SMs busy on smaller products. Per element type and B layout, the
# tiles measured fastest (docs/notes/benchmark-history.md, H200, 2048^3 to 8192^3 and the LLM shapes): f16 128 x 256 in
# 64-wide k-tiles and 4 stages (2-8% faster than 32-wide, 1-3% than 3 stages, 1-2% than 128-wide in 2); bf16
# with B [N, K] 128 x 256 in 128-wide k-tiles and 2 stages (7-9% faster than 128 x 128; 64-wide in 4 stages
# 2-6% slower), with B [K, N] the 128 x 128 tile (128 x 256 in 128-wide k-tiles -1 to +3% at 2048^3-4096^3,
# 1-7% slower at 8192^3, 4000^3 and the LLM shapes). (A 64 x 128 tile of 2 warps was 5-7% faster at 1024^3
# but spills in the sm_80 build.)
TILES = (dict(bm=128, bn=256, bk=64, warps=(2, 4), stages=4), dict(bm=128, bn=256, bk=128, warps=(2, 4), stages=2),
         {})
# The persistent kernel (one CTA an SM, the next tile's first k-tiles copied during this one's last) of the
# first tile: with B [N, K] bf16 5-6% faster than the 128 x 256 x 128 tile at 4096^3-8192^3 and the LLM
# shapes, 1-2% at 2048^3; f16 level with its non-persistent twin (-1 to +2%) but 2.5-3.5% slower at 2048^3
# and 3.5% faster at 4000^3, so f16 keeps the twin (docs/notes/benchmark-history.md). Rows on 16 bytes, B [N, K],
# M >= 128, N >= 256 and K >= 192.
PERSISTENT = dict(TILES[0], persistent=True)
PREFERRED = {("f16", "kn"): (TILES[0], TILES[2]), ("f16", "nk"): (TILES[0], TILES[2]),
             ("bf16", "kn"): TILES[2:], ("bf16", "nk"): (PERSISTENT, TILES[1], TILES[2])}
# Element copies (rows on 2 bytes: K or N odd) wait for each k-tile's loads, so a product of few CTAs is
# bound by their latency: 64 x 64 tiles give it 4 times the CTAs.
ELEMENT_TILES = ({}, dict(bm=64, bn=64))
FILL = 0.9  # the share of the SMs a tile's CTAs must cover for `Matmul` to take it


def pick_tile(m: int, n: int, depth: int, sms: int, element: str = "f16", align: int = 16, b_major: str = "kn",
              chip: str = "sm_90", epilogue: Epilogue | Choice | None = None) -> dict:
    """The largest of the element's and B layout's PREFERRED tiles (of ELEMENT_TILES for element copies,
    align 2) built for `chip` whose CTAs cover FILL of the `sms` multiprocessors at least once; the smallest
    where none does."""
    tiles = ELEMENT_TILES if align == HALF else PREFERRED[element, b_major]
    built = ((tile, variant(tile, align, b_major=b_major)) for tile in tiles)
    return next((tile for tile, config in built if config in variants_for(chip, epilogue) and config.takes(m, n, depth)
                 and config.tiles(m, n) >= FILL * sms), tiles[-1])


# Split-K where the C tiles leave SMs idle (cuBLAS and CUTLASS do the same): a split walks at least
# SPLIT_K_TILES k-tiles, so that its pipeline fills and its partial's fp32 traffic stays small beside them.
SPLIT_K_TILES, MAX_SPLITS = 32, 16


def pick_splits(m: int, n: int, depth: int, sms: int, config: Config) -> int:
    """How many CTAs share each C tile's k-tiles: 1 where the tiles cover FILL of the SMs, else as many as
    fill the SMs once, with SPLIT_K_TILES k-tiles each at least, MAX_SPLITS at most."""
    tiles, k_tiles = config.tiles(m, n), -(-depth // config.bk)
    if tiles >= FILL * sms:
        return 1
    return max(1, min(sms // tiles, k_tiles // SPLIT_K_TILES, MAX_SPLITS))


TMA_ADDRESS_BYTES = 16  # TMA reads and writes matrices whose addresses (and rows) lie on 16 bytes


def takes_hopper(chip: str, m: int, n: int, depth: int, sms: int, b_major: str, tile, splits, aligned: bool) -> bool:
    """Whether `Matmul` runs an M x N x K product on Hopper's path (`hopper_gemm`): the sm_90 library, no
    mma.sync tile named and no split-K asked for, rows and addresses on 16 bytes (N and K multiples of 8:
    TMA), and tiles that fill the SMs (where the mma.sync path would split K, which the Hopper kernel does
    not, it keeps the product)."""
    if chip != "sm_90" or tile is not None or splits not in (None, 1) or not aligned or n % 8 or depth % 8:
        return False
    return splits == 1 or pick_splits(m, n, depth, sms, variant(smallest_tile(16), 16, b_major=b_major)) == 1


def tile_name(tile: dict) -> str:
    config = Config(**tile)
    return f"{config.bm}x{config.bn}x{config.bk}s{config.stages}{'p' if config.persistent else ''}"


DEFAULT_TILE = "128x128x32s4"


def configure(b_major: str = "kn", align: int = 16, tile: str = DEFAULT_TILE) -> Config:
    """The variant of a tile of TILES or ELEMENT_TILES by its name (`tile_name`) for B's layout and rows on
    `align` bytes, as `Matmul` would run it; ValueError where Matmul has no such variant."""
    named = {tile_name(t): t for t in TILES + (PERSISTENT,) + ELEMENT_TILES}
    config = variant(named[tile], align, b_major=b_major) if tile in named else None
    if config not in VARIANTS:
        taken = [name for name, t in named.items() if variant(t, align, b_major=b_major) in VARIANTS]
        raise ValueError(f"gemm: no variant of tile {tile!r} for B {b_major} and rows on {align} bytes; these are: "
                         f"{', '.join(taken)}")
    return config


def variant(tile: dict, align: int, **fields) -> Config:
    """The kernel of `tile` for rows on `align` bytes: 4- and 8-byte copies issue 4 and 2 times the cp.async of
    16-byte ones, and with 64-wide k-tiles ptxas spills their addresses (up to 300 bytes), so they take
    32-wide k-tiles in 4 stages."""
    if align in (4, 8) and tile.get("bk", Config.bk) > 32:
        tile = {**tile, "bk": 32, "stages": 4}
    return Config(align=align, **tile, **fields)


def smallest_tile(align: int) -> dict:
    """The tile `Matmul` takes where no tile's CTAs fill the SMs, and the one split-K runs on."""
    return (ELEMENT_TILES if align == HALF else TILES)[-1]


# (narrow copies take both 128 x 256 tiles to the same kernel: each is listed once)
VARIANTS = list(dict.fromkeys(
    [variant(tile, align, b_major=major) for major in ("kn", "nk") for align in (16, 8, 4) for tile in TILES]
    + [variant(PERSISTENT, 16, b_major="nk")]
    + [variant(tile, HALF, b_major=major) for major in ("kn", "nk") for tile in ELEMENT_TILES]))


def variants_for(chip: str, epilogue: Epilogue | Choice | None = None) -> list[Config]:
    """VARIANTS that are built for `chip` (the persistent kernel: sm_90) and `epilogue`: the persistent kernel
    holds the next tile's first fragments through the epilogue, and with `selectable`'s arms it spills (2.6
    KB), so that one runs on the other tiles."""
    return [config for config in VARIANTS
            if not config.persistent or (chip == "sm_90" and epilogue is not selectable)]


SPLIT_VARIANTS = [variant(smallest_tile(align), align, b_major=major, split_k=True) for major in ("kn", "nk")
                  for align in (16, 8, 4, HALF)]
# the split-K kernel the GPU tests run: element copies (any K)
SPLIT_CHECKED = variant(smallest_tile(HALF), HALF, b_major="kn", split_k=True)


def shipped_kernels(chip: str, epilogues=(None, selectable)):
    """(name, build) of every kernel `Matmul` may pick for `chip`: each (element, B layout, alignment, tile,
    split) variant and the split's reduction, with each of `epilogues` (None: plain); on sm_90 also the
    Hopper path's (`hopper_gemm.shipped_kernels`)."""
    from mlir_tile.kernels import hopper_gemm

    if chip == "sm_90":
        yield from hopper_gemm.shipped_kernels(epilogues)
    for element in ("f16", "bf16"):
        for epilogue in epilogues:
            for config in variants_for(chip, epilogue):
                yield kernel_name(element, config, epilogue), partial(build_module, element, config, chip,
                                                                      epilogue=epilogue)
            yield reduce_name(element, epilogue), partial(build_reduce_module, element, chip, epilogue=epilogue)
        for config in SPLIT_VARIANTS:
            yield kernel_name(element, config), partial(build_module, element, config, chip)


def kernel_name(element: str, config: Config, epilogue: Epilogue | Choice | None = None) -> str:
    """The name a kernel's PTX is kept under (see `library`): what it computes."""
    return f"{KERNEL}_{element}_{config}{epilogue_suffix(epilogue)}"


def reduce_name(element: str, epilogue: Epilogue | Choice | None = None) -> str:
    return f"{REDUCE_KERNEL}_{element}{epilogue_suffix(epilogue)}"


def epilogue_suffix(epilogue: Epilogue | None) -> str:
    if epilogue is None:
        return ""
    name = "".join(c if c.isalnum() or c in "_-" else "-" for c in epilogue.name)
    return f"_{name}_{epilogue.fingerprint}"


class Matmul:
    """C = epilogue(A x B) on torch tensors through mlir-tile's runtime (no host copies, torch's current
    stream). On Hopper (the sm_90 library) Hopper's path where it takes the product (`takes_hopper`: TMA,
    wgmma, `hopper_gemm.library_config`'s tile, measured per dtype and B layout; the tensor maps kept by
    `hopper_gemm.TensorMaps`); else the mma.sync variant is picked from the dtypes, B's layout, the sizes' alignment, the CTA tile for M x N
    (`pick_tile`) and split-K where the tiles leave SMs idle (`pick_splits`: an fp32 workspace of splits x M
    x N, then the reduction's launch, which applies the epilogue). `b` is [K, N] (b_major "kn") or [N, K]
    ("nk", a weight of torch.nn.functional.linear). The kernels come from `library` (a `KernelLibrary`).
    ValueError for what the kernels do not take."""

    def __init__(self, library):
        from mlir_tile.kernels.hopper_gemm import TensorMaps

        self.library, self.plans = library, {}
        self.sms = library.runtime.device.properties.multiprocessor_count
        self.maps = TensorMaps(library.runtime)
        self.last_config, self.last_splits = None, None  # the variant of the last call and its splits

    def __call__(self, a, b, *, b_major: str = "kn", out=None, tile: dict | None = None, splits: int | None = None,
                 epilogue: Epilogue | Choice | None = None, operands: tuple = ()):
        """`tile`: one of TILES instead of `pick_tile`'s choice (where rows lie on 4 bytes or more: element
        copies take `pick_tile`'s); `splits`: 1 to MAX_SPLITS CTAs sharing each C tile's k-tiles instead of
        `pick_splits`' choice (more than 1: on the smallest tile); `out`: a contiguous M x N CUDA tensor of A's
        dtype to write C into; `operands`: the epilogue's, in its order (tensors of A's dtype, floats)."""
        import torch

        from mlir_tile.runtime import torch_stream

        aligned = all(t.data_ptr() % TMA_ADDRESS_BYTES == 0 for t in (a, b) + (() if out is None else (out,)))
        key = (a.dtype, b.dtype, b_major, a.shape, b.shape, None if tile is None else repr(tile), splits, epilogue,
               aligned)
        if key not in self.plans:  # what depends only on the key is checked and worked out once
            self.plans[key] = self._plan(a, b, b_major, tile, splits, epilogue, aligned)
        config, module, grid, sizes, reduction = self.plans[key]
        if not (a.is_cuda and b.is_cuda and a.is_contiguous() and b.is_contiguous()):
            raise ValueError("gemm: A and B are row-major (contiguous) CUDA tensors; call .contiguous() first")
        m, n = sizes[0], sizes[1] * config.unit
        extras = checked_operands(epilogue, operands, m, n, a)
        if out is None:
            out = torch.empty(m, n, dtype=a.dtype, device=a.device)
        elif out.shape != (m, n) or out.dtype != a.dtype or not out.is_cuda or not out.is_contiguous():
            raise ValueError(f"gemm: out is a contiguous {m} x {n} CUDA tensor of {a.dtype}, got {tuple(out.shape)} "
                             f"{out.dtype}{'' if out.is_contiguous() else ' (not contiguous)'}")
        hopper = isinstance(reduction, dict)  # Hopper's path: its TMA boxes of A, B and C
        self.last_config, self.last_splits = config, 1 if reduction is None or hopper else reduction[1]
        stream = torch_stream(a)
        if hopper:
            maps = [self.maps(tensor, reduction[name], store=name == "c")
                    for name, tensor in (("a", a), ("b", b), ("c", out))]
            module.launch(KERNEL, [*maps, *sizes, *extras], grid=grid, block=config.threads,
                          shared_bytes=config.shared_bytes, stream=stream)
            return out
        if reduction is None:
            module.launch(KERNEL, [a, b, out, *sizes, *extras], grid=grid, block=config.threads,
                          shared_bytes=config.shared_bytes, stream=stream)
            return out
        reducer, splits = reduction
        partials = torch.empty(splits * m * n, dtype=torch.float32, device=a.device)
        module.launch(KERNEL, [a, b, partials, *sizes, splits], grid=grid, block=config.threads,
                      shared_bytes=config.shared_bytes, stream=stream)
        reducer.launch(REDUCE_KERNEL, [partials, out, m, n, splits, *extras], grid=-(-m * n // REDUCE_THREADS),
                       block=REDUCE_THREADS, stream=stream)
        return out

    def _plan(self, a, b, b_major, tile, splits, epilogue, aligned):
        """(config, module, grid, the kernel's size arguments, (the reduction's module, splits), None, or on
        Hopper's path its TMA boxes) for these operands, or ValueError."""
        element, (m, n, depth) = _element_and_sizes(a, b, b_major)
        if takes_hopper(self.library.chip, m, n, depth, self.sms, b_major, tile, splits, aligned):
            return self._hopper_plan(element, m, n, depth, b_major, epilogue)
        if tile is not None and tile not in TILES + (PERSISTENT,):
            raise ValueError(f"gemm: tile is one of {TILES + (PERSISTENT,)}, got {tile!r}")
        if splits is not None and not (isinstance(splits, int) and 1 <= splits <= MAX_SPLITS):
            raise ValueError(f"gemm: splits is an int from 1 to {MAX_SPLITS}, got {splits!r}")
        align = next(align for align in (16, 8, 4, 2) if n % (align // HALF) == 0 and depth % (align // HALF) == 0)
        smallest = smallest_tile(align)
        if splits is not None and splits > 1:
            if tile not in (None, smallest) and align != HALF:
                raise ValueError(f"gemm: split-K runs on the tile {smallest}, not on {tile!r}")
            tile = smallest
        elif tile is None or align == HALF:
            tile = pick_tile(m, n, depth, self.sms, element, align, b_major, self.library.chip, epilogue)
        config = variant(tile, align, b_major=b_major)
        if config.persistent and (config not in variants_for(self.library.chip, epilogue)
                                  or not config.takes(m, n, depth)):
            raise ValueError(f"gemm: the persistent tile takes B [N, K] with N and K multiples of 8, "
                             f"{config.sizes_taken()}; got B {b_major}, {m} x {n} x {depth}")
        if splits is None:
            splits = pick_splits(m, n, depth, self.sms, config) if tile == smallest else 1
        reduction = None
        if splits > 1:
            config = variant(tile, align, b_major=b_major, split_k=True)
            reduction = (self._reducer(element, epilogue), splits)
            epilogue = None  # the reduction applies it
        chip = self.library.chip
        module = self.library.module(kernel_name(element, config, epilogue),
                                     lambda: build_module(element, config, chip, epilogue=epilogue))
        return config, module, config.grid(m, n, splits, self.sms), (m, n // config.unit, depth // config.unit), reduction

    def _hopper_plan(self, element: str, m: int, n: int, depth: int, b_major: str, epilogue):
        from mlir_tile.kernels import hopper_gemm

        config = hopper_gemm.library_config(m, n, b_major, self.sms, FILL, epilogue, element)
        module = self.library.module(hopper_gemm.kernel_name(element, config, epilogue),
                                     lambda: hopper_gemm.build_module(element, config, epilogue=epilogue))
        sizes = (m, n // config.unit, depth // config.unit)
        return config, module, config.grid(m, n, self.sms), sizes, hopper_gemm.boxes(config)

    def _reducer(self, element: str, epilogue):
        chip = self.library.chip
        return self.library.module(reduce_name(element, epilogue),
                                   lambda: build_reduce_module(element, chip, epilogue=epilogue))


def _element_and_sizes(a, b, b_major: str) -> tuple[str, tuple[int, int, int]]:
    """The element type and (M, N, K) of A and B, or ValueError."""
    import torch

    element = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(a.dtype)
    if element is None or b.dtype != a.dtype:
        raise ValueError(f"gemm: A and B are both float16 or both bfloat16, got {a.dtype} and {b.dtype}")
    if b_major not in ("kn", "nk"):
        raise ValueError(f"gemm: b_major is 'kn' (B is [K, N]) or 'nk' (B is [N, K]), got {b_major!r}")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError("gemm: A and B are 2-D CUDA tensors")
    m, depth = a.shape
    n, b_depth = (b.shape[1], b.shape[0]) if b_major == "kn" else b.shape
    if b_depth != depth or m == 0 or n == 0 or depth == 0:
        raise ValueError(f"gemm: A is {tuple(a.shape)} and B ({b_major}) is {tuple(b.shape)}: the K extents differ "
                         f"or a size is 0")
    return element, (m, n, depth)


def checked_operands(epilogue: Epilogue | None, operands, m: int, n: int, a) -> list:
    """The epilogue's operands as kernel arguments, each checked against its kind, or ValueError. A tensor
    operand may be None where the epilogue does not read it (`epilogues.selectable`)."""
    declared = epilogue.operands if epilogue is not None else ()
    if len(operands) != len(declared):
        raise ValueError(f"gemm: the epilogue takes {len(declared)} operands "
                         f"({', '.join(o.name for o in declared) or 'none'}), got {len(operands)}")
    arguments = []
    for operand, value in zip(declared, operands):
        if operand.kind in ("scalar", "integer"):
            number = (int,) if operand.kind == "integer" else (int, float)
            if not isinstance(value, number) or isinstance(value, bool):
                raise ValueError(f"gemm: epilogue operand {operand.name!r} is {'an int' if number == (int,) else 'a number'}"
                                 f", got {value!r}")
            arguments.append(np.float32(value) if operand.kind == "scalar" else value)
            continue
        if value is None:  # an operand the epilogue does not read (a branch on an integer leaves it out)
            arguments.append(a)
            continue
        shape = {"column": (n,), "row": (m,), "matrix": (m, n)}[operand.kind]
        if (getattr(value, "shape", None) != shape or value.dtype != a.dtype or not value.is_contiguous()
                or value.device != a.device):
            raise ValueError(f"gemm: epilogue operand {operand.name!r} is a contiguous {' x '.join(map(str, shape))} "
                             f"tensor of {a.dtype} on {a.device}, got {_described(value)}")
        arguments.append(value)
    return arguments


def _described(value) -> str:
    shape = getattr(value, "shape", None)
    return repr(value) if shape is None else f"{tuple(shape)} {value.dtype} on {value.device}"


def inputs(m: int, n: int, depth: int, seed: int = 5, element: str = "f16") -> tuple[np.ndarray, np.ndarray]:
    """A (M x K) and B (K x N) of uniform values in [-1, 1) as `element` bit patterns (uint16: numpy has no bf16)."""
    from mlir_tile.isa.halves import encode

    rng = np.random.default_rng(seed)
    return encode(rng.uniform(-1, 1, (m, depth)), element), encode(rng.uniform(-1, 1, (depth, n)), element)


def check(c: np.ndarray, a: np.ndarray, b: np.ndarray, element: str = "f16") -> tuple[bool, float]:
    """C, A and B as `element` bit patterns: the rounding of the fp32 product to `element` (half an ulp) plus
    fp32 accumulation in another order than numpy's (K terms of at most 1: 1e-5 * K absolute), with a factor
    2 of room on the rounding."""
    from mlir_tile.isa.halves import UNIT_ROUNDOFF, decode

    exact = decode(a, element) @ decode(b, element)
    error = np.abs(decode(c, element) - exact)
    return bool((error <= 2 * UNIT_ROUNDOFF[element] * np.abs(exact) + 1e-5 * a.shape[1]).all()), float(error.max())


def run_and_check(ptx: str, dtype: str = "f16", b_major: str = "kn", align: int = 16, tile: str | None = None,
                  shape: tuple[int, int, int] = SHAPE, arch: str = "sm_90") -> tuple[bool, str]:
    """The kernel of these build options (see `configure`; `arch` sm_90a: `hopper_gemm`'s) in `ptx` on an M x N
    x K product of random values, against numpy."""
    if arch == "sm_90a":
        from mlir_tile.kernels import hopper_gemm

        return hopper_gemm.run_and_check(ptx, dtype, b_major, tile or hopper_gemm.default_tile(dtype, b_major), shape)
    tile = tile or DEFAULT_TILE
    from mlir_tile.runtime import Runtime

    config, (m, n, depth) = configure(b_major, align, tile), shape
    if min(shape) < 1 or n % config.unit or depth % config.unit:
        raise ValueError(f"gemm: rows on {config.align} bytes take M, N, K >= 1 with N and K multiples of "
                         f"{config.unit}, not {m} x {n} x {depth}; --align 2 takes any sizes")
    if not config.takes(m, n, depth):
        raise ValueError(f"gemm: the persistent tile takes {config.sizes_taken()}, not {m} x {n} x {depth}")
    a, b = inputs(m, n, depth, element=dtype)
    b_given = b if b_major == "kn" else np.ascontiguousarray(b.T)
    with Runtime() as runtime:
        module = runtime.load_ptx(ptx, name=KERNEL)
        _, _, c = module.launch(KERNEL, [a, b_given, np.zeros((m, n), np.uint16), m, n // config.unit,
                                         depth // config.unit],
                                grid=config.grid(m, n, sms=runtime.device.properties.multiprocessor_count),
                                block=config.threads, shared_bytes=config.shared_bytes)
    ok, worst = check(c, a, b, dtype)
    return ok, (f"GPU: {m} x {n} x {depth} {dtype} GEMM ({config}) matches numpy: {ok} (largest error "
                f"{worst:.2e})")


def emulate(config: Config = DEFAULT, k_tiles: int = 2, element: str = "f16") -> str:
    """A one-CTA GEMM (bm x bn x k_tiles * bk, of `element`) on the reference model: each k-tile's A and B tiles placed
    in shared words by their layouts, every transfer (A, B by ldmatrix, C by stmatrix) run by the ISA model
    with each lane's fragments checked against the PTX ISA's tables, the mma.sync products from those
    fragments, and C read back through the C tile's layout against numpy. AssertionError otherwise."""
    from mlir_tile.isa.halves import decode

    tiled = tiled_mma(config)
    (wm, wn), depth = config.warps, k_tiles * config.bk
    a, b = inputs(config.bm, config.bn, depth, seed=3, element=element)  # bit patterns
    accumulators = np.zeros((wm, wn, 16 * tiled.m_blocks, 8 * tiled.n_blocks), np.float32)
    for k_tile in range(k_tiles):
        columns = slice(k_tile * config.bk, (k_tile + 1) * config.bk)
        for warp, (a_warp, b_warp) in enumerate(_emulated_fragments(config, tiled, a, b, columns)):
            accumulators[warp // wn, warp % wn] += decode(a_warp, element) @ decode(b_warp, element)
    c = _emulated_c(config, tiled, _packed(config, tiled, accumulators, element))
    assert check(c, a, b, element)[0], "C"
    return (f"reference model: a {config.bm} x {config.bn} x {depth} {element} CTA ({config}): every lane's A and B "
            f"fragments hold what the PTX ISA's tables say, and C through stmatrix matches numpy")


def _emulated_fragments(config: Config, tiled, a, b, columns):
    """Per warp, the (A, B) matrices its lanes' fragments of one k-tile hold, by the ISA model's transfers,
    each element checked against the PTX ISA's fragment tables."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.models.reference import b16_half, b16_tile_words
    from mlir_tile.models.reference import emulate as run_transfer

    (wm, wn), threads = config.warps, config.threads
    b_source = b[columns] if config.b_major == "kn" else np.ascontiguousarray(b.T)[:, columns]
    loaded = {}
    for operand, matrix in ((tiled.a, a[:, columns]), (tiled.b, b_source)):
        t = operand.whole
        loaded[operand.name] = run_transfer(t.opcode, t.registers, t.shared, np.zeros((threads, t.slots), np.uint32),
                                            b16_tile_words(operand.tile, matrix), "cta")
    for warp in range(wm * wn):
        wn_, wm_ = warp % wn, warp // wn
        a_warp = np.zeros((16 * tiled.m_blocks, config.bk), np.uint16)
        b_warp = np.zeros((config.bk, 8 * tiled.n_blocks), np.uint16)
        # per operand: its table, registers per block, blocks, slots, where a (block, index, row, column) of the
        # table lies in the warp's matrix, and that matrix's element in the whole one
        operands = (("a", "a16", 4, tiled.m_blocks, tiled.a_slots, a_warp,
                     lambda block, i, r, c: (16 * i + r, 16 * block + c),
                     lambda r, c: a[16 * wm_ * tiled.m_blocks + r, columns][c]),
                    ("b", "b16", 2, tiled.n_blocks, tiled.b_slots, b_warp,
                     lambda block, i, r, c: (16 * block + r, 8 * i + c),
                     lambda r, c: b[columns][r, 8 * wn_ * tiled.n_blocks + c]))
        for lane, block in ((lane, block) for lane in range(32) for block in range(tiled.a.k_blocks)):
            for name, table, registers, count, slots_of, warp_matrix, place, whole in operands:
                for i, register, part in ((i, r, h) for i in range(count) for r in range(registers) for h in range(2)):
                    row, col = place(block, i, *fragment_element(table, lane, register, part))
                    value = b16_half(loaded[name][32 * warp + lane, slots_of(i, block)[register]], part)
                    assert value == whole(row, col), (name.upper(), 32 * warp + lane, block, i, register)
                    warp_matrix[row, col] = value
        yield a_warp, b_warp


def _packed(config: Config, tiled, accumulators, element: str):
    """Each thread's packed C registers (the ISA's c16 pairs) from the warps' accumulator matrices."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.isa.halves import encode

    (wm, wn) = config.warps
    packed = np.zeros((config.threads, tiled.c.whole.slots), np.uint32)
    for warp, lane in ((warp, lane) for warp in range(wm * wn) for lane in range(32)):
        for mi, ni in ((mi, ni) for mi in range(tiled.m_blocks) for ni in range(tiled.n_blocks)):
            for pair, slot in enumerate(tiled.c_slots(mi, ni)):
                bits = 0
                for part in range(2):  # c16 register `pair`: the fp16 pair of accumulators 2 pair, + 1
                    row, col = fragment_element("c16", lane, pair, part)
                    value = accumulators[warp // wn, warp % wn][16 * mi + row, 8 * ni + col % 8]
                    bits |= int(encode(value, element)) << (16 * part)
                packed[32 * warp + lane, slot] = bits
    return packed


def _emulated_c(config: Config, tiled, packed):
    """C as the kernel's stmatrix leaves it in shared memory, read back through the C tile's layout: one
    CTA-wide transfer, or (persistent) in bands of rows through a region of one band, each warp of the band
    its own transfer on a subview at its start, the band read back by its own layout."""
    from mlir_tile.algebra.layout import Layout
    from mlir_tile.algebra.words import unpack_b32
    from mlir_tile.models.reference import emulate as run_transfer

    t, layout, (wm, wn) = tiled.c.whole, unpack_b32(tiled.c.tile), config.warps
    if not config.persistent:
        halves = run_transfer(t.opcode, t.shared, t.registers, np.zeros(tiled.c.tile.cosize, np.uint32), packed,
                              "cta").view(np.uint16)
        return np.array([[halves[layout(row, col).offset] for col in range(config.bn)] for row in range(config.bm)],
                        np.uint16)
    own, starts = t.one_warp()
    parts, band_words = wm, tiled.c.tile.cosize // wm
    band = Layout((config.bm // parts, config.bn), layout.stride, layout.swizzle)
    bands = []
    for part in range(parts):
        tile_words = np.zeros(tiled.c.tile.cosize, np.uint32)  # the C tile's view; its band lies in the region
        for warp in range(part * wn, (part + 1) * wn):
            start = starts.offset(warp)
            tile_words[start:] = run_transfer(own.opcode, own.shared, own.registers, tile_words[start:],
                                              packed[32 * warp:32 * (warp + 1)], "warp")
        halves = tile_words[part * band_words:(part + 1) * band_words].view(np.uint16)
        bands.append([[halves[band(row, col).offset] for col in range(config.bn)] for row in range(band.sizes[0])])
    return np.array(sum(bands, []), np.uint16)


def add_options(parser) -> tuple[str, ...]:
    from mlir_tile.isa.halves import ELEMENTS

    parser.add_argument("--dtype", choices=ELEMENTS + ("e4m3",), default="f16",
                        help="A's, B's and C's element type (default f16; e4m3: A and B, C bf16, with --arch sm_90a "
                             "and B [N, K])")
    parser.add_argument("--b-major", choices=("kn", "nk"), default="kn",
                        help="B given as [K, N] (kn, the default) or [N, K] (nk: torch.nn.functional.linear's weight)")
    parser.add_argument("--align", type=int, choices=(16, 8, 4, 2), default=16,
                        help="bytes every row starts on: N and K multiples of align / 2 (default 16; 2: any sizes)")
    parser.add_argument("--tile", default=None,
                        help=f"the CTA tile, BMxBNxBK and stages, one of Matmul's (default {DEFAULT_TILE}; with "
                             f"--arch sm_90a any BMxBNx64sS, BM 64 to 256, BN 64 to 256 in 64s, default 128x128x64s4; "
                             f"then u: unspecialized, p: persistent, c2 or c4: clusters sharing B by multicast)")
    parser.add_argument("--arch", choices=("sm_90", "sm_90a"), default="sm_90",
                        help="sm_90: the mma.sync path (cp.async, ldmatrix); sm_90a: Hopper's (TMA, wgmma, TMA stores; "
                             "rows on 16 bytes)")
    parser.add_argument("--shape", type=int, nargs=3, metavar=("M", "N", "K"), default=SHAPE,
                        help=f"the product the GPU run checks (default {' '.join(map(str, SHAPE))})")
    return ("dtype", "b_major", "align", "tile", "arch")


def main() -> int:
    from mlir_tile.kernels.command_line import main as example_main

    def build(dtype, b_major, align, tile, arch):
        if arch == "sm_90a":
            from mlir_tile.kernels import hopper_gemm

            if align != 16:
                raise ValueError("gemm: Hopper's path (TMA) takes rows on 16 bytes: --align 16")
            return hopper_gemm.build_module(dtype, hopper_gemm.configure(b_major, tile or hopper_gemm.default_tile(dtype, b_major),
                                                                         dtype))
        if dtype == "e4m3":
            raise ValueError("gemm: e4m3 runs on Hopper's path: --arch sm_90a")
        return build_module(dtype, configure(b_major, align, tile or DEFAULT_TILE))

    def emulate_cta(dtype, b_major, align, tile, shape, arch):  # one CTA, the shape aside
        if arch == "sm_90a":
            from mlir_tile.kernels import hopper_gemm

            return hopper_gemm.emulate(hopper_gemm.configure(b_major, tile or hopper_gemm.default_tile(dtype, b_major), dtype),
                                       2, dtype)
        if dtype == "e4m3":
            raise ValueError("gemm: e4m3 runs on Hopper's path: --arch sm_90a")
        config = configure(b_major, align, tile or DEFAULT_TILE)
        return emulate(config, 2 if config.bk == 32 else 1, dtype)

    return example_main(__doc__, build, run_and_check, emulate_cta, options=add_options)


if __name__ == "__main__":
    sys.exit(main())
