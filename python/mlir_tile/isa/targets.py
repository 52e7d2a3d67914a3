"""Targets: the GPU chips mlir-tile compiles for, the default chip, the PTX versions each needs, and the one
check of a chip name (pure Python, no MLIR). Every module that meets a chip name asks this one.

A chip must be known to both ends of the path: LLVM 22's NVPTX backend (`llc -mtriple=nvptx64-nvidia-cuda
-mcpu=help`), which aborts the process on any other chip ("Cannot select: ..."), and the CUDA 13.0 assembler
(`ptxas --help`, nvJitLink), which rejects the chips before sm_75 and ends the process on some malformed
names (`sm_9`). Tests keep both sets equal to those listings; a name is checked before either tool sees it.
"""
from __future__ import annotations

import re
from typing import NamedTuple

DEFAULT_CHIP = "sm_90"  # the H200 the project is measured on; what a flag or argument means when left out
HOPPER_CHIP = DEFAULT_CHIP  # the kernel library's chip of the H100 and H200 (C and O through stmatrix)
PORTABLE_CHIP = "sm_80"  # the kernel library's chip of every other GPU from Ampere on (no stmatrix)
LIBRARY_CHIPS = (HOPPER_CHIP, PORTABLE_CHIP)  # the chips the kernel library keeps PTX for
WARPGROUP_CHIP = "sm_90a"  # what kernels of Hopper's own instructions (wgmma, setmaxnreg) are built for
DEFAULT_NVVM_CHIP = "sm_50"  # what an #nvvm.target without a chip option means (upstream's default)
CHIP = re.compile(r"sm_(\d{2,})[af]?")  # an NVIDIA GPU architecture name: sm_90, sm_90a, sm_100f

NVPTX_CHIPS = frozenset(
    "sm_20 sm_21 sm_30 sm_32 sm_35 sm_37 sm_50 sm_52 sm_53 sm_60 sm_61 sm_62 sm_70 sm_72 sm_75 sm_80 sm_86 "
    "sm_87 sm_88 sm_89 sm_90 sm_90a sm_100 sm_100a sm_100f sm_101 sm_101a sm_101f sm_103 sm_103a sm_103f "
    "sm_110 sm_110a sm_110f sm_120 sm_120a sm_120f sm_121 sm_121a sm_121f".split()
)

# The chips CUDA 13.0's ptxas (and nvJitLink) assembles for (`ptxas --help`, --gpu-name).
PTXAS_CHIPS = frozenset(
    "sm_75 sm_80 sm_86 sm_87 sm_88 sm_89 sm_90 sm_90a sm_100 sm_100a sm_100f sm_103 sm_103a sm_103f sm_110 "
    "sm_110a sm_110f sm_120 sm_120a sm_120f sm_121 sm_121a sm_121f".split()
)
CHIPS = NVPTX_CHIPS & PTXAS_CHIPS  # what mlir-tile compiles for: PTX that LLVM writes and ptxas assembles

# The lowest PTX ISA version (x 10) LLVM 22's NVPTX backend accepts for each chip (a test checks this against
# llc). With a lower `+ptxNN` feature in #nvvm.target the backend stops the process ("LLVM ERROR: PTX version
# ... does not support target ..."); with one too low for the instruction it cannot select it.
CHIP_MINIMUM_PTX = {
    "sm_20": 32, "sm_21": 32, "sm_30": 32, "sm_32": 40, "sm_35": 32, "sm_37": 41, "sm_50": 40, "sm_52": 41,
    "sm_53": 42, "sm_60": 50, "sm_61": 50, "sm_62": 50, "sm_70": 60, "sm_72": 61, "sm_75": 63, "sm_80": 70,
    "sm_86": 71, "sm_87": 74, "sm_88": 90, "sm_89": 78, "sm_90": 78, "sm_90a": 80, "sm_100": 86, "sm_100a": 86,
    "sm_100f": 88, "sm_101": 86, "sm_101a": 86, "sm_101f": 88, "sm_103": 88, "sm_103a": 88, "sm_103f": 88,
    "sm_110": 90, "sm_110a": 90, "sm_110f": 90, "sm_120": 87, "sm_120a": 87, "sm_120f": 88, "sm_121": 88,
    "sm_121a": 88, "sm_121f": 88,
}
# The highest PTX ISA version LLVM 22 knows (`+ptx` features it lists); above it llc warns and ignores it.
MAXIMUM_PTX = 90

# Thread block clusters (sm_90 and newer): at most this many CTAs in a cluster without the non-portable opt-in
PORTABLE_CLUSTER_CTAS = 8


