"""The ceiling of Hopper's data path: a pure wgmma loop (no loads, no waits inside the loop) beside the pure
mma.sync loop, on every SM, at the clock the chip holds under sustained load and in a first burst from a cool
chip (the boost clock), each rate beside its SM clock and power.

Each block is two warpgroups, each issuing per iteration a batch of 4 `wgmma.mma_async.m64n256k16` (f16 in,
f32 accumulate; or 4 m64n256k32 of e4m3) on resident 128-byte-swizzled tiles (built with the builder's
`k.wgmma`, descriptors from the tiles' layouts): the largest N, so that the tensor cores see the longest
instruction stream an SM can take from two warpgroups.

    python benchmarks/wgmma_loop.py build DIR    # needs MLIR: wgmma_f16.ptx, wgmma_e4m3.ptx, peak.cu (mma.sync)
    python3 benchmarks/wgmma_loop.py run DIR     # on the GPU host: DIR/wgmma_loop.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "benchmarks")]

WARPGROUPS, N, STEPS = 2, 256, 4  # per block; the atom's N; K steps a batch
ITERATIONS = {"f16": 8192, "e4m3": 8192}
ELEMENT_TYPE = {"f16": "f16", "e4m3": "i8"}


def loop_kernel(element: str):
    """wgmma_loop(out, iterations): warpgroup w multiplies its 64 rows of the A tile by the B tile, STEPS
    wgmmas a batch, `iterations` batches chained on the same accumulators, then xors them into out."""
    from mlir import ir
    from mlir.dialects import arith

    from mlir_tile.isa.atoms import wgmma
    from mlir_tile.builder import Global, Kernel
    from mlir_tile.isa.tma import Box

    atom = wgmma(N, element)
    depth = STEPS * atom.shape[2]
    a_layout, b_layout = (Box(rows, depth, atom.element_bits, 128).layout for rows in (64 * WARPGROUPS, N))
    a_bytes = a_layout.cosize * atom.element_bits // 8
    threads = 128 * WARPGROUPS
    with Kernel("wgmma_loop", [Global("i32"), "index"], block=(threads, 1, 1), chip="sm_90a") as k:
        out, iterations = k.arguments
        shared = k.dynamic_shared(alignment=1024)
        words = (a_bytes + b_layout.cosize * atom.element_bits // 8) // 4
        fill = k.tensor(k.view(shared, (words,), "i32"), f"({words // threads},{threads}):({threads},1)")
        # numbers in [1, 2) with varying mantissas (the tensor cores' power, hence the clock, depends on the
        # bits they multiply): a hash of the word's index, masked
        mantissas, one = (0x03FF03FF, 0x3C003C00) if element == "f16" else (0x07070707, 0x38383838)
        thread = arith.index_cast(ir.IntegerType.get_signless(32), k.thread_id())
        for step in range(words // threads):
            hashed = arith.muli(arith.addi(thread, k.constant(step * threads)), k.constant(-1640531535))
            fill[step, k.thread_id()] = arith.ori(arith.andi(hashed, k.constant(mantissas)), k.constant(one))
        k.async_proxy_fence()
        k.barrier()
        a = k.tensor(k.view(shared, (a_layout.cosize,), ELEMENT_TYPE[element]), a_layout)
        b = k.tensor(k.view(shared, (b_layout.cosize,), ELEMENT_TYPE[element], byte_offset=a_bytes), b_layout)
        block = arith.divui(k.thread_id(), k.index(128))
        accumulators = k.accumulators(atom)
        with k.loop(0, iterations):
            k.wgmma(atom, a, b, accumulators, a_row_block=block)
        k.wgmma_wait(0, [accumulators])
        i32 = ir.IntegerType.get_signless(32)
        total = k.constant(0)
        for slot in range(N // 2):
            total = arith.xori(total, arith.bitcast(i32, k.load(accumulators.registers, [slot])))
        k.tensor(out, (1 << 20,))[k.global_thread_id()] = total
    return k.module


def build(directory: Path) -> None:
    from fragment_loop import write_peak_source
    from mlir_tile.compiler.compile import compile_to_ptx

    directory.mkdir(parents=True, exist_ok=True)
    for element in ITERATIONS:
        (directory / f"wgmma_{element}.ptx").write_text(compile_to_ptx(loop_kernel(element)))
    write_peak_source(directory)


def flop_per_launch(element: str, blocks: int) -> float:
    k = 16 if element == "f16" else 32
    return blocks * WARPGROUPS * ITERATIONS[element] * STEPS * 2 * 64 * N * k


def _sampled(work) -> dict:
    from torch_timing import clock_and_power

    return clock_and_power(work)


def run(directory: Path, seconds: float = 3.0, burst: float = 0.2) -> None:
    import numpy as np

    from fragment_loop import mma_sync_peak
    from mlir_tile.runtime import Runtime

    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    with Runtime() as runtime:
        sms = runtime.device.properties.multiprocessor_count
        window = (64 * WARPGROUPS + N) * 128  # the two tiles' bytes (both 128 bytes of K a row)
        rates = {}
        for element in ITERATIONS:
            module = runtime.load_ptx((directory / f"wgmma_{element}.ptx").read_text(), name=element)
            arguments = [np.zeros(1 << 20, np.uint32), ITERATIONS[element]]

            def rate(duration: float, module=module, arguments=arguments, element=element) -> float:
                """TFLOP/s of the median launch among those back to back for `duration` seconds."""
                started, times = time.perf_counter(), []
                while time.perf_counter() - started < duration:
                    times += module.time("wgmma_loop", arguments, grid=sms, block=128 * WARPGROUPS,
                                         shared_bytes=window, warmup=0, repeats=5).milliseconds
                return flop_per_launch(element, sms) / (sorted(times)[len(times) // 2] / 1e3) / 1e12

            rates[element] = rate
        for element, rate in rates.items():  # first, from the chip as the run found it: the boost clock
            results[f"wgmma {element} burst"] = _sampled(lambda: rate(burst))
        for element, rate in rates.items():
            results[f"wgmma {element} sustained"] = _sampled(lambda: rate(seconds))
        print(json.dumps(results), flush=True)
        results["mma.sync loop (best of 3 x 20 launches)"] = _sampled(
            lambda: max(mma_sync_peak(runtime, directory, 20) for _ in range(3)))
        print("mma.sync", results["mma.sync loop (best of 3 x 20 launches)"], flush=True)
    (directory / "wgmma_loop.json").write_text(json.dumps(results, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("build", "run"))
    parser.add_argument("directory", type=Path)
    arguments = parser.parse_args()
    {"build": build, "run": run}[arguments.command](arguments.directory)


if __name__ == "__main__":
    main()
