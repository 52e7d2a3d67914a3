"""mlir_tile.isa.halves against bf16's definition (1 sign, 8 exponent, 7 fraction bits; round to nearest, ties to
even), worked out here from the fields in Python floats; fp16 is numpy's own float16."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlir_tile.isa.halves import decode, encode


def bf16_value(bits: int) -> float:
    sign, exponent, fraction = bits >> 15, bits >> 7 & 0xFF, bits & 0x7F
    if exponent == 0xFF:
        return math.nan if fraction else (-1) ** sign * math.inf
    if exponent == 0:  # subnormal
        return (-1) ** sign * math.ldexp(fraction, -126 - 7)
    return (-1) ** sign * math.ldexp(128 + fraction, exponent - 127 - 7)


def test_every_bf16_pattern_decodes_to_its_value_and_encodes_back():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    values = decode(bits, "bf16")
    expected = np.array([bf16_value(int(b)) for b in bits], np.float64)
    finite = np.isfinite(expected)
    assert np.array_equal(values[finite].astype(np.float64), expected[finite])
    assert np.array_equal(np.isnan(values), np.isnan(expected))
    assert np.array_equal(encode(values[~np.isnan(values)], "bf16"), bits[~np.isnan(values)])
    assert (encode(values[np.isnan(values)], "bf16") == 0x7FC0).all()  # a NaN stays a NaN


def nearest_bf16(value: float) -> int:
    """By search: the two bf16 patterns around `value` (its float32 truncated, and one ulp further from 0),
    the nearer one, on a tie the one with an even last bit."""
    low = int(np.array(value, np.float32).view(np.uint32)) >> 16
    candidates = [low, low + 1]

    def at(pattern):  # infinity rounds as the next power of two past the largest finite value would (IEEE 754)
        return math.copysign(2.0**128, value) if pattern & 0x7FFF == 0x7F80 else bf16_value(pattern)

    distances = [abs(at(c) - value) for c in candidates]
    if distances[0] == distances[1]:
        return min(candidates, key=lambda c: c & 1)
    return candidates[int(distances[1] < distances[0])]


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_encoding_rounds_to_the_nearest_bf16_ties_to_even(value):
    assert int(encode(value, "bf16")) == nearest_bf16(value)


def test_values_past_the_largest_bf16_round_to_infinity_from_halfway():
    largest = bf16_value(0x7F7F)
    below, halfway = np.float32(largest + 2.0**103), np.float32(largest + 2.0**(127 - 7 - 1))
    assert [int(encode(v, "bf16")) for v in (below, halfway)] == [0x7F7F, 0x7F80]
    assert [nearest_bf16(float(v)) for v in (below, halfway)] == [0x7F7F, 0x7F80]


@given(st.integers(0, 0x7F7F), st.booleans())
def test_a_value_halfway_between_two_bf16_rounds_to_the_even_one(bits, negative):
    halfway = (int(bits) << 16 | 0x8000) | (negative << 31)
    value = np.array(halfway, np.uint32).view(np.float32)
    assert int(encode(value, "bf16")) == ((bits + (bits & 1)) | (negative << 15))


def test_f16_is_numpys_float16():
    values = np.array([0.1, -3.14159, 65504.0, 1e-7], np.float32)
    assert np.array_equal(encode(values, "f16"), values.astype(np.float16).view(np.uint16))
    assert np.array_equal(decode(encode(values, "f16"), "f16"), values.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("convert", [encode, decode])
def test_an_element_other_than_f16_or_bf16_is_a_value_error(convert):
    with pytest.raises(ValueError, match="16-bit elements are .*, got 'f32'"):
        convert(np.zeros(2, np.uint16), "f32")
