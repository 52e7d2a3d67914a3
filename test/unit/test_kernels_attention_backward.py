"""Attention's backward kernel on Hopper's path (`flash.sm90_backward`), on the CPU: its tiles' layouts (the dS^T
tile stmatrix writes is dQ's A [K, M] read MN-major, each consumer's share of K read as dQ's B), its PTX (TMA
loads, S^T and dP^T from shared memory, dV and dK with A in registers, dQ's TMA reductions, in turn in the
deterministic mode, dK and dV by 3-D TMA stores), its row passes' PTX, and what it refuses. Its numbers are
checked on a GPU (test_attention_backward_gpu.py)."""
import functools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlir_tile.kernels.flash import sm90_backward
from mlir_tile.kernels.flash.sm90_backward_tiles import BackwardConfig, tiles


@functools.lru_cache(maxsize=None)
def _ptx(config: BackwardConfig) -> str:
    from conftest import shared_ptx

    return shared_ptx(str(config), lambda: sm90_backward.build_module(config))


def test_the_ds_tile_stmatrix_writes_is_dqs_a_read_mn_major():
    """Element (key, query) of dS^T where the consumers' stmatrix bands put it (`stored_tile`'s "c") is where dQ's
    A reads (query, key), and K's element (key, column) is where dQ's B of consumer c reads (column - c x its
    share, key) from that consumer's first byte: both written out here from the boxes' arithmetic."""
    from mlir_tile.kernels.common import stored_tile

    for d in (64, 128):
        config = BackwardConfig(d)
        layouts = tiles(config)
        c = stored_tile(128, 64, 64)["c"]
        assert all(c.offset(key, query) == layouts["ds_a"].offset(query, key) for key in range(128) for query in range(64))
        share = config.dq_columns
        for consumer in range(d // share):
            first = consumer * 128 * share  # (elements: whole boxes of 128 rows by 64 columns before its share)
            for key in range(128):
                for column in range(share):
                    whole = column + consumer * share
                    box, inside = divmod(whole, 64)
                    unswizzled = box * 128 * 64 + key * 64 + inside
                    assert layouts["kv"].offset(key, whole) == layouts["k_dq"].offset(column, key) + first, (d, key)
                    # (the swizzle moves 16-byte chunks within their 128-byte row)
                    assert layouts["kv"](key, whole).offset // 64 == unswizzled // 64


def test_the_ptx_loads_by_tma_multiplies_with_a_in_registers_and_adds_dq_by_tma_reductions(filecheck):
    """d 64, causal: the producer lowers its registers and loads K, V, then Q, dO and their rows' statistics by TMA; a consumer issues S^T
    and dP^T from shared memory (m64n64, descriptors for both operands), the exp2s, dV and dK with A in registers,
    stmatrix of dS^T, dQ from shared memory, the fp32 reductions into dQaccum, and dK and dV by 3-D stores."""
    config = BackwardConfig(64, True, "bf16")
    ptx = _ptx(config)
    filecheck(ptx, """
    CHECK: .entry attention_backward(
    CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}
    CHECK: ex2.approx
    CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{.*}}}, {{{.*}}}, %rd{{[0-9]+}}
    CHECK: stmatrix.sync.aligned
    CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}
    CHECK: cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group
    CHECK: cp.async.bulk.tensor.3d.global.shared::cta
    """)
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24;", ptx)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+240;", ptx)
    # K's box, V's; Q's, dO's, and the block's rows of LSE log2(e) and D
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global") == 2 + 2 + 2
    issued = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16 \{[^}]*\}, (\{|%rd)", ptx)
    # S^T and dP^T over d (4 k16 steps each), dQ over 128 keys (8): from shared; dV and dK over 64 queries (4 each)
    assert issued.count("%rd") == 2 * 64 // 16 + 128 // 16 and issued.count("{") == 2 * 64 // 16
    assert ptx.count("cp.reduce.async.bulk.tensor") == 64 // 32  # dQ's two fp32 boxes of 32 columns
    assert config.shared_bytes == 2 * 128 * 64 * 2 + 2 * 2 * 64 * 64 * 2 + 128 * 64 * 2 + 64 * 64 * 4 + 2 * 2 * 64 * 4


def test_at_d_256_the_consumers_split_the_rows_of_s_and_the_columns_of_the_gradients(filecheck):
    """d 256, bf16: a CTA of 64 keys; each consumer's S^T and dP^T m64n32 over d (16 k16 steps, its 32 rows of the
    block), its P^T and dS^T bands by stmatrix, then dV, dK (over the block's 64 rows) and dQ (over the 64 keys)
    m64n128 with both operands from shared memory, each consumer adding its 128 columns of dQ (four fp32 boxes);
    one stage of Q and dO (two would pass the shared memory a block may use)."""
    config = BackwardConfig(256, False, "bf16")
    ptx = _ptx(config)
    filecheck(ptx, """
    CHECK: .entry attention_backward(
    CHECK: wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}
    CHECK: ex2.approx
    CHECK: stmatrix.sync.aligned
    CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}
    CHECK: cp.async.bulk.tensor.3d.global.shared::cta
    """)
    narrow = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n32k16\.f32\.bf16\.bf16 \{[^}]*\}, %rd", ptx)
    wide = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16 \{[^}]*\}, %rd", ptx)
    assert len(narrow) == 2 * 256 // 16 and len(wide) == 3 * 64 // 16
    assert not re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.bf16\.bf16 \{[^}]*\}, \{", ptx)  # (no A in registers)
    assert ptx.count("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add") == 128 // 32
    assert (config.keys, config.stages, config.score_rows, config.kv_columns, config.dq_columns) == (64, 1, 32, 128, 128)
    assert config.shared_bytes == 2 * 64 * 256 * 2 + 2 * 64 * 256 * 2 + 2 * 64 * 64 * 2 + 64 * 256 * 4 + 2 * 64 * 4
    assert config.grid(batch_kv_heads=3, seq=129) == 3 * 3


@pytest.mark.parametrize("options, message", [
    (dict(head_dim=96), "head dims 64, 128, 256"), (dict(element="e4m3"), "f16 or bf16"),
    (dict(rows=128), "64 query rows a step"), (dict(stages=4), "more than the 232448 a block may use"),
    (dict(head_dim=256, stages=2), "more than the 232448 a block may use")])
def test_what_the_kernel_does_not_take_is_a_value_error(options, message):
    with pytest.raises(ValueError, match=message):
        BackwardConfig(**options)


@pytest.mark.parametrize("d, causal, seq", [(64, True, 150), (128, False, 200)])
def test_the_ctas_on_the_reference_model_give_numpys_gradients(d, causal, seq):
    """Every CTA of d 64, causal, 150 positions (a key block and a tail of 22), and of d 128 on 200 (dQ's two
    consumers' parts), two query heads on one K/V head, on the reference model (`sm90_backward_emulation`: TMA's
    box writes, wgmma's fetches through the kernel's descriptors, stmatrix's and the TMA reductions' and stores'
    models; the query blocks' dS^T and dQ tiles in turn): dQ, dK, dV within 4 units of bf16's rounding of numpy's
    backward (a misplaced box or descriptor moves whole rows)."""
    from mlir_tile.kernels.flash.sm90_backward_emulation import emulate

    assert emulate(BackwardConfig(d, causal, "bf16"), seq=seq, heads=2, kv_heads=1) < 2 ** -6


def test_d_256s_ctas_pass_p_and_ds_through_shared_memory_on_the_reference_model():
    """d 256, causal, 70 positions (a block of 64 keys and a tail of 6): each consumer's P^T and dS^T bands written
    by stmatrix's model, both read back through dV's, dK's and dQ's descriptors, dK and dV each consumer's 128
    columns: within 4 units of bf16's rounding of numpy's backward."""
    from mlir_tile.kernels.flash.sm90_backward_emulation import emulate

    assert emulate(BackwardConfig(256, True, "bf16"), seq=70, heads=1, kv_heads=1) < 2 ** -6


def test_packed_sequences_store_dk_and_dv_by_rows_and_add_dq_at_padded_rows():
    """Packed sequences (`varlen`): the offsets read (b and b + 1), the causal diagonal compared signed (the
    bottom right's shift), dK and dV stored from the registers as 4-byte pairs (d / 4 a thread each) with no
    stmatrix band and no 3-D store; dQ still added by TMA reductions (at the sequence's padded rows)."""
    config = BackwardConfig(64, True, "bf16", varlen=True)
    ptx = _ptx(config)
    assert "ld.global.b32" in ptx and "setp.le.s64" in ptx
    assert ptx.count("st.global.b32") == 2 * 64 // 4 and "tensor.3d" not in ptx
    assert "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add" in ptx
    assert str(config).endswith("_varlen_sm90a")


def test_the_deterministic_mode_waits_for_its_turn_around_each_dq_reduction():
    """Deterministic (d 128, causal): each consumer's first thread waits for its flag to reach the CTA's key block
    (n0 / 128), adds its two fp32 boxes, waits for their writes (no `.read`) and releases the flag: one spin, one
    release, in that order around the reductions, and the flags a (head, block of 64 rows, adder: two at d 128)."""
    config = BackwardConfig(128, True, "bf16", deterministic=True)
    ptx = _ptx(config)
    spin, release = ptx.index("ld.acquire.gpu.u32"), ptx.index("red.release.gpu.add.u32")
    reductions = [m.start() for m in re.finditer(r"cp\.reduce\.async\.bulk\.tensor", ptx)]
    assert len(reductions) == 2 and spin < reductions[0] < reductions[1] < release
    assert re.search(r"cp\.async\.bulk\.wait_group\s+0;", ptx[reductions[1]:release])
    assert ptx.count("ld.acquire.gpu") == ptx.count("red.release.gpu") == 1
    assert config.flags(heads=3, padded=192) == 3 * 3 * 2 and BackwardConfig(64, deterministic=True).adders == 1
    assert str(config).endswith("_deterministic_sm90a") and "red.release" not in _ptx(BackwardConfig(128, True, "bf16"))


def test_the_row_passes_read_16_bytes_a_lane_and_write_a_rows_statistics_once():
    """`backward_rows`: the preprocessing (d 64, packed: 8 lanes a row) reads O and dO 16 bytes a lane, widens
    them, sums the products over the row's lanes by three butterfly shuffles and, in the row's first lane only,
    writes D and LSE log2(e) at the place read from `places`; the postprocessing (d 128, not packed) reads a
    lane's 8 fp32 sums as two 16-byte loads, scales them by 1/sqrt(128) and stores them rounded as one 16-byte
    store."""
    from conftest import shared_ptx
    from mlir_tile.kernels.flash import backward_rows
    from mlir_tile.kernels.flash.backward_rows import RowsConfig

    prepare, finish = (RowsConfig("prepare", 64, "bf16", packed=True), RowsConfig("finish", 128, "f16"))
    ptx = {config.step: shared_ptx(str(config), lambda config=config: backward_rows.build_module(config))
           for config in (prepare, finish)}
    assert ptx["prepare"].count("ld.global.v4.b32") == 2 and ptx["prepare"].count("cvt.f32.bf16") == 2 * 8
    assert re.findall(r"shfl\.sync\.bfly\.b32\s+%r\d+, %r\d+, (\d+), 31", ptx["prepare"]) == ["4", "2", "1"]
    assert ptx["prepare"].count("ld.global.b32") == 2  # (a token's place and its log-sum-exp)
    leader = ptx["prepare"][ptx["prepare"].index("%laneid"):]
    assert leader.count("st.global.b32") == 2 and "0f3FB8AA3B" in leader  # (log2(e))
    assert ptx["finish"].count("ld.global.v4.b32") == 2 and ptx["finish"].count("cvt.rn.f16x2.f32") == 4
    assert ptx["finish"].count("st.global.v4.b32") == 1 and "0f3DB504F3" in ptx["finish"]
    assert "ld.global.b32" not in ptx["finish"] and (prepare.grid(1000), finish.grid(1000)) == (32, 63)


def test_the_sm90_library_ships_each_backward_kernel_and_sm80_none():
    """Every (d, mask, element) the launcher takes, and its row passes, is among the kernels the wheel ships for
    sm_90 (by the name the launch asks the library for), none for sm_80 (the backward is Hopper's path only)."""
    from mlir_tile.kernels import ship
    from mlir_tile.kernels.flash.backward_rows import PASSES, RowsConfig

    names = {name for name, _ in ship.kernels("sm_90")}
    wanted = {str(BackwardConfig(d, causal, element, varlen=packed, deterministic=ordered)) for d in (64, 128, 256)
              for causal in (False, True) for element in ("f16", "bf16") for packed in (False, True)
              for ordered in (False, True)}
    wanted |= {str(RowsConfig(step, d, element, packed)) for step in PASSES for d in (64, 128, 256)
               for element in ("f16", "bf16") for packed in (False, True)}
    assert wanted <= names and len(wanted) == 72
    assert not any(name.startswith("attention_backward") for name, _ in ship.kernels("sm_80"))


class _Shaped:
    """A tensor's shape alone (what `grouped_heads` reads), without torch."""

    def __init__(self, *shape):
        self.shape = tuple(shape)

    def dim(self):
        return len(self.shape)


@pytest.mark.parametrize("k, v, taken", [
    ((2, 8, 100, 64), (2, 8, 100, 64), True), ((2, 2, 100, 64), (2, 2, 100, 64), True),
    ((2, 1, 100, 64), (2, 1, 100, 64), True), ((2, 3, 100, 64), (2, 3, 100, 64), False),  # 3 does not divide 8
    ((2, 2, 100, 128), (2, 2, 100, 128), False), ((1, 2, 100, 64), (1, 2, 100, 64), False),  # d, batch
    ((2, 2, 99, 64), (2, 2, 99, 64), False), ((2, 2, 100, 64), (2, 4, 100, 64), False),  # seq, v's heads
    ((2, 0, 100, 64), (2, 0, 100, 64), False), ((2, 2, 100), (2, 2, 100), False)])
def test_grouped_heads_are_kv_heads_dividing_qs_with_every_other_extent_qs(k, v, taken):
    """`launch.grouped_heads`, what the forward's, the backward's and the repeating path's checks share: k and v
    of one shape, their heads dividing q's, batch, length and head dim q's (a head dim unlike q's would be read
    through q's maps)."""
    from mlir_tile.kernels.flash.launch import grouped_heads

    assert grouped_heads(_Shaped(2, 8, 100, 64), _Shaped(*k), _Shaped(*v)) == taken


class _Strided(_Shaped):
    """A tensor's shape and strides alone (what `token_major` reads), without torch: `order` lists the dims from
    the outermost in memory to the innermost (contiguous: 0, 1, 2, 3), `pitch` a token row's elements where the
    tokens are outer to the heads (a slice of a fused projection: more than heads x d)."""

    def __init__(self, shape, order=(0, 1, 2, 3), pitch=None):
        super().__init__(*shape)
        strides, step = [0] * 4, 1
        for dim in reversed(order):
            strides[dim] = step
            step = pitch if (dim == 1 and pitch) else step * shape[dim]
        self.strides = tuple(strides)

    def stride(self, dim):
        return self.strides[dim]

    def is_contiguous(self):
        return self.strides == _Strided(self.shape).strides


@pytest.mark.parametrize("q, k, packed", [
    (_Strided((2, 8, 100, 64)), _Strided((2, 2, 100, 64)), False),  # contiguous, one length: the dense kernels
    (_Strided((2, 8, 100, 64), (0, 2, 1, 3)), _Strided((2, 2, 100, 64)), True),  # q a view of [b, s, h, d]
    (_Strided((2, 8, 100, 64), (0, 2, 1, 3), pitch=12 * 64), _Strided((2, 2, 100, 64)), True),  # a fused qkv slice
    (_Strided((2, 8, 1, 64)), _Strided((2, 2, 700, 64)), True),  # a cache's last query: lengths differ
    (_Strided((2, 8, 1, 64), (0, 2, 1, 3)), _Strided((2, 2, 1, 64)), False),  # one token: contiguous either way
    (_Strided((2, 8, 100, 64), (1, 0, 2, 3)), _Strided((2, 2, 100, 64)), False),  # [h, b, s, d]: batch not outer
    (_Shaped(2, 8, 100), _Shaped(2, 2, 100), False)])
def test_token_major_takes_views_of_projections_and_unequal_lengths(q, k, packed):
    """`launch.token_major`, which sends `attention` to the packed kernels (and its fakes' layouts with it):
    q's rows lying as [batch, seq, heads, d] (any row pitch) or k longer or shorter than q; not contiguous q of
    one length, nor a layout whose batch is not outermost."""
    from mlir_tile.kernels.flash.launch import token_major

    assert token_major(q, k) == packed


@pytest.mark.parametrize("q, k, form, queries, causal", [
    (_Strided((2, 8, 1, 64)), _Strided((2, 2, 700, 64)), "HeadSequences", 4, False),  # a decode step: a row a head
    (_Strided((2, 8, 5, 64)), _Strided((2, 8, 700, 64)), "HeadSequences", 5, True),  # kv_heads = heads
    (_Strided((2, 8, 5, 64)), _Strided((2, 2, 700, 64)), "QueryHeadSequences", 5, True),  # grouped heads' queries
    (_Strided((2, 8, 5, 64), (0, 2, 1, 3)), _Strided((2, 8, 700, 64)), "TokenRows", 5, True),  # q of [b, s, h, d]
    (_Strided((2, 8, 5, 64)), _Strided((2, 8, 700, 64), (0, 2, 1, 3)), "TokenRows", 5, True)])  # k one too
def test_contiguous_heads_first_k_and_v_are_read_in_place_as_sequences_of_one_head(q, k, form, queries, causal):
    """`launch.heads_as_sequences` (Hugging Face's caches, [batch, kv_heads, seq, d], beside fewer queries), where
    q, k and v are contiguous: each (batch, K/V head) a sequence of one head, its query heads' rows one after
    another, where a K/V head's queries are one head's or one row each (its sequences hold that many queries, the
    mask kept only where they are one head's: a row a head sees every key); else each (batch, query head) one,
    the backward then on token rows (a K/V head's query heads add into its dK and dV)."""
    from mlir_tile.kernels.flash.launch import heads_as_sequences, packing_of

    assert heads_as_sequences(q, k, k) == (form != "TokenRows")
    packing = packing_of(q, k, k)
    assert type(packing).__name__ == form
    assert (packing.queries, packing.keys, packing.causal(True)) == (queries, 700, causal)
    assert type(packing.backward).__name__ == ("TokenRows" if form == "QueryHeadSequences" else form)


def test_a_masks_backward_takes_its_operands_and_refuses_what_it_cannot_differentiate(tmp_path):
    """A variant of keys alone (a mask): its kernel takes the variant's operands after its own (band: one
    integer) and assembles, as softcap's and ALiBi's (causal) and its deterministic kernels (plain and packed)
    do; a score step without its derivative, and keys with causal, are refused where the kernel is built. (Its
    gradients: test_attention_variants_gpu.py.)"""
    import shutil
    import subprocess

    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.flash import masks

    config = BackwardConfig(64, False, "bf16")
    plain, band = (compile_to_ptx(sm90_backward.build_module(config, variant=variant)) for variant in (None, masks.band))
    assert band.count(".param .u64") == plain.count(".param .u64") + 1
    stepped = [compile_to_ptx(sm90_backward.build_module(BackwardConfig(64, True, "bf16"), variant=variant))
               for variant in (masks.softcap, masks.alibi)]  # (the steps recomputed: softcap's tanh a score)
    assert stepped[0].count("tanh.approx.f32") == 32 and "tanh" not in stepped[1]
    ordered = [compile_to_ptx(sm90_backward.build_module(BackwardConfig(64, element="bf16", deterministic=True,
                                                                        varlen=packed), variant=masks.band))
               for packed in (False, True)]
    assert all(ptx.count("ld.acquire.gpu") == ptx.count("red.release.gpu") == 1 for ptx in ordered)
    for number, ptx in enumerate([band] + stepped + ordered if shutil.which("ptxas") else []):
        (tmp_path / f"{number}.ptx").write_text(ptx)
        assert subprocess.run(["ptxas", "-arch=sm_90a", str(tmp_path / f"{number}.ptx"), "-o",
                               str(tmp_path / f"{number}.cubin")], capture_output=True).returncode == 0
    from mlir_tile.kernels.flash.variants import Variant

    without_derivative = Variant("doubled", score=lambda s, at: 2.0 * s)
    for variant, options, message in ((without_derivative, {}, "a score step with its score_gradient and a sink"),
                                      (masks.band, dict(causal=True), "not causal")):
        with pytest.raises(ValueError, match=message):
            sm90_backward.build_module(BackwardConfig(64, element="bf16", **options), variant=variant)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_key_blocks_reaching_a_query_block_are_consecutive_from_its_first_rows_first_key(data):
    """The deterministic mode's order under a mask (`_Backward.first_adder`): key block n walks query blocks
    [lowest // 64, ceil(beyond / 64)), lowest the first row whose end passes its first key, beyond the first row
    (not below lowest) whose first key reaches its end (`blocks_seeing`); each query block's flag counts its
    adders' turns from 0, the turn n less the block of its first row's first key, and a CTA that waits for a
    turn no block before it takes would hang. On random masks (both bounds non-decreasing, as the host checks):
    the key blocks that walk each query block, enumerated, are exactly the turns 0, 1, ... from that block."""
    rows, seq = data.draw(st.integers(1, 700)), data.draw(st.integers(1, 700))
    steps = data.draw(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=rows, max_size=rows))
    first, end = [], []
    for row, (rise, widen) in enumerate(steps):  # (each row sees keys [first, end), first < end <= seq)
        low = min((first[-1] if row else 0) + rise * rise, seq - 1)
        first.append(low)
        end.append(min(max(end[-1] if row else 1, low + 1 + widen * widen * 7), seq))
    keys, block = 128, 64
    reaching = {}
    for n in range(-(-seq // keys)):
        first_key, end_key = n * keys, min((n + 1) * keys, seq)
        lowest = next((r for r in range(rows) if end[r] > first_key), rows)
        beyond = max(next((r for r in range(rows) if first[r] >= end_key), rows), lowest)
        for m in range(lowest // block, -(-beyond // block)):
            reaching.setdefault(m, []).append(n)
    for m, adders in reaching.items():
        assert [n - first[m * block] // keys for n in adders] == list(range(len(adders))), (m, adders)


def test_a_variant_on_packed_sequences_searches_its_rows_where_the_host_checked_its_keys(tmp_path):
    """The packed backward with a variant: its operands after the packed sequences' six parameters (band's
    integer the 19th), the keys' rows found by two binary searches of 32 halvings where the sequence's length
    was checked on the host (up to `SHORTER_CHECKED` keys or max_seqlen_k, no more queries than keys), each
    block of the sequence's rows walked where not; each assembles (ptxas spills 28-36 bytes at d 64 where the
    plain packed kernel spills none: docs/notes/attention-backward.md). (Its gradients:
    test_attention_variants_packed_gpu.py.)"""
    import re
    import subprocess

    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.flash import masks
    from mlir_tile.kernels.flash.variants import SHORTER_CHECKED

    config = BackwardConfig(64, False, "bf16", varlen=True)
    plain, band, alibi = (compile_to_ptx(sm90_backward.build_module(config, variant=variant))
                          for variant in (None, masks.band, masks.alibi))
    assert band.count(".param .u64") == plain.count(".param .u64") + 1
    assert "attention_backward_param_18" in band and "attention_backward_param_18" not in plain
    checked = rf"setp\.(lt|le)\.u64\s+%p\d+, %rd\d+, ({SHORTER_CHECKED}|{SHORTER_CHECKED + 1});"
    assert re.search(checked, band) and not re.search(checked, plain), "the lengths checked on the host"
    for number, ptx in enumerate((band, alibi)):
        (tmp_path / f"{number}.ptx").write_text(ptx)
        assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / f"{number}.ptx"), "-o",
                                    str(tmp_path / f"{number}.cubin")], capture_output=True, text=True)
        assert assembled.returncode == 0, assembled.stderr
