"""mlir_tile.kernels.flash.sm90 on packed sequences (`sm90_varlen`), the build half: their bounds and O's rows,
paged K/V's boxes (and an fp8 cache's), pack_gqa's 3-D boxes, split-KV and its combine, each in the PTX and by
ptxas; the GPU half: test_attention_varlen_gpu.py, test_attention_kvcache_gpu.py, test_attention_paged_gpu.py."""
import re
import shutil
import subprocess
from dataclasses import replace

import pytest

from mlir_tile.kernels.flash import launch as flash_launch, sm90 as flash_sm90
from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig
from test_kernels_hopper_attention import _ptx


def test_packed_sequences_read_their_bounds_and_store_o_by_rows(filecheck, tmp_path):
    """Packed sequences (`sm90_varlen`): each role reads its sequence's offsets (cu_seqlens_q and _k at b and
    b + 1), clamps them into the tensors' rows (min), loads 2-D boxes at (token, head x d + column), and stores
    O from the registers as 4-byte words (d / 4 a thread: two rows of d / 8 pairs) and the log-sum-exp, with no
    stmatrix and no TMA store (a box would write into the next sequence); assembled without spills."""
    config = HopperAttentionConfig.packed(128, True, "bf16", 4096)
    assert config == HopperAttentionConfig(128, True, "bf16", uniform_q=True, varlen=True)
    ptx = _ptx(config)
    filecheck(ptx, """
    CHECK: .entry attention(
    CHECK: ld.global.b32 {{.*}}+4];
    CHECK: min.u64
    CHECK: wgmma.mma_async
    CHECK-COUNT-16: st.global.b32
    CHECK-COUNT-16: st.global.b32
    """)
    assert ptx.count("st.global.b32") == 128 // 4 + 2 and "stmatrix" not in ptx and "tensor.3d" not in ptx
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d\S* \[%rd\d+\], \[%rd\d+, \{%r\d+, %r\d+\}\]", ptx)) == 8
    if shutil.which("ptxas"):
        (tmp_path / "a.ptx").write_text(ptx)
        assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "a.ptx"), "-o", "/dev/null"],
                                   capture_output=True, text=True)
        assert assembled.returncode == 0 and " 0 bytes spill stores" in assembled.stderr, assembled.stderr


@pytest.mark.parametrize("d, page_rows", [(128, 16), (64, 64)])
def test_paged_kv_loads_each_page_box_from_its_block_table_entry(filecheck, tmp_path, d, page_rows):
    """Paged K/V (`sm90_varlen.Pages`): the cache length read at b (not b + 1: a count, not offsets), then per key
    tile, once its stage is free, each box of `page_rows` rows' page id read from the block table (one load a
    box, the tile's together), the rows selected (past the table's row or the pool: the pool's end), then K's and
    V's boxes of `page_rows` rows loaded there; the maps' boxes are that tall; assembled without spills."""
    from dataclasses import replace

    from mlir_tile.kernels.flash.sm90_layouts import boxes

    config = replace(HopperAttentionConfig.packed(d, True, "bf16", 1), page_rows=page_rows)
    assert str(config).endswith(f"_varlen_paged{page_rows}_sm90a") and boxes(config)["k"].rows == page_rows
    ptx = _ptx(config)
    per_tile, across = config.keys // page_rows, d // config.box_columns
    tile = "CHECK: ld.global.b32\n" * per_tile + "CHECK: cp.async.bulk.tensor.2d\n" * (2 * across * per_tile)
    filecheck(ptx, "CHECK: .entry attention(\nCHECK: try_wait.parity.shared.b64 {{.*}}[q_empty\n" + tile)
    assert ptx.count("cp.async.bulk.tensor.2d") == config.consumers * across + 2 * per_tile * across  # (Q's, K's, V's)
    assert ptx.count("ld.global.b32") == 6 + per_tile  # (each role's sequence bounds: 3 loads; a tile's entries)
    if shutil.which("ptxas"):
        (tmp_path / "a.ptx").write_text(ptx)
        assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "a.ptx"), "-o", "/dev/null"],
                                   capture_output=True, text=True)
        assert assembled.returncode == 0 and " 0 bytes spill stores" in assembled.stderr, assembled.stderr


