"""The command line of mlir_tile.kernels.gemm and mlir_tile.kernels.attention (kernels/command_line.py) without a GPU: options
choose the kernel, --ptx-out records them in the PTX's first line, --run-ptx takes them from there and refuses
one that contradicts them; what the kernels do not take is a usage error (exit status 2), never a traceback."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def example(name, *arguments):
    """`python -m mlir_tile.kernels.NAME` (gemm.py: gemm, attention.py: attention) with these arguments."""
    return subprocess.run([sys.executable, "-m", f"mlir_tile.kernels.{name.removesuffix('.py')}",
                           *map(str, arguments)], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("name, options, recorded, entry", [
    ("gemm.py", ["--dtype", "bf16", "--b-major", "nk", "--tile", "128x256x64s4"],
     {"dtype": "bf16", "b_major": "nk", "align": 16, "tile": "128x256x64s4", "arch": "sm_90"}, "gemm"),
    ("gemm.py", ["--dtype", "bf16", "--b-major", "nk", "--tile", "128x256x64s4p"],
     {"dtype": "bf16", "b_major": "nk", "align": 16, "tile": "128x256x64s4p", "arch": "sm_90"}, "gemm"),
    ("attention.py", ["--dtype", "bf16", "--head-dim", "128", "--causal", "--tuned"],
     {"dtype": "bf16", "head_dim": 128, "causal": True, "tuned": True, "arch": "sm_80"}, "attention"),
])
def test_ptx_out_writes_the_kernel_of_the_options_with_them(tmp_path, filecheck, name, options, recorded, entry):
    """The build half of the GPU tests that run these files through --run-ptx (test_runtime_gpu.py, on what
    test/gpu_inputs.py builds the same way): the options in the first line, then the kernel for them."""
    ran = example(name, "--ptx-out", tmp_path / "k.ptx", *options)
    assert ran.returncode == 0, ran.stderr
    filecheck((tmp_path / "k.ptx").read_text(), f"""
    CHECK: // mlir-tile example built with: {json.dumps(recorded)}
    CHECK-NEXT: //
    CHECK: .target sm_90
    CHECK: .visible .entry {entry}(
    CHECK: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
    CHECK-NOT: .local
    """)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """PTX files that record build options (what --ptx-out writes first) and hold no kernel: what --run-ptx
    reads before it would launch anything."""
    from mlir_tile.kernels.command_line import with_build_options

    folder = tmp_path_factory.mktemp("recorded")
    for name, build in {"gemm_bf16_nk.ptx": {"dtype": "bf16", "b_major": "nk", "align": 16, "tile": "128x256x64s4",
                                             "arch": "sm_90"},
                        "gemm_bf16_nk_persistent.ptx": {"dtype": "bf16", "b_major": "nk", "align": 16,
                                                        "tile": "128x256x64s4p", "arch": "sm_90"},
                        "attention_bf16_d128_causal.ptx": {"dtype": "bf16", "head_dim": 128, "causal": True,
                                                           "tuned": True},
                        "attention.ptx": {"dtype": "f16", "head_dim": 64, "causal": False, "tuned": False}}.items():
        (folder / name).write_text(with_build_options("// no kernel\n", build))
    return folder


@pytest.mark.parametrize("name, arguments, said", [
    ("gemm.py", ["--run-ptx", Path("gemm_bf16_nk.ptx"), "--dtype", "f16"], "built with --dtype bf16, not f16"),
    ("gemm.py", ["--run-ptx", Path("gemm_bf16_nk.ptx"), "--b-major", "kn"], "built with --b-major nk, not kn"),
    ("attention.py", ["--run-ptx", Path("attention_bf16_d128_causal.ptx"), "--head-dim", "64"],
     "built with --head-dim 128, not 64"),
    ("gemm.py", ["--run-ptx", Path("gemm_bf16_nk.ptx"), "--shape", 100, 101, 64], "multiples of 8, not 100 x 101 x 64"),
    ("gemm.py", ["--run-ptx", Path("gemm_bf16_nk.ptx"), "--shape", 0, 8, 8], "M, N, K >= 1"),
    ("gemm.py", ["--run-ptx", Path("gemm_bf16_nk_persistent.ptx"), "--shape", 100, 1016, 64],
     "persistent tile takes M >= 128, N >= 256 and K >= 192, not 100 x 1016 x 64"),
    ("gemm.py", ["--emulate", "--tile", "128x256x64s4p"], "no variant of tile '128x256x64s4p' for B kn and rows on 16 bytes"),
    ("attention.py", ["--run-ptx", Path("attention.ptx"), "--seq", 0], "seq >= 1, got 1, 3, 0"),
    ("gemm.py", ["--emulate", "--tile", "64x64x32s4"], "no variant of tile '64x64x32s4' for B kn and rows on 16 bytes"),
    ("gemm.py", ["--emulate", "--tile", "256x256x64s2"], "these are: 128x256x64s4, 128x256x128s2, 128x128x32s4"),
    ("gemm.py", ["--run-ptx", "no-such.ptx"], "No such file or directory: 'no-such.ptx'"),
    ("attention.py", ["--head-dim", "96"], "argument --head-dim: invalid choice: 96"),
])
def test_what_the_kernels_do_not_take_is_a_usage_error(recorded, name, arguments, said):
    ran = example(name, *[recorded / argument.name if isinstance(argument, Path) else argument for argument in arguments])
    assert ran.returncode == 2 and said in ran.stderr and "Traceback" not in ran.stderr, ran.stderr


@pytest.mark.parametrize("name, options, said", [
    ("gemm.py", ["--dtype", "bf16", "--b-major", "nk", "--align", "2"],
     "a 128 x 128 x 64 bf16 CTA (128x128x32_w2x2_s4_g8_p_nk_a2)"),
    ("gemm.py", ["--tile", "128x256x128s2"], "a 128 x 256 x 128 f16 CTA (128x256x128_w2x4_s2_g8_p_kn_a16)"),
    ("attention.py", ["--dtype", "bf16", "--causal", "--seq", "70"], "one 128-row bf16 CTA, 70 positions causal"),
])
def test_emulate_checks_the_kernel_of_the_options(name, options, said):
    ran = example(name, "--emulate", *options)
    assert ran.returncode == 0 and said in ran.stdout and "matches numpy" in ran.stdout, ran.stdout + ran.stderr