def cluster_problem(cluster, chip: str) -> str | None:
    """Why `cluster` (CTAs along x, y, z) cannot be a kernel's cluster on `chip`, or None."""
    if (not isinstance(cluster, (tuple, list)) or len(cluster) != 3
            or any(not isinstance(c, int) or isinstance(c, bool) or c < 1 for c in cluster)):
        return f"a cluster is (x, y, z) positive CTA counts, got {cluster!r}"
    size = cluster[0] * cluster[1] * cluster[2]
    if size > PORTABLE_CLUSTER_CTAS:
        return f"a cluster of {size} CTAs is more than the portable {PORTABLE_CLUSTER_CTAS}"
    if architecture(chip) < 90:
        return f"thread block clusters need sm_90 or newer, the kernel targets {chip}"
    return None


# wgmma (and setmaxnreg) exist on sm_90a alone: not on sm_90, nor on sm_100a and later (tcgen05 replaces them)
WARPGROUP_CHIPS = frozenset({WARPGROUP_CHIP})

# Per instruction: the architecture (x 10 of the compute capability) and PTX ISA version that introduced it.
MINIMUM_ARCHITECTURE = {"ldmatrix": 75, "stmatrix": 90}
MINIMUM_PTX = {"ldmatrix": 65, "stmatrix": 78}


class Requirement(NamedTuple):
    """What an NVVM instruction needs (PTX ISA; each checked against LLVM 22's NVPTX backend, which stops the
    process on the chips and PTX versions below it: "Cannot select: intrinsic")."""

    instruction: str  # the PTX form, as diagnostics name it
    architecture: int  # the lowest architecture (x 10 of the compute capability)
    ptx: int  # the lowest PTX ISA version (x 10)
    specific: bool = False  # only on architecture-specific chips (sm_100a, sm_100f, ...)


# mma.sync by (shape, multiplicand type): PTX ISA, "Matrix multiply-accumulate operation using mma".
_MMA = {
    ("m8n8k4", "f16"): (70, 64), ("m8n8k4", "f64"): (80, 70),
    ("m16n8k4", "tf32"): (80, 70), ("m16n8k4", "f64"): (90, 78),
    ("m16n8k8", "f16"): (75, 65), ("m16n8k8", "bf16"): (80, 70), ("m16n8k8", "tf32"): (80, 70),
    ("m16n8k8", "f64"): (90, 78),
    ("m16n8k16", "f16"): (80, 70), ("m16n8k16", "bf16"): (80, 70), ("m16n8k16", "s8"): (80, 70),
    ("m16n8k16", "u8"): (80, 70), ("m16n8k16", "f64"): (90, 78), ("m16n8k16", "e4m3"): (89, 87),
    ("m16n8k16", "e5m2"): (89, 87),
    ("m8n8k16", "s8"): (75, 65), ("m8n8k16", "u8"): (75, 65), ("m8n8k32", "s4"): (75, 65), ("m8n8k32", "u4"): (75, 65),
    ("m16n8k32", "s8"): (80, 70), ("m16n8k32", "u8"): (80, 70), ("m16n8k32", "s4"): (80, 70),
    ("m16n8k32", "u4"): (80, 70), ("m16n8k32", "e4m3"): (89, 84), ("m16n8k32", "e5m2"): (89, 84),
    ("m16n8k64", "s4"): (80, 70), ("m16n8k64", "u4"): (80, 70),
    ("m8n8k128", "b1"): (75, 65), ("m16n8k128", "b1"): (80, 70), ("m16n8k256", "b1"): (80, 70),
}


# mbarrier's transaction counts and the fence after its initialization came with sm_90 (PTX 8.0).
_MBARRIER_SM90 = ("nvvm.mbarrier.arrive.expect_tx", "nvvm.mbarrier.expect_tx", "nvvm.mbarrier.complete_tx",
                  "nvvm.mbarrier.arrive.drop.expect_tx", "nvvm.fence.mbarrier.init")


# Thread block cluster instructions (PTX 7.8, sm_90): the cluster barrier, mapa, the cluster's special registers
_CLUSTER_OPS = ("nvvm.cluster.arrive", "nvvm.cluster.arrive.relaxed", "nvvm.cluster.wait", "nvvm.mapa",
                "nvvm.read.ptx.sreg.cluster.ctarank", "nvvm.read.ptx.sreg.cluster.nctarank",
                "nvvm.read.ptx.sreg.clusterid.x", "nvvm.read.ptx.sreg.clusterid.y", "nvvm.read.ptx.sreg.clusterid.z",
                "nvvm.read.ptx.sreg.cluster.ctaid.x", "nvvm.read.ptx.sreg.cluster.ctaid.y",
                "nvvm.read.ptx.sreg.cluster.ctaid.z")


