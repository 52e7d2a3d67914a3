"""The builder's FlashAttention-2 forward (mlir_tile.kernels.attention) against torch's SDPA backends, in one process.

    python benchmarks/attention.py build DIR     # here (MLIR): the 8 kernels' PTX
    python3 benchmarks/attention.py check DIR    # GPU host: random cases against torch's math backend (fp32)
    python3 benchmarks/attention.py run DIR      # GPU host: TFLOP/s beside torch's flash and cuDNN backends
    python3 benchmarks/attention.py profile DIR  # GPU host with ncu: shared wavefronts and stalls, ours and FA2's
    python3 benchmarks/attention.py clocks DIR   # GPU host: SM clock and power under each d 128 kernel, sustained
    python benchmarks/attention.py hopper-build DIR  # here (MLIR): Hopper's attention kernels' PTX
    python3 benchmarks/attention.py hopper DIR   # GPU host: Hopper's path beside FA2 and cuDNN, the issue's 24 cases
    python3 benchmarks/attention.py hopper-fp8 DIR  # GPU host: e4m3 beside our f16 and cuDNN; its accuracy (fp32)
    python3 benchmarks/attention.py hopper-table DIR  # DIR/hopper_shapes.json from the two: the library's shapes
    python3 benchmarks/attention.py hopper-profile DIR  # GPU host with ncu: the wgmma pipe's share, ours and cuDNN's

Every kernel runs on torch tensors through `mlir_tile.runtime` on torch's stream. TFLOP/s = 4 * batch * heads
* seq^2 * d / time (causal too: the full square, as the issue's table counts); batch * seq = 16k tokens,
heads * d = 2048. Times: `torch_timing.sustained_interleaved` (back to back, the calls of a configuration taking
turns, medians, the SM clock and power beside).
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from torch_timing import clock_and_power, library, profile_launches, sustained_interleaved, sustained_rate
from mlir_tile.kernels.flash import launch as flash_launch, sm80 as flash_sm80, sm80_tiles as flash_tiles

CHECKED = 120


def build(directory: Path) -> None:
    """The kernels `Attention` picks and the CTAs measured beside them, as the library ships them."""
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.ship import ship

    ship(directory / "attention", chips=("sm_90",))
    for config in flash_tiles.measured_kernels():
        (directory / "attention" / "sm_90" / f"{config}.ptx").write_text(compile_to_ptx(flash_sm80.build_module(config)))


def _reference(q, k, v, causal):
    import torch

    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)


def check(directory: Path) -> None:
    """|O - O32| <= 2^-6 (bf16) or 2^-9 (fp16) + 2^-7 |O32| elementwise, and lse within 1e-3 of fp32."""
    import torch

    from mlir_tile.runtime import Runtime

    rng = random.Random(7)
    failures, worst = [], 0.0
    with Runtime() as runtime:
        attentions = [flash_launch.Attention(library(runtime, directory / "attention"))] + [
            flash_launch.Attention(library(runtime, directory / "attention"), {64: shape, 128: shape}) for shape in flash_tiles.SHAPES]
        attention = attentions[0]
        for trial in range(CHECKED):
            batch, heads = rng.randint(1, 3), rng.randint(1, 4)
            seq = rng.choice([1, 2, 63, 64, 65, 127, 129, 200, 257, 1000, rng.randint(1, 700)])
            d, causal = rng.choice([64, 128]), rng.random() < 0.5
            dtype = (torch.float16, torch.bfloat16)[trial % 2]
            q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=dtype) for _ in range(3))
            o, lse = attentions[trial // 2 % len(attentions)](q, k, v, causal=causal)  # every CTA shape
            expected = _reference(q, k, v, causal)
            scores = q.float() @ k.float().transpose(-1, -2) / d ** 0.5
            if causal:
                scores = scores.masked_fill(torch.ones(seq, seq, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
            expected_lse = torch.logsumexp(scores, -1)
            bound = (2 ** -6 if dtype == torch.bfloat16 else 2 ** -9) + 2 ** -7 * expected.abs()
            error = (o.float() - expected).abs()
            lse_error = (lse - expected_lse).abs().max().item()
            worst = max(worst, error.max().item())
            if (error > bound).any() or lse_error > 1e-3:
                failures.append({"shape": [batch, heads, seq, d], "causal": causal, "dtype": str(dtype),
                                 "error": error.max().item(), "lse_error": lse_error})
        messages = []
        q = torch.randn(1, 1, 8, 96, device="cuda", dtype=torch.float16)
        for what, call in (("head dim 96", lambda: attention(q, q, q)),
                           ("float32", lambda: attention(q[..., :64].float(), q[..., :64].float(), q[..., :64].float()))):
            try:
                call()
                messages.append(f"{what}: no error")
            except ValueError as error:
                print(f"{what}: ValueError: {error}")
    report = {"cases": CHECKED, "failures": failures, "largest error": worst, "error paths without an error": messages}
    print(json.dumps(report))
    (directory / "attention_check.json").write_text(json.dumps(report, indent=1))


def _torch_backends(q, k, v, causal) -> dict:
    """torch's SDPA flash (FA2) and cuDNN backends on these tensors, those that run here, as calls."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    anchors = {}
    for name, backend in (("flash (FA2)", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
        def call(backend=backend):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        try:
            call()
            anchors[name] = call
        except RuntimeError as error:
            print(f"{name} unavailable: {str(error)[:60]}")
    return anchors


def clocks(directory: Path) -> None:
    """The SM clock and the board's power while each kernel runs back to back for SUSTAINED seconds on
    PROFILED at d 128 without the mask (fp16): `Attention`'s pick, each SHAPES CTA, FA2 and cuDNN, each with its
    TFLOP/s over the same window."""
    import torch

    from mlir_tile.runtime import Runtime

    (batch, heads, seq), d = PROFILED, 128
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.float16) for _ in range(3))
    flop, report = 4 * batch * heads * seq * seq * d, {}
    with Runtime() as runtime:
        ours = {"default": flash_launch.Attention(library(runtime, directory / "attention"))}
        ours.update({str(shape): flash_launch.Attention(library(runtime, directory / "attention"), {d: shape})
                     for shape in flash_tiles.SHAPES})
        calls = {name: (lambda attention=attention: attention(q, k, v)) for name, attention in ours.items()}
        for name, call in {**calls, **_torch_backends(q, k, v, False)}.items():
            report[name] = clock_and_power(lambda: sustained_rate(call, flop))
            print(json.dumps({name: report[name]}), flush=True)
    (directory / "attention_clocks.json").write_text(json.dumps(report, indent=1))


