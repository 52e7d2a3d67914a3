"""Attention's extension points (`kernels.flash.variants`), the build half (the GPU half is
test_attention_variants_gpu.py): a variant checked where it is defined, its keys checked on the host rule by
rule, its kernels' structure (the key tiles at both ends of a window masked, two compares a score there, the
score step on every score with the softmax's scale left to log2(e)), ptxas without spills on the grids the
launcher picks, and what the kernel refuses."""
import re
import shutil
import subprocess

import numpy as np
import pytest

from mlir_tile.kernels.epilogues import Operand
from mlir_tile.kernels.flash import sm90
from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig
from mlir_tile.kernels.flash.variants import Variant, maximum, minimum
from mlir_tile.testing.attention_variants import band, sliding_window, softcap


@pytest.mark.parametrize("arguments, message", [
    (dict(name="a b", keys=len), "the name is an identifier"), (dict(name="none"), "give keys, score, sink or"),
    (dict(name="n", score=3), "keys is a callable"), (dict(name="n", sink=3), "sink of \\(at\\)"),
    (dict(name="n", score=len, score_gradient="1"), "or a number"),
    (dict(name="n", sink="x", operands=(Operand("x", "scalar"),)), "or the name of a head operand"),
    (dict(name="n", keys=len, score_gradient=1), "a score_gradient is its score step's"),
    (dict(name="n", score=len, operands=(Operand("x", "column"),)), "of kinds scalar, integer, head"),
    (dict(name="n", score=len, operands=(Operand("x", "scalar"), Operand("x", "integer"))), "distinct names")])
def test_a_variant_is_checked_where_it_is_defined(arguments, message):
    with pytest.raises(ValueError, match=message):
        Variant(**arguments)


@pytest.mark.parametrize("keys, message", [
    (lambda query, seq, at: (query - 5, query + 1), "0 <= first; at row 0 it gives \\[-5, 1\\)"),
    (lambda query, seq, at: (0, query + 2), "end <= seq; at row 99"),
    (lambda query, seq, at: (query, query), "first < end \\(a row sees a key\\); at row 0"),
    (lambda query, seq, at: (0, seq - query), "end non-decreasing; at row 1"),
    (lambda query, seq, at: (np.where(query == 7, 0, query), query + 1), "first non-decreasing; at row 7")])
def test_the_keys_are_checked_on_the_host_rule_by_rule(keys, message):
    with pytest.raises(ValueError, match=message):
        Variant("broken", keys=keys).check_keys(100, ())


def test_a_window_and_a_band_keep_the_rules_for_every_length_and_width():
    for seq in (1, 2, 63, 64, 65, 1023, 1024, 1025, 5000):
        sliding_window().check_keys(seq, ())
        for width in (0, 1, 100, 10_000):
            band.check_keys(seq, (width,))
    with pytest.raises(ValueError, match="1 integer operands, got \\(\\)"):
        band.check_keys(10, ())
    with pytest.raises(ValueError, match="first < end \\(a row sees a key\\); at row 0 it gives \\[1, 0\\)"):
        band.check_keys(10, (-1,))  # (a negative width: row q sees [q + 1, q), none)


def test_maximum_and_minimum_take_numbers_and_arrays_on_the_host():
    assert maximum(3, 5) == 5 and minimum(3, 5) == 3
    assert maximum(np.arange(4) - 2, 0).tolist() == [0, 0, 0, 1]


def test_the_kernels_name_follows_the_variants_code():
    def first(query, seq, at):
        return maximum(query - 7, 0), minimum(query + 1, seq)

    def second(query, seq, at):
        return maximum(query - 8, 0), minimum(query + 1, seq)

    assert Variant("w", keys=first).suffix == Variant("w", keys=first).suffix
    assert Variant("w", keys=first).suffix != Variant("w", keys=second).suffix
    assert sliding_window().suffix.startswith("_local_")


def _module(config, variant) -> str:
    return str(sm90.build_module(config, variant=variant))


def test_a_window_masks_the_tiles_at_both_ends_with_two_compares_a_score():
    """Launched (d 128): the first tile, the window's leading tiles past it, the unmasked middle and the trailing
    tiles: 4 softmaxes (one fma a probability, 64 a thread), 3 of them masked, each score compared with its
    row's first key (sge) and end; without the variant 3 softmaxes and no first key."""
    config = HopperAttentionConfig.of(128, persistent=False)
    windowed, plain = _module(config, sliding_window()), _module(config, None)
    assert windowed.count("math.fma") == 4 * 64 and plain.count("math.fma") == 3 * 64
    assert windowed.count("arith.cmpi sge") == 3 * 64 and plain.count("arith.cmpi sge") == 0


