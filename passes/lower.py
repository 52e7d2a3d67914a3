"""`tile-lower-matrix-transfer`: rewrites each legal `tile.matrix_transfer` into NVVM ldmatrix/stmatrix.

The specification's code-generation rule, for each repeat t and every lane l:

    address   = &smem[t, (l // 8) % N, l % 8, 0]
    registers = [reg[t, i, l // 4, l % 4] for i in range(N)]

Before (the specification's example):

    "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,2,8,4):(8,2,4@laneid,1@laneid)">,
        src_layout = #tile.layout<"(2,2,8,4):(128,8,16,1)">} : (memref<12xi32, 5>, memref<256xi32, 3>) -> ()

After (the lane part of the address and the slot indices made once per function, at its entry; each
repeat adds a constant that the backend folds into the instruction's immediate offset; results go
straight to constant register slots):

    // at the function's entry:
    %lane = gpu.lane_id
    %row = (%lane & 7) * 16 + ((%lane >> 3) & 1) * 8          (as arith ops on i32)
    %c0, %c2, %c8, %c10 = arith.constant ... : index
    // at the transfer:
    %base = llvm.extractvalue (unrealized_conversion_cast %sm)[1] : !llvm.ptr<3>
    %p0 = llvm.getelementptr %base[%row] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
    %r0 = nvvm.ldmatrix %p0 {num = 2, layout = row, ...} -> !llvm.struct<(i32, i32)>
    memref.store (extractvalue %r0[0]), %regs[0] ; memref.store (extractvalue %r0[1]), %regs[2]
    %p1 = llvm.getelementptr %p0[128] ...
    %r1 = nvvm.ldmatrix %p1 ... ; stores to %regs[8], %regs[10]

The pass re-checks the contract first (its precondition) and fails with the same diagnostics as
`tile-verify-matrix-transfer` rather than lowering an illegal transfer.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, gpu

from mlir_tile import contract
from mlir_tile.models.address_plan import AddressPlan, address_plan
from mlir_tile.dialect.tile import MatrixTransferOp
from mlir_tile.analysis.adapter import diagnostic, transfer_ops, transfer_verdict
from mlir_tile.analysis.ir_facts import FUNCTION_OPS, FactCache, block_size, enclosing
from mlir_tile.analysis.offsets import mode_offset, swizzled
from mlir_tile.passes.registry import PassDefinition

ROW_SHAPE = "#nvvm.ld_st_matrix_shape<m = 8, n = 8>"
ELEMENT = "#nvvm.ld_st_matrix_elt_type<b16>"
_DYNAMIC_INDEX = -(2**31)  # LLVM::GEPOp::kDynamicIndex: take the index from the operand list


def lower_matrix_transfer(root: ir.Operation, pass_) -> None:
    facts = FactCache()
    vocabulary = _Vocabulary()
    failed = False
    for op in transfer_ops(root):
        transfer, violations = transfer_verdict(op, facts)
        if violations:
            for violation in violations:
                diagnostic(op, violation, prefix="cannot be lowered: ")
            failed = True
            continue
        registers, shared = transfer.opcode.registers_and_shared(op.dst, op.src)
        _hoist_register_storage(registers)
        with op.location, ir.InsertionPoint(op):
            _emit_transfer(transfer, op, registers, shared, vocabulary)
        op.operation.erase()
    vocabulary.remove_anchors()
    if failed:
        pass_.signal_pass_failure()


def _hoist_register_storage(registers: ir.Value) -> None:
    """Moves the register storage's static memref.alloca to the start of the function's entry block. LLVM
    promotes only allocas of the entry block to registers, and a loop before the alloca (the copy into shared
    memory, say) puts it in a later block once scf-to-cf has run: it stayed an array in local memory (`.local`,
    `st.local`) in the PTX."""
    value = registers
    while True:
        producer = value.owner
        if not isinstance(producer, (ir.OpView, ir.Operation)):
            return
        producer = producer.operation
        if producer.name != "memref.alloca":
            if producer.name not in ("memref.subview", "memref.cast", "memref.reinterpret_cast"):
                return
            value = producer.operands[0]
            continue
        break
    if len(producer.operands):
        return  # a dynamically sized alloca must stay where its sizes are defined
    function = enclosing(producer.parent, FUNCTION_OPS + ("gpu.launch",))
    if function is None:
        return
    entry = function.regions[0].blocks[0]
    first = entry.operations[0].operation
    if first != producer:  # before everything, loops included: they become blocks in scf-to-cf
        producer.move_before(first)


PASS = PassDefinition(
    "tile-lower-matrix-transfer",
    "Lower tile.matrix_transfer to nvvm.ldmatrix / nvvm.stmatrix (one per repeat)",
    lower_matrix_transfer,
)


class _Vocabulary:
    """What the lowering makes once per run instead of once per op: types and attributes (parsing them for
    every op cost a quarter of the pass), and per function the values that are the same throughout it (the
    lane part of addresses, register-slot indices), built at the function's entry. LLVM would merge the
    copies anyway; not making them halves the pass and the IR later passes read."""

    def __init__(self):
        self.i32 = ir.IntegerType.get_signless(32)
        self.i64 = ir.IntegerType.get_signless(64)
        self.index = ir.IndexType.get()
        self.shared_pointer = ir.Type.parse("!llvm.ptr<3>")
        self.shape = ir.Attribute.parse(ROW_SHAPE)
        self.element = ir.Attribute.parse(ELEMENT)
        self.layouts = {trans: ir.Attribute.parse(f"#nvvm.mma_layout<{'col' if trans else 'row'}>")
                        for trans in (False, True)}
        self._structs: dict[int, ir.Type] = {}
        self._descriptors: dict[int, ir.Type] = {}
        self._values: dict[tuple[bool, int], ir.Attribute] = {}
        self._positions: dict[int, ir.Attribute] = {}
        self._counts: dict[int, ir.Attribute] = {}
        self._gep_attributes: dict[int, dict] = {}
        self._plans: dict[int, tuple] = {}
        self._anchors: dict[ir.Operation, ir.Operation] = {}
        self._shared: dict[tuple, ir.Value] = {}

    def struct(self, count: int) -> ir.Type:
        """`!llvm.struct<(i32, ...)>` of `count` words: what ldmatrix.xN returns."""
        if count not in self._structs:
            self._structs[count] = ir.Type.parse(f"!llvm.struct<({', '.join(['i32'] * count)})>")
        return self._structs[count]

    def descriptor(self, rank: int) -> ir.Type:
        """The LLVM descriptor of a shared memref of `rank`: (allocated, aligned, offset, sizes, strides)."""
        if rank not in self._descriptors:
            shape_fields = f", array<{rank} x i64>, array<{rank} x i64>" if rank else ""
            self._descriptors[rank] = ir.Type.parse(f"!llvm.struct<(ptr<3>, ptr<3>, i64{shape_fields})>")
        return self._descriptors[rank]

    def function_invariant(self, op: ir.Operation, key: tuple, make) -> ir.Value:
        """`make()`, built once per function (at its entry, where it dominates every use) for each `key`.
        `make` may use only values that are the same everywhere in the function: ids and constants."""
        function = enclosing(op.parent, FUNCTION_OPS + ("gpu.launch",))  # where lane ids are defined
        if function is None:
            return make()
        if (function, key) not in self._shared:
            if function not in self._anchors:
                # Values go before an anchor at the entry's start, in the order they are made; ops after it,
                # tile ops included, may be erased meanwhile.
                with ir.InsertionPoint.at_block_begin(function.regions[0].blocks[0]):
                    self._anchors[function] = ir.Operation.create("arith.constant", results=[self.i32],
                                                                  attributes={"value": ir.IntegerAttr.get(self.i32, 0)})
            with ir.InsertionPoint(self._anchors[function]):
                self._shared[(function, key)] = make()
        return self._shared[(function, key)]

    def remove_anchors(self) -> None:
        for anchor in self._anchors.values():
            anchor.erase()
        self._anchors.clear()

    def plan(self, transfer: contract.Transfer) -> AddressPlan:
        """The transfer's address plan, worked out once per checked Transfer: identical ops share one (the
        contract's verdict is cached), and unrolled loops hold thousands."""
        if id(transfer) not in self._plans:  # the Transfer is kept with its plan, so its id stays its own
            self._plans[id(transfer)] = (transfer, address_plan(transfer))
        return self._plans[id(transfer)][1]

    # The ops the lowering makes per repeat, created generically with cached attributes: the generated
    # builders check and convert their arguments on every call, which took half of the pass.
    def extract(self, result_type: ir.Type, aggregate: ir.Value, position: int) -> ir.Value:
        if position not in self._positions:
            self._positions[position] = ir.DenseI64ArrayAttr.get([position])
        return ir.Operation.create("llvm.extractvalue", results=[result_type], operands=[aggregate],
                                   attributes={"position": self._positions[position]}).result

    def gep(self, pointer: ir.Value, offset: ir.Value | int) -> ir.Value:
        """`getelementptr i32, pointer, offset` (the NVPTX backend folds constant offsets into the
        instruction's immediate; `inbounds` is not needed)."""
        constant, operands = (offset, [pointer]) if isinstance(offset, int) else (_DYNAMIC_INDEX, [pointer, offset])
        return ir.Operation.create("llvm.getelementptr", results=[pointer.type], operands=operands,
                                   attributes=self._gep_attributes_of(constant)).result

    def _gep_attributes_of(self, constant: int) -> dict:
        if constant not in self._gep_attributes:
            self._gep_attributes[constant] = {"elem_type": ir.TypeAttr.get(self.i32),
                                              "rawConstantIndices": ir.DenseI32ArrayAttr.get([constant])}
        return self._gep_attributes[constant]

    def matrix_attributes(self, count: int, trans: bool) -> dict:
        if count not in self._counts:
            self._counts[count] = ir.IntegerAttr.get(self.i32, count)
        return {"num": self._counts[count], "layout": self.layouts[trans], "shape": self.shape, "eltType": self.element}

    def i32_constant(self, value: int) -> ir.Value:
        return self._constant(False, value)

    def index_constant(self, value: int) -> ir.Value:
        return self._constant(True, value)

    def _constant(self, is_index: bool, value: int) -> ir.Value:
        """`arith.constant`, created generically (the op builder takes twice as long)."""
        kind = self.index if is_index else self.i32
        if (is_index, value) not in self._values:
            self._values[(is_index, value)] = ir.IntegerAttr.get(kind, value)
        attributes = {"value": self._values[(is_index, value)]}
        return ir.Operation.create("arith.constant", results=[kind], attributes=attributes).result


