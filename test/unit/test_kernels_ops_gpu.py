"""mlir_tile.kernels' torch operators on the GPU, as a user calls them (installed alone, they run the kernels the
wheel ships): `matmul` on random shapes of both dtypes and B layouts, with and without each ready-made
epilogue, against torch's fp32 product, and on Hopper (sm_90) 320 shapes a dtype and epilogue on Hopper's path;
`attention` on random cases (150 a dtype: f16 and bf16) against fp32 softmax attention and its log-sum-exp;
inside a torch.compile'd module; importing them loads no MLIR (the Hopper-only fp8 and mixture-of-experts
operators: test_kernels_ops_hopper_gpu.py). Skipped without torch or a GPU (the reason shown)."""
import random
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the kernels' torch operators need torch")
import mlir_tile.kernels.ops  # noqa: E402,F401  (registers torch.ops.mlir_tile.*)
F = torch.nn.functional
pytestmark = pytest.mark.gpu

GEMM_CASES, ATTENTION_CASES, VIEW_CASES = 240, 300, 320  # attention: 150 each dtype
_hopper_only = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                  reason="Hopper's path (TMA, wgmma) runs on sm_90 only")
ACTIVATIONS = {None: lambda x: x, "relu": F.relu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
               "silu": F.silu}


def test_importing_the_operators_loads_no_mlir():
    ran = subprocess.run([sys.executable, "-c", "import sys; from mlir_tile.kernels import matmul, attention; "
                          "matmul.__name__, attention.__name__; "
                          "print(sorted(m for m in sys.modules if m == 'mlir' or m.startswith('mlir.')))"],
                         capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == "[]", ran.stdout + ran.stderr


def _gemm_case(rng: random.Random, trial: int):
    """(M, N, K, dtype, b_layout, bias?, activation, residual?): sizes of every alignment (odd ones too), one
    case in eight large enough for the 128 x 256 and persistent tiles, every epilogue part alone and
    together."""
    large = trial % 8 == 7
    sizes = [rng.choice([rng.randint(1, 300), rng.randint(1, 40) * 8, rng.randint(200, 1500)]) for _ in range(3)]
    if large:
        sizes = [rng.choice([2048, 4096, 3000]), rng.choice([2048, 4096, 2816]), rng.choice([512, 1024, 200 * 8])]
    dtype = (torch.float16, torch.bfloat16)[trial % 2]
    parts = trial // 2 % 6  # none, bias, each activation alone with the bias half the time, the residual
    activation = [None, None, "relu", "gelu_tanh", "silu", None][parts] if parts in (2, 3, 4) else None
    bias = parts == 1 or (activation is not None and rng.random() < 0.5)
    residual = parts == 5 or rng.random() < 0.15
    return (*sizes, dtype, rng.choice(["kn", "nk"]), bias, activation, residual)


def _operands(m, n, k, dtype, layout, has_bias, has_residual):
    """A, B in [-1, 1) (B laid out as `layout` says), a bias and a residual where asked for."""
    a = torch.rand(m, k, device="cuda", dtype=dtype) * 2 - 1
    b = torch.rand(*((k, n) if layout == "kn" else (n, k)), device="cuda", dtype=dtype) * 2 - 1
    bias = torch.randn(n, device="cuda", dtype=dtype) if has_bias else None
    residual = torch.randn(m, n, device="cuda", dtype=dtype) if has_residual else None
    return a, b, bias, residual


def _wrong(got, a, b, layout, bias, activation, residual):
    """The largest error where `got` is not within the 16-bit rounding (2^-7 relative, room 2) of the fp32
    result and fp32 accumulation in another order (2e-5 per term of at most 1); None where it is."""
    exact = a.float() @ (b.float() if layout == "kn" else b.float().T)
    exact = ACTIVATIONS[activation](exact + (0 if bias is None else bias.float()))
    exact = exact + (0 if residual is None else residual.float())
    error = (got.float() - exact).abs()
    return None if bool((error <= 2 ** -7 * exact.abs() + 2e-5 * a.shape[1] + 2 ** -10).all()) else float(error.max())


def test_matmul_with_each_ready_made_epilogue_matches_torch_in_fp32():
    rng, failures = random.Random(11), []
    for trial in range(GEMM_CASES):
        m, n, k, dtype, layout, has_bias, activation, has_residual = case = _gemm_case(rng, trial)
        a, b, bias, residual = _operands(m, n, k, dtype, layout, has_bias, has_residual)
        got = torch.ops.mlir_tile.matmul(a, b, layout, bias, activation, residual)
        if (worst := _wrong(got, a, b, layout, bias, activation, residual)) is not None:
            failures.append((case, worst))
    assert not failures, failures[:10]


def test_the_sm80_kernels_run_every_epilogue_on_this_gpu_too():
    """The kernels shipped for chips other than Hopper (pair stores without stmatrix), JIT-compiled here."""
    from mlir_tile.kernels import epilogues
    from mlir_tile.kernels.gemm import launch as gemm_launch
    from mlir_tile.kernels.library import KernelLibrary
    from mlir_tile.runtime import Runtime

    launcher, rng, failures = gemm_launch.Matmul(KernelLibrary(Runtime(), chip="sm_80")), random.Random(3), []
    for trial in range(32):
        m, n, k, dtype, layout, has_bias, activation, has_residual = case = _gemm_case(rng, trial)
        a, b, bias, residual = _operands(m, n, k, dtype, layout, has_bias, has_residual)
        chosen = None if not (has_bias or activation or has_residual) else epilogues.selectable
        operands = () if chosen is None else epilogues.selection(bias, activation, residual)
        got = launcher(a, b, b_major=layout, epilogue=chosen, operands=operands)
        if (worst := _wrong(got, a, b, layout, bias, activation, residual)) is not None:
            failures.append((case, worst))
    assert not failures, failures[:10]


def test_matmul_takes_leading_dimensions_an_out_tensor_and_an_epilogue_of_its_own(monkeypatch):
    """The epilogue of its own is built where the compiler is installed; a GPU host takes it from the cache
    test/gpu_inputs.py fills (`make gpu-inputs`)."""
    from test_runtime_gpu import epilogue_cache

    from mlir_tile.kernels import matmul

    monkeypatch.setenv("MLIR_TILE_CACHE_DIR", epilogue_cache())
    from mlir_tile.kernels.epilogues import bias, gelu_tanh

    x = torch.rand(2, 100, 256, device="cuda", dtype=torch.bfloat16) - 0.5
    w, b = torch.rand(384, 256, device="cuda", dtype=torch.bfloat16) - 0.5, torch.randn(384, device="cuda",
                                                                                       dtype=torch.bfloat16)
    expected = F.gelu(F.linear(x.float(), w.float(), b.float()), approximate="tanh")
    out = torch.empty(2, 100, 384, device="cuda", dtype=torch.bfloat16)
    for got in (matmul(x, w, b_layout="nk", bias=b, activation="gelu_tanh", out=out),
                matmul(x, w, b_layout="nk", epilogue=bias.then(gelu_tanh), operands=(b,))):
        assert got.shape == (2, 100, 384)
        assert bool(((got.float() - expected).abs() <= 2 ** -7 * expected.abs() + 2 ** -9).all())


def test_attention_matches_fp32_softmax_attention_and_its_log_sum_exp():
    """Random cases of each 16-bit dtype against fp32, on each side of the measured table's lengths (Hopper: d 64's
    kernels up to S 1024, 2048 and, causal, 4096) and longer (each head dim's and mask's shape)."""
    from mlir_tile.kernels import attention

    rng, failures = random.Random(5), []
    head_dims = [64, 128, 256] if torch.cuda.get_device_capability() == (9, 0) else [64, 128]  # 256: Hopper's path
    for trial in range(ATTENTION_CASES):
        batch, heads, d = rng.randint(1, 2), rng.randint(1, 4), rng.choice(head_dims)
        seq = rng.choice([1, 17, 64, 65, 128, 129, 200, 1025, 2049, 4097, rng.randint(1, 700),
                          rng.randint(1025, 4200)])
        causal = rng.random() < 0.5
        dtype = (torch.float16, torch.bfloat16)[trial % 2]
        q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=dtype) for _ in range(3))
        o, lse = attention(q, k, v, causal=causal)
        scores = q.float() @ k.float().transpose(-1, -2) / d ** 0.5
        if causal:
            scores = scores.masked_fill(torch.ones(seq, seq, device="cuda").triu(1).bool(), float("-inf"))
        expected = scores.softmax(-1) @ v.float()
        o_error = float((o.float() - expected).abs().max())
        lse_error = float((lse - scores.logsumexp(-1)).abs().max())
        if o_error > (2 ** -6 if dtype == torch.bfloat16 else 2 ** -9) + 2 ** -7 or lse_error > 1e-3:
            failures.append(((batch, heads, seq, d, causal, dtype), o_error, lse_error))
    assert not failures, failures[:10]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(128, 512, device="cuda", dtype=torch.bfloat16)
        self.down = torch.nn.Linear(512, 128, device="cuda", dtype=torch.bfloat16)

    def forward(self, x, use_library: bool = True):
        q = k = v = x.view(x.shape[0], 2, x.shape[1], 64)
        if use_library:
            from mlir_tile.kernels import attention, matmul

            o, _ = attention(q, k, v, causal=True)
            h = matmul(o.reshape(x.shape), self.up.weight, b_layout="nk", bias=self.up.bias, activation="silu")
            return matmul(h, self.down.weight, b_layout="nk", bias=self.down.bias, residual=x)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.down(F.silu(self.up(o.reshape(x.shape)))) + x