@pytest.mark.parametrize("page_rows", [0, 16])
def test_an_fp8_cache_stages_each_v_box_beside_ks_and_stores_o_in_bf16(tmp_path, page_rows):
    """e4m3 on packed sequences and paged caches (an fp8 KV cache): each of a key tile's V boxes (a page's rows,
    paged) lands in the staging ring, counted on its barrier, beside K's on the K/V pipeline's (the producer's
    warps then write V^T, as the dense fp8 kernel's do); O's rows stored from the registers in bf16 (two a word);
    the descales before the packed parameters (three addresses, their stride and the sequences a row of them:
    each item reads its own, `sm90._HopperAttention.descale`); assembled without spills, as each shipped fp8 packed
    kernel."""
    from dataclasses import replace

    config = replace(HopperAttentionConfig.packed(128, True, "e4m3", 1), page_rows=page_rows)
    ptx = _ptx(config)
    loads = re.findall(r"cp\.async\.bulk\.tensor.*\[(\w+)_full", ptx)  # (each TMA load's barrier)
    per_tile = config.keys // page_rows if page_rows else 1
    assert loads.count("staging") == loads.count("kv") > 0 and loads.count("kv") % per_tile == 0
    assert "cvt.rn.bf16x2.f32" in ptx and "attention_param_10" in ptx  # (the third descale, then the packed ones)
    parameters = [int(x) for x in re.findall(r"\.param .*attention_param_(\d+)", ptx)]
    assert max(parameters) == 7 + flash_sm90.FP8_PARAMETERS + 5 + 4 * bool(page_rows)  # (O to group, fp8's, packed's)
    assert all(f"[attention_param_{index}]" in ptx for index in (11, 12))  # (the descales' stride, sequences a row)
    shipped = {name for name, _ in flash_launch.hopper_shipped_kernels("sm_90")}
    assert str(config) in shipped and sum("_e4m3_" in name and "_varlen" in name for name in shipped) == 2 * 4 * 4
    if shutil.which("ptxas"):
        (tmp_path / "a.ptx").write_text(ptx)
        assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "a.ptx"), "-o", "/dev/null"],
                                   capture_output=True, text=True)
        assert assembled.returncode == 0 and " 0 bytes spill stores" in assembled.stderr, assembled.stderr


def test_pack_gqa_loads_a_groups_heads_as_one_3d_box_and_splits_rows_by_shifts(filecheck):
    """pack_gqa (`PackedItems`): Q's band is one 3-D box a 64 columns (token, head of the group, column), K's and
    V's stay 2-D; a row's query and head come from a shift and a mask (the group a power of two), no 64-bit
    division in the consumers' masking or stores (the item's split divides, once); `packed_config` packs a
    decode step's group where it divides 64, and the ships hold each head dim's and mask's packed kernels."""
    from dataclasses import replace

    from mlir_tile.kernels.flash.packed import packed_config

    config, tiles, splits = packed_config(128, True, "bf16", 1, 8)
    assert config.pack_gqa and tiles == splits == 1 and str(config).endswith("_varlen_gqa_sm90a")
    assert [packed_config(128, True, "bf16", 1, 8, page_size=size)[0].page_rows for size in (256, 192, 64, 48)] == [
        64, 64, 64, 16]  # (d 128's decode tile: 64 rows, key tiles of 64, two CTAs an SM; `decoding`)
    assert (config.rows, config.keys, config.stages, config.ctas_per_sm) == (64, 64, 3, 2)
    assert packed_config(128, True, "e4m3", 1, 8)[0].keys == 128  # (fp8's: the prefill's, not measured)
    assert not packed_config(128, True, "bf16", 1, 3)[0].pack_gqa  # (a group of 3 does not divide 64 rows)
    assert not packed_config(128, True, "bf16", 4096, 8)[0].pack_gqa  # (prefill: each head's rows fill tiles)
    assert packed_config(64, False, "f16", 40, 4) == (packed_config(64, False, "f16", 1, 4)[0], 3, 1)
    ptx = _ptx(config)
    across = 128 // config.box_columns
    assert ptx.count("cp.async.bulk.tensor.3d") == config.consumers * across
    assert ptx.count("cp.async.bulk.tensor.2d") == 2 * across
    filecheck(ptx, """
    CHECK: .entry attention(
    CHECK: shr.u64
    CHECK: wgmma.mma_async
    """)
    assert ptx.count("div.u64") == _ptx(replace(config, pack_gqa=False)).count("div.u64") + 1
    shipped = {name for name, _ in flash_launch.hopper_shipped_kernels("sm_90")}
    # (mask; d 64's and 256's elements x their 3 forms of K/V, packed rows and boxes of 16 and 64 rows; d 128's 16
    # bits the same on its decode tile's 64 keys, e4m3 x 4: boxes of 128 rows too)
    assert sum(name.endswith("_gqa_sm90a") for name in shipped) == 2 * (2 * 3 + 2 * 3 + 4 + 2 * 3)


