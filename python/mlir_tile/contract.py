"""The legality contract of `tile.matrix_transfer`, in pure Python (no MLIR).

Every sentence of the specification's "Legality conditions" is one `Rule`, checked by one function below
(`RULE_CHECKS` maps each rule to it). The verifier pass, the lowering and the Python builder reach `check`
through one adapter (`mlir_tile.passes.adapter`), so they cannot disagree; the reference emulator calls it
directly. Each rejection names its rule, the offending coordinate or value and a fix.

Coordinates of both layouts are (group?, repeat..., matrix, row, word) with (matrix, row, word) = (N, 8, 4):
the group axis exists only in scopes wider than a warp and selects the warp (`@warpid` on the register side).
"""
from __future__ import annotations

import enum
import functools
import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from mlir_tile import targets
from mlir_tile.layout import Layout, ThreadStride, as_layout

ROWS, WORDS = 8, 4
WARP_SIZE = 32
ROW_BYTES = 16
WORD_BYTES = 4
ATTRIBUTES = ("opcode", "scope", "dst_layout", "src_layout")  # the op's attributes, in the IRDL file's order
SCOPES = ("warp", "warpgroup", "cta")
WARPGROUP_WARPS = 4
MAX_REGISTERS = 255  # per thread on sm_75 and later
MAX_LOCAL_BYTES = 512 * 1024  # local memory per thread: where register storage that does not fit goes


_OPCODE = re.compile(
    r"(?P<instruction>ldmatrix|stmatrix)\.sync\.aligned\.m8n8\.x(?P<count>[124])(?P<trans>\.trans)?"
    r"\.(?P<space>shared(?:::cta)?)\.b16"
)
SUPPORTED_OPCODES = "ldmatrix|stmatrix .sync.aligned.m8n8.x{1,2,4}[.trans].shared[::cta].b16"


class Rule(str, enum.Enum):
    """The legality rules; the value is the `[tag]` every diagnostic starts with."""

    OPCODE = "opcode"
    ATTRIBUTES = "attributes"
    SCOPE = "scope"
    OPERANDS = "operands"
    SHAPE = "shape"
    SHARED_ROW = "shared-row"
    ROW_ALIGNMENT = "row-alignment"
    STORE_RACE = "store-race"
    BOUNDS = "bounds"
    REGISTER_OWNER = "register-owner"
    REGISTER_OVERLAP = "register-overlap"
    PARTICIPATION = "participation"
    TARGET = "target"
    LAYOUT_SYNTAX = "layout-syntax"

    def __str__(self) -> str:
        return self.value

    @property
    def summary(self) -> str:
        return _SUMMARIES[self]


_SUMMARIES = {
    Rule.OPCODE: f"the opcode is one of {SUPPORTED_OPCODES}, nothing else",
    Rule.ATTRIBUTES: "only opcode, scope, dst_layout, src_layout; no opcode-specific keyword (pred)",
    Rule.SCOPE: "warp, warpgroup or cta (with known_block_size); wider scopes lead with a group axis of their warps",
    Rule.OPERANDS: "registers in private memory, shared memory in workgroup memory, in the opcode's operand "
    "order; 32-bit elements; register storage at a static offset",
    Rule.SHAPE: "both layouts have one shape ending in (N,8,4) for .xN; at most 255 words per thread",
    Rule.SHARED_ROW: "a shared row is 4 consecutive words (word stride 1); shared layouts have no thread strides",
    Rule.ROW_ALIGNMENT: "every shared row starts 16-byte aligned: buffer alignment, memref offset and strides",
    Rule.STORE_RACE: "stmatrix rows of one instruction, or of different warps, do not overlap",
    Rule.BOUNDS: "static shapes; every shared row and register slot lies inside its memref",
    Rule.REGISTER_OWNER: "register word (i,j,w) belongs to lane 4*j+w; @warpid only on the group axis",
    Rule.REGISTER_OVERLAP: "loaded register slots of different (repeat, matrix) pairs are distinct",
    Rule.PARTICIPATION: "all 32 lanes execute the transfer: no thread-dependent control flow around it; "
    "known_block_size a multiple of the scope's threads",
    Rule.TARGET: "the chip is one the backend knows and new enough (ldmatrix sm_75, stmatrix sm_90); a +ptxNN "
    "feature is new enough for the instruction and the chip",
    Rule.LAYOUT_SYNTAX: "layout text parses as (extents):(strides)",
}


class ContractError(ValueError):
    """Raised by the builder and the emulator; carries every violation found."""

    def __init__(self, violations: Sequence["Violation"]):
        self.violations = list(violations)
        super().__init__("\n".join(str(v) for v in self.violations))