def run(directory: Path) -> None:
    """Per configuration, every kernel shape and both torch backends timed in turns (`sustained_interleaved`)."""
    import torch

    from mlir_tile.runtime import Runtime

    results = []
    with Runtime() as runtime:
        default = flash_launch.Attention(library(runtime, directory / "attention"))
        shaped = [flash_launch.Attention(library(runtime, directory / "attention"), {64: shape, 128: shape}) for shape in flash_tiles.SHAPES]
        for element, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16)):
            for d in (64, 128):
                for seq in (1024, 4096, 8192):
                    for causal in (False, True):
                        batch, heads = 16384 // seq, 2048 // d
                        q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=dtype) for _ in range(3))
                        flops = 4 * batch * heads * seq * seq * d
                        ours = {name: (lambda attention=attention: attention(q, k, v, causal=causal)) for name, attention
                                in [("default", default)] + [(str(shape), a) for shape, a in zip(flash_tiles.SHAPES, shaped)]}
                        anchors = _torch_backends(q, k, v, causal)
                        seconds, conditions = sustained_interleaved({**ours, **anchors})
                        row = {"element": element, "d": d, "seq": seq, "causal": causal, **conditions,
                               "variants": {name: flops / seconds[name] / 1e12 for name in ours},
                               **{name: flops / seconds[name] / 1e12 for name in anchors}}
                        row["mlir-tile"] = max(row["variants"].values())
                        if "flash (FA2)" in row:
                            row["ratio to FA2"] = row["mlir-tile"] / row["flash (FA2)"]
                        print(json.dumps({key: round(value, 2) if isinstance(value, float) else value
                                          for key, value in row.items() if key != "variants"}),
                              {name: round(value, 1) for name, value in row["variants"].items()}, flush=True)
                        results.append(row)
    (directory / "attention_results.json").write_text(json.dumps(results, indent=1))


