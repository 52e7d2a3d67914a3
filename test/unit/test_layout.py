"""The layout algebra against brute-force definitions (hypothesis)."""
import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlir_tile.algebra.layout import Layout, S, Sw, ThreadStride, laneid, warpid

from mlir_tile.algebra.words import pack_b16_as_b32

strides = st.one_of(
    st.integers(-64, 64),
    st.builds(ThreadStride, st.integers(0, 16), st.sampled_from(["laneid", "warpid"])),
)


@st.composite
def layouts(draw, max_rank=4):
    rank = draw(st.integers(1, max_rank))
    return Layout(tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))),
                  tuple(draw(st.lists(strides, min_size=rank, max_size=rank))))


def test_spec_notation():
    layout = S[(2, 2, 8, 4):(8, 2, 4 @ laneid, 1 @ laneid)]
    assert str(layout) == "(2,2,8,4):(8,2,4@laneid,1@laneid)"
    assert layout.rank == 4 and layout.size == 128 and layout.cosize == 11
    point = layout(1, 1, 7, 3)
    assert point.offset == 10 and point.threads == {"laneid": 31}
    assert str(S[(4, 2):(1 @ warpid, 3)]) == "(4,2):(1@warpid,3)"


def test_spec_rearrange():
    shared = S[(16, 4, 2):(8, 1, 128)]
    assert shared.rearrange("(r m) w k -> k m r w", r=8, m=2) == Layout.parse("(2,2,8,4):(128,8,16,1)")


@given(layouts())
def test_text_round_trip(layout):
    assert Layout.parse(str(layout)) == layout


@given(layouts())
def test_evaluation_is_the_sum_of_coordinate_times_stride(layout):
    for coordinate in itertools.islice(layout.coordinates(), 200):
        point = layout(*coordinate)
        memory = sum(c * s for c, s in zip(coordinate, layout.stride) if isinstance(s, int))
        assert point.offset == memory == layout.offset(*coordinate)
        for axis in ("laneid", "warpid"):
            expected = sum(c * s.scale for c, s in zip(coordinate, layout.stride)
                           if isinstance(s, ThreadStride) and s.axis == axis)
            assert point.threads.get(axis, 0) == expected


@given(layouts())
def test_cosize_is_one_past_the_largest_offset(layout):
    offsets = [layout.offset(*c) for c in layout.coordinates()]
    assert layout.cosize == max(max(offsets), 0) + 1
    assert layout.min_offset == min(min(offsets), 0)
    assert layout.size == math.prod(layout.shape) == len(offsets)


@st.composite
def split_cases(draw):
    """A layout, a split of its first axis into (a b), and a random permutation of the axes."""
    outer, inner = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    rest = draw(layouts(max_rank=2))
    layout = Layout((outer * inner,) + rest.shape, (draw(st.integers(-8, 8)),) + rest.stride)
    names = ["a", "b"] + [f"x{i}" for i in range(rest.rank)]
    order = draw(st.permutations(names))
    return layout, outer, inner, names, order


@given(split_cases())
def test_rearrange_then_inverse_gives_the_layout_back(case):
    layout, outer, inner, names, order = case
    left = "(a b) " + " ".join(names[2:])
    moved = layout.rearrange(f"{left} -> {' '.join(order)}", a=outer, b=inner)
    assert moved.size == layout.size
    # Evaluating the moved layout at the permuted coordinate gives the original offset.
    for coordinate in itertools.islice(layout.coordinates(), 100):
        a, b = divmod(coordinate[0], inner)
        values = dict(zip(names, (a, b) + coordinate[1:]))
        assert moved.offset(*(values[n] for n in order)) == layout.offset(*coordinate)
    back = moved.rearrange(f"{' '.join(order)} -> (a b) {' '.join(names[2:])}")
    assert back.shape == layout.shape
    assert [back.offset(*c) for c in back.coordinates()] == [layout.offset(*c) for c in layout.coordinates()]


@pytest.mark.parametrize("text, message", [
    ("(2,2):(1)", "at column 7: 2 extents but 1 strides"),
    ("(2,2:(1,2)", "at column 5: expected ')' but found ':'"),
    ("(2,x):(1,2)", "at column 4: expected an integer but found 'x'"),
    ("(2,2):(1,2@lane)", "at column 12: unknown thread axis 'lane'"),
    ("(2,0):(1,1)", "at column 4: extent 0 is not positive"),
    ("(2,2):(1,2) z", "at column 13: unexpected 'z' after the strides"),
    ("", "at column 1: expected '(' but found end of text"),
    ("(2,2)", "at column 6: expected ':' but found end of text"),
])
def test_malformed_text_names_what_and_where(text, message):
    with pytest.raises(ValueError, match=f"malformed layout '{text}'.*{message}".replace("(", r"\(").replace(")", r"\)")):
        Layout.parse(text)


