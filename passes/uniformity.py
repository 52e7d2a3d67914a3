"""Which values may differ between the lanes of a warp, and whether an op runs on all 32 lanes.

Sound by construction: a value is uniform only when the analysis proves it. Sources of divergence are the
thread and lane ids (ops and `gpu.launch` body arguments), loads from private memory, the arguments of
functions that are not kernels, and the result of every op the analysis does not know (a call, a shuffle,
an atomic, an op of another dialect). Known pure ops (arith, math, index, affine.apply, memref views, loads
from shared or global memory, block ids and sizes) have divergent results exactly when an operand is
divergent. Control ops (scf.if / for / while / index_switch, affine.for / if) make their results and block
arguments divergent when any operand or any value yielded inside is. It runs once per function, as a
worklist over value uses: linear in the function's size.

An op runs on all lanes when every enclosing region op is a control op whose operands that decide how often
the region runs are uniform, every enclosing multi-block region reaches the op's block only from its entry
or through uniform branches, and the outermost scope is a kernel or a `gpu.launch` body. Anything else,
unknown region ops included, is a reason to reject.
"""
from __future__ import annotations

from mlir import ir

from mlir_tile.passes.ir_facts import FUNCTION_OPS, memory_space

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
    "gpu.subgroup_id", "gpu.num_subgroups", "gpu.subgroup_size",
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
_LAUNCH_THREAD_ARGUMENTS = range(3, 6)  # gpu.launch body: block ids, thread ids, grid sizes, block sizes


def is_kernel(function: ir.Operation) -> bool:
    return any(name in function.attributes for name in KERNEL_ATTRIBUTES)


def _is_uniform_op(name: str) -> bool:
    return name in _UNIFORM_WHEN_OPERANDS_ARE or name.startswith(_UNIFORM_WHEN_OPERANDS_ARE_PREFIXES)


class Uniformity:
    """The analysis of one function (a kernel, another function, or a host function holding gpu.launch)."""

    def __init__(self, function: ir.Operation):
        self.divergent: set = set()
        self._worklist: list = []
        self._divergent_branch: dict = {}  # region (its parent op and index) -> the first divergent branch
        function = function.operation
        function.walk(self._seed, ir.WalkOrder.PRE_ORDER)
        if function.name in FUNCTION_OPS and not is_kernel(function) and _on_device(function):
            for block in function.regions[0].blocks:  # a device function's callers may pass anything
                self._mark(block.arguments)
        while self._worklist:
            value = self._worklist.pop()
            for use in value.uses:
                self._propagate(use.owner, use.operand_number)

    def is_divergent(self, value: ir.Value) -> bool:
        return value in self.divergent

    def _mark(self, values) -> None:
        for value in values:
            if value not in self.divergent:
                self.divergent.add(value)
                self._worklist.append(value)

    def _mark_regions_and_results(self, op: ir.Operation) -> None:
        self._mark(op.results)
        for region in op.regions:
            for block in region.blocks:
                self._mark(block.arguments)

    def _seed(self, op: ir.Operation) -> ir.WalkResult:
        op = op.operation
        name = op.name
        if name in _DIVERGENT_SOURCES:
            self._mark(op.results)
        elif name == "memref.load" and memory_space(ir.MemRefType(op.operands[0].type)) == "private":
            self._mark(op.results)
        elif name == "gpu.launch":
            arguments = list(op.regions[0].blocks[0].arguments)
            self._mark(arguments[i] for i in _LAUNCH_THREAD_ARGUMENTS)
        elif name in _CONTROL_OPS or name in FUNCTION_OPS or name in _BRANCHES or name in _YIELDS:
            pass
        elif not _is_uniform_op(name):
            self._mark_regions_and_results(op)  # unknown: nothing it yields is proven uniform
        return ir.WalkResult.ADVANCE

    def _propagate(self, op: ir.Operation, operand: int) -> None:
        op = op.operation
        name = op.name
        if name in _YIELDS:
            self._mark_regions_and_results(op.parent.operation)
        elif name in _BRANCHES:
            if name != "cf.br" and operand == 0:
                self._divergent_branch.setdefault(_region_key(op), op)
            for successor in op.successors:
                self._mark(successor.arguments)
        elif name in _CONTROL_OPS:
            self._mark_regions_and_results(op)
        elif _is_uniform_op(name):
            self._mark(op.results)

    # ----- participation -----
    def divergence_reason(self, op: ir.Operation) -> str | None:
        """Why `op` might run with some lanes inactive, or None when all lanes provably run it."""
        child, scope = op.operation, op.operation.parent
        while scope is not None:
            scope = scope.operation
            branch = self._divergent_branch.get(_region_key(child))
            if branch is not None and not _in_entry_block(child):
                return f"its block can be reached through a branch{_at(branch)} whose condition depends on the thread id"
            name = scope.name
            if name == "gpu.launch" or (name in FUNCTION_OPS and is_kernel(scope)):
                return None
            if name in FUNCTION_OPS:
                return (f"it is in {_symbol(scope)}, which is not a kernel: its callers may run it on some lanes "
                        f"only (make it a kernel, or inline it)")
            reason = self._control_reason(scope)
            if reason:
                return reason
            child, scope = scope, scope.parent
        return "it is not inside a kernel or a gpu.launch body"

    def _control_reason(self, scope: ir.Operation) -> str | None:
        name = scope.name
        if name not in _CONTROL_OPS:
            return (f"it is inside '{name}'{_at(scope)}, which the uniformity analysis does not know, so it cannot "
                    f"prove that every lane runs the region")
        if name == "scf.while":
            if self._while_condition_divergent(scope):
                return f"it is inside an scf.while{_at(scope)} whose condition depends on the thread id"
            return None
        start, stop = _CONTROL_OPS[name]
        deciding = list(scope.operands)[start:stop]
        if not any(o in self.divergent for o in deciding):
            return None
        what = {"scf.if": "whose condition depends", "scf.for": "whose bounds or step depend",
                "scf.index_switch": "whose selector depends", "affine.for": "whose bounds depend",
                "affine.if": "whose condition operands depend"}[name]
        return f"it is inside an {name}{_at(scope)} {what} on the thread id"

    def _while_condition_divergent(self, loop: ir.Operation) -> bool:
        for block in loop.regions[0].blocks:
            terminator = block.operations[len(block.operations) - 1].operation
            if terminator.name == "scf.condition" and terminator.operands[0] in self.divergent:
                return True
        return False


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
