"""The PTX that test/unit/test_runtime_gpu.py runs on a GPU host (which has no MLIR), built here from the
examples as their `--ptx-out` writes it:

    python test/gpu_inputs.py build/gpu-inputs        # `make gpu-inputs`

Carry build/gpu-inputs to the GPU host; the GPU tests read it there (or the folder MLIR_TILE_GPU_INPUTS
names), and skip, saying so, where it was not built. Nothing of it is checked in: the build half of each GPU
test checks the PTX's structure where it is compiled (test_compile.py, test_kernels_command_line.py).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

KERNELS = ("gemm.py", "attention.py")  # the library's kernels: `python -m mlir_tile.kernels.gemm`, ...
# file name: the example (or kernel) and its options (the options are recorded in the PTX's first line)
def _hopper(b_major: str, dtype: str = "f16", **fields) -> list[str]:
    """The command line of a Hopper GEMM input (gemm.py --arch sm_90a): HopperConfig's `fields` over the
    element's tile, as options."""
    options = [f"--{name.replace('_', '-')}" if value is True else f"--no-{name.replace('_', '-')}" if value is False
               else [f"--{name.replace('_', '-')}", str(value)] for name, value in fields.items()]
    flat = [part for option in options for part in ([option] if isinstance(option, str) else option)]
    return ["gemm.py", "--arch", "sm_90a"] + (["--dtype", dtype] if dtype != "f16" else []) + ["--b-major", b_major] + flat


BY_COMMAND_LINE = {
    "spec_example.ptx": ["seed_example.py"],
    "dynamic_shared.ptx": ["dynamic_shared.py"],
    "mma_tile.ptx": ["mma_tile.py"],
    "mma_s8.ptx": ["mma_s8.py"],
    "gemm.ptx": ["gemm.py"],
    "gemm_bf16_nk.ptx": ["gemm.py", "--dtype", "bf16", "--b-major", "nk", "--tile", "128x256x64s4"],
    "gemm_bf16_nk_persistent.ptx": ["gemm.py", "--dtype", "bf16", "--b-major", "nk", "--tile", "128x256x64s4p"],
    "gemm_hopper.ptx": _hopper("nk"),
    "gemm_hopper_bf16_kn.ptx": _hopper("kn", "bf16", bn=256, stages=3),
    "gemm_hopper_persistent.ptx": _hopper("nk", bn=256, stages=3, persistent=True),
    "gemm_hopper_cluster.ptx": _hopper("nk", bn=256, stages=3, cluster=2),
    "gemm_hopper_bf16_kn_cluster.ptx": _hopper("kn", "bf16", bn=64, cluster=2),
    "gemm_hopper_persistent_cluster.ptx": _hopper("nk", bn=256, stages=3, persistent=True, cluster=2),
    "gemm_hopper_wide.ptx": _hopper("nk", bm=256, consumer_rows=128),
    "gemm_hopper_bf16_kn_wide.ptx": _hopper("kn", "bf16", bm=256, consumer_rows=128),
    "gemm_hopper_pingpong.ptx": _hopper("nk", consumer_rows=128, persistent=True, pingpong=True),
    "gemm_hopper_split.ptx": _hopper("nk", split_k=True),
    "gemm_hopper_bf16_kn_wide_split.ptx": _hopper("kn", "bf16", bm=256, consumer_rows=128, split_k=True),
    "gemm_hopper_e4m3.ptx": _hopper("nk", "e4m3"),
    "gemm_hopper_e4m3_kn.ptx": _hopper("kn", "e4m3"),
    "gemm_hopper_e4m3_promote.ptx": _hopper("nk", "e4m3", bn=128, promote=True),
    "gemm_hopper_bf16_swiglu.ptx": _hopper("nk", "bf16", bn=256, stages=3, swiglu=True),
    "gemm_hopper_bf16_decode_a16.ptx": _hopper("nk", "bf16", bm=64, bn=64, stages=8, a_rows=16),
    "gemm_hopper_bf16_grouped.ptx": _hopper("nk", "bf16", bn=128, stages=4, grouped=True),
    "gemm_hopper_e4m3_blockscales.ptx": _hopper("nk", "e4m3", bn=128, promote=True, block_scales=True),
    "gemm_hopper_e4m3_paired.ptx": _hopper("nk", "e4m3", bn=128, promote=True, paired=True),
    "gemm_hopper_e4m3_rowblocks.ptx": _hopper("nk", "e4m3", bn=128, promote=True, block_scales=True, row_blocks=True),
    "attention.ptx": ["attention.py"],
    "attention_bf16_d128_causal.ptx": ["attention.py", "--dtype", "bf16", "--head-dim", "128", "--causal", "--tuned"],
    "attention_hopper_d128.ptx": ["attention.py", "--arch", "sm_90a", "--head-dim", "128"],
    "attention_hopper_bf16_d128_causal.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "bf16", "--head-dim", "128",
                                              "--causal"],
    "attention_hopper_bf16_d64.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "bf16"],
    "attention_hopper_d64_causal.ptx": ["attention.py", "--arch", "sm_90a", "--causal"],
    "attention_hopper_d256.ptx": ["attention.py", "--arch", "sm_90a", "--head-dim", "256"],
    "attention_hopper_bf16_d256_causal.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "bf16", "--head-dim", "256",
                                              "--causal"],
    "attention_hopper_e4m3_d128.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "e4m3", "--head-dim", "128"],
    "attention_hopper_e4m3_d128_causal.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "e4m3", "--head-dim", "128",
                                              "--causal"],
    "attention_hopper_d128_persistent.ptx": ["attention.py", "--arch", "sm_90a", "--head-dim", "128", "--persistent",
                                             "--pingpong"],
    "attention_hopper_bf16_d128_pingpong.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "bf16", "--head-dim", "128",
                                                "--pingpong", "--no-persistent"],
    "attention_hopper_bf16_d64_persistent.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "bf16", "--persistent"],
    "attention_hopper_d64_two_consumers.ptx": ["attention.py", "--arch", "sm_90a", "--consumers", "2", "--keys", "128",
                                               "--persistent", "--no-uniform-q"],
    "attention_hopper_d128_causal_launched.ptx": ["attention.py", "--arch", "sm_90a", "--head-dim", "128", "--causal",
                                                  "--no-persistent"],
    "attention_hopper_d64_causal_persistent.ptx": ["attention.py", "--arch", "sm_90a", "--causal", "--consumers", "1",
                                                   "--keys", "64", "--persistent"],
    "attention_hopper_d64_causal_three_ctas.ptx": ["attention.py", "--arch", "sm_90a", "--causal", "--consumers", "1",
                                                   "--keys", "64", "--ctas-per-sm", "3"],
    "attention_hopper_bf16_d64_causal_two_ctas_walk.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "bf16",
                                                           "--causal", "--consumers", "1", "--keys", "64", "--ctas-per-sm", "2", "--persistent"],
    "attention_hopper_bf16_d64_causal_lazy.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "bf16", "--causal",
                                                  "--lazy-rescale"],
    "attention_hopper_e4m3_d128_launched.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "e4m3", "--head-dim",
                                                "128", "--no-persistent", "--no-lazy-rescale"],
    "attention_hopper_e4m3_d128_pingpong.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "e4m3", "--head-dim",
                                                "128", "--pingpong"],
    "attention_hopper_e4m3_d128_o_in_stage.ptx": ["attention.py", "--arch", "sm_90a", "--dtype", "e4m3", "--head-dim",
                                                  "128", "--stages", "5"],
}


