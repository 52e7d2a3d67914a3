"""Epilogues: what a GEMM does to each fp32 accumulator, with its place in C, before it is rounded and stored.

An `Epilogue` is a Python function of (value, at) -> value, where `value` is the accumulator (an `F32`, which
takes Python arithmetic: `+ - * /` with other `F32`s or numbers, `maximum`, `absolute`, `exp`, `tanh`,
`sigmoid`) and
`at` says where it lies: `at.row`, `at.column` (index values of C's element) and `at.load(name)`, the element
of one of the epilogue's operands there (an extra kernel argument: a per-column vector such as a bias, a
per-row vector, an M x N matrix such as a residual, or an fp32 scalar), read as fp32. Loads are clamped into
the matrix: the accumulators of an edge tile past M or N are computed but never stored. The ready-made ones
(`bias`, `relu`, `gelu_tanh`, `silu`, `residual_add`) compose with `then`:

    fused = bias.then(gelu_tanh)                                  # gelu(x @ w.T + b)

    @epilogue(Operand("scale", "scalar"))
    def scaled_silu(x, at):
        return x * sigmoid(x) * at.load("scale")

The builder-side half (`apply`) needs MLIR; defining epilogues does not.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
from dataclasses import dataclass
from typing import Callable

KINDS = ("column", "row", "matrix", "scalar", "integer", "head", "group_column")  # an operand's shape: N elements, M
# elements, M x N, one fp32, one integer (what `Site.equals` compares, a `Choice` selects by); "head", one fp32 a
# query head, is attention variants' alone; "group_column", [E, N], a grouped GEMM's N a group (an expert's bias)
LOG2_E = 1.4426950408889634


@dataclass(frozen=True)
class Operand:
    """An extra kernel argument an epilogue reads: `kind` one of KINDS; vectors and matrices are C's element
    type (fp16 or bf16), contiguous; a scalar is fp32, an integer 64-bit."""
    name: str
    kind: str

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name.isidentifier()):
            raise ValueError(f"epilogue operand: the name is an identifier, got {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"epilogue operand {self.name!r}: kind is one of {', '.join(KINDS)}, got {self.kind!r}")


@dataclass(frozen=True)
class Epilogue:
    """`function(value, at)` over each accumulator, reading `operands`; `name` names the kernels built with it
    (with a fingerprint of the function's code, so that an edited epilogue is a new kernel)."""
    name: str
    function: Callable
    operands: tuple[Operand, ...] = ()

    def __post_init__(self):
        names = [operand.name for operand in self.operands]
        if len(set(names)) != len(names):
            raise ValueError(f"epilogue {self.name!r}: operand names repeat: {names}")
        if not callable(self.function):
            raise ValueError(f"epilogue {self.name!r}: the function is a callable of (value, at)")
        if any(operand.kind == "head" for operand in self.operands):
            raise ValueError(f"epilogue {self.name!r}: a GEMM has no heads (operands of kind 'head' are attention "
                             f"variants')")

    def then(self, other: "Epilogue") -> "Epilogue":
        """This epilogue, then `other` on its result."""
        def both(value, at):
            return other.function(self.function(value, at), at)

        return Epilogue(f"{self.name}+{other.name}", both, self.operands + other.operands)

    @functools.cached_property  # (a launcher names its kernel by it on every new shape)
    def fingerprint(self) -> str:
        """A digest of the name, the operands and the code of the function and of what it closes over."""
        return code_digest(repr((self.name, self.operands)), self.function)

    def apply(self, k, value, row, column, m, n, arguments, operands: tuple | None = None, group=None):
        """The epilogue on one accumulator in kernel `k`: `value` an f32 ir.Value at (row, column) of an m x n C
        (index values); `arguments` the kernel arguments of `operands` (by default this epilogue's; a
        `Choice`'s arm reads the Choice's), in order; `group` a grouped GEMM's tile's group (an index value,
        which "group_column" operands read by). Returns an f32 ir.Value."""
        operands = self.operands if operands is None else operands
        at = Site(k, row, column, m, n, dict(zip((o.name for o in operands), zip(operands, arguments))), group)
        result = self.function(F32(k, value), at)
        if isinstance(result, (int, float)):
            result = F32.constant(k, result)
        if not isinstance(result, F32):
            raise ValueError(f"epilogue {self.name!r}: the function returns an F32 (or a number), got {result!r}")
        return result.value


@dataclass(frozen=True)
class Choice:
    """One of `arms` (epilogues), chosen at launch by the integer operand `selector` (arm i where it is i): the
    kernel branches once per thread around its whole epilogue, not once per accumulator, so that one kernel
    serves several epilogues at the cost of its code size. The arms read `operands` (the selector among them)."""
    name: str
    selector: str
    arms: tuple[Epilogue, ...]
    operands: tuple[Operand, ...]

    def __post_init__(self):
        kinds = {o.name: o.kind for o in self.operands}
        if kinds.get(self.selector) != "integer":
            raise ValueError(f"choice {self.name!r}: the selector {self.selector!r} is one of its integer operands")
        if not self.arms:
            raise ValueError(f"choice {self.name!r}: it has no arms")

    @functools.cached_property
    def fingerprint(self) -> str:
        return hashlib.sha256(repr((self.name, self.selector, self.operands, [a.fingerprint for a in self.arms]))
                              .encode()).hexdigest()[:16]


def code_digest(text: str, *functions: Callable | None) -> str:
    """A digest of `text` and of the code of `functions` (None: none) and of what they close over."""
    digest = hashlib.sha256(text.encode())
    for function in functions:
        if function is not None:
            _digest_function(digest, function, depth=0)
    return digest.hexdigest()[:16]


def _digest_function(digest, function, depth: int) -> None:
    """The function's source text and what it closes over: the same in the wheel's build and in the user's
    install, whatever the files' places and the Python version (bytecode differs between versions)."""
    code = getattr(function, "__code__", None)
    if code is None or depth > 8:
        digest.update(repr(function).encode())
        return
    try:
        digest.update(inspect.getsource(function).encode())
    except (OSError, TypeError):  # defined where no source is kept (an interactive session)
        digest.update(code.co_code + repr(code.co_consts).encode())
    for cell in function.__closure__ or ():
        _digest_value(digest, cell.cell_contents, depth + 1)


def _digest_value(digest, contents, depth: int) -> None:
    """What a function closes over: an epilogue (or a variant) by its fingerprint, a function by its code, a list
    or tuple element by element (its repr names functions by their addresses, which differ between processes:
    a combined variant's kernels were named anew in each), anything else by its repr."""
    if isinstance(getattr(contents, "fingerprint", None), str):
        digest.update(contents.fingerprint.encode())
    elif callable(contents):
        _digest_function(digest, contents, depth)
    elif isinstance(contents, (list, tuple)):
        digest.update(f"{type(contents).__name__}{len(contents)}".encode())
        for element in contents:
            _digest_value(digest, element, depth)
    else:
        digest.update(repr(contents).encode())


def epilogue(*operands: Operand, name: str | None = None) -> Callable[[Callable], Epilogue]:
    """A decorator: the function of (value, at) as an Epilogue reading `operands`."""
    def make(function: Callable) -> Epilogue:
        return Epilogue(name or function.__name__, function, tuple(operands))

    return make


class Site:
    """Where an accumulator lies: `row`, `column` (index ir.Values) and `load(name)`, its operand's element
    there as an F32."""

    def __init__(self, k, row, column, m, n, operands: dict, group=None):
        self.k, self.row, self.column, self.m, self.n, self._operands = k, row, column, m, n, operands
        self.group = group

    def _operand(self, name: str, integer: bool):
        if name not in self._operands:
            raise ValueError(f"epilogue: no operand {name!r}; it has {', '.join(self._operands) or 'none'} (declare "
                             f"it with Operand({name!r}, kind))")
        operand, argument = self._operands[name]
        if (operand.kind == "integer") != integer:
            raise ValueError(f"epilogue: operand {name!r} is of kind {operand.kind}: "
                             f"{'load' if integer else 'equals'} takes the others")
        return operand, argument

    def equals(self, name: str, value: int):
        """Whether the integer operand `name` is `value` (an i1, for `load`'s `where`)."""
        return self.k.compare("eq", self._operand(name, integer=True)[1], value)

    def load(self, name: str, where=None) -> "F32":
        """Operand `name`'s element at this accumulator, as fp32. `where` (an i1 from `equals`): only where it
        holds, else 0, without a branch: the load reads element 0 then, so any array of one element or more
        may stand in for an operand that is not there."""
        operand, argument = self._operand(name, integer=False)
        if operand.kind == "scalar":
            return F32(self.k, argument)
        from mlir import ir
        from mlir.dialects import arith

        k = self.k
        row, column = k.identity_tensor((self.m, self.n)).clamped((self.row, self.column))  # clamped into C
        if operand.kind == "group_column":
            if self.group is None:
                raise ValueError(f"epilogue: operand {name!r} is of kind group_column, a grouped GEMM's (its N a "
                                 f"group)")
            tensor, at = (self.k.as_index(self.group) + 1, self.n), (self.group, column)
        else:
            tensor, at = {"column": ((self.n,), (column,)), "row": ((self.m,), (row,)),
                          "matrix": ((self.m, self.n), (row, column))}[operand.kind]
        value = arith.extf(ir.F32Type.get(), k.tensor(argument, tensor).load(at, where=where))
        return F32(k, value if where is None else arith.select(where, value, k.constant(0.0, "f32")))


class F32:
    """An fp32 value of the kernel being built, with Python's arithmetic; `fast`: its operations (and theirs on
    it) may be reassociated and contracted into FMAs (LLVM's fast-math flags; an attention variant's scores,
    whose scale is then folded into the step's constants: softcap's five operations a score became three)."""

    def __init__(self, k, value, fast: bool = False):
        self.k, self.value, self.fast = k, value, fast

    @staticmethod
    def constant(k, number: float) -> "F32":
        return F32(k, k.constant(float(number), "f32"))

    def _other(self, other) -> "F32":
        if isinstance(other, F32):
            return other
        if isinstance(other, (int, float)):
            return F32.constant(self.k, other)
        raise TypeError(f"epilogue arithmetic takes F32 values and numbers, got {other!r}")

    def _binary(self, operation: str, other, reverse: bool = False) -> "F32":
        from mlir.dialects import arith

        a, b = self, self._other(other)
        if reverse:
            a, b = b, a
        if not (a.fast or b.fast):
            return F32(self.k, getattr(arith, operation)(a.value, b.value))
        return F32(self.k, getattr(arith, operation)(a.value, b.value, fastmath=arith.FastMathFlags.fast), fast=True)

    def __add__(self, other): return self._binary("addf", other)
    def __radd__(self, other): return self._binary("addf", other, True)
    def __sub__(self, other): return self._binary("subf", other)
    def __rsub__(self, other): return self._binary("subf", other, True)
    def __mul__(self, other): return self._binary("mulf", other)
    def __rmul__(self, other): return self._binary("mulf", other, True)
    def __truediv__(self, other): return self._binary("divf", other)
    def __rtruediv__(self, other): return self._binary("divf", other, True)
    def __neg__(self): return self._binary("subf", 0.0, True)


def maximum(a: F32, b) -> F32:
    return a._binary("maximumf", b)


def minimum(a: F32, b) -> F32:
    return a._binary("minimumf", b)


def absolute(x: F32) -> F32:
    """|x|: `abs.f32`, one instruction (`maximum(x, -x)` is several: maximumf keeps NaNs)."""
    from mlir.dialects import math as math_dialect

    return F32(x.k, math_dialect.absf(x.value))


def exp2(x: F32) -> F32:
    """2^x: `ex2.approx.ftz.f32` (2 ulp; what an epilogue rounds to 16 bits anyway)."""
    from mlir import ir
    from mlir.dialects import llvm

    return F32(x.k, llvm.call_intrinsic(ir.F32Type.get(), "llvm.nvvm.ex2.approx.ftz.f", [x.value], [], []))


def exp(x: F32) -> F32:
    return exp2(x * LOG2_E)


def reciprocal(x: F32) -> F32:
    """1 / x: `rcp.approx.ftz.f32` (1 ulp; 0 for infinity), where the IEEE division is some 20 instructions."""
    from mlir import ir
    from mlir.dialects import llvm

    return F32(x.k, llvm.call_intrinsic(ir.F32Type.get(), "llvm.nvvm.rcp.approx.ftz.f", [x.value], [], []))


def sigmoid(x: F32) -> F32:
    """1 / (1 + e^-x): 0 where e^-x overflows, 1 where it underflows."""
    return reciprocal(1.0 + exp(-x))


def tanh(x: F32) -> F32:
    """`tanh.approx.f32`: one MUFU instruction (relative error about 2^-11), where 2 sigmoid(2x) - 1 is an exp2 and
    a reciprocal (softcap's scores ran at 0.25x the plain kernel's with those and an IEEE division each)."""
    from mlir import ir
    from mlir.dialects import llvm

    return F32(x.k, llvm.inline_asm(ir.F32Type.get(), [x.value], "tanh.approx.f32 $0, $1;", "=f,f"))


SQRT_2_OVER_PI = 0.7978845608028654

bias = Epilogue("bias", lambda x, at: x + at.load("bias"), (Operand("bias", "column"),))
relu = Epilogue("relu", lambda x, at: maximum(x, 0.0))
# torch's gelu(approximate="tanh"): x (1 + tanh(u)) / 2 = x sigmoid(2u)
gelu_tanh = Epilogue("gelu_tanh", lambda x, at: x * sigmoid(2.0 * SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
silu = Epilogue("silu", lambda x, at: x * sigmoid(x))
residual_add = Epilogue("residual_add", lambda x, at: x + at.load("residual"), (Operand("residual", "matrix"),))
# each row times its weight: a mixture of experts' router weights on its experts' outputs (`grouped_mm`)
row_scale = Epilogue("row_scale", lambda x, at: x * at.load("weights"), (Operand("weights", "row"),))
# each expert's own bias [E, N] (`grouped_mm`)
expert_bias = Epilogue("expert_bias", lambda x, at: x + at.load("bias"), (Operand("bias", "group_column"),))
ACTIVATIONS = {"relu": relu, "gelu_tanh": gelu_tanh, "silu": silu}


@functools.lru_cache(maxsize=None)  # (one Epilogue per combination: a launcher's plans are keyed by it)
def chain(bias_: bool = False, activation: str | None = None, residual: bool = False) -> Epilogue | None:
    """The ready-made epilogues in `matmul`'s order, as one kernel's: + bias, then the activation, then
    + residual (None: none of them); the same object for the same parts (`then` makes a new function, which
    an epilogue's equality compares)."""
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation is one of {', '.join(ACTIVATIONS)} or None, got {activation!r}")
    parts = [e for e, used in ((bias, bias_), (ACTIVATIONS.get(activation), activation), (residual_add, residual))
             if used]
    combined = None
    for part in parts:
        combined = part if combined is None else combined.then(part)
    return combined


CODES = {None: 0, **{name: code for code, name in enumerate(ACTIVATIONS, 1)}}  # `selectable`'s activation codes


SELECTABLE_OPERANDS = (Operand("bias", "column"), Operand("residual", "matrix"), Operand("has_bias", "integer"),
                       Operand("arm", "integer"))


def _arm(activation: Epilogue | None, residual: bool) -> Epilogue:
    """+ bias where has_bias is 1 (a load without a branch), `activation`, + residual if `residual`."""
    def arm(x, at):
        x = x + at.load("bias", where=at.equals("has_bias", 1))
        x = x if activation is None else activation.function(x, at)
        return x + at.load("residual") if residual else x

    return Epilogue(f"selectable_{activation.name if activation else 'none'}{'_residual' if residual else ''}", arm)


# Every `chain` in one kernel, chosen at launch: arm `CODES[activation] + len(CODES) * residual` (one branch a
# thread, around the whole epilogue), + bias where has_bias is 1 (the bias not there is read at element 0 and
# discarded: any array of one element or more stands in). The residual has arms of its own: loaded without a
# branch, the scheduler hoists its loads and the 128 x 256 tile spills. The kernels the wheel ships take it,
# so that a runtime-only install runs every ready-made epilogue.
selectable = Choice("selectable", "arm", tuple(_arm(ACTIVATIONS.get(name), residual)
                                             for residual in (False, True) for name in CODES), SELECTABLE_OPERANDS)


def selection(bias_=None, activation: str | None = None, residual=None, placeholder=None) -> tuple:
    """`selectable`'s operands for a bias and a residual (tensors or None: `placeholder`, or the launcher's
    stand-in, passed in their place) and an activation's name."""
    if activation not in CODES:
        raise ValueError(f"activation is one of {', '.join(ACTIVATIONS)} or None, got {activation!r}")
    return (placeholder if bias_ is None else bias_, placeholder if residual is None else residual,
            int(bias_ is not None), CODES[activation] + len(CODES) * (residual is not None))


def arranged(chosen: "Epilogue | Choice", tensors: list, numbers: list) -> list:
    """The operands of `chosen` in its order, from its array operands (`tensors`, in order) and its numbers
    (`numbers`, in order: scalars, and integers given back as ints), as a torch operator's schema carries them."""
    is_number = [operand.kind in ("scalar", "integer") for operand in chosen.operands]
    if (len(tensors), len(numbers)) != (is_number.count(False), is_number.count(True)):
        raise ValueError(f"matmul: epilogue {chosen.name!r} takes {is_number.count(False)} tensors and "
                         f"{is_number.count(True)} numbers, got {len(tensors)} and {len(numbers)}")
    given, values = iter(tensors), iter(numbers)
    return [(int(next(values)) if operand.kind == "integer" else next(values)) if number else next(given)
            for operand, number in zip(chosen.operands, is_number)]
