"""CuTe's layout algebra against pycute (the pure-Python CuTe shipped in the nvidia-cutlass wheel): on random
layouts (nested modes, gaps, zero strides), every operation gives the same shape and the same value at every
index, and raises ValueError exactly where pycute's definition does not hold (an assertion or an undefined
division there). ALGEBRA_EXAMPLES sets the examples per operation (CI: 200; a long run: 5000)."""
import os

import pycute
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mlir_tile.algebra import operations, words
from mlir_tile.algebra.layout import Layout

EXAMPLES = int(os.environ.get("ALGEBRA_EXAMPLES", "200"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
EXTENTS = st.sampled_from([1, 2, 2, 3, 4, 4, 6, 8])
STRIDES = st.sampled_from([0, 1, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64])


@st.composite
def shapes_and_strides(draw, depth=0):
    """A mode: an extent, or (at most two levels deep) a tuple of modes."""
    if depth < 2 and draw(st.integers(0, 3)) == 0:
        parts = draw(st.lists(shapes_and_strides(depth + 1), min_size=1, max_size=3))
        return tuple(p[0] for p in parts), tuple(p[1] for p in parts)
    return draw(EXTENTS), draw(STRIDES)


@st.composite
def layouts(draw, max_rank=3):
    """A layout of 1 to `max_rank` modes; a third of them compact (column-major, then permuted), the rest
    with random strides (gaps, zero strides, overlaps)."""
    modes = draw(st.lists(shapes_and_strides(), min_size=1, max_size=max_rank))
    shape, stride = tuple(m[0] for m in modes), tuple(m[1] for m in modes)
    if draw(st.integers(0, 2)) == 0:
        leaves = _flat(shape)
        order = draw(st.permutations(range(len(leaves))))
        compact, running = [0] * len(leaves), 1
        for position in order:
            compact[position], running = running, running * leaves[position]
        stride = _unflatten(shape, iter(compact))
    return Layout(shape, stride)


def _flat(t):
    return [x for part in t for x in _flat(part)] if isinstance(t, tuple) else [t]


def _unflatten(template, values):
    return tuple(_unflatten(t, values) for t in template) if isinstance(template, tuple) else next(values)


def to_pycute(layout: Layout):
    if layout.rank == 1 and not isinstance(layout.shape[0], tuple):
        return pycute.Layout(layout.shape[0], layout.stride[0])
    return pycute.Layout(layout.shape, layout.stride)


def from_pycute(layout) -> Layout:
    if isinstance(layout.shape, tuple):
        return Layout(layout.shape, layout.stride)
    return Layout((layout.shape,), (layout.stride,))


def values(layout: Layout) -> list[int]:
    """The layout's offset at every 1-D index (colexicographic over its modes, as CuTe indexes)."""
    found = []
    for index in range(layout.size):
        coordinate = []
        for size in layout.sizes:
            coordinate.append(index % size)
            index //= size
        found.append(layout.offset(*coordinate))
    return found


def agree(operation, *arguments, oracle_arguments=None, needs_complement_of=None):
    """Ours and pycute's operation on the same arguments: both undefined, or the same layout. pycute does not
    check everything CuTe requires: a result with an extent of 0 (a complement of a layout that is not
    injective) is no layout, and an operation built on such a complement is undefined too."""
    oracle_arguments = oracle_arguments or tuple(to_pycute(a) if isinstance(a, Layout) else a for a in arguments)
    try:
        if needs_complement_of is not None:
            from_pycute(pycute.complement(to_pycute(needs_complement_of)))
        expected = getattr(pycute, operation)(*oracle_arguments)
        from_pycute(expected)
    except (AssertionError, ZeroDivisionError, ValueError):
        event("undefined in CuTe")
        with pytest.raises(ValueError):
            getattr(operations, operation)(*arguments)
        return
    event("defined")
    result = getattr(operations, operation)(*arguments)
    expected = from_pycute(expected)
    assert result == expected, (str(result), str(expected))
    if result.size <= 4096:
        assert values(result) == values(expected)


@SETTINGS
@given(layouts(max_rank=4))
def test_coalesce(a):
    agree("coalesce", a)
    result = operations.coalesce(a)
    if a.size <= 4096:
        assert values(result) == values(a)  # the same function


@SETTINGS
@given(layouts(), layouts())
def test_composition(a, b):
    agree("composition", a, b)


@SETTINGS
@given(layouts(), st.integers(1, 256))
def test_complement(a, cotarget):
    agree("complement", a, cotarget)


@SETTINGS
@given(layouts())
def test_right_inverse(a):
    agree("right_inverse", a)


@SETTINGS
@given(layouts())
def test_left_inverse(a):
    agree("left_inverse", a, needs_complement_of=a)


@SETTINGS
@given(layouts(), layouts(max_rank=1))
def test_logical_divide(a, tiler):
    agree("logical_divide", a, tiler)


@SETTINGS
@given(layouts(max_rank=3), st.lists(layouts(max_rank=1), min_size=1, max_size=3))
def test_zipped_and_tiled_divide_by_mode(a, tilers):
    tilers = tuple(tilers[:a.rank])
    oracle = (to_pycute(a), tuple(to_pycute(t) for t in tilers))
    agree("zipped_divide", a, tilers, oracle_arguments=oracle)
    agree("tiled_divide", a, tilers, oracle_arguments=oracle)
    agree("logical_divide", a, tilers, oracle_arguments=oracle)


@SETTINGS
@given(layouts(), layouts())
def test_logical_product(a, b):
    agree("logical_product", a, b, needs_complement_of=a)


@SETTINGS
@given(layouts(max_rank=3), st.lists(layouts(max_rank=1), min_size=1, max_size=3))
def test_zipped_and_tiled_product_by_mode(a, tilers):
    tilers = tuple(tilers[:a.rank])
    oracle = (to_pycute(a), tuple(to_pycute(t) for t in tilers))
    for operation in ("zipped_product", "tiled_product"):
        try:  # each tiled mode's product takes that mode's complement
            for mode in operations._modes(a)[:len(tilers)]:
                from_pycute(pycute.complement(to_pycute(mode)))
        except (AssertionError, ZeroDivisionError, ValueError):
            with pytest.raises(ValueError):
                getattr(operations, operation)(a, tilers)
            continue
        agree(operation, a, tilers, oracle_arguments=oracle)


def _zip_by_definition(block, tiler, block_first):
    """CuTe's blocked/raked_product from its definition, on pycute's primitives: both padded to rank R,
    their logical_product, then mode i of the result is (block_i, tiler_i) (blocked) or (tiler_i, block_i)."""
    rank = max(len(block), len(tiler))
    padded = [pycute.make_layout(*[x[i] for i in range(len(x))], *[pycute.Layout(1, 0)] * (rank - len(x)))
              for x in (block, tiler)]
    product = pycute.logical_product(*padded)
    inner, outer = product[0], product[1]
    pairs = [(inner[i], outer[i]) for i in range(rank)]
    return pycute.make_layout(*[pycute.make_layout(*(p if block_first else p[::-1])) for p in pairs])


@SETTINGS
@given(layouts(max_rank=2), layouts(max_rank=2))
def test_blocked_and_raked_product(block, tiler):
    for operation, block_first in (("blocked_product", True), ("raked_product", False)):
        try:
            from_pycute(pycute.complement(to_pycute(block)))
            expected = from_pycute(_zip_by_definition(to_pycute(block), to_pycute(tiler), block_first))
        except (AssertionError, ZeroDivisionError, ValueError):
            with pytest.raises(ValueError):
                getattr(operations, operation)(block, tiler)
            continue
        result = getattr(operations, operation)(block, tiler)
        assert result == expected and result.rank == max(block.rank, tiler.rank)


def test_cute_documentation_examples():
    parse = Layout.parse
    assert str(operations.composition(parse("(6,2):(8,2)"), parse("(4,3):(3,1)"))) == "((2,2),3):((24,2),8)"
    assert str(operations.complement(parse("(2,2):(1,6)"), 24)) == "(3,2):(2,12)"
    assert str(operations.logical_divide(parse("(4,2,3):(2,1,8)"), parse("4:2"))) == "((2,2),(2,3)):((4,1),(2,8))"
    assert str(operations.logical_product(parse("(2,2):(4,1)"), parse("6:1"))) == "((2,2),(2,3)):((4,1),(2,8))"
    assert str(operations.blocked_product(parse("(2,5):(5,1)"), parse("(3,4):(1,3)"))) == "((2,3),(5,4)):((5,10),(1,30))"
    assert str(operations.raked_product(parse("(2,5):(5,1)"), parse("(3,4):(1,3)"))) == "((3,2),(4,5)):((10,5),(30,1))"


def test_rank_one_text_is_cutes():
    assert str(Layout.parse("8:1")) == "8:1" and Layout.parse("8:1") == Layout.parse("(8):(1)")
    assert str(Layout.parse("Sw<3,2,3> o 64:1")) == "Sw<3,2,3> o 64:1"
    assert str(Layout.parse("((2,4)):((1,2))")) == "((2,4)):((1,2))"


def test_a_swizzle_stays_outside_what_composition_and_divide_keep():
    tile = Layout.parse("Sw<3,2,3> o (8,64):(64,1)")
    band = operations.composition(tile, (None, Layout.parse("16:1")))
    assert band.swizzle == tile.swizzle and str(band) == "Sw<3,2,3> o (8,16):(64,1)"
    assert values(band) == [tile.offset(i % 8, i // 8) for i in range(8 * 16)]
    divided = operations.zipped_divide(tile, (Layout.parse("8:1"), Layout.parse("16:1")))
    assert divided.swizzle == tile.swizzle and divided.sizes == (128, 4)


@pytest.mark.parametrize("operation, arguments, message", [
    ("complement", ("Sw<3,2,3> o 64:1",), "swizzled"),
    ("logical_product", ("Sw<3,2,3> o 64:1", "4:1"), "swizzled"),
    ("composition", ("64:1", "Sw<3,2,3> o 64:1"), "swizzled"),
    ("composition", ("(4,8):(1,4@laneid)", "4:1"), "integer strides"),
    ("composition", ("(3,5):(1,4)", "2:2"), "do not divide"),
    ("complement", ("(2,2):(1,1)",), "not injective"),
])
def test_undefined_inputs_are_value_errors_that_say_why(operation, arguments, message):
    with pytest.raises(ValueError, match=message):
        getattr(operations, operation)(*[Layout.parse(a) for a in arguments])


@pytest.mark.parametrize("function", [operations.coalesce, operations.complement, operations.right_inverse, operations.left_inverse,
                                      operations.make_layout, words.unpack_b32, words.pack_b16_as_b32])
def test_the_algebra_takes_layout_text_and_refuses_what_is_no_layout(function):
    assert function(Layout.parse("(4,8):(8,1)")) == function("(4,8):(8,1)")
    for junk in (5, None, 1.5, ["(4,8):(8,1)"]):
        with pytest.raises(ValueError, match=f"{function.__name__}: takes a layout"):
            function(junk)


@pytest.mark.parametrize("function", [operations.composition, operations.logical_divide, operations.logical_product,
                                      operations.zipped_divide, operations.tiled_divide, operations.blocked_product, operations.raked_product])
def test_binary_operations_take_layout_text_on_either_side(function):
    assert function("(8,8):(1,8)", "2:1") == function(Layout.parse("(8,8):(1,8)"), Layout.parse("2:1"))
    with pytest.raises(ValueError):
        function(object(), "2:1")
