"""A serving loop's attention (issue 61): a Llama-3-8B-shaped stack of attention layers (32 query / 8 KV heads of
128, bf16), or gpt-oss-20b's (`--model gpt-oss`: 64 query / 8 KV heads of 64, learned sinks in every layer, every
other layer a sliding window of 128 keys), serving a batch of requests over a paged KV cache, on the GPU host:

    PYTHONPATH=python python3 benchmarks/serving.py [--model llama3] [--layers 32] [--requests 32] [--steps 256]
    python benchmarks/serving.py --model gpt-oss --build DIR ...   # here (MLIR): its variants' kernels
    MLIR_TILE_CACHE_DIR=DIR python3 benchmarks/serving.py --model gpt-oss ...   # on the GPU host

Each request's prompt (random lengths) is prefilled into its pages by one `attention_with_kvcache` call a layer
(the new keys appended through the block table, causal), then every request decodes `steps` tokens, a step
being one query a request through every layer with its key and value appended, captured once in a CUDA graph
and replayed (the lengths advance inside the graph), as engines run their decode. Beside it, torch's best path
for the same steps: each layer's pages gathered into [requests, 8, keys, d] and SDPA (`enable_gqa`, a mask of
each request's length and window; a sink as a key of its own whose score the float mask gives and whose value
is 0), in a CUDA graph too. Both start from the same prefilled pools; the first step's
outputs are compared. Reported: decode tokens a second, a step's time, and the K/V bytes a step reads over its
time (a window's layer reads its window's keys; against HBM's peak: H100 3,350 GB/s, H200 4,800). Queries, keys and
values are random (attention only: no projections or MLPs)."""
import argparse
import random
import time
from dataclasses import dataclass

MODELS = {"llama3": (32, 8, 128), "gpt-oss": (64, 8, 64)}  # query heads, KV heads, d
WINDOW = 128  # gpt-oss's sliding window: a query and the 127 keys before it


@dataclass
class Layer:
    """A layer's pools and what its attention computes: `window` keys (0: all), `sinks` (None: none)."""
    pools: list
    window: int = 0
    sinks: object = None

    def variant(self):
        return layer_variant(self.window, self.sinks is not None)


def layer_kinds(model: str, layers: int) -> list:
    """(window, sinks) of each layer: gpt-oss's window of WINDOW keys on the even layers, sinks on every one;
    Llama's (0, False)."""
    return [(WINDOW if layer % 2 == 0 else 0, True) if model == "gpt-oss" else (0, False) for layer in range(layers)]


def layer_variant(window: int, sinks: bool):
    """The variant of a layer of `window` keys (0: all), with sinks or not (None: plain causal)."""
    from mlir_tile.kernels.flash import masks

    if not sinks:
        return None
    return masks.combined(masks.sliding_window(window - 1), masks.sinks) if window else masks.sinks


def model_layers(model: str, layers: int, pool_shape: tuple):
    """Each layer's zeroed K and V pools of `pool_shape` and its attention (`layer_kinds`; sinks random logits
    a head)."""
    import torch

    heads = MODELS[model][0]
    return [Layer([torch.zeros(pool_shape, device="cuda", dtype=torch.bfloat16) for _ in "kv"], window,
                  torch.randn(heads, device="cuda") if sinks else None) for window, sinks in layer_kinds(model, layers)]


def attend(layer: Layer, q, lengths, k_new, v_new, table):
    """Our attention of a layer: its keys' causal window or all of them, its sinks."""
    from mlir_tile.kernels import attention_with_kvcache

    variant = layer.variant()
    return attention_with_kvcache(q, *layer.pools, lengths, k_new, v_new, causal=not layer.window,
                                  block_table=table, variant=variant,
                                  operands=(layer.sinks,) if variant is not None else ())[0]


def prefill(layers, table, prompts, shape: tuple):
    """Each layer's prompts appended into its pools (padded to the longest: the rows past a prompt are
    overwritten by its decode steps, never read), the causal attention of the prompts computed."""
    import torch

    heads, kv_heads, d = shape
    requests, longest = len(prompts), max(prompts)
    zero = torch.zeros(requests, dtype=torch.int32, device="cuda")
    for layer in layers:
        q = torch.randn(requests, longest, heads, d, device="cuda", dtype=torch.bfloat16)
        k_new, v_new = (torch.randn(requests, longest, kv_heads, d, device="cuda", dtype=torch.bfloat16)
                        for _ in "kv")
        attend(layer, q, zero, k_new, v_new, table)
    return torch.tensor(prompts, dtype=torch.int32, device="cuda")


def our_step(layers, table, lengths, tokens):
    """A decode step through every layer: append each request's key and value, attend; the lengths advance."""
    outputs = [attend(layer, q, lengths, k_new, v_new, table) for layer, (q, k_new, v_new) in zip(layers, tokens)]
    lengths.add_(1)
    return outputs