# HopperAttentionConfig's fields measured, over each head dim's and mask's (`sm90_tiles.MEASURED_SHAPES`'s longest
# band), where they make a kernel of
# their own ({"consumers": 3, "keys": 64}: 192 rows a CTA (FlashAttention-3's d 64 CTA height) of 64 keys, d 64's
# pick before its 128 (and {"consumers": 3, "keys": 128}, its pick, timed up to S 1024 too); {"consumers": 2,
# "keys": 128}: the default at d 128, timed elsewhere too; uniform_q, the persistent grid and the 32-bit pipeline
# indices (`narrow`) both ways; one consumer of 64 keys in one CTA an SM and in three (d 64's pick for short
# sequences, timed at every length), launched and persistent, where their shared memory fits. (Lazy rescaling at 16 bits ran
# 0.94-1.01x without it in session 29 and 0.96-0.98x at d 128 in session 31: no longer timed.)
HOPPER_SHAPES = [{}, {"consumers": 2, "keys": 128}, {"uniform_q": True}, {"uniform_q": False}, {"pingpong": True},
                 {"stages": 2}, {"consumers": 1, "stages": 3}, {"persistent": True}, {"persistent": False},
                 {"consumers": 3, "keys": 64}, {"consumers": 3, "keys": 128}, {"narrow": True}, {"narrow": False},
                 {"consumers": 1, "keys": 64}, {"consumers": 1, "keys": 64, "ctas_per_sm": 3},
                 {"consumers": 1, "keys": 64, "ctas_per_sm": 3, "persistent": True}]
HOPPER_CASES = [(element, d, seq, causal) for element in ("f16", "bf16") for d in (64, 128, 256)
                for seq in (1024, 4096, 8192) for causal in (False, True)]


def _hopper_variants(d: int, causal: bool, element: str, seq: int) -> dict:
    """{str(shape): config} of HOPPER_SHAPES' kernels at this head dim, mask, element and sequence, as
    `HopperAttention` picks them: those that fit (shared memory), each kernel once."""
    from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig

    variants = {}
    for shape in HOPPER_SHAPES:
        try:
            config = HopperAttentionConfig.picked(d, causal, element, seq, **shape)
        except ValueError:
            continue
        if config not in variants.values():
            variants[str(shape)] = config
    return variants


def hopper_build(directory: Path) -> None:
    """Hopper's attention (`flash.sm90`) for each head dim, mask, element and sequence (`_hopper_variants`,
    and e4m3 at d 128), named as its library names it, into DIR/attention/sm_90."""
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.flash import sm90 as flash_sm90, sm90_tiles as hopper_attention_tiles

    folder = directory / "attention" / "sm_90"
    folder.mkdir(parents=True, exist_ok=True)
    configs = {config for element, d, seq, causal in HOPPER_CASES
               for config in _hopper_variants(d, causal, element, seq).values()}
    configs |= {hopper_attention_tiles.HopperAttentionConfig.of(128, causal, "e4m3", **shape) for causal in (False, True)
                for shape in FP8_SHAPES}
    for config in sorted(configs, key=str):
        (folder / f"{config}.ptx").write_text(compile_to_ptx(flash_sm90.build_module(config)))


def _fresh(call, like):
    """call()'s output in memory that held NaNs just before (a freed block of its size, which torch's caching
    allocator hands out next), so that an element the kernel leaves unwritten shows instead of an earlier run's."""
    import torch

    torch.full_like(like, float("nan"))  # dropped at once: its block back in the cache, holding NaNs
    return call()


