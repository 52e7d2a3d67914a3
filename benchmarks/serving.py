"""A serving loop's attention (issue 61): a Llama-3-8B-shaped stack of attention layers (32 query / 8 KV heads of
128, bf16) serving a batch of requests over a paged KV cache, on the GPU host:

    PYTHONPATH=python python3 benchmarks/serving.py [--layers 32] [--requests 32] [--steps 256] [--page 64]

Each request's prompt (random lengths) is prefilled into its pages by one `attention_with_kvcache` call a layer
(the new keys appended through the block table, causal), then every request decodes `steps` tokens, a step
being one query a request through every layer with its key and value appended, captured once in a CUDA graph
and replayed (the lengths advance inside the graph), as engines run their decode. Beside it, torch's best path
for the same steps: each layer's pages gathered into [requests, 8, keys, 128] and SDPA (`enable_gqa`, a mask of
each request's length), in a CUDA graph too. Both start from the same prefilled pools; the first step's
outputs are compared. Reported: decode tokens a second, a step's time, and the K/V bytes a step reads over its
time (against HBM's peak: H100 3,350 GB/s, H200 4,800). Queries, keys and values are random (attention only:
no projections or MLPs)."""
import argparse
import time

import torch
import torch.nn.functional as F

from mlir_tile.kernels import attention_with_kvcache

HEADS, KV_HEADS, D = 32, 8, 128


def paged_cache(requests: int, capacity: int, page: int, layers: int):
    """Per layer K and V pools of shuffled pages, and one block table ([requests, capacity / page])."""
    per_request = -(-capacity // page)
    order = torch.randperm(requests * per_request, device="cuda")
    table = order.view(requests, per_request).int()
    pools = [[torch.zeros(requests * per_request, page, KV_HEADS, D, device="cuda", dtype=torch.bfloat16)
              for _ in "kv"] for _ in range(layers)]
    return pools, table


def prefill(pools, table, prompts):
    """Each layer's prompts appended into its pools (padded to the longest: the rows past a prompt are
    overwritten by its decode steps, never read), the causal attention of the prompts computed."""
    requests, longest = len(prompts), max(prompts)
    zero = torch.zeros(requests, dtype=torch.int32, device="cuda")
    for k_pool, v_pool in pools:
        q = torch.randn(requests, longest, HEADS, D, device="cuda", dtype=torch.bfloat16)
        k_new, v_new = (torch.randn(requests, longest, KV_HEADS, D, device="cuda", dtype=torch.bfloat16)
                        for _ in "kv")
        attention_with_kvcache(q, k_pool, v_pool, zero, k_new, v_new, causal=True, block_table=table)
    return torch.tensor(prompts, dtype=torch.int32, device="cuda")


def our_step(pools, table, lengths, tokens):
    """A decode step through every layer: append each request's key and value, attend; the lengths advance."""
    outputs = [attention_with_kvcache(q, k_pool, v_pool, lengths, k_new, v_new, causal=True, block_table=table)[0]
               for (k_pool, v_pool), (q, k_new, v_new) in zip(pools, tokens)]
    lengths.add_(1)
    return outputs


def torch_step(pools, table, lengths, tokens):
    """The same step on torch's ops: the pages gathered into contiguous caches, the new rows written, SDPA."""
    requests, per_request = table.shape
    page = pools[0][0].shape[1]
    keys = torch.arange(per_request * page, device="cuda")
    visible = (keys[None, :] <= lengths[:, None].long())[:, None, None, :]  # (the new key at lengths[b])
    rows = torch.arange(requests, device="cuda")
    outputs = []
    for (k_pool, v_pool), (q, k_new, v_new) in zip(pools, tokens):
        k, v = (pool[table.long()].view(requests, per_request * page, KV_HEADS, D) for pool in (k_pool, v_pool))
        k[rows, lengths.long()], v[rows, lengths.long()] = k_new[:, 0], v_new[:, 0]
        outputs.append(F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      attn_mask=visible, enable_gqa=True).transpose(1, 2))
    lengths.add_(1)
    return outputs


def replayed(step, pools, table, lengths, tokens):
    """`step` captured in a CUDA graph (after a warm-up on copies of the lengths) and its replay."""
    warm = lengths.clone()
    step(pools, table, warm, tokens)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step(pools, table, lengths, tokens)
    return graph, outputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--page", type=int, default=64)
    parser.add_argument("--prompts", type=int, nargs=2, default=(128, 2048), help="the prompts' least and most tokens")
    arguments = parser.parse_args()
    torch.manual_seed(0)
    prompts = torch.randint(arguments.prompts[0], arguments.prompts[1] + 1, (arguments.requests,)).tolist()
    pools, table = paged_cache(arguments.requests, max(prompts) + arguments.steps, arguments.page, arguments.layers)
    started = lengths = prefill(pools, table, prompts)
    tokens = [[torch.randn(arguments.requests, 1, heads, D, device="cuda", dtype=torch.bfloat16) / 4
               for heads in (HEADS, KV_HEADS, KV_HEADS)] for _ in range(arguments.layers)]
    print(torch.cuda.get_device_name(), f"{arguments.layers} layers, {arguments.requests} requests, prompts "
          f"{min(prompts)}-{max(prompts)}, pages of {arguments.page}", flush=True)
    results = {}
    for name, step in (("mlir-tile", our_step), ("torch (gathered + SDPA)", torch_step)):
        copies = [[x.clone() for x in layer] for layer in pools]  # (each path from the same prefilled pools)
        lengths = started.clone()
        graph, outputs = replayed(step, copies, table, lengths, tokens)
        lengths.copy_(started)
        graph.replay()
        first = [o.float().clone() for o in outputs]
        torch.cuda.synchronize()
        begin = time.perf_counter()
        for _ in range(arguments.steps - 1):
            graph.replay()
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - begin) / (arguments.steps - 1)
        read = 2 * KV_HEADS * D * 2 * arguments.layers * (started.sum().item() + arguments.steps / 2 * arguments.requests)
        results[name] = first
        print(f"{name}: {arguments.requests / seconds:,.0f} tokens/s, {seconds * 1e3:.3f} ms a step, "
              f"{read / seconds / 1e9:,.0f} GB/s of K and V", flush=True)
        del copies, graph, outputs
    worst = max((a - b).abs().max().item() for a, b in zip(*results.values()))
    print(f"first step's outputs: the two paths within {worst:.1e}", flush=True)
    return 0 if worst < 2e-2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
