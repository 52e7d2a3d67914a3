"""Which values may differ between the lanes of a warp or between the warps of a block, and whether an op
runs on all 32 lanes of a warp, or on every warp.

Sound by construction: a value is uniform only when the analysis proves it. Each value has a level:
uniform (the same in every thread of the block), WARPGROUPS (the same in the 128 threads of a warpgroup, maybe
not from warpgroup to warpgroup), WARPS (the same in the lanes of a warp, maybe not from warp to warp) or LANES
(may differ between lanes). Sources of LANES are the thread and lane ids (ops and
`gpu.launch` body arguments), loads from private memory, the arguments of functions that are not kernels,
and the result of every op the analysis does not know (a call, a shuffle, an atomic, an op of another
dialect), but a broadcast (a shuffle idx of the whole warp from a constant lane) takes its operand's level, at
most WARPS. Sources of WARPS are `gpu.subgroup_id` and the warp index `thread_id x / c` (`arith.divui` by a
constant multiple of 32, or `arith.shrui` by 5 or more) in a kernel whose known_block_size x is a multiple of
32, so that each warp's 32 consecutive threads share it; of WARPGROUPS the warpgroup index, the same with a
multiple of 128 (a shift by 7 or more) and known_block_size x a multiple of 128. Known pure ops (arith, math, index, affine.apply,
memref views, loads from shared or global memory, block ids and sizes) take the highest level of their
operands. Control ops (scf.if / for / while / index_switch, affine.for / if) give their results and block
arguments the highest level of any operand or any value yielded inside. It runs once per function, as a
worklist over value uses (a value's level only rises, at most twice): linear in the function's size.

An op runs on all lanes of the warps that reach it when every enclosing region op is a control op whose
operands that decide how often the region runs are below LANES, every enclosing multi-block region reaches
the op's block only from its entry or through such branches, and the outermost scope is a kernel or a
`gpu.launch` body; on every warp of the warpgroups that reach it when they are below WARPS; on every warp of
the block when they are all uniform. Anything else, unknown region ops
included, is a reason to reject.
"""
from __future__ import annotations

from mlir import ir

from mlir_tile.contract import WARP_SIZE
from mlir_tile.analysis.ir_facts import (BLOCK_SIZE_ATTRIBUTES, FUNCTION_OPS, FactCache, constant_int, defining_op,
                                         memory_space)

_DIVERGENT_SOURCES = {
    "gpu.thread_id", "gpu.lane_id", "gpu.global_id",
    "nvvm.read.ptx.sreg.tid.x", "nvvm.read.ptx.sreg.tid.y", "nvvm.read.ptx.sreg.tid.z", "nvvm.read.ptx.sreg.laneid",
}
# Ops whose results are uniform when their operands are (no hidden per-lane state).
_UNIFORM_WHEN_OPERANDS_ARE_PREFIXES = ("arith.", "math.", "index.", "complex.")
_UNIFORM_WHEN_OPERANDS_ARE = {
    "affine.apply", "affine.min", "affine.max", "affine.load",
    "memref.get_global", "memref.subview", "memref.view", "memref.cast", "memref.reinterpret_cast",
    "memref.expand_shape", "memref.collapse_shape", "memref.memory_space_cast", "memref.assume_alignment",
    "memref.extract_strided_metadata", "memref.extract_aligned_pointer_as_index", "memref.dim", "memref.rank",
    "memref.load", "gpu.dynamic_shared_memory",
    "gpu.block_id", "gpu.block_dim", "gpu.grid_dim", "gpu.cluster_id", "gpu.cluster_dim", "gpu.cluster_block_id",
    "nvvm.read.ptx.sreg.cluster.ctarank", "nvvm.read.ptx.sreg.cluster.nctarank",
    "gpu.num_subgroups", "gpu.subgroup_size",
    "llvm.mlir.constant", "llvm.mlir.undef", "llvm.mlir.poison", "llvm.mlir.zero", "ub.poison",
    "builtin.unrealized_conversion_cast",
}
# Control ops: (the operands that decide whether and how often the regions run, as slice bounds, or None when
# every operand does); their results and block arguments are divergent when any operand or yielded value is.
_CONTROL_OPS = {
    "scf.if": (0, 1),
    "scf.for": (0, 3),
    "scf.while": None,  # decided by scf.condition inside; checked separately
    "scf.index_switch": (0, 1),
    "scf.execute_region": (0, 0),
    "memref.alloca_scope": (0, 0),
    "affine.for": (0, None),
    "affine.if": (0, None),
}
_YIELDS = {"scf.yield", "scf.condition", "affine.yield", "memref.alloca_scope.return"}
_BRANCHES = {"cf.br", "cf.cond_br", "cf.switch"}
KERNEL_ATTRIBUTES = ("gpu.kernel", "nvvm.kernel")
WARPGROUPS, WARPS, LANES = 1, 2, 3  # the levels above uniform: differs between warpgroups, warps, lanes
WARPGROUP_THREADS = 128
# the level a region's deciding operands must stay below for an op spanning a warp, a warpgroup, a block
SPAN_LIMITS = {"warp": LANES, "warpgroup": WARPS, "cta": WARPGROUPS}
_THREAD_ID_X = ("gpu.thread_id", "nvvm.read.ptx.sreg.tid.x")
_LAUNCH_THREAD_ARGUMENTS = range(3, 6)  # gpu.launch body: block ids, thread ids, grid sizes, block sizes


