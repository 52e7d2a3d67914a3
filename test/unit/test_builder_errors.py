"""Builder misuse raises the documented errors only: BuilderError (or ContractError, a Layout ValueError), both
ValueErrors; never an MLIRError, a TypeError, an interpreter abort, or a context left entered."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlir import ir

from mlir_tile.builder import BuilderError, Kernel, matrix_transfer
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
                             "offset", "transfer"]),
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
            "transfer": lambda: matrix_transfer(first, registers, second, dst_layout=S[(4, 8, 4):(1, 1, 1)],
                                                src_layout="(4,8,4):(32,4,1)"),
        }
        try:
            actions[call]()
        except ValueError:
            pass


def test_an_impossible_block_is_a_builder_error():
    with pytest.raises(BuilderError, match=r"block \(2147483648, 1, 1\) exceeds the largest block"):
        Kernel("k", block=(2**31, 1, 1))
