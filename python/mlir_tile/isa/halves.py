"""16-bit floats on the host, for checking fp16 and bf16 kernels alike: fp16 is numpy's float16; bf16, which
numpy lacks, is held as its bit patterns (uint16). Inputs are made with `encode`, outputs read with `decode`;
both kernels and checks then see the same bits."""
from __future__ import annotations

import numpy as np

ELEMENTS = ("f16", "bf16")
# relative distance from a value to the nearest representable one, at most (half an ulp): 2^-11 and 2^-8
UNIT_ROUNDOFF = {"f16": 2.0**-11, "bf16": 2.0**-8}


def encode(values, element: str) -> np.ndarray:
    """`values` rounded to nearest (ties to even) as `element`, as uint16 bit patterns."""
    values = np.asarray(values, np.float32)
    if not _is_bf16(element):
        return values.astype(np.float16).view(np.uint16)
    bits = values.view(np.uint32).astype(np.uint64)
    nearest = ((bits + 0x7FFF + (bits >> 16 & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), nearest)  # (a NaN's payload could round to infinity)


def decode(bits, element: str) -> np.ndarray:
    """The float32 values of `element` bit patterns (uint16; exact: both types' values are float32's)."""
    bits = np.asarray(bits, np.uint16)
    if not _is_bf16(element):
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _is_bf16(element: str) -> bool:
    if element not in ELEMENTS:
        raise ValueError(f"16-bit elements are {ELEMENTS}, got {element!r}")
    return element == "bf16"
