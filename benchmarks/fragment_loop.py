"""The mma example's inner loop as a benchmark: per iteration each warp loads its A and B fragments from the
resident swizzled shared tiles (tile.matrix_transfer: 4 ldmatrix.x4 + 16 ldmatrix.x4.trans) and issues 32
mma.sync.m16n8k16 (fp16 in, fp32 accumulate); no global traffic. Against the same loop in hand-written CUDA C++
(NVRTC, inline PTX, the same addresses) and a pure mma loop (no loads) for the H200's mma.sync peak.

    python benchmarks/fragment_loop.py build DIR    # needs MLIR: the generated kernel's PTX, the C++ sources
    python3 benchmarks/fragment_loop.py run DIR     # on the GPU host (cuda-python, numpy, ptxas, cuobjdump)
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "examples"), str(REPO / "benchmarks")]

import mma_tile  # noqa: E402  (its layouts; building needs MLIR, reading them does not)
from mlir_tile import contract  # noqa: E402
from mlir_tile.algebra.layout import Layout  # noqa: E402

BLOCK, BLOCKS_PER_SM, ITERATIONS = 128, 4, 4096
MMA_FLOPS = 2 * 16 * 8 * 16
MMAS_PER_ITERATION = 32  # per warp
TILE_ALIGNMENT = contract.aligned_for(Layout.parse(mma_tile.A_SHARED))  # bytes: a swizzle period (B's alike)


def generated_kernel():
    from mlir import ir
    from mlir.dialects import arith, gpu, memref, scf

    from mlir_tile.builder import Kernel, transfer

    words = mma_tile.WORDS
    view = f"memref<{words}xi32, strided<[1], offset: ?>, #gpu.address_space<workgroup>>"
    with Kernel("fragment_loop", ["memref<67108864xi32>", "i32", "i32"], block=(BLOCK, 1, 1),
                min_blocks_per_sm=BLOCKS_PER_SM, context=ir.Context()) as k:
        out, iterations, zero = k.arguments
        tid = k.thread_id()
        tiles = [k.shared(name, words, alignment=TILE_ALIGNMENT) for name in ("a_tile", "b_tile")]
        with k.loop(0, words // BLOCK) as step:  # small integers: finite fp16 values
            position = arith.addi(tid, arith.muli(step, k.index(BLOCK)))
            value = arith.andi(arith.index_cast(ir.IntegerType.get_signless(32), position), k.constant(0x03FF03FF))
            for tile in tiles:
                k.store(value, tile, [position])
        k.barrier()
        a, b, accumulators = k.registers(16), k.registers(64), k.registers(32, "f32")
        f32 = ir.F32Type.get()
        for slot in range(32):
            k.store(arith.constant(f32, 0.0), accumulators, [slot])
        loop = scf.ForOp(k.constant(0), iterations, k.constant(1), [k.constant(0)])
        with ir.InsertionPoint(loop.body):
            # the region start depends on the last iteration (always 0): loads cannot leave the loop; a
            # multiple of the swizzle's period, as a view's offset must be for the swizzle to hold
            start = arith.muli(arith.index_cast(ir.IndexType.get(), loop.inner_iter_args[0]),
                               k.index(TILE_ALIGNMENT // 4))
            a_view, b_view = (memref.subview(t, [start], [words], [1], result_type=ir.Type.parse(view)) for t in tiles)
            transfer(mma_tile.LDMATRIX, a, a_view, dst_layout=mma_tile.A_REGISTERS,
                            src_layout=mma_tile.A_SHARED, scope="warpgroup")
            transfer(mma_tile.LDMATRIX.replace("x4", "x4.trans"), b, b_view, dst_layout=mma_tile.B_REGISTERS,
                            src_layout=mma_tile.B_SHARED, scope="warpgroup")
            mma_tile.issue_mmas(k, a, b, accumulators)
            first = arith.bitcast(ir.IntegerType.get_signless(32), k.load(accumulators, [0]))
            scf.YieldOp([arith.andi(first, zero)])
        total = loop.results[0]
        for slot in range(32):
            total = arith.xori(total, arith.bitcast(ir.IntegerType.get_signless(32), k.load(accumulators, [slot])))
        block = gpu.block_id(gpu.Dimension.x)
        k.store(total, out, [arith.addi(tid, arith.muli(block, k.index(BLOCK)))])
    return k.module


def _lane_table(name: str, layout: Layout) -> str:
    """The swizzled lane part of each of the warpgroup's 128 threads, from the layout's own offsets (thread t:
    row t % 8 of matrix (t / 8) % 4 of warp t / 32, the ISA's rule), as a table the kernel reads once."""
    values = [layout.offset(t // 32, *(0,) * (layout.rank - 4), (t % 32 // 8) % 4, t % 8, 0) for t in range(128)]
    return f"__constant__ unsigned {name}[128] = {{{', '.join(map(str, values))}}};"


def _load(opcode: str, layout: Layout, base: str, constant: int, outputs: list[str]) -> str:
    """One ldmatrix at `constant` (unswizzled words) past the swizzled lane part `base`, as a CUDA programmer
    writes it: an immediate where the swizzle shifts every lane alike, else an xor with the swizzled constant."""
    swizzle = layout.swizzle
    lanes = [layout.linear_offset(w, *(0,) * (layout.rank - 4), (l // 8) % 4, l % 8, 0)
             for w in range(4) for l in range(32)]
    shifts = {swizzle(v + constant) - swizzle(v) for v in lanes}
    names = ", ".join(f"%{i}" for i in range(len(outputs)))
    targets = ", ".join(f'"=r"({o})' for o in outputs)
    if len(shifts) == 1:
        address, immediate = f"(smem + 4 * {base} + dyn)", 4 * shifts.pop()
    else:
        address, immediate = f"(smem + 4 * ({base} ^ {swizzle(constant)}) + dyn)", 0
    return f'asm volatile("{opcode} {{{names}}}, [%{len(outputs)}+{immediate}];" : {targets} : "r"({address}));'


def hand_source(with_loads: bool) -> str:
    a, b = Layout.parse(mma_tile.A_SHARED), Layout.parse(mma_tile.B_SHARED)
    body = []
    if with_loads:
        for k_block in range(4):
            body.append(_load(mma_tile.LDMATRIX, a, "a_lane", a.linear_offset(0, k_block, 0, 0, 0),
                              [f"ra[{4 * k_block + i}]" for i in range(4)]))
            for pair in range(4):
                slot = 16 * k_block + 4 * pair
                body.append(_load(mma_tile.LDMATRIX.replace("x4", "x4.trans"), b, "b_lane",
                                  b.linear_offset(0, k_block, pair, 0, 0, 0), [f"rb[{slot + i}]" for i in range(4)]))
    for k_block in range(4):
        for n_block in range(8):
            pair, second = divmod(n_block, 2)
            bs = 16 * k_block + 4 * pair + 2 * second
            c = ", ".join(f'"+f"(acc[{4 * n_block + i}])' for i in range(4))
            operands = ", ".join([f'"r"(ra[{4 * k_block + i}])' for i in range(4)] + [f'"r"(rb[{bs}])', f'"r"(rb[{bs + 1}])'])
            body.append('asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, '
                        '{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" : ' + c + " : " + operands + ");")
    return f"""
{_lane_table("a_lanes", a)}
{_lane_table("b_lanes", b)}

extern "C" __global__ void __launch_bounds__({BLOCK}, {BLOCKS_PER_SM}) fragment_loop(unsigned *out, int iterations, unsigned zero) {{
  __shared__ __align__(128) unsigned a_tile[{mma_tile.WORDS}], b_tile[{mma_tile.WORDS}];
  for (unsigned i = threadIdx.x; i < {mma_tile.WORDS}; i += {BLOCK}) {{ a_tile[i] = i & 0x03FF03FFu; b_tile[i] = i & 0x03FF03FFu; }}
  __syncthreads();
  const unsigned a_lane = a_lanes[threadIdx.x & 127], b_lane = b_lanes[threadIdx.x & 127];
  unsigned ra[16], rb[64], next = 0;
  float acc[32];
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  for (int i = 0; i < 16; ++i) ra[i] = 0x3C003C00u;
  for (int i = 0; i < 64; ++i) rb[i] = 0x3C003C00u;
  for (int it = 0; it < iterations; ++it) {{
    const unsigned dyn = next * {TILE_ALIGNMENT};
    {_split_loads(body) if with_loads else ''}
    {' '.join(b for b in body if 'mma.sync' in b)}
    next = __float_as_uint(acc[0]) & zero;
  }}
  unsigned total = next;
  for (int i = 0; i < 32; ++i) total ^= __float_as_uint(acc[i]);
  out[blockIdx.x * {BLOCK} + threadIdx.x] = total;
}}
"""


def _split_loads(body: list[str]) -> str:
    """A's loads read a_tile, B's b_tile: the same code with the other tile's base."""
    lines = []
    for line in body:
        if "mma.sync" in line:
            continue
        tile = "b_tile" if "rb[" in line else "a_tile"
        lines.append(line.replace("(smem +", f"((unsigned)__cvta_generic_to_shared({tile}) +"))
    return "\n    ".join(lines)


def build(directory: Path) -> None:
    from mlir_tile.compiler.compile import compile_to_ptx

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "generated.ptx").write_text(compile_to_ptx(generated_kernel()))
    (directory / "hand.cu").write_text(hand_source(with_loads=True))
    write_peak_source(directory)


def _cuda_to_cubin(source: Path) -> Path:
    from cuda.core import Program, ProgramOptions

    from bench import ptx_to_cubin

    ptx = source.with_suffix(".ptx")
    options = ProgramOptions(arch="sm_90", std="c++17")
    ptx.write_bytes(Program(source.read_text(), "c++", options).compile("ptx").code.rstrip(b"\0"))
    return ptx_to_cubin(ptx)


def _time_loop(runtime, cubin: Path, name: str, repeats: int = 20):
    """(each thread's output, median ms, TFLOP/s) of a fragment_loop kernel on every SM, `repeats` timed
    launches back to back."""
    import numpy as np

    grid = runtime.device.properties.multiprocessor_count * BLOCKS_PER_SM
    module = runtime.load_cubin(cubin.read_bytes(), name=name)
    arguments = [np.zeros(67108864, np.uint32), np.int32(ITERATIONS), np.int32(0)]
    output = module.launch("fragment_loop", arguments, grid=grid, block=BLOCK)[0][: grid * BLOCK]
    timing = module.time("fragment_loop", arguments, grid=grid, block=BLOCK, warmup=3, repeats=repeats)
    mmas = grid * BLOCK // 32 * ITERATIONS * MMAS_PER_ITERATION
    return output, timing.median, mmas * MMA_FLOPS / (timing.median / 1e3) / 1e12


def write_peak_source(directory: Path) -> None:
    """peak.cu: the pure mma.sync loop (no loads), whose rate other benchmarks measure beside their kernels."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "peak.cu").write_text(hand_source(with_loads=False))


def mma_sync_peak(runtime, directory: Path, repeats: int = 20) -> float:
    """The pure mma.sync loop's TFLOP/s (DIR/peak.cu, from `write_peak_source`), in the caller's process."""
    return _time_loop(runtime, _cuda_to_cubin(directory / "peak.cu"), "peak", repeats)[2]


def run(directory: Path) -> None:
    import numpy as np

    from bench import ptx_to_cubin, sass_of
    from mlir_tile.runtime import Runtime

    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    with Runtime() as runtime:
        cubins = {"generated": ptx_to_cubin(directory / "generated.ptx")}
        cubins.update({kind: _cuda_to_cubin(directory / f"{kind}.cu") for kind in ("hand", "peak")})
        outputs = {}
        for kind, cubin in cubins.items():
            outputs[kind], milliseconds, tflop_s = _time_loop(runtime, cubin, kind)
            loop = _loop_counts(sass_of(cubin))
            results[kind] = {"ms": milliseconds, "tflop_s": tflop_s, **loop}
            print(f"{kind:9} {results[kind]['tflop_s']:7.1f} TFLOP/s  {loop}", flush=True)
        results["ratio"] = results["generated"]["tflop_s"] / results["hand"]["tflop_s"]
        results["generated_share_of_peak"] = results["generated"]["tflop_s"] / results["peak"]["tflop_s"]
        results["hand_share_of_peak"] = results["hand"]["tflop_s"] / results["peak"]["tflop_s"]
        results["same_output"] = bool(np.array_equal(outputs["generated"], outputs["hand"]))
        print(json.dumps({k: results[k] for k in ("ratio", "generated_share_of_peak", "hand_share_of_peak", "same_output")}))
    (directory / "fragment_results.json").write_text(json.dumps(results, indent=1))


def _loop_counts(sass: str) -> dict:
    """Per mma in the loop with the most HMMA: instructions and LDSM."""
    from bench import mma_loop

    best = mma_loop(sass)
    mmas = max(1, sum(op.startswith("HMMA") for _, op, _ in best))
    return {"loop_instructions": len(best), "hmma": mmas, "ldsm": sum(op.startswith("LDSM") for _, op, _ in best),
            "instructions_per_mma": round(len(best) / mmas, 3)}


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in ("build", "run"):
        print(__doc__)
        sys.exit(2)
    {"build": build, "run": run}[sys.argv[1]](Path(sys.argv[2]))


if __name__ == "__main__":
    main()
