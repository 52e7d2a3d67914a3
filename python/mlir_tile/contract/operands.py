"""The rules about the operands themselves, before any coordinate: their memory, element types, storage,
origin and static shapes, the chip's limits, and a dynamic region start's alignment. Each check takes the
`Query` and the parsed opcode (which says which operand holds the registers)."""
from __future__ import annotations

from mlir_tile.isa import targets
from mlir_tile.contract.model import MAX_LOCAL_BYTES, WORD_BYTES, WORDS, Opcode, Query, Rule, Violation


def _direction(opcode: Opcode) -> str:
    direction = "reads shared memory into registers" if opcode.is_load else "writes registers to shared memory"
    order = "(dst = registers, src = shared)" if opcode.is_load else "(dst = shared, src = registers)"
    return f"{opcode.instruction} {direction}, so", f"operand order is {order}"


def check_register_memory(query: Query, opcode: Opcode) -> list[Violation]:
    registers, _ = opcode.registers_and_shared(query.dst, query.src)
    if registers.memory == "private":
        return []
    direction, order = _direction(opcode)
    return [Violation(Rule.OPERANDS, f"{direction} {opcode.register_role} must be register storage (a memref in "
                                     f"#gpu.address_space<private>), but it is in {registers.memory} memory; {order}")]


def check_shared_memory(query: Query, opcode: Opcode) -> list[Violation]:
    _, shared = opcode.registers_and_shared(query.dst, query.src)
    if shared.memory == "shared":
        return []
    direction, order = _direction(opcode)
    extra = (" (ldmatrix/stmatrix cannot address global memory; stage the tile in shared memory)"
             if shared.memory == "global" else "")
    return [Violation(Rule.OPERANDS, f"{direction} {opcode.shared_role} must be shared memory (a memref in "
                                     f"#gpu.address_space<workgroup>), but it is in {shared.memory} memory{extra}; "
                                     f"{order}")]


def check_element_types(query: Query, opcode: Opcode) -> list[Violation]:
    found = []
    for role, operand in zip((opcode.register_role, opcode.shared_role), opcode.registers_and_shared(query.dst, query.src)):
        if operand.element_bits == 32 and operand.element_type not in ("i32", "f32"):
            found.append(Violation(Rule.OPERANDS, f"{role} has element type {operand.element_type}; the 32-bit "
                                                  f"containers are i32 or f32 (signless): view the buffer as i32"))
        if operand.element_bits != 32:
            hint = ("; expose packed 16-bit storage as b32 words (a memref of i32 over the same bytes, and "
                    "mlir_tile.algebra.layout.pack_b16_as_b32 for its layout)" if operand.element_bits == 16 else "")
            found.append(Violation(Rule.OPERANDS, f"{role} has element type {operand.element_type}; both operands "
                                                  f"use 32-bit containers (i32 or f32), each holding two b16 "
                                                  f"elements{hint}"))
    return found


def check_register_contiguity(query: Query, opcode: Opcode) -> list[Violation]:
    registers, _ = opcode.registers_and_shared(query.dst, query.src)
    if registers.contiguous:
        return []
    return [Violation(Rule.OPERANDS, f"{opcode.register_role} (register storage) is a strided memref with holes "
                                     f"between its elements; register slots are offsets into contiguous storage: "
                                     f"use a contiguous memref")]


def check_register_origin(query: Query, opcode: Opcode) -> list[Violation]:
    registers, _ = opcode.registers_and_shared(query.dst, query.src)
    if registers.memory != "private" or registers.origin in (None, "memref.alloca"):
        return []
    where = (" outside the gpu.launch body (it would become an argument of the outlined kernel)"
             if registers.origin == "outside the gpu.launch" else "")
    origin = "argument" if where else registers.origin
    return [Violation(Rule.OPERANDS, f"{opcode.register_role} (register storage) comes from {origin}{where}, not a "
                                     f"memref.alloca: the GPU conversions lower only allocas (a private attribution "
                                     f"fails in convert-gpu-to-nvvm); use memref.alloca() : memref<Nxi32, "
                                     f"#gpu.address_space<private>> inside the kernel")]


def check_register_allocation_layout(query: Query, opcode: Opcode) -> list[Violation]:
    registers, _ = opcode.registers_and_shared(query.dst, query.src)
    if registers.memory != "private" or registers.allocation_layout is None:
        return []
    return [Violation(Rule.OPERANDS, f"{opcode.register_role} (register storage) is allocated by a memref.alloca "
                                     f"with layout {registers.allocation_layout}, which the LLVM conversion cannot "
                                     f"allocate (it allocates identity layouts only); allocate memref<Nxi32, "
                                     f"#gpu.address_space<private>> and take a memref.subview for another layout")]


