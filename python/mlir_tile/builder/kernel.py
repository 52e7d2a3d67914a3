"""The kernel context: a module with one gpu.func, its arguments, thread and block ids, values and control
flow (loops with loop-carried values, conditionals with results). Memory, copies and compute come from
mixins."""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import Sequence

from mlir import ir
from mlir.dialects import arith, gpu, scf

from mlir_tile.isa import targets
from mlir_tile.builder.common import (ELEMENT_TYPES, KERNEL_ANALYSES, SCALAR_TYPES, BuilderError, caller_location,
                                      check_visible, count, element_type, enclosing_blocks, identifier, is_int,
                                      parse_type, values_in)
from mlir_tile.builder.compute import Compute
from mlir_tile.builder.copies import Copies
from mlir_tile.builder.memory import Memory
from mlir_tile.builder.tensor import Tensors
from mlir_tile.builder import asynchrony
from mlir_tile.builder.asynchrony import WgmmaGroups
from mlir_tile.builder.cluster import Clusters
from mlir_tile.builder.grids import GridDependencies
from mlir_tile.builder.integers import Int, with_operators
from mlir_tile.builder.warpgroup import Warpgroups
from mlir_tile.analysis.adapter import transfer_ops, transfer_verdict
from mlir_tile.analysis.ir_facts import FactCache
from mlir_tile.dialect import load_dialect

_LARGEST_FINITE = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38,
                   "f64": 1.7976931348623157e308}
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


@dataclass(frozen=True)
class TensorMap:
    """A kernel argument that is a TMA tensor map, passed by value: its 128 bytes (made on the host by
    `Runtime.tensor_map` for the `tma.Box` that `Kernel.tma_load` returns) in the launch's parameters, as CUDA's
    `const __grid_constant__ CUtensorMap` (`tile-grid-constant-tensor-maps`); an `!llvm.ptr` to them in the
    kernel."""


def _argument_type(spec) -> tuple[ir.Type, int | None]:
    """A kernel argument's type and declared alignment: a Global, a TensorMap, a scalar of SCALAR_TYPES, or a
    static memref of ELEMENT_TYPES in global memory (passed as a bare pointer)."""
    if isinstance(spec, TensorMap):
        return ir.Type.parse("!llvm.ptr"), None
    if isinstance(spec, Global):
        if spec.element not in Global.ELEMENTS:
            raise BuilderError(f"Global: element {spec.element!r} is not one of {', '.join(Global.ELEMENTS)}")
        alignment = count(spec.alignment, "Global alignment")
        problem = "is not a power of two" if alignment & (alignment - 1) else targets.alignment_problem(alignment)
        if problem:
            raise BuilderError(f"Global alignment {spec.alignment}: {problem}")
        return ir.MemRefType.get([GLOBAL_ELEMENTS], parse_type(spec.element)), spec.alignment
    kind = parse_type(spec)
    if isinstance(kind, ir.MemRefType):
        memref = ir.MemRefType(kind)
        if (not memref.has_static_shape or memref.get_strides_and_offset() != (_row_major(memref.shape), 0)
                or memref.memory_space is not None
                or str(memref.element_type) not in ELEMENT_TYPES or math.prod(memref.shape) > GLOBAL_ELEMENTS):
            raise BuilderError(f"kernel argument {spec!r}: a memref argument has a static shape of at most "
                               f"{GLOBAL_ELEMENTS} elements of {', '.join(ELEMENT_TYPES)}, no layout and no memory "
                               f"space (it is a global pointer); use Global(element) for an array of any length")
        return kind, None
    if str(kind) not in SCALAR_TYPES:
        raise BuilderError(f"kernel argument {spec!r}: a kernel takes scalars ({', '.join(SCALAR_TYPES)}), static "
                           f"memrefs or Global(element) arrays")
    return kind, None


def _row_major(shape) -> list[int]:
    return [math.prod(shape[axis + 1:]) for axis in range(len(shape))]


