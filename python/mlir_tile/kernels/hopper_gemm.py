"""C = A x B on Hopper's data path (sm_90a), written with the builder alone: TMA loads of A's and B's k-tiles
into 128-byte-swizzled stages completing on mbarriers, wgmma reading them through descriptors derived from
the stages' layouts, the accumulators (after an optional epilogue) packed and stored by stmatrix into a
swizzled C tile, and TMA stores of it. No address is computed by hand: tiles are layouts, TMA boxes and wgmma
descriptors are derived from them and proven (`mlir_tile.tma`, `mlir_tile.wgmma`), the stmatrix transfer is
checked by the contract and the C tile proven to be the TMA stores' boxes (`tma.column_boxes`).

f16 or bf16 in, fp32 accumulate, the input type out. A row-major M x K, B row-major [N, K] (`b_major` "nk",
the weight of torch.nn.functional.linear: K-major, as wgmma reads it) or [K, N] ("kn": read MN-major, in
boxes of 64 columns), C row-major M x N; any M, N, K >= 1 with N and K multiples of 8 (TMA: rows on 16
bytes). Tails need no predicate: TMA zero-fills the loads past the matrices and clips the stores.

Kernel parameters: `gemm(a_map, b_map, c_map, m, n, k)`: three pointers to 128-byte CUtensorMaps in global
memory (`tensor_maps` encodes them for the boxes `boxes` lists) and the three sizes. Grid: the C tiles, in
Triton's grouped order; block: 128 threads per warpgroup (BM / 64 warpgroups, one 64-row band of C each);
`HopperConfig.shared_bytes` of dynamic shared memory.

The main loop (every thread a consumer; thread 0 also the producer): the first `stages` k-tiles are loaded
up front; k-tile t waits for its stage's full barrier (TMA's bytes landed), issues its wgmma batch and waits
until only that batch is in flight (`wgmma_wait(1)`), so the batch of k-tile t - 1 has read its stage: each
warp arrives on that stage's empty barrier, and thread 0, once all warps have, loads k-tile t - 1 + stages
into it. This is the correct, simple pipeline of issue 39; producer warpgroups, setmaxnreg, clusters and a
persistent scheduler are issue 40's.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir_tile.kernels.epilogues import Choice, Epilogue

KERNEL = "gemm"
ELEMENT_BYTES = 2
SWIZZLE_COLUMNS = 64  # 16-bit elements in a 128-byte swizzle's row: a box's width


@dataclass(frozen=True)
class HopperConfig:
    bm: int = 128  # 64 rows a warpgroup
    bn: int = 128  # wgmma's N (8 to 256)
    bk: int = 64  # one 128-byte swizzled row of K a k-tile
    stages: int = 4
    b_major: str = "nk"
    group: int = 8  # Triton's GROUP_SIZE_M

    def __post_init__(self) -> None:
        if self.bm % 64 or not 64 <= self.bm <= 256 or self.bn % SWIZZLE_COLUMNS or not 64 <= self.bn <= 256:
            raise ValueError(f"hopper gemm: BM 64 to 256 (64 a warpgroup) and BN 64 to 256, multiples of 64; got "
                             f"{self.bm} x {self.bn}")
        if self.bk != SWIZZLE_COLUMNS or self.stages < 2 or self.b_major not in ("nk", "kn"):
            raise ValueError(f"hopper gemm: BK {SWIZZLE_COLUMNS} (a 128-byte swizzled row), 2 stages or more, B "
                             f"'nk' or 'kn'; got {self}")

    @property
    def warpgroups(self) -> int:
        return self.bm // 64

    @property
    def threads(self) -> int:
        return 128 * self.warpgroups

    @property
    def parts(self) -> list[int]:
        """Elements of a stage's A tile and B tile."""
        return [self.bm * self.bk, self.bn * self.bk]

    @property
    def shared_bytes(self) -> int:  # the stages (the C tile reuses their bytes once the main loop is done)
        return self.stages * sum(self.parts) * ELEMENT_BYTES

    def __str__(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}_s{self.stages}_g{self.group}_{self.b_major}_sm90a"