def hopper(directory: Path) -> None:
    """HOPPER_CASES (batch x seq = 16k tokens, heads x d = 2048): Hopper's path (each of `_hopper_variants`), the
    sm_80 path's (as shipped; d 64 and 128) and torch's FA2 and cuDNN backends timed in turns
    (`sustained_interleaved`); TFLOP/s = 4 batch heads seq^2 d, halved for causal (issue 41's count); each
    output checked against cuDNN's. DIR/attention_hopper.json."""
    import torch

    from mlir_tile.kernels.flash.launch import HopperAttention
    from mlir_tile.kernels.library import KernelLibrary
    from mlir_tile.runtime import Runtime

    results = []
    with Runtime() as runtime:
        kernels = library(runtime, directory / "attention")
        paths = {str(shape): HopperAttention(kernels, shape) for shape in HOPPER_SHAPES}
        sm80_path = flash_launch.Attention(KernelLibrary(runtime))  # the kernels the package ships
        for element, d, seq, causal in HOPPER_CASES:
            dtype, batch, heads = {"f16": torch.float16, "bf16": torch.bfloat16}[element], 16384 // seq, 2048 // d
            q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=dtype) for _ in range(3))
            flops = 4 * batch * heads * seq * seq * d / (2 if causal else 1)
            variants = _hopper_variants(d, causal, element, seq)
            hopper_paths = {f"hopper {shape}": paths[shape] for shape in variants}
            ours = {name: (lambda path=path: path(q, k, v, causal=causal)[0]) for name, path in hopper_paths.items()}
            if d in (64, 128):
                ours["sm80"] = lambda: sm80_path(q, k, v, causal=causal)[0]
            anchors = _torch_backends(q, k, v, causal)
            seconds, conditions = sustained_interleaved({**ours, **anchors})
            row = {"element": element, "d": d, "seq": seq, "causal": causal, **conditions,
                   **{name: round(flops / seconds[name] / 1e12, 1) for name in seconds}}
            row["hopper"] = max(row[name] for name in hopper_paths)
            row["kernels"] = {f"hopper {shape}": str(config) for shape, config in variants.items()}
            row["fields"] = {f"hopper {shape}": _fields(config) for shape, config in variants.items()}
            row.update(_provenance("hopper"))
            if "cuDNN" in anchors:
                row["vs cuDNN"] = round(row["hopper"] / row["cuDNN"], 3)
                row["largest difference from cuDNN"] = max(float((_fresh(ours[name], q).float() - anchors["cuDNN"]()
                                                                  .float()).abs().max()) for name in hopper_paths)
            print(json.dumps(row), flush=True)
            results.append(row)
            (directory / "attention_hopper.json").write_text(json.dumps(results, indent=1))
            del q, k, v
            torch.cuda.empty_cache()


FP8_CASES = [(seq, causal) for seq in (1024, 4096, 8192) for causal in (False, True)]  # d 128
# e4m3 kernels' fields measured, over FP8_SHAPE's (4 stages, the persistent grid, uniform_q, lazy_rescale; the last,
# session 28's default); session 25 also ran 3 stages (0.75-0.89x 4) and 3 staged V tiles (0.94-0.98x 2); session
# 26 timed the default under two names (a control of the harness: 0.4-1.7% apart); 5 stages ran 0.97-1.00x 4
# (session 29, launched)
FP8_SHAPES = [{}, {"lazy_rescale": False}, {"uniform_q": False}, {"persistent": False},
              {"persistent": False, "uniform_q": False, "lazy_rescale": False}]


def _quantized(x):
    """x as float8_e4m3fn with its per-tensor descale (max |x| / 448), and the values that stand for."""
    import torch

    descale = (x.abs().max().float() / 448).reshape(1)
    quantized = (x.float() / descale).to(torch.float8_e4m3fn)
    return quantized, descale, quantized.float() * descale


