"""The Hopper GEMM's PTX run on the GPU against numpy: tensor maps, inputs, fp8 scales, the check of C."""
from __future__ import annotations

from mlir_tile.kernels.gemm.sm90 import KERNEL, boxes
from mlir_tile.kernels.gemm.sm90_tiles import HopperConfig, hopper_config


def tensor_maps(runtime, a, b, c, m: int, n: int, depth: int, config: HopperConfig) -> list:
    """The tensor maps (by value) of device matrices a (M x K), b ([N, K] or [K, N]) and c (M x N) for the
    kernel's boxes."""
    box = boxes(config)
    b_shape = (n, depth) if config.b_major == "nk" else (depth, n)
    shapes = {"a": (a, (m, depth)), "b": (b, b_shape), "c": (c, (m, n // 2 if config.swiglu else n))}
    return [runtime.tensor_map(int(matrix.handle), shape, shape[1] * box[name].element_bits // 8, box[name],
                               store=name == "c")
            for name, (matrix, shape) in shapes.items()]


def fp8_scales(m: int, n: int, row_scales: bool) -> tuple:
    """The scales fp8 products are checked with (powers of two: exact): 0.5 and 0.25 per tensor, or per row
    2^-(r mod 3) for A's rows r and 2^-(c mod 4) / 2 for B's rows (C's columns) c."""
    import numpy as np

    if not row_scales:
        return np.array([0.5], np.float32), np.array([0.25], np.float32)
    return (2.0 ** -(np.arange(m) % 3)).astype(np.float32), (2.0 ** -(np.arange(n) % 4 + 1)).astype(np.float32)


def block_scales(m: int, n: int, depth: int, row_blocks: bool = False) -> tuple:
    """Blockwise scales (powers of two: exact), scale_a [M, K / 128] 2^-((r + t) mod 3) for A's row r and k-block
    t, scale_b [N / 128, K / 128] 2^-((j + 2 t) mod 4 + 1) for B's block j of rows (`row_blocks`: [N, K / 128],
    for B's row j): each product of a k-block scaled differently from the next."""
    import numpy as np

    from mlir_tile.kernels.gemm.sm90_tiles import BLOCK

    blocks = -(-depth // BLOCK)
    rows, columns = np.arange(m)[:, None], np.arange(n if row_blocks else -(-n // BLOCK))[:, None]
    steps = np.arange(blocks)[None, :]
    return ((2.0 ** -((rows + steps) % 3)).astype(np.float32),
            (2.0 ** -((columns + 2 * steps) % 4 + 1)).astype(np.float32))


def scaled_exact(a, b, scales, blockwise: bool):
    """The exact product of fp8 values a (M x K) and b (K x N) times their scales: per tensor or row (`fp8_scales`),
    or blockwise (`block_scales`: each 128-deep block of K times its row's and its column's block's, or with
    scale_b's rows N, its column's own)."""
    import numpy as np

    from mlir_tile.kernels.gemm.sm90_tiles import BLOCK

    if not blockwise:
        return a @ b * scales[0][:, None] * scales[1][None, :]
    total = np.zeros((a.shape[0], b.shape[1]))
    for t in range(scales[0].shape[1]):
        block = slice(t * BLOCK, (t + 1) * BLOCK)
        column_scales = (scales[1][:, t] if scales[1].shape[0] == b.shape[1] and b.shape[1] > 1
                         else np.repeat(scales[1][:, t], BLOCK)[:b.shape[1]])
        total += a[:, block] @ b[block] * scales[0][:, t][:, None] * column_scales[None, :]
    return total


def inputs_and_check(m: int, n: int, depth: int, element: str, seed: int = 5, row_scales: bool = False,
                     blockwise: bool = False, swiglu: bool = False, row_blocks: bool = False):
    """(A bits M x K, B bits K x N, the fp8 scales, check(C bits) -> (ok, largest error)) of a product of
    `element`: 16-bit uniform values against numpy (`gemm.inputs`, `gemm.check`; no scales); e4m3 small
    integers (exact products and sums), C the bf16 of the product times `fp8_scales`' (`blockwise`: times
    `block_scales`', k-block by k-block, `row_blocks` scale_b's by B's rows); `swiglu` (16-bit): C M x N / 2,
    `reference.check_swiglu`."""
    import numpy as np

    from mlir_tile.isa import fp8
    from mlir_tile.isa.halves import UNIT_ROUNDOFF, decode
    from mlir_tile.kernels.gemm.reference import check, check_swiglu, inputs

    if element != "e4m3":
        a, b = inputs(m, n, depth, seed=seed, element=element)
        return a, b, (), lambda c: (check_swiglu if swiglu else check)(c, a, b, element)
    rng = np.random.default_rng(seed)
    a, b = (fp8.encode_integers(rng.integers(-3, 4, shape), element) for shape in ((m, depth), (depth, n)))
    scales = block_scales(m, n, depth, row_blocks) if blockwise else fp8_scales(m, n, row_scales)

    def check_fp8(c):
        exact = scaled_exact(fp8.decode(a, element), fp8.decode(b, element), scales, blockwise)
        error = np.abs(decode(c, "bf16") - exact)
        return bool((error <= UNIT_ROUNDOFF["bf16"] * np.abs(exact)).all()), float(error.max())
    return a, b, scales, check_fp8


def run_and_check(ptx: str, *, dtype: str = "f16", b_major: str = "nk", tile: dict | None = None,
                  shape: tuple[int, int, int] = (1000, 1016, 504), ctas: int | None = None,
                  row_scales: bool = False, splits: int = 3) -> tuple[bool, str]:
    """The kernel of `tile` (HopperConfig's fields, `hopper_config`; default: the element's) in `ptx` on an
    M x N x K product of random values, against numpy (`inputs_and_check`); `ctas`: a persistent kernel's grid (default: one per SM, at most one per tile); `row_scales`: an fp8
    kernel's (`HopperConfig.row_scales`); `splits`: a split-K kernel's, launched twice on its workspace and
    flags (the second launch counts on the flags the first's last splits cleared), both C checked and the flags
    zero after."""
    import numpy as np

    from mlir_tile.runtime import Runtime

    config, (m, n, depth) = hopper_config(b_major, tile, dtype, row_scales), shape
    if min(shape) < 1 or n % (16 if config.swiglu else config.unit) or depth % config.k_unit:
        raise ValueError(f"hopper gemm: M, N, K >= 1 with N a multiple of {config.unit} and K of {config.k_unit} (TMA: "
                         f"rows on 16 bytes), not {m} x {n} x {depth}")
    a, b, scales, check = inputs_and_check(m, n, depth, dtype, row_scales=config.row_scales,
                                           blockwise=config.block_scales, swiglu=config.swiglu,
                                           row_blocks=config.row_blocks)
    b_given = b if b_major == "kn" else np.ascontiguousarray(b.T)
    if config.row_blocks:  # (scale_b as the kernel reads it: [K / 128, N rounded up to BN], `hopper_ops.kernel_scales`)
        padded = np.zeros((scales[1].shape[1], -(-n // config.bn) * config.bn), np.float32)
        padded[:, :n] = scales[1].T
        scales = (scales[0], padded)
    with Runtime() as runtime:
        tiles = config.grid(m, n, runtime.device.properties.multiprocessor_count)
        split = ([np.zeros((splits - 1) * m * n, np.float32), np.zeros(tiles, np.int32)] if config.split_k else [])
        c_shape = (m, n // 2 if config.swiglu else n)  # (SwiGLU: a column a gate and up pair)
        matrices = [runtime.to_device(x) for x in (a, b_given, np.zeros(c_shape, np.uint16), *scales, *split)]
        maps = tensor_maps(runtime, *matrices[:3], m, n, depth, config)
        module = runtime.load_ptx(ptx, name=KERNEL)
        arguments = maps + [m, n // config.unit, depth // config.k_unit] + [int(x.handle) for x in matrices[3:]]
        results = []
        for _ in range(1 + config.split_k):
            module.launch(KERNEL, arguments + ([splits] if config.split_k else []),
                          grid=ctas or tiles * (splits if config.split_k else 1), block=config.threads,
                          shared_bytes=config.shared_bytes, cluster=config.cluster if config.cluster > 1 else None)
            results.append(check(runtime.to_host(matrices[2], np.zeros(c_shape, np.uint16))))
        cleared = not config.split_k or not runtime.to_host(matrices[-1], split[1]).any()
        for buffer in matrices:
            buffer.close()
    ok, worst = all(ok for ok, _ in results) and cleared, max(worst for _, worst in results)
    return ok, (f"GPU: {m} x {n} x {depth} {dtype} GEMM on Hopper's path ({config}: TMA, wgmma, stmatrix, TMA "
                f"store) matches numpy: {ok} (largest error {worst:.2e})")


def run_and_check_grouped(ptx: str, *, dtype: str = "bf16", tile: dict, groups: int = 5, rows: int = 256,
                          n: int = 200, depth: int = 504, seed: int = 7) -> tuple[bool, str]:
    """A grouped (masked) kernel of `tile` in `ptx` on `groups` groups of `rows` rows of A [groups x rows, K] and
    B [groups x N, K] (16-bit random values), each group's count random from 0 to `rows` (0, 1 and `rows`
    among them): each group's first count rows of C against numpy's product of its own A and B rows
    (`reference.check`); the rows past the counts hold what the kernel left there (not checked)."""
    import numpy as np

    from mlir_tile.kernels.gemm.reference import check, inputs
    from mlir_tile.runtime import Runtime

    config = hopper_config("nk", tile, dtype)
    rng = np.random.default_rng(seed)
    counts = np.array([0, 1, rows, *rng.integers(0, rows + 1, groups)][:groups], np.int32)
    parts = [inputs(rows, n, depth, seed=seed + g, element=dtype) for g in range(groups)]
    a = np.concatenate([x for x, _ in parts])
    b = np.concatenate([np.ascontiguousarray(y.T) for _, y in parts])  # (each group's B as [N, K])
    with Runtime() as runtime:
        matrices = [runtime.to_device(x) for x in (a, b, np.zeros((groups * rows, n), np.uint16), counts)]
        maps = tensor_maps(runtime, *matrices[:3], groups * rows, n, depth, config)
        maps[1] = runtime.tensor_map(int(matrices[1].handle), (groups * n, depth), depth * 2, boxes(config)["b"])
        module = runtime.load_ptx(ptx, name=KERNEL)
        module.launch(KERNEL, maps + [groups * rows, n // config.unit, depth // config.k_unit, int(matrices[3].handle),
                                      rows], grid=config.grid(groups * rows, n, 1), block=config.threads,
                      shared_bytes=config.shared_bytes)
        c = runtime.to_host(matrices[2], np.zeros((groups * rows, n), np.uint16))
        for buffer in matrices:
            buffer.close()
    results = [check(c[g * rows:g * rows + count], parts[g][0][:count], parts[g][1], dtype)
               for g, count in enumerate(counts) if count]
    ok, worst = all(ok for ok, _ in results), max((worst for _, worst in results), default=0.0)
    return ok, (f"GPU: {groups} groups of {rows} rows, counts {counts.tolist()}, N {n}, K {depth} {dtype} grouped GEMM "
                f"({config}) matches numpy on each group's counted rows: {ok} (largest error {worst:.2e})")

