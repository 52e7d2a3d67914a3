"""A GEMM kernel's PTX run on the GPU against numpy (`--run-ptx`)."""
from __future__ import annotations

import numpy as np

from mlir_tile.isa.targets import DEFAULT_CHIP, WARPGROUP_CHIP
from mlir_tile.kernels.gemm import sm90_checks, sm90_tiles
from mlir_tile.kernels.gemm.reference import check, inputs
from mlir_tile.kernels.gemm.sm80 import KERNEL
from mlir_tile.kernels.gemm.sm80_tiles import DEFAULT_TILE, configure


SHAPE = (1000, 1016, 504)  # the checked product: M not a multiple of the tile, N and K not of 128 or 32


def run_and_check(ptx: str, dtype: str = "f16", b_major: str = "kn", align: int = 16, tile: str | None = None,
                  shape: tuple[int, int, int] = SHAPE, arch: str = DEFAULT_CHIP) -> tuple[bool, str]:
    """The kernel of these build options (see `configure`; `arch` WARPGROUP_CHIP: the Hopper kernel's,
    `sm90_checks.run_and_check`) in `ptx` on an M x N x K product of random values, against numpy."""
    if arch == WARPGROUP_CHIP:
        return sm90_checks.run_and_check(ptx, dtype, b_major, tile or sm90_tiles.default_tile(dtype, b_major), shape)
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
