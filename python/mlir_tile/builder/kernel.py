"""The kernel context: a module with one gpu.func, its arguments, thread and block ids, values and control
flow (loops with loop-carried values, conditionals with results). Memory, copies and compute come from
mixins."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Sequence

from mlir import ir
from mlir.dialects import arith, gpu, scf

from mlir_tile import targets
from mlir_tile.builder.common import BuilderError, caller_location, count, identifier, parse_type
from mlir_tile.builder.compute import Compute
from mlir_tile.builder.copies import Copies
from mlir_tile.builder.memory import Memory
from mlir_tile.dialect import load_dialect

GLOBAL_ELEMENTS = 2**31 - 1  # a Global argument's static extent: every element a 32-bit index reaches


@dataclass(frozen=True)
class Global:
    """A kernel argument that is a global array of `element`s, passed as one pointer whose alignment the
    caller promises (it reaches the PTX parameter as `.ptr .align N`, and proves vector accesses): in the
    kernel a `memref<2147483647 x element>` (the bare-pointer convention needs a static shape), indexed by
    the kernel's own row and column arithmetic."""
    element: str
    alignment: int = 16

    ELEMENTS = ("f16", "bf16", "f32", "i8", "i32", "i16", "f64", "i64")


def _argument_type(spec) -> tuple[ir.Type, int | None]:
    if isinstance(spec, Global):
        if spec.element not in Global.ELEMENTS:
            raise BuilderError(f"Global: element {spec.element!r} is not one of {', '.join(Global.ELEMENTS)}")
        alignment = count(spec.alignment, "Global alignment")
        problem = "is not a power of two" if alignment & (alignment - 1) else targets.alignment_problem(alignment)
        if problem:
            raise BuilderError(f"Global alignment {spec.alignment}: {problem}")
        return ir.MemRefType.get([GLOBAL_ELEMENTS], parse_type(spec.element)), spec.alignment
    return parse_type(spec), None


