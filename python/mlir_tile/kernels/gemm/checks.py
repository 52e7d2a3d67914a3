"""A GEMM kernel's PTX run on the GPU against numpy (`--run-ptx`): inputs and the check of C."""
from __future__ import annotations

import numpy as np

from mlir_tile.kernels.gemm.sm80 import KERNEL
from mlir_tile.kernels.gemm.sm80_tiles import DEFAULT_TILE, configure


SHAPE = (1000, 1016, 504)  # the checked product: M not a multiple of the tile, N and K not of 128 or 32


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
                  shape: tuple[int, int, int] = SHAPE) -> tuple[bool, str]:
    """The mma.sync kernel of these build options (see `configure`) in `ptx` on an M x N x K product of random
    values, against numpy (the Hopper kernel's: `sm90_checks.run_and_check`)."""
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
