"""Launch overhead of a trivial kernel: mlir-tile's runtime on torch tensors beside CuPy's RawKernel on the same
PTX and a torch op, in one process on the GPU host.

    python benchmarks/launch_overhead.py build DIR     # here (MLIR): the kernel's PTX
    python3 benchmarks/launch_overhead.py run DIR      # GPU host: microseconds per launch, DIR/launch.json

The kernel adds 1 to one f32 per thread (32 threads): its time is the launch. Each launcher issues LAUNCHES
launches back to back and synchronizes once; the figure is the median over ROUNDS of wall time / LAUNCHES.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

LAUNCHES, ROUNDS = 2000, 7


def build(directory: Path) -> None:
    from mlir.dialects import arith

    from mlir_tile.builder import Global, Kernel
    from mlir_tile.compiler.compile import compile_to_ptx

    with Kernel("add_one", [Global("f32")]) as k:
        (data,) = k.arguments
        lane = k.thread_id()
        k.store(arith.addf(k.load(data, [lane]), k.constant(1.0, "f32")), data, [lane])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "add_one.ptx").write_text(compile_to_ptx(k.module))


def run(directory: Path) -> None:
    import cupy
    import torch

    from mlir_tile.runtime import Runtime

    ptx = (directory / "add_one.ptx").read_text()
    x = torch.zeros(32, device="cuda")
    y = cupy.zeros(32, dtype=cupy.float32)
    with Runtime() as runtime:
        module = runtime.load_ptx(ptx)
        stream = torch.cuda.current_stream()
        raw = cupy.RawModule(path=str(directory / "add_one.ptx")).get_function("add_one")
        launchers = {
            "mlir-tile runtime (torch tensor)": (lambda: module.launch("add_one", [x], grid=1, block=32, stream=stream),
                                                 torch.cuda.synchronize),
            "CuPy RawKernel (CuPy array)": (lambda: raw((1,), (32,), (y,)), cupy.cuda.Device().synchronize),
            "torch op (x.add_(1))": (lambda: x.add_(1), torch.cuda.synchronize),
        }
        results = {}
        for name, (launch, synchronize) in launchers.items():
            rounds = []
            for _ in range(ROUNDS + 1):
                synchronize()
                start = time.perf_counter()
                for _ in range(LAUNCHES):
                    launch()
                synchronize()
                rounds.append((time.perf_counter() - start) / LAUNCHES * 1e6)
            results[name] = sorted(rounds[1:])[ROUNDS // 2]
            print(f"{name}: {results[name]:.2f} us per launch", flush=True)
        expected = (ROUNDS + 1) * LAUNCHES * 2  # ours and torch's add_ both add 1 to x
        assert int(x[0].item()) == expected, (x[0].item(), expected)
    results["ratio to CuPy"] = results["mlir-tile runtime (torch tensor)"] / results["CuPy RawKernel (CuPy array)"]
    print(json.dumps(results))
    (directory / "launch.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    command, directory = sys.argv[1], Path(sys.argv[2])
    {"build": build, "run": run}[command](directory)
