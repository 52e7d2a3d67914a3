"""Transfer benchmarks: mlir-tile's generated code against hand-written CUDA C++ on the same layouts.

    python benchmarks/bench.py build   DIR    # here (needs MLIR, NVRTC, nvJitLink): generated PTX, hand-written
                                              # CUDA C++, compile latency of both compilers on this CPU
    python benchmarks/bench.py build   DIR --set synthesis|widening   # other kernels (issue 14): the
                                              # layouts mlir_tile.tiling.synthesize picks; transfers before and
                                              # after tile-widen-matrix-transfer; `report` writes their section
    python benchmarks/bench.py scaling DIR    # here: verify+lower time vs. upstream nvgpu->nvvm
    python benchmarks/bench.py run     DIR    # GPU host (cuda-python, numpy, ptxas, cuobjdump): correctness
                                              # cross-check, throughput, SASS, cubin load / driver JIT latency
    python benchmarks/bench.py profile DIR    # GPU host with ncu: shared-pipe and stall metrics per kernel
    python benchmarks/bench.py report  DIR    # DIR/RESULTS.md from DIR/*.json
    python benchmarks/bench.py all     DIR    # build, scaling, run, report, on a machine with GPU and compiler

Both kernels of a layout run the same loop: shared memory filled with its word indices, then per thread
`iterations` x UNROLL transfers and one word stored per thread at the end. `iterations` is chosen so that
every kernel moves the same bytes (an x1 kernel runs 4x the iterations of an x4 one), which keeps launch
overhead equally small for all. Nothing may be hoisted or merged, and both kernels prevent it the same way:
- loads: each transfer's region start is `(first loaded word & zero) * 4` words after the previous one,
  with `zero` a kernel argument that is 0 at run time, so every address depends on the previous result
  (ptxas sees through an LLVM-level memory clobber and merged identical loads: measured, 25x "peak");
  loaded words are XOR-accumulated;
- stores: an empty `asm volatile("" ::: "memory")` after each store (ptxas keeps every STSM).
Both go through the same ptxas, so the SASS differs only by what each front end emitted. The hand-written
kernel shares no address arithmetic with the lowering: each thread reads its row addresses, the layout's own
offsets of the rows the ISA has it supply (`row_addresses`), from a table before the loop. The outputs of
the two kernels must be equal: a check of the generated addressing against the hand-written one.
"""
from __future__ import annotations

import functools
import itertools
import json
import math
import operator
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "python"), str(REPO / "examples")]  # the GPU host uses only their MLIR-free parts

from mlir_tile.isa import targets  # noqa: E402  (imports no MLIR)
from mlir_tile import contract  # noqa: E402  (imports no MLIR)
from mlir_tile.models.banks import transfer_wavefronts  # noqa: E402  (imports no MLIR)
from mlir_tile.algebra.layout import Layout  # noqa: E402  (imports no MLIR)
from mlir_tile.tiling.synthesize import Tile, synthesize, writer_wavefronts  # noqa: E402  (imports no MLIR)

UNROLL = 8
X4_ITERATIONS = 1024  # an x4 kernel's loop count; others move the same bytes per warp
BLOCK = 256  # 8 warps
BLOCKS_PER_SM = 8
LDSM_BYTES_PER_MATRIX = 128
SHARED_BYTES_PER_CLOCK_PER_SM = 128


@dataclass(frozen=True)
class Config:
    name: str
    opcode: str
    registers: str
    shared: str
    scope: str = "warp"
    slots: int = 4
    note: str = ""
    chains: int = 1  # loads: independent dependency chains per warp (transfer u waits for u - chains)
    waves: int = 1  # grid = waves x the blocks that fit at once; each block does 1/waves of the iterations
    blocks_per_sm: int = BLOCKS_PER_SM  # fewer for kernels whose 16 slots and 16 accumulators need 64 registers
    widen: bool = False  # (a) through tile-widen-matrix-transfer; (b) keeps the written instructions

    @property
    def count(self) -> int:
        return int(re.search(r"\.x(\d)", self.opcode).group(1))

    @property
    def is_load(self) -> bool:
        return self.opcode.startswith("ldmatrix")


X4 = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
ST4 = "stmatrix.sync.aligned.m8n8.x4.shared.b16"
REG4 = "(4,8,4):(1,4@laneid,1@laneid)"
CONFIGS = [
    Config("ld.x4", X4, REG4, "(4,8,4):(32,4,1)", note="conflict-free: 512 contiguous bytes"),
    Config("ld.x2", X4.replace("x4", "x2"), "(2,8,4):(1,4@laneid,1@laneid)", "(2,8,4):(32,4,1)", slots=2),
    Config("ld.x1", X4.replace("x4", "x1"), "(1,8,4):(1,4@laneid,1@laneid)", "(1,8,4):(32,4,1)", slots=1),
    Config("ld.x1 4 chains", X4.replace("x4", "x1"), "(1,8,4):(1,4@laneid,1@laneid)", "(1,8,4):(32,4,1)", slots=1,
           chains=4, note="four loads in flight per warp"),
    Config("ld.x1 8 chains", X4.replace("x4", "x1"), "(1,8,4):(1,4@laneid,1@laneid)", "(1,8,4):(32,4,1)", slots=1,
           chains=8, note="eight loads in flight per warp"),
    Config("ld.x1 8 chains, 8 waves", X4.replace("x4", "x1"), "(1,8,4):(1,4@laneid,1@laneid)", "(1,8,4):(32,4,1)",
           slots=1, chains=8, waves=8, note="the same bytes over 8 waves of blocks: a finished block's place is refilled"),
    Config("ld.x4, 8 waves", X4, REG4, "(4,8,4):(32,4,1)", waves=8, note="the same bytes over 8 waves of blocks"),
    Config("ld.x4.trans", X4.replace("x4", "x4.trans"), REG4, "(4,8,4):(32,4,1)"),
    Config("st.x4", ST4, REG4, "(4,8,4):(32,4,1)"),
    Config("st.x4.trans", ST4.replace("x4", "x4.trans"), REG4, "(4,8,4):(32,4,1)"),
    Config("ld.x4 2-way", X4, REG4, "(4,8,4):(64,8,1)", note="rows at a 32-byte pitch"),
    Config("ld.x4 8-way", X4, REG4, "(4,8,4):(256,32,1)", note="rows at a 128-byte pitch"),
    Config("ld.x4 warpgroup", X4, "(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)", "(4,4,8,4):(128,32,4,1)",
           scope="warpgroup", note="each warp of the warpgroup its own 512 bytes"),
    Config("spec example", X4.replace("x4", "x2"), "(2,2,8,4):(8,2,4@laneid,1@laneid)", "(2,2,8,4):(128,8,16,1)",
           slots=12, note="two x2 per transfer, slots 0,2,8,10"),
    # Nested modes and swizzles (issue 12): 16x16 b16 blocks, each one x4 (the mma A operand's order).
    Config("mma A, padded 16x16", X4, REG4, "((2,2),8,4):((288,4),36,1)",
           note="one x4 per block from a row-major tile with a 144-byte row pitch: matrix mode (2,2):(288,4)"),
    Config("64x64, 128-byte rows", X4, "(4,4,8,4):(4,1,4@laneid,1@laneid)", "(4,(2,2),8,4):(8,(256,4),32,1)",
           slots=16, blocks_per_sm=4, note="a row band's four blocks, unswizzled: 8-way conflicts"),
    Config("64x64, Sw<3,2,3>", X4, "(4,4,8,4):(4,1,4@laneid,1@laneid)", "Sw<3,2,3> o (4,(2,2),8,4):(8,(256,4),32,1)",
           slots=16, blocks_per_sm=4, note="the same blocks, swizzled (CuTe's 128-byte swizzle in words)"),
    Config("64x64, Sw<3,2,3>, B .trans", X4.replace("x4", "x4.trans"), "(4,4,8,4):(4,1,4@laneid,1@laneid)",
           "Sw<3,2,3> o (4,(2,2),8,4):(512,(8,256),32,1)", slots=16,
           blocks_per_sm=4, note="the B operand: a column band's four blocks with .trans"),
    Config("64x64, Sw<3,2,3>, stmatrix", ST4, "(4,4,8,4):(4,1,4@laneid,1@laneid)",
           "Sw<3,2,3> o (4,(2,2),8,4):(8,(256,4),32,1)", slots=16, blocks_per_sm=4, note="stores into the swizzled tile"),
]


