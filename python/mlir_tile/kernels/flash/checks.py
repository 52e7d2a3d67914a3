"""An attention kernel's PTX run on the GPU against numpy (`--run-ptx`), and the example's kernel (`configure`)."""
from __future__ import annotations

import numpy as np

from mlir_tile.isa.targets import PORTABLE_CHIP, WARPGROUP_CHIP
from mlir_tile.kernels.flash.reference import reference
from mlir_tile.kernels.flash.sm80 import KERNEL
from mlir_tile.kernels.flash.sm80_tiles import Config, picked


CASE = (3, 200)  # heads, seq: a tail in both the query and the key tiles


def configure(dtype: str = "f16", head_dim: int = 64, causal: bool = False, tuned: bool = False,
              arch: str = PORTABLE_CHIP, **fields):
    """The example's kernel: the default CTA, or (tuned) the one `Attention` runs (`picked`); arch sm_90a:
    Hopper's (`flash.sm90`), `fields` (HopperAttentionConfig's; None: not given) over the head dim's."""
    from mlir_tile.kernels.command_line import given

    fields = given(fields)
    if arch == WARPGROUP_CHIP:
        from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig

        if tuned:
            raise ValueError("attention: --tuned picks the sm_80 kernel's CTA; Hopper's path has its own")
        return HopperAttentionConfig.of(head_dim, causal, dtype, **fields)
    if fields:
        raise ValueError(f"attention: {', '.join('--' + name.replace('_', '-') for name in fields)} set Hopper's "
                         f"path's fields (--arch sm_90a); the sm_80 kernel's are --tuned's")
    return picked(head_dim, causal, dtype) if tuned else Config(head_dim, causal, dtype)


def run_and_check(ptx: str, *, dtype: str = "f16", head_dim: int = 64, causal: bool = False, tuned: bool = False,
                  batch: int = 1, heads: int = CASE[0], seq: int = CASE[1], arch: str = PORTABLE_CHIP,
                  sms: int | None = None, **fields) -> tuple[bool, str]:
    """The kernel of these build options (`configure`) in `ptx` on batch x heads x seq x head_dim random
    q, k, v, against numpy: O within 8 units of `dtype`'s roundoff (inputs in [-1, 1), so |O| < 1), the
    log-sum-exp within 1e-3 (Hopper's: `sm90_checks.run_and_check`, `sms` a persistent grid's CTAs)."""
    from mlir_tile.isa.halves import UNIT_ROUNDOFF, decode, encode
    from mlir_tile.runtime import Runtime

    config = configure(dtype, head_dim, causal, tuned, arch, **fields)
    if arch == WARPGROUP_CHIP:
        from mlir_tile.kernels.flash import sm90_checks as hopper_attention_checks

        return hopper_attention_checks.run_and_check(ptx, config, batch=batch, heads=heads, seq=seq, sms=sms)
    if min(batch, heads, seq) < 1:
        raise ValueError(f"attention: batch, heads and seq >= 1, got {batch}, {heads}, {seq}")
    rng = np.random.default_rng(1)
    q, k, v = (encode(rng.uniform(-1, 1, (batch * heads, seq, head_dim)), dtype) for _ in range(3))
    with Runtime() as runtime:
        module = runtime.load_ptx(ptx, name=KERNEL)
        _, _, _, o, lse = module.launch(KERNEL, [q, k, v, np.zeros_like(q), np.zeros((batch * heads, seq), np.float32),
                                                 seq], grid=config.grid(batch * heads, seq), block=config.threads,
                                        shared_bytes=config.shared_bytes)
    expected, expected_lse = reference(*(decode(x, dtype) for x in (q, k, v)), causal)
    error = float(np.abs(decode(o, dtype) - expected).max())
    lse_error = float(np.abs(lse - expected_lse).max())
    ok = error <= 8 * UNIT_ROUNDOFF[dtype] and lse_error <= 1e-3
    return ok, (f"GPU: attention {batch} x {heads} x {seq} x {head_dim} {dtype}{' causal' if causal else ''} "
                f"({config}) matches numpy: {ok} (O {error:.1e}, lse {lse_error:.1e})")