@given(st.text(alphabet="()0123456789,:@-lanidwrpSo<> x", max_size=30))
def test_any_text_parses_or_raises_value_error(text):
    try:
        layout = Layout.parse(text)
    except ValueError as error:
        assert "malformed layout" in str(error)
    else:
        assert Layout.parse(str(layout)) == layout


@pytest.mark.parametrize("pattern, sizes, message", [
    ("(r m) w k -> k m r w", {"r": 5}, "axis of extent 16 does not split by 5"),
    ("(r m) w k -> k m r", {"r": 8}, "the right side must use each left axis once"),
    ("a b -> a b", {}, "names 2 input axes but layout .* has rank 3"),
    ("a b c", {}, "needs exactly one '->'"),
])
def test_rearrange_errors_say_why(pattern, sizes, message):
    with pytest.raises(ValueError, match=message):
        S[(16, 4, 2):(8, 1, 128)].rearrange(pattern, **sizes) if "(r m)" in pattern else \
            S[(8, 4, 2):(8, 1, 128)].rearrange(pattern, **sizes)


def test_b32_view_of_packed_half_storage():
    assert pack_b16_as_b32(S[(16, 16):(16, 1)]) == Layout.parse("(16,8):(8,1)")
    assert pack_b16_as_b32(S[(2, 8, 8):(128, 8, 1)]) == Layout.parse("(2,8,4):(64,4,1)")
    with pytest.raises(ValueError, match="odd stride 9"):
        pack_b16_as_b32(S[(8, 8):(9, 1)])
    with pytest.raises(ValueError, match="odd extent 7"):
        pack_b16_as_b32(S[(8, 7):(8, 1)])


# ----- nested modes and swizzles (CuTe's semantics) -----
def test_a_nested_mode_splits_its_coordinate_colexicographically():
    layout = Layout.parse("((2,2),8,4):((288,4),36,1)")
    assert layout.sizes == (4, 8, 4) and layout.rank == 3 and not layout.is_flat
    assert [layout.offset(i, 0, 0) for i in range(4)] == [0, 288, 4, 292]  # the first sub-mode fastest
    assert layout.offset(3, 7, 3) == 292 + 7 * 36 + 3


def test_nested_text_canonicalizes_like_cute_and_flat_text_stays_as_written():
    assert str(Layout.parse("((4),8,4):((32),4,1)")) == "(4,8,4):(32,4,1)"
    assert str(Layout.parse("(2,2,8,4):(8,2,4@laneid,1@laneid)")) == "(2,2,8,4):(8,2,4@laneid,1@laneid)"
    assert str(S[((2, 2), 8, 4):((1, 2), 4 @ laneid, 1 @ laneid)]) == "((2,2),8,4):((1,2),4@laneid,1@laneid)"


def test_rearrange_nests_a_group_that_cannot_merge():
    """The mma A operand: a 16x16 b16 tile (16 rows x 8 words, row pitch 36 words) as one x4 whose matrix mode
    is (row half, column half)."""
    tile = S[(16, 8):(36, 1)]
    a = tile.rearrange("(mh r) (kh w) -> (kh mh) r w", mh=2, kh=2)
    assert a == Layout.parse("((2,2),8,4):((288,4),36,1)")
    assert S[(16, 4, 2):(8, 1, 128)].rearrange("a b c -> a (b c)") == Layout.parse("(16,(2,4)):(8,(128,1))")


def test_a_swizzle_xors_bits_of_the_offset():
    layout = Layout.parse("Sw<3,2,3> o (8,32):(32,1)")
    assert [layout.offset(r, 0) for r in range(8)] == [36 * r for r in range(8)]  # row r's chunk 0 moves to r
    assert layout.linear_offset(1, 4) == 36 and layout.offset(1, 4) == 32
    assert sorted(layout.offset(*c) for c in layout.coordinates()) == list(range(256))  # a bijection
    assert Sw(3, 2, 3).compose(S[(8, 32):(32, 1)]) == layout and str(layout) == "Sw<3,2,3> o (8,32):(32,1)"