def _synthesized(rows: int, columns: int, element_bits: int, transfer: str) -> Config:
    """A benchmark of a tile in the layout `mlir_tile.tiling.synthesize` picks: one transfer reads (or writes) four of
    its 16x16-b16 blocks with x4s in mma order, the corner blocks (first and last row band x first and last
    block column), so that it meets the layout at both ends of its swizzle or padding period."""
    tile = Tile(rows, columns, element_bits)
    choice = synthesize(tile)
    bands, block_columns, pitch = rows // 16, tile.row_words // 8, choice.pitch
    shared = Layout((2, 2, (2, 2), 8, 4), (16 * pitch * (bands - 1), 8 * (block_columns - 1), (8 * pitch, 4), pitch, 1),
                    choice.swizzle)
    opcode = {"ld": X4, "ld.trans": X4.replace("x4", "x4.trans"), "st": ST4}[transfer]
    kind = "fp16" if element_bits == 16 else "s8"
    return Config(f"{rows}x{columns} {kind}, {transfer}", opcode, "(2,2,4,8,4):(8,4,1,4@laneid,1@laneid)", str(shared),
                  slots=16, blocks_per_sm=4, note=choice.describe(tile))


# (rows, columns, element bits, transfers): 64 and 128 halves a row, B operands with .trans, C tiles with
# stmatrix, 8-bit tiles (read as b16 pairs, the s8 mma's order)
SYNTHESIZED = [(64, 64, 16, ("ld", "ld.trans", "st")), (128, 64, 16, ("ld", "ld.trans")),
               (64, 128, 16, ("ld", "ld.trans", "st")), (128, 128, 16, ("ld", "ld.trans", "st")),
               (64, 32, 16, ("ld", "ld.trans", "st")), (128, 32, 16, ("ld",)), (32, 64, 16, ("ld.trans",)),
               (64, 64, 8, ("ld", "st")), (64, 128, 8, ("ld",)), (128, 128, 8, ("ld", "st")), (32, 256, 8, ("ld",))]
WRITER_BLOCKS_PER_SM = 4
# what every transfer kernel moves per SM, over the writer's warps
WRITER_BYTES_PER_WARP = X4_ITERATIONS * UNROLL * 4 * LDSM_BYTES_PER_MATRIX * BLOCKS_PER_SM // WRITER_BLOCKS_PER_SM