@dataclass(frozen=True)
class Violation:
    rule: Rule
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

    @property
    def register_role(self) -> str:
        """Which operand holds the registers: dst for ldmatrix, src for stmatrix."""
        return "dst" if self.is_load else "src"

    @property
    def shared_role(self) -> str:
        return "src" if self.is_load else "dst"

    def registers_and_shared(self, dst, src) -> tuple:
        """(the register operand, the shared operand) of `dst, src`: the one place the operand order is read."""
        return (dst, src) if self.is_load else (src, dst)

    def dst_and_src(self, registers, shared) -> tuple:
        """The inverse of `registers_and_shared`."""
        return self.registers_and_shared(registers, shared)


def parse_opcode(text: str) -> Opcode:
    match = _OPCODE.fullmatch(text) if isinstance(text, str) else None
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
    shown = text.encode("unicode_escape").decode() if isinstance(text, str) else text
    return Violation(Rule.OPCODE, f"unsupported opcode '{shown}'{hint}; supported forms: {SUPPORTED_OPCODES}")


@dataclass(frozen=True)
class Operand:
    """What the contract needs to know about one memref operand.

    memory: "private", "shared", "global" or another space's text. extent: elements reachable from the
    memref's first element (None when dynamic). offset: the memref's static offset in elements (None when
    dynamic); offset_multiple: for a dynamic offset, what the IR proves it a multiple of (None: nothing).
    base_alignment: bytes the IR proves for the address of offset 0 of the underlying buffer (None when
    nothing is proved). origin: what allocated the buffer (the op's name, "memref.global", or "argument").
    contiguous: every offset up to the extent is an element (no holes between rows of a strided memref).
    """

    memory: str
    element_bits: int = 32
    element_type: str = "i32"
    extent: int | None = None
    offset: int | None = 0
    base_alignment: int | None = None
    offset_multiple: int | None = None
    origin: str | None = None
    contiguous: bool = True

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
    """A transfer whose opcode, scope, operands and shapes are known: what the per-coordinate rules, the
    lowering and the emulator read, in layout terms."""

    opcode: Opcode
    scope: Scope
    registers: Layout
    shared: Layout
    register_operand: Operand
    shared_operand: Operand
    repeat_shape: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.repeat_shape = self.shared.sizes[self.group_rank : -3]

    @property
    def group_rank(self) -> int:
        return 1 if self.scope.has_group_axis else 0

    @property
    def register_role(self) -> str:
        return self.opcode.register_role

    @property
    def shared_role(self) -> str:
        return self.opcode.shared_role

    def repeats(self) -> Iterable[tuple[int, ...]]:
        return itertools.product(*(range(n) for n in self.repeat_shape))

    def shared_offset(self, group: int, repeat: tuple[int, ...], matrix: int, row: int, word: int = 0) -> int:
        """Element offset of a shared word from the memref's first element (static offset included)."""
        coord = ((group,) if self.group_rank else ()) + repeat + (matrix, row, word)
        return self.shared_operand.static_offset + self.shared.offset(*coord)

    def shared_linear_offset(self, group: int, repeat: tuple[int, ...], matrix: int, row: int) -> int:
        """The shared layout's offset of a row before its swizzle (and without the memref offset)."""
        coord = ((group,) if self.group_rank else ()) + repeat + (matrix, row, 0)
        return self.shared.linear_offset(*coord)

    def register_slot(self, repeat: tuple[int, ...], matrix: int) -> int:
        """Register storage slot of (repeat, matrix) in each thread (static offset included)."""
        coord = ((0,) if self.group_rank else ()) + repeat + (matrix, 0, 0)
        return self.register_operand.offset + self.registers.offset(*coord)

    def coordinate_text(self, coord: tuple[int, ...]) -> str:
        """`(warp=1, repeat=(0,2), matrix=3, row=4, word=0)`: how every diagnostic names a coordinate."""
        names = []
        if self.group_rank:
            names.append(f"warp={coord[0]}")
        repeat = coord[self.group_rank : -3]
        if repeat:
            names.append("repeat=" + _t(repeat))
        names += [f"matrix={coord[-3]}", f"row={coord[-2]}", f"word={coord[-1]}"]
        return "(" + ", ".join(names) + ")"


# ----- the entry point -----
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


def require(**kwargs) -> Transfer:
    """`check`, raising ContractError with every violation; returns the checked Transfer."""
    transfer, violations = check(**kwargs)
    if violations:
        raise ContractError(violations)
    assert transfer is not None
    return transfer


