"""Builder misuse raises the documented errors only: BuilderError (or ContractError, a Layout ValueError), both
ValueErrors; never an MLIRError, a TypeError, an interpreter abort, or a context left entered."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlir import ir

from mlir_tile.builder import BuilderError, Kernel, transfer
from mlir_tile.layout import S

junk = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=False),
                 st.text(max_size=12), st.sampled_from(["", " ", "i32", "f17", "memref<4xi32", "!llvm.ptr", "sm_90"]))


@settings(max_examples=150, deadline=None)
@given(name=junk, block=st.one_of(junk, st.tuples(junk, junk, junk)), chip=junk, arguments=st.lists(junk, max_size=2))
def test_kernel_misuse_raises_value_errors_and_leaves_no_context(name, block, chip, arguments):
    try:
        with Kernel(name, arguments, block=block, chip=chip, context=ir.Context()):
            pass
    except ValueError:
        pass
    assert ir.Context.current is None


@settings(max_examples=150, deadline=None)
@given(call=st.sampled_from(["shared", "registers", "index", "constant", "thread_id", "load", "store", "loop",
                             "offset", "transfer", "mma16", "mma32"]),
       first=junk, second=junk)
def test_builder_method_misuse_raises_value_errors(call, first, second):
    with Kernel("k", [], context=ir.Context()) as k:
        registers = k.registers(4)
        actions = {
            "shared": lambda: k.shared(first, second),
            "registers": lambda: k.registers(first, second),
            "index": lambda: k.index(first),
            "constant": lambda: k.constant(first, second),
            "thread_id": lambda: k.thread_id(first),
            "load": lambda: k.load(registers, [first]),
            "store": lambda: k.store(first, registers, [second]),
            "loop": lambda: k.loop(first, second).__enter__(),
            "offset": lambda: k.offset(first, [second]),
            "transfer": lambda: transfer(first, registers, second, dst_layout=S[(4, 8, 4):(1, 1, 1)],
                                                src_layout="(4,8,4):(32,4,1)"),
            "mma16": lambda: k.mma_m16n8k16(registers, [0, 1, 2, first], registers, [0, 1], registers, [0, 1, 2, 3],
                                            element=second),
            "mma32": lambda: k.mma_m16n8k32(registers, [0, 1, 2, 3], registers, [first, 1], registers, [0, 1, 2, 3],
                                            element=second),
        }
        try:
            actions[call]()
        except ValueError:
            pass


def test_an_impossible_block_is_a_builder_error():
    with pytest.raises(BuilderError, match=r"block \(2147483648, 1, 1\) exceeds the largest block"):
        Kernel("k", block=(2**31, 1, 1))


@pytest.mark.parametrize("element, accumulator, message", [
    ("s8", "f32", r"the accumulator registers hold 32-bit words of i32, got f32"),
    ("f16", "i32", r"the accumulator registers hold 32-bit words of f32, got i32"),
    ("s4", "i32", r"element s8 or u8"),
])
def test_mma_operands_of_the_wrong_kind_are_builder_errors(element, accumulator, message):
    with Kernel("k", [], context=ir.Context()) as k:
        words, accumulators = k.registers(4), k.registers(4, accumulator)
        mma = k.mma_m16n8k16 if element == "f16" else k.mma_m16n8k32
        with pytest.raises(BuilderError, match=message):
            mma(words, [0, 1, 2, 3], words, [0, 1], accumulators, [0, 1, 2, 3], element=element)