def _fp8_accuracy(path, causal: bool) -> dict:
    """RMSE of O against fp32 attention of the same inputs (FlashAttention-3's test: N(0, 1) with 0.1% of the
    entries N(0, 10)), [1, 8, 4096, 128]: ours in e4m3 (the fp32 reference of the values it was given, and of
    the unquantized inputs), ours in f16, cuDNN in f16 on the same inputs."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    generator = torch.Generator(device="cuda").manual_seed(0)
    shape = (1, 8, 4096, 128)

    def outlying():
        x = torch.randn(shape, device="cuda", generator=generator)
        rare = torch.rand(shape, device="cuda", generator=generator) < 0.001
        return torch.where(rare, 10 * torch.randn(shape, device="cuda", generator=generator), x)
    exact = [outlying() for _ in range(3)]
    quantized = [_quantized(x) for x in exact]
    with sdpa_kernel(SDPBackend.MATH):
        reference = F.scaled_dot_product_attention(*exact, is_causal=causal)
        given = F.scaled_dot_product_attention(*(x[2] for x in quantized), is_causal=causal)
    fp8, _ = path(*(x[0] for x in quantized), causal=causal, descales=tuple(x[1] for x in quantized))
    halves = [x.half() for x in exact]
    f16, _ = path(*halves, causal=causal)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        cudnn = F.scaled_dot_product_attention(*halves, is_causal=causal)

    def rmse(o, against):
        return float((o.float() - against).pow(2).mean().sqrt())
    return {"rmse e4m3": rmse(fp8, reference), "rmse e4m3 vs its fp8 values": rmse(fp8, given),
            "rmse f16": rmse(f16, reference), "rmse cuDNN f16": rmse(cudnn, reference)}


def hopper_fp8(directory: Path) -> None:
    """FP8_CASES (d 128, batch x seq = 16k tokens, 16 heads): our e4m3 kernels (FP8_SHAPES) beside our f16 one
    and cuDNN's f16 backend, timed in turns (TFLOP/s as `hopper`'s); per mask, the accuracy (`_fp8_accuracy`).
    DIR/attention_hopper_fp8.json."""
    import torch

    from mlir_tile.kernels.flash.launch import HopperAttention
    from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig
    from mlir_tile.runtime import Runtime

    results = []
    with Runtime() as runtime:
        kernels = library(runtime, directory / "attention")
        path = HopperAttention(kernels)
        fp8_paths = {f"e4m3 {shape}": HopperAttention(kernels, shape) for shape in FP8_SHAPES}
        for seq, causal in FP8_CASES:
            batch, heads, d = 16384 // seq, 16, 128
            q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.float16) for _ in range(3))
            (q8, dq, _), (k8, dk, _), (v8, dv, _) = (_quantized(x) for x in (q, k, v))
            calls = {name: (lambda fp8=fp8: fp8(q8, k8, v8, causal=causal, descales=(dq, dk, dv))[0])
                     for name, fp8 in fp8_paths.items()}
            calls.update({"f16": lambda: path(q, k, v, causal=causal)[0], **_torch_backends(q, k, v, causal)})
            calls.pop("flash (FA2)", None)
            seconds, conditions = sustained_interleaved(calls)
            flops = 4 * batch * heads * seq * seq * d / (2 if causal else 1)
            row = {"d": d, "seq": seq, "causal": causal, **conditions,
                   **{name: round(flops / seconds[name] / 1e12, 1) for name in seconds}}
            row["e4m3"] = max(row[name] for name in fp8_paths)
            row["fields"] = {f"e4m3 {shape}": _fields(HopperAttentionConfig.picked(d, causal, "e4m3", seq, **shape))
                             for shape in FP8_SHAPES}
            row.update(_provenance("hopper-fp8"))
            row["e4m3 / f16"] = round(row["e4m3"] / row["f16"], 3)
            if seq == 4096:
                row.update(_fp8_accuracy(path, causal))
            print(json.dumps(row), flush=True)
            results.append(row)
            (directory / "attention_hopper_fp8.json").write_text(json.dumps(results, indent=1))
            del q, k, v, q8, k8, v8
            torch.cuda.empty_cache()


def _fields(config) -> dict:
    """A Hopper attention configuration's fields other than the head dim, mask and element, where not the
    defaults: what MEASURED_SHAPES keeps."""
    from dataclasses import fields

    from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig

    defaults = HopperAttentionConfig()
    return {f.name: getattr(config, f.name) for f in fields(config)
            if f.name not in ("head_dim", "causal", "element") and getattr(config, f.name) != getattr(defaults, f.name)}


def _provenance(command: str) -> dict:
    """The chip, the date and the command of a measuring run, for the table it may write."""
    import datetime

    import torch

    return {"chip": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "command": f"python3 benchmarks/attention.py {command} DIR"}


# a kernel other than the one picked when measuring replaces it only where it ran this much faster (the harness's
# repeatability: one kernel timed under two names ran 0.4-1.7% apart)
TABLE_MARGIN = 0.02


def _fastest(rows: list, prefix: str) -> dict:
    """Of rows of one head dim, mask and length (one a dtype), the fields of the kernel with the highest geometric
    mean TFLOP/s over them, among those measured in every row; the picked one's (label `prefix {}`) unless
    another ran TABLE_MARGIN faster."""
    import math

    rates = [{json.dumps(row["fields"][label], sort_keys=True): rate for label, rate in row.items()
              if label.startswith(prefix) and label in row["fields"]} for row in rows]
    candidates = set.intersection(*(set(rate) for rate in rates))
    mean = {c: math.exp(sum(math.log(rate[c]) for rate in rates) / len(rates)) for c in candidates}
    picked = json.dumps(rows[0]["fields"][f"{prefix}{{}}"], sort_keys=True)
    best = max(sorted(candidates), key=mean.get)
    return json.loads(best if mean[best] > (1 + TABLE_MARGIN) * mean[picked] else picked)


def hopper_table(directory: Path) -> None:
    """DIR/hopper_shapes.json (copy it beside mlir_tile/kernels/flash/sm90_tiles.py: `MEASURED_SHAPES`) from
    DIR/attention_hopper.json and DIR/attention_hopper_fp8.json (`hopper`, `hopper-fp8`): per head dim, mask
    and length measured, `_fastest` over f16 and bf16 (e4m3 apart); a length's fields hold up to it, the
    longest's beyond; neighbouring lengths of the same fields one band. The runs' chips, dates and commands
    go with it."""
    groups, runs = {}, {}
    for name, kind, prefix in (("attention_hopper.json", "16-bit", "hopper "), ("attention_hopper_fp8.json", "e4m3",
                                                                                "e4m3 ")):
        for row in json.loads((directory / name).read_text()):
            groups.setdefault((row["d"], row["causal"], kind, prefix), {}).setdefault(row["seq"], []).append(row)
            runs[name] = {key: row[key] for key in ("chip", "date", "command") if key in row}
    shapes = []
    for (d, causal, kind, prefix), by_length in sorted(groups.items()):
        bands = []
        for seq in sorted(by_length):
            fields = _fastest(by_length[seq], prefix)
            if bands and bands[-1]["fields"] == fields:
                bands[-1]["up_to"] = seq
            else:
                bands.append({"head_dim": d, "causal": causal, "elements": kind, "up_to": seq, "fields": fields})
        bands[-1]["up_to"] = None
        shapes += bands
    provenance = {"runs": [{"file": name, **run} for name, run in runs.items()],
                  "command": "python3 benchmarks/attention.py hopper DIR and hopper-fp8 DIR, then "
                             "python3 benchmarks/attention.py hopper-table DIR"}
    (directory / "hopper_shapes.json").write_text(json.dumps({"provenance": provenance, "shapes": shapes}, indent=1) + "\n")
    print(json.dumps(shapes))


HOPPER_PROFILED = (2, 16, 8192, 128)  # batch, heads, seq, d: non-causal


def hopper_launch(directory: Path, which: str) -> None:
    """One launch at HOPPER_PROFILED: ours in `which` ("f16": the persistent grid, d 128's default;
    "f16-launched"; "e4m3") or cuDNN's f16 ("cudnn"). What `hopper_profile` runs under ncu."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from mlir_tile.kernels.flash.launch import HopperAttention
    from mlir_tile.runtime import Runtime

    q, k, v = (torch.randn(*HOPPER_PROFILED, device="cuda", dtype=torch.float16) for _ in range(3))
    if which == "cudnn":
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(q, k, v)
    else:
        with Runtime() as runtime:
            path = HopperAttention(library(runtime, directory / "attention"),
                                   {"persistent": False} if which == "f16-launched" else None)
            if which == "e4m3":
                (q, dq, _), (k, dk, _), (v, dv, _) = (_quantized(x) for x in (q, k, v))
                path(q, k, v, descales=(dq, dk, dv))
            else:
                path(q, k, v)
    torch.cuda.synchronize()