class Kernel(Memory, Copies, Compute):
    """A module with one `gpu.module` holding one `gpu.func` kernel, built inside a `with` block.

    Arguments are types, their text, or `Global(element, alignment)` arrays; static memrefs and Globals are
    passed as bare pointers, scalars by value. `min_blocks_per_sm` is CUDA's `__launch_bounds__(threads,
    min_blocks)`. `fast_math` is nvcc's `--use_fast_math` for this kernel: f32 denormals flush to zero
    (`.ftz`), `exp2` is `ex2.approx.ftz.f32` and `divide` is `div.approx.ftz.f32`.

    Entering creates the module (in a new context with `tile` loaded, unless one is current) and sets the
    insertion point at the kernel's body; leaving terminates the kernel with `gpu.return`.
    """

    def __init__(
        self,
        name: str,
        arguments: Sequence = (),
        *,
        block: tuple[int, int, int] = (32, 1, 1),
        min_blocks_per_sm: int | None = None,
        fast_math: bool = False,
        chip: str = targets.DEFAULT_CHIP,
        module_name: str = "kernels",
        context: ir.Context | None = None,
    ):
        self.name = identifier(name, "kernel name")
        self.module_name = identifier(module_name, "gpu.module name")
        if not isinstance(block, (tuple, list)) or len(block) != 3:
            raise BuilderError(f"block must be (x, y, z), got {block!r}")
        self.block = tuple(count(n, "a block extent") for n in block)
        problem = targets.block_size_problem(self.block)
        if problem:
            raise BuilderError(f"block {self.block} {problem}")
        problem = targets.chip_problem(chip)
        if problem:
            raise BuilderError(f"chip {problem}")
        if not isinstance(fast_math, bool):
            raise BuilderError(f"fast_math is True or False, got {fast_math!r}")
        self.chip, self.fast_math = chip, fast_math
        self.min_blocks_per_sm = None if min_blocks_per_sm is None else count(min_blocks_per_sm, "min_blocks_per_sm")
        self._argument_specs = list(arguments)
        self.context = context or _current_context_or_new()
        load_dialect(self.context)
        self._location = caller_location(self.context)  # diagnostics on the kernel point at the Kernel(...) line
        self._scopes: list = []
        self.mbarrier_buffers: set[str] = set()  # the shared buffers `mbarriers` made and initialized

    def __enter__(self) -> "Kernel":
        self._scopes = [self.context, self._location]
        for scope in self._scopes:
            scope.__enter__()
        try:
            self._build_kernel()
        except BaseException:  # leave no context entered behind: the caller may catch and go on
            for scope in reversed(self._scopes):
                scope.__exit__(None, None, None)
            raise
        self._insertion = ir.InsertionPoint(self.body)
        self._insertion.__enter__()
        return self

    def _build_kernel(self) -> None:
        specs = [_argument_type(spec) for spec in self._argument_specs]
        types, alignments = [kind for kind, _ in specs], [alignment for _, alignment in specs]
        self.module = ir.Module.create()
        self.module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
        with ir.InsertionPoint(self.module.body):
            target = ir.Attribute.parse(f'#nvvm.target<chip = "{self.chip}">')
            self.gpu_module = gpu.GPUModuleOp(self.module_name, targets=ir.ArrayAttr.get([target]))
            self.gpu_module.bodyRegion.blocks.append()
        with ir.InsertionPoint(self.gpu_module.bodyRegion.blocks[0]):
            self.func = gpu.GPUFuncOp(
                ir.FunctionType.get(types, []), sym_name=self.name, kernel=True, known_block_size=list(self.block)
            )
        i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
        if any(alignments):
            self.func.attributes["arg_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(
                {"llvm.align": ir.IntegerAttr.get(i64, a)} if a else {}) for a in alignments])
        if self.min_blocks_per_sm:  # PTX .minnctapersm: registers are budgeted for this occupancy
            self.func.attributes["nvvm.minctasm"] = ir.IntegerAttr.get(i32, self.min_blocks_per_sm)
        if self.fast_math:  # LLVM's NVPTX backend picks the .ftz forms of f32 arithmetic for this function
            self.func.attributes["passthrough"] = ir.Attribute.parse(
                '[["denormal-fp-math-f32", "preserve-sign,preserve-sign"]]')
        self.body = self.func.body.blocks.append(*types)
        self.arguments = list(self.body.arguments)

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            gpu.ReturnOp([])
        self._insertion.__exit__(kind, value, traceback)
        for scope in reversed(self._scopes):
            scope.__exit__(kind, value, traceback)

    # ----- ids -----
    def lane_id(self) -> ir.Value:
        return gpu.lane_id()

    def thread_id(self, dimension: str = "x") -> ir.Value:
        return gpu.thread_id(_dimension(dimension, "thread_id"))

    def block_id(self, dimension: str = "x") -> ir.Value:
        return gpu.block_id(_dimension(dimension, "block_id"))

    def grid_size(self, dimension: str = "x") -> ir.Value:
        """The number of blocks in the grid along `dimension` (gpu.grid_dim, PTX %nctaid)."""
        return gpu.grid_dim(_dimension(dimension, "grid_size"))

    def block_size(self, dimension: str = "x") -> ir.Value:
        """This kernel's block extent along `dimension`, a constant (the block is fixed when built)."""
        _dimension(dimension, "block_size")
        return self.index(self.block["xyz".index(dimension)])

    def warp_id(self) -> ir.Value:
        """The warp's index in a one-dimensional block (thread_id x / 32)."""
        if self.block[1:] != (1, 1):
            raise BuilderError(f"warp_id: the block {self.block} is not one-dimensional")
        return arith.divui(self.thread_id(), self.index(32))

    # ----- values -----
    def index(self, value: int) -> ir.Value:
        if not isinstance(value, int) or isinstance(value, bool) or not -(2**63) <= value < 2**63:
            raise BuilderError(f"an index constant must be a 64-bit integer, got {value!r}")
        return arith.constant(ir.IndexType.get(), value)

    def constant(self, value: int | float, element: str = "i32") -> ir.Value:
        kind = parse_type(element)
        if isinstance(kind, ir.FloatType) and isinstance(value, (int, float)) and not isinstance(value, bool):
            return arith.constant(kind, float(value))
        if not isinstance(kind, ir.IntegerType) or not isinstance(value, int) or isinstance(value, bool):
            raise BuilderError(f"constant: an integer value of an integer type, or a number of a float type, got "
                               f"{value!r} of {element!r}")
        if kind.width == 32 and value >= 2**31:
            value -= 2**32  # a uint32 bit pattern as the i32 it is
        return arith.constant(kind, value)

    def as_index(self, value: ir.Value | int) -> ir.Value:
        if isinstance(value, ir.Value):
            if not isinstance(value.type, ir.IndexType):
                raise BuilderError(f"expected an index value, got one of type {value.type}")
            return value
        return self.index(value)

    def minimum(self, a: ir.Value | int, b: ir.Value | int) -> ir.Value:
        """The smaller of two index values, unsigned."""
        return arith.minui(self.as_index(a), self.as_index(b))

    # ----- control flow -----
    @contextlib.contextmanager
    def loop(self, lower: ir.Value | int, upper: ir.Value | int, step: ir.Value | int = 1,
             carried: Sequence[ir.Value] = ()):
        """`with k.loop(0, n) as i:` builds the body inside an `scf.for` over index values.

        With loop-carried values, `with k.loop(0, n, carried=[a, b]) as it:` gives `it.index`, `it.values`
        (this iteration's a and b); the body ends with `it.next(a2, b2)` and `it.results` are the values after
        the loop (scf.for iter_args / scf.yield)."""
        carried = _values(carried, "loop carried")
        for_op = scf.ForOp(self.as_index(lower), self.as_index(upper), self.as_index(step), carried or None)
        if not carried:
            with ir.InsertionPoint(for_op.body):
                yield for_op.induction_variable
                scf.YieldOp([])
            return
        iteration = _Iteration(for_op, [v.type for v in carried])
        with ir.InsertionPoint(for_op.body):
            yield iteration
            if not iteration.yielded:
                raise BuilderError("loop: a loop with carried values ends its body with it.next(...)")

    @contextlib.contextmanager
    def if_(self, condition: ir.Value, results: Sequence[ir.Type | str] = ()):
        """`with k.if_(c) as branch:` builds an `scf.if`. Without results, the body is the then-branch. With
        results, build the then-branch, call `branch.otherwise(*values)` to yield its values and start the
        else-branch, and `branch.done(*values)` ends it; `branch.results` are the values after the if."""
        if not isinstance(condition, ir.Value) or condition.type != ir.IntegerType.get_signless(1):
            raise BuilderError(f"if_: the condition must be an i1 value (arith.cmpi), got {condition!r}")
        kinds = [parse_type(t) for t in results]
        if_op = scf.IfOp(condition, kinds, has_else=bool(kinds))
        if not kinds:
            with ir.InsertionPoint(if_op.then_block):
                yield None
                scf.YieldOp([])
            return
        branch = _Branch(if_op, kinds)
        branch.insertion = ir.InsertionPoint(if_op.then_block)
        branch.insertion.__enter__()
        try:
            yield branch
        finally:
            branch.insertion.__exit__(None, None, None)
        if branch.stage != 2:
            raise BuilderError("if_: a conditional with results calls branch.otherwise(...) and branch.done(...)")

    def compare(self, predicate: str, a: ir.Value | int, b: ir.Value | int) -> ir.Value:
        """An i1 comparison of index values: predicate one of ult, ule, ugt, uge, eq, ne, slt, sle, sgt, sge."""
        if predicate not in ("ult", "ule", "ugt", "uge", "eq", "ne", "slt", "sle", "sgt", "sge"):
            raise BuilderError(f"compare: unknown predicate {predicate!r}")
        return arith.cmpi(getattr(arith.CmpIPredicate, predicate), self.as_index(a), self.as_index(b))


