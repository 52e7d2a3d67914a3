"""fp8 GEMMs' accumulation, `fast` against `precise` (issue 62): ours with the products summed in the fp32
accumulators by wgmma (the library's 128 x 256 tile) and with each k-tile's products summed into partials of their
own and added into them (`HopperConfig.promote`, 128 x 128 and 128 x 192), beside cuBLASLt's default and its
`use_fast_accum=True`, on the same e4m3 inputs (A [M, K] and B [N, K] from N(0, 1), per-tensor scales 1), in one
process:

    python benchmarks/fp8_accumulation.py build DIR      # here (MLIR): the kernels, as benchmarks/gemm.py names them
    python3 benchmarks/fp8_accumulation.py run DIR [LABEL ...]  # GPU host: DIR/fp8_accumulation.json (those tiles)
    python3 benchmarks/fp8_accumulation.py profile DIR   # GPU host, ncu: the operators' fp8 kernels and cuBLASLt's

Per shape: TFLOP/s (`torch_timing.sustained_interleaved`: back to back, shuffled rounds, medians, the SM clock
and power beside) and each result's error against the float64 product of the same e4m3 values: RMS and largest,
over the product's RMS, and the RMS over cuBLASLt default's (the issue's target: precise <= 1.05x it).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import gemm
from torch_timing import sustained_interleaved

SHAPES = [(4096, 4096, 2624), (4096, 4096, 4096), (4096, 4096, 8192), (4096, 4096, 16384), (8192, 8192, 8192)]
TILES = [gemm._tile(128, 256, 128, 4)] + [tile for tile in gemm.FP8_TILES["nk"] if tile.get("promote")]


def build(directory: Path) -> None:
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.gemm import sm90 as gemm_sm90, sm90_tiles as hopper_tiles

    directory.mkdir(parents=True, exist_ok=True)
    for tile in TILES:
        module = gemm_sm90.build_module("e4m3", hopper_tiles.hopper_config("nk", tile, "e4m3"))
        (directory / f"hopper_e4m3_nk_{gemm.label(tile)}.ptx").write_text(compile_to_ptx(module))


def run(directory: Path, labels: tuple = ()) -> None:
    """`labels`: the tiles (`gemm.label`) to time, none: all."""
    import torch

    from mlir_tile.runtime import Runtime

    rows = []
    with Runtime() as runtime:
        modules = {gemm.label(tile): runtime.load_ptx((directory / f"hopper_e4m3_nk_{gemm.label(tile)}.ptx")
                                                      .read_text(), name=gemm.label(tile)) for tile in TILES
                   if not labels or gemm.label(tile) in labels}
        for m, n, k in SHAPES:
            a, b = (torch.randn(rows_, k, device="cuda").to(torch.float8_e4m3fn) for rows_ in (m, n))
            scales = [torch.ones(1, device="cuda") for _ in range(2)]
            exact = a.double() @ b.double().t()
            outputs = {name: torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                       for name in [*modules, "cuBLASLt", "cuBLASLt fast"]}
            calls = gemm._hopper_calls(runtime, modules, a, b, outputs.__getitem__, "nk", "e4m3", scales)
            for name, fast in (("cuBLASLt", False), ("cuBLASLt fast", True)):
                calls[name] = (lambda out=outputs[name], fast=fast: torch._scaled_mm(
                    a, b.t(), *scales, out_dtype=torch.bfloat16, use_fast_accum=fast, out=out))
            seconds, conditions = sustained_interleaved(calls)
            size = float(exact.pow(2).mean().sqrt())
            errors = {name: (float((out.double() - exact).pow(2).mean().sqrt()) / size,
                             float((out.double() - exact).abs().max()) / size) for name, out in outputs.items()}
            row = {"shape": [m, n, k], **conditions,
                   "TFLOP/s": {name: round(2 * m * n * k / t / 1e12, 1) for name, t in seconds.items()},
                   "RMS error / RMS": {name: e[0] for name, e in errors.items()},
                   "largest error / RMS": {name: e[1] for name, e in errors.items()},
                   "RMS error over cuBLASLt's": {name: round(e[0] / errors["cuBLASLt"][0], 3)
                                                 for name, e in errors.items()}}
            print(json.dumps(row), flush=True)
            rows.append(row)
            (directory / "fp8_accumulation.json").write_text(json.dumps(rows, indent=1))
            torch.cuda.empty_cache()


def launch() -> None:
    """One call each of the operators' fp8 GEMMs at 4096^3 (fast, precise, blockwise), then cuBLASLt's default:
    what `profile` runs under ncu."""
    import torch

    from mlir_tile.kernels import scaled_mm

    a, b = (torch.randn(4096, 4096, device="cuda").to(torch.float8_e4m3fn) for _ in range(2))
    one = torch.ones(1, device="cuda")
    scaled_mm(a, b, one, one, accumulation="fast")
    scaled_mm(a, b, one, one, accumulation="precise")
    scaled_mm(a, b, torch.ones(4096, 32, device="cuda"), torch.ones(32, 32, device="cuda"))
    torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()


def profile(directory: Path) -> None:
    """ncu (`torch_timing.profile_launches`) of `launch`'s four kernels: the tensor pipe's busy share, stalls, and
    cuBLASLt's kernel name (its tile)."""
    from torch_timing import profile_launches

    rows = [{"who": who, **{k: v for k, v in entry.items() if k != "unknown"}} for who, entry in zip(
        ("fast", "precise", "blockwise", "cuBLASLt"), profile_launches([__file__, "launch"],
                                                                       "gemm|sm90|cutlass|xmma|nvjet", 4))]
    print("\n".join(json.dumps(row) for row in rows), flush=True)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "fp8_profile.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "launch":
        launch()
    elif sys.argv[1] == "run":
        run(Path(sys.argv[2]), tuple(sys.argv[3:]))
    else:
        {"build": build, "profile": profile}[sys.argv[1]](Path(sys.argv[2]))
