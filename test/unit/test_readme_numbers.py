"""Every number and name the README states is checked: its measured numbers are the ranges of the kept runs
(benchmarks/results/*.json, which RESULTS.md renders) or, for the runs kept only as a record, the same numbers
docs/measured.md gives with their commands and dates; each file and module it names exists. A README that
drifts from its measurements fails here."""
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
RESULTS = REPO / "benchmarks" / "results"


def _kept(name: str):
    return json.loads((RESULTS / f"{name}.json").read_text())


def _range(values, suffix: str = "x") -> str:
    return f"{min(values):.2f}-{max(values):.2f}{suffix}"


def _ops(case_prefix: str, anchor: str) -> list:
    return [case["operator vs"][anchor] for case in _kept("ops")["cases"]
            if case["case"].startswith(case_prefix) and anchor in case["operator vs"]]


def _claims() -> dict:
    """README text -> where it comes from, each computed from the kept runs."""
    attention = _kept("attention_hopper")
    vs_cudnn = [row["vs cuDNN"] for row in attention if row["d"] in (64, 128) and "vs cuDNN" in row]
    fp8 = _kept("attention_hopper_fp8")
    fused = _kept("gemm_fused_hopper")["shapes"]
    sixteen = [row["vs cuBLAS"] for name in ("f16_nk", "bf16_nk", "f16_kn")
               for row in _kept(f"gemm_hopper_{name}")["shapes"]]
    eight = [row["vs cuBLASLt fp8"] for row in _kept("gemm_hopper_e4m3")["shapes"] if "vs cuBLASLt fp8" in row]
    loops = _kept("wgmma_loop")
    large = [v for case in _kept("ops")["cases"] if case["case"].startswith("linear") and "2048x2048" not in case["case"]
             for v in [case["operator vs"]["cuBLAS"]]]
    small = {case["case"]: case["operator vs cuBLAS"] for case in _kept("ops_small")["cases"]}
    decode = [v for name, v in small.items() if int(name.split()[1].split("x")[0]) <= 128]
    middle = [v for name, v in small.items() if name.split()[1] in ("2048x2048x2048", "512x4096x4096", "1024x4096x4096")]
    window = _kept("attention_window")
    at_4096 = next(row for row in window if (row["batch"], row["heads"], row["seq"], row["d"]) == (4, 32, 4096, 128))
    width = re.search(r"^WINDOW = (\d+)$", (REPO / "examples" / "sliding_window.py").read_text(), re.M).group(1)
    step, packed_step = _kept("training_step"), _kept("training_step_varlen")
    backward, varlen = _kept("ops_backward")["cases"], _kept("ops_varlen")["cases"][0]
    gradients = max(step["first step's gradients, relative error"].values())
    return {
        f"{step['ours vs torch']:.2f}x torch's step (F.linear, SDPA); loss within "
        f"{step['largest relative loss difference']:.1e}, each gradient within {gradients:.4f}": "training_step",
        f"a packed batch of 8 sequences (`--varlen`, 8,192 tokens, `attention_varlen`) "
        f"{packed_step['ours vs torch']:.2f}x torch's": "training_step_varlen",
        f"{_range([c['ours vs']['cuDNN'] for c in backward if 'cuDNN' in c['ours vs']])} cuDNN's, "
        f"{_range([c['ours vs']['FlashAttention-2'] for c in backward if 'FlashAttention-2' in c['ours vs']])} "
        f"FlashAttention-2's; deterministic "
        f"{_range([1 / c['ours vs']['ours deterministic'] for c in backward], 'x')} of it": "ops_backward",
        f"forward {varlen['ours vs']['cuDNN padded']:.2f}x cuDNN on the sequences padded to 1,100 "
        f"({varlen['TFLOP/s']['ours']:.0f} TFLOP/s": "ops_varlen: forward",
        f"backward {varlen['ours vs']['cuDNN padded backward']:.2f}x cuDNN padded "
        f"({varlen['TFLOP/s']['ours backward']:.0f} TFLOP/s, {varlen['ms']['ours backward']:.3f} ms": "ops_varlen: backward",
        f"a causal window of {width} keys": "examples/sliding_window.py's WINDOW",
        f"{_range([row['window vs FlexAttention'] for row in window])} FlexAttention's sliding window "
        f"({at_4096['ours, window, ms']:.3f} ms at 4x32x4096x128": "attention_window",
        f"{_range([row['window vs our causal'] for row in window])} our full causal": "attention_window",
        f"{_range(large)} cuBLAS": "ops: linear at the large shapes, the operator over cuBLAS",
        f"{_range([v for v in _ops('linear', 'launcher') if v >= 1])} the launcher": "ops: the operator over its launcher",
        f"{_ops('linear 2048x2048x2048', 'cuBLAS')[0]:.2f}x cuBLAS in RESULTS.md's run": "ops: 2048^3",
        f"1024x4096² {_range(middle)} cuBLAS": "ops_small: 2048^3, 512 and 1024 x 4096^2",
        f"decode shapes (M 1-128) {_range(decode)} cuBLAS": "ops_small: M <= 128",
        f"{_range([r['vs cuBLAS+torch'] for r in fused if r['activation'] == 'gelu_tanh'])} (gelu_tanh)": "fused",
        f"{_range([r['vs cuBLAS+torch'] for r in fused if r['activation'] == 'silu'])} (silu)": "fused",
        f"{_range([r['vs cuBLAS alone'] for r in fused])} cuBLAS's product without the epilogue": "fused",
        f"the operator {_range(_ops('attention', 'cuDNN'))} cuDNN": "ops: attention",
        f"the kernels {_range(vs_cudnn)} cuDNN on {len(vs_cudnn)} cases (1.1x or more on "
        f"{sum(v >= 1.1 for v in vs_cudnn)})": "attention_hopper",
        f"d 256 {_range([row['vs cuDNN'] for row in attention if row['d'] == 256])}": "attention_hopper",
        f"{_range([row['hopper'] / row['flash (FA2)'] for row in attention if row.get('flash (FA2)')])} torch's "
        "FlashAttention-2": "attention_hopper",
        f"{_range([row['e4m3 / f16'] for row in fp8])} our f16 ({min(r['e4m3'] for r in fp8 if r['seq'] >= 4096):.0f}-"
        f"{max(r['e4m3'] for r in fp8 if r['seq'] >= 4096):.0f} TFLOP/s at S >= 4096)": "attention_hopper_fp8",
        f"RMSE {min(r['rmse e4m3'] for r in fp8 if 'rmse e4m3' in r) * 100:.1f}-"
        f"{max(r['rmse e4m3'] for r in fp8 if 'rmse e4m3' in r) * 100:.1f}e-2": "attention_hopper_fp8",
        f"{_range([row['e4m3'] / row['cuDNN'] for row in fp8])} cuDNN's f16": "attention_hopper_fp8",
        f"{_range(sixteen)} cuBLAS (f16, bf16), fp8 {_range(eight)} cuBLASLt": "gemm_hopper_*",
        f"wgmma f16 {loops['wgmma f16 burst']['TFLOP/s']:.0f} TFLOP/s at {loops['wgmma f16 burst']['SM MHz']:.0f} MHz, "
        f"{loops['wgmma f16 sustained']['TFLOP/s']:.0f} sustained; e4m3 {loops['wgmma e4m3 burst']['TFLOP/s']:.0f} and "
        f"{loops['wgmma e4m3 sustained']['TFLOP/s']:.0f}; mma.sync "
        f"{loops['mma.sync loop (best of 3 x 20 launches)']['TFLOP/s']:.0f}": "wgmma_loop",
    }


