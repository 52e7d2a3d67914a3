"""The legality contract of `tile.matrix_transfer`, in pure Python (no MLIR).

One checker serves the verifier pass (which gathers the operand facts from IR), the Python builder (which
fails early with the same messages) and the reference emulator. Every rule of the specification's
"Legality conditions" is here, each rejection naming the rule, the offending coordinate or value and a fix.

Coordinates of both layouts are (group?, repeat..., matrix, row, word) with (matrix, row, word) = (N, 8, 4):
the group axis exists only in scopes wider than a warp and selects the warp (`@warpid` on the register side).
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from mlir_tile.layout import Layout, ThreadStride, as_layout

ROWS, WORDS = 8, 4
WARP_SIZE = 32
ROW_BYTES = 16
WORD_BYTES = 4
ATTRIBUTES = ("opcode", "scope", "dst_layout", "src_layout")
SCOPES = ("warp", "warpgroup", "cta")
WARPGROUP_WARPS = 4
MAX_REGISTERS = 255  # per thread on sm_75 and later
CHIP = re.compile(r"sm_(\d{2,})[af]?")  # an NVIDIA GPU architecture name: sm_90, sm_90a, sm_100f
# The processors LLVM 22's NVPTX backend knows (`llc -mtriple=nvptx64-nvidia-cuda -mcpu=help`; a test keeps
# this set equal to that list). For any other chip the backend aborts the process ("Cannot select: ...").
NVPTX_CHIPS = frozenset(
    "sm_20 sm_21 sm_30 sm_32 sm_35 sm_37 sm_50 sm_52 sm_53 sm_60 sm_61 sm_62 sm_70 sm_72 sm_75 sm_80 sm_86 "
    "sm_87 sm_88 sm_89 sm_90 sm_90a sm_100 sm_100a sm_100f sm_101 sm_101a sm_101f sm_103 sm_103a sm_103f "
    "sm_110 sm_110a sm_110f sm_120 sm_120a sm_120f sm_121 sm_121a sm_121f".split()
)

_OPCODE = re.compile(
    r"^(?P<instruction>ldmatrix|stmatrix)\.sync\.aligned\.m8n8\.x(?P<count>[124])(?P<trans>\.trans)?"
    r"\.(?P<space>shared(?:::cta)?)\.b16$"
)
SUPPORTED_OPCODES = "ldmatrix|stmatrix .sync.aligned.m8n8.x{1,2,4}[.trans].shared[::cta].b16"


class ContractError(ValueError):
    """Raised by the builder and the emulator; carries every violation found."""

    def __init__(self, violations: Sequence["Violation"]):
        self.violations = list(violations)
        super().__init__("\n".join(str(v) for v in self.violations))


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


@dataclass(frozen=True)
class Opcode:
    text: str
    instruction: str
    count: int
    trans: bool

    @property
    def is_load(self) -> bool:
        return self.instruction == "ldmatrix"


def parse_opcode(text: str) -> Opcode:
    match = _OPCODE.match(text) if isinstance(text, str) else None
    if not match:
        raise ContractError([_opcode_violation(text)])
    return Opcode(text, match["instruction"], int(match["count"]), match["trans"] is not None)


def _opcode_violation(text) -> Violation:
    hint = ""
    if isinstance(text, str):
        if re.search(r"\.x(?![124]\.)\d+", text):
            hint = " (the matrix count is .x1, .x2 or .x4)"
        elif ".m8n8" not in text:
            hint = " (only the m8n8 shape with .b16 elements is supported)"
        elif not text.endswith(".b16"):
            hint = " (the element type is .b16; 32-bit containers hold two b16 elements)"
    return Violation(
        "opcode", f"unsupported opcode '{text}'{hint}; supported forms: {SUPPORTED_OPCODES}"
    )


@dataclass(frozen=True)
class Operand:
    """What the contract needs to know about one memref operand.

    memory: "private", "shared", "global" or another space's text. extent: elements reachable from the
    memref's first element (None when dynamic). offset: the memref's static offset in elements (None when
    dynamic); offset_multiple: for a dynamic offset, what the IR proves it a multiple of (None: nothing).
    base_alignment: bytes the IR proves for the address of offset 0 of the underlying buffer (None when
    nothing is proved).
    """

    memory: str
    element_bits: int = 32
    element_type: str = "i32"
    extent: int | None = None
    offset: int | None = 0
    base_alignment: int | None = None
    offset_multiple: int | None = None

    @property
    def static_offset(self) -> int:
        """The compile-time part of the offset: all of it, or 0 when the offset is dynamic."""
        return self.offset if self.offset is not None else 0


@dataclass(frozen=True)
class Scope:
    name: str
    warps: int  # warps that execute the transfer together (1 for "warp")

    @property
    def has_group_axis(self) -> bool:
        return self.name != "warp"


@dataclass
class Transfer:
    """A checked transfer: everything the lowering and the emulator need, in layout terms."""

    opcode: Opcode
    scope: Scope
    registers: Layout
    shared: Layout
    register_operand: Operand
    shared_operand: Operand
    repeat_shape: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        leading = 1 if self.scope.has_group_axis else 0
        self.repeat_shape = self.shared.shape[leading:-3]

    @property
    def group_rank(self) -> int:
        return 1 if self.scope.has_group_axis else 0

    def repeats(self) -> Iterable[tuple[int, ...]]:
        return itertools.product(*(range(n) for n in self.repeat_shape))

    def shared_offset(self, group: int, repeat: tuple[int, ...], matrix: int, row: int, word: int = 0) -> int:
        """Element offset of a shared word from the memref's first element (static offset included)."""
        coord = ((group,) if self.group_rank else ()) + repeat + (matrix, row, word)
        return self.shared_operand.static_offset + self.shared.offset(*coord)

    def register_slot(self, repeat: tuple[int, ...], matrix: int) -> int:
        """Register storage slot of (repeat, matrix) in each thread (static offset included)."""
        coord = ((0,) if self.group_rank else ()) + repeat + (matrix, 0, 0)
        return self.register_operand.offset + self.registers.offset(*coord)


