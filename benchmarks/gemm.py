"""The builder's GEMMs against cuBLAS and Triton, in one process on the GPU: Hopper's path (`gemm.sm90`: TMA,
wgmma) and the mma.sync path (mlir_tile.kernels.gemm).

    python benchmarks/gemm.py hopper-build DIR # here (MLIR): the Hopper kernels' PTX and the wgmma loop into DIR
    python3 benchmarks/gemm.py hopper DIR [f16|bf16|e4m3] [nk|kn]  # GPU host: DIR/gemm_hopper_<args>.json, sustained
    python3 benchmarks/gemm.py hopper-profile DIR  # GPU host with ncu: the wgmma pipe, shared wavefronts, stalls
    python benchmarks/gemm.py hopper-table DIR  # DIR/hopper_tiles.json from DIR/gemm_hopper*.json: the library's tiles
    python3 benchmarks/gemm.py hopper-fused DIR  # GPU host: bias + gelu/silu fused, against torch's unfused
    python benchmarks/gemm.py build DIR        # here (MLIR): the fp16 and bf16 kernels' PTX into DIR
    python3 benchmarks/gemm.py run DIR         # GPU host, runtime-only install, torch and Triton: DIR/gemm.json
    python3 benchmarks/gemm.py check DIR       # GPU host: 240 random shapes against torch, and the error paths
    python3 benchmarks/gemm.py profile DIR     # GPU host with ncu: shared wavefronts and stalls of each tile
    python3 benchmarks/gemm.py clocks DIR      # GPU host: SM clock and power under each 8192^3 product, sustained
    python3 benchmarks/gemm.py sass DIR        # GPU host: the main loop's SASS instructions per k-tile, ours and Triton's
    python3 benchmarks/gemm.py fixed DIR       # GPU host: the time a product spends outside its K loop's slope

On the GPU host every kernel runs on torch tensors through `mlir_tile.runtime` (no host copies, torch's
stream), as a user replacing `torch.matmul` would. Triton's kernel is the tutorial matmul (its own code, its
own autotuning over the same tile shapes), compiled with DISABLE_MMA_V3=1 so that it takes mma.sync and
ldmatrix, as ours does, and again as Triton compiles it by default (wgmma); the pure mma.sync loop of
fragment_loop.py gives the instruction's peak in the same process. Times: `torch_timing.sustained_interleaved`
(back to back, the calls of a shape taking turns, medians, the SM clock and power beside).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Sequence

from torch_timing import (SUSTAINED, clock_and_power, library, profile_launches, sustained_interleaved,
                          sustained_rate)
from mlir_tile.kernels.gemm import launch as gemm_launch, sm80 as gemm_sm80, sm80_tiles as gemm_tiles

SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096),
          (4096, 11008, 4096), (4096, 4096, 11008), (4000, 4000, 4000), (1000, 3000, 500), (127, 1000, 4097),
          (256, 1024, 8192)]  # the last: 16 C tiles of 128 x 128 for 132 SMs, split-K's case with 16-byte copies
CHECKED, HOPPER_CHECKED = 240, 320
ELEMENTS = ("f16", "bf16")


def configs() -> list:
    """The variants measured beside `Matmul`'s pick: its tiles, and the 128 x 256 tile with 64-wide k-tiles in
    3 stages and with 32-wide ones in 4, all with B [K, N]; the persistent kernel (B [N, K])."""
    c = gemm_tiles.Config
    return [c(**tile) for tile in gemm_tiles.TILES] + [c(bm=128, bn=256, bk=64, warps=(2, 4), stages=3),
                                                      c(bm=128, bn=256, bk=32, warps=(2, 4), stages=4),
                                                      c(**gemm_tiles.PERSISTENT, b_major="nk")]


def build(directory: Path) -> None:
    from fragment_loop import write_peak_source

    from mlir_tile.compiler.compile import compile_to_ptx

    from mlir_tile.kernels.ship import ship

    ship(directory / "variants", chips=("sm_90",))
    write_peak_source(directory)
    variants = []
    for config in configs():
        for element in ELEMENTS:
            (directory / f"gemm_{element}_{config}.ptx").write_text(compile_to_ptx(gemm_sm80.build_module(element, config)))
        variants.append({"name": str(config), "block": config.threads, "shared_bytes": config.shared_bytes,
                         "tile": [config.bm, config.bn], "b_major": config.b_major, "persistent": config.persistent})
    (directory / "gemm.json").write_text(json.dumps(variants))


TRITON_CONFIGS = [(128, 128, 32, 4, 4), (128, 128, 32, 8, 4), (128, 256, 32, 8, 3), (128, 128, 64, 4, 3),
                  (256, 128, 32, 8, 3)]  # BM, BN, BK, warps, stages: the tile shapes ours are measured on


def _triton_kernel():
    """Triton's tutorial matmul (row-major A [M, K], B [K, N], C [M, N]) as a plain jit function."""
    import triton
    import triton.language as tl

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
    return matmul


def _triton_matmul(mma_v3: bool):
    """Triton's tutorial matmul, autotuned over TRITON_CONFIGS; mma_v3 False: compiled with DISABLE_MMA_V3=1
    (mma.sync + ldmatrix, as ours), True: Triton's default (wgmma on the H200). Each is its own jit function,
    and the variable is set before each call, since Triton reads it when it compiles."""
    import triton

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s) for bm, bn, bk, w, s in TRITON_CONFIGS]
    matmul = triton.autotune(configs=configs, key=["M", "N", "K"])(_triton_kernel())

    def run(a, b, c):
        os.environ["DISABLE_MMA_V3"] = "0" if mma_v3 else "1"
        m, k = a.shape
        n = b.shape[1]
        matmul[lambda meta: (triton.cdiv(n, meta["BN"]), triton.cdiv(m, meta["BM"]))](a, b, c, m, n, k)
    run.autotuner = matmul
    return run


# Hopper's path: the shapes (M, N, K), B [N, K] (nn.Linear's weight) in both dtypes, B [K, N] in f16 on some;
# the tiles: the library's candidates (`gemm.sm90_tiles.SMALL_TILE` among them) and their neighbours; "b": the same with
# the warpgroup's index broadcast (`HopperConfig.uniform`: the main loop's descriptors in uniform registers)
HOPPER_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 11008, 4096), (16384, 4096, 4096), (4096, 4096, 11008),
                 (2048, 2048, 2048)]
