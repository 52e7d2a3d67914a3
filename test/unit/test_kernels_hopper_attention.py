"""mlir_tile.kernels.flash.sm90: attention on Hopper's path, the build half (the GPU half is
test_runtime_gpu.py's test_attention_on_hoppers_path_matches_numpy): its tiles and boxes, the PTX's structure
(TMA loads by the producer, S by wgmma from shared memory, P V in the RS form, setmaxnreg), ptxas without
spills for every head dim, mask and element, and what it refuses."""
import functools
import re
import shutil
import subprocess

import numpy as np
import pytest

from mlir_tile.tiling import byte_transpose
from mlir_tile.kernels.flash import launch as flash_launch, sm90 as flash_sm90, sm90_layouts as flash_layouts
from mlir_tile.kernels.flash import sm90_tiles as hopper_attention_tiles
from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig

CONFIGS = [HopperAttentionConfig.of(d, causal, element) for d in (64, 128, 256) for causal in (False, True)
           for element in ("f16", "bf16")] + [HopperAttentionConfig.of(128, causal, "e4m3") for causal in (False, True)]


def test_the_tiles_are_boxes_of_64_columns_and_v_is_read_mn_major():
    """Q (rows x d) and K (keys x d): boxes of 64 columns side by side, 128-byte swizzled (one box a tensor
    map; Q's a consumer's 64 rows, its band: the first's layout, the second's 64 rows further); V as P V's B:
    (d, keys) of K's layout, d contiguous in each box."""
    config = HopperAttentionConfig(128)
    layouts, box = flash_layouts.tiles(config), flash_layouts.boxes(config)
    assert (box["q"].rows, box["q"].columns, box["k"].rows, box["k"].columns) == (64, 64, 128, 64)
    q, band = layouts["q"], layouts["q_band"]
    assert all(2 * q.offset(64 * c + row, column) == c * hopper_attention_tiles.BAND_BYTES + 2 * band.offset(row, column)
               for c in range(2) for row in range(64) for column in range(128))
    assert box["k"] == box["v"] and box["q"].swizzle_bytes == 128
    k_layout, v_layout = layouts["k"], layouts["v"]
    assert all(v_layout.offset(column, key) == k_layout.offset(key, column) for key in range(128) for column in range(128))
    assert k_layout.offset(0, 64) == 128 * 64  # the second box after the first