@pytest.mark.parametrize("claim, source", list(_claims().items()), ids=list(_claims().values()))
def test_each_measured_number_is_the_kept_runs(claim, source):
    assert claim in README, f"the README should say {claim!r} ({source})"


def _record_rows() -> list:
    """The second table's rows: (what, result)."""
    section = README[README.index("| what | result"):]
    return [tuple(cell.strip() for cell in line.strip("|").split("|"))
            for line in section.splitlines()[2:] if line.startswith("|")]


def test_each_number_of_the_record_table_is_docs_measured_mds():
    """The rows measured before the runs were kept: each number the README gives (ranges, counts, ratios) is
    one docs/measured.md gives for that row, with its command and date."""
    measured = (REPO / "docs" / "measured.md").read_text()
    missing = [(what, number) for what, result in _record_rows()
               for number in re.findall(r"\d[\d,.]*(?:-\d[\d.]*)?(?:x|%| us| TFLOP/s)?", result)
               if number not in measured]
    assert not missing, missing


def test_each_file_and_module_the_readme_names_exists():
    named = set(re.findall(r"`((?:python/mlir_tile/|kernels/|benchmarks/|examples/|docs/|test/)[\w/.-]+\.(?:py|md|json))`",
                           README))
    named |= set(re.findall(r"\]\(((?:docs|benchmarks)/[\w/.-]+\.md)\)", README))
    assert named, "the README names no file?"
    where = [REPO, REPO / "python" / "mlir_tile"]
    absent = [name for name in named if not any((root / name).exists() for root in where)]
    assert not absent, absent


def test_every_number_of_the_kernels_table_is_checked():
    """The first table's numbers: each is in a claim computed from the kept runs above, or one docs/measured.md
    gives for that row (the runs kept only as a record)."""
    section = README[README.index("| kernel | against what users have"):README.index("| what | result")]
    measured, claims = (REPO / "docs" / "measured.md").read_text(), " ".join(_claims())
    section = re.sub(r"\d+(?:x\d+)+|\d{4}-\d\d-\d\d", "", section)  # (shapes and dates name cases, not results)
    numbers = re.findall(r"(?<![\w.])\d[\d,.]*(?:-\d[\d.]*)?(?:x|%| us| ms| TFLOP/s)?", section)
    unchecked = [number for number in numbers if number not in claims and number not in measured]
    assert not unchecked, unchecked