def require_layouts(opcode: str, registers, shared, *, register_slots: int, shared_words: int,
                    scope: str = "warp", base_alignment: int = 16, block_size: Sequence[int] | None = None) -> Transfer:
    """`require` for a transfer given by its register and shared layouts (in either order of dst and src) over
    plain buffers: `register_slots` words of registers per thread, `shared_words` words of shared memory at
    offset 0, aligned to `base_alignment` bytes. What the model, the emulator and the benchmarks start from."""
    parsed = parse_opcode(opcode)
    dst_layout, src_layout = parsed.dst_and_src(registers, shared)
    dst, src = parsed.dst_and_src(Operand("private", extent=register_slots),
                                  Operand("shared", extent=shared_words, base_alignment=base_alignment))
    return require(opcode=opcode, scope=scope, dst_layout=dst_layout, src_layout=src_layout, dst=dst, src=src,
                   block_size=block_size)


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
    device_code: bool = True,
    static_shared_bytes: int | None = None,
) -> tuple[Transfer | None, list[Violation]]:
    """The rules in three stages: those that need nothing else, the shapes (which need the opcode, the
    scope, the layouts and operands of the right kinds), then the per-coordinate rules on the Transfer."""
    violations = check_attributes(extra_attributes)
    parsed_opcode, found = check_opcode(opcode)
    violations += found
    resolved_scope, found = check_scope(scope, block_size)
    violations += found
    violations += check_participation(scope, block_size, divergence)
    layouts, found = check_layout_syntax({"dst": dst_layout, "src": src_layout})
    violations += found
    if parsed_opcode is None:
        return None, violations
    violations += check_target(parsed_opcode, chip, ptx, device_code)
    registers, shared = parsed_opcode.registers_and_shared(dst, src)
    violations += check_operands(parsed_opcode, registers, shared)
    violations += check_operand_bounds(parsed_opcode, registers, shared, chip, static_shared_bytes)
    violations += check_dynamic_offset_alignment(parsed_opcode, registers, shared)
    wrong_memory = registers.memory != "private" or shared.memory != "shared"
    if wrong_memory or len(layouts) < 2 or resolved_scope is None:
        return None, violations  # which layout describes registers is unknown: checking them would mislead
    register_layout, shared_layout = layouts[parsed_opcode.register_role], layouts[parsed_opcode.shared_role]
    found = check_shape(parsed_opcode, resolved_scope, register_layout, shared_layout)
    violations += found
    if found:
        return None, violations
    transfer = Transfer(parsed_opcode, resolved_scope, register_layout, shared_layout, registers, shared)
    violations += check_transfer(transfer)
    return (None if violations else transfer), violations


def check_transfer(transfer: Transfer) -> list[Violation]:
    """The per-coordinate rules. Slots are only meaningful once the lanes own the right words (and the
    register offset is static), rows once each is four consecutive words: the rules after each of those
    run only when it holds."""
    found = []
    if transfer.register_operand.offset is not None:
        owner = check_register_owner(transfer)
        found += owner or check_register_bounds(transfer) + check_register_overlap(transfer)
    rows = check_shared_row(transfer)
    found += rows or check_shared_bounds(transfer) + check_row_alignment(transfer) + check_store_race(transfer)
    return found


# ----- the rules that need no transfer -----
def check_attributes(extra_attributes: Iterable[str]) -> list[Violation]:
    return [
        Violation(
            Rule.ATTRIBUTES,
            f"unexpected attribute '{name}': instruction parameters are only {', '.join(ATTRIBUTES)}; opcode "
            f"qualifiers go in the opcode string and predication (pred) is not supported",
        )
        for name in extra_attributes
    ]


def check_opcode(opcode) -> tuple[Opcode | None, list[Violation]]:
    try:
        return parse_opcode(opcode), []
    except ContractError as error:
        return None, error.violations


