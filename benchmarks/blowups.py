"""Time and memory on the inputs that used to blow up, at two sizes ten times apart: linear growth shows as a
ratio near 10 (or below, where fixed start-up costs dominate). Each measurement is a fresh tile-opt process
(its wall time and peak resident memory), except the in-process one.

    python benchmarks/blowups.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRANSFER = ('"tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp", '
            'dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} '
            ': (memref<8xi32, 5>, memref<512xi32, 3>) -> ()')
HEAD = ('gpu.module @m [#nvvm.target<chip = "sm_90">] {\n'
        '  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}\n'
        '  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {\n'
        '    %sm = memref.get_global @sm : memref<512xi32, 3>\n    %r = memref.alloca() : memref<8xi32, 5>\n')


def split_chunks(n: int) -> str:
    return "// -----\n".join(["gpu.module @m {\n}\n"] * n)


def top_level_ops(n: int) -> str:
    """n gpu.modules side by side, each a kernel with a transfer: mlir-opt's implicit module, whose locations
    the driver renames op by op."""
    return "".join(HEAD.replace("@m ", f"@m{i} ") + f"    {TRANSFER}\n    gpu.return\n  }}\n}}\n" for i in range(n))


def transfers_after_a_divergent_branch(n: int) -> str:
    body = ("    %l = gpu.lane_id\n    %c4 = arith.constant 4 : index\n    %p = arith.cmpi ult, %l, %c4 : index\n"
            "    cf.cond_br %p, ^bb1, ^bb2\n  ^bb1:\n    cf.br ^bb2\n  ^bb2:\n")
    return HEAD + body + "".join(f"    {TRANSFER}\n" for _ in range(n)) + "    gpu.return\n  }\n}\n"


def transfers_in_uniform_loops(n: int) -> str:
    body = "    %c0 = arith.constant 0 : index\n    %c1 = arith.constant 1 : index\n"
    loops = "".join(f"    scf.for %i{i} = %c0 to %c1 step %c1 {{\n      {TRANSFER}\n    }}\n" for i in range(n))
    return HEAD + body + loops + "    gpu.return\n  }\n}\n"


def long_layout(n: int) -> str:
    text = "(" + ",".join(["1"] * n) + ",4,8,4):(" + ",".join(["0"] * n) + ",1,4@laneid,1@laneid)"
    return HEAD + f"    {TRANSFER.replace('(4,8,4):(1,4@laneid,1@laneid)', text, 1)}\n" + "    gpu.return\n  }\n}\n"


def nested_ifs(n: int) -> str:
    return (HEAD + "    %b = arith.constant true\n" + "scf.if %b {\n" * n + TRANSFER + "\n" + "}\n" * n
            + "    gpu.return\n  }\n}\n")


def cta_with_a_huge_block(n: int) -> str:
    return (HEAD.replace("32, 1, 1", f"{n}, 1, 1") + "    " + TRANSFER.replace('"warp"', '"cta"') + "\n"
            + "    gpu.return\n  }\n}\n")


CASES = {
    "--split-input-file parts": (split_chunks, (7_000, 70_000), ["--split-input-file"]),
    "top-level gpu.modules (implicit module)": (top_level_ops, (200, 2_000), ["--tile-verify-matrix-transfer"]),
    "transfers after a divergent branch": (transfers_after_a_divergent_branch, (2_000, 20_000),
                                           ["--tile-verify-matrix-transfer"]),
    "transfers in uniform loops": (transfers_in_uniform_loops, (2_000, 20_000), ["--tile-verify-matrix-transfer"]),
    "layout axes (text over 4,096 characters is refused)": (long_layout, (100, 1_000), ["--tile-verify-matrix-transfer"]),
    "nested scf.if (over 1,000 brackets is refused)": (nested_ifs, (90, 900), ["--tile-verify-matrix-transfer"]),
    "cta scope, known_block_size threads": (cta_with_a_huge_block, (2**20, 2**30), ["--tile-verify-matrix-transfer"]),
}


def measure(text: str, flags: list[str]) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as stream:
        stream.write(text)
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "mlir_tile.tools.tile_opt", stream.name, *flags],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)  # this child's own peak memory
    seconds = time.perf_counter() - start
    os.unlink(stream.name)
    return {"bytes": len(text), "seconds": round(seconds, 3), "peak_mb": round(usage.ru_maxrss / 1024, 1),
            "status": os.waitstatus_to_exitcode(status), "first_line": (stderr.splitlines() or [""])[0][:160]}


def in_process_calls(calls: int) -> dict:
    code = ("import io, contextlib, resource, sys\nfrom mlir_tile.tools.tile_opt import main\n"
            f"path = {str(Path(__file__).resolve().parents[1] / 'examples' / 'spec_example.mlir')!r}\n"
            f"for _ in range({calls}):\n    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        main([path, '--tile-verify-matrix-transfer'])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {"calls": calls, "peak_mb": round(int(result.stdout.strip()) / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/out")
    arguments = parser.parse_args()
    results = {}
    print("| input | size | seconds | peak MB | exit | size x10: seconds x |")
    print("|---|---|---|---|---|---|")
    for name, (make, sizes, flags) in CASES.items():
        small, large = (measure(make(n), flags) for n in sizes)
        results[name] = {"sizes": sizes, "small": small, "large": large}
        for n, run in zip(sizes, (small, large)):
            ratio = f"{large['seconds'] / small['seconds']:.1f}" if run is large else ""
            print(f"| {name} | {n:,} | {run['seconds']} | {run['peak_mb']} | {run['status']} | {ratio} |")
    calls = [in_process_calls(n) for n in (40, 400)]
    results["in-process tile-opt main calls"] = calls
    print(f"| in-process tile-opt main calls | 40 / 400 | | {calls[0]['peak_mb']} / {calls[1]['peak_mb']} | | |")
    Path(arguments.out).mkdir(parents=True, exist_ok=True)
    (Path(arguments.out) / "blowups.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
