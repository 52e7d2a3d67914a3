"""The builder's GEMM (examples/gemm.py) against cuBLAS and Triton's mma.sync path, in one process on the GPU.

    python benchmarks/gemm.py build DIR        # here (MLIR): the fp16 and bf16 kernels' PTX into DIR
    python3 benchmarks/gemm.py run DIR         # GPU host, runtime-only install, torch and Triton: DIR/gemm.json
    python3 benchmarks/gemm.py check DIR       # GPU host: 240 random shapes against torch, and the error paths

On the GPU host every kernel runs on torch tensors through `mlir_tile.runtime` (no host copies, torch's
stream), as a user replacing `torch.matmul` would. Triton's kernel is the tutorial matmul (its own code, its
own autotuning over the same tile shapes), compiled with DISABLE_MMA_V3=1 so that it takes mma.sync and
ldmatrix, as ours does. Times: CUDA events around each launch, median of REPEATS after WARMUP.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from torch_timing import load_example, median_seconds

SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096),
          (4096, 11008, 4096), (4096, 4096, 11008), (4000, 4000, 4000), (1000, 3000, 500), (127, 1000, 4097)]
WARMUP, REPEATS = 5, 30
CHECKED = 240
ELEMENTS = ("f16", "bf16")


def _example():
    return load_example("gemm")


def configs(example) -> list:
    """The variants measured: the CTA tiles, warp grids and stages the table picks from."""
    c = example.Config
    return [c(), c(pipelined=False), c(bk=64, stages=3), c(stages=3), c(warps=(4, 1)), c(stages=5)]


def build(directory: Path) -> None:
    from mlir_tile.compile import compile_to_ptx

    example = _example()
    example.build_variants(directory / "variants")
    variants = []
    for config in configs(example):
        for element in ELEMENTS:
            (directory / f"gemm_{element}_{config}.ptx").write_text(compile_to_ptx(example.build_module(element, config)))
        variants.append({"name": str(config), "block": config.threads, "shared_bytes": config.shared_bytes,
                         "tile": [config.bm, config.bn]})
    (directory / "gemm.json").write_text(json.dumps(variants))


def _triton_matmul():
    os.environ["DISABLE_MMA_V3"] = "1"  # before Triton compiles anything: mma.sync + ldmatrix, not wgmma
    import triton
    import triton.language as tl

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
               for bm, bn, bk, w, s in [(128, 128, 32, 4, 4), (128, 128, 32, 8, 4), (128, 256, 32, 8, 3),
                                        (128, 128, 64, 4, 3), (256, 128, 32, 8, 3)]]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m, pid_n = tl.program_id(1), tl.program_id(0)
        rm, rn, rk = pid_m * BM + tl.arange(0, BM), pid_n * BN + tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
            y = tl.load(b + (k0 + rk)[:, None] * N + rn[None, :], mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

    def run(a, b, c):
        m, k = a.shape
        n = b.shape[1]
        matmul[lambda meta: (triton.cdiv(n, meta["BN"]), triton.cdiv(m, meta["BM"]))](a, b, c, m, n, k)
    return run


def run(directory: Path) -> None:
    import torch

    from mlir_tile.runtime import Runtime

    triton_matmul = _triton_matmul()
    variants = json.loads((directory / "gemm.json").read_text())
    results = []
    with Runtime() as runtime:
        matmul = _example().Matmul(runtime, directory / "variants")
        stream = torch.cuda.current_stream()
        for element in ELEMENTS:
            dtype = torch.float16 if element == "f16" else torch.bfloat16
            modules = {v["name"]: runtime.load_ptx((directory / f"gemm_{element}_{v['name']}.ptx").read_text(),
                                                   name=v["name"]) for v in variants}
            for m, n, k in SHAPES:
                a = torch.randn(m, k, device="cuda", dtype=dtype)
                b = torch.randn(k, n, device="cuda", dtype=dtype)
                reference = a.float() @ b.float()
                torch.cuda.empty_cache()
                row = {"element": element, "shape": [m, n, k], "mlir-tile": {}, "relative_error": {}}
                aligned = n % 8 == 0 and k % 8 == 0
                b_nk = b.T.contiguous()
                for major, operand in (("kn", b), ("nk", b_nk)):  # the example's pick, as a user calls it
                    picked = torch.empty(m, n, device="cuda", dtype=dtype)
                    call = (lambda operand=operand, major=major, picked=picked:
                            matmul(a, operand, b_major=major, out=picked))
                    call()
                    name = f"Matmul {major}{'' if aligned else ' (rows not on 16 bytes)'}"
                    row["relative_error"][name] = ((picked.float() - reference).abs() / (reference.abs() + k ** 0.5)).max().item()
                    row["mlir-tile"][name] = 2 * m * n * k / _median_seconds(call) / 1e12
                for variant in variants if aligned else []:
                    c = torch.empty(m, n, device="cuda", dtype=dtype)
                    module, tiles = modules[variant["name"]], -(-m // variant["tile"][0]) * -(-n // variant["tile"][1])

                    def ours():
                        module.launch("gemm", [a, b, c, m, n // 8, k // 8], grid=tiles, block=variant["block"],
                                      shared_bytes=variant["shared_bytes"], stream=stream)

                    ours()
                    row["relative_error"][variant["name"]] = (
                        (c.float() - reference).abs() / (reference.abs() + k ** 0.5)).max().item()
                    row["mlir-tile"][variant["name"]] = 2 * m * n * k / _median_seconds(ours) / 1e12
                t_out = torch.empty(m, n, device="cuda", dtype=dtype)
                for name, call in (("cuBLAS", lambda: torch.matmul(a, b, out=t_out)),
                                   ("Triton mma.sync", lambda: triton_matmul(a, b, t_out))):
                    row[name] = 2 * m * n * k / _median_seconds(call) / 1e12
                best = max(row["mlir-tile"], key=row["mlir-tile"].get)
                row["best"] = best
                print(json.dumps({"element": element, "shape": [m, n, k], "best": best,
                                  "mlir-tile": round(row["mlir-tile"][best], 1), "Triton mma.sync": round(row["Triton mma.sync"], 1),
                                  "cuBLAS": round(row["cuBLAS"], 1), "all": {k_: round(v, 1) for k_, v in row["mlir-tile"].items()},
                                  "worst error": max(row["relative_error"].values())}), flush=True)
                results.append(row)
    (directory / "gemm_results.json").write_text(json.dumps(results, indent=1))


def check(directory: Path) -> None:
    """C = A x B on CHECKED random shapes (sizes 1, primes, non-multiples of every tile extent, both B
    layouts, both dtypes) through the example's Matmul, against torch's fp32 product: |C - C32| <= 2^-7 |C32|
    + 2^-8 sqrt(K) (the output's rounding, bf16's 8 bits the coarser, and the fp32 accumulation order over
    K terms of unit variance); and the documented errors."""
    import random

    import torch

    from mlir_tile.runtime import Runtime

    example = _example()
    rng = random.Random(2026)
    special = [1, 2, 3, 7, 8, 13, 17, 31, 61, 127, 128, 129, 257, 1000, 1031, 4097]
    failures, count = [], 0
    with Runtime() as runtime:
        matmul = example.Matmul(runtime, directory / "variants")
        for trial in range(CHECKED):
            m, n, k = (rng.choice(special) if rng.random() < 0.4 else rng.randint(1, 1500) for _ in range(3))
            dtype = (torch.float16, torch.bfloat16)[trial % 2]
            major = ("kn", "nk")[(trial // 2) % 2]
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype) if major == "kn" else torch.randn(n, k, device="cuda", dtype=dtype)
            c = matmul(a, b, b_major=major)
            reference = a.float() @ (b.float() if major == "kn" else b.float().T)
            bound = 2 ** -7 * reference.abs() + 2 ** -8 * k ** 0.5
            bad = ((c.float() - reference).abs() > bound).sum().item()
            count += 1
            if bad:
                failures.append({"shape": [m, n, k], "dtype": str(dtype), "b_major": major, "bad": bad})
        errors = []
        a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
        for what, call in (("float32 input", lambda: matmul(a.float(), a.float())),
                           ("mixed dtypes", lambda: matmul(a, a.bfloat16())),
                           ("transposed view", lambda: matmul(a, a.T)),
                           ("K mismatch", lambda: matmul(a, a[:32].contiguous()))):
            try:
                call()
                errors.append(f"{what}: no error")
            except ValueError as error:
                print(f"{what}: ValueError: {error}")
    report = {"shapes": count, "failures": failures, "error paths without an error": errors}
    print(json.dumps(report))
    (directory / "gemm_check.json").write_text(json.dumps(report, indent=1))


def _median_seconds(call) -> float:
    return median_seconds(call, WARMUP, REPEATS)


if __name__ == "__main__":
    command, directory = sys.argv[1], Path(sys.argv[2])
    {"build": build, "run": run, "check": check}[command](directory)