@pytest.mark.parametrize("text, message", [
    ("Sw<3,2,1> o (8,32):(32,1)", "S \\(1\\) must be at least B"),
    ("Sw<3,2,3> (8,32):(32,1)", "expected 'o'"),
    ("((2,2),8):((1,2,3),1)", "nested differently"),
    ("Sw<3,2,3> o (4,8,4):(1,4@laneid,1@laneid)", "a swizzled layout has no thread strides"),
    ("(" * 12 + "4" + ")" * 12 + ":(1)", "nest more than 8 deep"),
])
def test_malformed_nested_or_swizzled_layouts_say_why(text, message):
    with pytest.raises(ValueError, match=message):
        Layout.parse(text)


@pytest.mark.parametrize("text", ["(\u0663,8):(1,4)", "(4,8):(1,\u0664)", "(4,8):(1,4@lane\u00efd)"])
def test_layout_text_is_ascii_digits_and_names(text):
    """Python's int() reads the Arabic-Indic digit three; the layout grammar does not."""
    with pytest.raises(ValueError, match="unexpected character"):
        Layout.parse(text)


@pytest.mark.parametrize("swizzle", ["Sw<3,2,3>", 3, (3, 2, 3)])
def test_a_swizzle_that_is_no_swizzle_is_a_value_error(swizzle):
    with pytest.raises(ValueError, match="layout swizzle is a Swizzle"):
        Layout((8, 32), (32, 1), swizzle)


def test_tuples_nested_past_the_limit_are_a_value_error_not_a_recursion_error():
    deep = 4
    for _ in range(2000):
        deep = (deep,)
    with pytest.raises(ValueError, match="nests tuples more than 64 deep"):
        Layout((deep,), (deep,))


def test_a_swizzled_layouts_cosize_is_computed_once():
    layout = Layout.parse("Sw<3,4,3> o (256,64):(64,1)")
    assert "cosize" not in vars(layout)
    first = layout.cosize
    assert vars(layout)["cosize"] == first == 256 * 64


@pytest.mark.parametrize("text", ["Sw<3,4,3> o (256,64):(64,1)", "Sw<2,2,3> o ((8,2),(4,4)):((4,128),(1,32))",
                                  "Sw<1,0,2> o (3,5):(-4,1)", "Sw<3,2,5> o (16,(2,4)):(8,(0,128))"])
def test_a_swizzled_layouts_cosize_is_one_past_the_largest_offset_it_reaches(text):
    layout = Layout.parse(text)
    assert layout.cosize == max(layout.offset(*c) for c in itertools.product(*map(range, layout.sizes))) + 1


@pytest.mark.parametrize("layout", [Layout(((4, 8), 3), ((3, 40), 1000)), Layout(((100, 60), 2), ((2, 300), 1))],
                         ids=["tabulated", "a mode past MAX_TABULATED"])
def test_offsets_are_the_sum_of_each_leafs_coordinate_times_its_stride(layout):
    """linear_offset looks offsets up per mode where the modes are small and computes them where one is not;
    both are the colexicographic sum, and both refuse a coordinate outside the layout saying which axis."""
    ((inner, inner_stride), (_, outer_stride)), (columns, column_stride) = layout.mode(0), layout.mode(1)[0]
    for row, column in [(0, 0), (5, 1), (layout.sizes[0] - 1, columns - 1)]:
        expected = row % inner * inner_stride + row // inner * outer_stride + column * column_stride
        assert layout.linear_offset(row, column) == expected
    for bad in [(-1, 0), (0, columns), (1.0, 0)]:
        with pytest.raises(ValueError, match="outside layout"):
            layout.linear_offset(*bad)


def test_words_of_sees_a_boxed_swizzled_tile_as_its_32_bit_words_and_undoes_unpack_b32():
    """A 128 x 128 16-bit tile of two boxes of 64 columns (Sw<3,3,3> on elements) is 128 x 64 words of boxes of
    32 (Sw<3,2,3>); a flat word layout unpacked to bytes comes back; a mode across parts of words is refused."""
    from mlir_tile.algebra.layout import Swizzle
    from mlir_tile.algebra.words import unpack_b32, words_of

    tile = Layout((128, (64, 2)), (64, (1, 128 * 64)), Swizzle(3, 3, 3))
    assert words_of(tile, 2) == Layout((128, (32, 2)), (32, (1, 128 * 32)), Swizzle(3, 2, 3))
    words = Layout((64, 32), (32, 1), Swizzle(3, 2, 3))
    assert words_of(unpack_b32(words, 4), 4) == words
    for junk in (Layout((4, 6), (6, 1)), Layout((4, 8), (1, 4)), Layout((8, 8), (8, 1), Swizzle(3, 1, 3))):
        with pytest.raises(ValueError, match="words_of"):
            words_of(junk, 4)
