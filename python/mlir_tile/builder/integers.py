"""Index and i1 values with Python's operators (CuTe DSL's Int32 and Boolean): a kernel writes `q0 + 64 *
consumer` and `loader & inside`, not `arith.addi` and `arith.andi`. Each is an `ir.Value` (any builder call
takes it), each operator one `arith` op on its operands in the order written (a Python int becomes an index
constant), so IR written either way is the same. `//` and `%` divide unsigned and `>>` shifts unsigned: a
kernel's indices, tiles and rows count up from 0; `&` is bitwise on index values (a mask), logical on i1s. The builder's calls give their index and i1 results as these (`with_operators`)."""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from mlir_tile.builder.common import BuilderError


def _index(value) -> ir.Value:
    if isinstance(value, ir.Value) and isinstance(value.type, ir.IndexType):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and -(2 ** 63) <= value < 2 ** 63:
        return arith.constant(ir.IndexType.get(), value)
    raise BuilderError(f"index arithmetic takes index values and 64-bit ints, got {value!r}")


class Int(ir.Value):
    """An index value with + - * // % >> (unsigned) and & (bitwise), each one arith op."""

    def _apply(self, operation, other, reverse: bool = False) -> "Int":
        other = _index(other)
        return Int(operation(other, self) if reverse else operation(self, other))

    def __add__(self, other): return self._apply(arith.addi, other)
    def __radd__(self, other): return self._apply(arith.addi, other, True)
    def __sub__(self, other): return self._apply(arith.subi, other)
    def __rsub__(self, other): return self._apply(arith.subi, other, True)
    def __mul__(self, other): return self._apply(arith.muli, other)
    def __rmul__(self, other): return self._apply(arith.muli, other, True)
    def __floordiv__(self, other): return self._apply(arith.divui, other)
    def __rfloordiv__(self, other): return self._apply(arith.divui, other, True)
    def __mod__(self, other): return self._apply(arith.remui, other)
    def __rmod__(self, other): return self._apply(arith.remui, other, True)
    def __rshift__(self, other): return self._apply(arith.shrui, other)
    def __and__(self, other): return self._apply(arith.andi, other)
    def __rand__(self, other): return self._apply(arith.andi, other, True)
    __hash__ = ir.Value.__hash__


class Bool(ir.Value):
    """An i1 value with & | ^ and ~ (not), each one arith op."""

    def _apply(self, operation, other, reverse: bool = False) -> "Bool":
        if isinstance(other, bool):
            other = arith.constant(ir.IntegerType.get_signless(1), int(other))
        if not isinstance(other, ir.Value) or other.type != ir.IntegerType.get_signless(1):
            raise BuilderError(f"i1 logic takes i1 values and bools, got {other!r}")
        return Bool(operation(other, self) if reverse else operation(self, other))

    def __and__(self, other): return self._apply(arith.andi, other)
    def __rand__(self, other): return self._apply(arith.andi, other, True)
    def __or__(self, other): return self._apply(arith.ori, other)
    def __ror__(self, other): return self._apply(arith.ori, other, True)
    def __xor__(self, other): return self._apply(arith.xori, other)
    def __invert__(self): return self._apply(arith.xori, True)
    __hash__ = ir.Value.__hash__


def maximum(a, b, signed: bool = False) -> Int:
    """The larger of two index values (or ints), unsigned (or signed)."""
    return Int((arith.maxsi if signed else arith.maxui)(_index(a), _index(b)))


def minimum(a, b, signed: bool = False) -> Int:
    """The smaller of two index values (or ints), unsigned (or signed)."""
    return Int((arith.minsi if signed else arith.minui)(_index(a), _index(b)))


def with_operators(value):
    """`value` as an Int (an index value) or a Bool (an i1), anything else as it is."""
    if isinstance(value, ir.Value) and not isinstance(value, (Int, Bool)):
        if isinstance(value.type, ir.IndexType):
            return Int(value)
        if value.type == ir.IntegerType.get_signless(1):
            return Bool(value)
    return value
