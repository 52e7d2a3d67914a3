"""`attention(q, k_cache, v_cache)` on heads-first caches ([batch, kv_heads, seq, d], Hugging Face's static caches)
beside SDPA, in one process on the GPU host (issue 61):

    PYTHONPATH=python:benchmarks python3 benchmarks/heads_first_cache.py OUT     # OUT/heads_first_cache.json

Per case (batch, heads, K/V heads, queries, keys, causal: aligned to the bottom right; bf16, d 128): each call's GPU
time in a CUDA graph of 30 (`torch_timing.graph_microseconds`), ours read in place (`flash.launch.HeadSequences`: a
K/V head's queries one head's or one row a head; `QueryHeadSequences`: grouped heads of several queries, a query
head a sequence) and as token rows (`TokenRows`, the layout taken before: k and v copied each call, here forced by
reporting no case in place), and the largest difference from fp32 SDPA."""
import json
import sys
from pathlib import Path

CASES = [(4, 32, 32, 1, 4096, False), (1, 32, 32, 1, 16384, False), (4, 32, 8, 1, 4096, False),
         (2, 16, 16, 128, 4096, False), (4, 32, 8, 4, 4096, True), (1, 32, 8, 16, 16384, True),
         (2, 32, 8, 128, 4096, True), (1, 32, 8, 1024, 8192, True)]


def main(out: Path) -> None:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right
    from torch_timing import graph_microseconds

    from mlir_tile.kernels import attention, common, ops
    from mlir_tile.kernels.flash import launch

    in_place, rows = launch.heads_as_sequences, []
    for batch, heads, kv_heads, queries, keys, causal in CASES:
        q = torch.randn(batch, heads, queries, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(batch, kv_heads, keys, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        mask = causal_lower_right(queries, keys) if causal else None
        want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True)
        row = {"case": [batch, heads, kv_heads, queries, keys, causal]}
        for name, form in (("token rows (copies)", lambda *tensors: False), ("in place", in_place)):
            launch.heads_as_sequences = form
            ops._eager = common.Plans(kept=4096)  # (eager steps are kept by shape: made afresh for this layout)
            row[f"{name} error"] = round(float((attention(q, k, v, causal=causal)[0].float() - want).abs().max()), 4)
            row[f"{name} us"] = round(graph_microseconds(lambda: attention(q, k, v, causal=causal)), 2)
        launch.heads_as_sequences = in_place
        row["SDPA us"] = round(graph_microseconds(
            lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)), 2)
        print(json.dumps(row), flush=True)
        rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "heads_first_cache.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows},
                                                           indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