def _emit_transfer(transfer: contract.Transfer, op: MatrixTransferOp, registers: ir.Value, shared: ir.Value,
                   vocabulary: _Vocabulary) -> None:
    count = transfer.opcode.count
    layout_ = transfer.shared
    row_mode, matrix_mode = layout_.mode(layout_.rank - 2), layout_.mode(layout_.rank - 3)
    group_mode = layout_.mode(0) if transfer.group_rank else None

    def make_lane_offset() -> ir.Value:
        lane = arith.index_cast(vocabulary.i32, gpu.lane_id())
        terms = [mode_offset(arith.andi(lane, vocabulary.i32_constant(7)), row_mode, vocabulary.i32_constant)]
        if count > 1:
            matrix = arith.andi(arith.shrui(lane, vocabulary.i32_constant(3)), vocabulary.i32_constant(count - 1))
            terms.append(mode_offset(matrix, matrix_mode, vocabulary.i32_constant))
        if transfer.group_rank:
            terms.append(mode_offset(_warp_in_group(transfer, op, vocabulary), group_mode, vocabulary.i32_constant))
        terms = [term for term in terms if term is not None]
        offset = terms[0] if terms else vocabulary.i32_constant(0)
        for term in terms[1:]:
            offset = arith.addi(offset, term)
        return offset

    lane_key = ("lane offset", count, tuple(row_mode), tuple(matrix_mode) if count > 1 else None,
                (transfer.scope.name, tuple(group_mode)) if transfer.group_rank else None)
    lane_offset = vocabulary.function_invariant(op, lane_key, make_lane_offset)
    swizzle = layout_.swizzle
    if swizzle is not None:  # the lane part swizzled, also once per function
        swizzled_lane = vocabulary.function_invariant(op, ("swizzled", lane_key, swizzle),
                                                      lambda: swizzled(lane_offset, swizzle, vocabulary.i32_constant))

    descriptor = _descriptor(shared, vocabulary)
    base = vocabulary.extract(vocabulary.shared_pointer, descriptor, 1)
    if transfer.shared_operand.offset is None:  # a dynamic region start, proven a multiple of 4 words
        base = vocabulary.gep(base, vocabulary.extract(vocabulary.i64, descriptor, 2))
    lane_pointer = vocabulary.gep(base, lane_offset) if swizzle is None else None
    matrix_attributes = vocabulary.matrix_attributes(count, transfer.opcode.trans)
    register_type = ir.MemRefType(registers.type)
    register_index = _slot_indexer(register_type, vocabulary, op)
    container = register_type.element_type

    for repeat in vocabulary.plan(transfer).repeats:
        slots = repeat.slots
        if repeat.form == "plain":
            pointer = lane_pointer
        else:
            if repeat.form == "shift":
                offset = swizzled_lane
            elif repeat.form == "xor":
                offset = arith.xori(swizzled_lane, vocabulary.i32_constant(repeat.operand))
            else:
                offset = swizzled(arith.addi(lane_offset, vocabulary.i32_constant(repeat.operand)), swizzle,
                                  vocabulary.i32_constant)
            pointer = vocabulary.gep(base, offset)
        if repeat.immediate:
            pointer = vocabulary.gep(pointer, repeat.immediate)
        if transfer.opcode.is_load:
            result_type = vocabulary.i32 if count == 1 else vocabulary.struct(count)
            result = ir.Operation.create("nvvm.ldmatrix", results=[result_type], operands=[pointer],
                                         attributes=matrix_attributes).result
            for i, slot in enumerate(slots):
                word = result if count == 1 else vocabulary.extract(vocabulary.i32, result, i)
                if word.type != container:
                    word = arith.bitcast(container, word)
                ir.Operation.create("memref.store", operands=[word, registers, *register_index(slot)])
        else:
            values = []
            for slot in slots:
                word = ir.Operation.create("memref.load", results=[container],
                                           operands=[registers, *register_index(slot)]).result
                values.append(word if word.type == vocabulary.i32 else arith.bitcast(vocabulary.i32, word))
            attributes = {name: value for name, value in matrix_attributes.items() if name != "num"}
            ir.Operation.create("nvvm.stmatrix", operands=[pointer, *values], attributes=attributes)


