"""Attention's extension points on the GPU (Hopper), against torch's fp32 attention with the variant written
out as an explicit mask and score function: examples/sliding_window.py on the grids the launcher picks, and
`testing.attention_variants`' cases on the others (ping-pong, the launched grid, two consumers), a band of
keys read from an integer operand, a score step reading a scalar, and `kernels.flash.masks`' two-sided window,
prefix-LM and Gemma 2's local layer (a window of 1024 keys with soft-capping). The kernels come from `make gpu-inputs`'
cache (a GPU host has no compiler). Skipped without torch or an sm_90 GPU (the reason shown)."""
import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the attention operator needs torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="attention variants run on Hopper's path (TMA, wgmma): sm_90 only")]


@pytest.fixture(autouse=True)
def kernel_cache(monkeypatch):
    from test_runtime_gpu import epilogue_cache

    monkeypatch.setenv("MLIR_TILE_CACHE_DIR", epilogue_cache())


def _expected(q, k, v, case):
    """torch's fp32 attention with the case's variant written out: (o, lse)."""
    seq, d = q.shape[-2:]
    query, key = torch.arange(seq, device="cuda")[:, None], torch.arange(seq, device="cuda")[None, :]
    scores = q.float() @ k.float().transpose(-1, -2) / math.sqrt(d)
    if case.variant in ("softcap", "gemma2_local"):
        scores = case.operands[0] * torch.tanh(scores / case.operands[0])
    hidden = key > query if case.causal else torch.zeros_like(key > query)
    if case.variant == "band":
        hidden = hidden | ((key - query).abs() > case.operands[0])
    if case.variant in ("sliding_window", "gemma2_local"):
        hidden = hidden | (key > query) | (key <= query - 1024)
    if case.variant == "window_100_50":
        hidden = hidden | (key > query + 50) | (key < query - 100)
    if case.variant == "prefix_lm_300":
        hidden = hidden | ((key > query) & (key >= 300))
    scores = scores.masked_fill(hidden, float("-inf"))
    return scores.softmax(-1) @ v.float(), scores.logsumexp(-1)


def test_the_sliding_window_example_matches_torch_on_the_launchers_grids():
    from mlir_tile.testing.attention_variants import EXAMPLE

    ran = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True)
    print(ran.stdout)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_each_variant_matches_torch_with_it_written_out_on_each_grid():
    from mlir_tile.kernels.flash.launch import HopperAttention
    from mlir_tile.kernels.ops import kernels_on
    from mlir_tile.testing.attention_variants import CASES, variants

    named, failures = variants(), []
    torch.manual_seed(3)
    for case in CASES:
        q, k, v = (torch.randn(2, 3, case.seq, case.d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        run = HopperAttention(kernels_on(q.device).library, dict(case.shape))
        o, lse = run(q, k, v, causal=case.causal, variant=named[case.variant], operands=case.operands)
        expected, expected_lse = _expected(q, k, v, case)
        errors = (o.float() - expected).abs().max().item(), (lse - expected_lse).abs().max().item()
        print(case, errors)
        if errors[0] > 2 ** -6 or errors[1] > 1e-3:
            failures.append((case, errors))
    assert not failures, failures


def test_a_variant_through_the_operator_and_what_it_does_not_take():
    """The public operator (a torch op of its own per variant) runs it; keys that break the variant's rules,
    operands of the wrong kind, causal with keys of its own and fp8 are ValueErrors before any launch."""
    from mlir_tile.kernels import attention
    from mlir_tile.kernels.flash.variants import Variant
    from mlir_tile.testing.attention_variants import Case, band, softcap

    q, k, v = (torch.randn(1, 2, 700, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = attention(q, k, v, variant=band, operands=(100,))
    expected, expected_lse = _expected(q, k, v, Case("band", (100,), 64, 700))
    assert (o.float() - expected).abs().max().item() <= 2 ** -6 and (lse - expected_lse).abs().max() <= 1e-3
    backwards = Variant("backwards", keys=lambda query, seq, at: (seq - 1 - query, seq))
    for call, message in ((lambda: attention(q, k, v, variant=band, operands=(1.5,)), "takes operands width"),
                          (lambda: attention(q, k, v, variant=band), "takes operands width"),
                          (lambda: attention(q, k, v, variant=band, operands=(100,), causal=True), "causal=False"),
                          (lambda: attention(q, k, v, variant=backwards), "first non-decreasing; at row 1"),
                          (lambda: attention(q, k, v, variant=softcap, operands=(1.0,), descale_q=q), "float16 or")):
        with pytest.raises(ValueError, match=message):
            call()