def is_kernel(function: ir.Operation) -> bool:
    return any(name in function.attributes for name in KERNEL_ATTRIBUTES)


def _is_uniform_op(name: str) -> bool:
    return name in _UNIFORM_WHEN_OPERANDS_ARE or name.startswith(_UNIFORM_WHEN_OPERANDS_ARE_PREFIXES)


class Uniformity:
    """The analysis of one function (a kernel, another function, or a host function holding gpu.launch)."""

    def __init__(self, function: ir.Operation):
        self.level: dict = {}  # value -> WARPS or LANES; absent: uniform
        self._worklist: list = []
        self._branch: dict = {}  # region (its entry block) -> (the highest level, the first branch at it)
        self._seen: set = set()  # the ops analysed
        self._function = function = function.operation
        self._whole_warps_in_x = _block_x_in_whole(function, WARP_SIZE)
        self._whole_warpgroups_in_x = _block_x_in_whole(function, WARPGROUP_THREADS)
        if function.name in FUNCTION_OPS and not is_kernel(function) and _on_device(function):
            for block in function.regions[0].blocks:  # a device function's callers may pass anything
                self._mark(block.arguments)
        self.extend()

    def extend(self) -> None:
        """The analysis extended to the ops added to the function since (all of them the first time): each new
        op seeded and its operands' levels carried through it, then the levels that rose carried through every
        use. Facts only rise, so this is the analysis of the function as it is now, provided no op was erased
        (a builder adding ops between transfers extends one analysis instead of redoing it)."""
        self._function.walk(self._analyse_new, ir.WalkOrder.PRE_ORDER)
        while self._worklist:
            value = self._worklist.pop()
            for use in value.uses:
                self._propagate(use.owner, use.operand_number, self.level[value])

    def _analyse_new(self, op: ir.Operation) -> ir.WalkResult:
        op = op.operation
        if op in self._seen:
            return ir.WalkResult.ADVANCE
        self._seen.add(op)
        self._seed(op)
        for number, operand in enumerate(op.operands):
            if operand in self.level:
                self._propagate(op, number, self.level[operand])
        return ir.WalkResult.ADVANCE

    def is_divergent(self, value: ir.Value) -> bool:
        return self.level.get(value) == LANES

    def _mark(self, values, level: int = LANES) -> None:
        for value in values:
            if self.level.get(value, 0) < level:
                self.level[value] = level
                self._worklist.append(value)

    def _mark_regions_and_results(self, op: ir.Operation, level: int = LANES) -> None:
        self._mark(op.results, level)
        for region in op.regions:
            for block in region.blocks:
                self._mark(block.arguments, level)

    def _seed(self, op: ir.Operation) -> ir.WalkResult:
        op = op.operation
        name = op.name
        if name in _DIVERGENT_SOURCES:
            self._mark(op.results)
        elif name == "gpu.subgroup_id":
            self._mark(op.results, WARPS)
        elif name == "memref.load" and memory_space(ir.MemRefType(op.operands[0].type)) == "private":
            self._mark(op.results)
        elif name == "gpu.launch":
            arguments = list(op.regions[0].blocks[0].arguments)
            self._mark(arguments[i] for i in _LAUNCH_THREAD_ARGUMENTS)
        elif name in _CONTROL_OPS or name in FUNCTION_OPS or name in _BRANCHES or name in _YIELDS:
            pass
        elif _is_broadcast(op):
            pass  # lane 0's value: see _propagate
        elif not _is_uniform_op(name):
            self._mark_regions_and_results(op)  # unknown: nothing it yields is proven uniform
        return ir.WalkResult.ADVANCE

    def _propagate(self, op: ir.Operation, operand: int, level: int) -> None:
        op = op.operation
        name = op.name
        if name in _YIELDS:
            self._mark_regions_and_results(op.parent.operation, level)
        elif name in _BRANCHES:
            if name != "cf.br" and operand == 0:
                key = _region_key(op)
                if self._branch.get(key, (0, None))[0] < level:
                    self._branch[key] = (level, op)
            for successor in op.successors:
                self._mark(successor.arguments, level)
        elif name in _CONTROL_OPS:
            self._mark_regions_and_results(op, level)
        elif _is_broadcast(op):
            self._mark([op.results[0]], min(level, WARPS))  # lane 0's value: shared by the lanes that share it
        elif self._whole_warps_in_x and operand == 0 and _threads_per_index(op) and _threads_per_index(op) % WARP_SIZE == 0:
            whole = self._whole_warpgroups_in_x and _threads_per_index(op) % WARPGROUP_THREADS == 0
            self._mark(op.results, WARPGROUPS if whole else WARPS)
        elif _is_uniform_op(name):
            self._mark(op.results, level)

    # ----- participation -----
    def divergence_reason(self, op: ir.Operation, span: str = "warp") -> str | None:
        """Why `op` might run with some lanes of a warp inactive (or, spanning a "warpgroup" or the "cta",
        with some warps of its warpgroup or of the block not running it), or None when that is proven not to
        happen."""
        limit = SPAN_LIMITS[span]
        child, scope = op.operation, op.operation.parent
        while scope is not None:
            scope = scope.operation
            level, branch = self._branch.get(_region_key(child), (0, None))
            if level >= limit and not _in_entry_block(child):
                return f"its block can be reached through a branch{_at(branch)} whose condition {_varies(level)}"
            name = scope.name
            if name == "gpu.launch" or (name in FUNCTION_OPS and is_kernel(scope)):
                return None
            if name in FUNCTION_OPS:
                return (f"it is in {_symbol(scope)}, which is not a kernel: its callers may run it on some lanes "
                        f"only (make it a kernel, or inline it)")
            reason = self._control_reason(scope, limit)
            if reason:
                return reason
            child, scope = scope, scope.parent
        return "it is not inside a kernel or a gpu.launch body"

    def _control_reason(self, scope: ir.Operation, limit: int) -> str | None:
        name = scope.name
        if name not in _CONTROL_OPS:
            return (f"it is inside '{name}'{_at(scope)}, which the uniformity analysis does not know, so it cannot "
                    f"prove that every lane runs the region")
        if name == "scf.while":
            level = self._while_condition_level(scope)
            return f"it is inside an scf.while{_at(scope)} whose condition {_varies(level)}" if level >= limit else None
        start, stop = _CONTROL_OPS[name]
        level = max((self.level.get(o, 0) for o in list(scope.operands)[start:stop]), default=0)
        if level < limit:
            return None
        what, plural = {"scf.if": ("whose condition", False), "scf.for": ("whose bounds or step", True),
                        "scf.index_switch": ("whose selector", False), "affine.for": ("whose bounds", True),
                        "affine.if": ("whose condition operands", True)}[name]
        return f"it is inside an {name}{_at(scope)} {what} {_varies(level, plural)}"

    def _while_condition_level(self, loop: ir.Operation) -> int:
        level = 0
        for block in loop.regions[0].blocks:
            terminator = block.operations[len(block.operations) - 1].operation
            if terminator.name == "scf.condition":
                level = max(level, self.level.get(terminator.operands[0], 0))
        return level


