"""GEMM inputs and numpy's product as the check of C: the oracle of every GEMM check (it shares nothing with
the kernels)."""
from __future__ import annotations

import numpy as np


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