def tiles(config: HopperConfig) -> dict:
    """The shared tiles' layouts, in elements: A (BM x BK) and B (N x K coordinates) as TMA writes them, C
    (BM x BN) as TMA stores read it. A and B [N, K]: K-major rows of 128 bytes, `Sw<3,3,3>` (one box each);
    B [K, N]: boxes of BK rows by 64 columns side by side (MN-major for wgmma); C: boxes of BM rows by 64
    columns side by side."""
    from mlir_tile.layout import Layout, Swizzle
    from mlir_tile.tma import Box

    swizzle = Box(64, SWIZZLE_COLUMNS, 16, 128).layout.swizzle
    boxes_of = config.bn // SWIZZLE_COLUMNS
    a = Box(config.bm, config.bk, 16, 128).layout
    if config.b_major == "nk":
        b = Box(config.bn, config.bk, 16, 128).layout
    else:  # (n, k): n runs along a box's 64 columns, the boxes BK x 64 apart
        b = Layout(((SWIZZLE_COLUMNS, boxes_of), config.bk), ((1, config.bk * SWIZZLE_COLUMNS), SWIZZLE_COLUMNS), swizzle)
    c = Layout((config.bm, (SWIZZLE_COLUMNS, boxes_of)), (SWIZZLE_COLUMNS, (1, config.bm * SWIZZLE_COLUMNS)), swizzle)
    words = SWIZZLE_COLUMNS // 2  # the C tile as stmatrix writes it: (rows, 32-bit words), the same bytes
    c_words = Layout((config.bm, (words, boxes_of)), (words, (1, config.bm * words)),
                     Swizzle(swizzle.bits, swizzle.base - 1, swizzle.shift))
    _same_bytes(c, c_words)
    return {"a": a, "b": b, "c": c, "c_words": c_words}