def _varies(level: int, plural: bool = False) -> str:
    if level == LANES:
        return f"depend{'' if plural else 's'} on the thread id"
    if level == WARPS:
        return f"differ{'' if plural else 's'} between warps (the warp's index), and the transfer's scope spans warps"
    return (f"differ{'' if plural else 's'} between warpgroups (the warpgroup's index), and the transfer's scope spans "
            f"the block (scope \"warpgroup\" may sit under such a branch)")


def _is_broadcast(op: ir.Operation) -> bool:
    """A gpu.shuffle idx of all 32 lanes from a constant lane: every lane gets that lane's value (uniform in the
    warp, and in the warpgroup or block where the value was), and its validity flag is true in every lane."""
    if op.name != "gpu.shuffle" or "idx" not in str(op.attributes["mode"]):
        return False
    lane, width = (constant_int(operand) for operand in list(op.operands)[1:3])
    return width == WARP_SIZE and lane is not None and 0 <= lane < WARP_SIZE


def _block_x_in_whole(function: ir.Operation, threads: int) -> bool:
    """Whether the kernel's known_block_size x is a multiple of `threads` (32: a warp, 128: a warpgroup): then
    each group's threads are consecutive x ids (threads are numbered x fastest) and share thread_id x / threads."""
    for name in BLOCK_SIZE_ATTRIBUTES:
        if name in function.attributes:
            return ir.DenseI32ArrayAttr(function.attributes[name])[0] % threads == 0
    return False