def _building(method):
    """A public builder call: the kernel's `with` block is open and this kernel's, and every value among the
    arguments is visible where the call builds (made in this kernel, in this block or one around it)."""
    @functools.wraps(method)
    def call(self, *arguments, **keywords):
        if self._inside_call:  # made by another builder call, whose caller's arguments were checked
            return with_operators(method(self, *arguments, **keywords))
        what = method.__name__
        if not self._open:
            raise BuilderError(f"{what}: kernel '{self.name}' is not being built: call it inside `with "
                               f"Kernel(...) as k:` (this kernel's block has ended or not begun)")
        here = enclosing_blocks(ir.InsertionPoint.current.block)
        if self.body not in here:
            raise BuilderError(f"{what}: the builder is inside another kernel's `with` block, not that of kernel "
                               f"'{self.name}'; call a kernel's methods in its own block")
        if here[0] in self.ended_blocks:
            raise BuilderError(f"{what}: this loop body or branch was ended by it.next(...) or branch.otherwise/"
                               f"done(...); build before that call, or after the `with` block")
        check_visible(values_in([*arguments, *keywords.values()]), what, here)
        self._inside_call = True
        try:
            return with_operators(method(self, *arguments, **keywords))
        finally:
            self._inside_call = False
    return call


class Kernel(Memory, Copies, Compute, Tensors, Warpgroups, Clusters, GridDependencies):
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
        cluster: tuple[int, int, int] | None = None,
    ):
        self.name = identifier(name, "kernel name")
        self.module_name = identifier(module_name, "gpu.module name")
        if not isinstance(block, (tuple, list)) or len(block) != 3:
            raise BuilderError(f"block must be (x, y, z), got {block!r}")
        self.block = tuple(count(n, "a block extent", maximum=2**63) for n in block)
        problem = targets.block_size_problem(self.block)
        if problem:
            raise BuilderError(f"block {self.block} {problem}")
        problem = targets.chip_problem(chip)
        if problem:
            raise BuilderError(f"chip {problem}")
        problem = cluster is not None and targets.cluster_problem(cluster, chip)
        if problem:
            raise BuilderError(f"[cluster] Kernel: {problem}")
        self.cluster = None if cluster is None else tuple(cluster)  # CTAs a cluster (x, y, z): launched so
        if not isinstance(fast_math, bool):
            raise BuilderError(f"fast_math is True or False, got {fast_math!r}")
        self.chip, self.fast_math = chip, fast_math
        self.min_blocks_per_sm = None if min_blocks_per_sm is None else count(
            min_blocks_per_sm, "min_blocks_per_sm", maximum=targets.MAX_BLOCKS_PER_SM)
        self._argument_specs = list(arguments)
        self.context = context or _current_context_or_new()
        load_dialect(self.context)
        self._location = caller_location(self.context)  # diagnostics on the kernel point at the Kernel(...) line
        self._scopes: list = []
        self._open = False  # between __enter__ and __exit__: the builder's calls build into this kernel
        self._inside_call = False  # a builder call is running: the calls it makes are not the user's
        self.mbarrier_buffers: set[str] = set()  # the shared buffers `mbarriers` made and initialized
        self.symbols: set[str] = {self.name}  # the gpu.module's symbols: the kernel and its shared buffers
        self.static_shared_bytes = 0
        self.ended_blocks: list[ir.Block] = []  # loop bodies and branches ended by it.next / branch.otherwise
        self.wgmma_groups = WgmmaGroups()  # wgmma groups in flight and the accumulators they own
        self._wgmma_internal = False  # wgmma's own reads and writes of its accumulators are not checked

    def __enter__(self) -> "Kernel":
        if self._open or hasattr(self, "module"):
            raise BuilderError(f"kernel '{self.name}' is built once: its `with` block was already entered")
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
        self._open = True
        KERNEL_ANALYSES[self.func.operation] = {}
        asynchrony.OPEN.append(self.wgmma_groups)
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
        maps = [index for index, spec in enumerate(self._argument_specs) if isinstance(spec, TensorMap)]
        if maps:  # passed by value (`tile-grid-constant-tensor-maps`)
            self.func.attributes["tile.tensor_maps"] = ir.DenseI64ArrayAttr.get(maps)
        if self.cluster:  # PTX .reqnctapercluster: the launch must give this cluster shape
            self.func.attributes["nvvm.cluster_dim"] = ir.DenseI32ArrayAttr.get(list(self.cluster))
        if self.min_blocks_per_sm:  # PTX .minnctapersm: registers are budgeted for this occupancy
            self.func.attributes["nvvm.minctasm"] = ir.IntegerAttr.get(i32, self.min_blocks_per_sm)
        if self.fast_math:  # LLVM's NVPTX backend picks the .ftz forms of f32 arithmetic for this function
            self.func.attributes["passthrough"] = ir.Attribute.parse(
                '[["denormal-fp-math-f32", "preserve-sign,preserve-sign"]]')
        self.body = self.func.body.blocks.append(*types)
        self.arguments = list(self.body.arguments)

    def __exit__(self, kind, value, traceback) -> None:
        self._open = False
        KERNEL_ANALYSES.pop(self.func.operation, None)
        if self.wgmma_groups in asynchrony.OPEN:
            asynchrony.OPEN.remove(self.wgmma_groups)
        gpu.ReturnOp([])  # also after an exception: the module stays valid IR for whoever catches it
        self._insertion.__exit__(kind, value, traceback)
        for scope in reversed(self._scopes):
            scope.__exit__(kind, value, traceback)

    def _require(self, what: str, op_name: str, shape: str | None = None, element: str | None = None) -> None:
        """BuilderError unless this kernel's chip has the NVVM instruction `op_name` (as tile-check-nvptx
        would find at compile time, there after the call that made it)."""
        requirement = targets.nvvm_requirement(op_name, shape, element)
        problem = requirement and targets.requirement_problem(requirement, self.chip, None)
        if problem:
            raise BuilderError(f"{what}: {problem}; build the kernel for a newer chip (Kernel(..., chip=...))")

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

    def global_thread_id(self) -> ir.Value:
        """The thread's index in a one-dimensional grid of one-dimensional blocks (block_id * block + thread_id)."""
        if self.block[1:] != (1, 1):
            raise BuilderError(f"global_thread_id: the block {self.block} is not one-dimensional")
        return arith.addi(arith.muli(self.block_id(), self.index(self.block[0])), self.thread_id())

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
        """An arith.constant of one of SCALAR_TYPES: an integer that fits the type's bits (signed or unsigned:
        `constant(0xFFFFFFFF)` is the i32 -1; True/False for i1), or a number within a float type's range
        (infinities and NaN as written)."""
        kind = element_type(element, "constant", SCALAR_TYPES)
        if isinstance(kind, ir.FloatType):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise BuilderError(f"constant: a number for a {kind} constant, got {value!r}")
            if math.isfinite(value) and abs(value) > _LARGEST_FINITE[str(kind)]:
                raise BuilderError(f"constant: {value!r} is outside the range of {kind} (largest finite "
                                   f"{_LARGEST_FINITE[str(kind)]:g})")
            return arith.constant(kind, float(value))
        if isinstance(value, bool) and str(kind) == "i1":
            value = int(value)
        if not is_int(value):
            raise BuilderError(f"constant: an integer for a {kind} constant, got {value!r}")
        if isinstance(kind, ir.IndexType):
            return self.index(value)
        width = kind.width
        if not -(1 << (width - 1)) <= value < 1 << width or (width == 1 and value < 0):
            raise BuilderError(f"constant: {value} does not fit {kind} (from {-(1 << (width - 1)) if width > 1 else 0} "
                               f"to {(1 << width) - 1})")
        if value >= 1 << (width - 1):
            value -= 1 << width  # an unsigned bit pattern as the signed value it is
        return arith.constant(kind, value)

    def as_index(self, value: ir.Value | int, unsigned_from: str | None = None,
                 signed_from: str | None = None) -> ir.Value:
        """An index value: `value` itself, an int's constant, or with `unsigned_from="i32"` an i32 value
        widened unsigned (`arith.index_castui`), with `signed_from="i32"` widened signed (`arith.index_cast`: a
        negative count stays negative)."""
        if isinstance(value, ir.Value):
            if unsigned_from is not None and value.type == parse_type(unsigned_from):
                return arith.index_castui(ir.IndexType.get(), value)
            if signed_from is not None and value.type == parse_type(signed_from):
                return arith.index_cast(ir.IndexType.get(), value)
            if not isinstance(value.type, ir.IndexType):
                raise BuilderError(f"expected an index value, got one of type {value.type}")
            return value
        return self.index(value)

    def as_i32(self, value: ir.Value, signed: bool = False) -> ir.Value:
        """An index value as an i32 (`arith.index_cast`, or unsigned `index_castui`): the caller knows it fits."""
        cast = arith.index_cast if signed else arith.index_castui
        return cast(ir.IntegerType.get_signless(32), self.as_index(value))

    def minimum(self, a: ir.Value | int, b: ir.Value | int) -> ir.Value:
        """The smaller of two index values, unsigned."""
        return arith.minui(self.as_index(a), self.as_index(b))

    def maximum(self, a: ir.Value | int, b: ir.Value | int, signed: bool = False) -> ir.Value:
        """The larger of two index values, unsigned (or signed)."""
        return (arith.maxsi if signed else arith.maxui)(self.as_index(a), self.as_index(b))

    def select(self, condition: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
        """`a` where the i1 `condition` holds, else `b` (`arith.select`; ints become index constants)."""
        if not isinstance(condition, ir.Value) or condition.type != ir.IntegerType.get_signless(1):
            raise BuilderError(f"select: the condition is an i1 value, got {condition!r}")
        a, b = (self.as_index(x) if not isinstance(x, ir.Value) else x for x in (a, b))
        return arith.select(condition, a, b)

    # ----- control flow -----
    @contextlib.contextmanager
    def loop(self, lower: ir.Value | int, upper: ir.Value | int, step: ir.Value | int = 1,
             carried: Sequence[ir.Value] = ()):
        """`with k.loop(0, n) as i:` builds the body inside an `scf.for` over index values.

        With loop-carried values, `with k.loop(0, n, carried=[a, b]) as it:` gives `it.index`, `it.values`
        (this iteration's a and b); the body ends with `it.next(a2, b2)` and `it.results` are the values after
        the loop (scf.for iter_args / scf.yield). An exception inside the body still ends it (carrying the
        values unchanged), so the kernel stays valid IR for whoever catches it."""
        carried = _values(carried, "loop carried")
        if is_int(step) and step < 1:
            raise BuilderError(f"loop: the step is a positive integer or an index value, got {step!r}")
        for_op = scf.ForOp(self.as_index(lower), self.as_index(upper), self.as_index(step), carried or None)
        iteration = _Iteration(for_op, [v.type for v in carried], self) if carried else None
        self.wgmma_groups.open("loop")
        failed = True
        with ir.InsertionPoint(for_op.body):
            try:
                yield iteration if carried else Int(for_op.induction_variable)
                failed = False
            finally:  # ended on every path, an exception's too: without it.next the values go round unchanged
                missing_next = carried and not iteration.yielded
                if not carried or missing_next:
                    scf.YieldOp(iteration.values if carried else [])
                self.wgmma_groups.close(check=not failed)
        if missing_next:
            raise BuilderError("loop: a loop with carried values ends its body with it.next(...)")

    @contextlib.contextmanager
    def if_(self, condition: ir.Value, results: Sequence[ir.Type | str] = ()):
        """`with k.if_(c) as branch:` builds an `scf.if`. Without results, the body is the then-branch. With
        results (of SCALAR_TYPES), build the then-branch, call `branch.otherwise(*values)` to yield its values
        and start the else-branch, and `branch.done(*values)` ends it; `branch.results` are the values after
        the if. An exception inside ends the open branches with zeros, so the kernel stays valid IR."""
        if not isinstance(condition, ir.Value) or condition.type != ir.IntegerType.get_signless(1):
            raise BuilderError(f"if_: the condition must be an i1 value (arith.cmpi), got {condition!r}")
        if isinstance(results, (str, ir.Type)) or not isinstance(results, (list, tuple)):
            raise BuilderError(f"if_: results is a list of types, got {results!r}")
        kinds = [element_type(t, "if_ results", SCALAR_TYPES) for t in results]
        if_op = scf.IfOp(condition, kinds, has_else=bool(kinds))
        self.wgmma_groups.open("branch")  # (both paths of an if with results, conservatively one)
        if not kinds:
            with ir.InsertionPoint(if_op.then_block):
                try:
                    yield None
                finally:
                    scf.YieldOp([])
                    self.wgmma_groups.close()
            return
        branch = _Branch(if_op, kinds, self)
        branch.insertion = ir.InsertionPoint(if_op.then_block)
        branch.insertion.__enter__()
        try:
            yield branch
        except BaseException:
            branch.abandon()
            raise
        finally:
            branch.insertion.__exit__(None, None, None)
            self.wgmma_groups.close()
        if branch.stage != 2:
            branch.abandon()
            raise BuilderError("if_: a conditional with results calls branch.otherwise(...) and branch.done(...)")

    def compare(self, predicate: str, a: ir.Value | int, b: ir.Value | int) -> ir.Value:
        """An i1 comparison of index values: predicate one of ult, ule, ugt, uge, eq, ne, slt, sle, sgt, sge."""
        if predicate not in ("ult", "ule", "ugt", "uge", "eq", "ne", "slt", "sle", "sgt", "sge"):
            raise BuilderError(f"compare: unknown predicate {predicate!r}")
        return arith.cmpi(getattr(arith.CmpIPredicate, predicate), self.as_index(a), self.as_index(b))


def _check_every_public_call(kernel: type) -> None:
    """Every public method of the kernel and its mixins, wrapped by `_building`: one place checks them all,
    a method added later included."""
    for part in (Memory, Copies, Compute, Tensors, Warpgroups, Clusters, GridDependencies, kernel):
        for name, method in list(vars(part).items()):
            if not name.startswith("_") and callable(method) and not isinstance(method, type):
                setattr(kernel, name, _building(method))


_check_every_public_call(Kernel)


class _Iteration:
    def __init__(self, for_op, kinds, kernel):
        self._op, self._kinds, self.yielded, self._kernel = for_op, kinds, False, kernel
        self.index = for_op.induction_variable
        self.values = list(for_op.inner_iter_args)

    def next(self, *values: ir.Value) -> None:
        if self.yielded:
            raise BuilderError("loop: it.next(...) was called twice")
        if [getattr(v, "type", None) for v in values] != self._kinds:
            raise BuilderError(f"loop: it.next takes values of types {[str(k) for k in self._kinds]}, got {values!r}")
        check_visible(values, "loop: it.next", enclosing_blocks(self._op.body))
        if ir.InsertionPoint.current.block != self._op.body:
            raise BuilderError("loop: it.next(...) ends the loop's own body, not a block inside it")
        scf.YieldOp(list(values))
        self.yielded = True
        self._kernel.ended_blocks.append(self._op.body)
        self._judge_transfers_again()

    def _judge_transfers_again(self) -> None:
        """The loop's transfers, judged again now that the carried values' next iterations are known: one that
        a branch on a carried value holds, legal when it was built, may be illegal once the body carries a
        thread-dependent value round. Such a transfer is removed (as `transfer` removes an illegal one) and
        a BuilderError raised here, at it.next, with the contract's verdict, so that what the builder accepts
        still compiles."""
        analyses = KERNEL_ANALYSES.get(self._kernel.func.operation)
        facts = FactCache(analyses)  # one uniformity analysis of the kernel for all of them
        for op in transfer_ops(self._op.operation):
            _, violations = transfer_verdict(op, facts)
            if violations:
                if analyses is not None:
                    analyses.clear()  # (an extended analysis assumes no op was erased)
                op.operation.erase()
                raise BuilderError("loop: it.next(...) carries values round that make a transfer of this loop "
                                   "illegal, so it was removed: " + "; ".join(map(str, violations)))

    @property
    def results(self) -> list[ir.Value]:
        if not self.yielded:
            raise BuilderError("loop: it.results are the values after the loop; use them after its body")
        return list(self._op.results)


class _Branch:
    def __init__(self, if_op, kinds, kernel):
        self._op, self._kinds, self.stage, self.insertion, self._kernel = if_op, kinds, 0, None, kernel

    def _yield(self, values, stage: int, what: str) -> None:
        if self.stage != stage:
            raise BuilderError(f"if_: branch.{what} out of order (otherwise, then done, once each)")
        if [getattr(v, "type", None) for v in values] != self._kinds:
            raise BuilderError(f"if_: branch.{what} takes values of types {[str(k) for k in self._kinds]}, "
                               f"got {values!r}")
        block = self._op.then_block if stage == 0 else self._op.else_block
        check_visible(values, f"if_: branch.{what}", enclosing_blocks(block))
        if ir.InsertionPoint.current.block != block:
            raise BuilderError(f"if_: branch.{what} ends the branch itself, not a block inside it")
        scf.YieldOp(list(values))
        self._kernel.ended_blocks.append(block)
        self.insertion.__exit__(None, None, None)
        self.stage += 1

    def otherwise(self, *values: ir.Value) -> None:
        self._yield(values, 0, "otherwise")
        self.insertion = ir.InsertionPoint(self._op.else_block)
        self.insertion.__enter__()

    def done(self, *values: ir.Value) -> None:
        self._yield(values, 1, "done")
        self.insertion = contextlib.nullcontext()

    def abandon(self) -> None:
        """End the branches not ended yet with zeros of the result types (after an exception in them)."""
        for block in (self._op.then_block, self._op.else_block)[self.stage:]:
            with ir.InsertionPoint(block):
                scf.YieldOp([self._kernel.constant(0, str(kind)) for kind in self._kinds])
        self.stage = 2

    @property
    def results(self) -> list[ir.Value]:
        if self.stage != 2:
            raise BuilderError("if_: branch.results are the values after the conditional; use them after it")
        return list(self._op.results)


def _values(values, what: str) -> list[ir.Value]:
    if not isinstance(values, (list, tuple)):
        raise BuilderError(f"{what}: expected a list of ir.Values, got {values!r}")
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
