"""The attention family: softmax(q k^T / sqrt(d)) v and the log-sum-exp. `sm80` (FlashAttention-2's form: mma.sync,
cp.async, ldmatrix; any sm_80 or newer GPU) and `sm90` (FlashAttention-3's form: TMA, wgmma, warp-specialized) are
siblings that never import each other; `sm80_tiles` and `sm90_tiles` their configurations (data); `launch` the one
place that picks a path; `python -m mlir_tile.kernels.attention` (or `.flash`) the command line. (`attention` is the
torch function: the family is named for FlashAttention.)"""