def torch_step(layers, table, lengths, tokens):
    """The same step on torch's ops: the pages gathered into contiguous caches, the new rows written, SDPA with
    the mask of each request's keys (and window), a sink a key of its own (score from the mask, value 0)."""
    import torch
    import torch.nn.functional as F

    requests, per_request = table.shape
    _, page, kv_heads, d = layers[0].pools[0].shape
    keys = torch.arange(per_request * page, device="cuda")
    newest = lengths[:, None].long()  # (the new key at lengths[b])
    rows = torch.arange(requests, device="cuda")
    outputs = []
    for layer, (q, k_new, v_new) in zip(layers, tokens):
        k, v = (pool[table.long()].view(requests, per_request * page, kv_heads, d) for pool in layer.pools)
        k[rows, lengths.long()], v[rows, lengths.long()] = k_new[:, 0], v_new[:, 0]
        visible = keys[None, :] <= newest
        if layer.window:
            visible = visible & (keys[None, :] > newest - layer.window)
        mask = visible[:, None, None, :]
        if layer.sinks is not None:  # (a float mask: 0 or -inf, and the sink's logit for its zero key)
            zero = k.new_zeros(requests, 1, kv_heads, d)
            k, v = torch.cat([k, zero], 1), torch.cat([v, zero], 1)
            bias = torch.zeros(mask.shape, device="cuda").masked_fill(~mask, float("-inf"))
            mask = torch.cat([bias.expand(-1, q.shape[2], -1, -1),
                              layer.sinks[None, :, None, None].expand(requests, -1, 1, 1)], -1).to(q.dtype)
        outputs.append(F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      attn_mask=mask, enable_gqa=True).transpose(1, 2))
    lengths.add_(1)
    return outputs


def replayed(step, layers, table, lengths, tokens):
    """`step` captured in a CUDA graph (after a warm-up on copies of the lengths) and its replay."""
    import torch

    warm = lengths.clone()
    step(layers, table, warm, tokens)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step(layers, table, lengths, tokens)
    return graph, outputs


def build(arguments, prompts) -> None:
    """gpt-oss's kernels (its variants' on the packed path: the prefill's and the decode step's) into
    `arguments.build` as the library's cache lays them out for sm_90 on 132 SMs."""
    import os

    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.flash import sm90
    from mlir_tile.kernels.flash.packed import packed_config
    from mlir_tile.kernels.library import source_digest

    heads, kv_heads, d = MODELS[arguments.model]
    folder = os.path.join(arguments.build, "kernels", source_digest(), "sm_90")
    os.makedirs(folder, exist_ok=True)
    capacity = -(-(max(prompts) + arguments.steps) // arguments.page) * arguments.page
    for window, sinks in sorted(set(layer_kinds(arguments.model, 2))):
        variant = layer_variant(window, sinks)
        for seq_q in (max(prompts), 1) if variant is not None else ():
            config, _, _ = packed_config(d, not window, "bf16", seq_q, heads // kv_heads, arguments.page,
                                         max_seqlen_k=capacity, kv_items=arguments.requests * kv_heads, sms=132)
            path = os.path.join(folder, f"{config}{variant.suffix}.ptx")
            if not os.path.exists(path):
                with open(path, "w") as out:
                    out.write(compile_to_ptx(sm90.build_module(config, variant=variant)))
                print("built", os.path.basename(path), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="llama3")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--page", type=int, default=64)
    parser.add_argument("--prompts", type=int, nargs=2, default=(128, 2048), help="the prompts' least and most tokens")
    parser.add_argument("--build", metavar="DIR", help="build gpt-oss's kernels into DIR (here, with MLIR)")
    arguments = parser.parse_args()
    generator = random.Random(0)
    prompts = [generator.randint(*arguments.prompts) for _ in range(arguments.requests)]
    if arguments.build:
        build(arguments, prompts)
        return 0
    return serve(arguments, prompts)


def serve(arguments, prompts) -> int:
    import torch

    torch.manual_seed(0)
    shape = MODELS[arguments.model]
    heads, kv_heads, d = shape
    per_request = -(-(max(prompts) + arguments.steps) // arguments.page)
    table = torch.randperm(arguments.requests * per_request, device="cuda").view(arguments.requests, per_request).int()
    layers = model_layers(arguments.model, arguments.layers, (arguments.requests * per_request, arguments.page,
                                                              kv_heads, d))
    started = prefill(layers, table, prompts, shape)
    tokens = [[torch.randn(arguments.requests, 1, count, d, device="cuda", dtype=torch.bfloat16) / 4
               for count in (heads, kv_heads, kv_heads)] for _ in range(arguments.layers)]
    print(torch.cuda.get_device_name(), f"{arguments.model}: {arguments.layers} layers, {arguments.requests} "
          f"requests, prompts {min(prompts)}-{max(prompts)}, pages of {arguments.page}", flush=True)
    results = {}
    for name, step in (("mlir-tile", our_step), ("torch (gathered + SDPA)", torch_step)):
        copies = [Layer([x.clone() for x in layer.pools], layer.window, layer.sinks) for layer in layers]
        lengths = started.clone()  # (each path from the same prefilled pools)
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
        results[name] = first
        print(f"{name}: {arguments.requests / seconds:,.0f} tokens/s, {seconds * 1e3:.3f} ms a step, "
              f"{read_bytes(layers, started, arguments.steps, kv_heads * d) / seconds / 1e9:,.0f} GB/s of K and V",
              flush=True)
        del copies, graph, outputs
    worst = max((a - b).abs().max().item() for a, b in zip(*results.values()))
    print(f"first step's outputs: the two paths within {worst:.1e}", flush=True)
    return 0 if worst < 2e-2 else 1


def read_bytes(layers, started, steps: int, row: int) -> float:
    """The K and V bytes a decode step reads on average over `steps` steps: each layer its requests' keys (a
    window's layer at most its window's), `row` elements of 2 bytes a key."""
    import torch

    seen = started[:, None].double() + torch.arange(1, steps + 1, device=started.device)[None, :]
    keys = sum((seen.clamp(max=layer.window) if layer.window else seen).mean(1).sum().item() for layer in layers)
    return 2 * row * 2 * keys


if __name__ == "__main__":
    raise SystemExit(main())
