"""8-bit floats on the host (e4m3: bias 7, 3 mantissa bits; e5m2: bias 15, 2), as raw bits (uint8), for
checking fp8 kernels: small integers, which every fp8 product and fp32 sum holds exactly, and the bits' values."""
from __future__ import annotations

import numpy as np

FORMATS = {"e4m3": (3, 7), "e5m2": (2, 15)}  # mantissa bits, exponent bias


def encode_integers(values, element: str) -> np.ndarray:
    """Integers in [-7, 7] (exact in both formats) as `element` bits."""
    values = np.asarray(values)
    if element not in FORMATS or np.any(np.abs(values) > 7) or np.any(values != np.round(values)):
        raise ValueError(f"fp8: integers in [-7, 7] as e4m3 or e5m2, got {element!r}")
    mantissa_bits, bias = FORMATS[element]
    magnitude = np.abs(values).astype(np.int64)
    exponent = np.where(magnitude > 0, np.floor(np.log2(np.maximum(magnitude, 1))).astype(np.int64), 0)
    mantissa = ((magnitude - (1 << exponent)) << mantissa_bits) >> exponent
    bits = np.where(magnitude > 0, (exponent + bias) << mantissa_bits | mantissa, 0)
    return (np.where(values < 0, 0x80, 0) | bits).astype(np.uint8)


def decode(bits, element: str) -> np.ndarray:
    """The float64 values of `element` bits (normal and subnormal numbers; the formats' NaN and infinities are
    not decoded)."""
    mantissa_bits, bias = FORMATS[element]
    bits = np.asarray(bits, np.uint8).astype(np.int64)
    exponent = (bits >> mantissa_bits) & ((1 << (7 - mantissa_bits)) - 1)
    mantissa = bits & ((1 << mantissa_bits) - 1)
    magnitude = np.where(exponent == 0, mantissa * 2.0 ** (1 - bias - mantissa_bits),
                         (1 + mantissa / 2 ** mantissa_bits) * 2.0 ** (exponent - bias))
    return np.where(bits & 0x80, -magnitude, magnitude)


LARGEST_CODE = {"e4m3": 0x7E, "e5m2": 0x7B}  # the largest finite magnitude's bits (448, 57344)


def encode(values, element: str) -> np.ndarray:
    """Floats as `element` bits, rounded to nearest (ties to an even mantissa) and saturated to the finite range
    (the conversion `cvt.rn.satfinite` makes), for inputs of fp8 kernels."""
    if element not in FORMATS:
        raise ValueError(f"fp8: e4m3 or e5m2, got {element!r}")
    values = np.asarray(values, np.float64)
    codes = np.arange(LARGEST_CODE[element] + 1)
    magnitudes = decode(codes.astype(np.uint8), element)
    size = np.minimum(np.abs(values), magnitudes[-1])
    above = np.clip(np.searchsorted(magnitudes, size), 1, len(codes) - 1)
    below = above - 1
    gap_below, gap_above = size - magnitudes[below], magnitudes[above] - size
    nearest = np.where((gap_above < gap_below) | ((gap_above == gap_below) & (above % 2 == 0)), above, below)
    return (np.where(np.signbit(values), 0x80, 0) | codes[nearest]).astype(np.uint8)