def _threads_per_index(op: ir.Operation) -> int:
    """c for `thread_id x / c` (arith.divui by a positive constant, or arith.shrui by a constant: 2^shift);
    0 for any other op."""
    if op.name not in ("arith.divui", "arith.shrui"):
        return 0
    source = defining_op(op.operands[0])
    if source is None or source.name not in _THREAD_ID_X or (
            source.name == "gpu.thread_id" and str(source.attributes["dimension"]) != "#gpu<dim x>"):
        return 0
    constant = constant_int(op.operands[1])
    if constant is None or constant <= 0 or (op.name == "arith.shrui" and constant >= 63):
        return 0
    return constant if op.name == "arith.divui" else 1 << constant


def _region_key(op: ir.Operation) -> ir.Block:
    """The region holding `op`, as a hashable key: its entry block (Region objects hash by identity)."""
    return op.operation.block.region.blocks[0]


def _in_entry_block(op: ir.Operation) -> bool:
    block = op.operation.block
    return block == block.region.blocks[0]


def _on_device(function: ir.Operation) -> bool:
    scope = function.parent
    while scope is not None and scope.operation.name != "gpu.module":
        scope = scope.operation.parent
    return scope is not None


def _symbol(function: ir.Operation) -> str:
    name = function.attributes["sym_name"] if "sym_name" in function.attributes else None
    return f"@{ir.StringAttr(name).value}" if name is not None else f"'{function.name}'"


def _at(op: ir.Operation) -> str:
    """` (at file:line:col)` for an op with a file location; nothing for one built without (Python)."""
    location = op.location
    if location.is_a_file():
        return f" (at {location.filename}:{location.start_line}:{location.start_col})"
    return ""


def divergence(facts: FactCache, op: ir.Operation, span: str) -> str | None:
    """Why `op` might run on some lanes of a warp only, or (spanning a "warpgroup" or the "cta") on some
    warps of it only (None: every lane of every warp runs it), from one uniformity analysis per function, kept
    in `facts` (a growing kernel's extended to the ops added since). An op directly in the body of a
    single-block kernel needs none: no branch or loop can leave lanes behind."""
    op = op.operation
    function = facts.place(op).function
    if function is not None and op.parent == function and is_kernel(function) and \
            len(function.regions[0].blocks) == 1:
        return None
    if function is None:
        return "it is not inside a kernel or a gpu.launch body"
    if function not in facts.uniformities:
        facts.uniformities[function] = Uniformity(function)
    elif facts.growing:
        facts.uniformities[function].extend()
    return facts.uniformities[function].divergence_reason(op, span)