def hopper_profile(directory: Path) -> None:
    """ncu (clocks left alone) on one launch each of ours (f16, its launched grid, e4m3) and cuDNN's at
    HOPPER_PROFILED: the wgmma pipe's busy share of the active cycles (the whole kernel: the main loop is nearly
    all of it at 8192 keys), issue activity, shared-memory wavefronts and bank conflicts (fp8's transposition),
    DRAM bytes and L2 hits, stalls. DIR/attention_hopper_profile.json."""
    report = []
    for which in ("f16", "f16-launched", "e4m3", "cudnn"):
        entry, = profile_launches([__file__, "hopper-launch", str(directory), which], "attention|cudnn|sm90|fmha", 1)
        report.append({"who": which, "shape": HOPPER_PROFILED, **entry})
        print(json.dumps(report[-1]), flush=True)
    (directory / "attention_hopper_profile.json").write_text(json.dumps(report, indent=1))


PROFILED = (4, 16, 4096)  # batch, heads, seq


def launch(directory: Path, which: str, d: int) -> None:
    """One non-causal fp16 launch at PROFILED and head dim d: ours (`which` "default": the default Config, not
    TUNED's; or a SHAPES index), or torch's flash backend ("flash"). What `profile` runs under ncu."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from mlir_tile.runtime import Runtime

    q, k, v = (torch.randn(*PROFILED, d, device="cuda", dtype=torch.float16) for _ in range(3))
    if which == "flash":
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q, k, v)
    else:
        with Runtime() as runtime:
            shape = {} if which == "default" else flash_tiles.SHAPES[int(which)]
            flash_launch.Attention(library(runtime, directory / "attention"), {d: shape})(q, k, v)
    torch.cuda.synchronize()


def profile(directory: Path) -> None:
    """ncu on one launch of ours (each CTA shape) and of torch's FA2 kernel per head dim: shared-memory
    instructions and wavefronts (ours: ldmatrix.x4, 16-byte cp.async, stmatrix.x4 and 16-byte reads, all
    conflict-free by construction: 4 wavefronts each is the model's minimum), pipes' busy shares, stalls."""
    shapes, report = flash_tiles.SHAPES, []
    for d in (64, 128):
        for which in ["default", *map(str, range(len(shapes))), "flash"]:
            entry, = profile_launches([__file__, "launch", str(directory), which, str(d)], "attention|flash_fwd", 1)
            report.append({"kernel shape": which if which in ("default", "flash") else shapes[int(which)],
                           "d": d, **entry})
            print(json.dumps(report[-1]), flush=True)
    (directory / "attention_profile.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    command, directory = sys.argv[1], Path(sys.argv[2])
    if command == "launch":
        launch(directory, sys.argv[3], int(sys.argv[4]))
    elif command == "hopper-launch":
        hopper_launch(directory, sys.argv[3])
    else:
        {"build": build, "check": check, "run": run, "profile": profile, "clocks": clocks, "hopper-build": hopper_build,
         "hopper": hopper, "hopper-fp8": hopper_fp8, "hopper-profile": hopper_profile,
         "hopper-table": hopper_table}[command](directory)