def nvvm_requirement(op_name: str, shape: str | None = None, element: str | None = None) -> Requirement | None:
    """What the NVVM op `op_name` (with its shape `m8n8`/`m16n8k16` and element or multiplicand type) needs;
    None for ops it does not constrain here. An mma form missing from the table gets its shape's strictest."""
    if op_name in ("nvvm.ldmatrix", "nvvm.stmatrix"):
        instruction = op_name.removeprefix("nvvm.")
        if shape not in (None, "m8n8"):  # the 8-bit forms (m16n16, m8n16, m16n8)
            return Requirement(f"{instruction}.{shape}", 100, 86, specific=True)
        return Requirement(f"{instruction}.m8n8", MINIMUM_ARCHITECTURE[instruction], MINIMUM_PTX[instruction])
    if op_name == "nvvm.mma.sync":
        forms = [need for (form, _), need in _MMA.items() if form == shape]
        architecture, ptx = _MMA.get((shape, element)) or max(forms, default=(90, 78))
        return Requirement(f"mma.sync.{shape}{'.' + element if element else ''}", architecture, ptx)
    if op_name.endswith(".shared::cluster"):  # an mbarrier op on a cluster peer's barrier (scope cluster)
        return Requirement(op_name.removeprefix("nvvm."), 90, 80)
    if op_name in _CLUSTER_OPS:
        return Requirement(op_name.removeprefix("nvvm."), 90, 78)
    if op_name == "nvvm.griddepcontrol":  # (programmatic dependent launch)
        return Requirement("griddepcontrol", 90, 78)
    if op_name == "nvvm.setmaxregister":
        return Requirement("setmaxnreg", 90, 80, specific=True)
    if op_name.startswith("nvvm.wgmma"):
        return Requirement(op_name.removeprefix("nvvm."), 90, 80, specific=True)
    if op_name == "nvvm.fence.proxy":
        return Requirement("fence.proxy.async", 90, 80)  # (the async proxy came with sm_90)
    if op_name.startswith("nvvm.cp.async.bulk") or op_name in _MBARRIER_SM90:
        return Requirement(op_name.removeprefix("nvvm."), 90, 80)
    if op_name.startswith("nvvm.mbarrier.try_wait"):
        return Requirement(op_name.removeprefix("nvvm."), 90, 78)
    if op_name.startswith("nvvm.mbarrier."):
        return Requirement(op_name.removeprefix("nvvm."), 80, 70)
    if op_name.startswith("nvvm.cp.async."):
        return Requirement(op_name.removeprefix("nvvm."), 80, 70)
    return None


def requirement_problem(requirement: Requirement, chip: str, ptx: int | None) -> str | None:
    """Why `chip` (known) with PTX version `ptx` (None: the chip's lowest) cannot run the instruction, or None."""
    needed = (f"an architecture-specific chip, sm_{requirement.architecture}a/f or newer ({known_specific_chips(requirement.architecture)})"
              if requirement.specific else f"sm_{requirement.architecture} or newer")
    if architecture(chip) < requirement.architecture or (requirement.specific and chip[-1] not in "af"):
        return f"{requirement.instruction} needs {needed}, but the gpu.module targets {chip}"
    version = max(requirement.ptx, CHIP_MINIMUM_PTX[chip])
    if (ptx if ptx is not None else CHIP_MINIMUM_PTX[chip]) < version:
        given = f"asks for PTX {ptx_version_text(ptx)}" if ptx is not None else \
            f"names no PTX version, so LLVM uses {chip}'s lowest, {ptx_version_text(CHIP_MINIMUM_PTX[chip])}"
        return (f"{requirement.instruction} needs PTX {ptx_version_text(version)}, but the gpu.module's "
                f"#nvvm.target {given}; add features = \"+ptx{version}\" to it")
    return None


# Shared memory a block may use, in bytes, by architecture (CUDA C Programming Guide, "Compute Capabilities",
# maximum shared memory per thread block, with the opt-in); chips not listed get the smallest below. A kernel
# may declare at most STATIC_SHARED_BYTES of it statically (ptxas: "Entry function uses too much shared data").
STATIC_SHARED_BYTES = 48 * 1024
# 32-bit registers of one SM's register file (sm_75 to sm_120), and the most one thread may have
REGISTER_FILE, MAX_THREAD_REGISTERS = 65536, 255
_MAX_SHARED_BYTES = {75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024,
                     100: 227 * 1024, 103: 227 * 1024, 120: 99 * 1024, 121: 99 * 1024}
