"""The ready-made masks (`kernels.flash.masks`) against their definitions written out as boolean masks (which
key each query sees), on the host where the launcher checks them; their kernels built and assembled."""
import re
import shutil
import subprocess

import numpy as np
import pytest

from mlir_tile.kernels.flash import masks
from mlir_tile.kernels.flash.variants import HostSite


def _seen(variant, seq: int, numbers: dict = None) -> np.ndarray:
    """[seq, seq] bool: the keys the variant's interval gives each query row, on the host."""
    query = np.arange(seq)
    first, end = (np.broadcast_to(np.asarray(x), query.shape) for x in variant.keys(query, seq, HostSite(numbers or {})))
    key = np.arange(seq)[None, :]
    return (key >= first[:, None]) & (key < end[:, None])


QUERY, KEY = np.arange(300)[:, None], np.arange(300)[None, :]  # (sliced to each length)


@pytest.mark.parametrize("seq", [1, 2, 17, 300])
@pytest.mark.parametrize("variant, numbers, written_out", [
    (masks.sliding_window(0), {}, (KEY == QUERY)),
    (masks.sliding_window(5), {}, (KEY <= QUERY) & (KEY >= QUERY - 5)),
    (masks.sliding_window(7, 3), {}, (KEY <= QUERY + 3) & (KEY >= QUERY - 7)),
    (masks.sliding_window(1000, 1000), {}, np.ones((300, 300), bool)),
    (masks.band, {"width": 4}, np.abs(KEY - QUERY) <= 4),
    (masks.prefix_lm(10), {}, (KEY < 10) | (KEY <= QUERY)),
    (masks.prefix_lm(0), {}, KEY <= QUERY),
    (masks.combined(masks.sliding_window(20), masks.prefix_lm(8)), {}, ((KEY < 8) | (KEY <= QUERY))
     & (KEY <= QUERY) & (KEY >= QUERY - 20)),
    (masks.combined(masks.band, masks.softcap), {"width": 2}, np.abs(KEY - QUERY) <= 2)],
    ids=["diagonal", "window 5", "window 7 3", "wider than the sequence", "band 4", "prefix 10", "prefix 0",
         "window and prefix", "band and softcap"])
def test_each_mask_lets_a_query_see_the_keys_its_definition_does(variant, numbers, written_out, seq):
    assert np.array_equal(_seen(variant, seq, numbers), written_out[:seq, :seq])
    variant.check_keys(seq, tuple(numbers.values()))  # (the launcher's check: the kernel's rules kept)


def test_the_same_arguments_give_the_same_variant_and_others_other_kernels():
    assert masks.sliding_window(4095) is masks.sliding_window(4095)
    assert masks.combined(masks.sliding_window(8), masks.softcap) is masks.combined(masks.sliding_window(8),
                                                                                    masks.softcap)
    suffixes = {v.suffix for v in (masks.sliding_window(8), masks.sliding_window(9), masks.sliding_window(8, 1),
                                   masks.prefix_lm(8), masks.prefix_lm(9))}
    assert len(suffixes) == 5
    both = masks.combined(masks.band, masks.softcap)
    assert both.name == "band_softcap" and [o.name for o in both.operands] == ["width", "cap"]


@pytest.mark.parametrize("call, message", [
    (lambda: masks.sliding_window(-1), "left and right are non-negative ints"),
    (lambda: masks.sliding_window(3, 1.5), "left and right are non-negative ints"),
    (lambda: masks.prefix_lm(True), "the prefix is a non-negative int"),
    (lambda: masks.combined(masks.band), "two or more Variants"),
    (lambda: masks.combined(masks.band, masks.band), "operands of distinct names"),
    (lambda: masks.combined(masks.sinks, masks.combined(masks.alibi, masks.sinks)), "one part with a sink, got 2"),
    (lambda: masks.alibi_slopes(0), "heads is a positive int")])