def check_shared_origin(query: Query, opcode: Opcode) -> list[Violation]:
    _, shared = opcode.registers_and_shared(query.dst, query.src)
    if shared.memory != "shared" or shared.origin not in ("memref.alloca", "memref.alloc"):
        return []
    return [Violation(Rule.OPERANDS, f"{opcode.shared_role} is a workgroup {shared.origin}, which the NVPTX backend "
                                     f"cannot allocate (shared memory is declared, not allocated at run time); "
                                     f"declare it with memref.global in #gpu.address_space<workgroup>, or use "
                                     f"gpu.dynamic_shared_memory")]


def check_shared_alignment_limit(query: Query, opcode: Opcode) -> list[Violation]:
    _, shared = opcode.registers_and_shared(query.dst, query.src)
    problem = targets.alignment_problem(shared.base_alignment) if shared.base_alignment is not None else None
    if problem is None:
        return []
    return [Violation(Rule.OPERANDS, f"{opcode.shared_role}'s buffer declares {problem}; 16 is all a transfer needs")]


def check_register_offset(query: Query, opcode: Opcode) -> list[Violation]:
    registers, _ = opcode.registers_and_shared(query.dst, query.src)
    if registers.offset is not None:
        return []
    return [Violation(Rule.OPERANDS, f"{opcode.register_role} (register storage) has a dynamic offset; register "
                                     f"slots are compile-time constants, so use a register memref with a static "
                                     f"offset")]


def check_static_shapes(query: Query, opcode: Opcode) -> list[Violation]:
    """The bounds rule needs static shapes, so that every offset can be proven in bounds."""
    registers, shared = opcode.registers_and_shared(query.dst, query.src)
    return [
        Violation(Rule.BOUNDS, f"{role} has a dynamic shape; the contract needs a static shape to prove every "
                               f"offset in bounds")
        for role, operand in ((opcode.register_role, registers), (opcode.shared_role, shared))
        if operand.extent is None
    ]


def check_shared_size(query: Query, opcode: Opcode) -> list[Violation]:
    """No larger than the chip's shared memory per block (which also keeps every address in 32-bit arithmetic)."""
    _, shared = opcode.registers_and_shared(query.dst, query.src)
    limit = targets.max_shared_bytes(query.chip)
    reach = None if shared.extent is None else (shared.static_offset + shared.extent) * WORD_BYTES
    if reach is None or reach <= limit:
        return []
    return [Violation(Rule.BOUNDS, f"{opcode.shared_role} reaches {reach} bytes into its shared buffer, more than "
                                   f"the {limit} bytes a block can have{' on ' + query.chip if query.chip else ''}; "
                                   f"use a smaller tile")]


def check_register_size(query: Query, opcode: Opcode) -> list[Violation]:
    registers, _ = opcode.registers_and_shared(query.dst, query.src)
    words = None if registers.extent is None else registers.static_offset + registers.extent
    if words is None or words * WORD_BYTES <= MAX_LOCAL_BYTES:
        return []
    return [Violation(Rule.BOUNDS, f"{opcode.register_role} (register storage) has {words} words, more than the "
                                   f"{MAX_LOCAL_BYTES} bytes of local memory a thread can have; use a smaller memref")]


def check_static_shared_memory(query: Query, opcode: Opcode) -> list[Violation]:
    problem = targets.static_shared_problem(query.static_shared_bytes)
    return [Violation(Rule.BOUNDS, problem)] if problem else []


def check_dynamic_offset_alignment(query: Query, opcode: Opcode) -> list[Violation]:
    """The row-alignment rule's operand half: a dynamic region start proven a multiple of 4 words."""
    _, shared = opcode.registers_and_shared(query.dst, query.src)
    if shared.offset is not None or (shared.offset_multiple or 1) % WORDS == 0:
        return []
    proven = f"a multiple of {shared.offset_multiple} elements" if shared.offset_multiple else "nothing"
    return [
        Violation(
            Rule.ROW_ALIGNMENT,
            f"{opcode.shared_role} has a dynamic offset and the IR proves {proven} about it, but every row must "
            f"start 16-byte aligned; make the offset a multiple of 4 words (e.g. arith.muli %i, %c4 or "
            f"arith.andi %i, %c-4) before the memref.subview / reinterpret_cast",
        )
    ]
