"""A GEMM kernel's PTX run on the GPU against numpy (`--run-ptx`)."""
from __future__ import annotations

import numpy as np

from mlir_tile.isa.targets import DEFAULT_CHIP, WARPGROUP_CHIP
from mlir_tile.kernels.gemm import sm90_checks, sm90_tiles
from mlir_tile.kernels.gemm.reference import check, inputs
from mlir_tile.kernels.gemm.sm80 import KERNEL
from mlir_tile.kernels.command_line import given
from mlir_tile.kernels.gemm.sm80_tiles import DEFAULT_TILE, configure


SHAPE = (1000, 1016, 504)  # the checked product: M not a multiple of the tile, N and K not of 128 or 32


def hopper_tile(dtype: str, b_major: str, tile: str | None, fields: dict) -> sm90_tiles.HopperConfig:
    """The command line's Hopper kernel: HopperConfig's fields given (None: not) over the element's tile."""
    if tile is not None:
        raise ValueError("gemm: --tile names the mma.sync path's tiles; Hopper's is its fields (--bm, --bn, "
                         "--stages, --persistent, ...)")
    return sm90_tiles.hopper_config(b_major, {**sm90_tiles.default_tile(dtype, b_major), **given(fields)}, dtype)


def sm80_config(dtype: str, b_major: str, *, align: int, tile: str | None, fields: dict):
    """The command line's mma.sync kernel: `Matmul`'s tile named `tile` (default DEFAULT_TILE)."""
    if dtype == "e4m3":
        raise ValueError("gemm: e4m3 runs on Hopper's path: --arch sm_90a")
    if given(fields):
        raise ValueError(f"gemm: {', '.join('--' + name.replace('_', '-') for name in given(fields))} set Hopper's "
                         f"tile (--arch sm_90a); the mma.sync path's is --tile")
    return configure(b_major, align, tile or DEFAULT_TILE)


def run_and_check(ptx: str, *, dtype: str = "f16", b_major: str = "kn", align: int = 16, tile: str | None = None,
                  shape: tuple[int, int, int] = SHAPE, arch: str = DEFAULT_CHIP, **fields) -> tuple[bool, str]:
    """The kernel of these build options (`sm80_config`; `arch` WARPGROUP_CHIP: `hopper_tile`'s,
    `sm90_checks.run_and_check`) in `ptx` on an M x N x K product of random values, against numpy."""
    if arch == WARPGROUP_CHIP:
        config = hopper_tile(dtype, b_major, tile, fields)
        return sm90_checks.run_and_check(ptx, dtype=dtype, b_major=b_major, tile=config.tile, shape=shape)
    from mlir_tile.runtime import Runtime

    config, (m, n, depth) = sm80_config(dtype, b_major, align=align, tile=tile, fields=fields), shape
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