# Shared memory of one SM, which the blocks resident on it share, each also holding SHARED_RESERVED_BYTES of it
# for the system (CUDA C Programming Guide, "Compute Capabilities": 228 KB an SM on sm_90, 1 KB reserved a block)
_SM_SHARED_BYTES = {90: 228 * 1024}
SHARED_RESERVED_BYTES = 1024
# The largest alignment a declaration may ask: above every chip's shared memory (no buffer there needs more),
# and ptxas's time grows with a .shared .align (measured: 2^18 0.02 s, 2^26 1.3 s, 2^30 33 s; it takes up to 2^31).
MAX_ALIGNMENT = 2**18
# A block's threads: at most 1024 in all, and per dimension (x, y, z) at most these.
MAX_BLOCK_THREADS = 1024
MAX_BLOCKS_PER_SM = 32  # resident blocks an SM holds (sm_80, sm_90): the most `.minnctapersm` can ask for
MAX_BLOCK_DIMENSIONS = (1024, 1024, 64)


# A PTX identifier (PTX ISA, "Identifiers"); LLVM's NVPTX backend stops the process on some other names and
# passes the rest to ptxas, which rejects them.
PTX_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_$]*|[_$][A-Za-z0-9_$]+")


_NVVM_TARGET = re.compile(r"#nvvm\.target(?:<(?P<options>.*)>)?$", re.S)
_CHIP = re.compile(r'\bchip = "(?P<chip>(?:[^"\\]|\\.)*)"')
_FEATURES = re.compile(r'\bfeatures = "(?P<features>(?:[^"\\]|\\.)*)"')


class NvvmTarget(NamedTuple):
    """An #nvvm.target attribute as a value: read once from its text (`parse`), written once (`attribute`);
    the bindings have no typed accessor for it."""

    chip: str  # the chip named, or upstream's default (DEFAULT_NVVM_CHIP) when none is
    ptx: int | None  # the PTX ISA version x 10 of a `+ptxNN` feature; None: LLVM picks one for the chip
    features: str = ""  # the features option as written
    chip_named: bool = True  # whether the attribute names a chip
    options: str = ""  # the attribute's options as written

    @classmethod
    def parse(cls, text: str) -> "NvvmTarget | None":
        """The target an attribute's text describes; None for an attribute that is no #nvvm.target."""
        match = _NVVM_TARGET.match(text)
        if not match:
            return None
        options = match.group("options") or ""
        chip, features = _CHIP.search(options), _FEATURES.search(options)
        feature_text = features.group("features") if features else ""
        ptx = FEATURE.search(feature_text)
        return cls(chip.group("chip") if chip else DEFAULT_NVVM_CHIP, int(ptx.group(1)) if ptx else None,
                   feature_text, chip is not None, options)

    @classmethod
    def for_chip(cls, chip: str) -> "NvvmTarget":
        """`#nvvm.target<chip = "...">` for a known chip (TargetError otherwise)."""
        return cls(chip, None, chip_named=False).with_chip(chip)

    def with_chip(self, chip: str) -> "NvvmTarget":
        """This target for a known chip (TargetError otherwise), its other options kept."""
        require_chip(chip)
        options = _CHIP.sub(f'chip = "{chip}"', self.options) if self.chip_named else \
            ", ".join(part for part in (f'chip = "{chip}"', self.options) if part)
        return self._replace(chip=chip, chip_named=True, options=options)

    @property
    def attribute(self) -> str:
        return f"#nvvm.target<{self.options}>" if self.options else "#nvvm.target"


def block_size_problem(block_size) -> str | None:
    """Why a block of this size cannot be launched, or None."""
    if len(block_size) != 3 or any(n < 1 for n in block_size):
        return "is not three positive extents (x, y, z)"
    if any(n > limit for n, limit in zip(block_size, MAX_BLOCK_DIMENSIONS)):
        return f"exceeds the largest block, {MAX_BLOCK_DIMENSIONS} per dimension; a kernel cannot be launched with it"
    threads = block_size[0] * block_size[1] * block_size[2]
    if threads > MAX_BLOCK_THREADS:
        return f"has {threads} threads, more than the {MAX_BLOCK_THREADS} a block can have; a kernel cannot be launched with it"
    return None


def alignment_problem(alignment: int) -> str | None:
    """Why a buffer cannot be declared with this alignment, or None."""
    if alignment > MAX_ALIGNMENT:
        return f"alignment {alignment}, above the {MAX_ALIGNMENT} bytes any buffer can need (more slows ptxas)"
    return None


