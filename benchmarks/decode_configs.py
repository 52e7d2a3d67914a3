"""A decode step's configuration forced (one consumer of 64 rows; one with 64-key tiles and two CTAs an SM)
beside the rule's (`flash.packed.packed_config`: two consumers, 128-row tiles of which a decode step of 32 / 8
heads fills 4) and SDPA, in CUDA graphs of 30 calls (us a call, the median of 5; GB/s of K and V read; each O
against the rule's):

    python benchmarks/decode_configs.py build     # here (MLIR): the forced kernels into DIR's cache
    MLIR_TILE_CACHE_DIR=DIR python3 benchmarks/decode_configs.py run   # on the GPU host

DIR is MLIR_TILE_CACHE_DIR (default build/gpu-inputs). docs/notes/serving-plan.md (session 44) has a run."""
import os
import sys
from dataclasses import replace

os.environ.setdefault("MLIR_TILE_CACHE_DIR", os.path.abspath("build/gpu-inputs"))
HEADS, KV, D, CALLS = 32, 8, 128, 30
SHAPES = ((1, 16384), (4, 8192), (16, 4096))
FIELDS = {"rule": {}, "c1k128s3": dict(consumers=1), "c1k64s3o2": dict(consumers=1, keys=64, stages=3, ctas_per_sm=2)}


def forcing(fields):
    """`packed_config` with `fields` over its pick, the split-KV count chosen anew for them."""
    from mlir_tile.kernels.flash import packed

    rule = packed.packed_config.__wrapped__  # (its lru_cache's function)

    def forced(d, causal, element, max_seqlen_q, group, page_size=0, *, max_seqlen_k=0, kv_items=0, sms=0):
        config, tiles, _ = rule(d, causal, element, max_seqlen_q, group, page_size, max_seqlen_k=max_seqlen_k,
                                kv_items=kv_items, sms=sms)
        config = replace(config, **fields, split_kv=False)
        tiles = -(-max_seqlen_q * group // config.rows)
        ctas = kv_items * tiles
        splits = packed.kv_splits(ctas, -(-max_seqlen_k // config.keys), sms * config.ctas_per_sm)
        return replace(config, split_kv=splits > 1), tiles, splits
    return forced


def build():
    """The forced configurations' kernels (16-bit, causal, pack_gqa; split or not as SHAPES need) into the cache."""
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.flash import sm90
    from mlir_tile.kernels.library import source_digest

    folder = os.path.join(os.environ["MLIR_TILE_CACHE_DIR"], "kernels", source_digest(), "sm_90")
    os.makedirs(folder, exist_ok=True)
    for name, fields in FIELDS.items():
        if not fields:
            continue
        for batch, seq in SHAPES:
            config, _, _ = forcing(fields)(D, True, "bf16", 1, HEADS // KV, max_seqlen_k=seq, kv_items=batch * KV,
                                           sms=132)
            path = os.path.join(folder, f"{config}.ptx")
            if not os.path.exists(path):
                open(path, "w").write(compile_to_ptx(sm90.build_module(config)))
                print(name, config, flush=True)


def run():
    """Each shape's SDPA, then each configuration's, one line a shape."""
    import torch
    import torch.nn.functional as F
    from torch_timing import graph_microseconds

    from mlir_tile.kernels import attention_with_kvcache
    from mlir_tile.kernels.flash import packed

    def timed(call):
        return graph_microseconds(call, CALLS, samples=5)

    rule = packed.packed_config
    for batch, seq in SHAPES:
        q = torch.randn(batch, 1, HEADS, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(batch, seq, KV, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        lengths = torch.full((batch,), seq, dtype=torch.int32, device="cuda")
        read = 2 * k.numel() * 2
        sdpa = timed(lambda: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                            enable_gqa=True))
        row, reference = [f"b{batch} s{seq}: SDPA {sdpa:.1f} us {read / sdpa / 1e3:.0f} GB/s"], None
        for name, fields in FIELDS.items():
            packed.packed_config = rule if not fields else forcing(fields)
            o = attention_with_kvcache(q, k, v, lengths)[0]
            reference = o if reference is None else reference
            error = (o.float() - reference.float()).abs().max().item()
            us = timed(lambda: attention_with_kvcache(q, k, v, lengths))
            row.append(f"{name} {us:.1f} us {read / us / 1e3:.0f} (err {error:.1e})")
        packed.packed_config = rule
        print("; ".join(row), flush=True)


if __name__ == "__main__":
    build() if sys.argv[1] == "build" else run()