def check_scope(scope, block_size: Sequence[int] | None) -> tuple[Scope | None, list[Violation]]:
    if scope == "warp":
        return Scope("warp", 1), []
    if scope == "warpgroup":
        return Scope("warpgroup", WARPGROUP_WARPS), []
    if scope == "cta":
        if block_size is None:
            return None, [
                Violation(
                    Rule.SCOPE,
                    "scope \"cta\" needs the block size: add known_block_size = array<i32: X, Y, Z> to the "
                    "enclosing gpu.func, or use scope \"warp\"",
                )
            ]
        threads = math.prod(block_size)
        if threads % WARP_SIZE or targets.block_size_problem(block_size):
            return None, []  # the participation rule reports the partial warp or the impossible block
        return Scope("cta", threads // WARP_SIZE), []
    if scope == "thread":
        return None, [
            Violation(
                Rule.SCOPE,
                "scope \"thread\" (the specification's default) cannot issue ldmatrix/stmatrix: they are "
                "warp-collective; use scope \"warp\" (or \"warpgroup\"/\"cta\" with a leading group axis)",
            )
        ]
    return None, [Violation(Rule.SCOPE, f"unknown scope {scope!r}; use one of: {', '.join(SCOPES)}")]


def check_participation(scope, block_size, divergence) -> list[Violation]:
    found = []
    if divergence:
        found.append(
            Violation(
                Rule.PARTICIPATION,
                f"all 32 lanes must execute the transfer, but {divergence}; move the transfer out of "
                f"thread-dependent control flow (predicate the data, not the instruction)",
            )
        )
    if block_size is not None and targets.block_size_problem(block_size):
        found.append(Violation(Rule.PARTICIPATION, f"known_block_size {tuple(block_size)} {targets.block_size_problem(block_size)}"))
    elif block_size is not None:
        threads = math.prod(block_size)
        unit = WARPGROUP_WARPS * WARP_SIZE if scope == "warpgroup" else WARP_SIZE
        if threads % unit:
            found.append(
                Violation(
                    Rule.PARTICIPATION,
                    f"known_block_size {tuple(block_size)} has {threads} threads, not a multiple of {unit}: "
                    f"a partially populated {'warpgroup' if unit > WARP_SIZE else 'warp'} cannot execute the "
                    f"transfer; round the block size up to a multiple of {unit}",
                )
            )
    return found


def check_layout_syntax(texts: dict) -> tuple[dict[str, Layout], list[Violation]]:
    """The parsed layouts by role ("dst", "src"), and a violation for each that does not parse."""
    layouts, found = {}, []
    for role, text in texts.items():
        try:
            layouts[role] = as_layout(text)
        except ValueError as error:
            found.append(Violation(Rule.LAYOUT_SYNTAX, f"{role}_layout: {error}"))
    return layouts, found


def check_target(opcode: Opcode, chip: str | None, ptx: int | None, device_code: bool = True) -> list[Violation]:
    if not device_code:
        return [Violation(Rule.TARGET, "the transfer is in host code, outside any gpu.module or gpu.launch body; "
                                       "ldmatrix/stmatrix run on the GPU: put it in a gpu.func of a gpu.module")]
    if chip is None:
        return []
    needed = targets.MINIMUM_ARCHITECTURE[opcode.instruction]
    problem = targets.chip_problem(chip, needed)
    if problem:
        return [Violation(Rule.TARGET, f"the gpu.module's #nvvm.target: chip {problem}")]
    if targets.architecture(chip) < needed:
        return [
            Violation(
                Rule.TARGET,
                f"{opcode.instruction} needs sm_{needed} or newer, but the gpu.module targets {chip}; compile for "
                f"sm_{needed} or later (e.g. tile-to-ptx{{chip={targets.DEFAULT_CHIP}}})",
            )
        ]
    needed_ptx = max(targets.MINIMUM_PTX[opcode.instruction], targets.CHIP_MINIMUM_PTX[chip])
    if ptx is not None and ptx > targets.MAXIMUM_PTX:
        return [Violation(Rule.TARGET, f"the gpu.module's #nvvm.target asks for PTX {targets.ptx_version_text(ptx)} "
                                       f"(features +ptx{ptx}), but {targets.ptx_feature_problem(chip, ptx)}; use "
                                       f"+ptx{targets.MAXIMUM_PTX} or lower, or leave the PTX version out")]
    if ptx is None and targets.CHIP_MINIMUM_PTX[chip] < needed_ptx:
        return [
            Violation(
                Rule.TARGET,
                f"the gpu.module's #nvvm.target names no PTX version, so LLVM uses {chip}'s lowest, "
                f"{targets.ptx_version_text(targets.CHIP_MINIMUM_PTX[chip])}, but {opcode.instruction} needs PTX "
                f"{targets.ptx_version_text(needed_ptx)}; add features = \"+ptx{needed_ptx}\" to the #nvvm.target",
            )
        ]
    if ptx is None or ptx >= needed_ptx:
        return []
    version = targets.ptx_version_text
    return [
        Violation(
            Rule.TARGET,
            f"the gpu.module's #nvvm.target asks for PTX {version(ptx)} (features +ptx{ptx}), but "
            f"{opcode.instruction} needs PTX {version(targets.MINIMUM_PTX[opcode.instruction])} and {chip} needs "
            f"{version(targets.CHIP_MINIMUM_PTX[chip])}; use +ptx{needed_ptx} or later, or leave the PTX version out",
        )
    ]


def check_operands(opcode: Opcode, registers: Operand, shared: Operand) -> list[Violation]:
    """Memory spaces in the opcode's operand order, 32-bit elements, register storage at a static offset."""
    found = []
    direction = "reads shared memory into registers" if opcode.is_load else "writes registers to shared memory"
    order = "(dst = registers, src = shared)" if opcode.is_load else "(dst = shared, src = registers)"
    if registers.memory != "private":
        found.append(
            Violation(
                Rule.OPERANDS,
                f"{opcode.instruction} {direction}, so {opcode.register_role} must be register storage (a memref "
                f"in #gpu.address_space<private>), but it is in {registers.memory} memory; operand order is "
                f"{order}",
            )
        )
    if shared.memory != "shared":
        extra = " (ldmatrix/stmatrix cannot address global memory; stage the tile in shared memory)" if (
            shared.memory == "global"
        ) else ""
        found.append(
            Violation(
                Rule.OPERANDS,
                f"{opcode.instruction} {direction}, so {opcode.shared_role} must be shared memory (a memref in "
                f"#gpu.address_space<workgroup>), but it is in {shared.memory} memory{extra}; operand order is "
                f"{order}",
            )
        )
    for role, operand in ((opcode.register_role, registers), (opcode.shared_role, shared)):
        if operand.element_bits == 32 and operand.element_type not in ("i32", "f32"):
            found.append(
                Violation(
                    Rule.OPERANDS,
                    f"{role} has element type {operand.element_type}; the 32-bit containers are i32 or f32 "
                    f"(signless): view the buffer as i32",
                )
            )
        if operand.element_bits != 32:
            hint = (
                "; expose packed 16-bit storage as b32 words (a memref of i32 over the same bytes, and "
                "mlir_tile.layout.pack_b16_as_b32 for its layout)"
                if operand.element_bits == 16
                else ""
            )
            found.append(
                Violation(
                    Rule.OPERANDS,
                    f"{role} has element type {operand.element_type}; both operands use 32-bit containers "
                    f"(i32 or f32), each holding two b16 elements{hint}",
                )
            )
    if not registers.contiguous:
        found.append(
            Violation(
                Rule.OPERANDS,
                f"{opcode.register_role} (register storage) is a strided memref with holes between its "
                f"elements; register slots are offsets into contiguous storage: use a contiguous memref",
            )
        )
    if registers.origin not in (None, "memref.alloca") and registers.memory == "private":
        found.append(
            Violation(
                Rule.OPERANDS,
                f"{opcode.register_role} (register storage) comes from {registers.origin}, not a memref.alloca: "
                f"the GPU conversions lower only allocas (a private attribution fails in convert-gpu-to-nvvm); "
                f"use memref.alloca() : memref<Nxi32, #gpu.address_space<private>>",
            )
        )
    if shared.origin in ("memref.alloca", "memref.alloc") and shared.memory == "shared":
        found.append(
            Violation(
                Rule.OPERANDS,
                f"{opcode.shared_role} is a workgroup {shared.origin}, which the NVPTX backend cannot allocate "
                f"(shared memory is declared, not allocated at run time); declare it with memref.global in "
                f"#gpu.address_space<workgroup>, or use gpu.dynamic_shared_memory",
            )
        )
    if shared.base_alignment is not None and shared.base_alignment > targets.MAX_ALIGNMENT:
        found.append(
            Violation(
                Rule.OPERANDS,
                f"{opcode.shared_role}'s buffer declares alignment {shared.base_alignment}, above the "
                f"{targets.MAX_ALIGNMENT} bytes ptxas accepts; 16 is all a transfer needs",
            )
        )
    if registers.offset is None:
        found.append(
            Violation(
                Rule.OPERANDS,
                f"{opcode.register_role} (register storage) has a dynamic offset; register slots are "
                f"compile-time constants, so use a register memref with a static offset",
            )
        )
    return found


def check_operand_bounds(opcode: Opcode, registers: Operand, shared: Operand, chip: str | None = None,
                         static_shared_bytes: int | None = None) -> list[Violation]:
    """The bounds rule's operand half: static shapes, so that every offset can be proven in bounds, and buffers
    no larger than the chip has (which also keeps every address in 32-bit arithmetic)."""
    found = [
        Violation(
            Rule.BOUNDS,
            f"{role} has a dynamic shape; the contract needs a static shape to prove every offset in bounds",
        )
        for role, operand in ((opcode.register_role, registers), (opcode.shared_role, shared))
        if operand.extent is None
    ]
    limit = targets.max_shared_bytes(chip)
    if shared.extent is not None and (shared.static_offset + shared.extent) * WORD_BYTES > limit:
        found.append(
            Violation(
                Rule.BOUNDS,
                f"{opcode.shared_role} reaches {(shared.static_offset + shared.extent) * WORD_BYTES} bytes into its "
                f"shared buffer, more than the {limit} bytes a block can have"
                f"{' on ' + chip if chip else ''}; use a smaller tile",
            )
        )
    if registers.extent is not None and (registers.static_offset + registers.extent) * WORD_BYTES > MAX_LOCAL_BYTES:
        found.append(
            Violation(
                Rule.BOUNDS,
                f"{opcode.register_role} (register storage) has {registers.static_offset + registers.extent} words, "
                f"more than the {MAX_LOCAL_BYTES} bytes of local memory a thread can have; use a smaller memref",
            )
        )
    if static_shared_bytes is not None and static_shared_bytes > targets.STATIC_SHARED_BYTES:
        found.append(
            Violation(
                Rule.BOUNDS,
                f"the kernel declares {static_shared_bytes} bytes of static shared memory (workgroup memref.globals), "
                f"more than the {targets.STATIC_SHARED_BYTES} a kernel can declare; use gpu.dynamic_shared_memory "
                f"for more",
            )
        )
    return found


def check_dynamic_offset_alignment(opcode: Opcode, registers: Operand, shared: Operand) -> list[Violation]:
    """The row-alignment rule's operand half: a dynamic region start proven a multiple of 4 words."""
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


def check_shape(opcode: Opcode, scope: Scope, registers: Layout, shared: Layout) -> list[Violation]:
    found = []
    atom = (opcode.count, ROWS, WORDS)
    for role, layout in ((opcode.register_role, registers), (opcode.shared_role, shared)):
        if layout.rank < 3 or layout.sizes[-3:] != atom:
            found.append(
                Violation(
                    Rule.SHAPE,
                    f"{role}_layout {layout} must end in (matrix,row,word) = {_t(atom)} for "
                    f"{opcode.text} (.x{opcode.count}); leading axes are "
                    f"{'the group axis, then ' if scope.has_group_axis else ''}repeats",
                )
            )
    if found:
        return found
    words = math.prod(registers.sizes[(1 if scope.has_group_axis else 0):-3]) * opcode.count
    if words > MAX_REGISTERS:
        return [
            Violation(
                Rule.SHAPE,
                f"the transfer moves {words} words per thread ({words // opcode.count} repeats x {opcode.count} "
                f"matrices), but a thread has at most {MAX_REGISTERS} registers, so they would spill to local "
                f"memory; split it into transfers of at most {MAX_REGISTERS} words",
            )
        ]
    if registers.sizes != shared.sizes:
        return [
            Violation(
                Rule.SHAPE,
                f"dst_layout and src_layout have different shapes: {_t(registers.sizes)} (registers) vs "
                f"{_t(shared.sizes)} (shared); both describe the same transfer coordinates (mode sizes; each mode "
                f"may nest differently on the two sides)",
            )
        ]
    if scope.has_group_axis and (registers.rank < 4 or registers.sizes[0] != scope.warps):
        return [
            Violation(
                Rule.SCOPE,
                f"scope \"{scope.name}\" has {scope.warps} warps, so both layouts need a leading group axis "
                f"of extent {scope.warps} (register stride 1@warpid); got shape {_t(registers.sizes)}",
            )
        ]
    return []


def _mode_strides(layout: Layout) -> Iterable[tuple[int, object]]:
    """(mode, stride) of every leaf stride, nested modes included."""
    for axis in range(layout.rank):
        for stride in layout.flat_strides(axis):
            yield axis, stride


def _t(items) -> str:
    return "(" + ",".join(str(i) for i in items) + ")"


# ----- the rules on a transfer: each coordinate -----
def check_register_owner(transfer: Transfer) -> list[Violation]:
    layout, scope, role = transfer.registers, transfer.scope, transfer.register_role
    if layout.swizzle is not None:
        return [Violation(Rule.REGISTER_OWNER, f"{role}_layout {layout}: registers are not memory, so a register "
                                               f"layout takes no swizzle; swizzle the shared layout")]
    found = []
    for axis, stride in _mode_strides(layout):
        is_group_axis = transfer.group_rank and axis == 0 and len(layout.mode(0)) == 1
        if isinstance(stride, ThreadStride) and stride.axis == "warpid":
            if not scope.has_group_axis:
                found.append(
                    Violation(
                        Rule.REGISTER_OWNER,
                        f"{role}_layout {layout} axis {axis} has stride {stride}, but scope \"warp\" has no group "
                        f"axis; @warpid is only for the leading group axis of scope \"warpgroup\" or \"cta\"",
                    )
                )
            elif not is_group_axis or stride.scale != 1:
                found.append(
                    Violation(
                        Rule.REGISTER_OWNER,
                        f"{role}_layout {layout} axis {axis} has stride {stride}; only the leading group axis "
                        f"maps to warps, with stride 1@warpid",
                    )
                )
        elif transfer.group_rank and axis == 0:
            found.append(
                Violation(
                    Rule.REGISTER_OWNER,
                    f"{role}_layout {layout}: the group axis must have stride 1@warpid (warp g of the "
                    f"{scope.name} holds the registers of group coordinate g), got {stride}",
                )
            )
    if found:
        return found
    for axis, stride in _mode_strides(layout):
        if axis < layout.rank - 2 and isinstance(stride, ThreadStride) and stride.axis == "laneid":
            return [
                Violation(
                    Rule.REGISTER_OWNER,
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
            text = transfer.coordinate_text(origin + (row, word))
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
                    Rule.REGISTER_OWNER,
                    f"{role}_layout {layout}: {problem}; give the row axis stride 4@laneid and the word axis "
                    f"1@laneid",
                )
            ]
    return []


def _register_slots(transfer: Transfer) -> Iterable[tuple[int, str]]:
    """(slot, where) of each (repeat, matrix), `where` as the diagnostics name it."""
    for repeat in transfer.repeats():
        for matrix in range(transfer.opcode.count):
            where = f"(repeat={_t(repeat)}, matrix={matrix})" if repeat else f"(matrix={matrix})"
            yield transfer.register_slot(repeat, matrix), where


def check_register_bounds(transfer: Transfer) -> list[Violation]:
    extent, role, layout = transfer.register_operand.extent, transfer.register_role, transfer.registers
    if extent is None:
        return []
    offset = transfer.register_operand.offset
    for slot, where in _register_slots(transfer):
        if not 0 <= slot - offset < extent:
            return [
                Violation(
                    Rule.BOUNDS,
                    f"{role}_layout {layout}: register slot {slot} of {where} is outside {role}, which has "
                    f"{extent} slots per thread{f' from its offset {offset}' if offset else ''}; enlarge the "
                    f"register memref or change the register strides",
                )
            ]
    return []


def check_register_overlap(transfer: Transfer) -> list[Violation]:
    if not transfer.opcode.is_load:
        return []
    role, layout = transfer.register_role, transfer.registers
    writers: dict[int, str] = {}
    for slot, where in _register_slots(transfer):
        if slot in writers:
            return [
                Violation(
                    Rule.REGISTER_OVERLAP,
                    f"{role}_layout {layout}: loaded register slot {slot} is written by both {writers[slot]} and "
                    f"{where}; loaded slots must be distinct, so give the repeat and matrix axes strides that "
                    f"separate them",
                )
            ]
        writers[slot] = where
    return []


def check_shared_row(transfer: Transfer) -> list[Violation]:
    layout, role = transfer.shared, transfer.shared_role
    threads = [(axis, s) for axis, s in _mode_strides(layout) if isinstance(s, ThreadStride)]
    if threads:
        axis, stride = threads[0]
        return [
            Violation(
                Rule.SHARED_ROW,
                f"{role}_layout {layout} axis {axis} has thread stride {stride}; the shared layout gives memory "
                f"strides only (lane 8*matrix+row provides row (matrix,row)'s address by definition)",
            )
        ]
    if layout.is_flat and layout.swizzle is None:
        if layout.stride[-1] != 1:  # linear: one row speaks for all
            return [
                Violation(
                    Rule.SHARED_ROW,
                    f"{role}_layout {layout}: the word axis has stride {layout.stride[-1]}, so a row's words are at "
                    f"offsets {', '.join(str(w * layout.stride[-1]) for w in range(WORDS))}: a gap inside a 16-byte "
                    f"row; each shared row is 4 consecutive 32-bit words (word stride 1)",
                )
            ]
        return []
    for head in itertools.product(*(range(n) for n in layout.sizes[:-1])):  # nested or swizzled: every row
        words = [layout.offset(*head, word) for word in range(WORDS)]
        if words != list(range(words[0], words[0] + WORDS)):
            return [
                Violation(
                    Rule.SHARED_ROW,
                    f"{role}_layout {layout}: shared row {transfer.coordinate_text(head + (0,))} has its words at "
                    f"offsets {', '.join(map(str, words))}{' (after the swizzle)' if layout.swizzle else ''}, not 4 "
                    f"consecutive words; each 16-byte row must stay whole: a word mode of stride 1 and a swizzle "
                    f"that keeps the low 2 bits of a word offset (Sw<B,M,S> with M >= 2 in word units)",
                )
            ]
    return []


def _shared_rows(transfer: Transfer) -> Iterable[tuple[tuple[int, ...], int]]:
    """(coordinate of word 0, offset from the memref's first element) of every shared row."""
    layout = transfer.shared
    for head in itertools.product(*(range(n) for n in layout.sizes[:-1])):
        coord = head + (0,)
        yield coord, layout.offset(*coord)


def check_shared_bounds(transfer: Transfer) -> list[Violation]:
    extent, role, layout = transfer.shared_operand.extent, transfer.shared_role, transfer.shared
    if extent is None:
        return []
    for coord, relative in _shared_rows(transfer):
        if not (0 <= relative and relative + WORDS <= extent):
            return [
                Violation(
                    Rule.BOUNDS,
                    f"{role}_layout {layout}: shared row {transfer.coordinate_text(coord)} covers elements "
                    f"{relative}..{relative + WORDS - 1}, outside {role}'s {extent} elements; enlarge the buffer "
                    f"or change the strides",
                )
            ]
    return []


def check_row_alignment(transfer: Transfer) -> list[Violation]:
    operand, role, layout = transfer.shared_operand, transfer.shared_role, transfer.shared
    found = []
    if operand.base_alignment is None or operand.base_alignment < ROW_BYTES:
        proven = "no alignment" if operand.base_alignment is None else f"only {operand.base_alignment}-byte alignment"
        found.append(
            Violation(
                Rule.ROW_ALIGNMENT,
                f"{role}: the IR proves {proven} for the shared buffer, but every row must start 16-byte aligned; "
                f"declare it with memref.global ... {{alignment = 16 : i64}} (or memref.alloca/alloc "
                f"{{alignment = 16}}, or memref.assume_alignment %buf, 16)",
            )
        )
    for coord, relative in _shared_rows(transfer):
        start = operand.static_offset + relative  # a dynamic offset adds a multiple of 4 words
        if (start * WORD_BYTES) % ROW_BYTES:
            offset = f", memref offset {operand.offset} included" if operand.offset else ""
            found.append(
                Violation(
                    Rule.ROW_ALIGNMENT,
                    f"{role}_layout {layout}: shared row {transfer.coordinate_text(coord)} starts at byte "
                    f"{start * WORD_BYTES} (element {start}{offset}), not a multiple of 16; make every "
                    f"matrix/row/repeat stride and the region start a multiple of 4 words",
                )
            )
            break
    return found


def check_store_race(transfer: Transfer) -> list[Violation]:
    if transfer.opcode.is_load:
        return []
    group, role, layout = transfer.group_rank, transfer.shared_role, transfer.shared
    writers: dict[int, tuple[int, ...]] = {}
    for coord, start in _shared_rows(transfer):
        writer = writers.setdefault(start, coord)
        if writer is coord:
            continue
        same_warp = writer[:group] == coord[:group]
        if same_warp and writer[group:-3] != coord[group:-3]:
            continue  # a later repeat of the same warp overwrites in program order: no race
        return [
            Violation(
                Rule.STORE_RACE,
                f"{role}_layout {layout}: stmatrix rows {transfer.coordinate_text(writer)} and "
                f"{transfer.coordinate_text(coord)} both write elements {start}..{start + WORDS - 1} "
                f"{'in one instruction' if same_warp else 'from different warps'}; destination rows must not "
                f"overlap",
            )
        ]
    return []


# Each rule and the functions that check it (the bounds and row-alignment rules have an operand half, which
# needs no transfer, and a coordinate half).
RULE_CHECKS = {
    Rule.OPCODE: (check_opcode,),
    Rule.ATTRIBUTES: (check_attributes,),
    Rule.SCOPE: (check_scope, check_shape),
    Rule.OPERANDS: (check_operands,),
    Rule.SHAPE: (check_shape,),
    Rule.SHARED_ROW: (check_shared_row,),
    Rule.ROW_ALIGNMENT: (check_dynamic_offset_alignment, check_row_alignment),
    Rule.STORE_RACE: (check_store_race,),
    Rule.BOUNDS: (check_operand_bounds, check_register_bounds, check_shared_bounds),
    Rule.REGISTER_OWNER: (check_register_owner,),
    Rule.REGISTER_OVERLAP: (check_register_overlap,),
    Rule.PARTICIPATION: (check_participation,),
    Rule.TARGET: (check_target,),
    Rule.LAYOUT_SYNTAX: (check_layout_syntax,),
}
