"""Index and i1 values with Python's operators (`builder.integers`): each operator one arith op on its
operands in the order written, ints as index constants, the builder's calls giving them, and a clear
BuilderError for what they do not take."""
import re

import pytest

from mlir_tile.builder import BuilderError, Kernel
from mlir_tile.builder.integers import Bool, Int


def _ops(module) -> list:
    """The arith ops of the kernel in order."""
    return re.findall(r"= arith\.(\w+)", str(module))


def test_each_operator_is_one_arith_op_in_the_order_written():
    with Kernel("integers", ["index"], block=(128, 1, 1)) as k:
        n = k.as_index(k.arguments[0])
        thread = k.thread_id()
        assert isinstance(thread, Int) and isinstance(n, Int)
        total = (thread + 3) * n // 4 % n - 1
        flipped = 7 - thread
        inside = k.compare("ult", total, flipped)
        assert isinstance(total, Int) and isinstance(inside, Bool)
        both = ~inside & k.compare("ne", thread, 0) | k.compare("eq", n, 1)
        k.select(both, total, 0)
        k.maximum(total, flipped, signed=True)
        k.as_index(k.as_i32(total), unsigned_from="i32")
        with k.loop(0, n) as i:
            assert isinstance(i, Int)
            i * 2
        assert isinstance(n >> 2 & thread, Int) and isinstance(3 & n, Int)
    arithmetic = [op for op in _ops(k.module) if op != "constant"]
    assert arithmetic[:6] == ["addi", "muli", "divui", "remui", "subi", "subi"]
    assert arithmetic[6:] == ["cmpi", "xori", "cmpi", "andi", "cmpi", "ori", "select", "maxsi", "index_castui",
                              "index_castui", "muli", "shrui", "andi", "andi"]
    assert re.search(r"%\w+ = arith\.subi %c7\w*, %", str(k.module)), str(k.module)  # (7 - thread: 7 first)


@pytest.mark.parametrize("bad, message", [(lambda k, x: x + 1.5, "index values and 64-bit ints"),
                                          (lambda k, x: x * 2 ** 70, "index values and 64-bit ints"),
                                          (lambda k, x: k.compare("eq", x, 0) & x, "i1 values and bools"),
                                          (lambda k, x: k.select(x, x, 0), "condition is an i1")])
def test_what_the_operators_do_not_take_is_a_builder_error(bad, message):
    with Kernel("integers", [], block=(32, 1, 1)) as k:
        with pytest.raises(BuilderError, match=message):
            bad(k, k.thread_id())