def writer_source(tile: Tile) -> str:
    """CUDA C++ for the writer side of a synthesized tile: every warp fills the whole tile with 16-byte vectors
    in row order (lane t of a warp instruction writes the instruction's chunk t, as cp.async and TMA do), at
    the synthesized layout's addresses, `iterations` times. As in the transfer kernels, the lane's part of
    the address is swizzled once per iteration and each store's own part is an xor with an immediate (lane
    and store parts share no bit, and a swizzle is linear over xor); the lane part depends on `it & zero`,
    so that ptxas cannot hoist every address out of the loop (64 of them spill)."""
    choice = synthesize(tile)
    per_row = tile.row_words // 4
    linear = lambda chunk: (chunk // per_row) * choice.pitch + (chunk % per_row) * 4
    swizzled = choice.swizzle or (lambda offset: offset)
    lane_bits = functools.reduce(operator.or_, (linear(lane) for lane in range(32)))
    stores = []
    for step in range(tile.rows * tile.row_words // 4 // 32):
        if linear(32 * step) & lane_bits:
            raise ValueError(f"{tile}: a store's part of the address shares bits with the lane's")
        stores.append(f'asm volatile("st.shared.v4.b32 [%0], {{%1, %1, %1, %1}};" :: '
                      f'"r"(smem + 4 * (swizzled_lane ^ {swizzled(linear(32 * step))}u)), "r"(value) : "memory");')
    body = "\n    ".join(stores)
    return f"""
extern "C" __global__ void __launch_bounds__({BLOCK}, {WRITER_BLOCKS_PER_SM}) writer(unsigned *out, int iterations, unsigned zero) {{
  __shared__ __align__(128) unsigned sm[{tile.rows * choice.pitch}];
  const unsigned lane = threadIdx.x & 31, smem = (unsigned)__cvta_generic_to_shared(sm);
  unsigned value = lane ^ zero;
  for (int it = 0; it < iterations; ++it) {{
    const unsigned this_lane = lane ^ (it & zero);
    const unsigned lane_linear = (this_lane / {per_row}) * {choice.pitch} + (this_lane % {per_row}) * 4;
    const unsigned swizzled_lane = {_c_swizzled("lane_linear", choice.swizzle)};
    {body}
    value += 1;
  }}
  __syncthreads();
  out[blockIdx.x * {BLOCK} + threadIdx.x] = sm[threadIdx.x];
}}
"""


SYNTHESIS_CONFIGS = [_synthesized(rows, columns, bits, transfer) for rows, columns, bits, transfers in SYNTHESIZED
                     for transfer in transfers]

# Widening (issue 14): each transfer as written (several .x1/.x2) and through tile-widen-matrix-transfer.
_WRITTEN = [
    Config("ld.x1, 4 repeats", X4.replace("x4", "x1"), "(4,1,8,4):(1,1,4@laneid,1@laneid)", "(4,1,8,4):(32,0,4,1)",
           note="512 contiguous bytes as four x1"),
    Config("ld.x2, 2 repeats", X4.replace("x4", "x2"), "(2,2,8,4):(2,1,4@laneid,1@laneid)", "(2,2,8,4):(64,32,4,1)",
           note="512 contiguous bytes as two x2"),
    Config("st.x1, 4 repeats", ST4.replace("x4", "x1"), "(4,1,8,4):(1,1,4@laneid,1@laneid)", "(4,1,8,4):(32,0,4,1)",
           note="512 contiguous bytes as four x1"),
    next(config for config in CONFIGS if config.name == "spec example"),
]
WIDENING_CONFIGS = [replace(config, name=f"{config.name}{', widened' if widen else ''}", widen=widen)
                    for config in _WRITTEN for widen in (False, True)]
CONFIG_SETS = {"transfers": CONFIGS, "synthesis": SYNTHESIS_CONFIGS, "widening": WIDENING_CONFIGS}


def instructions_per_transfer(config: Config) -> int:
    """Warp instructions one transfer issues: one per repeat coordinate (the group axis is other warps)."""
    sizes = Layout.parse(config.shared).sizes
    return math.prod(sizes[(1 if config.scope != "warp" else 0):-3])


def iterations(config: Config) -> int:
    """Loop iterations per block such that the kernel moves as many matrices per SM as a one-wave x4 load
    kernel of X4_ITERATIONS iterations at BLOCKS_PER_SM blocks/SM (a kernel of fewer blocks/SM runs longer)."""
    per_warp = X4_ITERATIONS * 4 * BLOCKS_PER_SM // config.blocks_per_sm
    return per_warp // (config.count * instructions_per_transfer(config) * config.waves)


# The specification's example kernel written by hand, for the NVRTC side of the compile-latency comparison.
SPEC_EXAMPLE_CUDA = r"""
extern "C" __global__ void __launch_bounds__(32) matrix_kernel(const unsigned *A, unsigned *Out) {
  __shared__ __align__(16) unsigned SM[256];
  const unsigned lane = threadIdx.x & 31;
  for (int q = 0; q < 4; ++q) {
    unsigned n = lane + 32 * q;
    SM[(n / 8) * 8 + ((n / 2) % 4) + (n % 2) * 128] = A[n];
  }
  __syncthreads();
  unsigned raw[12];
  for (int i = 0; i < 12; ++i) raw[i] = 4294966519u;
  unsigned base = (unsigned)__cvta_generic_to_shared(SM) + 4 * ((lane & 7) * 16 + ((lane >> 3) & 1) * 8);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(raw[0]), "=r"(raw[2]) : "r"(base));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2+512];" : "=r"(raw[8]), "=r"(raw[10]) : "r"(base));
  for (int i = 0; i < 12; ++i) Out[lane * 12 + i] = raw[i];
}
"""


def predicted_share(config: Config) -> float:
    """The share of 128 B/clock/SM the bank model predicts for the kernel where shared memory is what limits
    (`mlir_tile.models.banks`: one wavefront a matrix is 1)."""
    transfer = contract.verdict(contract.Query.of_layouts(config.opcode, config.registers, config.shared, register_slots=config.slots,
                                        shared_words=shared_words(config), scope=config.scope, base_alignment=max(128, contract.aligned_for(Layout.parse(config.shared))),
                                        block_size=(BLOCK, 1, 1))).require()
    return transfer_wavefronts(transfer).bandwidth_share


def shared_words(config: Config) -> int:
    cosize = Layout.parse(config.shared).cosize
    return -(-cosize // BLOCK) * BLOCK


# --------------------------------------------------------------------------------------------- build
def generated_kernel(config: Config):
    """The benchmark kernel through the mlir-tile builder."""
    from mlir import ir
    from mlir.dialects import arith, llvm, memref, scf

    from mlir_tile.builder import Kernel, transfer
    from mlir_tile.contract import parse_opcode
    words = shared_words(config)
    registers_layout = Layout.parse(config.registers)
    used_slots = sorted({registers_layout.offset(*c) for c in registers_layout.coordinates()})
    view_type = f"memref<{words}xi32, strided<[1], offset: ?>, #gpu.address_space<workgroup>>"
    with Kernel("bench", ["memref<16777216xi32>", "i32", "i32"], block=(BLOCK, 1, 1),
                min_blocks_per_sm=config.blocks_per_sm, context=ir.Context()) as k:
        out, iterations, zero = k.arguments
        i32, index = ir.IntegerType.get_signless(32), ir.IndexType.get()
        tid = k.thread_id("x")
        sm = k.shared("sm", words, alignment=max(128, contract.aligned_for(Layout.parse(config.shared))))  # as in the C++ kernel
        with k.loop(0, words // BLOCK) as step:
            position = arith.addi(tid, arith.muli(step, k.index(BLOCK)))
            k.store(arith.index_cast(i32, position), sm, [position])
        k.barrier()
        registers = k.registers(config.slots)
        lane = k.lane_id()
        if not config.is_load:  # the same data in every warp: concurrent stores to one region agree
            for slot in used_slots:
                k.store(arith.index_cast(i32, arith.addi(lane, k.index(slot))), registers, [slot])
        start = k.constant(0)
        chains = config.chains if config.is_load else 1
        # An i32 induction variable, like the C++ `int it`: the loop scaffolding is the same in both kernels.
        loop = scf.ForOp(k.constant(0), iterations, k.constant(1),
                         [start] * chains + [start] * (len(used_slots) if config.is_load else 0))
        # the loads' loop-carried region start (0 at run time: they stay in the loop) steps in the tile's
        # alignment, whole swizzle periods, as a view's dynamic offset must ([row-alignment])
        step = contract.aligned_for(config.shared) // 4
        with ir.InsertionPoint(loop.body):
            carried = list(loop.inner_iter_args)
            offsets, accumulators = carried[:chains], carried[chains:]
            for unrolled in range(UNROLL):
                if config.is_load:
                    offset = offsets[unrolled % chains]
                    words_offset = arith.muli(arith.index_cast(index, offset), k.index(step))
                    view = memref.subview(sm, [words_offset], [words], [1], result_type=ir.Type.parse(view_type))
                    transfer(config.opcode, registers, view, dst_layout=config.registers,
                                    src_layout=config.shared, scope=config.scope)
                    loaded = [k.load(registers, [slot]) for slot in used_slots]
                    accumulators = [arith.xori(a, v) for a, v in zip(accumulators, loaded)]
                    offsets[unrolled % chains] = arith.andi(loaded[0], zero)
                else:
                    transfer(config.opcode, sm, registers, dst_layout=config.shared,
                                    src_layout=config.registers, scope=config.scope)
                    llvm.inline_asm(None, [], "", "~{memory}", has_side_effects=True)
            scf.YieldOp(offsets + accumulators)
        total = zero if config.is_load else start
        for value in loop.results:
            total = arith.xori(total, value)
        if not config.is_load:  # stores: read back one word so the result depends on the stores
            total = arith.xori(total, k.load(sm, [tid]))
        global_id = arith.addi(tid, arith.muli(_block_id(), k.index(BLOCK)))
        k.store(total, out, [global_id])
    assert parse_opcode(config.opcode)
    if config.widen:
        from mlir_tile.compiler.pipeline import run_pipeline

        run_pipeline(k.module.operation, ["tile-widen-matrix-transfer"], input_is_file=False)
        if config.opcode in str(k.module):
            raise ValueError(f"{config.name}: tile-widen-matrix-transfer left the transfer as written")
    return k.module


def _block_id():
    from mlir.dialects import gpu

    return gpu.block_id(gpu.Dimension.x)


def row_addresses(config: Config) -> list[list[int]]:
    """For each repeat, the word offset of the shared row each thread of the scope supplies, from the layout's
    definition alone (lane l of warp w: row l % 8 of matrix (l / 8) % N, the ISA's rule; `Layout.offset`
    applies the swizzle): what the hand-written kernel addresses, derived apart from the lowering."""
    shared = Layout.parse(config.shared)
    group = 1 if config.scope != "warp" else 0
    warps = shared.sizes[0] if group else 1
    return [[shared.offset(*((thread // 32,) if group else ()), *repeat, (thread % 32 // 8) % config.count,
                           thread % 8, 0) for thread in range(32 * warps)]
            for repeat in itertools.product(*(range(n) for n in shared.sizes[group:-3]))]


def hand_written_source(config: Config) -> str:
    """The same kernel in CUDA C++ with inline PTX: each thread reads its row addresses from a table of the
    layout's own offsets before the loop (no address arithmetic in it), and a repeat whose offset is the same
    constant from repeat 0 for every thread is an immediate, as one writes it by hand."""
    registers = Layout.parse(config.registers)
    rows = row_addresses(config)
    threads = len(rows[0])
    group = 1 if config.scope != "warp" else 0
    count = config.count
    repeats = list(itertools.product(*(range(n) for n in Layout.parse(config.shared).sizes[group:-3])))
    used_slots = sorted({registers.offset(*c) for c in registers.coordinates()})
    chains = config.chains if config.is_load else 1
    table = ", ".join(str(offset) for row in rows for offset in row)
    body, used = [], [0]
    for position, repeat in enumerate(repeats):
        prefix = (0,) * group + repeat
        steps = {rows[position][t] - rows[0][t] for t in range(threads)}
        if len(steps) == 1:  # the same step for every thread: repeat 0's address and an immediate
            offset, pointer = 4 * steps.pop(), "address_0"
        else:
            offset, pointer = 0, f"address_{position}"
            used.append(position)
        load_pointer = f"({pointer} + offset[u % CHAINS] * {contract.aligned_for(config.shared)})"  # as generated
        slots = [registers.offset(*prefix, i, 0, 0) for i in range(count)]
        names = ", ".join(f"%{i}" for i in range(count))
        if config.is_load:
            outputs = ", ".join(f'"=r"(r[{s}])' for s in slots)
            body.append(f'asm volatile("{config.opcode} {{{names}}}, [%{count}+{offset}];" : {outputs} : "r"({load_pointer}));')
        else:
            inputs = ", ".join(f'"r"(r[{s}])' for s in slots)
            body.append(f'asm volatile("{config.opcode} [%0+{offset}], {{{", ".join(f"%{i + 1}" for i in range(count))}}};" :: "r"({pointer}), {inputs} : "memory");')
    if config.is_load:  # the next region start of this chain depends on this result, as in the generated kernel
        body.append(" ".join(f"acc{j} ^= r[{s}];" for j, s in enumerate(used_slots))
                    + f" offset[u % CHAINS] = r[{used_slots[0]}] & zero;")
    else:
        body.append('asm volatile("" ::: "memory");')
    init = " ".join(f"r[{s}] = lane + {s};" for s in used_slots) if not config.is_load else ""
    accumulators = " ".join(f"unsigned acc{j} = 0;" for j in range(len(used_slots))) if config.is_load else ""
    total = " ^ ".join(f"acc{j}" for j in range(len(used_slots)))
    words = shared_words(config)
    return f"""
__constant__ unsigned row_offsets[{len(rows) * threads}] = {{{table}}};

extern "C" __global__ void __launch_bounds__({BLOCK}, {config.blocks_per_sm}) bench(unsigned *out, int iterations, unsigned zero) {{
  __shared__ __align__(128) unsigned sm[{words}];
  for (unsigned i = threadIdx.x; i < {words}; i += {BLOCK}) sm[i] = i;
  __syncthreads();
  const unsigned lane = threadIdx.x & 31, thread = threadIdx.x % {threads};
  const unsigned smem = (unsigned)__cvta_generic_to_shared(sm);
  {" ".join(f"const unsigned address_{r} = smem + 4 * row_offsets[{r * threads} + thread];" for r in used)}
  const int CHAINS = {chains};
  unsigned offset[CHAINS] = {{0}};
  unsigned r[{config.slots}];
  {init}
  {accumulators}
  for (int it = 0; it < iterations; ++it) {{
#pragma unroll
    for (int u = 0; u < {UNROLL}; ++u) {{
      {' '.join(body)}
    }}
  }}
  unsigned total = {total if config.is_load else '0'};
  {'for (int c = 0; c < CHAINS; ++c) total ^= offset[c];' if config.is_load else ''}
  {'' if config.is_load else 'total ^= sm[threadIdx.x];'}
  out[blockIdx.x * {BLOCK} + threadIdx.x] = total;
}}
"""


def _c_swizzled(value: str, swizzle) -> str:
    if swizzle is None:
        return value
    return f"({value} ^ (({value} >> {swizzle.shift}) & {swizzle.mask}))"


def build(directory: Path, config_set: str = "transfers") -> None:
    from mlir_tile.compiler.compile import compile_to_ptx

    directory.mkdir(parents=True, exist_ok=True)
    manifest = []
    only = os.environ.get("BENCH_ONLY")  # a part of the names: build (and later run) just those kernels
    for index, config in enumerate(CONFIG_SETS[config_set]):
        if only and only not in config.name:
            continue
        ptx = compile_to_ptx(generated_kernel(config))
        (directory / f"gen_{index}.ptx").write_text(ptx)
        (directory / f"hand_{index}.cu").write_text(hand_written_source(config))
        manifest.append({**asdict(config), "index": index, "count": config.count, "words": shared_words(config),
                         "instructions_per_transfer": instructions_per_transfer(config),
                         "iterations": iterations(config), "predicted_share": predicted_share(config)})
    (directory / "configs.json").write_text(json.dumps(manifest, indent=1))
    (directory / "set.json").write_text(json.dumps({"set": config_set}))
    if config_set == "synthesis":
        writers = []
        for index, (rows, columns, bits, _) in enumerate(SYNTHESIZED):
            tile = Tile(rows, columns, bits)
            (directory / f"writer_{index}.cu").write_text(writer_source(tile))
            wavefronts, minimum = writer_wavefronts(tile, synthesize(tile))
            tile_bytes = rows * tile.row_words * 4
            writers.append({"index": index, "name": f"{rows}x{columns} {'fp16' if bits == 16 else 's8'}",
                            "tile_bytes": tile_bytes, "iterations": WRITER_BYTES_PER_WARP // tile_bytes,
                            "predicted_share": minimum / wavefronts})
        (directory / "writers.json").write_text(json.dumps(writers, indent=1))
    if not only and config_set == "transfers":
        (directory / "compile.json").write_text(json.dumps(compile_latency(directory), indent=1))


# ------------------------------------------------------------------------------------ compile latency
def compile_once(kind: str, tag: str, directory: Path | None = None) -> dict:
    """One compile of the spec example to a cubin, in ms per step. kind: "mlir-tile" (builder -> PTX -> cubin
    by nvJitLink, the PTX made new by `tag` so that the cubin cache cannot answer), "mlir-tile-cached" (the
    same, for the unchanged kernel: answered by the cache once assembled) or "nvrtc" / "nvrtc-minimal"
    (C++ -> cubin, the source made new by `tag`)."""
    from cuda.core import Program, ProgramOptions

    if kind.startswith("mlir-tile"):
        import seed_example
        import mlir_tile.builder  # noqa: F401  (what build_module imports on first use: a module, not the compile)
        from mlir_tile.compiler.compile import compile_to_ptx, cubin_of_ptx

        start = time.perf_counter()
        ptx = compile_to_ptx(seed_example.build_module())
        middle = time.perf_counter()
        cubin = cubin_of_ptx(ptx if kind == "mlir-tile-cached" else f"{ptx}\n// {tag}\n")
        end = time.perf_counter()
        steps = {"builder_to_ptx": (middle - start) * 1e3, "ptx_to_cubin": (end - middle) * 1e3}
        if directory is not None:
            (directory / "spec_example.ptx").write_text(ptx)
    else:
        options = ProgramOptions(arch=targets.DEFAULT_CHIP, minimal=kind == "nvrtc-minimal" or None)
        start = time.perf_counter()
        cubin = Program(f"{SPEC_EXAMPLE_CUDA}\n// {tag}\n", "c++", options).compile("cubin").code
        steps = {"cpp_to_cubin": (time.perf_counter() - start) * 1e3}
    if directory is not None:
        (directory / f"spec_example.{kind}.cubin").write_bytes(cubin)
    return {**steps, "total": sum(steps.values())}


COMPILERS = ("mlir-tile", "mlir-tile-cached", "nvrtc", "nvrtc-minimal")


def compile_latency(directory: Path, repeats: int = 20, fresh_processes: int = 21) -> dict:
    """Both compilers on this CPU. first: the first compile in a fresh process that has imported its Python
    modules (libraries such as NVRTC and nvJitLink load on first use, and that counts), median of
    `fresh_processes`; warm: median of `repeats` compiles in one process. The compilers take turns in both.
    The cubin cache starts empty, in a folder of its own. The sources' bytecode is written first, as an
    installed package has it (with PYTHONDONTWRITEBYTECODE set and edited sources, every fresh process would
    compile them again: 30 ms more)."""
    import compileall

    for folder in ("python", "dialect", "passes", "examples"):
        compileall.compile_dir(str(REPO / folder), quiet=1)
    (directory / "spec_example.cu").write_text(SPEC_EXAMPLE_CUDA)
    os.environ["MLIR_TILE_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-cubin-cache-")
    median = lambda values: sorted(values)[len(values) // 2]
    compile_once("mlir-tile-cached", "")  # the unchanged kernel, assembled once before any measurement
    first = {kind: [] for kind in COMPILERS}
    for _ in range(fresh_processes):
        for kind in COMPILERS:
            first[kind].append(json.loads(subprocess.run([sys.executable, __file__, "compile-once", kind],
                                                         capture_output=True, text=True, check=True).stdout))
    warm = {kind: [] for kind in COMPILERS}
    for attempt in range(repeats + 1):
        for kind in COMPILERS:
            # the last attempt leaves its PTX and cubins in `directory` for the GPU host
            warm[kind].append(compile_once(kind, f"warm {attempt}", directory if attempt == repeats else None))
    shutil.rmtree(os.environ.pop("MLIR_TILE_CACHE_DIR"))
    result = {kind: {"first": {step: median([run[step] for run in first[kind]]) for step in first[kind][0]},
                     "warm": {step: median([run[step] for run in warm[kind][1:]]) for step in warm[kind][0]}}
              for kind in COMPILERS}
    return {"cpu": _cpu_name(), **result}


def _cpu_name() -> str:
    """The build machine's CPU model and the cores this process may use."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {len(os.sched_getaffinity(0))} cores"


# ----------------------------------------------------------------------------------------------- run
def ptx_to_cubin(ptx_path: Path) -> Path:
    cubin = ptx_path.with_suffix(".cubin")
    subprocess.run(["ptxas", "-arch=sm_90", "-O3", str(ptx_path), "-o", str(cubin)], check=True)
    return cubin


SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
ADDRESS_OPS = ("IADD", "IMAD", "LEA", "SHF", "LOP3", "SHL", "SHR", "IABS", "SEL", "PRMT", "BFE", "BMSK", "VIADD")


def sass_loops(sass: str) -> list[list[tuple[int, str, str]]]:
    """Each loop of the SASS as its (address, opcode, operands): the instructions from a backward branch's
    target address up to that branch (cuobjdump writes branch targets as addresses)."""
    instructions = [(int(m.group(1), 16), m.group(2), m.group(3)) for m in map(SASS_LINE.search, sass.splitlines()) if m]
    position = {address: i for i, (address, _, _) in enumerate(instructions)}
    loops = []
    for end, (address, opcode, operands) in enumerate(instructions):
        target = re.search(r"0x([0-9a-f]+)", operands) if opcode.startswith("BRA") else None
        if target and int(target.group(1), 16) < address and int(target.group(1), 16) in position:
            loops.append(instructions[position[int(target.group(1), 16)]: end + 1])
    if not loops:
        raise ValueError("no loop found in the SASS")
    return loops


def mma_loop(sass: str) -> list[tuple[int, str, str]]:
    """The main loop of an mma kernel: of the SASS's innermost loops (a persistent kernel's tile loop holds
    its k-tile loops), the one with the most HMMA, the shortest of those (a kernel's predicate-free twin of
    its predicated loop)."""
    loops = sass_loops(sass)
    spans = [(body[0][0], body[-1][0]) for body in loops]
    innermost = [body for body, (first, last) in zip(loops, spans)
                 if not any(first <= inner_first and inner_last <= last and (inner_first, inner_last) != (first, last)
                            for inner_first, inner_last in spans)]
    return max(innermost, key=lambda body: (sum(op.startswith("HMMA") for _, op, _ in body), -len(body)))


def mma_loop_counts(sass: str) -> dict:
    """`mma_loop`'s instructions by kind, NOPs (the scheduler's padding) left out, and per HMMA."""
    opcodes = [op.split(".")[0] for _, op, _ in mma_loop(sass) if op != "NOP"]
    kinds = {kind: opcodes.count(kind) for kind in ("HMMA", "LDSM", "LDGSTS", "BAR")}
    return {"instructions": len(opcodes), **kinds, "other": len(opcodes) - sum(kinds.values()),
            "per HMMA": round(len(opcodes) / max(1, kinds["HMMA"]), 2)}


def sass_loop_stats(sass: str) -> dict:
    """Instruction mix of the loop that holds the most LDSM/STSM."""
    matrix = lambda body: sum(op.startswith(("LDSM", "STSM")) for _, op, _ in body)
    body = max(sass_loops(sass), key=lambda b: (matrix(b), -len(b)))
    counts: dict[str, int] = {}
    accumulate = 0
    for _, opcode, operands in body:
        counts[opcode.split(".")[0]] = counts.get(opcode.split(".")[0], 0) + 1
        accumulate += opcode.startswith("LOP3") and re.search(r", 0x(96|3c|5a|66),", operands) is not None
    transfers = matrix(body)
    matrices = sum(int(re.search(r"88(?:\.(\d))?$", op).group(1) or 1) for _, op, _ in body if op.startswith(("LDSM", "STSM")))
    address = sum(v for k, v in counts.items() if k.startswith(ADDRESS_OPS)) - accumulate
    return {
        "loop_instructions": len(body),
        "matrix_instructions": transfers,
        "matrices_per_instruction": matrices / transfers,  # LDSM.16.M88.4 moves 4, LDSM.16.M88 one
        "xor_accumulate": accumulate,  # the benchmark's own XOR of loaded words, not address math
        "address_alu": address,
        "moves": sum(v for k, v in counts.items() if k.startswith("MOV")),
        "instructions_per_matrix_instruction": len(body) / transfers,
        "address_alu_per_matrix_instruction": address / transfers,
        "mix": counts,
    }


def sass_of(cubin: Path) -> str:
    return subprocess.run(["cuobjdump", "--dump-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


def run(directory: Path) -> None:
    os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")  # a loaded kernel is loaded, not deferred to its launch
    import numpy as np
    from cuda.core import Device, Program, ProgramOptions

    from mlir_tile.runtime import Runtime

    configs = json.loads((directory / "configs.json").read_text())
    results = {"configs": [], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    with Runtime() as runtime:
        device: Device = runtime.device
        sms = device.properties.multiprocessor_count
        clock_hz = device.properties.clock_rate * 1e3
        results["device"] = {"name": device.name, "sms": sms, "clock_mhz": clock_hz / 1e6,
                             "cuda_driver_api": _driver_version(),
                             "peak_tb_s": SHARED_BYTES_PER_CLOCK_PER_SM * sms * clock_hz / 1e12}
        options = ProgramOptions(arch=targets.DEFAULT_CHIP, std="c++17")
        for config in configs:
            index = config["index"]
            hand_source = (directory / f"hand_{index}.cu").read_text()
            hand_ptx_path = directory / f"hand_{index}.ptx"
            hand_ptx_path.write_bytes(Program(hand_source, "c++", options).compile("ptx").code.rstrip(b"\0"))  # NVRTC NUL-terminates
            cubins = {"generated": ptx_to_cubin(directory / f"gen_{index}.ptx"), "hand": ptx_to_cubin(hand_ptx_path)}
            entry = {"name": config["name"], "note": config["note"], "predicted_share": config["predicted_share"],
                     "matrices_per_transfer": config["count"] * config["instructions_per_transfer"]}
            grid = sms * config.get("blocks_per_sm", BLOCKS_PER_SM) * config["waves"]
            outputs = {}
            warps = grid * BLOCK // 32
            instructions = warps * config["iterations"] * UNROLL * config["instructions_per_transfer"]
            bytes_moved = instructions * config["count"] * LDSM_BYTES_PER_MATRIX
            for kind, cubin in cubins.items():
                outputs[kind], entry[kind] = measure(runtime, cubin, "bench", config["iterations"], grid, bytes_moved,
                                                     results["device"]["peak_tb_s"])
            entry["outputs_equal"] = bool(np.array_equal(outputs["generated"], outputs["hand"]))
            entry["ratio"] = entry["generated"]["tb_s"] / entry["hand"]["tb_s"]
            results["configs"].append(entry)
            print(f"{config['name']:18} gen {entry['generated']['tb_s']:6.2f} TB/s ({entry['generated']['percent_of_peak']:5.1f}%)"
                  f"  hand {entry['hand']['tb_s']:6.2f} TB/s ({entry['hand']['percent_of_peak']:5.1f}%)  ratio {entry['ratio']:.3f}"
                  f"  same output: {entry['outputs_equal']}", flush=True)
        if (directory / "compile.json").exists():  # built with every kernel (no BENCH_ONLY)
            results["load_latency_ms"] = load_latency(runtime, directory)
        if (directory / "writers.json").exists():
            results["writers"] = []
            for writer in json.loads((directory / "writers.json").read_text()):
                source = (directory / f"writer_{writer['index']}.cu").read_text()
                ptx_path = directory / f"writer_{writer['index']}.ptx"
                ptx_path.write_bytes(Program(source, "c++", options).compile("ptx").code.rstrip(b"\0"))
                grid = sms * WRITER_BLOCKS_PER_SM
                bytes_moved = grid * BLOCK // 32 * writer["iterations"] * writer["tile_bytes"]
                _, measured = measure(runtime, ptx_to_cubin(ptx_path), "writer", writer["iterations"], grid,
                                      bytes_moved, results["device"]["peak_tb_s"], with_sass=False)
                results["writers"].append({**writer, "hand": measured})
                print(f"{writer['name']} writer: {measured['percent_of_peak']:5.1f}%", flush=True)
    (directory / "results.json").write_text(json.dumps(results, indent=1))


def measure(runtime, cubin: Path, kernel: str, iterations: int, grid: int, bytes_moved: int, peak_tb_s: float,
            with_sass: bool = True):
    """(the kernel's output, its timing): one launch for the output, then the median of 25 timed launches
    after 3 warm-ups; the SASS loop's instruction mix (of a loop of LDSM/STSM)."""
    import numpy as np

    module = runtime.load_cubin(cubin.read_bytes(), name=cubin.stem)
    arguments = [np.zeros(16777216, dtype=np.uint32), np.int32(iterations), np.int32(0)]
    output = module.launch(kernel, arguments, grid=grid, block=BLOCK)[0][: grid * BLOCK]
    timing = module.time(kernel, arguments, grid=grid, block=BLOCK, warmup=3, repeats=25)
    seconds = timing.median / 1e3
    return output, {"ms": timing.median, "tb_s": bytes_moved / seconds / 1e12,
                    "percent_of_peak": 100 * bytes_moved / seconds / (peak_tb_s * 1e12),
                    **({"sass": sass_loop_stats(sass_of(cubin))} if with_sass else {})}



def load_latency(runtime, directory: Path, repeats: int = 20) -> dict:
    """On the GPU host, for the spec example, median of `repeats` in ms: each compiler's cubin (built by
    `build`) -> loaded kernel; for comparison, mlir-tile's PTX -> loaded kernel through the driver's JIT and
    NVRTC C++ -> cubin -> loaded kernel on this host's CPU, each of new text (a comment unique to this process:
    the driver's JIT cache persists between processes). Also checks that mlir-tile's cubin computes the
    specification's table."""
    from cuda.core import ObjectCode, Program, ProgramOptions

    import seed_example

    ptx = (directory / "spec_example.ptx").read_text()
    process_tag = f"{time.time_ns()}"

    def timed(step) -> float:
        times = []
        for attempt in range(repeats):
            start = time.perf_counter()
            step(f"\n// load {process_tag} {attempt}\n")
            times.append((time.perf_counter() - start) * 1e3)
        return sorted(times)[repeats // 2]

    results = {}
    for kind in COMPILERS:
        image = (directory / f"spec_example.{kind}.cubin").read_bytes()
        results[f"{kind}_cubin_load"] = timed(lambda _: ObjectCode.from_cubin(image).get_kernel(seed_example.KERNEL_NAME))
    results["ptx_driver_jit"] = timed(lambda tag: runtime.load_ptx(ptx + tag).kernel(seed_example.KERNEL_NAME))
    for kind in ("nvrtc", "nvrtc-minimal"):
        options = ProgramOptions(arch=targets.DEFAULT_CHIP, minimal=kind == "nvrtc-minimal" or None)
        compile_and_load = lambda tag: Program(SPEC_EXAMPLE_CUDA + tag, "c++", options).compile("cubin")
        results[f"{kind}_on_gpu_host"] = timed(lambda tag: compile_and_load(tag).get_kernel(seed_example.KERNEL_NAME))
    table = seed_example.run_on_gpu((directory / "spec_example.mlir-tile.cubin").read_bytes())
    results["mlir_tile_cubin_gives_the_spec_table"] = bool((table == seed_example.expected_table(seed_example.inputs())).all())
    return results


# ------------------------------------------------------------------------------------------- scaling
def scaling(directory: Path, sizes=(100, 1000, 10000)) -> None:
    """verify + lower time of N transfers, against N upstream nvgpu.ldmatrix lowered by
    convert-nvgpu-to-nvvm; both parsed first, then timed in this process through the same harness, the
    median of 7 runs (3 for 10,000 transfers)."""
    import statistics

    from mlir_tile.compiler.pipeline import run_pipeline
    from mlir_tile.tools.driver import Session

    def timed(text, pipeline):
        with Session() as session:
            module = session.parse(text, "scaling.mlir")
            start = time.perf_counter()
            run_pipeline(module, pipeline)
            return (time.perf_counter() - start) * 1e3

    results = []
    for count in sizes:
        median = lambda text, pipeline: statistics.median(timed(text, pipeline) for _ in range(7 if count < 10000 else 3))
        tile_ms = median(scaling_module(count, upstream=False), ["tile-verify-matrix-transfer", "tile-lower-matrix-transfer"])
        upstream_ms = median(scaling_module(count, upstream=True), ["gpu.module(convert-nvgpu-to-nvvm)"])
        results.append({"transfers": count, "tile_ms": tile_ms, "upstream_ms": upstream_ms,
                        "tile_us_per_transfer": tile_ms * 1e3 / count, "ratio": tile_ms / upstream_ms})
        print(results[-1], flush=True)
    (directory / "scaling.json").write_text(json.dumps(results, indent=1))  # `report DIR` puts it in RESULTS.md


def scaling_module(count: int, upstream: bool) -> str:
    head = (f'gpu.module @k [#nvvm.target<chip = "{targets.DEFAULT_CHIP}">] {{\n'
            '  memref.global "private" @sm : memref<512xi32, #gpu.address_space<workgroup>> {alignment = 16 : i64}\n'
            '  gpu.func @f() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {\n'
            '    %sm = memref.get_global @sm : memref<512xi32, #gpu.address_space<workgroup>>\n')
    if upstream:
        head = head.replace("memref<512xi32", "memref<16x32xf16")
        body = ["    %c0 = arith.constant 0 : index"]
        body += [f"    %v{i} = nvgpu.ldmatrix %sm[%c0, %c0] {{numTiles = 4 : i32, transpose = false}} : "
                 f"memref<16x32xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>" for i in range(count)]
    else:
        body = ["    %regs = memref.alloca() : memref<4xi32, #gpu.address_space<private>>"]
        body += ['    "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", '
                 'scope = "warp", dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, '
                 'src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi32, #gpu.address_space<private>>, '
                 'memref<512xi32, #gpu.address_space<workgroup>>) -> ()' for _ in range(count)]
    return head + "\n".join(body) + "\n    gpu.return\n  }\n}\n"


def _driver_version() -> str:
    """The CUDA version the installed driver supports, e.g. 13.0."""
    from cuda.bindings import driver

    status, version = driver.cuDriverGetVersion()
    return f"{version // 1000}.{version % 1000 // 10}" if status == driver.CUresult.CUDA_SUCCESS else "unknown"


# ------------------------------------------------------------------------------------------- profile
NCU_STALLS = ("short_scoreboard", "mio_throttle", "not_selected", "math_pipe_throttle", "wait")
NCU_METRICS = {
    "shared_wavefronts_pct": "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed",
    "lsu_instructions_pct": "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active",
    "warps_active_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "issue_active_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    **{f"stall_{name}": f"smsp__average_warps_issue_stalled_{name}_per_issue_active.ratio" for name in NCU_STALLS},
}


def launch_all(directory: Path) -> None:
    """Each kernel that `run` compiled, launched once (what `profile` runs under ncu)."""
    import numpy as np

    from mlir_tile.runtime import Runtime

    with Runtime() as runtime:
        sms = runtime.device.properties.multiprocessor_count
        for config in json.loads((directory / "configs.json").read_text()):
            grid = sms * config.get("blocks_per_sm", BLOCKS_PER_SM) * config["waves"]
            for kind in ("gen", "hand"):
                module = runtime.load_cubin((directory / f"{kind}_{config['index']}.cubin").read_bytes())
                module.launch("bench", [np.zeros(16777216, dtype=np.uint32), np.int32(config["iterations"]),
                                        np.int32(0)], grid=grid, block=BLOCK)


def profile(directory: Path) -> None:
    """ncu --clock-control none over launch_all: how busy the shared-memory pipe is and why warps stall."""
    import csv
    import io

    command = ["ncu", "--clock-control", "none", "--csv", "--metrics", ",".join(NCU_METRICS.values()),
               sys.executable, __file__, "launch", str(directory)]
    rows = list(csv.DictReader(io.StringIO(_ncu_csv(command))))
    by_launch: dict[int, dict] = {}
    for row in rows:
        value = row["Metric Value"].replace(",", "")
        by_launch.setdefault(int(row["ID"]), {})[row["Metric Name"]] = float(value) if value.replace(".", "").isdigit() else math.nan
    names = {metric: key for key, metric in NCU_METRICS.items()}
    kernels = [(config["name"], kind) for config in json.loads((directory / "configs.json").read_text())
               for kind in ("generated", "hand")]
    profiles = [{"name": name, "kind": kind, **{names[m]: v for m, v in metrics.items()}}
                for (name, kind), (_, metrics) in zip(kernels, sorted(by_launch.items()))]
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    (directory / "profile.json").write_text(json.dumps({"date": date, "kernels": profiles}, indent=1))
    for entry in profiles:
        print(entry, flush=True)


def _ncu_csv(command: list[str]) -> str:
    """ncu's CSV table: its output from the header line on (the profiled program prints before it)."""
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return output[output.index('"ID"'):]


# -------------------------------------------------------------------------------------------- report
def compile_latency_lines(compile_info: dict, load: dict) -> list[str]:
    """The compile-latency section: both compilers on the build machine's CPU, cubins loaded on the GPU host."""
    ms = lambda value: f"{value:.1f}" if value >= 1 else f"{value:.2f}"
    row = lambda label, where, first, warm: f"| {label} | {where} | {ms(first)} | {ms(warm)} |"
    total = {kind: {when: compile_info[kind][when]["total"] + load[f"{kind}_cubin_load"] for when in ("first", "warm")}
             for kind in COMPILERS}
    ours, nvrtc = compile_info["mlir-tile"], compile_info["nvrtc"]
    ratio = lambda kind, when: total[kind][when] / total["nvrtc"][when]
    return [
        "", "## Compile latency (the spec example, ms)", "",
        "Compiling is CPU work, so both compilers run on one CPU: the build machine's "
        f"({compile_info.get('cpu', 'not recorded')}; the MLIR wheels are too big to go to the GPU host), taking turns. A new kernel is new text (a unique comment) so that no cache "
        "answers. The GPU host then loads each cubin (median of 20). first = the first compile in a fresh process "
        "that has imported its Python modules (the MLIR context, NVRTC and nvJitLink are set up on first use, and "
        "that counts), median of 21 processes; warm = median of 20 in one process.", "",
        "| step | where | first | warm |", "|---|---|---|---|",
        row("mlir-tile: builder -> PTX", "build CPU", ours["first"]["builder_to_ptx"], ours["warm"]["builder_to_ptx"]),
        row("mlir-tile: PTX -> cubin (nvJitLink 13.0)", "build CPU", ours["first"]["ptx_to_cubin"],
            ours["warm"]["ptx_to_cubin"]),
        row("cubin -> loaded kernel", "GPU host", load["mlir-tile_cubin_load"], load["mlir-tile_cubin_load"]),
        row("**mlir-tile: builder -> loaded kernel, a new kernel**", "", total["mlir-tile"]["first"],
            total["mlir-tile"]["warm"]),
        row("**mlir-tile: builder -> loaded kernel, a kernel assembled before** (cubin cache)", "",
            total["mlir-tile-cached"]["first"], total["mlir-tile-cached"]["warm"]),
        row("NVRTC 13.0: C++ -> cubin", "build CPU", nvrtc["first"]["cpp_to_cubin"], nvrtc["warm"]["cpp_to_cubin"]),
        row("cubin -> loaded kernel", "GPU host", load["nvrtc_cubin_load"], load["nvrtc_cubin_load"]),
        row("**NVRTC: C++ -> loaded kernel** (no cache)", "", total["nvrtc"]["first"], total["nvrtc"]["warm"]),
        row("NVRTC with `-minimal` (no CUDA headers): C++ -> loaded kernel", "build CPU + GPU host",
            total["nvrtc-minimal"]["first"], total["nvrtc-minimal"]["warm"]),
        "", f"mlir-tile / NVRTC, a new kernel: warm {ratio('mlir-tile', 'warm'):.2f}, first "
        f"{ratio('mlir-tile', 'first'):.2f}; a kernel assembled before: warm {ratio('mlir-tile-cached', 'warm'):.2f}, "
        f"first {ratio('mlir-tile-cached', 'first'):.2f}; against NVRTC `-minimal`, a new kernel: warm "
        f"{total['mlir-tile']['warm'] / total['nvrtc-minimal']['warm']:.2f}, first "
        f"{total['mlir-tile']['first'] / total['nvrtc-minimal']['first']:.2f}. "
        f"mlir-tile's cubin computes the specification's table on the GPU: "
        f"{'yes' if load['mlir_tile_cubin_gives_the_spec_table'] else 'NO'}.", "",
        "For reference, on the GPU host (warm, median of 20; its CPU is faster: NVRTC takes "
        f"{load['nvrtc_on_gpu_host']:.1f} ms there, {nvrtc['warm']['cpp_to_cubin']:.1f} here):", "",
        "| path (GPU host) | warm |", "|---|---|",
        f"| mlir-tile PTX -> loaded kernel through the driver's JIT | {load['ptx_driver_jit']:.1f} |",
        f"| NVRTC C++ -> cubin -> loaded kernel | {load['nvrtc_on_gpu_host']:.1f} |",
        f"| NVRTC `-minimal` C++ -> cubin -> loaded kernel | {load['nvrtc-minimal_on_gpu_host']:.1f} |",
    ]


def replace_sections(directory: Path, head: list[str] | None, sections: dict[str, list[str]]) -> Path:
    """DIR/RESULTS.md (a run's folder: nothing tracked is written) with the head (the text before the first `## `
    heading, when given) and the `## ` sections named in `sections` replaced, new ones appended; the other
    sections, which other runs into DIR wrote, kept. Returns its path."""
    RESULTS = directory / "RESULTS.md"
    text = RESULTS.read_text() if RESULTS.exists() else ""
    parts = re.split(r"(?m)^(?=## )", text)
    kept_head, kept = parts[0], {part.splitlines()[0]: part.rstrip("\n") + "\n\n" for part in parts[1:]}
    for title, lines in sections.items():
        kept[f"## {title}"] = "\n".join([f"## {title}", *lines]).rstrip("\n") + "\n\n"
    new_head = "\n".join(head).rstrip("\n") + "\n\n" if head is not None else kept_head
    RESULTS.write_text((new_head + "".join(kept.values())).rstrip("\n") + "\n")
    return RESULTS


def report(directory: Path) -> None:
    config_set = json.loads((directory / "set.json").read_text())["set"] if (directory / "set.json").exists() else "transfers"
    results = json.loads((directory / "results.json").read_text())
    second = json.loads((directory / "results2.json").read_text())["configs"] if (directory / "results2.json").exists() else None
    profiled = json.loads((directory / "profile.json").read_text()) if (directory / "profile.json").exists() else {}
    profiles = profiled.get("kernels", [])
    if config_set != "transfers":
        print(replace_sections(directory, None, {SET_SECTIONS[config_set]: SET_REPORTS[config_set](results, second,
                                                                                              profiles)}).read_text())
        return
    compile_info = json.loads((directory / "compile.json").read_text())
    scaling_rows = json.loads((directory / "scaling.json").read_text()) if (directory / "scaling.json").exists() else []
    device = results["device"]
    head = [
        "# mlir-tile transfer benchmarks",
        "",
        f"Measured {results['date']} on {device['name']} ({device['sms']} SMs, {device['clock_mhz']:.0f} MHz: "
        f"128 B/clock/SM = {device['peak_tb_s']:.1f} TB/s; CUDA driver API {device.get('cuda_driver_api', 'not recorded')}). Reproduce: `make bench DIR=...` on a machine with the "
        "compiler (builds the kernels, measures compile latency and pass scaling), then "
        "`python3 benchmarks/bench.py run DIR` (and `profile DIR`, with ncu) on the GPU host (cuda-python, numpy, "
        "ptxas, cuobjdump; no MLIR), then `python benchmarks/bench.py report DIR` here.",
        "",
        f"Each kernel: {BLOCK} threads/block, {BLOCKS_PER_SM} blocks/SM, one wave of blocks (all resident at once) "
        f"unless the row says otherwise, {UNROLL} transfers per loop iteration and as many iterations as make "
        f"{X4_ITERATIONS * UNROLL * 4} matrices per warp ({X4_ITERATIONS} for x4, {4 * X4_ITERATIONS} for x1; twice "
        f"that in the kernels of {BLOCKS_PER_SM // 2} blocks/SM, so that every kernel moves the same bytes per SM), median "
        "of 25 timed launches (CUDA events) after 3 warm-ups. (a) generated by mlir-tile, (b) hand-written "
        "CUDA C++ with inline PTX (NVRTC); both through the same ptxas. predicted = the bank model's share of "
        "128 B/clock/SM (`mlir_tile.models.banks`: matrices over wavefronts), the rate where shared memory is what limits.",
    ]
    lines = ["", *throughput_table(results, second)]
    sections = {"Throughput": lines}
    lines = ["", "Address ALU = integer instructions other than the benchmark's XOR accumulation (LOP3 0x96/0x3c): for "
              "loads this is the dependent `(word & zero)` and the address add; the lane part is outside the loop.", "",
              "| layout | (a) instructions | (a) address ALU | (a) MOV | (b) instructions | (b) address ALU | (b) MOV |",
              "|---|---|---|---|---|---|---|"]
    for entry in results["configs"]:
        a, b = entry["generated"]["sass"], entry["hand"]["sass"]
        per = lambda stats, key: stats[key] / stats["matrix_instructions"]
        lines.append(f"| {entry['name']} | {per(a, 'loop_instructions'):.2f} | {per(a, 'address_alu'):.2f} | "
                     f"{per(a, 'moves'):.2f} | {per(b, 'loop_instructions'):.2f} | {per(b, 'address_alu'):.2f} | "
                     f"{per(b, 'moves'):.2f} |")
    sections["Code quality (SASS of the benchmark loop, per LDSM/STSM)"] = lines
    title, *lines = compile_latency_lines(compile_info, results["load_latency_ms"])[1:]
    sections[title.removeprefix("## ")] = lines
    if profiles:
        lines = ["", f"Profiled {profiled['date']}. Shared wavefronts = the shared-memory data pipe's busy share (128 B per clock per SM); LSU "
                  "instructions = the share of the one-instruction-per-clock LSU issue limit; stalls are warps "
                  "stalled per issued instruction (short scoreboard: waiting for a shared-memory result).", "",
                  "| layout | kernel | shared wavefronts % | LSU instructions % | warps active % | issue active % | "
                  + " | ".join(f"stall: {name.replace('_', ' ')}" for name in NCU_STALLS) + " |",
                  "|---|---|---|---|---|---|" + "---|" * len(NCU_STALLS)]
        for entry in profiles:
            lines.append(f"| {entry['name']} | {entry['kind']} | {entry['shared_wavefronts_pct']:.1f} | "
                         f"{entry['lsu_instructions_pct']:.1f} | {entry['warps_active_pct']:.1f} | "
                         f"{entry['issue_active_pct']:.1f} | "
                         + " | ".join(f"{entry[f'stall_{name}']:.2f}" for name in NCU_STALLS) + " |")
        sections["Where the time goes (ncu --clock-control none, one launch each)"] = lines
    if scaling_rows:
        sections["Pass scaling (CPU)"] = scaling_lines(scaling_rows, compile_info.get("cpu", "not recorded"))
    print(replace_sections(directory, head, sections).read_text())


def scaling_lines(rows: list[dict], cpu: str) -> list[str]:
    """The pass-scaling section: tile-opt's passes against upstream's C++ lowering, N transfers each."""
    return ["", "tile-verify-matrix-transfer + tile-lower-matrix-transfer on N copies of one x4 transfer, against N "
            f"nvgpu.ldmatrix through upstream's convert-nvgpu-to-nvvm (C++), on the build machine's CPU ({cpu}); the "
            "median of 7 runs (3 at 10,000).", "",
            "| transfers | tile verify + lower ms | us per transfer | upstream nvgpu.ldmatrix -> nvvm ms | ratio |",
            "|---|---|---|---|---|",
            *(f"| {row['transfers']} | {row['tile_ms']:.1f} | {row['tile_us_per_transfer']:.0f} | "
              f"{row['upstream_ms']:.1f} | {row['ratio']:.1f} |" for row in rows)]


def throughput_table(results: dict, second: list | None = None) -> list[str]:
    """Measured against predicted: each kernel's (a) and (b) share of 128 B/clock/SM in both runs, the bank
    model's prediction and how far (a) is from it."""
    lines = ["| layout | predicted % | (a) % of 128 B/clk/SM | (a) - predicted, relative | (b) % | (a)/(b) | "
             "(a) %, 2nd run | (b) %, 2nd run | (a)/(b), 2nd run | matrices per LDSM/STSM (a) / (b) | same output |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for position, entry in enumerate(results["configs"]):
        a, b = entry["generated"], entry["hand"]
        predicted = 100 * entry["predicted_share"]
        other = second[position] if second else None
        repeat = (f"{other['generated']['percent_of_peak']:.1f} | {other['hand']['percent_of_peak']:.1f} | "
                  f"{other['ratio']:.3f}") if other else "- | - | -"
        lines.append(f"| {entry['name']} | {predicted:.1f} | {a['percent_of_peak']:.1f} | "
                     f"{100 * (a['percent_of_peak'] - predicted) / predicted:+.1f}% | {b['percent_of_peak']:.1f} | "
                     f"{entry['ratio']:.3f} | {repeat} | {a['sass']['matrices_per_instruction']:g} / "
                     f"{b['sass']['matrices_per_instruction']:g} | {'yes' if entry['outputs_equal'] else 'NO'} |")
    return lines


def synthesis_report(results: dict, second: list | None, profiles: list) -> list[str]:
    configs = results["configs"]
    runs = [configs] + ([second] if second else [])
    at_least = [sum(entry["generated"]["percent_of_peak"] >= 97 for entry in run) for run in runs]
    within = [sum(abs(entry["generated"]["percent_of_peak"] / (100 * entry["predicted_share"]) - 1) <= 0.03
                  for entry in run) for run in runs]
    return ["", f"Measured {results['date']} on {results['device']['name']} (`bench.py build DIR --set synthesis`). "
            "Each row: a tile in the layout `mlir_tile.tiling.synthesize` picks for its x4 block transfers and a "
            "16-byte-vector writer (the layout is in the note); one transfer reads (or writes) the four corner blocks "
            "(first and last row band x first and last block column) with x4s in mma order; 4 blocks/SM of 8 warps; "
            "(a) generated, (b) hand-written, the same method as above.", "",
            f"**{' and '.join(map(str, at_least))} of {len(configs)} at or above 97% of 128 B/clock/SM** (generated; "
            f"{'the two runs' if second else 'one run'}); {' and '.join(map(str, within))} of {len(configs)} within 3% "
            "of the prediction.", "",
            *throughput_table(results, second), "",
            "The writer of each tile (hand-written CUDA C++: every warp fills the tile with `st.shared.v4.b32` in row "
            "order, lane t of an instruction its chunk t, at the synthesized layout's addresses):", "",
            "| tile | predicted % | measured % of 128 B/clk/SM |", "|---|---|---|",
            *(f"| {w['name']} | {100 * w['predicted_share']:.1f} | {w['hand']['percent_of_peak']:.1f} |"
              for w in results.get("writers", [])), "", "Layouts:", "",
            *(f"- {entry['name']}: {entry['note']}" for entry in configs)]


def widening_report(results: dict, second: list | None, profiles: list) -> list[str]:
    configs = results["configs"]
    lsu = {entry["name"]: entry["lsu_instructions_pct"] for entry in profiles if entry["kind"] == "generated"}
    lines = ["", f"Measured {results['date']} on {results['device']['name']} (`bench.py build DIR --set widening`). "
             "Each transfer as written (several .x1/.x2) and through `tile-widen-matrix-transfer` (opt-in); (b) "
             "is the hand-written kernel of the written instructions in both rows, so (a)/(b) of a widened row "
             "is what widening gains. Instructions per transfer from the SASS (matrices per LDSM/STSM); LSU = the "
             "share of the LSU's one instruction per clock per SM that (a) used (ncu, one launch).", "",
             "| transfer | instructions per transfer (a) | LSU % (a) | predicted % | (a) % of 128 B/clk/SM | (b) % | (a)/(b) | "
             "(a) %, 2nd run | (b) %, 2nd run | same output |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for position, entry in enumerate(configs):
        a, b = entry["generated"], entry["hand"]
        other = second[position] if second else None
        repeat = f"{other['generated']['percent_of_peak']:.1f} | {other['hand']['percent_of_peak']:.1f}" if other else "- | -"
        used = f"{lsu[entry['name']]:.1f}" if entry["name"] in lsu else "-"
        lines.append(f"| {entry['name']} | {entry['matrices_per_transfer'] / a['sass']['matrices_per_instruction']:g} | "
                     f"{used} | {100 * entry['predicted_share']:.1f} | {a['percent_of_peak']:.1f} | {b['percent_of_peak']:.1f} | "
                     f"{entry['ratio']:.3f} | {repeat} | {'yes' if entry['outputs_equal'] else 'NO'} |")
    return lines


SET_SECTIONS = {"synthesis": "Synthesized layouts on the H200 (issue 14, part 2)",
                "widening": "Widening before and after (issue 14, part 3)"}
SET_REPORTS = {"synthesis": synthesis_report, "widening": widening_report}


def main() -> None:
    import argparse

    commands = {"build": [build], "run": [run], "profile": [profile], "scaling": [scaling], "report": [report],
                "all": [build, scaling, run, report], "launch": [launch_all]}
    if len(sys.argv) == 3 and sys.argv[1] == "compile-once":  # internal: a fresh process's first compile
        print(json.dumps(compile_once(sys.argv[2], f"first {time.time_ns()}")))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=commands)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--set", dest="config_set", choices=CONFIG_SETS, default="transfers",
                        help="build: which kernels (the later steps read the built set from DIR)")
    arguments = parser.parse_args()
    for step in commands[arguments.command]:
        step(arguments.directory, arguments.config_set) if step is build else step(arguments.directory)


if __name__ == "__main__":
    main()
