"""mlir_tile.kernels.attention without a GPU: a CTA on the reference model (every fragment against the ISA's tables, O
against numpy), every kernel `Attention` runs assembles with ptxas without spills, the softmax's knobs change
the PTX as they say, and unsupported ones are ValueErrors."""
import re
import shutil
import subprocess
from dataclasses import replace

import pytest

from mlir_tile.kernels.flash import emulation as flash_emulation, sm80 as flash_sm80, sm80_tiles as flash_tiles
from mlir import ir
from mlir_tile.compiler.compile import compile_to_ptx


# the kernels `Attention` runs: each configuration with TUNED's CTA where it has one
PICKED = [replace(config, **flash_tiles.TUNED.get((config.head_dim, config.causal), {})) for config in flash_tiles.CONFIGS]


@pytest.mark.parametrize("config, seq, causal", [(flash_tiles.Config(), 96, True),
                                                 (flash_tiles.Config(head_dim=128), 70, False),
                                                 (PICKED[flash_tiles.CONFIGS.index(flash_tiles.Config(head_dim=128))], 70,
                                                  False)], ids=str)
def test_a_cta_computes_attention_on_the_reference_model(config, seq, causal):
    """Q, K and V fragments against the ISA's tables, P from S's accumulators, O through stmatrix vs numpy."""
    assert "matches numpy" in flash_emulation.emulate(config, seq, causal)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
@pytest.mark.parametrize("config", [c for c in PICKED if c.element != "f16"], ids=str)
def test_every_configuration_assembles_without_spills(tmp_path, config):
    """(bf16's: the f16 twins differ in their conversions only.)"""
    ptx = tmp_path / "attention.ptx"
    ptx.write_text(compile_to_ptx(flash_sm80.build_module(config)))
    assembled = subprocess.run(["ptxas", "-arch=sm_90", "-v", str(ptx), "-o", str(tmp_path / "a.cubin")],
                               capture_output=True, text=True)
    assert assembled.returncode == 0, assembled.stderr
    assert re.search(r"\b0 bytes spill stores", assembled.stderr), assembled.stderr


@pytest.mark.parametrize("config", [flash_tiles.Config(head_dim=96), flash_tiles.Config(element="f32")], ids=str)
def test_unsupported_configurations_are_value_errors(config):
    with pytest.raises(ValueError, match="head dims 64 and 128, f16 and bf16"):
        flash_sm80.build_module(config)


def _loops(ptx: str) -> list[str]:
    """The PTX of each main loop (the unmasked key tiles', then the masked ones'): from a loop's label to
    the branch back to it."""
    loops = []
    for label in re.findall(r"^(\$L__BB\d+_\d+):", ptx, re.M):
        back = re.search(rf"bra(?:\.uni)?\s+{re.escape(label)};", ptx[ptx.index(f"{label}:"):])
        if back and "mma.sync" in ptx[ptx.index(f"{label}:"):][:back.end()]:
            loops.append(ptx[ptx.index(f"{label}:"):][:back.end()])
    return loops


@pytest.mark.parametrize("maxima_first", [False, True])
def test_maxima_first_starts_every_rows_shuffles_before_the_first_exponential(maxima_first):
    """Each main loop's 4 rows a thread (d 64) reduce their max over 4 lanes with 2 xor shuffles each: with
    maxima_first all 8 come before the loop's first ex2; row by row, only the first row's 2."""
    ptx = compile_to_ptx(flash_sm80.build_module(flash_tiles.Config(maxima_first=maxima_first)))
    loops = _loops(ptx)
    assert len(loops) == 2
    for loop in loops:
        first_exponential = loop.index("ex2.approx")
        shuffles_before = len(re.findall(r"shfl\.sync\.bfly", loop[:first_exponential]))
        assert shuffles_before == (8 if maxima_first else 2), shuffles_before


@pytest.mark.parametrize("tree_reductions", [False, True])
def test_tree_reductions_sum_the_probabilities_in_pairs(tree_reductions):
    """A row's 16 probabilities (d 64, 64-key tiles): as a tree, 8 of its adds take two exponentials; as a
    chain, 1 (the first); 4 rows a thread in each of the 2 loops."""
    ptx = compile_to_ptx(flash_sm80.build_module(flash_tiles.Config(tree_reductions=tree_reductions)))
    exponentials = set(re.findall(r"ex2\.approx\.ftz\.f32\s+(%r\d+),", ptx))
    pairs = [operands for operands in re.findall(r"add\.rn\.ftz\.f32\s+%r\d+, (%r\d+), (%r\d+);", ptx)
             if set(operands) <= exponentials]
    assert len(pairs) == (8 if tree_reductions else 1) * 4 * 2


@pytest.mark.parametrize("stage_barriers", [False, True])
def test_stage_barriers_replace_the_block_barrier_of_each_turn(stage_barriers):
    """With stage_barriers a turn meets no block barrier: it waits on the stage it overwrites (its `empty`
    phase) and on the one it reads (`full`), arrives once its copies land and once it has read its stage;
    without, one bar.sync a turn."""
    ptx = compile_to_ptx(flash_sm80.build_module(flash_tiles.Config(stage_barriers=stage_barriers)))
    loops = _loops(ptx)
    assert len(loops) == 2
    for loop in loops:  # (lane 0's arrival for its warp is a block LLVM may place after the branch back)
        counts = [len(re.findall(pattern, loop)) for pattern in (r"bar\.sync", r"mbarrier\.try_wait\.parity",
                                                                 r"cp\.async\.mbarrier\.arrive\.noinc",
                                                                 r"bar\.warp\.sync")]
        assert counts == ([0, 2, 1, 1] if stage_barriers else [1, 0, 0, 0]), counts
    # both stages start empty (2), then one arrival a turn of each loop
    assert len(re.findall(r"\bmbarrier\.arrive\.shared", ptx)) == (4 if stage_barriers else 0)


