"""A decode step's attention (one query a sequence, 32 query / 8 KV heads of 128, bf16, pack_gqa) on other tile
shapes than the library's (`flash.packed.packed_config`: the prefill's 128 rows x 128 keys on 3 stages, one CTA an
SM), each with split-KV counts forced, beside the library's pick and SDPA, in CUDA graphs (issue 61: batch 1-16 at
53-78% of the HBM bandwidth where SDPA reaches 70-91%):

    python benchmarks/decode_attention_configs.py build DIR    # here (MLIR): each candidate's kernels into DIR
    MLIR_TILE_CACHE_DIR=DIR PYTHONPATH=python:benchmarks python3 benchmarks/decode_attention_configs.py run OUT

Candidates: 64 query rows (a group of 4 heads x up to 16 queries fills them) or 128, key tiles of 64 or 128, 2-6
stages, one or two CTAs an SM (two: one CTA's prologue, combine writes and first loads under the other's stream).
Each (candidate, splits) runs through `attention_with_kvcache` itself, `packed_config` replaced while its plan is
made (the kept eager steps cleared); its O checked against the library's. The library's pick is timed with the
combine launched as the split kernel's dependent (the library's way) and without (`independent`); the ceiling is one
launch reading the same K and V (torch's sum of their buffer, a single reduction kernel) in the same graphs.
OUT/decode_attention_configs.json: us a call (the median of 7 graphs of 30 calls) and GB/s of K and V read."""
from __future__ import annotations

import json
import sys
from pathlib import Path

SHAPES = [(1, 4096), (1, 16384), (4, 8192), (16, 4096), (64, 4096)]
HEADS, KV_HEADS, D = 32, 8, 128
CANDIDATES = [dict(consumers=2, keys=128, stages=3), dict(consumers=1, keys=128, stages=2),
              dict(consumers=1, keys=128, stages=3), dict(consumers=1, keys=64, stages=4),
              dict(consumers=1, keys=64, stages=6), dict(consumers=1, keys=64, stages=2, ctas_per_sm=2),
              dict(consumers=1, keys=64, stages=3, ctas_per_sm=2)]  # (128 rows at two CTAs an SM: 80 registers a
# thread at launch, too few for ptxas)
SPLITS = (1, 4, 8, 16, 32)


def configs():
    """Each candidate's configurations: split and whole (pack_gqa both)."""
    from dataclasses import replace

    from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig

    decode = HopperAttentionConfig.packed(D, True, "bf16", 1)
    for fields in CANDIDATES:  # (the caches' entries run as pages of a multiple of 64 rows: boxes of a key tile)
        for split in (False, True):
            yield replace(decode, **fields, pack_gqa=True, split_kv=split, page_rows=fields["keys"])


def build(directory: Path) -> None:
    import subprocess
    import tempfile

    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.flash import sm90
    from mlir_tile.kernels.library import source_digest

    folder = directory / "kernels" / source_digest() / "sm_90"  # (`library.cache_folder`'s layout)
    folder.mkdir(parents=True, exist_ok=True)
    for config in configs():
        path = folder / f"{config}.ptx"
        path.write_text(compile_to_ptx(sm90.build_module(config)))
        with tempfile.TemporaryDirectory() as scratch:  # (ptxas's report: registers and spills)
            report = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(path), "-o", f"{scratch}/k.cubin"],
                                    capture_output=True, text=True).stderr
        print(config, " ".join(line.split("info    : ")[-1] for line in report.splitlines()
                               if "spill" in line or "Used" in line), flush=True)


