"""mlir-tile's kernels as a library: `matmul`, `scaled_mm` and `attention` on torch tensors, as torch operators
(`torch.ops.mlir_tile.*`, with fake implementations, so they run inside `torch.compile`d models).

    from mlir_tile.kernels import matmul, scaled_mm, attention
    y = matmul(x, w, b_layout="nk", bias=b, activation="gelu_tanh")   # gelu(x @ w.T + b), as F.linear lays w
    y = scaled_mm(x8, w8, scale_x, scale_w)                            # fp8 e4m3 in, bf16 out (Hopper)
    y = fp8_linear(x, w)                                               # F.linear trained in fp8 (Hopper)
    y = fp8_grouped_linear(x, w_e, offs)                               # experts' layer trained in fp8 (Hopper)
    h = swiglu_mm(x, swiglu_weights(w_gate, w_up))                      # silu(x w_gate^T) * (x w_up^T) (Hopper)
    y = grouped_mm(x_e, w_e, counts)                                   # experts' rows: [E, T, K] x [E, N, K] (Hopper)
    y = grouped_mm(x, w_e, offsets=offs)                               # sorted by expert: [tokens, K] (Hopper)
    o, lse = attention(q, k, v, causal=True)                           # [batch, heads, seq, d]
    o, lse = attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k)       # packed: [tokens, heads, d]
    o, lse = attention_with_kvcache(q, k_cache, v_cache, lengths, k_new, v_new)  # [batch, seq, heads, d]

Importing this package loads no MLIR and no torch: the operators are registered on first use of `matmul` or
`attention` (or by `import mlir_tile.kernels.ops`, and `.moe_ops` for grouped_mm and swiglu_mm, for code that calls
`torch.ops.mlir_tile.matmul` itself). The kernels
are the ones the wheel ships for the GPU's chip, or built on first use where the `compiler` extra is installed
(`library`). The kernels' builders (`gemm`, `attention`) and the epilogues users write (`epilogues`) are
modules of this package; `python -m mlir_tile.kernels.gemm --help` is their command line.
"""

__all__ = ["attention", "attention_varlen", "attention_with_kvcache", "fp8_grouped_linear", "fp8_linear",
           "grouped_mm", "matmul", "scaled_mm", "swiglu_mm", "swiglu_weights"]


def __getattr__(name: str):
    if name == "attention_with_kvcache":
        from mlir_tile.kernels import kvcache

        return kvcache.attention_with_kvcache
    if name in ("fp8_linear", "fp8_grouped_linear"):
        from mlir_tile.kernels import fp8_training

        return getattr(fp8_training, name)
    if name in ("grouped_mm", "swiglu_mm", "swiglu_weights"):
        from mlir_tile.kernels import moe_ops

        return getattr(moe_ops, name)
    if name in __all__:
        from mlir_tile.kernels import ops

        return getattr(ops, name)
    raise AttributeError(f"module 'mlir_tile.kernels' has no attribute {name!r}")