def resolve_scope(scope, block_size: Sequence[int] | None) -> tuple[Scope | None, list[Violation]]:
    if scope == "warp":
        return Scope("warp", 1), []
    if scope == "warpgroup":
        return Scope("warpgroup", WARPGROUP_WARPS), []
    if scope == "cta":
        if block_size is None:
            return None, [
                Violation(
                    "scope",
                    "scope \"cta\" needs the block size: add known_block_size = array<i32: X, Y, Z> to the "
                    "enclosing gpu.func, or use scope \"warp\"",
                )
            ]
        threads = math.prod(block_size)
        if threads % WARP_SIZE:
            return None, []  # the participation rule reports the partial warp
        return Scope("cta", threads // WARP_SIZE), []
    if scope == "thread":
        return None, [
            Violation(
                "scope",
                "scope \"thread\" (the specification's default) cannot issue ldmatrix/stmatrix: they are "
                "warp-collective; use scope \"warp\" (or \"warpgroup\"/\"cta\" with a leading group axis)",
            )
        ]
    return None, [Violation("scope", f"unknown scope {scope!r}; use one of: {', '.join(SCOPES)}")]


def _coordinate_text(transfer_rank: int, group: bool, coord: tuple[int, ...]) -> str:
    names = []
    repeats = transfer_rank - 3 - (1 if group else 0)
    position = 0
    if group:
        names.append(f"warp={coord[0]}")
        position = 1
    if repeats:
        names.append("repeat=(" + ",".join(str(c) for c in coord[position : position + repeats]) + ")")
    names += [f"matrix={coord[-3]}", f"row={coord[-2]}", f"word={coord[-1]}"]
    return "(" + ", ".join(names) + ")"


def check(**arguments) -> tuple[Transfer | None, list[Violation]]:
    """Check one transfer (see `_check` for the arguments). Returns the checked Transfer (None when any
    rule fails) and the violations. The check is a pure function of its arguments, so repeated identical
    transfers (unrolled loops hold thousands) are checked once."""
    arguments["extra_attributes"] = tuple(arguments.get("extra_attributes", ()))
    if arguments.get("block_size") is not None:
        arguments["block_size"] = tuple(arguments["block_size"])
    try:
        transfer, violations = _check_cached(**arguments)
    except TypeError:  # an unhashable argument (only from malformed input): check without the cache
        transfer, violations = _check(**arguments)
    return transfer, list(violations)


@functools.lru_cache(maxsize=4096)
def _check_cached(**arguments):
    transfer, violations = _check(**arguments)
    return transfer, tuple(violations)


def _check(
    *,
    opcode,
    scope,
    dst_layout,
    src_layout,
    dst: Operand,
    src: Operand,
    extra_attributes: Iterable[str] = (),
    block_size: Sequence[int] | None = None,
    divergence: str | None = None,
    chip: str | None = None,
    ptx: int | None = None,
) -> tuple[Transfer | None, list[Violation]]:
    violations: list[Violation] = []
    for name in extra_attributes:
        violations.append(
            Violation(
                "attributes",
                f"unexpected attribute '{name}': instruction parameters are only {', '.join(ATTRIBUTES)}; "
                f"opcode qualifiers go in the opcode string and predication (pred) is not supported",
            )
        )

    parsed_opcode = None
    try:
        parsed_opcode = parse_opcode(opcode)
    except ContractError as error:
        violations += error.violations

    resolved_scope, scope_violations = resolve_scope(scope, block_size)
    violations += scope_violations
    violations += _participation(scope, block_size, divergence)

    layouts = {}
    for role, text in (("dst_layout", dst_layout), ("src_layout", src_layout)):
        try:
            layouts[role] = as_layout(text)
        except ValueError as error:
            violations.append(Violation("layout-syntax", f"{role}: {error}"))
    if parsed_opcode is None:
        return None, violations
    violations += _architecture(parsed_opcode, chip, ptx)

    if parsed_opcode.is_load:
        register_role, shared_role, registers, shared = "dst", "src", dst, src
    else:
        register_role, shared_role, registers, shared = "src", "dst", src, dst
    violations += _operand_roles(parsed_opcode, register_role, registers, shared_role, shared)
    if registers.memory != "private" or shared.memory != "shared":
        return None, violations  # which layout describes registers is unknown: checking them would mislead

    if len(layouts) < 2 or resolved_scope is None:
        return None, violations
    register_layout = layouts[f"{register_role}_layout"]
    shared_layout = layouts[f"{shared_role}_layout"]
    shape_violations = _shapes(parsed_opcode, resolved_scope, register_layout, shared_layout, register_role)
    violations += shape_violations
    if shape_violations:
        return None, violations

    transfer = Transfer(parsed_opcode, resolved_scope, register_layout, shared_layout, registers, shared)
    if registers.offset is not None:
        violations += _register_side(transfer, register_role)
    violations += _shared_side(transfer, shared_role)
    return (None if violations else transfer), violations


MINIMUM_ARCHITECTURE = {"ldmatrix": 75, "stmatrix": 90}
MINIMUM_PTX = {"ldmatrix": 65, "stmatrix": 78}  # PTX ISA version x 10 that introduced the instruction
# The lowest PTX version LLVM 22's NVPTX backend accepts for each chip (a test checks this against llc).
# With a lower `+ptxNN` feature in #nvvm.target the backend stops the process ("LLVM ERROR: PTX version
# ... does not support target ..."); with one too low for the instruction it cannot select it.
CHIP_MINIMUM_PTX = {
    "sm_20": 32, "sm_21": 32, "sm_30": 32, "sm_32": 40, "sm_35": 32, "sm_37": 41, "sm_50": 40, "sm_52": 41,
    "sm_53": 42, "sm_60": 50, "sm_61": 50, "sm_62": 50, "sm_70": 60, "sm_72": 61, "sm_75": 63, "sm_80": 70,
    "sm_86": 71, "sm_87": 74, "sm_88": 90, "sm_89": 78, "sm_90": 78, "sm_90a": 80, "sm_100": 86, "sm_100a": 86,
    "sm_100f": 88, "sm_101": 86, "sm_101a": 86, "sm_101f": 88, "sm_103": 88, "sm_103a": 88, "sm_103f": 88,
    "sm_110": 90, "sm_110a": 90, "sm_110f": 90, "sm_120": 87, "sm_120a": 87, "sm_120f": 88, "sm_121": 88,
    "sm_121a": 88, "sm_121f": 88,
}


def known_chips(minimum: int = 0) -> str:
    """The NVPTX chips of architecture `minimum` or newer, oldest first, as text for a diagnostic."""
    chips = sorted((c for c in NVPTX_CHIPS if int(CHIP.fullmatch(c).group(1)) >= minimum),
                   key=lambda c: (int(CHIP.fullmatch(c).group(1)), c))
    return ", ".join(chips)


def _architecture(opcode: Opcode, chip: str | None, ptx: int | None) -> list[Violation]:
    if chip is None:
        return []
    needed = MINIMUM_ARCHITECTURE[opcode.instruction]
    if chip not in NVPTX_CHIPS:
        return [Violation("target", f"the gpu.module targets '{chip}', a chip that LLVM's NVPTX backend does not "
                                    f"know; use one of {known_chips(needed)}")]
    if int(CHIP.fullmatch(chip).group(1)) < needed:
        return [
            Violation(
                "target",
                f"{opcode.instruction} needs sm_{needed} or newer, but the gpu.module targets {chip}; compile for "
                f"sm_{needed} or later (e.g. tile-to-ptx{{chip=sm_90}})",
            )
        ]
    needed_ptx = max(MINIMUM_PTX[opcode.instruction], CHIP_MINIMUM_PTX[chip])
    if ptx is None or ptx >= needed_ptx:
        return []
    version = lambda number: f"{number // 10}.{number % 10}"
    return [
        Violation(
            "target",
            f"the gpu.module's #nvvm.target asks for PTX {version(ptx)} (features +ptx{ptx}), but "
            f"{opcode.instruction} needs PTX {version(MINIMUM_PTX[opcode.instruction])} and {chip} needs "
            f"{version(CHIP_MINIMUM_PTX[chip])}; use +ptx{needed_ptx} or later, or leave the PTX version out",
        )
    ]


def _participation(scope, block_size, divergence) -> list[Violation]:
    found = []
    if divergence:
        found.append(
            Violation(
                "participation",
                f"all 32 lanes must execute the transfer, but {divergence}; move the transfer out of "
                f"thread-dependent control flow (predicate the data, not the instruction)",
            )
        )
    if block_size is not None:
        threads = math.prod(block_size)
        unit = WARPGROUP_WARPS * WARP_SIZE if scope == "warpgroup" else WARP_SIZE
        if threads % unit:
            found.append(
                Violation(
                    "participation",
                    f"known_block_size {tuple(block_size)} has {threads} threads, not a multiple of {unit}: "
                    f"a partially populated {'warpgroup' if unit > WARP_SIZE else 'warp'} cannot execute the "
                    f"transfer; round the block size up to a multiple of {unit}",
                )
            )
    return found


def _operand_roles(opcode: Opcode, register_role, registers: Operand, shared_role, shared: Operand):
    found = []
    direction = "reads shared memory into registers" if opcode.is_load else "writes registers to shared memory"
    order = "(dst = registers, src = shared)" if opcode.is_load else "(dst = shared, src = registers)"
    if registers.memory != "private":
        found.append(
            Violation(
                "operands",
                f"{opcode.instruction} {direction}, so {register_role} must be register storage (a memref in "
                f"#gpu.address_space<private>), but it is in {registers.memory} memory; operand order is "
                f"{order}",
            )
        )
    if shared.memory != "shared":
        where = f"{shared.memory} memory"
        extra = " (ldmatrix/stmatrix cannot address global memory; stage the tile in shared memory)" if (
            shared.memory == "global"
        ) else ""
        found.append(
            Violation(
                "operands",
                f"{opcode.instruction} {direction}, so {shared_role} must be shared memory (a memref in "
                f"#gpu.address_space<workgroup>), but it is in {where}{extra}; operand order is {order}",
            )
        )
    for role, operand in ((register_role, registers), (shared_role, shared)):
        if operand.element_bits != 32:
            hint = (
                "; expose packed 16-bit storage as b32 words (a memref of i32 over the same bytes, and "
                "mlir_tile.layout.pack_b16_as_b32 for its layout)"
                if operand.element_bits == 16
                else ""
            )
            found.append(
                Violation(
                    "operands",
                    f"{role} has element type {operand.element_type}; both operands use 32-bit containers "
                    f"(i32 or f32), each holding two b16 elements{hint}",
                )
            )
        if operand.extent is None:
            found.append(
                Violation(
                    "bounds",
                    f"{role} has a dynamic shape; the contract needs a static shape to prove every offset in bounds",
                )
            )
        if operand.offset is None and role == register_role:
            found.append(
                Violation(
                    "operands",
                    f"{role} (register storage) has a dynamic offset; register slots are compile-time constants, "
                    f"so use a register memref with a static offset",
                )
            )
        elif operand.offset is None and (operand.offset_multiple or 1) % WORDS:
            proven = f"a multiple of {operand.offset_multiple} elements" if operand.offset_multiple else "nothing"
            found.append(
                Violation(
                    "row-alignment",
                    f"{role} has a dynamic offset and the IR proves {proven} about it, but every row must start "
                    f"16-byte aligned; make the offset a multiple of 4 words (e.g. arith.muli %i, %c4 or "
                    f"arith.andi %i, %c-4) before the memref.subview / reinterpret_cast",
                )
            )
    return found


def _shapes(opcode: Opcode, scope: Scope, registers: Layout, shared: Layout, register_role) -> list[Violation]:
    found = []
    atom = (opcode.count, ROWS, WORDS)
    for role, layout in ((register_role, registers), ("dst" if register_role == "src" else "src", shared)):
        if layout.rank < 3 or layout.shape[-3:] != atom:
            found.append(
                Violation(
                    "shape",
                    f"{role}_layout {layout} must end in (matrix,row,word) = {_t(atom)} for "
                    f"{opcode.text} (.x{opcode.count}); leading axes are "
                    f"{'the group axis, then ' if scope.has_group_axis else ''}repeats",
                )
            )
    if found:
        return found
    words = math.prod(registers.shape[(1 if scope.has_group_axis else 0):-3]) * opcode.count
    if words > MAX_REGISTERS:
        found.append(
            Violation(
                "shape",
                f"the transfer moves {words} words per thread ({words // opcode.count} repeats x {opcode.count} "
                f"matrices), but a thread has at most {MAX_REGISTERS} registers, so they would spill to local "
                f"memory; split it into transfers of at most {MAX_REGISTERS} words",
            )
        )
        return found
    if registers.shape != shared.shape:
        found.append(
            Violation(
                "shape",
                f"dst_layout and src_layout have different shapes: {_t(registers.shape)} (registers) vs "
                f"{_t(shared.shape)} (shared); both describe the same transfer coordinates",
            )
        )
        return found
    if scope.has_group_axis:
        if registers.rank < 4 or registers.shape[0] != scope.warps:
            found.append(
                Violation(
                    "scope",
                    f"scope \"{scope.name}\" has {scope.warps} warps, so both layouts need a leading group axis "
                    f"of extent {scope.warps} (register stride 1@warpid); got shape {_t(registers.shape)}",
                )
            )
    return found


def _t(items) -> str:
    return "(" + ",".join(str(i) for i in items) + ")"


def _register_side(transfer: Transfer, role: str) -> list[Violation]:
    found = []
    layout, scope = transfer.registers, transfer.scope
    group = transfer.group_rank
    for axis, stride in enumerate(layout.stride):
        is_group_axis = group and axis == 0
        if isinstance(stride, ThreadStride) and stride.axis == "warpid":
            if not scope.has_group_axis:
                found.append(
                    Violation(
                        "register-owner",
                        f"{role}_layout {layout} axis {axis} has stride {stride}, but scope \"warp\" has no group "
                        f"axis; @warpid is only for the leading group axis of scope \"warpgroup\" or \"cta\"",
                    )
                )
            elif not is_group_axis or stride.scale != 1:
                found.append(
                    Violation(
                        "register-owner",
                        f"{role}_layout {layout} axis {axis} has stride {stride}; only the leading group axis "
                        f"maps to warps, with stride 1@warpid",
                    )
                )
        elif is_group_axis:
            found.append(
                Violation(
                    "register-owner",
                    f"{role}_layout {layout}: the group axis must have stride 1@warpid (warp g of the "
                    f"{scope.name} holds the registers of group coordinate g), got {stride}",
                )
            )
    if found:
        return found

    for axis, stride in enumerate(layout.stride[:-2]):
        if isinstance(stride, ThreadStride) and stride.axis == "laneid":
            return [
                Violation(
                    "register-owner",
                    f"{role}_layout {layout} axis {axis} has stride {stride}; lanes are fixed by the instruction "
                    f"(word (matrix,row,word) goes to lane 4*row+word), so only the row and word axes map to "
                    f"@laneid",
                )
            ]
    # The strides are linear, so checking one matrix at repeat 0 proves every coordinate.
    origin = (0,) * (layout.rank - 2)
    for row in range(ROWS):
        for word in range(WORDS):
            point = layout(*origin, row, word)
            owner = point.threads.get("laneid", 0)
            expected = WORDS * row + word
            if owner == expected and point.offset == 0:
                continue
            text = _coordinate_text(layout.rank, bool(group), origin + (row, word))
            if owner != expected:
                problem = (
                    f"register word {text} is mapped to lane {owner}, but the instruction delivers it to lane "
                    f"4*row+word = {expected}"
                )
            else:
                problem = (
                    f"register word {text} is mapped to register slot offset {point.offset} of its matrix; row and "
                    f"word select the lane, not a register"
                )
            return [
                Violation(
                    "register-owner",
                    f"{role}_layout {layout}: {problem}; give the row axis stride 4@laneid and the word axis "
                    f"1@laneid",
                )
            ]
    extent = transfer.register_operand.extent
    slots: dict[int, tuple] = {}
    for repeat in transfer.repeats():
        for matrix in range(transfer.opcode.count):
            slot = transfer.register_slot(repeat, matrix)
            where = f"(repeat={_t(repeat)}, matrix={matrix})" if repeat else f"(matrix={matrix})"
            if extent is not None and not 0 <= slot < extent:
                found.append(
                    Violation(
                        "bounds",
                        f"{role}_layout {layout}: register slot {slot} of {where} is outside {role}, which has "
                        f"{extent} slots per thread; enlarge the register memref or change the register strides",
                    )
                )
                return found
            if transfer.opcode.is_load and slot in slots:
                found.append(
                    Violation(
                        "register-overlap",
                        f"{role}_layout {layout}: loaded register slot {slot} is written by both {slots[slot]} and "
                        f"{where}; loaded slots must be distinct, so give the repeat and matrix axes strides that "
                        f"separate them",
                    )
                )
                return found
            slots.setdefault(slot, where)
    return found


def _shared_side(transfer: Transfer, role: str) -> list[Violation]:
    layout, operand = transfer.shared, transfer.shared_operand
    group = transfer.group_rank
    threads = [(axis, s) for axis, s in enumerate(layout.stride) if isinstance(s, ThreadStride)]
    if threads:
        axis, stride = threads[0]
        return [
            Violation(
                "shared-row",
                f"{role}_layout {layout} axis {axis} has thread stride {stride}; the shared layout gives memory "
                f"strides only (lane 8*matrix+row provides row (matrix,row)'s address by definition)",
            )
        ]
    if layout.stride[-1] != 1:
        return [
            Violation(
                "shared-row",
                f"{role}_layout {layout}: the word axis has stride {layout.stride[-1]}, so a row's words are at "
                f"offsets {', '.join(str(w * layout.stride[-1]) for w in range(WORDS))}: a gap inside a 16-byte "
                f"row; each shared row is 4 consecutive 32-bit words (word stride 1)",
            )
        ]
    found: list[Violation] = []
    if operand.base_alignment is None or operand.base_alignment < ROW_BYTES:
        proven = "no alignment" if operand.base_alignment is None else f"only {operand.base_alignment}-byte alignment"
        found.append(
            Violation(
                "row-alignment",
                f"{role}: the IR proves {proven} for the shared buffer, but every row must start 16-byte aligned; "
                f"declare it with memref.global ... {{alignment = 16 : i64}} (or memref.alloca/alloc "
                f"{{alignment = 16}}, or memref.assume_alignment %buf, 16)",
            )
        )
    rows: dict[int, tuple[int, ...]] = {}
    extent = operand.extent
    for coord in _row_coordinates(layout):
        relative = layout.offset(*coord)
        start = operand.static_offset + relative  # a dynamic offset adds a multiple of 4 words
        if extent is not None and not (0 <= relative and relative + WORDS <= extent):
            found.append(
                Violation(
                    "bounds",
                    f"{role}_layout {layout}: shared row {_coordinate_text(layout.rank, bool(group), coord)} covers "
                    f"elements {relative}..{relative + WORDS - 1}, "
                    f"outside {role}'s {extent} elements; enlarge the buffer or change the strides",
                )
            )
            return found
        if (start * WORD_BYTES) % ROW_BYTES:
            found.append(
                Violation(
                    "row-alignment",
                    f"{role}_layout {layout}: shared row {_coordinate_text(layout.rank, bool(group), coord)} starts at "
                    f"byte {start * WORD_BYTES} "
                    f"(element {start}{', memref offset ' + str(operand.offset) + ' included' if operand.offset else ''}), "
                    f"not a multiple of 16; make every matrix/row/repeat stride and the region start a multiple "
                    f"of 4 words",
                )
            )
            return found
        if transfer.opcode.is_load:
            continue
        writer = rows.setdefault(start, coord)
        if writer is coord:
            continue
        same_warp = writer[:group] == coord[:group]
        if same_warp and writer[group:-3] != coord[group:-3]:
            continue  # a later repeat of the same warp overwrites in program order: no race
        found.append(
            Violation(
                "store-race",
                f"{role}_layout {layout}: stmatrix rows {_coordinate_text(layout.rank, bool(group), writer)} and "
                f"{_coordinate_text(layout.rank, bool(group), coord)} both write elements {start}..{start + WORDS - 1} "
                f"{'in one instruction' if same_warp else 'from different warps'}; destination rows must not "
                f"overlap",
            )
        )
        return found
    return found


def _row_coordinates(layout: Layout) -> Iterable[tuple[int, ...]]:
    return (c + (0,) for c in itertools.product(*(range(n) for n in layout.shape[:-1])))


def require(**kwargs) -> Transfer:
    """`check`, raising ContractError with every violation; returns the checked Transfer."""
    transfer, violations = check(**kwargs)
    if violations:
        raise ContractError(violations)
    assert transfer is not None
    return transfer