HOPPER_KN_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 2048)]
def _tile(bm: int, bn: int, bk: int, stages: int, *flags: dict) -> dict:
    """A Hopper tile: HopperConfig's fields (`sm90_tiles.hopper_config`), the shape and each flag's."""
    return {"bm": bm, "bn": bn, "bk": bk, "stages": stages, **{k: v for flag in flags for k, v in flag.items()}}


WIDE, PERSISTENT, PINGPONG, CLUSTER_2, UNIFORM = ({"consumer_rows": 128}, {"persistent": True},
                                                 {"persistent": True, "pingpong": True}, {"cluster": 2}, {"uniform": True})
PROMOTE = {"promote": True}  # fp8's precise accumulation (`HopperConfig.promote`)
PAIRED = {"promote": True, "paired": True}  # (two partial sets, k-tile t - 1's added in under t's: `paired`)
HOPPER_TILES = {"nk": [_tile(128, 256, 64, 3), _tile(256, 128, 64, 3), _tile(128, 256, 64, 4), _tile(128, 128, 64, 4),
                       _tile(128, 256, 64, 3, PERSISTENT), _tile(128, 256, 64, 3, CLUSTER_2), _tile(256, 128, 64, 4, WIDE),
                       _tile(256, 128, 64, 3, WIDE), _tile(128, 128, 64, 4, WIDE, PINGPONG),
                       _tile(128, 128, 64, 5, WIDE, PINGPONG), _tile(256, 128, 64, 4, WIDE, UNIFORM),
                       _tile(128, 256, 64, 4, UNIFORM), _tile(128, 128, 64, 4, UNIFORM)],
                "kn": [_tile(128, 256, 64, 3), _tile(256, 128, 64, 3), _tile(128, 256, 64, 4), _tile(128, 128, 64, 4),
                       _tile(128, 256, 64, 3, PERSISTENT), _tile(256, 128, 64, 4, WIDE),
                       _tile(128, 128, 64, 4, WIDE, PINGPONG), _tile(256, 128, 64, 4, WIDE, UNIFORM),
                       _tile(128, 128, 64, 4, UNIFORM)]}
FP8_TILES = {"nk": [_tile(128, 256, 128, 4), _tile(128, 256, 128, 3), _tile(256, 128, 128, 3),  # e4m3
                    _tile(128, 256, 128, 3, CLUSTER_2), _tile(256, 128, 128, 4, WIDE),
                    _tile(256, 128, 128, 4, WIDE, UNIFORM), _tile(128, 128, 128, 4, PROMOTE),
                    _tile(128, 192, 128, 4, PROMOTE),
                    # (cuBLASLt's default fp8 kernel on the H100: 128 x 128, 6 stages, clusters of 2; ncu, session 47)
                    _tile(128, 128, 128, 6, PROMOTE), _tile(128, 128, 128, 4, PROMOTE, CLUSTER_2),
                    _tile(128, 128, 128, 6, PROMOTE, CLUSTER_2), _tile(128, 192, 128, 5, PROMOTE),
                    _tile(128, 128, 128, 4, PAIRED), _tile(128, 128, 128, 6, PAIRED)],
             "kn": [_tile(128, 256, 128, 3), _tile(128, 128, 128, 4), _tile(256, 128, 128, 3),
                    _tile(256, 128, 128, 3, WIDE), _tile(256, 128, 128, 3, WIDE, UNIFORM)]}


def label(tile: dict) -> str:
    """A tile's short name in these runs' records (BMxBNxBKsSTAGES, then w: 128-row consumers, g: ping-pong, p:
    persistent, c2: a cluster of 2, b: uniform, q: fp8's promoted accumulation, q2: with two partial sets)."""
    walk = "g" if tile.get("pingpong") else "p" if tile.get("persistent") else ""
    cluster = f"c{tile['cluster']}" if tile.get("cluster", 1) > 1 else ""
    return (f"{tile['bm']}x{tile['bn']}x{tile['bk']}s{tile['stages']}{'w' if tile.get('consumer_rows') == 128 else ''}"
            f"{walk}{cluster}{'b' if tile.get('uniform') else ''}{'q' if tile.get('promote') else ''}"
            f"{'2' if tile.get('paired') else ''}")


def _library_candidate(tile: dict) -> bool:
    """Whether a library kernel may be this tile: one CTA a cluster, warp-specialized, not split, persistent only
    as ping-pong (the plain persistent tiles and the clusters ran slower)."""
    return (tile.get("cluster", 1) == 1 and tile.get("specialized", True) and not tile.get("split_k")
            and tile.get("persistent", False) == tile.get("pingpong", False))


# Triton's tutorial matmul (grouped order) autotuned over its Hopper-sized configurations: BM, BN, BK, warps, stages
TRITON_HOPPER_CONFIGS = [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 128, 64, 8, 4),
                         (128, 256, 32, 8, 4), (64, 256, 64, 4, 4)]


def _hopper_kernels() -> list[tuple[str, str, dict]]:
    """(element, B layout, tile) of every Hopper kernel measured."""
    return ([(element, major, tile) for element in ELEMENTS for major in ("nk", "kn") for tile in HOPPER_TILES[major]]
            + [("e4m3", major, tile) for major, tiles in FP8_TILES.items() for tile in tiles])


TILES_BY_LABEL = {label(tile): tile for _, _, tile in _hopper_kernels()}


# Fused epilogues on Hopper's path (bf16, B [N, K]): the ready-made chains on the library's two tiles
FUSED_TILES, FUSED_ACTIVATIONS = ["256x128x64s4w", "128x128x64s4"], ["gelu_tanh", "silu"]  # (labels)


