"""benchmarks/RESULTS.md, generated from the JSON the benchmarks write (never edited by hand):

    python benchmarks/results.py benchmarks/results        # RESULTS.md from benchmarks/results/*.json

benchmarks/results/ holds the JSON of the last runs that the README quotes (copied from the DIR a GPU run
wrote); test/unit/test_benchmarks.py checks that RESULTS.md is this rendering of it. The record of earlier
measuring and probing runs is docs/notes/benchmark-history.md.
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

SUSTAINED = ("every call of a case launched back to back on one stream with no synchronization or pause, after 2 s "
             "of the same (the clock the chip holds under the load), then 15 rounds of the calls taking turns, each "
             "turn about 25 ms of launches (`torch_timing.sustained_interleaved`); TFLOP/s are the medians of the "
             "turns, the SM clock and board power nvidia-smi's over the rounds")
HOW = {"ops": "`python3 benchmarks/ops.py DIR` on the GPU host (the package's shipped kernels, no MLIR there): "
              + SUSTAINED + "; `vs` our operator's rate over the other's (above 1: ours is faster)."}


def render_ops(data: dict) -> list[str]:
    others = list(dict.fromkeys(k for case in data["cases"] for k in case["operator vs"]))
    lines = [f"## mlir_tile.kernels operators ({data['device']}, torch {data['torch']}, {data['date']})", "",
             HOW["ops"], "",
             "| case | ours, TFLOP/s | " + " | ".join(f"vs {o}" for o in others) + " | SM MHz | W |",
             "|---|---|" + "---|" * len(others) + "---|---|"]
    for case in data["cases"]:
        ratios = [f"{case['operator vs'][o]:.3f}" if o in case["operator vs"] else "" for o in others]
        lines.append(f"| {case['case']} | {case['sustained TFLOP/s']['operator']} | " + " | ".join(ratios)
                     + f" | {case['SM MHz']:.0f} | {case['W']:.0f} |")
    return lines


HOW["wgmma_loop"] = ("`python benchmarks/wgmma_loop.py build DIR` here, `python3 benchmarks/wgmma_loop.py run DIR` on the "
                     "GPU host: the pure instruction loops on every SM (two warpgroups a block, 4 x m64n256 a batch, "
                     "no waits inside the loop; the mma.sync loop of benchmarks/fragment_loop.py), in a first burst from "
                     "the chip as the run found it (the boost clock) and then launched back to back for 3 s (the clock "
                     "the chip holds); TFLOP/s the median launch's, the SM clock and power nvidia-smi's medians.")


def render_wgmma_loop(data: dict) -> list[str]:
    lines = [f"## The ceiling: pure wgmma and mma.sync loops ({data['date']})", "", HOW["wgmma_loop"], "",
             "| loop | TFLOP/s | SM MHz | W |", "|---|---|---|---|"]
    for name, row in data.items():
        if isinstance(row, dict):
            lines.append(f"| {name} | {row['TFLOP/s']} | {row['SM MHz']:.0f} | {row['W']:.0f} |")
    return lines


HOW["gemm_hopper"] = ("`python benchmarks/gemm.py hopper-build DIR` here, `python3 benchmarks/gemm.py hopper DIR f16 nk` "
                      "(and `bf16 nk`, `e4m3`, `f16 kn`) on the GPU host: every Hopper tile beside cuBLAS (torch.mm), "
                      "Triton's tutorial matmul (grouped order, its autotuner, wgmma) and for e4m3 cuBLASLt "
                      "(torch._scaled_mm; with B [K, N] after a transposed copy), " + SUSTAINED
                      + "; the best of our tiles and its rate over each anchor's.")


def render_gemm_hopper(runs: list) -> list[str]:
    lines = ["## The Hopper GEMM against cuBLAS, cuBLASLt and Triton (NVIDIA H200)", "", HOW["gemm_hopper"], "",
             "| dtype | B | M x N x K | our best tile | TFLOP/s | vs the anchors | SM MHz | W |",
             "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        for row in run["shapes"]:
            anchors = ", ".join(f"{k[3:]} {v:.3f}" for k, v in row.items() if k.startswith("vs "))
            shape = "x".join(map(str, row["shape"]))
            lines.append(f"| {row['element']} | {row['b_major']} | {shape} | {row['best']} | "
                         f"{row['TFLOP/s'][row['best']]} | {anchors} | {row['SM MHz']:.0f} | {row['W']:.0f} |")
    return lines


SHUFFLED = (", each round's calls in a shuffled order (a fixed order, each call always after the same one, had "
            "favoured the call after a lighter one by up to 12%)")
HOW["attention_hopper"] = ("`python benchmarks/attention.py hopper-build DIR` here, `python3 benchmarks/attention.py "
                           "hopper DIR` on the GPU host: each of our Hopper attention kernels (HOPPER_SHAPES) beside "
                           "torch's FlashAttention-2 and cuDNN SDPA backends, batch x seq = 16k tokens, heads x d = 2048, "
                           "TFLOP/s = 4 batch heads seq^2 d, halved for causal, " + SUSTAINED + SHUFFLED + "; ours the "
                           "best kernel, its name beside it (in a run that did not record the names: its fields over "
                           "the defaults of its head dim and mask, the library's table at the commit that measured it).")


def render_attention_hopper(rows: list) -> list[str]:
    lines = ["## Attention on Hopper's path against cuDNN and FlashAttention-2 (NVIDIA H200)", "",
             HOW["attention_hopper"], "",
             "| dtype | d | seq | causal | ours, TFLOP/s | our kernel | cuDNN | FA2 | vs cuDNN | SM MHz | W |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        best = max((name for name in row if name.startswith("hopper ")), key=row.get)
        kernel = row["kernels"][best] if "kernels" in row else best.removeprefix("hopper ")  # (earlier runs: fields)
        lines.append(f"| {row['element']} | {row['d']} | {row['seq']} | {'yes' if row['causal'] else 'no'} | "
                     f"{row['hopper']} | {kernel} | {row.get('cuDNN', '')} | {row.get('flash (FA2)', '')} | "
                     f"{row.get('vs cuDNN', '')} | {row['SM MHz']:.0f} | {row['W']:.0f} |")
    return lines


HOW["attention_hopper_fp8"] = ("`python3 benchmarks/attention.py hopper-fp8 DIR` on the GPU host: our e4m3 kernel "
                               "(per-tensor descales) beside our f16 kernel and cuDNN's f16 backend at d 128, 16 heads, "
                               "TFLOP/s as above, " + SUSTAINED + SHUFFLED + "; RMSE of O against fp32 attention on "
                               "FlashAttention-3's test inputs (N(0, 1), 0.1% of entries N(0, 10)), [1, 8, 4096, 128].")


def render_attention_hopper_fp8(rows: list) -> list[str]:
    lines = ["## fp8 (e4m3) attention on Hopper's path (NVIDIA H200)", "", HOW["attention_hopper_fp8"], "",
             "| seq | causal | e4m3, TFLOP/s | f16 | cuDNN f16 | e4m3 / f16 | RMSE e4m3 | RMSE f16 | SM MHz | W |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        rmse = [f"{row[key]:.1e}" if key in row else "" for key in ("rmse e4m3", "rmse f16")]
        lines.append(f"| {row['seq']} | {'yes' if row['causal'] else 'no'} | {row['e4m3']} | {row['f16']} | "
                     f"{row.get('cuDNN', '')} | {row['e4m3 / f16']} | {rmse[0]} | {rmse[1]} | {row['SM MHz']:.0f} | "
                     f"{row['W']:.0f} |")
    return lines


HOW["attention_window"] = ("`python benchmarks/attention_window.py build DIR` here, `python3 "
                            "benchmarks/attention_window.py run DIR` on the GPU host: examples/sliding_window.py's "
                            "variant (causal, a window of 1024 keys, bf16) beside FlexAttention's (torch.compile'd, "
                            "its block mask made once) and the full causal attention of ours and cuDNN's; times in ms, "
                            + SUSTAINED + "; `vs` their time over ours.")


def render_attention_window(rows: list) -> list[str]:
    lines = ["## Sliding-window attention on the extension points (NVIDIA H100)", "", HOW["attention_window"], "",
             "| batch x heads x seq x d | ours, window | FlexAttention, window | vs FlexAttention | ours, causal | "
             "cuDNN, causal | largest difference | SM MHz | W |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(_row(f"{row['batch']}x{row['heads']}x{row['seq']}x{row['d']}", row["ours, window, ms"],
                          row["FlexAttention, window, ms"], row["window vs FlexAttention"], row["ours, causal, ms"],
                          row["cuDNN, causal, ms"], row["largest difference from FlexAttention"],
                          f"{row['SM MHz']:.0f}", f"{row['W']:.0f}"))
    return lines


def _row(*cells) -> str:
    """A markdown table row of `cells`."""
    return "| " + " | ".join(map(str, cells)) + " |"


def render_ops_small(data: dict) -> list[str]:
    lines = [f"## Small products through the operator ({data['device']}, torch {data['torch']}, {data['date']})", "",
             f"`{data['command']}` on the GPU host: wall us a call " + SUSTAINED.split("; TFLOP/s")[0] + "; host us "
             "a call as `benchmarks/host_time.py` measures it (300 calls without synchronization; where the GPU is "
             "the slower, its time); the HBM share: the bytes a product must move over its wall time, against a "
             f"device-to-device copy's {data['copy bytes/s']['bytes/s'] / 1e9:.0f} GB/s.", "",
             "| case | kernel | ours, us | cuBLAS, us | mma.sync split-K, us | vs cuBLAS | host us, ours / cuBLAS | "
             "HBM share, ours / cuBLAS | in a graph, us, ours / cuBLAS | HBM share in a graph | SM MHz | W |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    pair = lambda values: f"{values['operator']} / {values['cuBLAS']}" if values else ""  # noqa: E731
    for case in data["cases"]:
        wall = case["wall us"]
        lines.append(_row(case["case"], case["kernel"], wall["operator"], wall["cuBLAS"],
                          wall.get("mma.sync split-K", ""), case["operator vs cuBLAS"], pair(case["host us"]),
                          pair(case.get("HBM share")), pair(case.get("in a graph us")),
                          pair(case.get("HBM share in a graph")), f"{case['SM MHz']:.0f}", f"{case['W']:.0f}"))
    return lines


def render_host_time(data: dict) -> list[str]:
    whos = list(dict.fromkeys(who for case in data["cases"] for who in case["host us a call"]))
    lines = [f"## Host time a call ({data['device']}, torch {data['torch']})", "",
             "`python3 benchmarks/host_time.py DIR` on the GPU host: 300 calls back to back without synchronizing, "
             "the wall time until the last returned over 300, the median of 9 rounds; in a graph: the calls "
             "captured in a CUDA graph, a replay's host time.", "",
             "| case | " + " | ".join(whos) + " |", "|---|" + "---|" * len(whos)]
    for case in data["cases"]:
        lines.append(_row(case["case"], *(case["host us a call"].get(who, "") for who in whos)))
    return lines


def render_training_step(data: dict) -> list[str]:
    errors = data["first step's gradients, relative error"]
    return [f"## A Llama-style block's training step ({data['device']}, torch {data['torch']}, {data['date']})", "",
            f"`{data['command']}` on the GPU host (benchmarks/training_step.py: d_model 4096, 32 query / 8 K/V heads "
            "of 128, SwiGLU 14336, batch 2 x 4096, bf16, AdamW; every matmul and attention ours, against the block "
            "on F.linear and SDPA): each step's loss, the first step's gradients' relative error, a step's time "
            "(whole steps interleaved, medians).", "",
            "| ms a step, ours / torch's | ours vs torch | largest loss difference (relative) | largest gradient error "
            "(relative) | SM MHz | W |", "|---|---|---|---|---|---|",
            _row(f"{data['step ms']['ours']} / {data['step ms']['torch']}", data["ours vs torch"],
                 f"{data['largest relative loss difference']:.1e}",
                 f"{max(errors.values()):.4f} ({max(errors, key=errors.get)})", f"{data['SM MHz']:.0f}",
                 f"{data['W']:.0f}")]


RENDERERS = {"ops": render_ops, "wgmma_loop": render_wgmma_loop, "attention_hopper": render_attention_hopper,
             "attention_hopper_fp8": render_attention_hopper_fp8, "attention_window": render_attention_window,
             "ops_small": render_ops_small, "host_time": render_host_time, "training_step": render_training_step}


def render(folder: Path) -> str:
    lines = ["# Benchmark results", "", "Generated by `python benchmarks/results.py benchmarks/results` from the JSON "
             "of the runs below; how to reproduce each is said with its table. Earlier runs and probes: "
             "[docs/notes/benchmark-history.md](../docs/notes/benchmark-history.md).", ""]
    for name, renderer in RENDERERS.items():
        path = folder / f"{name}.json"
        if path.exists():
            lines += renderer(json.loads(path.read_text())) + [""]
    hopper = sorted(folder.glob("gemm_hopper_*.json"))
    if hopper:
        lines += render_gemm_hopper([json.loads(path.read_text()) for path in hopper]) + [""]
    return "\n".join(lines)


def main(folder: Path) -> int:
    (HERE / "RESULTS.md").write_text(render(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else HERE / "results")))