def _same_bytes(halves, words) -> None:
    """Proof that element (r, c) of the 16-bit layout is half c % 2 of word (r, c // 2) of the word layout."""
    rows, columns = halves.sizes
    for r in range(rows):
        for c in range(columns):
            if halves.offset(r, c) != 2 * words.offset(r, c // 2) + c % 2:
                raise ValueError(f"hopper gemm: C's element ({r}, {c}) is not where the stmatrix layout {words} "
                                 f"writes it ({halves})")


def boxes(config: HopperConfig):
    """The TMA boxes of A, B and C whose tensor maps the kernel takes."""
    from mlir_tile.tma import Box

    b = Box(config.bn, config.bk, 16, 128) if config.b_major == "nk" else Box(config.bk, SWIZZLE_COLUMNS, 16, 128)
    return {"a": Box(config.bm, config.bk, 16, 128), "b": b, "c": Box(config.bm, SWIZZLE_COLUMNS, 16, 128)}


def build_module(element: str = "f16", config: HopperConfig = HopperConfig(), context=None,
                 epilogue: Epilogue | Choice | None = None):
    """The kernel (see the module's text); `epilogue` applied to each accumulator before it is rounded, its
    operands the kernel's arguments after the sizes."""
    from mlir_tile.builder import Kernel, TensorMap
    from mlir_tile.kernels.gemm import operand_parameters

    if element not in ("f16", "bf16"):
        raise ValueError(f"hopper gemm: f16 or bf16, got {element!r}")
    parameters = [TensorMap(), TensorMap(), TensorMap(), "index", "index", "index"]
    parameters += operand_parameters(epilogue, element) if epilogue is not None else []
    with Kernel(KERNEL, parameters, block=(config.threads, 1, 1), chip="sm_90a", context=context) as k:
        _HopperGemm(k, element, config, epilogue).build()
    return k.module


class _HopperGemm:
    def __init__(self, k, element: str, config: HopperConfig, epilogue):
        from mlir.dialects import arith

        from mlir_tile.atoms import wgmma
        from mlir_tile.builder.schedule import StageRing, TileOrder, TmaPipeline
        from mlir_tile.builder.tensor import ceil_div, in_units

        self.k, self.element, self.config, self.epilogue = k, element, config, epilogue
        self.a_map, self.b_map, self.c_map, self.m, n_units, k_units = k.arguments[:6]
        self.extras = k.arguments[6:]
        self.n, self.depth = in_units(k, n_units, 8), in_units(k, k_units, 8)  # rows on 16 bytes, proven
        self.tiles, self.atom = tiles(config), wgmma(config.bn, element)
        order = TileOrder(k, (self.m, self.n), (config.bm, config.bn), config.group)
        self.origin = order.origin(k.block_id())
        self.k_tiles = k.as_index(ceil_div(k, self.depth, config.bk))
        self.shared = k.dynamic_shared(alignment=1024)
        self.ring = StageRing(k, self.shared, config.stages, [(element, part) for part in config.parts])
        loads = 1 + (1 if config.b_major == "nk" else config.bn // SWIZZLE_COLUMNS)
        self.pipeline = TmaPipeline(k, self.ring, config.threads // 32, loads)
        self.warpgroup = arith.divui(k.thread_id(), k.index(128))
        self.producer = k.compare("eq", k.thread_id(), 0)
        self.accumulators = k.accumulators(self.atom)

    def build(self) -> None:
        k, config = self.k, self.config
        for k_tile in range(config.stages):  # the first k-tiles, each where K has it
            with k.if_(self._and(self.producer, k.compare("ult", k_tile, self.k_tiles))):
                self.load(k.index(k_tile))
        with k.loop(0, self.k_tiles) as k_tile:
            self.step(k_tile)
        k.wgmma_wait(0, [self.accumulators])
        self.store_c()

    def _and(self, a, b):
        from mlir.dialects import arith

        return arith.andi(a, b)

    def load(self, k_tile) -> None:
        """k-tile `k_tile`'s A and B boxes into its stage (thread 0), once the stage is free."""
        from mlir.dialects import arith

        k, config, pipeline = self.k, self.config, self.pipeline
        pipeline.acquire(k_tile)
        a_view, b_view = self.ring.views(self.ring.stage(k_tile))
        column = arith.muli(k_tile, k.index(config.bk))
        row0, col0 = self.origin
        pipeline.load(k_tile, k.tensor(a_view, self.tiles["a"]), self.a_map, (row0, column))
        if config.b_major == "nk":
            pipeline.load(k_tile, k.tensor(b_view, boxes(config)["b"].layout), self.b_map, (col0, column))
            return
        for first, box in self._b_boxes():
            view = k.view(self.shared, (box.rows * box.columns,), self.element,
                          arith.addi(self.ring.offset(self.ring.stage(k_tile), 1), k.index(first * ELEMENT_BYTES)))
            pipeline.load(k_tile, k.tensor(view, box.layout), self.b_map,
                          (column, arith.addi(col0, k.index(first // config.bk))))

    def _b_boxes(self):
        """B [K, N]'s boxes in a stage: (first element, box), the (k, n) tile's columns of 64 proven boxes."""
        from mlir_tile.tma import column_boxes

        return column_boxes(_as_kn(self.tiles["b"]), 16, SWIZZLE_COLUMNS)

    def step(self, k_tile) -> None:
        """k-tile `k_tile`: its batch once its stage is full; then, the batch before retired, the stage of
        k-tile - 1 released by every warp, and thread 0 loads k-tile - 1 + stages into it."""
        from mlir.dialects import arith

        k, config, ring, pipeline = self.k, self.config, self.ring, self.pipeline
        pipeline.wait(k_tile)
        a_view, b_view = ring.views(ring.stage(k_tile))
        k.wgmma(self.atom, k.tensor(a_view, self.tiles["a"]), k.tensor(b_view, self.tiles["b"]), self.accumulators,
                a_row_block=self.warpgroup)
        k.wgmma_wait(1)
        with k.if_(k.compare("uge", k_tile, 1)):
            previous = arith.subi(k_tile, k.index(1))
            pipeline.release(previous)
            refill = ring.later(previous, config.stages)
            with k.if_(self._and(self.producer, k.compare("ult", refill, self.k_tiles))):
                self.load(refill)

    def store_c(self) -> None:
        """The accumulators (the epilogue applied) packed, stmatrix into the C tile over the stages' bytes,
        then one TMA store per 64-column box of it by thread 0."""
        from mlir.dialects import arith

        from mlir_tile.builder import transfer
        from mlir_tile.kernels.gemm import for_each_arm
        from mlir_tile.layout import Layout
        from mlir_tile.tiled import tiled_store_c
        from mlir_tile.tma import column_boxes

        k, config, atom = self.k, self.config, self.atom
        words = self.tiles["c_words"]
        c = tiled_store_c(config.bm // 16, words)
        registers = k.registers(c.whole.slots)
        rows, columns = atom.c.rows, atom.c.columns
        thread_values = [Layout((rows.shape[0] + (config.warpgroups,), rows.shape[1]),
                                (rows.stride[0] + (64,), rows.stride[1])),
                         Layout((columns.shape[0] + (config.warpgroups,), columns.shape[1]),
                                (columns.stride[0] + (0,), columns.stride[1]))]
        c_c = k.identity_tensor((self.m, self.n))
        place = c_c.domain_offset(self.origin).partition(thread_values)

        def pack(finish):
            for block in range(config.bn // 8):
                for half in range(2):  # (c0, c1) row l / 4, (c2, c3) eight rows further: register slot
                    slot = 4 * (block // 2) + 2 * (block % 2) + half  # `tiled_store_c`'s c_slots(0, block)
                    values = []
                    for value_slot in (4 * block + 2 * half, 4 * block + 2 * half + 1):
                        value = k.load(self.accumulators.registers, [value_slot])
                        values.append(value if finish is None else finish(value, *place[k.thread_id(), value_slot]))
                    k.store(k.pack_f16(*values, self.element), registers, [slot])

        for_each_arm(k, self.epilogue, self.extras, c_c.extent, pack)
        k.barrier()  # every warpgroup's batches have read the stages the C tile overwrites
        transfer(c.whole.opcode, k.view(self.shared, (words.cosize,), "i32"), registers,
                 dst_layout=c.whole.shared, src_layout=c.whole.registers, scope="cta")
        k.async_proxy_fence()
        k.barrier()
        row0, col0 = self.origin
        with k.if_(self.producer):
            for first, box in column_boxes(self.tiles["c"], 16, SWIZZLE_COLUMNS):
                view = k.view(self.shared, (box.rows * box.columns,), self.element, first * ELEMENT_BYTES)
                k.tma_store(k.tensor(view, box.layout), self.c_map,
                            (row0, arith.addi(col0, k.index(first // config.bm))))
            k.tma_store_wait(0)


TILE_NAME = "{bm}x{bn}x{bk}s{stages}"
DEFAULT_TILE = "128x128x64s4"


def configure(b_major: str = "nk", tile: str = DEFAULT_TILE) -> HopperConfig:
    """The Hopper kernel of a tile named BMxBNxBKsSTAGES for B's layout; ValueError for one it does not take."""
    import re

    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)s(\d+)", tile)
    if match is None:
        raise ValueError(f"hopper gemm: a tile is BMxBNxBKsSTAGES (e.g. {DEFAULT_TILE}), got {tile!r}")
    bm, bn, bk, stages = map(int, match.groups())
    return HopperConfig(bm, bn, bk, stages, b_major)


def tensor_maps(runtime, a, b, c, m: int, n: int, depth: int, config: HopperConfig) -> list:
    """The three tensor maps (device copies) of device matrices a (M x K), b ([N, K] or [K, N]) and c (M x N)
    for the kernel's boxes; keep them alive until the launch is done."""
    box = boxes(config)
    b_shape = (n, depth) if config.b_major == "nk" else (depth, n)
    shapes = {"a": (a, (m, depth)), "b": (b, b_shape), "c": (c, (m, n))}
    return [runtime.to_device(runtime.tensor_map(int(matrix.handle), shape, shape[1] * ELEMENT_BYTES, box[name]))
            for name, (matrix, shape) in shapes.items()]


def run_and_check(ptx: str, dtype: str = "f16", b_major: str = "nk", tile: str = DEFAULT_TILE,
                  shape: tuple[int, int, int] = (1000, 1016, 504)) -> tuple[bool, str]:
    """The kernel in `ptx` on an M x N x K product of random values, against numpy (`gemm.check`)."""
    import numpy as np

    from mlir_tile.kernels.gemm import check, inputs
    from mlir_tile.runtime import Runtime

    config, (m, n, depth) = configure(b_major, tile), shape
    if min(shape) < 1 or n % 8 or depth % 8:
        raise ValueError(f"hopper gemm: M, N, K >= 1 with N and K multiples of 8 (TMA: rows on 16 bytes), not "
                         f"{m} x {n} x {depth}")
    a, b = inputs(m, n, depth, element=dtype)
    b_given = b if b_major == "kn" else np.ascontiguousarray(b.T)
    with Runtime() as runtime:
        matrices = [runtime.to_device(x) for x in (a, b_given, np.zeros((m, n), np.uint16))]
        maps = tensor_maps(runtime, *matrices, m, n, depth, config)
        module = runtime.load_ptx(ptx, name=KERNEL)
        grid = -(-m // config.bm) * -(-n // config.bn)
        module.launch(KERNEL, [int(x.handle) for x in maps] + [m, n // 8, depth // 8], grid=grid,
                      block=config.threads, shared_bytes=config.shared_bytes)
        c = runtime.to_host(matrices[2], np.zeros((m, n), np.uint16))
        for buffer in matrices + maps:
            buffer.close()
    ok, worst = check(c, a, b, dtype)
    return ok, (f"GPU: {m} x {n} x {depth} {dtype} GEMM on Hopper's path ({config}: TMA, wgmma, stmatrix, TMA "
                f"store) matches numpy: {ok} (largest error {worst:.2e})")


def emulate(config: HopperConfig = HopperConfig(), k_tiles: int = 2, element: str = "f16") -> str:
    """One CTA (BM x BN x k_tiles * BK) on the reference model, as the kernel runs it: each k-tile's boxes
    written into a stage by TMA's model, every warpgroup's wgmma operands fetched through the descriptors the
    kernel issues (`wgmma.descriptor_for` of the stage's layouts) by the ISA's model and multiplied, the
    accumulators (placed by the ISA's fragment) packed and written into the C tile by stmatrix's model, and the
    C boxes read by the TMA store's model: C against numpy. AssertionError otherwise."""
    import numpy as np

    from mlir_tile import reference
    from mlir_tile.halves import decode
    from mlir_tile.kernels.gemm import check, inputs
    from mlir_tile.tiled import tiled_store_c
    from mlir_tile.tma import column_boxes
    from mlir_tile.wgmma import descriptor_for

    layouts, depth = tiles(config), k_tiles * config.bk
    a, b = inputs(config.bm, config.bn, depth, seed=3, element=element)  # bit patterns; b is K x N
    accumulators = np.zeros((config.warpgroups, 64, config.bn))
    a_bytes = config.parts[0] * ELEMENT_BYTES
    for k_tile in range(k_tiles):
        stage, columns = np.zeros(config.shared_bytes // config.stages, np.uint8), slice(k_tile * config.bk, (k_tile + 1) * config.bk)
        reference.tma_box_write(a[:, columns], 128, stage)
        if config.b_major == "nk":
            reference.tma_box_write(np.ascontiguousarray(b[columns].T), 128, stage, a_bytes)
        else:
            for first, box in column_boxes(_as_kn(layouts["b"]), 16, SWIZZLE_COLUMNS):
                n0 = first // config.bk
                reference.tma_box_write(b[columns, n0:n0 + box.columns], 128, stage, a_bytes + first * ELEMENT_BYTES)
        for group in range(config.warpgroups):
            for step in range(config.bk // 16):
                fetched = []
                for name, rows, origin, at in (("a", 64, (64 * group, 16 * step), 0), ("b", config.bn, (0, 16 * step), a_bytes)):
                    fields, start = descriptor_for(layouts[name], 16, rows, 16, origin)
                    fetched.append(decode(reference.wgmma_operand(stage, fields.bits(at + start), fields.major == "K",
                                                                  16, rows), element))
                accumulators[group] += fetched[0] @ fetched[1].T
    c = tiled_store_c(config.bm // 16, layouts["c_words"])
    packed = np.zeros((config.threads, c.whole.slots), np.uint32)
    for thread in range(config.threads):
        product = accumulators[thread // 128].astype(np.float32)
        for block in range(config.bn // 8):
            for half in range(2):
                pair = [product[reference.wgmma_accumulator_position(thread % 128, 4 * block + 2 * half + i)]
                        for i in range(2)]
                bits = _encoded(np.array(pair), element)
                packed[thread, 4 * (block // 2) + 2 * (block % 2) + half] = int(bits[0]) | int(bits[1]) << 16
    words = reference.emulate(c.whole.opcode, c.whole.shared, c.whole.registers,
                              np.zeros(layouts["c_words"].cosize, np.uint32), packed, "cta")
    shared = words.view(np.uint8)
    out = np.zeros((config.bm, config.bn), np.uint16)
    for first, box in column_boxes(layouts["c"], 16, SWIZZLE_COLUMNS):
        read = reference.tma_box_read(shared, 128, box.rows, box.columns * ELEMENT_BYTES, first * ELEMENT_BYTES)
        out[:, first // config.bm:first // config.bm + box.columns] = read.view(np.uint16)
    ok, worst = check(out, a, b, element)
    assert ok, f"C differs from numpy by up to {worst}"
    return (f"reference model: a {config.bm} x {config.bn} x {depth} {element} CTA on Hopper's path ({config}): TMA's "
            f"box writes, wgmma's operand fetches through the kernel's descriptors, stmatrix into the C tile and the "
            f"TMA stores' reads give C as numpy does (largest error {worst:.2e})")


def _as_kn(b):
    """B's (n, k) tile layout as (k, n): the boxes TMA writes are rows of K."""
    from mlir_tile.layout import Layout

    return Layout((b.shape[1], b.shape[0]), (b.stride[1], b.stride[0]), b.swizzle)


def _encoded(values, element: str):
    from mlir_tile.halves import encode

    return encode(values, element)