def test_split_kv_shares_out_a_decode_steps_key_tiles_and_its_combine_sums_the_splits(filecheck):
    """Split-KV (flash-decoding): `kv_splits` fills the SMs once (no partial second wave) where a decode step's
    CTAs leave most idle, two key tiles a split at least, at most MAX_SPLITS, none where the CTAs fill them or the
    keys are few; the split
    kernel takes block b as split b mod splits of item b / splits and stores its rows' O and log-sum-exp in fp32
    (no 16-bit O), and lets its dependent start as it begins (`launch_dependents`); the combine, that dependent,
    waits for it before its first read (`griddepcontrol.wait`), each of a row's 16 lanes reading one split's
    log-sum-exp of a chunk of 16 (the largest over the lanes by a butterfly), then its weight, the chunk's 16 O
    pieces by 16-byte loads all issued before the first sum, each split's weight from its lane (a full-warp
    shuffle), the row's total by a butterfly, 16-byte rows of O stored; the ships hold the split kernels and the
    combines."""
    from mlir_tile.kernels.flash import combine
    from mlir_tile.kernels.flash.packed import MAX_SPLITS, kv_splits, packed_config

    assert kv_splits(8, 128, 132) == 16 and kv_splits(128, 128, 132) == 1 and kv_splits(8, 3, 132) == 1
    assert kv_splits(1, 1000, 132) == MAX_SPLITS and kv_splits(40, 8, 132) == 3  # (one wave: 120 CTAs, not 160)
    config, tiles, splits = packed_config(128, True, "bf16", 1, 4, max_seqlen_k=16384, kv_items=8, sms=132)
    assert config.split_kv and config.pack_gqa and (tiles, splits) == (1, 16)
    assert packed_config(128, True, "bf16", 1, 4, max_seqlen_k=16384, kv_items=256, sms=132)[2] == 1
    assert packed_config(128, True, "bf16", 2048, 4, max_seqlen_k=16384, kv_items=1, sms=132)[2] == 1  # (prefill)
    ptx = _ptx(config)
    # (O's fp32 pairs by 8-byte stores, where the packed kernel's 16-bit pairs take 4; the two rows' lse)
    assert ptx.count("st.global.v2.b32") == 128 // 4 and ptx.count("st.global.b32") == 2
    assert ptx.count("griddepcontrol.launch_dependents;") == 1 and "griddepcontrol.wait" not in ptx
    assert "griddepcontrol" not in _ptx(replace(config, split_kv=False))
    from conftest import shared_ptx

    summing = combine.CombineConfig(128, "bf16")
    summed = shared_ptx(str(summing), lambda: combine.build_module(summing))
    filecheck(summed, """
    CHECK: .entry attention_combine(
    CHECK-NOT: ld.global
    CHECK: griddepcontrol.wait;
    CHECK: ld.global.b32
    CHECK: max{{.*}}.f32
    CHECK: shfl.sync.bfly.b32 {{.*}}, 8, 31, -1;
    CHECK: ld.global.b32
    CHECK: ex2.approx
    CHECK-COUNT-32: ld.global.v4.b32
    CHECK-NOT: ld.global
    CHECK: shfl.sync.idx.b32 {{.*}}, %r{{[0-9]+}}, 31, -1;
    CHECK: fma.rn
    CHECK: st.global.v4.b32
    CHECK: st.global.b32
    """)
    assert summed.count("shfl.sync.idx.b32") == 16 and summed.count("shfl.sync.bfly.b32") == 2 * 4
    shipped = {name for name, _ in flash_launch.hopper_shipped_kernels("sm_90")}
    assert sum(name.endswith("_splitkv_sm90a") for name in shipped) == 2 * (2 * 3 + 3 * 4 + 2 * 3) + 2 * (
        2 * 3 + 2 * 3 + 4 + 2 * 3)  # (mask; d's elements x forms of K/V, not packed and packed as pack_gqa's above)
    assert {name for name in shipped if name.startswith("attention_combine")} == {
        f"attention_combine_d{d}_{element}_sm90a" for d in (64, 128, 256) for element in ("f16", "bf16")}


def test_split_kv_never_starts_a_partial_second_wave():
    """For any decode step that leaves most CTA slots idle, `kv_splits`' CTAs fit the slots at once (a 5th split
    of 32 CTAs on 132 SMs took 87.2 us where 4 took 79.2), each split at least two key tiles and at most
    MAX_SPLITS; where the CTAs already fill most slots, one split."""
    from hypothesis import given, settings, strategies as st

    from mlir_tile.kernels.flash.packed import MAX_SPLITS, kv_splits

    @settings(max_examples=300, deadline=None)
    @given(st.integers(1, 2000), st.integers(1, 4000), st.integers(1, 600))
    def check(ctas, key_tiles, slots):
        splits = kv_splits(ctas, key_tiles, slots)
        assert 1 <= splits <= MAX_SPLITS
        if 5 * ctas >= 4 * slots:
            assert splits == 1
        elif splits > 1:
            assert splits * ctas <= slots and 2 * splits <= key_tiles
    check()
