"""Decode-shaped products (M 1-128 rows of activations by weights B [N, K] of 4096-11008): which Hopper tile and
split-K count streams the weights fastest (issue 59: >= 85% of the HBM bandwidth their bytes need, >= 1.0x
cuBLAS), each kernel's own time (CUDA graphs, no host), beside cuBLAS (F.linear) in the same process:

    python benchmarks/decode_tiles.py build DIR     # here (MLIR): each candidate tile, split and whole, into DIR
    MLIR_TILE_CACHE_DIR=DIR python3 benchmarks/decode_tiles.py run OUT    # GPU host: OUT/decode_tiles.json
    python3 benchmarks/decode_tiles.py library OUT                         # GPU host: the library's pick alone
    python3 benchmarks/decode_tiles.py profile OUT     # GPU host, ncu: the library's and cuBLAS's at M = 64 and 128

Each product cycles through enough copies of its weights to pass the 50 MB L2 (a model's layers each read their
own), so that a call streams B from HBM as a decode step does; the GPU time is the median of a CUDA graph of 30
calls replayed (`torch_timing.graph_microseconds`). Each (tile, splits) runs through `Matmul` itself, its
`library_config` and `library_splits` replaced while its plan is made, so the launch is the operator's."""
from __future__ import annotations

import json
import sys
from pathlib import Path

SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (32, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096),
          (1, 11008, 4096), (16, 11008, 4096), (128, 11008, 4096), (1, 4096, 11008), (16, 4096, 11008),
          (64, 4096, 11008)]
TILES = [{"bm": 128, "bn": 128, "bk": 64, "stages": 4}, {"bm": 64, "bn": 128, "bk": 64, "stages": 8},
         {"bm": 64, "bn": 64, "bk": 64, "stages": 8}, {"bm": 128, "bn": 64, "bk": 64, "stages": 6},
         {"bm": 64, "bn": 256, "bk": 64, "stages": 5}, {"bm": 128, "bn": 128, "bk": 64, "stages": 6},
         {"bm": 64, "bn": 64, "bk": 64, "stages": 12},
         # (A's box of a few rows where M is no more: TMA then fills no rows of zeros; `HopperConfig.a_rows`)
         {"bm": 64, "bn": 64, "bk": 64, "stages": 8, "a_rows": 8},
         {"bm": 64, "bn": 64, "bk": 64, "stages": 8, "a_rows": 16},
         {"bm": 64, "bn": 64, "bk": 64, "stages": 8, "a_rows": 32},
         {"bm": 64, "bn": 128, "bk": 64, "stages": 8, "a_rows": 8},
         {"bm": 64, "bn": 128, "bk": 64, "stages": 8, "a_rows": 16}]
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
L2_BYTES = 50 * 2 ** 20
HBM_BYTES_PER_SECOND = 3.0e12  # an H100's copy, measured (docs/measured.md)


def configs():
    from dataclasses import replace

    from mlir_tile.kernels.gemm import sm90_tiles

    for tile in TILES:
        config = sm90_tiles.hopper_config("nk", tile, "bf16")
        yield config
        yield replace(config, split_k=True)


def build(directory: Path) -> None:
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.gemm import sm90
    from mlir_tile.kernels.library import source_digest

    folder = directory / "kernels" / source_digest() / "sm_90"  # (`library.cache_folder`'s layout)
    folder.mkdir(parents=True, exist_ok=True)
    for config in configs():
        (folder / f"{sm90.kernel_name('bf16', config, None)}.ptx").write_text(
            compile_to_ptx(sm90.build_module("bf16", config)))


def candidates(m: int, n: int, k: int, sms: int):
    """(tile, splits) worth timing for M x N x K: CTAs from a third of the SMs to two waves, K 256 a split at least."""
    from mlir_tile.kernels.gemm import sm90_tiles

    for tile in TILES:
        if m > tile.get("a_rows", m):  # (such a tile loads only its first a_rows rows of A)
            continue
        tiles = sm90_tiles.hopper_config("nk", tile, "bf16").grid(m, n, sms)
        for splits in SPLITS:
            if sms // 3 <= tiles * splits <= 2 * sms and k // splits >= 256 or splits == 1 and tiles * 3 >= sms:
                yield tile, splits


