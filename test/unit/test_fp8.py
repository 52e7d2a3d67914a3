"""fp8 on the host (fp8.py): small integers as e4m3 and e5m2 bits, by the formats' definitions (sign, biased
exponent, mantissa), and back; values outside what is exact are refused; any float rounded to e4m3 (encode)."""
import numpy as np
import pytest

from mlir_tile.isa import fp8


@pytest.mark.parametrize("element, value, bits", [
    ("e4m3", 1, 0x38), ("e4m3", -2, 0xC0), ("e4m3", 3, 0x44), ("e4m3", 7, 0x4E), ("e4m3", 0, 0x00),
    ("e5m2", 1, 0x3C), ("e5m2", -3, 0xC2), ("e5m2", 6, 0x46),
])
def test_integers_have_the_formats_bits(element, value, bits):
    assert int(fp8.encode_integers([value], element)[0]) == bits
    assert fp8.decode(np.array([bits], np.uint8), element)[0] == value


def test_every_small_integer_comes_back_and_subnormals_decode():
    for element in fp8.FORMATS:
        values = np.arange(-7, 8)
        assert (fp8.decode(fp8.encode_integers(values, element), element) == values).all()
    assert fp8.decode(np.array([0x01], np.uint8), "e4m3")[0] == 2.0 ** -9  # the smallest subnormal


@pytest.mark.parametrize("values, element", [([8], "e4m3"), ([0.5], "e4m3"), ([1], "e3m4")])
def test_what_is_not_a_small_integer_of_a_format_is_refused(values, element):
    with pytest.raises(ValueError, match="integers in \\[-7, 7\\]"):
        fp8.encode_integers(values, element)


@pytest.mark.parametrize("value, expected", [
    (0.0, 0x00), (-0.0, 0x80), (1.0, 0x38), (1.0625, 0x38), (1.125, 0x39), (1.1875, 0x3A),  # ties to an even mantissa
    (448.0, 0x7E), (464.0, 0x7E), (1e9, 0x7E), (-1e9, 0xFE),  # saturated, never NaN (0x7F)
    (2.0 ** -9, 0x01), (2.0 ** -10, 0x00), (3 * 2.0 ** -10, 0x02), (-0.1, 0x9D)])  # 1.6 x 2^-4: exponent 3, mantissa 4.8 -> 5
def test_encode_rounds_to_nearest_even_and_saturates_as_cvt_satfinite(value, expected):
    assert int(fp8.encode([value], "e4m3")[0]) == expected


def test_encode_is_decodes_inverse_on_every_finite_e4m3():
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)
    assert (fp8.encode(fp8.decode(codes, "e4m3"), "e4m3") == codes).all()
