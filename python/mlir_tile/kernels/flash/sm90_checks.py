"""Hopper attention's PTX run on the GPU against numpy: inputs (fp8 quantized), the bounds of the check."""
from __future__ import annotations

import math

from mlir_tile.kernels.common import output_element
from mlir_tile.kernels.flash.sm90 import KERNEL
from mlir_tile.kernels.flash.sm90_layouts import boxes
from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig


def _inputs(config: HopperAttentionConfig, shape: tuple, rng) -> tuple[list, list]:
    """Random q, k, v of `shape` ([batch x heads, seq, d]) as the kernel takes them, and their values: 16-bit,
    uniform in [-1, 1); fp8, normal with std 2 (peaked rows, so that a key misplaced in P V shows) times 2^-2 to
    2^2 a head, quantized with a descale a head (max |x| / 448: the kernel reads its item's, stride 1), the
    values descaled."""
    import numpy as np

    from mlir_tile.isa import fp8, halves

    if not config.fp8:
        raw = [halves.encode(rng.uniform(-1, 1, shape), config.element) for _ in range(3)]
        return raw, [halves.decode(x, config.element) for x in raw]
    raw, values, descales = [], [], []
    for _ in range(3):
        real = rng.normal(0, 2, shape) * 2.0 ** rng.uniform(-2, 2, (shape[0], 1, 1))
        descale = (np.abs(real).max(axis=(1, 2), keepdims=True) / 448).astype(np.float32)
        raw.append(fp8.encode(real / descale, "e4m3"))
        values.append(fp8.decode(raw[-1], "e4m3") * descale)
        descales.append(descale.reshape(-1))
    return raw + descales, values


def run_and_check(ptx: str, config: HopperAttentionConfig, *, batch: int = 1, heads: int = 3,
                  seq: int = 200, sms: int | None = None) -> tuple[bool, str]:
    """The kernel of `config` in `ptx` on batch x heads x seq x d random q, k, v (`_inputs`) against numpy's
    fp32 attention of their values (`reference`): O within 8 units of the element's roundoff,
    the log-sum-exp within 1e-3; fp8: O within (2^-4 + 2 e) max |v| (P rounded to e4m3, each weight moved by
    the scores' error e, `fp8_score_error`), the log-sum-exp within 1e-3 + e, each head against its own.
    `sms`: the SMs a persistent grid fills, `ctas_per_sm` CTAs each at most (by default the device's
    multiprocessors; fewer: each CTA walks more items)."""
    import numpy as np

    from mlir_tile.isa.halves import UNIT_ROUNDOFF, decode
    from mlir_tile.kernels.flash.reference import reference
    from mlir_tile.runtime import Runtime

    if min(batch, heads, seq) < 1:
        raise ValueError(f"hopper attention: batch, heads and seq >= 1, got {batch}, {heads}, {seq}")
    d, out = config.head_dim, output_element(config.element)
    inputs, values = _inputs(config, (batch * heads, seq, d), np.random.default_rng(1))
    o, lse = np.zeros((batch * heads, seq, d), np.uint16), np.zeros((batch * heads, seq), np.float32)
    with Runtime() as runtime:
        buffers = [runtime.to_device(x) for x in inputs[:3] + [o, lse] + inputs[3:]]
        box = boxes(config)
        maps = [runtime.tensor_map(int(buffer.handle), (batch * heads * seq, d), d * config.element_bytes, box[name])
                for buffer, name in zip(buffers, "qkv")]
        maps.append(runtime.tensor_map(int(buffers[3].handle), (batch * heads, seq, d), 2 * d, box["o"], 2 * seq * d,
                                       store=True))
        module = runtime.load_ptx(ptx, name=KERNEL)
        grid = config.grid(batch * heads, seq, sms or runtime.device.properties.multiprocessor_count)
        descales = [int(x.handle) for x in buffers[5:]] + ([1, 1] if config.fp8 else [])  # (stride, a row a head)
        module.launch(KERNEL, maps + [int(buffers[4].handle)] + [seq, batch * heads, 1] + descales,
                      grid=grid, block=config.threads, shared_bytes=config.shared_bytes)
        o, lse = runtime.to_host(buffers[3], o), runtime.to_host(buffers[4], lse)
        for buffer in buffers:
            buffer.close()
    expected, expected_lse = reference(*values, config.causal)
    # (each head's errors against its own bounds: fp8's heads differ in magnitude)
    error, lse_error = np.abs(decode(o, out) - expected).max(axis=(1, 2)), np.abs(lse - expected_lse).max(axis=1)
    bound, lse_bound = np.full(batch * heads, 8 * UNIT_ROUNDOFF[out]), np.full(batch * heads, 1e-3)
    if config.fp8:  # P rounded to e4m3, and the scores' error (`fp8_score_error`)
        scores = np.array([fp8_score_error(values[0][h:h + 1], values[1][h:h + 1]) for h in range(batch * heads)])
        bound = (2 ** -4 + 2 * scores) * np.abs(values[2]).max(axis=(1, 2)) + 2 * UNIT_ROUNDOFF[out]
        lse_bound = lse_bound + scores
    ok = bool((error <= bound).all() and (lse_error <= lse_bound).all())
    worst, worst_lse = int(np.argmax(error / bound)), int(np.argmax(lse_error / lse_bound))
    return ok, (f"GPU: attention {batch} x {heads} x {seq} x {d} {config.element}{' causal' if config.causal else ''} "
                f"on Hopper's path ({config}: TMA, wgmma; {grid} CTAs) matches numpy: {ok} (O {error[worst]:.1e} of "
                f"{bound[worst]:.1e}, lse {lse_error[worst_lse]:.1e} of {lse_bound[worst_lse]:.1e}, the worst heads')")


FP8_ACCUMULATION = 2.0 ** -12  # fp8 wgmma's sums: about 13 bits (cuBLAS's fp8 product on the H200 was off by 1.5e-4


def fp8_score_error(q, k) -> float:
    """A bound on how far fp8 wgmma's scores (q k^T / sqrt(d), [heads, seq, d] values) are from exact:
    FP8_ACCUMULATION times the largest sum of |products|; the log-sum-exp moves by as much."""
    import numpy as np

    largest = max(float((np.abs(q[h]) @ np.abs(k[h]).T).max()) for h in range(q.shape[0]))
    return FP8_ACCUMULATION * largest / math.sqrt(q.shape[-1])