def test_what_a_mask_does_not_take_is_a_value_error_where_it_is_made(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
def test_gemma_2s_local_layer_assembles_without_spills_and_caps_each_score(tmp_path):
    """A window of 4095 keys and soft-capping in one kernel (d 128, the grid the launcher picks at 8192 keys):
    ptxas without spills; one tanh.approx on each of the 64 scores of the 4 softmaxes (first tile, the
    window's leading tiles, the middle, the trailing ones), no IEEE division (the cap's reciprocal, once)."""
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.flash import sm90
    from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig

    config = HopperAttentionConfig.picked(128, False, "bf16", 8192)
    ptx = compile_to_ptx(sm90.build_module(config, variant=masks.combined(masks.sliding_window(4095), masks.softcap)))
    assert len(re.findall(r"tanh\.approx\.f32", ptx)) == 4 * 64 and "div.rn" not in ptx
    (tmp_path / "a.ptx").write_text(ptx)
    assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "a.ptx"), "-o", str(tmp_path / "a.cubin")],
                               capture_output=True, text=True)
    assert assembled.returncode == 0 and " 0 bytes spill stores" in assembled.stderr, assembled.stderr


def test_alibis_slopes_are_the_papers():
    """Press et al.'s geometric slopes (their reference code's values, written out): 2^-1 .. 2^-8 for 8 heads;
    for 12, those of 8 and then every other of 16's (2^-0.5, 2^-1.5, ...)."""
    assert masks.alibi_slopes(8) == [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
    assert masks.alibi_slopes(1) == [2 ** -8]
    assert np.allclose(masks.alibi_slopes(12), [2.0 ** -e for e in (1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5)])


def test_a_heads_operand_is_the_attention_variants_alone():
    from mlir_tile.kernels.epilogues import Epilogue, Operand

    with pytest.raises(ValueError, match="a GEMM has no heads"):
        Epilogue("per_head", lambda x, at: x, (Operand("slopes", "head"),))
    gpt_oss = masks.combined(masks.sliding_window(127), masks.sinks)
    assert gpt_oss.sink is masks.sinks.sink and gpt_oss.score is None and gpt_oss.described() == "sinks (head)"


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
@pytest.mark.parametrize("variant, causal, scores", [
    (masks.alibi, True, "slopes"), (masks.combined(masks.sliding_window(127), masks.sinks), False, "sinks")])
def test_alibi_and_sinks_assemble_without_spills_reading_one_value_a_head(variant, causal, scores, tmp_path):
    """ALiBi: a row's distance from its first key converted (cvt.rn.f32.s32) in the masked and unmasked
    softmaxes; sinks: two exp2 more than the window alone (a row half's sink share each); the head's value loaded
    once an item (loaded where read, its address lived through the loop and spilled)."""
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.flash import sm90
    from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig

    config = HopperAttentionConfig.picked(128, causal, "bf16", 4096)
    ptx = compile_to_ptx(sm90.build_module(config, variant=variant))
    if scores == "slopes":
        assert ptx.count("cvt.rn.f32.s32") >= 2 and ptx.count("ld.global.b32") == 1
    else:
        window = compile_to_ptx(sm90.build_module(config, variant=masks.sliding_window(127)))
        assert ptx.count("ex2.approx") == window.count("ex2.approx") + 2 and "ld.global.b32" not in window
        assert ptx.count("ld.global.b32") == 1
    (tmp_path / "a.ptx").write_text(ptx)
    assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "a.ptx"), "-o", str(tmp_path / "a.cubin")],
                               capture_output=True, text=True)
    assert assembled.returncode == 0 and " 0 bytes spill stores" in assembled.stderr, assembled.stderr


def test_a_combined_variants_kernels_are_named_alike_in_every_process():
    """The fingerprint of a variant whose functions close over a list of functions (`combined`'s) is the same in
    another process (a list's repr holds its functions' addresses: digested so, the GPU host looked for kernels
    under names no build had made)."""
    import sys

    made = "masks.combined(masks.sliding_window(1023), masks.softcap).suffix"
    other = subprocess.run([sys.executable, "-c", f"from mlir_tile.kernels.flash import masks; print({made})"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert other == masks.combined(masks.sliding_window(1023), masks.softcap).suffix