def static_shared_problem(used: int | None) -> str | None:
    """Why a kernel cannot declare `used` bytes of static shared memory, or None."""
    if used is None or used <= STATIC_SHARED_BYTES:
        return None
    return (f"the kernel declares {used} bytes of static shared memory (workgroup memref.globals), more than the "
            f"{STATIC_SHARED_BYTES} a kernel can declare; use gpu.dynamic_shared_memory for more")


FEATURE = re.compile(r"\+ptx(\d+)")  # the one #nvvm.target feature mlir-tile passes on to LLVM


def features_problem(features: str) -> str | None:
    """Why an #nvvm.target's features string cannot go to LLVM (it asserts on a feature without + or -, and
    warns and ignores unknown ones), or None. Only one +ptxNN is accepted."""
    parts = [part.strip() for part in features.split(",") if part.strip()]
    if len(parts) > 1 or any(not FEATURE.fullmatch(part) for part in parts):
        return f"features \"{features}\" is not one +ptxNN (such as +ptx{MINIMUM_PTX['stmatrix']})"
    return None


def ptx_feature_problem(chip: str, ptx: int) -> str | None:
    """Why `+ptx<ptx>` cannot be used for a known `chip` (LLVM stops the process below the chip's minimum and
    ignores unknown versions with a warning), or None."""
    if ptx < CHIP_MINIMUM_PTX[chip]:
        return f"{chip} needs PTX {ptx_version_text(CHIP_MINIMUM_PTX[chip])} or later"
    if ptx > MAXIMUM_PTX:
        return f"the newest PTX version LLVM knows is {ptx_version_text(MAXIMUM_PTX)}"
    return None


def sm_shared_bytes(chip: str) -> int:
    """Shared memory of one SM of `chip` (the blocks resident on it share it); ValueError where not recorded."""
    if architecture(chip) not in _SM_SHARED_BYTES:
        raise ValueError(f"the shared memory an SM holds is recorded for sm_{', sm_'.join(map(str, _SM_SHARED_BYTES))}"
                         f", not {chip}")
    return _SM_SHARED_BYTES[architecture(chip)]


def max_shared_bytes(chip: str | None) -> int:
    """The shared memory one block may use on `chip`; without a chip, the most any known chip allows."""
    if chip is None or chip not in CHIPS:
        return max(_MAX_SHARED_BYTES.values())
    return _MAX_SHARED_BYTES.get(architecture(chip), STATIC_SHARED_BYTES)


class TargetError(ValueError):
    """A chip or PTX version that cannot be compiled for; the message says why and what to use."""


def architecture(chip: str) -> int:
    """The numeric architecture of a known chip: 90 for sm_90 and sm_90a."""
    return int(CHIP.fullmatch(chip).group(1))


def runs_warpgroup_kernels(chip: str) -> bool:
    """Whether a GPU of `chip` (a library's: sm_90) runs the sm_90a kernels (wgmma, setmaxnreg: Hopper's only)."""
    return chip in WARPGROUP_CHIPS or f"{chip}a" in WARPGROUP_CHIPS


def has_instruction(chip: str, instruction: str) -> bool:
    """Whether `chip` runs `instruction` (a key of MINIMUM_ARCHITECTURE: "ldmatrix", "stmatrix")."""
    return architecture(chip) >= MINIMUM_ARCHITECTURE[instruction]


def known_chips(minimum: int = 0) -> str:
    """The chips of architecture `minimum` or newer that mlir-tile compiles for, oldest first, as text."""
    chips = sorted((c for c in CHIPS if architecture(c) >= minimum), key=lambda c: (architecture(c), c))
    return ", ".join(chips)


def known_specific_chips(minimum: int) -> str:
    return ", ".join(chip for chip in known_chips(minimum).split(", ") if chip[-1] in "af")


def chip_problem(chip: object, minimum: int = 0) -> str | None:
    """Why `chip` cannot be compiled for (None when it can): the one message for an unknown chip."""
    if isinstance(chip, str) and chip in CHIPS:
        return None
    return (f"'{chip}' is not a chip that both LLVM's NVPTX backend and CUDA 13.0's ptxas know; use one of "
            f"{known_chips(minimum)}")


def require_chip(chip: object) -> str:
    """`chip`, or TargetError with `chip_problem`'s message."""
    problem = chip_problem(chip)
    if problem:
        raise TargetError(problem)
    return chip


def ptx_version_text(number: int) -> str:
    return f"{number // 10}.{number % 10}"