def test_a_score_step_runs_on_every_score_and_the_softmax_scales_by_log2e_alone():
    """Soft-capping (tanh, through its reciprocal) on each of the 64 scores of each of the causal kernel's 3
    softmaxes; the scores q.k scaled by 1 / sqrt(d) before it, the exp2's by log2(e) after."""
    module = _module(HopperAttentionConfig.of(128, True, persistent=False), softcap)
    assert module.count("llvm.nvvm.rcp.approx.ftz.f") == 3 * 64
    constants = set(re.findall(r"arith.constant ([0-9.e+-]+) : f32", module))
    assert {"1.44269502", "0.0883883461"} <= constants and "0.127517432" not in constants  # (log2(e) / sqrt(d))


def _assembled(tmp_path, module) -> str:
    from mlir_tile.compiler.compile import compile_to_ptx

    (tmp_path / "a.ptx").write_text(compile_to_ptx(module))
    assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "a.ptx"), "-o",
                                str(tmp_path / "a.cubin")], capture_output=True, text=True)
    assert assembled.returncode == 0, assembled.stderr
    return assembled.stderr


def test_a_variant_kernel_assembles_without_spills(tmp_path):
    """The window on d 128's persistent grid (the launcher's pick at S 3000), ptxas without spills (ping-pong's
    persistent walk spills 16 bytes with it: not the launcher's pick)."""
    if not shutil.which("ptxas"):
        pytest.skip("ptxas is not installed")
    config = HopperAttentionConfig.picked(128, False, "bf16", 3000)
    assert " 0 bytes spill stores" in _assembled(tmp_path, sm90.build_module(config, variant=sliding_window()))


def test_a_causal_configuration_with_keys_of_its_own_is_refused():
    with pytest.raises(ValueError, match="says which keys each row sees"):
        sm90.build_module(HopperAttentionConfig.of(128, True), variant=band)


def test_the_keys_are_checked_on_a_host_without_mlir():
    """The launcher's check runs where the runtime does, which has no MLIR: `maximum` and `minimum` take numpy
    there without importing it."""
    import subprocess
    import sys

    program = ("import sys; sys.modules['mlir'] = None\n"
               "from mlir_tile.testing.attention_variants import band, sliding_window\n"
               "sliding_window().check_keys(3000, ()); band.check_keys(700, (100,)); print('checked')")
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == "checked", ran.stderr


@pytest.mark.parametrize("cases, index", [("PACKED_CASES", 0), ("PACKED_CASES", 4), ("FP8_PACKED_CASES", 0)])
def test_a_variant_on_a_kv_cache_assembles_without_spills(tmp_path, cases, index):
    """The paged window's decode step (GQA packed, split-KV), the sinks' (each split's own, the sink in split
    0's alone; its contiguous cache of 4,096 rows a sequence run as pages of one entry, `entries_as_pages`) and
    gpt-oss's local layer on an fp8 cache in pages of 64, as the launcher picks them for 132 SMs."""
    if not shutil.which("ptxas"):
        pytest.skip("ptxas is not installed")
    from mlir_tile.testing import attention_variants
    from mlir_tile.kernels.flash.packed import entries_as_pages
    from mlir_tile.testing.attention_variants import packed_config_of, variants

    case = getattr(attention_variants, cases)[index]
    config, _ = packed_config_of(case)
    paged = case.form == "paged" or entries_as_pages(case.seq_cache)
    assert config.varlen and config.split_kv and (config.page_rows > 0) == paged
    assert " 0 bytes spill stores" in _assembled(tmp_path, sm90.build_module(config, variant=variants()[case.variant]))


def test_rows_whose_keys_a_packed_walk_misses_are_poisoned_with_nan():
    """Packed sequences' keys are checked on the host at the longest length only: with keys of its own, each
    row's O and log-sum-exp are NaN where the item's walk does not cover its keys (two selects a row); with a
    score step alone, or none, no NaN."""
    from mlir_tile.kernels.flash.packed import packed_config

    config, _, _ = packed_config(128, False, "bf16", 500, 4, max_seqlen_k=2048)
    nan = "arith.constant 0x7FC00000 : f32"
    assert _module(config, band).count(nan) >= 1
    assert nan not in _module(config, softcap) and nan not in _module(config, None)