def forced(library_config, fields: dict | None, splits: int = 0):
    """`packed.packed_config` giving the candidate with `splits` (None: `library_config`, the library's own)."""
    from dataclasses import replace

    from mlir_tile.kernels import kvcache
    from mlir_tile.kernels.flash import packed

    kvcache._steps.clear()  # (eager steps are kept by the tensors' shapes: made afresh for this configuration)
    if fields is None:
        packed.packed_config = library_config
        return

    def candidate(*arguments, **keywords):
        config, tiles, _ = library_config(*arguments, **keywords)
        config = replace(config, **fields, split_kv=splits > 1, page_rows=fields["keys"] if config.page_rows else 0)
        return config, -(-arguments[3] * arguments[4] // config.rows), splits
    packed.packed_config = candidate


def independent(call) -> float:
    """`call`'s graph time with split-KV's combine launched after the split kernel ends (`runtime.DEPENDENT_LAUNCHES`
    off: no programmatic dependent launch), its plans made afresh for it and after it."""
    from torch_timing import graph_microseconds

    import mlir_tile.runtime as runtime

    def fresh_plans():
        import torch

        from mlir_tile.kernels import kvcache
        from mlir_tile.kernels.ops import kernels_on

        kvcache._steps.clear()
        kernels_on(torch.device("cuda")).attention.hopper.packing.plans.clear()
    runtime.DEPENDENT_LAUNCHES = False
    fresh_plans()
    try:
        return graph_microseconds(call)
    finally:
        runtime.DEPENDENT_LAUNCHES = True
        fresh_plans()


def run(out: Path) -> None:
    import torch
    import torch.nn.functional as F
    from torch_timing import graph_microseconds

    from mlir_tile.kernels import attention_with_kvcache
    from mlir_tile.kernels.flash import packed

    library_config, rows = packed.packed_config, []
    for batch, seq in SHAPES:
        q = torch.randn(batch, 1, HEADS, D, device="cuda", dtype=torch.bfloat16)
        both = torch.randn(2, batch, seq, KV_HEADS, D, device="cuda", dtype=torch.bfloat16)
        k, v = both  # (one buffer: the ceiling below reads both in one launch)
        lengths = torch.full((batch,), seq, dtype=torch.int32, device="cuda")
        gigabytes = 2 * k.numel() * k.element_size() / 1e3
        call = lambda: attention_with_kvcache(q, k, v, lengths)  # noqa: E731
        expected = call()[0].float()
        times = {"SDPA": graph_microseconds(lambda: F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True)),
                 "library": graph_microseconds(call), "library, combine not a dependent launch": independent(call),
                 "ceiling": graph_microseconds(lambda: both.sum(dtype=torch.float32))}
        for fields in CANDIDATES:
            for splits in SPLITS:
                if splits > 1 and seq // fields["keys"] < 2 * splits:  # (two key tiles a split at least)
                    continue
                name = "r{}k{}s{}o{} x{}".format(64 * fields["consumers"], fields["keys"], fields["stages"],
                                                 fields.get("ctas_per_sm", 1), splits)
                forced(library_config, fields, splits)
                try:
                    error = float((call()[0].float() - expected).abs().max())
                    assert error < 2e-2, (name, error)
                    times[name] = graph_microseconds(call)
                except Exception as failure:  # (a candidate the launcher refuses: recorded, not timed)
                    times[name] = f"{type(failure).__name__}: {str(failure)[:120]}"
                finally:
                    forced(library_config, None)
        timed = {name: t for name, t in times.items() if isinstance(t, float)}
        best = min((name for name in timed if not name.startswith(("SDPA", "library", "ceiling"))),
                   key=timed.__getitem__)
        row = {"batch": batch, "keys": seq, "best": best, "best GB/s": round(gigabytes / timed[best]),
               "library GB/s": round(gigabytes / timed["library"]), "SDPA GB/s": round(gigabytes / timed["SDPA"]),
               "ceiling GB/s": round(gigabytes / timed["ceiling"]),
               "us": {name: round(t, 2) if isinstance(t, float) else t for name, t in times.items()}}
        print(json.dumps(row), flush=True)
        rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode_attention_configs.json").write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                                                    "rows": rows}, indent=1))


if __name__ == "__main__":
    {"build": build, "run": run}[sys.argv[1]](Path(sys.argv[2]))
