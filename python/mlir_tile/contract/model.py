"""The contract's vocabulary: its constants, the rules and their violations, the opcode, the facts about an
operand, the scope, and a `Transfer` (a transfer whose opcode, scope, operands and shapes are known: what the
per-coordinate rules, the lowering and the emulator read, in layout terms). Pure Python, no MLIR.

Coordinates of both layouts are (group?, repeat..., matrix, row, word) with (matrix, row, word) = (N, 8, 4):
the group axis exists only in scopes wider than a warp and selects the warp (`@warpid` on the register side).
"""
from __future__ import annotations

import enum
import itertools
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from mlir_tile.algebra.layout import Layout, as_layout


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
    Rule.ROW_ALIGNMENT: "every shared row starts 16-byte aligned: buffer alignment, memref offset and strides; a "
    "swizzled buffer is aligned to the swizzle's period and a swizzled view's dynamic offset is a multiple of it",
    Rule.STORE_RACE: "stmatrix rows of one instruction, or of different warps, do not overlap",
    Rule.BOUNDS: "static shapes; every shared row and register slot lies inside its memref",
    Rule.REGISTER_OWNER: "register word (i,j,w) belongs to lane 4*j+w; @warpid only on the group axis",
    Rule.REGISTER_OVERLAP: "loaded register slots of different (repeat, matrix) pairs are distinct",
    Rule.PARTICIPATION: "all 32 lanes execute the transfer: no thread-dependent control flow around it; "
    "known_block_size a multiple of the scope's threads",
    Rule.TARGET: "GPU code for NVVM targets only; each target's chip is one the backend knows and new enough "
    "(ldmatrix sm_75, stmatrix sm_90); a +ptxNN "
    "feature is new enough for the instruction and the chip",
    Rule.LAYOUT_SYNTAX: "layout text parses as (extents):(strides)",
}


class ContractError(ValueError):
    """Raised by the builder and the emulator; carries every violation found."""

    def __init__(self, violations: Sequence["Violation"]):
        self.violations = list(violations)
        super().__init__("\n".join(str(v) for v in self.violations))

    def __reduce__(self):  # pickled (a process pool's worker raising it) from its violations, not its message
        return type(self), (self.violations,)


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


@dataclass(frozen=True, slots=True)
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
    allocation_layout: str | None = None  # the allocating op's memref layout, when it is not the identity
    base_shift: int | None = None  # a memref.view moved the base pointer by a multiple of this many bytes (a
                                   # power of two; 1: nothing is proven); None: the base is the buffer's start

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
        """Element offset of a shared word from the buffer's start (the memref's static offset included)."""
        return self.shared_word(((group,) if self.group_rank else ()) + repeat + (matrix, row, word))

    def shared_word(self, coord: tuple[int, ...]) -> int:
        """Element offset of the shared word at `coord` from the buffer's start. A swizzle applies to the offset
        from the buffer, the memref's static offset included (as CuTe's slices and TMA's swizzle modes do), so
        a view of a swizzled tile reads what the same coordinates of the whole tile read; a dynamic offset is a
        proven multiple of the swizzle's period, which passes through it."""
        linear = self.shared_operand.static_offset + self.shared.linear_offset(*coord)
        return self.shared.swizzle(linear) if self.shared.swizzle else linear

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
            names.append("repeat=" + tuple_text(repeat))
        names += [f"matrix={coord[-3]}", f"row={coord[-2]}", f"word={coord[-1]}"]
        return "(" + ", ".join(names) + ")"


def aligned_for(shared: "Layout | str") -> int:
    """The bytes a shared buffer is aligned to for a transfer through `shared`: 16, or its swizzle's period
    (16 for text that is no layout: the layout-syntax rule reports it)."""
    try:
        swizzle = as_layout(shared).swizzle
    except ValueError:
        return ROW_BYTES
    return max(ROW_BYTES, swizzle.period * WORD_BYTES if swizzle else 0)


def tuple_text(items) -> str:
    """`(1,2,3)`: how diagnostics print a shape or a coordinate."""
    return "(" + ",".join(str(i) for i in items) + ")"


@dataclass(frozen=True, slots=True)
class Query:
    """Everything the contract judges one transfer by: the op's attributes (opcode, scope, the layouts as text
    or Layout, any other attribute's name) and what the IR proves about its operands and context. Hashable,
    so each distinct query is judged once (an unrolled loop holds thousands of identical transfers).

    block_size: the kernel's known block size (None: unknown). divergence: why the op might run on some lanes
    only (None: all lanes run it). chip, ptx: the NVVM target it is compiled for (None: not known yet; the
    pipeline fills the chip in). device_code: inside a gpu.module or a gpu.launch body. static_shared_bytes:
    the kernel's workgroup memref.globals. foreign_targets: the gpu.module's targets that are not NVVM ones.
    features: the #nvvm.target's features option as written."""

    opcode: object
    scope: object
    dst_layout: object
    src_layout: object
    dst: Operand
    src: Operand
    extra_attributes: tuple[str, ...] = ()
    block_size: tuple[int, ...] | None = None
    divergence: str | None = None
    chip: str | None = None
    ptx: int | None = None
    device_code: bool = True
    static_shared_bytes: int | None = None
    foreign_targets: tuple[str, ...] = ()
    features: str = ""

    @classmethod
    def of_layouts(cls, opcode: str, registers, shared, *, register_slots: int, shared_words: int,
                   scope: str = "warp", base_alignment: int | None = None, block_size: Sequence[int] | None = None,
                   shared_offset: int = 0) -> "Query":
        """A transfer given by its register and shared layouts (in either order of dst and src) over plain
        buffers: `register_slots` words of registers per thread, `shared_words` words of shared memory aligned to
        `base_alignment` bytes (by default 16, or a swizzle's period), the shared layout over a view of it
        `shared_offset` words in. What the model, the emulator and the benchmarks start from."""
        parsed = parse_opcode(opcode)
        dst_layout, src_layout = parsed.dst_and_src(registers, shared)
        if base_alignment is None:
            base_alignment = aligned_for(shared)
        dst, src = parsed.dst_and_src(Operand("private", extent=register_slots),
                                      Operand("shared", extent=shared_words - shared_offset, offset=shared_offset,
                                              base_alignment=base_alignment))
        return cls(opcode, scope, dst_layout, src_layout, dst, src,
                   block_size=None if block_size is None else tuple(block_size))