def test_the_random_packed_cases_cover_what_serving_asks_of_them():
    """Issue 61's 200 random cases: every ready-made part, each form (packed sequences, contiguous and paged
    caches), each page size, cache lengths 0 and 1, split-KV and GQA packing, decode steps and prefills."""
    from mlir_tile.testing.attention_variants import FAMILIES, packed_config_of, random_packed_cases

    cases = random_packed_cases()
    configs = [packed_config_of(case)[0] for case in cases]
    assert len(cases) == 200 and {case.variant for case in cases} == set(FAMILIES)
    assert {case.form for case in cases} == {"varlen", "cache", "paged"}
    assert {case.page_size for case in cases if case.form == "paged"} == {16, 64, 128, 256}
    lengths = {n for case in cases if case.form != "varlen" for n in case.lengths}
    assert {0, 1} <= lengths and {case.heads // case.kv_heads for case in cases} >= {1, 4, 8}
    assert sum(c is not None and c.split_kv for c in configs) >= 50 and sum(c is not None and c.pack_gqa
                                                                              for c in configs) >= 50
    assert {case.seq_q == 1 for case in cases} == {True, False}


def test_a_sink_on_packed_sequences_stands_in_for_the_max_of_a_row_that_sees_no_key():
    """A cache of length 0 (or queries before its first key) leaves a row's max at -inf: with a sink, that row
    takes the sink's logit as its max (one compare with -inf a row, the thread's two), so its O is 0 and its
    log-sum-exp the sink's, not -inf + inf; the dense kernel, whose rows each see a key, has no such compare."""
    from mlir_tile.kernels.flash.masks import sinks
    from mlir_tile.kernels.flash.packed import packed_config

    config, _, _ = packed_config(128, True, "bf16", 2, 1, max_seqlen_k=4096, kv_items=24, sms=132)
    assert config.split_kv
    assert _module(config, sinks).count("arith.cmpf oeq") == 2 and "arith.cmpf oeq" not in _module(config, None)
    assert "arith.cmpf oeq" not in _module(HopperAttentionConfig.of(128, True), sinks)


def test_rows_of_packed_sequences_without_a_key_take_their_sinks_logit():
    """No sequence has a key (no kernel launches): each row's log-sum-exp is -inf, or its sequence's sink logit
    where the sinks are a head operand; a sink function, which only the kernel evaluates, is refused."""
    torch = pytest.importorskip("torch", reason="the launcher's host half runs on torch tensors")
    from mlir_tile.kernels.flash.masks import sinks
    from mlir_tile.kernels.flash.packed import keyless_lse

    offsets = torch.tensor([0, 2, 2, 5], dtype=torch.int32)  # (sequences of 2, 0 and 3 queries)
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])  # [batch, heads]
    lse = keyless_lse(torch.empty(2, 5), sinks, [values], offsets)
    assert lse.tolist() == [[1.0, 1.0, 5.0, 5.0, 5.0], [2.0, 2.0, 6.0, 6.0, 6.0]]
    assert keyless_lse(torch.zeros(2, 5), None, [], offsets).isneginf().all()
    with pytest.raises(ValueError, match="sink is a function"):
        keyless_lse(torch.empty(2, 5), Variant("one", sink=lambda at: 1.0), [], offsets)


def test_keys_on_packed_sequences_are_checked_at_every_shorter_length_too():
    """Packed sequences' lengths lie on the device: the host checks the keys at the longest length and at each
    one up to SHORTER_CHECKED (all their rows at once), naming the first that breaks a rule; a window and a
    band keep them at every length."""
    from mlir_tile.kernels.flash.variants import SHORTER_CHECKED

    def short(query, seq, at):  # (causal from 100 keys on; below, each row sees the keys up to seq - query)
        return 0, minimum(maximum(query + 1, (seq - query) * maximum(minimum(100 - seq, 1), 0)), seq)

    Variant("short", keys=short).check_keys(2048, ())
    with pytest.raises(ValueError, match=r"keys\(query, seq=3\) must keep end non-decreasing; at row 1 it gives"):
        Variant("short", keys=short).check_keys(2048, (), shorter=True)
    sliding_window().check_keys(2 * SHORTER_CHECKED, (), shorter=True)
    band.check_keys(2 * SHORTER_CHECKED, (7,), shorter=True)
