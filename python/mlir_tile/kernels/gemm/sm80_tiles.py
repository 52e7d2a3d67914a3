"""The mma.sync GEMM's configurations (`Config`) and the tables `Matmul` picks them from (data: no kernel)."""
from __future__ import annotations

from dataclasses import dataclass

from mlir_tile.isa.targets import DEFAULT_CHIP, has_instruction
from mlir_tile.kernels.common import HALF
from mlir_tile.kernels.epilogues import Choice, Epilogue, selectable


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
# The CTA tiles `Matmul` picks from, largest first (128 x 256 by 8 warps reads the fewest shared bytes an mma;
# the default 128 x 128 keeps more SMs busy on smaller products); each measured: docs/notes/benchmark-history.md
# ("The configuration tables' measurements").
TILES = (dict(bm=128, bn=256, bk=64, warps=(2, 4), stages=4), dict(bm=128, bn=256, bk=128, warps=(2, 4), stages=2),
         {})
# The persistent kernel of the first tile (one CTA an SM, the next tile's first k-tiles copied during this
# one's last): rows on 16 bytes, B [N, K], M >= 128, N >= 256, K >= 192; PREFERRED: the tiles per element and B
# layout, fastest first (both measured: docs/notes/benchmark-history.md, "The configuration tables' measurements").
PERSISTENT = dict(TILES[0], persistent=True)
PREFERRED = {("f16", "kn"): (TILES[0], TILES[2]), ("f16", "nk"): (TILES[0], TILES[2]),
             ("bf16", "kn"): TILES[2:], ("bf16", "nk"): (PERSISTENT, TILES[1], TILES[2])}
# Element copies (rows on 2 bytes: K or N odd) wait for each k-tile's loads, so a product of few CTAs is
# bound by their latency: 64 x 64 tiles give it 4 times the CTAs.
ELEMENT_TILES = ({}, dict(bm=64, bn=64))
FILL = 0.9  # the share of the SMs a tile's CTAs must cover for `Matmul` to take it


def pick_tile(m: int, n: int, depth: int, sms: int, *, element: str = "f16", align: int = 16, b_major: str = "kn",
              chip: str = DEFAULT_CHIP, epilogue: Epilogue | Choice | None = None) -> dict:
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
            if not config.persistent or (has_instruction(chip, "stmatrix") and epilogue is not selectable)]


SPLIT_VARIANTS = [variant(smallest_tile(align), align, b_major=major, split_k=True) for major in ("kn", "nk")
                  for align in (16, 8, 4, HALF)]
# the split-K kernel the GPU tests run: element copies (any K)
SPLIT_CHECKED = variant(smallest_tile(HALF), HALF, b_major="kn", split_k=True)