def _warp_in_group(transfer: contract.Transfer, op: ir.Operation, vocabulary: _Vocabulary) -> ir.Value:
    """The warp's index in its warpgroup or block: linear thread id / 32 (mod 4 for a warpgroup). The
    y and z terms use known_block_size when the kernel declares it, else gpu.block_dim."""
    i32 = vocabulary.i32

    def thread(dimension):
        return arith.index_cast(i32, gpu.thread_id(dimension))

    known = block_size(op)
    linear = thread(gpu.Dimension.x)
    if known is None:
        width = arith.index_cast(i32, gpu.block_dim(gpu.Dimension.x))
        plane = arith.muli(width, arith.index_cast(i32, gpu.block_dim(gpu.Dimension.y)))
        linear = arith.addi(linear, arith.muli(thread(gpu.Dimension.y), width))
        linear = arith.addi(linear, arith.muli(thread(gpu.Dimension.z), plane))
    else:
        if known[1] > 1:
            linear = arith.addi(linear, arith.muli(thread(gpu.Dimension.y), vocabulary.i32_constant(known[0])))
        if known[2] > 1:
            plane = vocabulary.i32_constant(known[0] * known[1])
            linear = arith.addi(linear, arith.muli(thread(gpu.Dimension.z), plane))
    warp = arith.shrui(linear, vocabulary.i32_constant(5))
    if transfer.scope.name == "warpgroup":
        warp = arith.andi(warp, vocabulary.i32_constant(contract.WARPGROUP_WARPS - 1))
    return warp