def forced(tile: dict, splits: int, x, w):
    """`Matmul`'s call of `tile` with `splits` (its plan made with the library's choices replaced)."""
    from mlir_tile.kernels import ops
    from mlir_tile.kernels.gemm import launch as gemm_launch, sm90_tiles

    matmul = gemm_launch.Matmul(ops.kernels_on(x.device).matmul.library)
    chosen_config, chosen_splits = sm90_tiles.library_config, gemm_launch.library_splits
    sm90_tiles.library_config = lambda *arguments, **keywords: sm90_tiles.hopper_config("nk", tile, "bf16")
    gemm_launch.library_splits = lambda *arguments, **keywords: splits
    try:
        matmul(x, w, b_major="nk")
    finally:
        sm90_tiles.library_config, gemm_launch.library_splits = chosen_config, chosen_splits
    assert matmul.last_splits == splits and matmul.last_config.bm == tile["bm"], (matmul.last_config, splits)
    return matmul


def run(out: Path, candidates_too: bool = True) -> None:
    import torch
    import torch.nn.functional as F
    from torch_timing import graph_microseconds

    from mlir_tile.kernels import matmul

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for m, n, k in SHAPES:
        copies = -(-2 * L2_BYTES // (2 * n * k))
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64 for _ in range(copies)]
        expected = F.linear(x, weights[0]).float()
        turn = iter(range(10 ** 9))

        def cycled(call):
            return lambda: call(weights[next(turn) % copies])

        times = {"cuBLAS": graph_microseconds(cycled(lambda w: F.linear(x, w))),
                 "library": graph_microseconds(cycled(lambda w: matmul(x, w, b_layout="nk")))}
        for tile, splits in candidates(m, n, k, sms) if candidates_too else ():
            rows_of_a = f"a{tile['a_rows']}" if "a_rows" in tile else ""
            name = f"{tile['bm']}x{tile['bn']}s{tile['stages']}{rows_of_a} x{splits}"
            try:
                product = forced(tile, splits, x, weights[0])
            except Exception as error:  # (a candidate the launcher refuses: recorded, not timed)
                times[name] = f"{type(error).__name__}: {str(error)[:120]}"
                continue
            error = float((product(x, weights[0], b_major="nk").float() - expected).abs().max())
            assert error < 0.05 * float(expected.abs().max()) + 1e-3, (name, error)
            times[name] = graph_microseconds(cycled(lambda w, product=product: product(x, w, b_major="nk")))
        need = 2 * (m * k + n * k + m * n)
        timed = {name: t for name, t in times.items() if isinstance(t, float)}
        best = min((name for name in timed if name != "cuBLAS"), key=timed.__getitem__)
        row = {"shape": [m, n, k], "us": {name: round(t, 2) if isinstance(t, float) else t for name, t in times.items()},
               "best": best, "best vs cuBLAS": round(timed["cuBLAS"] / timed[best], 3),
               "best HBM share": round(need / (timed[best] * 1e-6) / HBM_BYTES_PER_SECOND, 3),
               "cuBLAS HBM share": round(need / (timed["cuBLAS"] * 1e-6) / HBM_BYTES_PER_SECOND, 3),
               "library vs cuBLAS": round(timed["cuBLAS"] / timed["library"], 3)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode_tiles.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))


def launch() -> None:
    """One call each of the library's product and cuBLAS's (F.linear) at M = 64 and 128 by 4096 x 4096 (where the
    library's decode tiles run 0.90x cuBLAS), weights of their own past the L2: what `profile` runs under ncu."""
    import torch
    import torch.nn.functional as F

    from mlir_tile.kernels import matmul

    for m in (64, 128):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        weights = [torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64 for _ in range(4)]
        matmul(x, weights[0], b_layout="nk")  # (its plan made and its kernel loaded before the profiled launches)
        torch.cuda.synchronize()
        matmul(x, weights[1], b_layout="nk")
        F.linear(x, weights[2])
    torch.cuda.synchronize()


def profile(out: Path) -> None:
    """ncu (`torch_timing.profile_launches`) of `launch`'s profiled kernels: time, DRAM throughput, stalls."""
    from torch_timing import profile_launches

    rows = [{"who": who, **{k: v for k, v in entry.items() if k != "unknown"}} for who, entry in zip(
        ("ours M 64 (plan)", "ours M 64", "cuBLAS M 64", "ours M 128 (plan)", "ours M 128", "cuBLAS M 128"),
        profile_launches([__file__, "launch"], "gemm|sm90|cutlass|xmma|nvjet", 6))]
    print("\n".join(json.dumps(row) for row in rows), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode_tiles_profile.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "launch":
        launch()
    else:
        {"build": build, "run": run, "profile": profile,
         "library": lambda out: run(out, candidates_too=False)}[sys.argv[1]](Path(sys.argv[2]))