def test_the_operators_run_inside_a_torch_compiled_module():
    block, x = Block(), torch.randn(4, 256, 128, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        compiled = torch.compile(block, fullgraph=True)(x)
        expected = block(x, use_library=False)
    assert compiled.shape == expected.shape
    assert float((compiled.float() - expected.float()).abs().max()) < 0.1


@_hopper_only
def test_a_module_compiled_to_replay_cuda_graphs_gives_the_eager_result_on_each_new_input():
    """torch.compile(mode="reduce-overhead") (Inductor's CUDA graph trees, as an inference engine's decode step):
    the block's operators recorded once and replayed; each call on new values (copied into the graph's inputs
    by torch) equals the block run eagerly with the operators, bit for bit."""
    block = Block()
    compiled = torch.compile(block, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for seed in range(4):
            x = torch.randn(4, 256, 128, device="cuda", dtype=torch.bfloat16,
                            generator=torch.Generator(device="cuda").manual_seed(seed))
            assert torch.equal(compiled(x).clone(), block(x))


def test_what_the_kernels_do_not_take_is_a_value_error_at_the_call():
    from mlir_tile.kernels import attention, matmul

    a = torch.ones(8, 8, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="both float16 or both bfloat16"):
        matmul(a, a.float())
    with pytest.raises(ValueError, match="activation is one of relu, gelu_tanh, silu"):
        matmul(a, a, activation="gelu")
    with pytest.raises(ValueError, match="epilogue operand 'bias' is a contiguous 8 tensor"):
        matmul(a, a, bias=torch.ones(9, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="head dim 64, 128, 256"):
        attention(*(torch.ones(1, 1, 4, 32, device="cuda", dtype=torch.float16),) * 3)


HOPPER_CASES = 320  # random shapes a dtype and epilogue on Hopper's path, and a kind of fp8 scales


def _hopper_sizes(rng: random.Random, multiple: int) -> tuple[int, int, int]:
    """M of any size (1, primes, past every tile), N and K multiples of `multiple` (TMA's 16-byte rows), each
    often a non-multiple of every tile extent."""
    special = [1, 2, 3, 7, 13, 61, 127, 128, 129, 257, 1000, 1031, 4097]
    m = rng.choice(special) if rng.random() < 0.4 else rng.randint(1, 1500)
    n, k = (multiple * (rng.choice([1, 2, 9, 16, 17, 33, 127]) if rng.random() < 0.4 else rng.randint(1, 2400 // multiple))
            for _ in range(2))
    return m, n, k


@_hopper_only
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation", [None, "gelu_tanh", "silu"])
def test_the_hopper_path_matches_torch_on_random_shapes_with_each_epilogue(dtype, activation):
    """HOPPER_CASES products on the Hopper kernels the library ships (K not split: `splits=1`), B [K, N] and
    [N, K] in turn, plain or with bias + the activation (the shipped `epilogues.selectable`)."""
    from mlir_tile.kernels import epilogues, ops

    launcher, rng, failures = ops.kernels_on(torch.device("cuda")).matmul, random.Random(23), []
    for trial in range(HOPPER_CASES):
        (m, n, k), layout = _hopper_sizes(rng, 8), ("kn", "nk")[trial % 2]
        a, b, bias, _ = _operands(m, n, k, dtype, layout, activation is not None, False)
        chosen = None if activation is None else epilogues.selectable
        operands = () if activation is None else epilogues.selection(bias, activation, None)
        got = launcher(a, b, b_major=layout, splits=1, epilogue=chosen, operands=operands)
        worst = _wrong(got, a, b, layout, bias, activation, None)
        if worst is not None or not str(launcher.last_config).endswith("_sm90a"):
            failures.append(((m, n, k, layout), worst, str(launcher.last_config)))
    assert not failures, failures[:10]


@_hopper_only
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation", ["gelu_tanh", "silu"])
def test_the_operator_runs_the_shipped_chains_on_the_measured_tile(dtype, activation):
    """bias + gelu_tanh / silu through the operator on products whose measured tiles fill the SMs: the chain
    kernels shipped for them (`gemm.sm90_tiles.SHIPPED_ACTIVATIONS`), B [K, N] and [N, K] in turn, M and N
    past every tile extent."""
    from mlir_tile.kernels import ops
    from mlir_tile.kernels.gemm import sm90_tiles as hopper_tiles

    launcher, rng, failures = ops.kernels_on(torch.device("cuda")).matmul, random.Random(31), []
    for trial in range(16):
        m, n, k, layout = rng.randint(2000, 4100), 8 * rng.randint(256, 520), 8 * rng.randint(1, 300), ("kn", "nk")[trial % 2]
        a, b, bias, _ = _operands(m, n, k, dtype, layout, True, False)
        got = torch.ops.mlir_tile.matmul(a, b, layout, bias, activation, None)
        measured = hopper_tiles.measured_tile({torch.float16: "f16", torch.bfloat16: "bf16"}[dtype], layout)
        worst = _wrong(got, a, b, layout, bias, activation, None)
        if worst is not None or launcher.last_config != hopper_tiles.hopper_config(layout, measured):
            failures.append(((m, n, k, layout), worst, str(launcher.last_config)))
    assert not failures, failures[:10]


def test_attention_on_an_sm80_library_matches_fp32_attention():
    """The sm_80 library's attention (issue 58: the FlashAttention-2-form kernel built for sm_80, O stored
    without stmatrix; shipped, or built where the compiler is), JIT-compiled on this GPU as an A100 user's runs:
    random cases of both dtypes, d 64 and 128, causal or not, against fp32; a view off 16 bytes copied onto them
    first (the kernel's 16-byte copies would fault), fp8 refused (Hopper's only)."""
    from mlir_tile.kernels.flash import launch as flash_launch
    from mlir_tile.kernels.library import KernelLibrary
    from mlir_tile.runtime import Runtime

    paths, rng, failures = flash_launch.AttentionPaths(KernelLibrary(Runtime(), chip="sm_80")), random.Random(11), []
    assert paths.hopper is None
    for trial in range(48):
        batch, heads, d = rng.randint(1, 2), rng.randint(1, 3), rng.choice([64, 128])
        seq, causal, dtype = rng.choice([1, 17, 65, 129, 200, rng.randint(1, 1500)]), rng.random() < 0.5, \
            (torch.float16, torch.bfloat16)[trial % 2]
        q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=dtype) for _ in range(3))
        o, lse = paths(q, k, v, causal=causal)
        scores = q.float() @ k.float().transpose(-1, -2) / d ** 0.5
        if causal:
            scores = scores.masked_fill(torch.ones(seq, seq, device="cuda").triu(1).bool(), float("-inf"))
        o_error = float((o.float() - scores.softmax(-1) @ v.float()).abs().max())
        lse_error = float((lse - scores.logsumexp(-1)).abs().max())
        if o_error > (2 ** -6 if dtype == torch.bfloat16 else 2 ** -9) + 2 ** -7 or lse_error > 1e-3:
            failures.append(((batch, heads, seq, d, causal, dtype), o_error, lse_error))
    assert not failures, failures[:10]
    view = torch.randn(64 * 64 + 1, device="cuda", dtype=torch.float16)[1:].view(1, 1, 64, 64)  # 2 bytes in
    o, _ = paths(view, view, view)  # (copied onto 16 bytes first: the kernel's 16-byte copies would fault)
    expected = F.scaled_dot_product_attention(view.float(), view.float(), view.float())
    assert float((o.float() - expected).abs().max()) <= 2 ** -9 + 2 ** -7
    with pytest.raises(ValueError, match="run on Hopper's path, which this GPU \\(sm_80\\) has not"):
        paths(*(q.to(torch.float8_e4m3fn),) * 3, descales=(torch.ones(1, device="cuda"),) * 3)


def _offset(tensor, elements: int):
    """`tensor`'s values in a contiguous view `elements` elements into a larger buffer (what x[1:], narrow and
    split give: its data off 16 bytes unless `elements` is a multiple of 8)."""
    buffer = torch.empty(tensor.numel() + elements, dtype=tensor.dtype, device=tensor.device)
    view = buffer[elements:].view(tensor.shape)
    view.copy_(tensor)
    return view


def test_views_at_any_offset_run_and_match_torch():
    """matmul's A, B, out, bias and residual and attention's q, k, v as views 0-7 elements into larger buffers,
    random shapes (N and K multiples of 8 among them, which without the addresses' alignment took 16-byte
    copies), each dtype, B layout and activation, with and without a bias, a residual and an out in turn: each
    result right, and no fault (a misaligned copy would end the process's CUDA context)."""
    from mlir_tile.kernels import attention, matmul

    rng, failures = random.Random(17), []
    for trial in range(VIEW_CASES):
        m, n, k = rng.choice([1, 33, 128, 300]), 8 * rng.randint(1, 40), 8 * rng.randint(1, 40)
        if trial % 3 == 0:
            n, k = rng.randint(1, 300), rng.randint(1, 300)
        dtype, layout = (torch.float16, torch.bfloat16)[trial % 2], ("kn", "nk")[trial // 2 % 2]
        activation = [None, "relu", "gelu_tanh", "silu"][trial // 4 % 4]
        has_bias, has_residual, into = rng.random() < 0.7, rng.random() < 0.4, rng.random() < 0.5
        a, b, bias, residual = _operands(m, n, k, dtype, layout, has_bias, has_residual)
        a, b = (_offset(x, rng.randint(0, 7)) for x in (a, b))
        bias, residual = (None if x is None else _offset(x, rng.randint(0, 7)) for x in (bias, residual))
        out = _offset(torch.empty(m, n, device="cuda", dtype=dtype), rng.randint(0, 7)) if into else None
        got = matmul(a, b, b_layout=layout, bias=bias, activation=activation, residual=residual, out=out)
        wrote = out is None or got.data_ptr() == out.data_ptr()
        if not wrote or (worst := _wrong(got, a, b, layout, bias, activation, residual)) is not None:
            failures.append(("matmul", m, n, k, dtype, layout, activation, has_bias, has_residual, into, worst))
    for trial in range(24):
        d, seq, causal = rng.choice([64, 128]), rng.randint(1, 600), rng.random() < 0.5
        q, k, v = (_offset(torch.randn(1, 2, seq, d, device="cuda", dtype=torch.bfloat16), rng.randint(0, 7))
                   for _ in range(3))
        o, lse = attention(q, k, v, causal=causal)
        expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        if (o.float() - expected).abs().max().item() > 2 ** -6:
            failures.append(("attention", d, seq, causal))
    if torch.cuda.get_device_capability() == (9, 0):  # scaled_mm (Hopper's): A, B and out at any offset
        from mlir_tile.kernels import ops, scaled_mm

        for trial in range(12):
            m, n, k = rng.randint(1, 300), 16 * rng.randint(1, 20), 16 * rng.randint(1, 20)
            a, b = (torch.randint(-3, 4, shape, device="cuda").float() for shape in ((m, k), (n, k)))
            a8, b8 = (_offset(x.to(torch.float8_e4m3fn), rng.randint(0, 15)) for x in (a, b))
            out, one = _offset(torch.empty(m, n, device="cuda", dtype=torch.bfloat16), rng.randint(0, 7)), torch.ones(
                1, device="cuda")
            got = (scaled_mm(a8, b8, one, one) if trial % 2 else  # (the launcher beneath: an out of the caller's)
                   ops.kernels_on(a8.device).scaled(a8, b8, one, one, b_major="nk", out=out))
            wrote_out = trial % 2 == 1 or got.data_ptr() == out.data_ptr()
            if not torch.equal(got, (a @ b.T).to(torch.bfloat16)) or not wrote_out:
                failures.append(("scaled_mm", m, n, k))
    torch.cuda.synchronize()
    assert not failures, failures[:10]


def test_empty_tensors_give_what_torch_gives():
    """M, N or K 0 (leading dimensions too), batch, heads or sequence 0: torch's results (empty, or with K 0
    the epilogue of a zero product), no error from the driver."""
    from mlir_tile.kernels import attention, matmul, scaled_mm

    for (m, n, k), layout in [((0, 64, 32), "nk"), ((16, 0, 32), "kn"), ((16, 24, 0), "nk"), ((16, 24, 0), "kn")]:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(*((n, k) if layout == "nk" else (k, n)), device="cuda", dtype=torch.bfloat16)
        bias, residual = torch.randn(n, device="cuda", dtype=torch.bfloat16), torch.randn(m, n, device="cuda",
                                                                                          dtype=torch.bfloat16)
        weight = b if layout == "nk" else b.T
        for got, expected in ((matmul(a, b, b_layout=layout), F.linear(a, weight)),
                              (matmul(a, b, b_layout=layout, bias=bias, activation="silu", residual=residual),
                               F.silu(F.linear(a.float(), weight.float(), bias.float())) + residual.float())):
            assert got.shape == expected.shape and torch.allclose(got.float(), expected.float(), atol=2 ** -6)
    x = torch.randn(2, 0, 32, device="cuda", dtype=torch.float16)  # (leading dimensions with no rows)
    assert matmul(x, torch.randn(32, 48, device="cuda", dtype=torch.float16)).shape == (2, 0, 48)
    for shape in [(0, 4, 128, 64), (2, 0, 128, 64), (2, 4, 0, 64)]:
        q = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
        o, lse = attention(q, q, q, causal=True)
        assert o.shape == shape and lse.shape == shape[:3] and o.dtype == q.dtype and lse.dtype == torch.float32
    if torch.cuda.get_device_capability() == (9, 0):
        one = torch.ones(1, device="cuda")
        for m, n, k in [(0, 32, 64), (16, 0, 64), (16, 32, 0)]:
            a8 = torch.zeros(m, k, device="cuda").to(torch.float8_e4m3fn)
            b8 = torch.zeros(n, k, device="cuda").to(torch.float8_e4m3fn)
            got = scaled_mm(a8, b8, one, one)
            assert got.shape == (m, n) and got.dtype == torch.bfloat16 and not got.any()
    torch.cuda.synchronize()


def _relative(x, reference) -> float:
    return float((x.float() - reference).norm() / reference.norm().clamp_min(1e-30))


def test_matmul_trains_its_gradients_within_torchs_own_bf16_error(monkeypatch):
    """y = activation(x @ w + bias) + residual through the operator (each epilogue, both B layouts, leading
    dimensions): the gradients of x, w, bias and residual against fp32 autograd are within 1.5x the error of
    torch's own bf16 autograd of the same graph (plus 1e-3); a torch.compile(fullgraph=True) training step
    through it, and one with mode="reduce-overhead" (CUDA graphs) on new inputs each step; an epilogue of one's
    own's backward says in one line that there is none."""
    from test_runtime_gpu import epilogue_cache

    from mlir_tile.kernels import matmul
    from mlir_tile.kernels.epilogues import bias as bias_epilogue, gelu_tanh

    rng, failures = random.Random(41), []
    for trial in range(24):
        m, n, k = rng.choice([1, 64, 300]), 8 * rng.randint(1, 64), 8 * rng.randint(1, 64)
        layout, activation = ("kn", "nk")[trial % 2], rng.choice([None, "relu", "gelu_tanh", "silu"])
        has_bias, has_residual = rng.random() < 0.7, rng.random() < 0.4
        leaves = [torch.randn(2, m, k, device="cuda"), torch.randn(*((k, n) if layout == "kn" else (n, k)),
                                                                      device="cuda") / k ** 0.5,
                  torch.randn(n, device="cuda") if has_bias else None,
                  torch.randn(2, m, n, device="cuda") if has_residual else None]
        upstream = torch.randn(2, m, n, device="cuda")

        def run(dtype, ours):
            x, w, b, r = (None if t is None else t.detach().to(dtype).requires_grad_() for t in leaves)
            if ours:
                y = matmul(x, w, b_layout=layout, bias=b, activation=activation, residual=r)
            else:
                y = F.linear(x, w if layout == "nk" else w.T, b)
                y = (ACTIVATIONS[activation](y)) + (0 if r is None else r)
            y.backward(upstream.to(dtype))
            return [None if t is None else t.grad for t in (x, w, b, r)]

        reference, theirs, ours = run(torch.float32, False), run(torch.bfloat16, False), run(torch.bfloat16, True)
        for name, expected, torch16, got in zip("xwbr", reference, theirs, ours):
            if expected is not None and _relative(got, expected) > 1.5 * _relative(torch16, expected) + 1e-3:
                failures.append((m, n, k, layout, activation, name, _relative(got, expected),
                                 _relative(torch16, expected)))
    assert not failures, failures[:10]

    layer = torch.nn.Linear(256, 512, device="cuda", dtype=torch.bfloat16)
    step = torch.compile(lambda x: matmul(x, layer.weight, b_layout="nk", bias=layer.bias, activation="silu")
                         .float().square().mean(), fullgraph=True)
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    step(x).backward()
    compiled = layer.weight.grad.clone()
    layer.weight.grad = None
    F.silu(F.linear(x.float(), layer.weight.float(), layer.bias.float())).square().mean().backward()
    assert _relative(compiled, layer.weight.grad.float()) < 2e-2
    square = torch.nn.Linear(256, 256, device="cuda", dtype=torch.bfloat16)  # (a residual of x's shape)
    graphed = torch.compile(lambda x: matmul(x, square.weight, b_layout="nk", bias=square.bias, activation="gelu_tanh",
                                             residual=x).float().square().mean(), mode="reduce-overhead",
                            fullgraph=True)
    for _ in range(4):  # (CUDA graphs recorded after the first steps, then replayed on each new x)
        x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        square.weight.grad = square.bias.grad = None
        graphed(x).backward()
        got = [t.grad.clone() for t in (x, square.weight, square.bias)]
        x.grad = square.weight.grad = square.bias.grad = None
        y = F.gelu(F.linear(x.float(), square.weight.float(), square.bias.float()), approximate="tanh") + x.float()
        y.square().mean().backward()
        assert all(_relative(g, t.grad.float()) < 2e-2 for g, t in zip(got, (x, square.weight, square.bias)))

    q = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    monkeypatch.setenv("MLIR_TILE_CACHE_DIR", epilogue_cache())  # (the epilogue's kernels)
    w = torch.randn(64, 32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    zeros = torch.zeros(32, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="epilogue 'bias\\+gelu_tanh' has no derivative here"):
        matmul(q.detach()[0, 0], w, epilogue=bias_epilogue.then(gelu_tanh), operands=(zeros,)).sum().backward()


def test_the_operators_run_from_another_thread():
    """A thread other than the one that made the device's runtime (a server's worker, torch's autograd engine):
    the runtime makes its context current there first (else: CUDA_ERROR_INVALID_CONTEXT)."""
    import threading

    from mlir_tile.kernels import attention, matmul

    matmul(torch.ones(8, 8, device="cuda", dtype=torch.float16), torch.ones(8, 8, device="cuda", dtype=torch.float16))
    results = []

    def work():
        try:
            q = torch.randn(1, 2, 256, 128, device="cuda", dtype=torch.bfloat16)
            x, w = (torch.randn(300, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            expected = F.scaled_dot_product_attention(q.float(), q.float(), q.float())
            results.append(float((attention(q, q, q)[0].float() - expected).abs().max()) <= 2 ** -6
                           and _wrong(matmul(x, w, b_layout="nk"), x, w, "nk", None, None, None) is None)
        except Exception as error:  # (reported below, not lost in the thread)
            results.append(repr(error))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert results == [True], results


@_hopper_only
def test_the_operators_are_captured_in_a_cuda_graph_and_replay_on_new_inputs():
    """torch.cuda.graph captures matmul (Hopper's TMA kernels and a fused epilogue), scaled_mm and attention
    (causal, and a shape whose maps are new at the capture): their tensor maps go in the launch's parameters, so
    the capture copies nothing from the host; replayed after new values are copied into the captured inputs, each
    output is what the eager call gives on those values, bit for bit."""
    from mlir_tile.kernels import attention, matmul, scaled_mm

    def inputs(seed):
        generator = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(1000, 4096, device="cuda", dtype=torch.bfloat16, generator=generator)
        w = torch.randn(3072, 4096, device="cuda", dtype=torch.bfloat16, generator=generator) / 64
        bias = torch.randn(3072, device="cuda", dtype=torch.bfloat16, generator=generator)
        q, k, v = (torch.randn(2, 8, 1000, 128, device="cuda", dtype=torch.float16, generator=generator)
                   for _ in range(3))
        x8, w8 = (torch.randn(512, 1024, device="cuda", generator=generator).to(torch.float8_e4m3fn)
                  for _ in range(2))
        return [x, w, bias, q, k, v, x8, w8]

    scale = torch.ones(1, device="cuda")

    def step(x, w, bias, q, k, v, x8, w8):
        return [matmul(x, w, b_layout="nk", bias=bias, activation="silu"), attention(q, k, v, causal=True)[0],
                attention(*(x[:, :, :640].contiguous() for x in (q, k, v)))[0], scaled_mm(x8, w8, scale, scale)]

    static = inputs(1)
    step(*[x.clone() for x in static])  # (the kernels loaded, outside the capture: as torch asks of a warm-up)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step(*static)
    fresh = inputs(2)
    for into, value in zip(static, fresh):
        into.copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    for got, expected in zip(outputs, step(*fresh)):
        assert torch.equal(got, expected)


@_hopper_only
def test_the_operators_registrations_pass_torchs_opcheck():
    """torch.library.opcheck on each operator as registered on the dispatcher (`ops._operator`): its schema
    against what it does to its inputs, its fake implementation against the real outputs, its autograd
    registration."""
    def tensor(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device="cuda").to(dtype)

    x, w, bias = tensor(100, 256), tensor(384, 256), tensor(384)
    q = tensor(1, 2, 200, 64, dtype=torch.float16)
    x8, w8, scale = tensor(64, 128, dtype=torch.float8_e4m3fn), tensor(96, 128, dtype=torch.float8_e4m3fn), tensor(
        1, dtype=torch.float32)
    every = ("test_schema", "test_faketensor", "test_autograd_registration")
    for operator, arguments, checks in (
            (torch.ops.mlir_tile.matmul.default, (x, w, "nk", bias, "silu", None), every),
            (torch.ops.mlir_tile.matmul_out.default, (x, w, "nk", None, None, None, tensor(100, 384)), every),
            (torch.ops.mlir_tile.attention.default, (q, q, q, True), every),
            # (test_schema multiplies the inputs, which torch does not do in float8_e4m3fn)
            (torch.ops.mlir_tile.scaled_mm.default, (x8, w8, scale, scale, "nk"), every[1:])):
        torch.library.opcheck(operator, arguments, test_utils=checks)


def test_repeated_eager_calls_take_their_plan_and_match_torch_on_new_tensors():
    """A call like an earlier one (shapes, dtypes, layout, epilogue, alignment) runs that call's launch plan on
    its own tensors (`ops._EagerMatmul`, `PlannedAttention`): three calls of each case on fresh random tensors,
    each right (a plan that kept an operand's address, its tensor maps or the epilogue's operands would be wrong
    from the second on), the outputs contiguous, and a view off 16 bytes after them still right; `scaled_mm`
    (Hopper) bit for bit so."""
    from mlir_tile.kernels import attention, matmul, ops

    rng, failures = random.Random(23), []
    cases = [_gemm_case(rng, trial) for trial in range(24)]
    cases += [(16, 4096, 4096, torch.bfloat16, "nk", True, "silu", False),  # (split-K's workspace, selectable)
              (300, 512, 256, torch.float16, "kn", True, "gelu_tanh", True)]
    for m, n, k, dtype, layout, has_bias, activation, has_residual in cases:
        for call in range(3):
            a, b, bias, residual = _operands(m, n, k, dtype, layout, has_bias, has_residual)
            a = a.view(1, m, k) if call == 1 else a  # (leading dimensions: another key)
            residual = residual.view(1, m, n) if call == 1 and residual is not None else residual
            got = matmul(a, b, b_layout=layout, bias=bias, activation=activation, residual=residual)
            worst = _wrong(got.view(m, n), a.view(m, k), b, layout, bias, activation,
                           None if residual is None else residual.view(m, n))
            if worst is not None or not got.is_contiguous():
                failures.append(("matmul", m, n, k, layout, has_bias, activation, has_residual, call, worst))
    assert any(isinstance(entry, ops._EagerMatmul) and entry.template for entry in ops._eager.values())
    for batch, heads, seq, d, causal in [(1, 8, 128, 128, False), (2, 3, 700, 64, True), (1, 2, 129, 128, True)]:
        for call in range(4):
            q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            if call == 3:
                q = _offset(q, 3)
            o, lse = attention(q, k, v, causal=causal)
            expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
            scores = q.float() @ k.float().transpose(-1, -2) / d ** 0.5
            if causal:
                scores = scores.masked_fill(torch.ones(seq, seq, device="cuda").triu(1).bool(), float("-inf"))
            lse_error = (lse - scores.logsumexp(-1)).abs().max().item()
            if (o.float() - expected).abs().max().item() > 2 ** -6 or lse_error > 1e-3 or not (
                    o.is_contiguous() and lse.is_contiguous() and lse.shape == (batch, heads, seq)):
                failures.append(("attention", batch, heads, seq, d, causal, call))
    if torch.cuda.get_device_capability() == (9, 0):
        from mlir_tile.kernels import scaled_mm

        for m, n, k, layout in [(16, 4096, 4096, "nk"), (200, 256, 512, "kn")]:
            for call in range(3):
                a, b = (torch.randint(-3, 4, shape, device="cuda").float() for shape in ((m, k), (n, k)))
                scale_a, scale_b = (2.0 ** -torch.randint(0, 3, (1,), device="cuda").float() for _ in range(2))
                b8 = b.to(torch.float8_e4m3fn) if layout == "nk" else b.T.contiguous().to(torch.float8_e4m3fn)
                got = scaled_mm(a.to(torch.float8_e4m3fn), b8, scale_a, scale_b, b_layout=layout)
                if not torch.equal(got, ((a @ b.T) * scale_a * scale_b).to(torch.bfloat16)):
                    failures.append(("scaled_mm", m, n, k, layout, call))
    torch.cuda.synchronize()
    assert not failures, failures[:10]