def hopper_build(directory: Path) -> None:
    """Each of `_hopper_kernels` (PTX, sm_90a), bias + each of FUSED_ACTIVATIONS on FUSED_TILES, and the pure
    wgmma loop."""
    import wgmma_loop

    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels import epilogues
    from mlir_tile.kernels.gemm import sm90 as gemm_sm90, sm90_tiles as hopper_tiles

    directory.mkdir(parents=True, exist_ok=True)
    for element, major, tile in _hopper_kernels():
        module = gemm_sm90.build_module(element, hopper_tiles.hopper_config(major, tile, element))
        (directory / f"hopper_{element}_{major}_{label(tile)}.ptx").write_text(compile_to_ptx(module))
    for tile in FUSED_TILES:
        for activation in FUSED_ACTIVATIONS:
            module = gemm_sm90.build_module("bf16", hopper_tiles.hopper_config("nk", TILES_BY_LABEL[tile]),
                                              epilogue=epilogues.chain(True, activation))
            (directory / f"hopper_bf16_nk_{tile}_{activation}.ptx").write_text(compile_to_ptx(module))
    wgmma_loop.build(directory)


def hopper_fused(directory: Path) -> None:
    """bias + gelu_tanh and bias + silu fused into the Hopper kernel (each of FUSED_TILES) beside torch's
    unfused F.linear then the activation and cuBLAS's product alone, bf16, B [N, K], at HOPPER_SHAPES' first
    five, timed as `hopper` times; each result checked against torch's: DIR/gemm_fused_hopper.json."""
    import torch
    import torch.nn.functional as F

    from mlir_tile.runtime import Runtime

    torch_activation = {"gelu_tanh": lambda y: F.gelu(y, approximate="tanh"), "silu": F.silu}
    results = []
    with Runtime() as runtime:
        for activation in FUSED_ACTIVATIONS:
            modules = {tile: runtime.load_ptx((directory / f"hopper_bf16_nk_{tile}_{activation}.ptx").read_text(),
                                              name=f"{tile}_{activation}") for tile in FUSED_TILES}
            for m, n, k in HOPPER_SHAPES[:5]:
                a, w = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for shape in ((m, k), (n, k)))
                bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
                anchors = {"cuBLAS+torch": lambda: torch_activation[activation](F.linear(a, w, bias)),
                           "cuBLAS alone": lambda: F.linear(a, w)}  # (as a model calls them: new tensors)
                outputs = {name: torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for name in modules}
                calls = {**_hopper_calls(runtime, modules, a, w, outputs.__getitem__, "nk", "bf16", [bias]), **anchors}
                seconds, conditions = sustained_interleaved(calls)
                outputs.update({name: call() for name, call in anchors.items()})
                row = _hopper_row("bf16", "nk", (m, n, k), seconds, conditions, outputs, list(anchors))
                results.append({"activation": activation, **row})
                (directory / "gemm_fused_hopper.json").write_text(json.dumps({"shapes": results}, indent=1))
                torch.cuda.empty_cache()


def _triton_grouped():
    """Triton's tutorial matmul as its tutorial writes it (grouped tile order, strides: B [N, K] is passed
    as its transposed view), autotuned over TRITON_HOPPER_CONFIGS by its own autotuner, compiled by
    default (wgmma and TMA on the H200)."""
    import triton
    import triton.language as tl

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_warps=w, num_stages=s)
               for bm, bn, bk, w, s in TRITON_HOPPER_CONFIGS]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        first_m = pid // (GROUP * tiles_n) * GROUP
        rows = min(tiles_m - first_m, GROUP)
        pid_m, pid_n = first_m + (pid % (GROUP * tiles_n)) % rows, (pid % (GROUP * tiles_n)) // rows
        rm, rn, rk = (pid_m * BM + tl.arange(0, BM)) % M, (pid_n * BN + tl.arange(0, BN)) % N, tl.arange(0, BK)
        x, y = a + rm[:, None] * sam + rk[None, :] * sak, b + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, tl.cdiv(K, BK)):
            acc += tl.dot(tl.load(x, mask=rk[None, :] < K - k0 * BK, other=0.0),
                          tl.load(y, mask=rk[:, None] < K - k0 * BK, other=0.0))
            x, y = x + BK * sak, y + BK * sbk
        cm, cn = pid_m * BM + tl.arange(0, BM), pid_n * BN + tl.arange(0, BN)
        tl.store(c + cm[:, None] * scm + cn[None, :] * scn, acc.to(c.dtype.element_ty),
                 mask=(cm[:, None] < M) & (cn[None, :] < N))

    def run(a, b, c):  # b: [K, N], any strides
        (m, k), n = a.shape, b.shape[1]
        matmul[lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)](
            a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride())
    return run


