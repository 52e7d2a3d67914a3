"""The attention variants the GPU tests run (test/unit/test_attention_variants_gpu.py), their cases, and
their kernels, built where the compiler is (`build`: into the kernel cache of these sources, which
test/gpu_inputs.py fills): the example's causal sliding window (examples/sliding_window.py), a two-sided band
of keys whose width is an integer operand, and Gemma 2's soft-capping of the scores, a score step reading a
scalar operand (`kernels.flash.masks`' ready-made ones, with its prefix-LM, Gemma 2's local layer, a window
built in with the soft-capping, ALiBi and gpt-oss's sinks, operands of one value a head), 200 random cases of
the ready-made parts combined (`random_cases`); and those on packed sequences and KV caches
(test_attention_variants_packed_gpu.py: `PACKED_CASES`, 200 random ones, `random_packed_cases`)."""
from __future__ import annotations

import importlib.util
from functools import partial
from pathlib import Path
from typing import NamedTuple

from mlir_tile.kernels.flash.masks import alibi, band, combined, prefix_lm, sinks, sliding_window as window, softcap
from mlir_tile.kernels.flash.variants import Variant, maximum, minimum

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sliding_window.py"


def _example():
    spec = importlib.util.spec_from_file_location("sliding_window", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sliding_window() -> Variant:
    """The example's variant (`local`, a causal window of 1024 keys), loaded from its file."""
    return _example().local


class Case(NamedTuple):
    """One run: `variant` with `operands` ("heads" and "batch_heads" stand for a tensor of random values [heads]
    and [batch, heads]), head dim, sequence length, causal, and HopperAttention's `shape` (the configuration's
    fields over those the launcher picks: ping-pong, the launched grid)."""
    variant: str
    operands: tuple
    d: int
    seq: int
    causal: bool = False
    shape: tuple = ()


CASES = (  # (the example runs the window on the grids the launcher picks for d 64, 128 and 256)
    Case("sliding_window", (), 128, 3000, shape=(("pingpong", True), ("persistent", True))),
    Case("sliding_window", (), 128, 2500, shape=(("persistent", False),)),
    Case("sliding_window", (), 64, 1900, shape=(("consumers", 2), ("keys", 128), ("uniform_q", False))),
    Case("band", (300,), 128, 2000), Case("band", (5000,), 64, 700), Case("band", (0,), 256, 333),
    Case("softcap", (30.0,), 128, 1500, causal=True), Case("softcap", (5.0,), 64, 2049),
    Case("softcap", (2.0,), 256, 300),
    Case("softcap", (10.0,), 128, 1000, shape=(("pingpong", True), ("persistent", False))),
    Case("window_100_50", (), 128, 2000), Case("window_100_50", (), 64, 777), Case("prefix_lm_300", (), 64, 1500),
    Case("prefix_lm_300", (), 128, 200), Case("gemma2_local", (50.0,), 128, 3000),
    Case("gemma2_local", (5.0,), 256, 1100), Case("alibi", ("heads",), 128, 1500, causal=True),
    Case("alibi", ("batch_heads",), 64, 777), Case("sinks", ("heads",), 128, 1000),
    Case("sinks", ("batch_heads",), 256, 300, causal=True), Case("gpt_oss_local", ("heads",), 64, 2000),
    Case("constant_sink", (), 128, 1000),
)


BACKWARD_CASES = (  # (masks, and the steps with their derivatives; first_100, key blocks past the 100th seen by
    # no row)
    Case("window_100_50", (), 128, 700), Case("band", (300,), 64, 1000), Case("prefix_lm_300", (), 256, 500),
    Case("sliding_window", (), 128, 1500), Case("first_100", (), 64, 400),
    Case("softcap", (30.0,), 128, 1500, causal=True), Case("softcap", (5.0,), 64, 2049),
    Case("alibi", ("heads",), 128, 1500, causal=True), Case("alibi", ("batch_heads",), 64, 777),
    Case("gemma2_local", (5.0,), 256, 1100), Case("sinks", ("heads",), 128, 1000),
    Case("gpt_oss_local", ("batch_heads",), 64, 2000),
)

DETERMINISTIC_MASKS = ("window_100_50", "band", "first_100", "gpt_oss_local")  # (BACKWARD_CASES' and
# PACKED_BACKWARD_CASES' of these, in the deterministic mode too)


class PackedCase(NamedTuple):
    """One run on packed sequences (`form` "varlen": `attention_varlen`, `lengths` (len_q, len_k) pairs) or a KV
    cache (`attention_with_kvcache`, "cache" or "paged" in pages of `page_size`: `lengths` the cache lengths,
    `seq_q` queries each, the cache `seq_cache` keys long): `variant` with `operands` (as `Case`'s), head dim,
    query heads and K/V heads, causal, the element ("e4m3": an fp8 cache, per-tensor descales). Its kernels are built for 132 SMs (the H100's and H200's: split-KV's
    count follows the SMs)."""
    variant: str
    operands: tuple
    form: str
    lengths: tuple
    d: int = 128
    heads: int = 8
    kv_heads: int = 2
    seq_q: int = 1
    seq_cache: int = 2048
    page_size: int = 0
    causal: bool = False
    element: str = "bf16"


PACKED_CASES = (  # (decode steps: pack_gqa and split-KV; lengths 0 and 1; prefill against a cache; varlen)
    PackedCase("window_255", (), "paged", (0, 1, 300, 1000, 2048), page_size=64),
    PackedCase("gemma2_local", (30.0,), "cache", (5, 1500, 3000), heads=16, kv_heads=8, seq_cache=4096),
    PackedCase("softcap", (5.0,), "cache", (0, 4, 700), d=64, heads=4, kv_heads=1, seq_q=4, seq_cache=1024,
               causal=True),
    PackedCase("alibi", ("heads",), "paged", (1, 513, 4000), heads=32, kv_heads=8, seq_cache=4096, page_size=16,
               causal=True),
    PackedCase("sinks", ("batch_heads",), "cache", (3000, 17, 0), heads=8, kv_heads=8, seq_q=2, seq_cache=4096,
               causal=True),
    PackedCase("gpt_oss_local", ("heads",), "varlen", ((100, 100), (1, 50), (300, 700), (0, 10)), d=64, heads=4),
    PackedCase("band", (17,), "varlen", ((64, 64), (129, 200)), d=256, heads=2, kv_heads=1),
    PackedCase("window_100_50", (), "paged", (40, 700, 129), seq_q=64, seq_cache=1024, page_size=128),
)


FP8_PACKED_CASES = (  # (fp8 caches with a variant: gpt-oss's local layer on a paged decode step, a window with
    # split-KV over a contiguous cache, ALiBi on 64 queries a step against pages of 16)
    PackedCase("gpt_oss_local", ("batch_heads",), "paged", (0, 1, 700, 2048), heads=32, kv_heads=8, page_size=64,
               element="e4m3"),
    PackedCase("window_255", (), "cache", (5, 3000, 8192), heads=16, kv_heads=2, seq_cache=8192, element="e4m3"),
    PackedCase("alibi", ("heads",), "paged", (100, 1000), heads=8, kv_heads=8, seq_q=64, seq_cache=1024,
               page_size=16, causal=True, element="e4m3"),
)

PACKED_BACKWARD_CASES = (  # (packed sequences that train: lengths 0 and 1, fewer queries than keys and more,
    # keys past SHORTER_CHECKED below the longest (4,500 of 5,000: every query block walked), GQA)
    PackedCase("window_100_50", (), "varlen", ((300, 300), (0, 0), (1, 1), (700, 700), (50, 200), (300, 200))),
    PackedCase("band", (70,), "varlen", ((1000, 1000), (129, 129), (1, 5)), d=64, heads=4, kv_heads=4),
    PackedCase("softcap", (5.0,), "varlen", ((500, 500), (100, 300), (0, 7)), causal=True),
    PackedCase("alibi", ("batch_heads",), "varlen", ((600, 600), (3, 3), (64, 100)), d=64, heads=4, kv_heads=1),
    PackedCase("gpt_oss_local", ("batch_heads",), "varlen", ((4500, 4500), (5000, 5000), (1, 1)), d=64, heads=4,
               kv_heads=2),
    PackedCase("sinks", ("heads",), "varlen", ((700, 700), (0, 0), (33, 90)), heads=8, kv_heads=2),
    PackedCase("gemma2_local", (5.0,), "varlen", ((1100, 1100), (64, 64)), d=256, heads=2, kv_heads=2),
)

NOT_MONOTONE = PackedCase("odd_end", (), "varlen", ((5000, 5000), (1, 8192)))  # (its keys' end is non-decreasing
# at 8,192 keys and up to 4,096, where the host checks them, not at 5,000: rows whose keys the walk misses get NaN)


def random_packed_cases(count: int = 200, seed: int = 62) -> list:
    """`count` random `PackedCase`s of FAMILIES (the same for a seed: `make gpu-inputs` builds their kernels): KV
    caches contiguous and paged (pages of 16 to 256 tokens), cache lengths from 0 and 1 to full, decode steps of
    1-4 queries (GQA packed, split-KV) and prefills of 16-200 against the cache, packed sequences of 0-700
    queries and keys, head dims 64 and 128, GQA groups 1-8, `_operand_draws`' operands."""
    import random

    rng, cases = random.Random(seed), []
    draw = _operand_draws(rng)
    for _ in range(count):
        family, form = rng.choice(sorted(FAMILIES)), rng.choice(["cache", "paged", "varlen"])
        heads, kv_heads = rng.choice([(8, 2), (8, 8), (4, 1), (16, 4), (32, 4), (2, 1)])
        batch, seq_cache = rng.randint(1, 4), rng.choice([256, 1024, 4096])
        if form == "varlen":
            lengths = tuple((rng.choice([0, 1, rng.randint(1, 700)]), rng.choice([0, 1, rng.randint(1, 700)]))
                            for _ in range(batch))
        else:
            lengths = tuple(rng.choice([0, 1, seq_cache, rng.randint(0, seq_cache)]) for _ in range(batch))
        cases.append(PackedCase(family, tuple(draw[part]() for part in FAMILIES[family]), form, lengths,
                                d=rng.choice([64, 128]), heads=heads, kv_heads=kv_heads,
                                seq_q=rng.choice([1, 1, 1, 2, 4, rng.randint(16, 200)]), seq_cache=seq_cache,
                                page_size=rng.choice([16, 64, 128, 256]) if form == "paged" else 0,
                                causal="band" not in FAMILIES[family] and rng.random() < 0.5))
    return cases


def packed_config_of(case: PackedCase, sms: int = 132):
    """(the configuration, its module's name) the launcher picks for `case` on `sms` SMs (None, None where it
    launches none)."""
    from mlir_tile.kernels.flash.packed import entries_as_pages, packed_config

    group, batch = case.heads // case.kv_heads, len(case.lengths)
    page_size = case.page_size or (case.seq_cache if case.form == "cache" and entries_as_pages(case.seq_cache)
                                   else 0)  # (a whole contiguous cache of such entries runs as pages of one entry)
    if case.form == "varlen":
        seq_q, seq_k = (max(pair[i] for pair in case.lengths) for i in range(2))
        seq_k = min(seq_k, sum(pair[1] for pair in case.lengths))
    else:
        seq_q, seq_k = case.seq_q, case.seq_cache
    if not (seq_q and seq_k):  # (no queries or no keys: the launcher returns without a kernel)
        return None, None
    config, _, _ = packed_config(case.d, case.causal, case.element, seq_q, group, page_size, max_seqlen_k=seq_k,
                                 kv_items=batch * case.kv_heads, sms=sms)
    return config, str(config) + variants()[case.variant].suffix


FAMILIES = {  # the random cases' variants: the ready-made parts each combines, in order (read at the call: one
    # kernel a configuration serves every width, cap, slope and sink)
    "band": ("band",), "softcap": ("softcap",), "alibi": ("alibi",), "sinks": ("sinks",),
    "band_softcap": ("band", "softcap"), "band_sinks": ("band", "sinks"), "softcap_alibi": ("softcap", "alibi"),
}


PARTS = {"band": band, "softcap": softcap, "alibi": alibi, "sinks": sinks}


class RandomCase(NamedTuple):
    """One of `random_cases`: a family of FAMILIES with its operands (per part, in order; "heads" and
    "batch_heads" as in `Case`), head dim, sequence length, causal, batch, query heads and K/V heads."""
    family: str
    operands: tuple
    d: int
    seq: int
    causal: bool
    batch: int
    heads: int
    kv_heads: int


def _operand_draws(rng) -> dict:
    """Each ready-made part's random operand (widths 0 to past the sequence, caps 1 to 50, head values of both
    shapes), drawn from `rng` where called."""
    return {"band": lambda: rng.choice([0, 1, 17, 100, 1000, 5000]),
            "softcap": lambda: rng.choice([1.0, 5.0, 30.0, 50.0]),
            "alibi": lambda: rng.choice(["heads", "batch_heads"]),
            "sinks": lambda: rng.choice(["heads", "batch_heads"])}


def random_cases(count: int = 200, seed: int = 61) -> list:
    """`count` random cases (the same for a seed, so that `make gpu-inputs` builds their kernels here): every
    family, head dims 64, 128 and 256, lengths from 1 across the tile edges to 2,100, causal where the family has
    no keys of its own, grouped-query heads, widths 0 to past the sequence, caps 1 to 50, head values of both
    shapes."""
    import random

    rng, cases = random.Random(seed), []
    draw = _operand_draws(rng)
    for _ in range(count):
        family = rng.choice(sorted(FAMILIES))
        heads = rng.choice([1, 2, 4, 8])
        operands, d = tuple(draw[part]() for part in FAMILIES[family]), rng.choice([64, 128, 256])
        cases.append(RandomCase(family, operands, d,
                                rng.choice([1, 2, 63, 64, 65, 127, 128, 129, rng.randint(1, 700),
                                            rng.randint(700, 2100)]),
                                "band" not in FAMILIES[family] and rng.random() < 0.5, rng.randint(1, 2), heads,
                                rng.choice([x for x in (1, 2, 4, 8) if heads % x == 0])))
    return cases


def _odd_end(query, seq, at):  # (causal but at 4,097-5,999 keys, where rows 0-49 see 10 keys more a row less: past
    # the lengths the host checks, SHORTER_CHECKED)
    between = maximum(minimum(6000 - seq, 1), 0) * maximum(minimum(seq - 4096, 1), 0)
    return 0, minimum(query + 1 + between * maximum(50 - query, 0) * 10, seq)


def variants() -> dict:
    return {"sliding_window": sliding_window(), "band": band, "softcap": softcap, "window_100_50": window(100, 50),
            "prefix_lm_300": prefix_lm(300), "gemma2_local": combined(window(1023), softcap), "alibi": alibi,
            "sinks": sinks, "gpt_oss_local": combined(window(127), sinks),
            "first_100": Variant("first_100", keys=lambda query, seq, at: (0, minimum(query + 1, 100))),
            "constant_sink": Variant("constant_sink", sink=lambda at: 1.0), "window_255": window(255),
            "odd_end": Variant("odd_end", keys=_odd_end),
            **{family: combined(*(PARTS[part] for part in parts)) for family, parts in FAMILIES.items()
               if len(parts) > 1}}


def kernels():
    """(name, build) of each kernel the cases (the packed ones' and the random ones' included) and the example
    launch (bf16: the launcher's picks), and the backward's of BACKWARD_CASES and PACKED_BACKWARD_CASES."""
    from mlir_tile.kernels.flash import sm90, sm90_backward
    from mlir_tile.kernels.flash.sm90_backward_tiles import BackwardConfig
    from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig

    named = variants()
    runs = [(case.variant, case.d, case.seq, case.causal, dict(case.shape)) for case in CASES + BACKWARD_CASES]
    runs += [("sliding_window", d, seq, False, {}) for d, seq in _example().SHAPES]
    runs += [(case.family, case.d, case.seq, case.causal, {}) for case in random_cases()]
    built = {}
    for variant, d, seq, causal, shape in runs:
        config = HopperAttentionConfig.picked(d, causal, "bf16", seq, **shape)
        built[str(config) + named[variant].suffix] = partial(sm90.build_module, config, variant=named[variant])
    for case in (*PACKED_CASES, *FP8_PACKED_CASES, NOT_MONOTONE, *random_packed_cases()):
        config, name = packed_config_of(case)
        if config is not None:
            built[name] = partial(sm90.build_module, config, variant=named[case.variant])
    for packed, cases in ((False, BACKWARD_CASES), (True, PACKED_BACKWARD_CASES)):
        for case in cases:
            variant = named[case.variant]
            for ordered in (False, True) if case.variant in DETERMINISTIC_MASKS else (False,):
                config = BackwardConfig(case.d, case.causal, "bf16", varlen=packed, deterministic=ordered)
                built[str(config) + variant.suffix] = partial(sm90_backward.build_module, config, variant=variant)
    for case in PACKED_BACKWARD_CASES:  # (their forward's)
        config, name = packed_config_of(case)
        built[name] = partial(sm90.build_module, config, variant=named[case.variant])
    return built.items()


def build(folder: Path) -> None:
    """The kernels into `folder` as the cache of these sources lays them out for sm_90, a process a core."""
    import multiprocessing
    import os

    folder.mkdir(parents=True, exist_ok=True)
    with multiprocessing.get_context("fork").Pool(os.cpu_count()) as pool:  # (by index: lambdas do not pickle)
        pool.map(partial(_build_one, folder), range(len(list(kernels()))))


def _build_one(folder: Path, index: int) -> None:
    from mlir_tile.compiler.compile import compile_to_ptx

    name, make = list(kernels())[index]
    (folder / f"{name}.ptx").write_text(compile_to_ptx(make()))
