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


def swiglu(product: np.ndarray) -> np.ndarray:
    """silu(gate) * up of a product whose columns are gate and up features interleaved a block of 8 at a time
    (column 16 i + x gate feature 8 i + x, column 16 i + 8 + x its up): M x N / 2."""
    m, n = product.shape
    blocks = product.reshape(m, n // 16, 2, 8)
    gate, up = blocks[:, :, 0], blocks[:, :, 1]
    return (gate / (1 + np.exp(-gate)) * up).reshape(m, n // 2)


def check_swiglu(c: np.ndarray, a: np.ndarray, b: np.ndarray, element: str = "f16") -> tuple[bool, float]:
    """C (M x N / 2), A and B as `element` bit patterns: `swiglu` of numpy's product within C's rounding (twice
    half an ulp) plus the fp32 product's error (`check`'s 1e-5 K) through silu(gate) * up's derivatives (at most
    1.1 |up| and |silu(gate)|)."""
    from mlir_tile.isa.halves import UNIT_ROUNDOFF, decode

    product = decode(a, element) @ decode(b, element)
    exact, blocks = swiglu(product), product.reshape(product.shape[0], -1, 2, 8)
    gate, up = (blocks[:, :, i].reshape(exact.shape) for i in range(2))
    slack = 1e-5 * a.shape[1] * (1.1 * np.abs(up) + np.abs(gate / (1 + np.exp(-gate))) + 1e-5 * a.shape[1])
    error = np.abs(decode(c, element) - exact)
    return bool((error <= 2 * UNIT_ROUNDOFF[element] * np.abs(exact) + slack).all()), float(error.max())