def _hopper_calls(runtime, modules: dict, a, b, c_of, major: str, element: str, extras=()) -> dict:
    """A call per Hopper tile (`modules`: tile -> module) on a, b (B as `major`), each into its own C
    (`c_of(tile)`), its tensor maps made once (`common.TensorMaps`, kept alive by the call); e4m3:
    `extras` after the sizes (e4m3's scales, an epilogue's operands)."""
    import torch

    from mlir_tile.kernels import common
    from mlir_tile.kernels.gemm import sm90 as gemm_sm90, sm90_tiles as hopper_tiles

    (m, depth), n = a.shape, (b.shape[0] if major == "nk" else b.shape[1])
    sms, stream, calls = runtime.device.properties.multiprocessor_count, torch.cuda.current_stream(), {}
    tensor_maps = common.TensorMaps(runtime)
    for tile, module in modules.items():
        config, c = hopper_tiles.hopper_config(major, TILES_BY_LABEL[tile], element), c_of(tile)
        box = gemm_sm90.boxes(config)
        maps = [tensor_maps(matrix, box[name]) for name, matrix in (("a", a), ("b", b), ("c", c))]
        arguments = [*maps, m, n // config.unit, depth // config.k_unit, *extras]
        calls[tile] = (lambda module=module, config=config, arguments=arguments, maps=maps:
                       module.launch(gemm_sm90.KERNEL, arguments, grid=config.grid(m, n, sms), block=config.threads,
                                     shared_bytes=config.shared_bytes, stream=stream,
                                     cluster=config.cluster if config.cluster > 1 else None))
    return calls


def _operands_and_anchors(element: str, major: str, m: int, n: int, k: int, triton_mm) -> tuple:
    """(A, B as `major`, e4m3's scales, {anchor: call(out)}) of one case: cuBLAS (torch.mm; B [N, K] through
    its transposed view, as F.linear calls it) and Triton's default path; for e4m3 cuBLASLt's fp8 GEMM
    (torch._scaled_mm, which takes B only column-major: B [N, K]'s transposed view, or B [K, N] transposed
    into a copy first, per-tensor scales, bf16 out)."""
    import torch

    if element == "e4m3":
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(*((n, k) if major == "nk" else (k, n)), device="cuda").to(torch.float8_e4m3fn)
        scales = [torch.ones(1, device="cuda", dtype=torch.float32) for _ in range(2)]
        if major == "nk":
            return a, b, scales, {"cuBLASLt fp8": lambda out: torch._scaled_mm(a, b.t(), *scales, out_dtype=torch.bfloat16,
                                                                                out=out)}
        return a, b, scales, {"transpose + cuBLASLt fp8": lambda out: torch._scaled_mm(
            a, b.t().contiguous().t(), *scales, out_dtype=torch.bfloat16, out=out)}
    dtype = torch.float16 if element == "f16" else torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(*((n, k) if major == "nk" else (k, n)), device="cuda", dtype=dtype)
    b_kn = b.t() if major == "nk" else b
    return a, b, [], {"cuBLAS": lambda out: torch.mm(a, b_kn, out=out), "Triton": lambda out: triton_mm(a, b_kn, out)}


def hopper(directory: Path, elements: Sequence[str] = ELEMENTS + ("e4m3",)) -> None:
    """Per shape, element and B layout: every Hopper tile beside the anchors (`_operands_and_anchors`), timed
    with `sustained_interleaved` (back to back, rounds interleaved, medians, the SM clock and power beside);
    each result checked against the first anchor's; then the pure wgmma f16 loop sustained, the ceiling."""
    import torch
    import wgmma_loop

    from mlir_tile.runtime import Runtime

    import datetime

    triton_mm, results = _triton_grouped(), []
    provenance = {"chip": torch.cuda.get_device_name(), "date": datetime.datetime.now(datetime.timezone.utc)
                  .strftime("%Y-%m-%d %H:%M UTC"), "command": f"python3 benchmarks/gemm.py hopper DIR {' '.join(elements)}"
                  .rstrip()}
    out = directory / ("gemm_hopper" + "".join(f"_{x}" for x in elements) + ".json")  # (runs apart: `hopper_table`)
    majors = [x for x in elements if x in ("nk", "kn")] or ["nk", "kn"]  # "kn" alone: only B [K, N]'s cases
    elements = [x for x in elements if x not in ("nk", "kn")]
    cases = ([(e, "nk", s) for e in elements for s in HOPPER_SHAPES[:4 if e == "e4m3" else None]]
             + [("f16", "kn", s) for s in HOPPER_KN_SHAPES if "f16" in elements]
             + [("e4m3", "kn", s) for s in HOPPER_SHAPES[:4] if "e4m3" in elements])
    cases = [case for case in cases if case[1] in majors]
    with Runtime() as runtime:
        modules = {}
        for element, major, tile in map(lambda kernel: (*kernel[:2], label(kernel[2])), _hopper_kernels()):
            modules.setdefault((element, major), {})[tile] = runtime.load_ptx(
                (directory / f"hopper_{element}_{major}_{tile}.ptx").read_text(), name=f"{element}_{major}_{tile}")
        for element, major, (m, n, k) in cases:
            a, b, scales, anchors = _operands_and_anchors(element, major, m, n, k, triton_mm)
            out_type = torch.bfloat16 if element == "e4m3" else a.dtype
            outputs = {name: torch.empty(m, n, device="cuda", dtype=out_type) for name in [*modules[element, major], *anchors]}
            calls = _hopper_calls(runtime, modules[element, major], a, b, outputs.__getitem__, major, element, scales)
            calls.update({name: (lambda call=call, out=outputs[name]: call(out)) for name, call in anchors.items()})
            seconds, conditions = sustained_interleaved(calls)
            results.append(_hopper_row(element, major, (m, n, k), seconds, conditions, outputs, list(anchors)))
            out.write_text(json.dumps({**provenance, "shapes": results}, indent=1))  # so far
            torch.cuda.empty_cache()
        ceiling = _wgmma_ceiling(runtime, directory, wgmma_loop)
    out.write_text(json.dumps({**provenance, "shapes": results, "wgmma f16 loop, sustained": ceiling}, indent=1))


def _hopper_row(element, major, shape, seconds, conditions, outputs, anchors) -> dict:
    """One case's rates (TFLOP/s), the best tile's ratios to each anchor, the conditions, and each result's
    largest difference from the first anchor's (relative to its largest value); printed as it comes."""
    m, n, k = shape
    rates = {name: 2 * m * n * k / t / 1e12 for name, t in seconds.items()}
    reference = outputs[anchors[0]].float()
    errors = {name: ((out.float() - reference).abs().max() / reference.abs().max()).item()
              for name, out in outputs.items() if name != anchors[0]}
    best = max((name for name in rates if name not in anchors), key=rates.get)
    row = {"element": element, "b_major": major, "shape": list(shape), "best": best,
           **{f"vs {anchor}": round(rates[best] / rates[anchor], 3) for anchor in anchors}, **conditions,
           "TFLOP/s": {x: round(r, 1) for x, r in rates.items()},
           f"largest difference from {anchors[0]} (relative to its largest)": errors}
    print(json.dumps({x: v for x, v in row.items() if not x.startswith("largest")}), flush=True)
    return row


def _wgmma_ceiling(runtime, directory: Path, wgmma_loop) -> dict:
    """The pure wgmma f16 loop's TFLOP/s launched back to back for SUSTAINED seconds, clock and power beside."""
    import torch

    sms = runtime.device.properties.multiprocessor_count
    module = runtime.load_ptx((directory / "wgmma_f16.ptx").read_text(), name="wgmma_f16")
    out = torch.zeros(1 << 20, device="cuda", dtype=torch.int32)
    window = (64 * wgmma_loop.WARPGROUPS + wgmma_loop.N) * 128
    stream = torch.cuda.current_stream()
    call = lambda: module.launch("wgmma_loop", [out, wgmma_loop.ITERATIONS["f16"]], grid=sms,
                                 block=128 * wgmma_loop.WARPGROUPS, shared_bytes=window, stream=stream)
    ceiling = clock_and_power(lambda: sustained_rate(call, wgmma_loop.flop_per_launch("f16", sms)))
    print(json.dumps({"wgmma f16 loop, sustained": ceiling}), flush=True)
    return ceiling


def hopper_table(directory: Path) -> None:
    """DIR/hopper_tiles.json (copy it beside mlir_tile/kernels/gemm/sm90_tiles.py: `sm90_tiles.measured_tile`) from
    every DIR/gemm_hopper*.json `hopper` wrote: per dtype and B layout, of the tiles measured at every shape
    that a library kernel may be (`_library_candidate`), the one fastest at the most shapes (ties: the higher
    geometric mean), as its fields with its label; a pair never measured (bf16 with B [K, N]) takes f16's. The
    runs' chips, dates and commands go with it (`provenance`)."""
    import math

    files = sorted(directory.glob("gemm_hopper*.json"))
    runs = [json.loads(file.read_text()) for file in files]
    rows = [row for run in runs for row in run["shapes"]]
    tiles, rates = {}, {}
    for element in ("f16", "bf16", "e4m3"):
        for major in ("nk", "kn"):
            group = [row for row in rows if (row["element"], row["b_major"]) == (element, major)]
            if not group:
                continue
            measured = [{t: r for t, r in row["TFLOP/s"].items() if t in TILES_BY_LABEL
                         and _library_candidate(TILES_BY_LABEL[t])} for row in group]
            candidates = set.intersection(*(set(m) for m in measured))
            wins = {t: sum(max(m, key=m.get) == t for m in measured if set(m) >= candidates) for t in candidates}
            mean = {t: math.exp(sum(math.log(m[t]) for m in measured) / len(measured)) for t in candidates}
            key, best = f"{element}:{major}", max(candidates, key=lambda t: (wins[t], mean[t]))
            tiles[key] = {"label": best, "fields": TILES_BY_LABEL[best]}
            rates[key] = {t: round(mean[t], 1) for t in sorted(candidates, key=mean.get, reverse=True)}
    for major in ("nk", "kn"):
        if f"f16:{major}" in tiles:
            tiles.setdefault(f"bf16:{major}", tiles[f"f16:{major}"])
    provenance = {"command": "python3 benchmarks/gemm.py hopper DIR (each dtype), then python3 benchmarks/gemm.py "
                             "hopper-table DIR",
                  "runs": [{"file": file.name, **{k: run[k] for k in ("chip", "date", "command") if k in run}}
                           for file, run in zip(files, runs)], "shapes": len(rows)}
    table = {"provenance": provenance, "tiles": tiles, "geometric mean TFLOP/s": rates}
    (directory / "hopper_tiles.json").write_text(json.dumps(table, indent=1) + "\n")
    print(json.dumps(tiles))


HOPPER_PROFILED = [("f16", "nk", "128x256x64s3"), ("e4m3", "nk", "128x256x128s4"), ("e4m3", "kn", "128x256x128s3")]


def hopper_launch(directory: Path, element: str, major: str, tile: str) -> None:
    """One launch of a Hopper tile at PROFILED, then one of its first anchor (cuBLAS; e4m3 cuBLASLt, after its
    transposed copy with B [K, N]): what `hopper_profile` runs under ncu."""
    import torch

    from mlir_tile.runtime import Runtime

    m, n, k = PROFILED
    a, b, scales, anchors = _operands_and_anchors(element, major, m, n, k, triton_mm=None)
    out_type = torch.bfloat16 if element == "e4m3" else a.dtype
    with Runtime() as runtime:
        module = runtime.load_ptx((directory / f"hopper_{element}_{major}_{tile}.ptx").read_text(), name=tile)
        calls = _hopper_calls(runtime, {tile: module}, a, b, lambda _: torch.empty(m, n, device="cuda", dtype=out_type),
                              major, element, scales)
        calls[tile]()
        next(iter(anchors.values()))(torch.empty(m, n, device="cuda", dtype=out_type))
        torch.cuda.synchronize()


def hopper_profile(directory: Path) -> None:
    """ncu (clocks left alone) on each of HOPPER_PROFILED and its anchor at PROFILED: the wgmma pipe's busy
    share, shared-memory instructions and wavefronts (only the C tile's stmatrix and, fp8 B [K, N], the
    transposition's ldmatrix/stmatrix go through the LSU: the bank model says 4 wavefronts an x4), stalls."""
    report = []
    for element, major, tile in HOPPER_PROFILED:
        ours, anchor = profile_launches([__file__, "hopper-launch", str(directory), element, major, tile],
                                        "gemm|sm90|cutlass|xmma|nvjet", 2)
        for who, entry in (("ours " + tile, ours), ("anchor", anchor)):
            report.append({"element": element, "b_major": major, "shape": PROFILED, "who": who, **entry})
            print(json.dumps(report[-1]), flush=True)
    (directory / "gemm_hopper_profile.json").write_text(json.dumps(report, indent=1))


def sass(directory: Path) -> None:
    """The main loop's SASS instructions per k-tile (one turn of the loop: a k-tile each, ours and Triton's),
    by kind (`bench.mma_loop_counts`), for each of our fp16 tiles (ptxas, sm_90) beside each of Triton's
    configurations compiled with DISABLE_MMA_V3=1 (its mma.sync + ldmatrix path) and the one its autotuner
    picks at PROFILED; the same cuobjdump reads both. What each turn moves differs (k-tile 32 or 64 wide, 4
    or 8 warps): "per HMMA" compares them."""
    import tempfile

    import torch
    import triton
    from bench import mma_loop_counts, ptx_to_cubin, sass_of

    report = []
    for variant in json.loads((directory / "gemm.json").read_text()):
        cubin = ptx_to_cubin(directory / f"gemm_f16_{variant['name']}.ptx")  # beside its PTX
        report.append({"kernel": f"mlir-tile {variant['name']}", **mma_loop_counts(sass_of(cubin))})
        print(json.dumps(report[-1]), flush=True)
    m, n, k = PROFILED
    a, b = torch.randn(m, k, device="cuda", dtype=torch.float16), torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    os.environ["DISABLE_MMA_V3"] = "1"
    kernel = _triton_kernel()
    tuned = _triton_matmul(mma_v3=False)
    tuned(a, b, c)
    best = tuned.autotuner.best_config
    with tempfile.TemporaryDirectory() as scratch:
        for bm, bn, bk, warps, stages in TRITON_CONFIGS:
            compiled = kernel[(triton.cdiv(n, bn), triton.cdiv(m, bm))](a, b, c, m, n, k, BM=bm, BN=bn, BK=bk,
                                                                         num_warps=warps, num_stages=stages)
            cubin = Path(scratch) / f"triton_{bm}x{bn}x{bk}_w{warps}_s{stages}.cubin"
            cubin.write_bytes(compiled.asm["cubin"])
            picked = (best.kwargs, best.num_warps, best.num_stages) == ({"BM": bm, "BN": bn, "BK": bk}, warps, stages)
            report.append({"kernel": f"Triton mma.sync {bm}x{bn}x{bk} w{warps} s{stages}"
                                     f"{' (autotuned pick)' if picked else ''}", **mma_loop_counts(sass_of(cubin))})
            print(json.dumps(report[-1]), flush=True)
    (directory / "gemm_sass.json").write_text(json.dumps(report, indent=1))


def run(directory: Path) -> None:
    """Per shape and dtype, every call timed in turns (`sustained_interleaved`): Matmul's pick for both B
    layouts, each measured tile, cuBLAS, Triton's mma.sync path and its default; the pure mma.sync loop once."""
    import torch
    from fragment_loop import mma_sync_peak

    from mlir_tile.runtime import Runtime

    tritons = {"Triton mma.sync": _triton_matmul(mma_v3=False), "Triton default": _triton_matmul(mma_v3=True)}
    variants = json.loads((directory / "gemm.json").read_text())
    results = []
    with Runtime() as runtime:
        peak = mma_sync_peak(runtime, directory)
        print(json.dumps({"mma.sync peak": round(peak, 1)}), flush=True)
        matmul = gemm_launch.Matmul(library(runtime, directory / "variants"))
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
                aligned = n % 8 == 0 and k % 8 == 0
                calls, outputs, picked, b_nk = {}, {}, [], b.T.contiguous()
                for major, operand in (("kn", b), ("nk", b_nk)):  # the example's pick, as a user calls it
                    name = f"Matmul {major}{'' if aligned else ' (rows not on 16 bytes)'}"
                    outputs[name] = torch.empty(m, n, device="cuda", dtype=dtype)
                    calls[name] = (lambda operand=operand, major=major, out=outputs[name]:
                                   matmul(a, operand, b_major=major, out=out))
                    calls[name]()
                    picked.append(f"{major}: {matmul.last_config} x{matmul.last_splits}")
                    if matmul.last_splits > 1:  # beside it, the same tile without split-K
                        outputs[f"{name}, no split"] = torch.empty(m, n, device="cuda", dtype=dtype)
                        calls[f"{name}, no split"] = (lambda operand=operand, major=major, out=outputs[f"{name}, no split"]:
                                                      matmul(a, operand, b_major=major, out=out, splits=1))
                for variant in variants if aligned else []:
                    out = outputs[variant["name"]] = torch.empty(m, n, device="cuda", dtype=dtype)
                    module, operand = modules[variant["name"]], b if variant["b_major"] == "kn" else b_nk
                    calls[variant["name"]] = (lambda module=module, variant=variant, operand=operand, out=out:
                                              _launch(module, variant, a, operand, out, runtime, stream))
                anchor_out = torch.empty(m, n, device="cuda", dtype=dtype)
                anchors = {"cuBLAS": lambda: torch.matmul(a, b, out=anchor_out),
                           **{name: (lambda t=t: t(a, b, anchor_out)) for name, t in tritons.items()}}
                seconds, conditions = sustained_interleaved({**calls, **anchors})
                row = {"element": element, "shape": [m, n, k], "picked tile": "; ".join(picked), **conditions,
                       "relative_error": {name: ((out.float() - reference).abs() / (reference.abs() + k ** 0.5)).max().item()
                                          for name, out in outputs.items()},
                       "mlir-tile": {name: 2 * m * n * k / seconds[name] / 1e12 for name in calls},
                       **{name: 2 * m * n * k / seconds[name] / 1e12 for name in anchors}, "mma.sync peak": peak}
                row["best"] = max(row["mlir-tile"], key=row["mlir-tile"].get)
                print(json.dumps({"element": element, "shape": [m, n, k], "picked": row["picked tile"],
                                  **{name: round(row[name], 1) for name in anchors},
                                  "all": {k_: round(v, 1) for k_, v in row["mlir-tile"].items()},
                                  "worst error": max(row["relative_error"].values())}), flush=True)
                results.append(row)
    (directory / "gemm_results.json").write_text(json.dumps(results, indent=1))


def clocks(directory: Path) -> None:
    """The SM clock and the board's power while each workload runs back to back for SUSTAINED seconds
    (nvidia-smi sampled every 50 ms, the middle half of the samples): the pure mma.sync loop, Matmul's
    8192^3 fp16 and bf16 products, cuBLAS's and Triton's mma.sync path's; with each workload's TFLOP/s over
    the same window, so that a rate can be set against the clock it ran at."""
    import torch
    from fragment_loop import mma_sync_peak

    from mlir_tile.runtime import Runtime

    report = {}
    with Runtime() as runtime:
        report["mma.sync peak loop"] = clock_and_power(
            lambda: mma_sync_peak(runtime, directory, repeats=int(SUSTAINED / 1.8e-3)))
        matmul, triton_mma = gemm_launch.Matmul(library(runtime, directory / "variants")), _triton_matmul(mma_v3=False)
        size = 8192
        for dtype in (torch.float16, torch.bfloat16):
            a, b = (torch.randn(size, size, device="cuda", dtype=dtype) for _ in range(2))
            weight, c = b.T.contiguous(), torch.empty(size, size, device="cuda", dtype=dtype)
            for name, call in ((f"Matmul {dtype}", lambda: matmul(a, weight, b_major="nk", out=c)),
                               (f"cuBLAS {dtype}", lambda: torch.matmul(a, b, out=c)),
                               (f"Triton mma.sync {dtype}", lambda: triton_mma(a, b, c))):
                report[name] = clock_and_power(lambda: sustained_rate(call, 2 * size ** 3))
                print(json.dumps({name: report[name]}), flush=True)
    (directory / "gemm_clocks.json").write_text(json.dumps(report, indent=1))


def launch(directory: Path, name: str, m: int, n: int, k: int, shared_bytes: int | None = None) -> None:
    """One launch of variant `name` (fp16) on an m x n x k product: what `profile` runs under ncu; with
    `shared_bytes` (more than the variant needs) its CTAs run one an SM."""
    import torch

    from mlir_tile.runtime import Runtime

    variant = next(v for v in json.loads((directory / "gemm.json").read_text()) if v["name"] == name)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(*((k, n) if variant["b_major"] == "kn" else (n, k)), device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    with Runtime() as runtime:
        module = runtime.load_ptx((directory / f"gemm_f16_{name}.ptx").read_text(), name=name)
        _launch(module, variant, a, b, c, runtime, torch.cuda.current_stream(), shared_bytes)
        torch.cuda.synchronize()


def _launch(module, variant: dict, a, b, c, runtime, stream, shared_bytes: int | None = None) -> None:
    """C = A x B by a variant of gemm.json launched directly (B as the variant takes it): a CTA per C tile, or
    (persistent) one per SM at most."""
    (m, k), n = a.shape, c.shape[1]
    tiles = -(-m // variant["tile"][0]) * -(-n // variant["tile"][1])
    if variant["persistent"]:
        tiles = min(tiles, runtime.device.properties.multiprocessor_count)
    module.launch("gemm", [a, b, c, m, n // 8, k // 8], grid=tiles, block=variant["block"],
                  shared_bytes=shared_bytes or variant["shared_bytes"], stream=stream)


PROFILED = (4096, 4096, 4096)
ONE_A_SM = 120 * 1024  # dynamic shared memory that leaves room for no second CTA on an SM (228 KiB)


FIXED_DEPTHS = (1024, 2048, 4096, 8192)


def fixed(directory: Path) -> None:
    """What the K loop does not amortize: `Matmul` on TILES[0] (B [N, K]) and on its persistent kernel at M = N
    = PROFILED's, K = each of FIXED_DEPTHS, timed together (two rounds), a least-squares line of time against
    K: its intercept is the time a product spends filling and draining its CTAs' pipelines, whatever K is."""
    import torch

    from mlir_tile.runtime import Runtime

    (m, n, _), report = PROFILED, []
    with Runtime() as runtime:
        matmul = gemm_launch.Matmul(library(runtime, directory / "variants"))
        for dtype in (torch.float16, torch.bfloat16):
            calls, tiles = {}, (gemm_tiles.TILES[0], gemm_tiles.PERSISTENT)
            for depth in FIXED_DEPTHS:
                a = torch.randn(m, depth, device="cuda", dtype=dtype)
                b = torch.randn(n, depth, device="cuda", dtype=dtype)
                for tile in tiles:
                    calls[depth, gemm_tiles.tile_name(tile)] = lambda a=a, b=b, tile=tile: matmul(a, b, b_major="nk",
                                                                                               tile=tile)
            for round_ in range(2):
                measured = sustained_interleaved(calls)[0]
                for tile in map(gemm_tiles.tile_name, tiles):
                    times = {depth: t for (depth, name), t in measured.items() if name == tile}
                    mean_k, mean_t = sum(times) / len(times), sum(times.values()) / len(times)
                    slope = (sum((k - mean_k) * (t - mean_t) for k, t in times.items())
                             / sum((k - mean_k) ** 2 for k in times))
                    intercept = mean_t - slope * mean_k
                    report.append({"dtype": str(dtype), "round": round_, "tile": tile,
                                   "us": {k: round(t * 1e6, 1) for k, t in times.items()},
                                   "TFLOP/s": {k: round(2 * m * n * k / t / 1e12, 1) for k, t in times.items()},
                                   "fixed us": round(intercept * 1e6, 2),
                                   "fixed share": {k: round(intercept / t, 4) for k, t in times.items()}})
                    print(json.dumps(report[-1]), flush=True)
    (directory / "gemm_fixed.json").write_text(json.dumps(report, indent=1))


def profile(directory: Path) -> None:
    """ncu on one fp16 launch of each measured tile at PROFILED: its shared-memory instructions and wavefronts
    (every shared access of the kernel is a conflict-free 512-byte warp access by construction: ldmatrix.x4,
    16-byte cp.async writes, stmatrix.x4 and 16-byte reads of the C tile, so the model's minimum is 4
    wavefronts each), the pipes' busy shares and the stall reasons. A tile that runs two CTAs an SM is
    profiled once more alone on its SM (ONE_A_SM): the wavefronts and conflicts of its accesses meeting the
    other CTA's fall away."""
    report = []
    for variant in json.loads((directory / "gemm.json").read_text()):
        alone = [None] + [ONE_A_SM] * (variant["block"] == 128)  # 4 warps: two CTAs an SM (8 warps: one)
        for shared_bytes in alone:
            entry, = profile_launches([__file__, "launch", str(directory), variant["name"], *map(str, PROFILED),
                                       *([str(shared_bytes)] if shared_bytes else [])], "gemm", 1)
            report.append({"variant": variant["name"], "shape": PROFILED, "one CTA an SM": bool(shared_bytes), **entry})
            print(json.dumps(report[-1]), flush=True)
    (directory / "gemm_profile.json").write_text(json.dumps(report, indent=1))


def check(directory: Path) -> None:
    """C = A x B on CHECKED random shapes (sizes 1, primes, non-multiples of every tile extent, both B
    layouts, both dtypes) through the example's Matmul, against torch's fp32 product: |C - C32| <= 2^-7 |C32|
    + 2^-8 sqrt(K) (the output's rounding, bf16's 8 bits the coarser, and the fp32 accumulation order over
    K terms of unit variance); half of them on each of the example's TILES in turn (one in eight of all on
    the persistent tile, with B [N, K] and sizes it takes), half on `pick_tile`'s choice, one in eight of
    those with a split-K count given; then HOPPER_CHECKED shapes on Hopper's path (`_check_hopper`); and the
    documented errors."""
    import random

    import torch

    from mlir_tile.runtime import Runtime

    rng = random.Random(2026)
    special = [1, 2, 3, 7, 8, 13, 17, 31, 61, 127, 128, 129, 257, 1000, 1031, 4097]
    failures, count = [], 0
    with Runtime() as runtime:
        matmul = gemm_launch.Matmul(library(runtime, directory / "variants"))
        for trial in range(CHECKED):
            m, n, k = (rng.choice(special) if rng.random() < 0.4 else rng.randint(1, 1500) for _ in range(3))
            dtype = (torch.float16, torch.bfloat16)[trial % 2]
            major = ("kn", "nk")[(trial // 2) % 2]
            persistent = trial % 16 in (2, 3)  # B [N, K], both dtypes: sizes the persistent tile takes
            if persistent:
                m, n, k = max(m, 128), max(-(-n // 8) * 8, 256), max(-(-k // 8) * 8, 192)
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype) if major == "kn" else torch.randn(n, k, device="cuda", dtype=dtype)
            tile = gemm_tiles.TILES[trial // 4 % len(gemm_tiles.TILES)] if trial % 8 < 4 else None
            tile = gemm_tiles.PERSISTENT if persistent else tile
            splits = rng.choice([2, 3, 7, gemm_tiles.MAX_SPLITS]) if trial % 8 == 7 else None  # past K's k-tiles too
            c = matmul(a, b, b_major=major, tile=tile, splits=splits)
            reference = a.float() @ (b.float() if major == "kn" else b.float().T)
            bound = 2 ** -7 * reference.abs() + 2 ** -8 * k ** 0.5
            bad = ((c.float() - reference).abs() > bound).sum().item()
            count += 1
            if bad:
                failures.append({"shape": [m, n, k], "dtype": str(dtype), "b_major": major, "bad": bad})
        hopper_failures = _check_hopper(matmul, rng) if runtime.device.compute_capability == (9, 0) else None
        errors = []
        a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
        for what, call in (("float32 input", lambda: matmul(a.float(), a.float())),
                           ("mixed dtypes", lambda: matmul(a, a.bfloat16())),
                           ("transposed view", lambda: matmul(a, a.T)),
                           ("K mismatch", lambda: matmul(a, a[:32].contiguous())),
                           ("unknown tile", lambda: matmul(a, a, tile={"bm": 32})),
                           ("splits out of range", lambda: matmul(a, a, splits=gemm_tiles.MAX_SPLITS + 1)),
                           ("split-K on a tile other than the smallest", lambda: matmul(a, a, tile=gemm_tiles.TILES[0], splits=2)),
                           ("out of the wrong shape", lambda: matmul(a, a, out=a[:32].contiguous()))):
            try:
                call()
                errors.append(f"{what}: no error")
            except ValueError as error:
                print(f"{what}: ValueError: {error}")
    report = {"shapes": count, "failures": failures, "error paths without an error": errors,
              "Hopper's path": None if hopper_failures is None else {"shapes": HOPPER_CHECKED, "failures": hopper_failures}}
    print(json.dumps(report))
    (directory / "gemm_check.json").write_text(json.dumps(report, indent=1))


def _check_hopper(matmul, rng) -> list:
    """HOPPER_CHECKED random products on Hopper's path (sm_90; K not split: `splits=1`): M of any size (1,
    primes, past every tile), N and K multiples of 8 (TMA's 16-byte rows) from 8 up, both B layouts and
    dtypes, each checked as `check`'s against torch's fp32 product and against running elsewhere."""
    import torch

    special = [1, 2, 3, 7, 13, 61, 127, 128, 129, 257, 1000, 1031, 4097]
    failures = []
    for trial in range(HOPPER_CHECKED):
        m = rng.choice(special) if rng.random() < 0.4 else rng.randint(1, 1500)
        n, k = (8 * (rng.choice([1, 2, 9, 16, 17, 33, 127]) if rng.random() < 0.4 else rng.randint(1, 300)) for _ in range(2))
        dtype, major = (torch.float16, torch.bfloat16)[trial % 2], ("kn", "nk")[(trial // 2) % 2]
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(*((k, n) if major == "kn" else (n, k)), device="cuda", dtype=dtype)
        c = matmul(a, b, b_major=major, splits=1)
        reference = a.float() @ (b.float() if major == "kn" else b.float().T)
        bad = ((c.float() - reference).abs() > 2 ** -7 * reference.abs() + 2 ** -8 * k ** 0.5).sum().item()
        on_hopper = str(matmul.last_config).endswith("_sm90a")
        if bad or not on_hopper:
            failures.append({"shape": [m, n, k], "dtype": str(dtype), "b_major": major, "bad": bad,
                             "kernel": str(matmul.last_config)})
    print(json.dumps({"Hopper's path": HOPPER_CHECKED, "failures": failures[:10]}), flush=True)
    return failures


if __name__ == "__main__":
    command, directory = sys.argv[1], Path(sys.argv[2])
    if command == "launch":
        launch(directory, sys.argv[3], *map(int, sys.argv[4:]))
    elif command == "hopper-launch":
        hopper_launch(directory, *sys.argv[3:6])
    elif command == "hopper":
        hopper(directory, tuple(sys.argv[3:]) or ELEMENTS + ("e4m3",))
    else:
        {"build": build, "run": run, "check": check, "profile": profile, "clocks": clocks, "sass": sass,
         "fixed": fixed, "hopper-build": hopper_build, "hopper": hopper, "hopper-profile": hopper_profile,
         "hopper-table": hopper_table, "hopper-fused": hopper_fused}[command](directory)
