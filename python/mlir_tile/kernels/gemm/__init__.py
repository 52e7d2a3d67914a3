"""The GEMM family: C = A x B on tensor cores. `sm80` (mma.sync, cp.async, ldmatrix) and `sm90` (TMA, wgmma,
warp-specialized) are siblings that never import each other; `sm80_tiles` and `sm90_tiles` their configurations
(data); `launch` the one place that picks a path; `python -m mlir_tile.kernels.gemm` the command line."""