class _Iteration:
    def __init__(self, for_op, kinds):
        self._op, self._kinds, self.yielded = for_op, kinds, False
        self.index = for_op.induction_variable
        self.values = list(for_op.inner_iter_args)

    def next(self, *values: ir.Value) -> None:
        if self.yielded:
            raise BuilderError("loop: it.next(...) was called twice")
        if [getattr(v, "type", None) for v in values] != self._kinds:
            raise BuilderError(f"loop: it.next takes values of types {[str(k) for k in self._kinds]}, got {values!r}")
        scf.YieldOp(list(values))
        self.yielded = True

    @property
    def results(self) -> list[ir.Value]:
        return list(self._op.results)


class _Branch:
    def __init__(self, if_op, kinds):
        self._op, self._kinds, self.stage, self.insertion = if_op, kinds, 0, None

    def _yield(self, values, stage: int, what: str) -> None:
        if self.stage != stage:
            raise BuilderError(f"if_: branch.{what} out of order (otherwise, then done, once each)")
        if [getattr(v, "type", None) for v in values] != self._kinds:
            raise BuilderError(f"if_: branch.{what} takes values of types {[str(k) for k in self._kinds]}, "
                               f"got {values!r}")
        scf.YieldOp(list(values))
        self.insertion.__exit__(None, None, None)
        self.stage += 1

    def otherwise(self, *values: ir.Value) -> None:
        self._yield(values, 0, "otherwise")
        self.insertion = ir.InsertionPoint(self._op.else_block)
        self.insertion.__enter__()

    def done(self, *values: ir.Value) -> None:
        self._yield(values, 1, "done")
        self.insertion = contextlib.nullcontext()

    @property
    def results(self) -> list[ir.Value]:
        return list(self._op.results)


def _values(values, what: str) -> list[ir.Value]:
    values = list(values)
    if any(not isinstance(v, ir.Value) for v in values):
        raise BuilderError(f"{what}: expected ir.Values, got {values!r}")
    return values


def _dimension(dimension, what: str):
    if dimension not in ("x", "y", "z"):
        raise BuilderError(f"{what}: the dimension is 'x', 'y' or 'z', got {dimension!r}")
    return getattr(gpu.Dimension, dimension)


_default_context: ir.Context | None = None


def _current_context_or_new() -> ir.Context:
    """The current context, else one shared default context (creating a context registers every
    upstream dialect, which costs more than building a small kernel)."""
    global _default_context
    if ir.Context.current is not None:
        return ir.Context.current
    if _default_context is None:
        _default_context = ir.Context()
    return _default_context