def _descriptor(buffer: ir.Value, vocabulary: _Vocabulary) -> ir.Value:
    """The LLVM memref descriptor of a shared memref: (allocated, aligned, offset, sizes, strides).

    The unrealized cast meets the descriptor that the memref's producer becomes in convert-gpu-to-nvvm, and
    reconcile-unrealized-casts removes the pair; staying in pointer arithmetic (rather than integer
    arithmetic) lets the backend fold constant offsets into the ldmatrix/stmatrix address."""
    descriptor_type = vocabulary.descriptor(ir.MemRefType(buffer.type).rank)
    return ir.Operation.create(
        "builtin.unrealized_conversion_cast", results=[descriptor_type], operands=[buffer]
    ).result


def _slot_indexer(memref_type: ir.MemRefType, vocabulary: _Vocabulary, op: ir.Operation):
    """A function from a linear element offset (a register slot, static memref offset included) to index
    constants addressing that element of `memref_type` (made once per function, at its entry)."""
    strides, offset = memref_type.get_strides_and_offset()
    order = sorted(range(memref_type.rank), key=lambda a: -strides[a])

    def indices(slot: int) -> list[ir.Value]:
        remaining = slot - offset
        position = [0] * memref_type.rank
        for axis in order:
            if strides[axis] > 0:
                position[axis], remaining = divmod(remaining, strides[axis])
                position[axis] = min(position[axis], memref_type.shape[axis] - 1)
                remaining = slot - offset - sum(i * s for i, s in zip(position, strides))
        if remaining != 0:
            raise ValueError(f"register slot {slot} is not an element of {memref_type}")
        return [vocabulary.function_invariant(op, ("index", i), lambda: vocabulary.index_constant(i))
                for i in position]

    return indices
