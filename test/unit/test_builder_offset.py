"""k.offset emits the offset of a coordinate of any memory layout (nested modes, a swizzle) as index
arithmetic; interpreted thread by thread, it equals the layout's own offset for random layouts and random
mixes of compile-time and thread-dependent coordinates. Misuse is a BuilderError."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlir import ir
from mlir.dialects import arith

from mlir_tile.builder import BuilderError, Kernel
from mlir_tile.algebra.layout import Layout, Swizzle

_ARITH = {"arith.addi": lambda a, b: a + b, "arith.muli": lambda a, b: a * b, "arith.divui": lambda a, b: a // b,
          "arith.remui": lambda a, b: a % b, "arith.shrui": lambda a, b: a >> b, "arith.andi": lambda a, b: a & b,
          "arith.xori": lambda a, b: a ^ b, "arith.shli": lambda a, b: a << b}


def evaluate(function: ir.Operation, thread: int) -> int:
    """The value the function's last memref.store stores, for thread `thread` (straight-line index code)."""
    values, stored = {}, None
    for op in (o.operation for o in function.regions[0].blocks[0].operations):
        operands = [values.get(v) for v in op.operands]
        if op.name == "gpu.thread_id":
            values[op.result] = thread
        elif op.name == "arith.constant":
            values[op.result] = ir.IntegerAttr(op.attributes["value"]).value
        elif op.name in _ARITH:
            values[op.result] = _ARITH[op.name](*operands)
        elif op.name == "arith.index_cast":
            values[op.result] = operands[0]
        elif op.name == "memref.store":
            stored = operands[0]
    return stored


@st.composite
def memory_layouts(draw):
    modes = []
    for _ in range(draw(st.integers(1, 3))):
        leaves = draw(st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 8]), st.sampled_from([0, 1, 2, 4, 8, 12, 32, 64])),
                               min_size=1, max_size=3))
        modes.append(leaves[0] if len(leaves) == 1 else (tuple(e for e, _ in leaves), tuple(s for _, s in leaves)))
    swizzle = draw(st.sampled_from([None, Swizzle(1, 2, 3), Swizzle(2, 2, 3), Swizzle(3, 2, 3), Swizzle(2, 4, 3)]))
    return Layout(tuple(m[0] for m in modes), tuple(m[1] for m in modes), swizzle)


def check(layout: Layout, dynamic: list[bool], constants: list[int]) -> None:
    """k.offset of `layout` with the dynamic coordinates thread % size, interpreted for several threads."""
    with Kernel("k", ["memref<1xindex>"], context=ir.Context()) as k:
        (out,) = k.arguments
        thread = k.thread_id()
        coordinates = [arith.remui(thread, k.index(size)) if is_dynamic else constant
                       for size, is_dynamic, constant in zip(layout.sizes, dynamic, constants)]
        k.store(k.offset(layout, coordinates), out, [0])
    function = next(op for op in k.module.operation.regions[0].blocks[0].operations[0].regions[0].blocks[0].operations
                    if op.operation.name == "gpu.func").operation
    for thread in range(0, 64, 7):
        coordinate = [thread % size if is_dynamic else constant
                      for size, is_dynamic, constant in zip(layout.sizes, dynamic, constants)]
        assert evaluate(function, thread) == layout.offset(*coordinate), (str(layout), coordinate)


@settings(max_examples=200, deadline=None)
@given(layout=memory_layouts(), data=st.data())
def test_the_offset_code_computes_the_layouts_offset(layout, data):
    dynamic = [data.draw(st.booleans()) for _ in range(layout.rank)]
    check(layout, dynamic, [data.draw(st.integers(0, size - 1)) for size in layout.sizes])


def test_a_constant_above_each_leaf_but_not_above_their_sum_is_added_not_xored():
    # the thread-dependent part reaches 8 + 24 = 32, which the constant 32 shares a bit with (found in CI)
    check(Layout((2, 1, (2, 3)), (32, 0, (8, 12)), Swizzle(1, 2, 3)), [False, False, True], [1, 0, 0])


def test_compile_time_coordinates_fold_to_one_constant():
    with Kernel("k", ["memref<1xindex>"], context=ir.Context()) as k:
        value = k.offset("Sw<3,2,3> o (8,(2,2),8,4):(8,(256,4),32,1)", [3, 2, 5, 1])
        assert value.owner.name == "arith.constant"
        layout = Layout.parse("Sw<3,2,3> o (8,(2,2),8,4):(8,(256,4),32,1)")
        assert ir.IntegerAttr(value.owner.attributes["value"]).value == layout.offset(3, 2, 5, 1)


@pytest.mark.parametrize("layout, coordinates, message", [
    ("(4,8):(1,4@laneid)", [0, 0], "thread strides"),
    ("(4,8):(8,1)", [0], "2 modes"),
    ("(4,8):(8,1)", [4, 0], "outside its size"),
    ("(4,8):(8", [0, 0], "malformed"),
])
def test_misuse_is_a_builder_error(layout, coordinates, message):
    with Kernel("k", [], context=ir.Context()) as k:
        with pytest.raises(BuilderError, match=message):
            k.offset(layout, coordinates)