def test_each_accumulator_slot_is_one_of_a_threads_two_rows():
    from mlir_tile.isa.atoms import wgmma

    assert flash_layouts.row_halves(wgmma(128, "f16")) == [slot % 4 // 2 for slot in range(64)]


def test_each_accumulator_slot_is_a_column_step_from_the_threads_first():
    """PTX's m64nN D fragment: a thread's columns are 2 (lane % 4) + 8 j + (0, 1), so slot s lies
    8 (s // 4) + s % 2 columns past slot 0's, for every thread."""
    from mlir_tile.isa.atoms import wgmma

    assert flash_layouts.column_steps(wgmma(128, "f16")) == [8 * (slot // 4) + slot % 2 for slot in range(64)]


def test_a_masked_tile_compares_each_score_once_with_its_rows_bound():
    """In a masked key tile (the sequence's end, causal the diagonal) each score's key is valid where its
    column step lies below its row's bound (`OnlineSoftmax.masked`): one signed 32-bit compare with a constant a score,
    in the first tile's softmax and the masked loop's (without the mask both rows' bound is the sequence's:
    one compare serves both)."""
    steps = [8 * (slot // 4) + slot % 2 for slot in range(64)]  # (each twice: the thread's two rows)
    for causal in (False, True):
        compared = re.findall(r"setp\.gt\.s32\s+%p\d+, %r\d+, (\d+);", _ptx(HopperAttentionConfig.of(128, causal)))
        assert sorted(map(int, compared)) == sorted(steps * (2 if causal else 1))


def test_the_walks_first_tile_is_unmasked_where_it_holds_no_masked_key():
    """Persistent without the mask, tile 0's softmax is built twice: unmasked where S >= keys
    (`KeyTiles.unmasked` > 0) and masked where not, beside the loops' two (one fma a probability: 4 softmaxes of
    64 scores a thread at d 128); the launched grid and the causal walk keep the one masked softmax (3)."""
    def softmaxes(config):
        from conftest import shared_mlir

        return shared_mlir(str(config), lambda: flash_sm90.build_module(config)).count("math.fma") // 64

    assert softmaxes(HopperAttentionConfig.of(128)) == 4
    assert softmaxes(HopperAttentionConfig.of(128, persistent=False)) == 3
    assert softmaxes(HopperAttentionConfig.of(128, True)) == 3


def _released_unread(ptx: str) -> int:
    """How many mbarrier waits the PTX follows by a plain arrive with no wgmma, TMA load or other wait between:
    a consumer releasing a stage it does not read."""
    lines, found = ptx.splitlines(), 0
    for at, line in enumerate(lines):
        if "mbarrier.try_wait" in line:
            for after in lines[at + 1:]:
                if any(op in after for op in ("wgmma", "cp.async.bulk", "mbarrier.try_wait", "arrive.expect_tx")):
                    break
                if "mbarrier.arrive.shared.b64" in after:
                    found += 1
                    break
    return found


def test_causal_consumers_stop_at_their_own_diagonal():
    """Causal with several consumers (d 64's three of 64 rows, 128 keys a tile): each walks the key tiles up
    to its own last row and only waits for and releases the CTA's tiles past it (FlashAttention-3's 192-row
    tiles read up to 1.5 tiles past the first consumer's diagonal); without the mask, or with one consumer,
    there are none to skip."""
    assert _released_unread(_ptx(HopperAttentionConfig.of(64, True))) == 1
    assert _released_unread(_ptx(HopperAttentionConfig.of(64, False))) == 0
    assert _released_unread(_ptx(HopperAttentionConfig.of(256, True))) == 0


@functools.lru_cache(maxsize=None)  # (several tests read one configuration's PTX; the run's workers share it)
def _ptx(config: HopperAttentionConfig) -> str:
    from conftest import shared_ptx

    return shared_ptx(str(config), lambda: flash_sm90.build_module(config))


def test_the_ptx_is_tma_then_wgmma_from_shared_then_p_v_from_registers(filecheck):
    """d 128, 128 keys a tile, two consumers: the producer lowers its registers and loads by TMA on mbarriers;
    a consumer raises its registers, waits for Q, issues key tile 0's S = Q K^T (8 k16 steps, descriptors
    for both operands) and its exp2s, then in each of two loops (without and with the mask) a tile's S beside
    the previous tile's P V (8 k16 steps with A in registers), and the last P V after them."""
    config = HopperAttentionConfig(128)
    ptx = _ptx(config)
    filecheck(ptx, """
    CHECK: .entry attention(
    CHECK: setmaxnreg.inc.sync.aligned.u32 {{\\s*}}240;
    CHECK: mbarrier.try_wait.parity
    CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}
    CHECK: ex2.approx
    CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{.*}}}, {{{.*}}}, %rd{{[0-9]+}}
    """)
    assert config.consumer_registers == 240 and re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24;", ptx)
    issued = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16 \{[^}]*\}, (\{|%rd)", ptx)
    assert issued.count("%rd") == 3 * 128 // 16 and issued.count("{") == 3 * 128 // 16
    assert ptx.count("cp.async.bulk.tensor.2d") == 4 * 128 // 64  # Q's boxes (two bands), then K's and V's
    assert config.shared_bytes == 128 * 128 * 2 + 3 * 2 * 128 * 128 * 2  # Q, then 3 stages of K and V


# each of CONFIGS that may walk the persistent grid, on the other grid (d 64's walk, d 128's and e4m3's launched one)
# (the other grid, not shipped, once a head dim and mask: the f16 twins of the bf16 kernels differ in their
# conversions only)
OTHER_GRID = [HopperAttentionConfig.of(c.head_dim, c.causal, c.element, persistent=not c.persistent) for c in CONFIGS
              if c.may_persist and c.element != "f16"]


@pytest.mark.parametrize("config", [c for c in CONFIGS if c.element != "f16"] + OTHER_GRID + [
                                   HopperAttentionConfig(128, True, "bf16", keys=64, stages=4),
                                                           HopperAttentionConfig(64, False, "f16", stages=2,
                                                                                 pingpong=False),
                                                           HopperAttentionConfig(64, False, "bf16", keys=64,
                                                                                 consumers=3),
                                                           HopperAttentionConfig.of(64, True, keys=64, consumers=1,
                                                                                    ctas_per_sm=3),
                                                           HopperAttentionConfig.of(64, True, keys=64, consumers=1,
                                                                                    ctas_per_sm=2, persistent=True)],
                         ids=str)
def test_every_configuration_assembles_without_spills(tmp_path, config):
    """The shipped kernels (d 256: O's 128 registers a thread beside S's and P's, the 240 a consumer raises to;
    bf16 and e4m3: the f16 twins differ in their conversions only),
    each on the other grid (a persistent producer at 32 registers: its walk beside the loads), S narrower than O
    (64 keys a tile at d 128), two stages, without ping-pong, three consumers at d 64 (four warpgroups: the
    occupancy pinned, else ptxas ignores setmaxnreg, C7508), one consumer in 3 CTAs an SM (136 registers) and 2
    walking; each with its broadcasts from lane 0 (`Kernel.broadcast`)."""
    if not shutil.which("ptxas"):
        pytest.skip("ptxas is not installed")
    ptx = _ptx(config)
    (tmp_path / "a.ptx").write_text(ptx)
    assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "a.ptx"), "-o", str(tmp_path / "a.cubin")],
                               capture_output=True, text=True)
    assert assembled.returncode == 0, assembled.stderr
    assert "C75" not in assembled.stderr and " 0 bytes spill stores" in assembled.stderr, assembled.stderr
    # the values broadcast from lane 0 (two 32-bit halves each) for ptxas's uniform registers: the warpgroup's
    # index (uniform_q), a persistent walk's first K/V index of each item (the producer's and the consumers')
    broadcasts = config.uniform_q + 2 * config.persistent
    assert len(re.findall(r"shfl\.sync\.idx\.b32\s+%r\d+, %r\d+, 0, 31, -1;", ptx)) == 2 * broadcasts


@pytest.mark.parametrize("options, message", [
    (dict(head_dim=96), "head dims 64, 128, 256"), (dict(consumers=1, pingpong=True), "ping-pong takes two consumers"),
    (dict(head_dim=64, element="e4m3", pingpong=False), "e4m3 takes head dim 128 and 128 keys"),
    (dict(element="e4m3", keys=64), "e4m3 takes head dim 128 and 128 keys"),
    (dict(element="e4m3", staged=3), "fewer than the stages"), (dict(element="f32"), "f16, bf16 and e4m3"),
    (dict(keys=100), "keys a multiple of 64"), (dict(consumers=4), "1 to 3 consumers"),
    (dict(stages=4), "more than the 232448 a block may use"),
    (dict(head_dim=256, consumers=1, pingpong=False, keys=64, persistent=True), "grid takes head dims 64, 128"),
    (dict(head_dim=64, consumers=1, keys=64, ctas_per_sm=5), "1 to 4 CTAs an SM"),
    (dict(head_dim=64, consumers=1, keys=64, ctas_per_sm=4), "more than an SM's 233472"),
    (dict(persistent=True, varlen=True), "packed sequences run on the launched grid"),
    (dict(page_rows=16), "paged K/V takes packed sequences"), (dict(varlen=True, page_rows=24), "multiple of 16"),
    (dict(varlen=True, keys=64, page_rows=128), "dividing the key tile's 64"),
    (dict(pack_gqa=True), "pack_gqa takes packed sequences"), (dict(split_kv=True), "split_kv takes packed")])
def test_what_the_kernel_does_not_take_is_a_value_error(options, message):
    with pytest.raises(ValueError, match=message):
        HopperAttentionConfig(**options)


def test_several_ctas_an_sm_share_its_registers():
    """ctas_per_sm (named "o2"): .minnctapersm 2, so a thread of the 256 starts with 65536 / 512 = 128 registers;
    the producer gives back 128 - 24 = 104 of them and its one consumer takes all: 232. The persistent grid
    launches that many CTAs an SM."""
    config = HopperAttentionConfig.of(64, True, keys=64, consumers=1, ctas_per_sm=2)
    ptx = _ptx(config)
    assert str(config) == "attention_d64_f16_causal_r64k64s3uno2_sm90a" and config.consumer_registers == 232
    assert ".minnctapersm 2" in ptx and re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", ptx)
    walking = HopperAttentionConfig.of(64, True, keys=64, consumers=1, ctas_per_sm=2, persistent=True)
    assert walking.grid(batch_heads=100, seq=1024, sms=132) == 264 and config.grid(100, 1024, 132) == 1600


def test_the_consumers_take_turns_issuing_their_gemms(filecheck):
    """Ping-pong: consumer c waits at named barrier 2 + c (256 threads: its 128 and the other's arrival) before
    each issue of its GEMMs, and arrives at the other's after it; consumer 0's first turn waits for nothing and
    consumer 1's last arrives nowhere, so that each barrier's arrivals and waits pair up. Without ping-pong, no
    named barrier (the default)."""
    ptx = _ptx(HopperAttentionConfig(128, pingpong=True))
    waits = re.findall(r"bar\.sync\s+(\d+), 256;", ptx)
    arrivals = re.findall(r"bar\.arrive\s+(\d+), 256;", ptx)
    # turns: the first (key tile 0's S), one a loop (the unmasked, the masked), the last P V
    assert sorted(waits) == ["2", "2", "2", "3", "3", "3", "3"] and sorted(arrivals) == ["2", "2", "2", "3", "3", "3", "3"]
    filecheck(ptx, """
    CHECK: bar.sync{{\\s+}}3, 256;
    CHECK: wgmma.mma_async
    CHECK: bar.arrive{{\\s+}}3, 256;
    CHECK: wgmma.wait_group.sync.aligned 0;
    """)
    assert not re.search(r"bar\.(sync|arrive)\s+[23],", _ptx(HopperAttentionConfig(128)))


def test_o_leaves_by_stmatrix_into_shared_memory_and_3d_tma_stores(filecheck):
    """Each consumer's O band (64 rows, 16-bit, boxes of 64 columns, proven the bytes of the O tile's words) by
    stmatrix over its own rows of Q's tile, fenced, its warps met at named barrier 4 + c (128 threads), then a TMA
    store a box through O's 3-D map (head, row, column: a box stops at its head's last row), waited for. fp8 on
    the launched grid: over the staged V tiles."""
    config = HopperAttentionConfig(128)
    layouts, box = flash_layouts.tiles(config), flash_layouts.boxes(config)
    assert (box["o"].rows, box["o"].columns, box["o"].swizzle_bytes) == (64, 64, 128)
    assert layouts["o_band"].sizes == (64, 64) and config.o_offset == 0
    fp8 = HopperAttentionConfig.of(128, element="e4m3", persistent=False)
    assert fp8.o_offset == 128 * 128 + 4 * 2 * 128 * 128 and fp8.staged * fp8.tile_bytes == 2 * 128 * 128
    # each box at its own 64 columns of O: the second 128 rows x 64 columns further in the tile, at column 64
    assert [(offset, column) for offset, column, _ in flash_layouts.o_stores(config)] == [(0, 0), (128 * 64, 64)]
    assert [column for _, column, _ in flash_layouts.o_stores(HopperAttentionConfig.of(256))] == [0, 64, 128, 192]
    ptx = _ptx(config)
    filecheck(ptx, """
    CHECK: .entry attention(
    CHECK-COUNT-8: stmatrix.sync.aligned.m8n8.x4.shared.b16
    CHECK: fence.proxy.async.shared::cta;
    CHECK: bar.sync{{\\s+}}{{4|5}}, 128;
    CHECK: cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%rd{{[0-9]+}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}], [%rd{{[0-9]+}}];
    CHECK-NEXT: cp.async.bulk.commit_group;
    CHECK: cp.async.bulk.wait_group.read {{\\s*}}0;
    """)
    assert ptx.count("cp.async.bulk.tensor.3d") == 2 and "st.global.v2" not in ptx  # 2 boxes of 64 columns


def test_lazy_rescaling_rescales_o_only_under_a_warp_vote(filecheck):
    """lazy_rescale (e4m3's default, named "l"): a row's max moves on only where a tile's scores pass it by more
    than RESCALE_SLACK (so a probability stays at most 2^8, within e4m3's 448), and O's 64 registers a thread are
    multiplied only in a branch the warp takes together, once some max of its rows moved (vote.sync.any), in both
    of the main loop's loops (the unmasked key tiles and the masked ones); without it, on every key tile."""
    lazy = HopperAttentionConfig.of(128, element="e4m3")
    assert lazy.lazy_rescale and str(lazy) == "attention_d128_e4m3_r128k128s4t2ul_persistent_sm90a"
    assert 2 ** hopper_attention_tiles.RESCALE_SLACK < 448 and not HopperAttentionConfig.of(128).lazy_rescale
    ptx = _ptx(lazy)
    assert ptx.count("vote.sync.any.pred") == 2
    filecheck(ptx, """
    CHECK: wgmma.wait_group.sync.aligned 0;
    CHECK: vote.sync.any.pred{{\\s+}}[[ANY:%p[0-9]+]], {{%p[0-9]+}}, -1;
    CHECK-NEXT: not.pred{{\\s+}}[[SKIP:%p[0-9]+]], [[ANY]];
    CHECK-NEXT: @[[SKIP]] bra
    CHECK-COUNT-64: mul.rn.ftz.f32
    CHECK: vote.sync.any.pred
    """)
    assert "vote.sync" not in _ptx(HopperAttentionConfig(128))  # (lazy_rescale off: the default's, built for others)


def test_a_persistent_walk_writes_o_apart_from_q(filecheck):
    """Persistent: O's tile is not written over Q's, so that a consumer's band of Q is free once its last S is
    done and the next item's Q loads under this item's last P V and epilogue. At d 64 (three consumers of 64
    keys) O's tile has bytes of its own after the stages: the storing thread waits until the item before's
    stores have read them, its consumer's warps meet, then they write (and the walk's end waits for the last
    stores). At d 128 no bytes are left beside 3 stages of 128 keys: O goes over the item's last key tile's
    stage once every consumer is done with it (named barrier 1, all 256 consumer threads), and that stage is
    released once the stores have read it. One item a CTA: over Q, as before."""
    d64, d128 = HopperAttentionConfig.of(64, persistent=True), HopperAttentionConfig(128, persistent=True)
    assert not d64.o_in_stage and d64.o_offset == d64.q_bytes + 2 * 3 * d64.tile_bytes
    assert d64.shared_bytes == d64.o_offset + 192 * 64 * 2
    assert d128.o_in_stage and d128.o_offset is None and d128.shared_bytes == HopperAttentionConfig(128).shared_bytes
    ptx = _ptx(d64)
    filecheck(ptx, """
    CHECK: cp.async.bulk.wait_group.read {{\\s*}}0;
    CHECK: bar.sync{{\\s+}}{{4|5|6}}, 128;
    CHECK-COUNT-4: stmatrix.sync.aligned.m8n8.x4.shared.b16
    CHECK: fence.proxy.async.shared::cta;
    CHECK: bar.sync{{\\s+}}{{4|5|6}}, 128;
    CHECK: cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group
    CHECK-NEXT: cp.async.bulk.commit_group;
    CHECK: cp.async.bulk.wait_group.read {{\\s*}}0;
    CHECK-NEXT: $L__BB
    CHECK-NEXT: ret;
    """)
    assert ptx.count("cp.async.bulk.wait_group.read") == 2  # before O is written, and at the walk's end
    ptx = _ptx(d128)
    filecheck(ptx, """
    CHECK: bar.sync{{\\s+}}1, 256;
    CHECK-COUNT-8: stmatrix.sync.aligned.m8n8.x4.shared.b16
    CHECK: fence.proxy.async.shared::cta;
    CHECK: cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group
    CHECK: cp.async.bulk.wait_group.read {{\\s*}}0;
    CHECK: mbarrier.arrive.shared.b64
    """)
    assert ptx.count("cp.async.bulk.wait_group.read") == 1 and not re.search(r"bar\.sync\s+1,", _ptx(HopperAttentionConfig(128)))
    fp8 = HopperAttentionConfig.of(128, element="e4m3")  # (persistent; one item a CTA: over the staged V tiles)
    assert not fp8.o_in_stage and fp8.o_offset == fp8.tiles_bytes == fp8.staging_offset + 2 * fp8.tile_bytes
    assert HopperAttentionConfig.of(128, element="e4m3", persistent=False).o_offset == fp8.staging_offset
    assert fp8.shared_bytes == fp8.o_offset + 128 * 128 * 2 and fp8.index_period == 8
    assert HopperAttentionConfig.of(128, element="e4m3", persistent=True, stages=5).index_period == 20
    with pytest.raises(ValueError, match="writes O's tile over a stage"):  # 192 rows of O, stages of 64 keys
        HopperAttentionConfig(128, consumers=3, keys=64, stages=5, persistent=True)


def _tag(row: int, column: int) -> int:
    return row << 8 | column  # rows below 128, columns below 256: one 16-bit value each


@pytest.mark.parametrize("config", [HopperAttentionConfig(128), HopperAttentionConfig.of(64),
                                    HopperAttentionConfig.of(256)], ids=str)
def test_each_element_of_o_reaches_its_row_and_column_on_the_model(config):
    """On the reference model (sharing nothing with the kernel's layouts): each consumer's accumulators tagged
    with their (row, column) of O by wgmma's fragment, packed in pairs as the epilogue packs them, written by the
    band's stmatrix from the consumer's first word; then what each TMA store reads of its box (`o_stores`: its
    first element and its column of O) holds, at box element (r, c), the tag of O's (64 consumer + r, column + c)."""
    from mlir_tile.models import reference
    from mlir_tile.tiling.tiled import packed_slot
    from mlir_tile.tiling.tiled import tiled_store_c

    d, band = config.head_dim, tiled_store_c(4, flash_layouts.tiles(config)["o_band"])
    words = np.zeros(config.rows * d // 2, np.uint32)
    band_words = 64 * flash_layouts.O_BOX_COLUMNS // 2
    for consumer in range(config.consumers):
        packed = np.zeros((128, band.whole.slots), np.uint32)
        for thread in range(128):
            for block in range(d // 8):
                for half in range(2):
                    low, high = (_tag(64 * consumer + row, column) for row, column in (
                        reference.wgmma_accumulator_position(thread, 4 * block + 2 * half + i) for i in range(2)))
                    packed[thread, packed_slot(block, half)] = low | high << 16
        start = band_words * consumer
        words[start:] = reference.emulate(band.whole.opcode, band.whole.shared, band.whole.registers, words[start:],
                                          packed, "warpgroup")
    for consumer in range(config.consumers):
        for offset, column, box in flash_layouts.o_stores(config):
            read = reference.tma_box_read(words.view(np.uint8), 128, box.rows, 2 * box.columns,
                                          4 * band_words * consumer + 2 * offset).view(np.uint16)
            expected = [[_tag(64 * consumer + r, column + c) for c in range(box.columns)] for r in range(box.rows)]
            assert (read == np.array(expected, np.uint16)).all(), (consumer, column)


def test_a_consumers_o_band_out_of_place_is_refused(monkeypatch):
    """O's tile is proven when made (`common.stored_tile`): were O's boxes 128 columns wide (256 bytes), no
    128-byte swizzled box would hold a consumer's band, and the configuration is refused."""
    monkeypatch.setattr(flash_layouts, "O_BOX_COLUMNS", 128)
    with pytest.raises(ValueError):
        flash_layouts._o_tiles(HopperAttentionConfig(128))


def test_each_head_dim_and_mask_take_their_measured_shape():
    """d 256: 64 keys a tile, one consumer, 3 stages (Q and the stages fill 224 KB); d 64: three consumers of 64
    keys; d 128 the persistent grid; at d 64 and 256 the pipelines' indices in 32 bits
    (`narrow`: its own kernel, named so, on the launched grid; a persistent walk's always are); Q's descriptors
    in uniform registers but at d 256; e4m3 (d 128) on the persistent grid; no ping-pong by default; the caller's
    fields over them."""
    config = HopperAttentionConfig.of(256, True, "bf16")
    assert (config.keys, config.stages, config.consumers, config.shared_bytes) == (64, 3, 1, 64 * 256 * 2 + 3 * 2 * 64 * 256 * 2)
    unmasked, masked = HopperAttentionConfig.of(64), HopperAttentionConfig.of(64, True)
    assert (unmasked.consumers, unmasked.keys, unmasked.rows) == (masked.consumers, masked.keys, masked.rows) == (3, 128, 192)
    assert [HopperAttentionConfig.of(d, causal).uniform_q for d in (64, 128, 256) for causal in (False, True)] == [
        True] * 4 + [False] * 2 and HopperAttentionConfig.of(128, element="e4m3").uniform_q
    assert [HopperAttentionConfig.of(d, causal).narrow for d in (64, 128, 256) for causal in (False, True)] == [
        True, True, False, False, True, True]
    assert [HopperAttentionConfig.of(d, causal).persistent for d in (64, 128, 256) for causal in (False, True)] == [
        False, False, True, True, False, False] and HopperAttentionConfig.of(128, True, "e4m3").persistent
    assert str(HopperAttentionConfig.of(64)) == "attention_d64_f16_r192k128s3un_sm90a"
    assert str(HopperAttentionConfig.of(64, persistent=True)) == "attention_d64_f16_r192k128s3u_persistent_sm90a"
    assert HopperAttentionConfig.of(128, persistent=True).narrow_index
    assert HopperAttentionConfig.of(64, consumers=2, keys=128, uniform_q=False, narrow=False) == HopperAttentionConfig(64)
    assert not HopperAttentionConfig.of(64).pingpong and not HopperAttentionConfig.of(128).pingpong
    assert HopperAttentionConfig.of(128, pingpong=True).pingpong
    assert HopperAttentionConfig.of(256, stages=1).stages == 1 and HopperAttentionConfig.of(128).keys == 128


def test_sequence_lengths_take_the_measured_tables_shapes():
    """`picked` reads MEASURED_SHAPES (the benchmark's data), written out here from the JSON: a band's fields hold
    from the length after the band before up to its own, the last band's beyond (and are `of`'s); a caller's
    shape is `of`'s with its fields (a band's are not kept beside them); every kernel picked is shipped."""
    import json
    from pathlib import Path

    from mlir_tile.kernels.flash import sm90_tiles

    rows = json.loads((Path(sm90_tiles.__file__).parent / sm90_tiles.MEASURED_SHAPES).read_text())["shapes"]
    picked, shipped = HopperAttentionConfig.picked, {name for name, _ in flash_launch.hopper_shipped_kernels("sm_90")}
    groups = {}
    for row in rows:
        groups.setdefault((row["head_dim"], row["causal"], row["elements"]), []).append(row)
    assert {(d, causal) for d, causal, _ in groups} == {(d, c) for d in (64, 128, 256) for c in (False, True)}
    for (d, causal, kind), bands in groups.items():
        bands.sort(key=lambda band: band["up_to"] or 10 ** 9)
        assert [band["up_to"] is None for band in bands] == [False] * (len(bands) - 1) + [True]
        for element in ("e4m3",) if kind == "e4m3" else ("f16", "bf16"):
            starts = [1] + [band["up_to"] + 1 for band in bands[:-1]]
            for start, band in zip(starts, bands):
                expected = HopperAttentionConfig(d, causal, element, **band["fields"])
                for seq in (start, band["up_to"] or 10 ** 6):
                    assert picked(d, causal, element, seq) == expected and str(expected) in shipped
            assert HopperAttentionConfig.of(d, causal, element) == expected  # (the last band's)
            assert picked(d, causal, element, 1, lazy_rescale=True) == HopperAttentionConfig(
                d, causal, element, **{**bands[-1]["fields"], "lazy_rescale": True})


def test_a_measured_table_without_a_band_for_the_longest_sequences_is_refused(tmp_path, monkeypatch):
    """A table whose rows for a head dim and mask all stop at a length leaves longer sequences no kernel:
    ValueError naming the rows."""
    import json

    from mlir_tile.kernels.flash import sm90_tiles

    row = {"head_dim": 64, "causal": False, "elements": "16-bit", "up_to": 1024, "fields": {}}
    (tmp_path / "shapes.json").write_text(json.dumps({"shapes": [row]}))
    monkeypatch.setattr(sm90_tiles, "MEASURED_SHAPES", str(tmp_path / "shapes.json"))
    sm90_tiles._table.cache_clear(), sm90_tiles._bands.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"d 64, causal False, 16-bit want one with no length .*\[1024\]"):
            HopperAttentionConfig.picked(64, False, "f16", 1)
    finally:
        monkeypatch.undo()
        sm90_tiles._table.cache_clear(), sm90_tiles._bands.cache_clear()


def test_the_command_line_takes_the_configurations_fields_as_options():
    """`command_line.add_fields`: an option per field of HopperAttentionConfig but d, the mask and the element
    (ints by value, booleans as --name / --no-name), None where not given, as `checks.configure` takes them."""
    import argparse

    from mlir_tile.kernels.command_line import add_fields, given
    from mlir_tile.kernels.flash.checks import configure

    parser = argparse.ArgumentParser()
    names = add_fields(parser, HopperAttentionConfig, ("head_dim", "causal", "element"), "the head dim's")
    assert set(names) == {"keys", "consumers", "stages", "pingpong", "staged", "persistent", "uniform_q", "narrow",
                          "lazy_rescale", "ctas_per_sm", "varlen", "page_rows", "pack_gqa", "split_kv"}
    fields = vars(parser.parse_args(["--consumers", "3", "--keys", "64", "--no-persistent", "--lazy-rescale"]))
    assert given(fields) == {"consumers": 3, "keys": 64, "persistent": False, "lazy_rescale": True}
    assert configure("f16", 64, False, arch="sm_90a", **fields) == HopperAttentionConfig.of(
        64, consumers=3, keys=64, persistent=False, lazy_rescale=True)
    with pytest.raises(SystemExit):
        parser.parse_args(["--stages", "two"])
    with pytest.raises(ValueError, match="--consumers set Hopper's path's fields"):
        configure("f16", 64, False, consumers=3)


def test_fp8_transposes_v_into_ps_key_order_and_reads_it_k_major(filecheck):
    """e4m3, d 128: V's tiles by TMA into a staging ring, the producer warpgroup's four warps rewrite each as V^T
    with key j at column order(j) (`transposition`: 4 steps of two ldmatrix.trans, byte permutes, two stmatrix,
    proven on the model) and arrive on the stage's full barrier; S by e4m3 wgmma from shared memory, P packed as
    e4m3 (cvt.rn.satfinite) in that order, P V in the RS form; the descales applied; O in bf16."""
    from mlir_tile.isa.atoms import a_key_order, wgmma

    config = HopperAttentionConfig.of(128, element="e4m3")
    layouts, plan = flash_layouts.tiles(config), flash_layouts.transposition(config)
    order = a_key_order(wgmma(128, "e4m3"), wgmma(128, "e4m3"))
    assert layouts["key_order"] == order and plan.key_order == order and len(plan.steps) == 4
    assert all(layouts["v"].offset(n, j) == layouts["v_t"].offset(n, order.offset(j)) for n in range(128)
               for j in range(128))
    assert config.shared_bytes == 128 * 128 + 4 * 2 * 128 * 128 + 2 * 128 * 128 + 128 * 128 * 2  # (O's own: persistent)
    assert config.consumer_registers == 224
    ptx = _ptx(config)
    filecheck(ptx, """
    CHECK: .param .u64 attention_param_5,
    CHECK-NEXT: .param .u64 attention_param_6,
    CHECK-NEXT: .param .u64 attention_param_7,
    CHECK-NEXT: .param .u64 .ptr .align 16 attention_param_8,
    CHECK-NEXT: .param .u64 .ptr .align 16 attention_param_9,
    CHECK-NEXT: .param .u64 .ptr .align 16 attention_param_10
    CHECK-DAG: setmaxnreg.inc.sync.aligned.u32 {{\\s*}}224;
    CHECK-DAG: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}
    CHECK-DAG: cvt.rn.satfinite.e4m3x2.f32
    CHECK-DAG: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{{.*}}}, {{{.*}}}, %rd{{[0-9]+}}
    CHECK-DAG: cvt.rn.bf16x2.f32
    CHECK-DAG: setmaxnreg.dec.sync.aligned.u32 {{\\s*}}56;
    CHECK-DAG: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
    CHECK-DAG: prmt.b32
    CHECK-DAG: stmatrix.sync.aligned.m8n8.x4.shared.b16
    CHECK-DAG: fence.proxy.async.shared::cta;
    """)
    # the transposer's 4 steps of two, then O's band (64 x 128 16-bit a warpgroup: 8 stmatrix.x4 a thread)
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans") == 2 * 4 and ptx.count("stmatrix.sync") == 2 * 4 + 8
    # Q's box a band, then K's and V's (128 bytes of d each) of the first two tiles and in the loop
    assert ptx.count("cp.async.bulk.tensor.2d") == 2 + 3 * 2


def test_fp8_p_v_on_the_model_is_exactly_p_times_v():
    """The fp8 data path on the reference model (d 128): V (keys x d, small integers exact in e4m3) written by
    TMA's box into the staging tile, rewritten as V^T by the plan (`transposition`), read by wgmma's operand
    fetch through the descriptors of V's tile taken in P's key order (as `wgmma` reads a Fragment's B); A made of
    S's accumulators by `accumulators_as_a`'s slots into the e4m3 A fragment: the sum over K steps of A B^T is
    S V exactly. A key misplaced between P and V^T anywhere in the chain would show."""
    from mlir_tile.isa import fp8
    from mlir_tile.models import reference
    from mlir_tile.isa.atoms import accumulators_as_a, wgmma
    from mlir_tile.algebra.operations import composition, right_inverse
    from mlir_tile.isa.wgmma import descriptor_for

    config = HopperAttentionConfig.of(128, element="e4m3")
    layouts, plan = flash_layouts.tiles(config), flash_layouts.transposition(config)
    s_atom, o_atom = wgmma(128, "e4m3"), wgmma(128, "e4m3")
    rng = np.random.default_rng(3)
    v, scores = rng.integers(-7, 8, (128, 128)), rng.integers(-7, 8, (64, 128))
    staged = np.zeros(config.tile_bytes, np.uint8)
    reference.tma_box_write(fp8.encode_integers(v, "e4m3"), 128, staged)
    v_t = byte_transpose.emulate(plan, staged.view(np.uint32), np.zeros(plan.target.cosize, np.uint32)).view(np.uint8)
    b = composition(layouts["v"], (None, right_inverse(layouts["key_order"])))
    slots = accumulators_as_a(s_atom, o_atom, layouts["key_order"])
    product = np.zeros((64, 128))
    for step in range(128 // 32):
        fields, start = descriptor_for(b, 8, 128, 32, (0, 32 * step))
        b_step = fp8.decode(reference.wgmma_operand(v_t, fields.bits(start), fields.major == "K", 8, 128), "e4m3")
        a_step = np.zeros((64, 32))
        for thread in range(128):
            for value in range(16):
                row, column = o_atom.a.coordinate(thread, value)
                slot = slots[4 * step + value // 4][value % 4]
                a_step[row, column] = scores[reference.wgmma_accumulator_position(thread, slot)]
        product += a_step @ b_step.T
    assert (product == scores @ v).all()


def test_the_command_line_builds_hoppers_attention_and_refuses_what_it_does_not_take(tmp_path, monkeypatch, capsys):
    """`python -m mlir_tile.kernels.attention` builds Hopper's kernels (run as a user runs it) and refuses what
    they do not take with argparse's one line and status 2 (the refusals run its `main` in this process)."""
    from test_kernels_command_line import example
    from mlir_tile.kernels.flash.__main__ import main

    def refused(*options):
        monkeypatch.setattr("sys.argv", ["attention", *map(str, options)])
        with pytest.raises(SystemExit) as exit_:
            main()
        return exit_.value.code, capsys.readouterr().err

    ran = example("attention.py", "--ptx-out", tmp_path / "a.ptx", "--arch", "sm_90a", "--head-dim", "128")
    assert ran.returncode == 0, ran.stderr
    first = (tmp_path / "a.ptx").read_text().split("\n", 1)[0]
    assert '"arch": "sm_90a"' in first and '"head_dim": 128' in first
    for options, message in ((["--arch", "sm_90a", "--tuned", "--ptx-out", tmp_path / "b.ptx"], "--tuned picks the sm_80 kernel"),
                             (["--arch", "sm_90a", "--emulate"], "Hopper's runs on the GPU"),
                             (["--arch", "sm_90a", "--dtype", "e4m3", "--ptx-out", tmp_path / "c.ptx"], "e4m3 takes head dim 128"),
                             (["--dtype", "e4m3", "--ptx-out", tmp_path / "d.ptx"], "f16 and bf16"),  # (sm_80's: 16-bit)
                             (["--persistent", "--arch", "sm_90a", "--head-dim", "256", "--ptx-out", tmp_path / "f.ptx"],
                              "grid takes head dims 64, 128"),
                             (["--persistent", "--ptx-out", tmp_path / "f.ptx"], "--persistent set Hopper's path's fields"),
                             (["--arch", "sm_90a", "--stages", "two", "--ptx-out", tmp_path / "g.ptx"],
                              "invalid int value: 'two'")):
        code, error = refused(*options)
        assert code == 2 and message in error and "Traceback" not in error, error
    ran = example("attention.py", "--ptx-out", tmp_path / "e.ptx", "--arch", "sm_90a", "--dtype", "e4m3", "--head-dim", "128")
    assert ran.returncode == 0 and "e4m3.e4m3" in (tmp_path / "e.ptx").read_text(), ran.stderr
    # (the fields as options, --consumers 3 --keys 64 among them: test_the_command_line_takes_the_configurations_...)


def test_the_sm90_library_ships_each_hopper_attention_kernel():
    """Every (d, mask, element) `HopperAttention` picks is among the kernels the wheel ships for sm_90, none for
    sm_80."""
    from mlir_tile.kernels import ship

    names = {name for name, _ in ship.kernels("sm_90")}
    assert {str(config) for config in CONFIGS} <= names
    packed = {str(HopperAttentionConfig.packed(c.head_dim, c.causal, c.element, seq)) for c in CONFIGS if not c.fp8
              for seq in (1, 1025, 5000)}
    assert packed <= names and len(packed) == 16
    assert not any(name.startswith("attention_") and name.endswith("_sm90a") for name, _ in ship.kernels("sm_80"))