def _split_k(folder: Path) -> None:
    """The split-K kernel and its reduction, which no example's command line builds."""
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.gemm import sm80 as gemm_sm80, sm80_tiles as gemm_tiles

    (folder / "gemm_split.ptx").write_text(compile_to_ptx(gemm_sm80.build_module("f16", gemm_tiles.SPLIT_CHECKED)))
    (folder / "gemm_reduce.ptx").write_text(compile_to_ptx(gemm_sm80.build_reduce_module("f16")))


def build(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)

    def run(item):
        name, (example, *options) = item
        command = (["-m", f"mlir_tile.kernels.{example.removesuffix('.py')}"] if example in KERNELS
                   else [str(REPO / "examples" / example)])
        return name, subprocess.run([sys.executable, *command, "--ptx-out", str(folder / name), *options],
                                    capture_output=True, text=True)

    with ThreadPoolExecutor() as pool:
        ran = list(pool.map(run, BY_COMMAND_LINE.items()))
    failed = [f"{name}: {result.stderr.strip()[-2000:]}" for name, result in ran if result.returncode]
    if failed:
        raise SystemExit("\n".join(failed))
    _split_k(folder)
    _user_epilogue(folder)
    from mlir_tile.testing import tma_boxes, wgmma_operands
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.gemm import sm90 as gemm_sm90, sm90_tiles as hopper_tiles

    for major, suffix in (("nk", ""), ("kn", "_kn")):  # (no command-line option)
        rows = hopper_tiles.hopper_config(major, hopper_tiles.FP8_ROWS_TILE, "e4m3", row_scales=True)
        (folder / f"gemm_hopper_e4m3{suffix}_rows.ptx").write_text(compile_to_ptx(gemm_sm90.build_module("e4m3", rows)))

    tma_boxes.build(folder / "tma")  # TMA's box writes, each swizzle mode (sm_90a)
    wgmma_operands.build(folder / "wgmma", seed=39, layouts=150)  # wgmma's descriptors and operand tiles


def _user_epilogue(folder: Path) -> None:
    """The kernels of the epilogue test_kernels_ops_gpu.py writes itself (`bias.then(gelu_tanh)`, bf16, every
    sm_90 tile and Hopper kernel), which the GPU host, having no compiler, cannot build on first use: into `kernels/` as the
    cache of these sources lays them out (the test points MLIR_TILE_CACHE_DIR at `folder`)."""
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.gemm import launch as gemm_launch, sm80 as gemm_sm80, sm80_tiles as gemm_tiles
    from mlir_tile.kernels.epilogues import bias, gelu_tanh
    from mlir_tile.kernels.library import source_digest
    from mlir_tile.testing import attention_variants

    epilogue, chip = bias.then(gelu_tanh), "sm_90"
    shutil.rmtree(folder / "kernels", ignore_errors=True)  # (earlier sources' kernels: never read, and they weigh)
    kernels = folder / "kernels" / source_digest() / chip
    kernels.mkdir(parents=True, exist_ok=True)
    for config in gemm_tiles.variants_for(chip, epilogue):
        (kernels / f"{gemm_sm80.kernel_name('bf16', config, epilogue)}.ptx").write_text(
            compile_to_ptx(gemm_sm80.build_module("bf16", config, chip, epilogue=epilogue)))
    for name, build in gemm_launch.hopper_shipped_kernels([epilogue]):  # Matmul's Hopper path on sm_90
        if "_bf16_" in name:
            (kernels / f"{name}.ptx").write_text(compile_to_ptx(build()))
    (kernels / f"{gemm_sm80.reduce_name('bf16', epilogue)}.ptx").write_text(
        compile_to_ptx(gemm_sm80.build_reduce_module("bf16", chip, epilogue=epilogue)))
    attention_variants.build(kernels)  # (test_attention_variants_gpu.py's and examples/sliding_window.py's)


if __name__ == "__main__":
    build(Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "build" / "gpu-inputs"))