@pytest.mark.parametrize("lazy_rescale", [False, True])
def test_the_lazy_rescale_branches_on_a_vote_of_the_warp(lazy_rescale):
    """O is rescaled where some lane's row max grew: one vote.sync.any a turn, so the warp takes the branch
    together; without the lazy rescale, no vote."""
    loops = _loops(compile_to_ptx(flash_sm80.build_module(flash_tiles.Config(lazy_rescale=lazy_rescale))))
    assert [len(re.findall(r"vote\.sync\.any\.pred", loop)) for loop in loops] == [int(lazy_rescale)] * 2


@pytest.mark.parametrize("config, skips", [(flash_tiles.Config(causal=True), True),
                                           (flash_tiles.Config(causal=True, stage_barriers=True), True),
                                           (flash_tiles.Config(head_dim=128, causal=True), False),
                                           (flash_tiles.Config(), False)], ids=str)
def test_a_warp_skips_a_causal_tile_wholly_past_its_rows(config, skips):
    """With the mask, a warp skips a key tile that starts past its last row: a branch on the warp's index
    around the tile's transfers (each warp's own, scope "warp": one that spans warps may not sit there) and
    mma. At d 64 (128 rows a CTA, 32 a warp, 64-key tiles) the diagonal's second tile starts past warps 0
    and 1; at d 128 (64 rows, 16 a warp) no tile starts past a warp's rows, and without the mask none does:
    no branch, every transfer the CTA's."""
    module = flash_sm80.build_module(config)
    scopes = []

    def visit(op):
        if op.operation.name == "tile.matrix_transfer":
            scope = str(op.operation.attributes["scope"]).strip('"')
            enclosing, branched = op.operation.parent, False
            while enclosing is not None:
                branched |= enclosing.operation.name == "scf.if"
                enclosing = enclosing.operation.parent
            scopes.append((scope, branched))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    own = [branched for scope, branched in scopes if scope == "warp"]
    per_loop = config.head_dim // 16 + config.keys // 16  # K's k16 blocks of d, V's of the keys
    assert all(own) and len(own) == (per_loop if skips else 0)
    # the CTA's: Q's fragments, K and V in the unmasked loop (and the masked one where no warp skips), O's stmatrix
    assert len(scopes) - len(own) == 2 + per_loop * (1 if skips else 2)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
def test_the_sm80_library_ships_attention_that_stores_o_without_stmatrix(tmp_path):
    """Attention on an sm_80 library (issue 58): the FlashAttention-2-form kernels are shipped for sm_80 too, built
    for it, O's accumulator pairs stored straight to global memory (no stmatrix, which sm_80 lacks); ptxas takes
    them for sm_80 without spills; sm_80 ships no Hopper kernel (the sm_90 builds keep stmatrix: their PTX is
    the shipped one, byte for byte)."""
    from mlir_tile.kernels.flash import launch as flash_launch

    shipped = dict(flash_launch.shipped_kernels("sm_80"))
    picked = [flash_tiles.picked(c.head_dim, c.causal, c.element, "sm_80") for c in flash_tiles.CONFIGS]
    assert set(shipped) == {str(config) for config in flash_tiles.CONFIGS + picked}
    assert not any(config.stage_barriers for config in picked)  # (no mbarrier phase waits before sm_90)
    assert [flash_tiles.picked(c.head_dim, c.causal, c.element) for c in flash_tiles.CONFIGS] == PICKED
    config = flash_tiles.picked(128, True, "bf16", "sm_80")
    ptx = compile_to_ptx(shipped[str(config)]())
    assert ".target sm_80" in ptx and "stmatrix" not in ptx and "ldmatrix" in ptx and "mma.sync" in ptx
    assert re.search(r"st\.global\.b32", ptx)  # (a pair of halves a store)
    (tmp_path / "a.ptx").write_text(ptx)
    assembled = subprocess.run(["ptxas", "-arch=sm_80", "-v", str(tmp_path / "a.ptx"), "-o", str(tmp_path / "a.cubin")],
                               capture_output=True, text=True)
    assert assembled.returncode == 0 and " 0 bytes spill stores" in assembled.stderr, assembled.stderr


@pytest.mark.parametrize("causal", [False, True])
def test_the_backward_oracle_is_the_forward_oracles_derivative(causal):
    """`reference_backward` against central differences of the forward oracle's loss sum(O x G) (2 heads, 7
    rows, d 4; steps of 1e-2, within 1e-3): the oracle the backward's checks will use."""
    import numpy as np

    from mlir_tile.kernels.flash.reference import reference, reference_backward

    rng = np.random.default_rng(3)
    q, k, v, grad = (rng.uniform(-1, 1, (2, 7, 4)) for _ in range(4))
    derivatives = reference_backward(q, k, v, grad, causal)
    step = 1e-2
    for which, derivative in enumerate(derivatives):
        numeric = np.zeros_like(derivative)
        for index in np.ndindex(*q.shape):
            moved = []
            for sign in (1, -1):
                inputs = [x.copy() for x in (q, k, v)]
                inputs[which][index] += sign * step
                moved.append(float((reference(*inputs, causal)[0].astype(np.float64) * grad).sum()))
            numeric[index] = (moved[0] - moved[1]) / (2 * step)
        assert np.abs(derivative - numeric).max() < 1e-3, ("qkv"[which], np.abs(derivative - numeric).max())
