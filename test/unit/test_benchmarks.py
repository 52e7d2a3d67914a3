"""The benchmark kernels mean what their tables say: every configuration is a legal transfer whose predicted
share (the bank model) is what its row claims, the synthesized ones are conflict-free, a widened kernel is
really built wider, and the writer kernels address the synthesized layouts (checked against the layout)."""
import re
from pathlib import Path

import pytest

import bench  # noqa: E402

ALL = [config for configs in bench.CONFIG_SETS.values() for config in configs]


@pytest.mark.parametrize("config", ALL, ids=lambda c: c.name)
def test_every_benchmark_is_a_legal_transfer_with_the_share_its_name_says(config):
    share = bench.predicted_share(config)
    expected = {"2-way": 0.5, "8-way": 0.125, "128-byte rows": 0.125, "spec example": 0.25}
    assert share == next((value for key, value in expected.items() if key in config.name), 1.0)


@pytest.mark.parametrize("config", ALL, ids=lambda c: c.name)
def test_every_benchmark_kernel_builds_through_the_verifier(config):
    """`make bench` builds each kernel with the builder, whose `transfer` runs the verifier: the loads' view
    at a loop-carried start must satisfy [row-alignment] (whole swizzle periods), as the rule has it since
    issue 19; the kernel holds its UNROLL transfers of the configuration's opcode."""
    text = str(bench.generated_kernel(config))
    opcodes = re.findall(r'opcode = "([^"]+)"', text)
    if config.widen:
        assert opcodes and all("x4" in opcode for opcode in opcodes)
    else:
        assert opcodes == [config.opcode] * bench.UNROLL


def test_the_fragment_loop_kernel_builds_through_the_verifier():
    """benchmarks/fragment_loop.py's kernel (issue 13), its views at a loop-carried start: per iteration one
    A and one B transfer, and the 32 mma."""
    import fragment_loop

    text = str(fragment_loop.generated_kernel())
    assert len(re.findall(r"tile\.matrix_transfer", text)) == 2
    assert text.count("nvvm.mma.sync") == fragment_loop.MMAS_PER_ITERATION


def test_the_bank_validation_kernels_build(tmp_path):
    """benchmarks/banks_validation.py's build side (issue 14): each case's kernel compiles to PTX that issues
    the case's instruction, and the manifest holds the model's prediction for it."""
    import json

    import banks_validation

    banks_validation.build(tmp_path, 36)
    manifest = json.loads((tmp_path / "cases.json").read_text())
    assert len(manifest) == 36
    for case in manifest:
        assert case["opcode"] in (tmp_path / f"case_{case['index']}.ptx").read_text()
        assert case["predicted_per_instruction"] >= 1


def test_synthesized_layouts_cover_the_issue_combinations():
    names = [config.name for config in bench.SYNTHESIS_CONFIGS]
    assert len(names) >= 20 and any("ld.trans" in n for n in names) and any("s8" in n for n in names)
    assert {"64x64 fp16, ld", "64x128 fp16, ld"} <= set(names)  # 64 and 128 halves a row


@pytest.mark.parametrize("config", [c for c in bench.WIDENING_CONFIGS if c.widen], ids=lambda c: c.name)
def test_a_widened_kernel_issues_fewer_wider_instructions(config):
    text = str(bench.generated_kernel(config))
    counts = {int(n) for n in re.findall(r"m8n8\.x(\d)", text)}
    assert counts == {4}, counts


@pytest.mark.parametrize("rows, columns, bits", [(64, 64, 16), (128, 128, 16), (64, 32, 16), (32, 256, 8)])
def test_the_writer_stores_each_chunk_where_the_synthesized_layout_puts_it(rows, columns, bits):
    tile = bench.Tile(rows, columns, bits)
    choice = bench.synthesize(tile)
    source = bench.writer_source(tile)
    per_row = tile.row_words // 4
    lane_linear = lambda lane: (lane // per_row) * choice.pitch + (lane % per_row) * 4
    swizzled = choice.swizzle or (lambda offset: offset)
    linear = lambda chunk: (chunk // per_row) * choice.pitch + 4 * (chunk % per_row)
    constants = [int(c) for c in re.findall(r"swizzled_lane \^ (\d+)u", source)]
    assert len(constants) * 32 == rows * per_row  # every chunk once
    for step, constant in enumerate(constants):  # store `step`: lane t writes chunk 32 * step + t
        assert [swizzled(lane_linear(t)) ^ constant for t in range(32)] == [swizzled(linear(32 * step + t)) for t in range(32)]


@pytest.mark.parametrize("config", [c for c in ALL if c.is_load and c.scope == "warp" and ".trans" not in c.opcode],
                         ids=lambda c: c.name)
def test_the_hand_written_addresses_load_what_the_layout_says(config):
    """The baseline's address table, fed to the ISA model of ldmatrix, gives each lane the words the layout
    assigns it: word (matrix, row, word) of each repeat to lane 4*row+word (no address code of the lowering
    is involved)."""
    import itertools

    import numpy as np

    from mlir_tile.algebra.layout import Layout
    from mlir_tile.models.reference import ldmatrix_warp

    shared = Layout.parse(config.shared)
    words = (np.arange(bench.shared_words(config), dtype=np.uint64) * 2654435761 % 2**32).astype(np.uint32)
    rows = bench.row_addresses(config)
    for position, repeat in enumerate(itertools.product(*(range(n) for n in shared.sizes[:-3]))):
        loaded = ldmatrix_warp(config.count, False, rows[position], words)
        expected = [[int(words[shared.offset(*repeat, matrix, lane // 4, lane % 4)]) for matrix in range(config.count)]
                    for lane in range(32)]
        assert [list(map(int, lane)) for lane in loaded] == expected


def test_the_main_loop_is_the_loop_with_the_most_mma_and_the_fewest_instructions():
    """`bench.mma_loop_counts` on a cuobjdump-style listing: four loops (a backward branch and its target),
    the one without HMMA, the longer of the two with two HMMA and the outer one holding both (a persistent
    kernel's tile loop, four HMMA) left out; NOPs not counted."""
    listing = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0020*/               @P0 BRA 0x10 ;
        /*0030*/                   LDSM.16.M88.4 R4, [R8] ;
        /*0040*/                   HMMA.16816.F32 R12, R4, R6, R12 ;
        /*0050*/                   NOP ;
        /*0060*/                   HMMA.16816.F32 R16, R4, R6, R16 ;
        /*0070*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0080*/              @!P1 BRA 0x30 ;
        /*0090*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR4][R10.64] ;
        /*00a0*/                   LDSM.16.M88.4 R4, [R8] ;
        /*00b0*/                   HMMA.16816.F32 R12, R4, R6, R12 ;
        /*00c0*/                   HMMA.16816.F32 R16, R4, R6, R16 ;
        /*00d0*/                   ISETP.GE.AND P1, PT, R2, R9, PT ;
        /*00e0*/                   FMUL R20, R20, R21 ;
        /*00f0*/               @P1 BRA 0x90 ;
        /*0100*/               @P2 BRA 0x30 ;
        /*0110*/                   EXIT ;
    """
    assert bench.mma_loop_counts(listing) == {"instructions": 5, "HMMA": 2, "LDSM": 1, "LDGSTS": 0, "BAR": 1, "other": 1,
                                              "per HMMA": 2.5}  # the loop at 0x30: its branch the "other"


def test_the_attention_table_names_the_best_kernel_where_the_run_recorded_it():
    """A row's best Hopper kernel: its name where the run recorded `kernels`, else its fields (older runs)."""
    import results

    row = {"element": "f16", "d": 64, "seq": 1024, "causal": False, "SM MHz": 1800.0, "W": 680.0, "hopper {}": 300.0,
           "hopper {'stages': 2}": 310.0, "hopper": 310.0, "cuDNN": 400.0, "vs cuDNN": 0.775}
    named = {**row, "kernels": {"hopper {}": "attention_d64_f16_r192k64s3u_persistent_sm90a",
                                "hopper {'stages': 2}": "attention_d64_f16_r192k64s2u_persistent_sm90a"}}
    assert "| 310.0 | {'stages': 2} | 400.0 |" in results.render_attention_hopper([row])[-1]
    assert "| 310.0 | attention_d64_f16_r192k64s2u_persistent_sm90a | 400.0 |" in results.render_attention_hopper([named])[-1]


def test_results_md_is_the_rendering_of_the_kept_json():
    """benchmarks/RESULTS.md is generated (results.py) from benchmarks/results/*.json, never edited by hand."""
    import results

    folder = Path(__file__).resolve().parents[2] / "benchmarks"
    assert (folder / "RESULTS.md").read_text() == results.render(folder / "results")
    assert "| case | ours, TFLOP/s |" in (folder / "RESULTS.md").read_text()


def test_the_wgmma_loop_is_four_m64n256_batches_a_turn_with_no_wait_inside(tmp_path, filecheck):
    """benchmarks/wgmma_loop.py's kernels: two warpgroups, each turn of the loop one fenced batch of 4 wgmma
    m64n256 (f16 k16, e4m3 k32) on resident 128-byte-swizzled tiles and no wait until after the loop; ptxas
    sm_90a takes them without an injected wait (C7517) or serialization."""
    import shutil
    import subprocess

    import wgmma_loop

    wgmma_loop.build(tmp_path)
    for element, k in (("f16", 16), ("e4m3", 32)):
        ptx = (tmp_path / f"wgmma_{element}.ptx").read_text()
        filecheck(ptx, f"""
        CHECK: .maxntid 256, 1, 1
        CHECK: wgmma.fence.sync.aligned;
        CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n256k{k}.f32.{element}.{element}
        CHECK-NEXT: }}
        CHECK: wgmma.commit_group.sync.aligned;
        CHECK-NOT: wgmma.wait_group
        CHECK: bra
        CHECK: wgmma.wait_group.sync.aligned 0;
        """)
        if shutil.which("ptxas"):
            assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / f"wgmma_{element}.ptx"), "-o",
                                        str(tmp_path / f"{element}.cubin")], capture_output=True, text=True)
            assert assembled.returncode == 0 and "C75" not in assembled.stderr, assembled.stderr


def test_the_hopper_benchmark_measures_configurations_the_kernel_takes():
    """benchmarks/gemm.py's Hopper tiles are kernels `gemm.sm90` builds for their element and B layout (a
    cluster tile with B [K, N] and several boxes a stage is refused: it must not be in the list), each launched
    on whole clusters, within the SM's shared memory."""
    import importlib.util

    from mlir_tile.kernels.gemm.sm90_tiles import hopper_config

    spec = importlib.util.spec_from_file_location("gemm_benchmark", Path(bench.__file__).with_name("gemm.py"))
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)

    for element, major, tile in benchmark._hopper_kernels():
        config = hopper_config(major, tile, element)
        assert config.grid(4096, 11008, 132) % config.cluster == 0 and config.shared_bytes <= 227 * 1024
    from mlir_tile.kernels.gemm.sm90_tiles import SMALL_TILE, measured_tile

    for major, tiles in benchmark.HOPPER_TILES.items():  # what Matmul and ScaledMatmul pick is measured
        assert all(tile in tiles for tile in (SMALL_TILE, measured_tile("f16", major), measured_tile("bf16", major)))
        assert measured_tile("e4m3", major) in benchmark.FP8_TILES[major]


def test_the_measured_table_takes_the_tile_fastest_at_the_most_shapes(tmp_path):
    """hopper-table: per dtype and B layout, among the tiles measured at every shape (no cluster, not
    persistent), the most wins, then the higher geometric mean; bf16, unmeasured, takes f16's."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("gemm_benchmark", Path(bench.__file__).with_name("gemm.py"))
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    row = lambda element, major, rates: {"element": element, "b_major": major, "TFLOP/s": rates}
    shapes = [row("f16", "nk", {"128x256x64s3": 600, "256x128x64s4w": 650, "128x256x64s3c2": 900, "cuBLAS": 700}),
              row("f16", "nk", {"128x256x64s3": 640, "256x128x64s4w": 630, "128x256x64s3c2": 900, "cuBLAS": 700}),
              row("f16", "nk", {"128x256x64s3": 610, "256x128x64s4w": 660, "128x256x64s3p": 990, "cuBLAS": 700}),
              row("f16", "kn", {"128x256x64s3": 500, "128x128x64s4": 500}),
              row("f16", "kn", {"128x256x64s3": 500, "128x128x64s4": 501})]
    (tmp_path / "gemm_hopper_f16.json").write_text(json.dumps({"shapes": shapes}))
    benchmark.hopper_table(tmp_path)
    table = json.loads((tmp_path / "hopper_tiles.json").read_text())
    assert {key: tile["label"] for key, tile in table["tiles"].items()} == {
        "f16:nk": "256x128x64s4w", "f16:kn": "128x128x64s4", "bf16:nk": "256x128x64s4w", "bf16:kn": "128x128x64s4"}
    assert table["tiles"]["f16:nk"]["fields"] == {"bm": 256, "bn": 128, "bk": 64, "stages": 4, "consumer_rows": 128}
    assert table["provenance"]["runs"] == [{"file": "gemm_hopper_f16.json"}] and table["provenance"]["shapes"] == 5



def test_the_attention_table_keeps_the_pick_unless_another_kernel_ran_faster_by_the_margin(tmp_path):
    """attention hopper-table: per head dim, mask and length, the kernel with the highest geometric mean over
    f16 and bf16 where it beats the one picked by more than TABLE_MARGIN (else the picked one); a length's
    fields hold up to it, the longest's beyond, equal neighbours one band; e4m3 apart."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("attention_benchmark", Path(bench.__file__).with_name("attention.py"))
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    picked, pingpong = {"persistent": True}, {"pingpong": True}

    def row(element, seq, rates, prefix="hopper "):
        labels = [f"{prefix}{{}}", f"{prefix}{{'pingpong': True}}"]
        return {"element": element, "d": 128, "seq": seq, "causal": False, "chip": "H100", "date": "2026-12-06",
                "command": "c", **dict(zip(labels, rates)), "fields": dict(zip(labels, (picked, pingpong)))}
    # 1024: ping-pong 3% faster over both; 4096: 1% (kept); 8192: faster in f16 only, slower by the mean
    rows = [row(element, seq, rates) for seq, by_element in ((1024, ((500, 515), (500, 515))),
                                                             (4096, ((600, 606), (600, 606))),
                                                             (8192, ((600, 660), (600, 540))))
            for element, rates in zip(("f16", "bf16"), by_element)]
    (tmp_path / "attention_hopper.json").write_text(json.dumps(rows))
    fp8 = [{**row("e4m3", seq, (700, 800), "e4m3 "), "element": None} for seq in (1024, 4096)]
    (tmp_path / "attention_hopper_fp8.json").write_text(json.dumps(fp8))
    benchmark.hopper_table(tmp_path)
    table = json.loads((tmp_path / "hopper_shapes.json").read_text())
    assert [(band["elements"], band["up_to"], band["fields"]) for band in table["shapes"]] == [
        ("16-bit", 1024, pingpong), ("16-bit", None, picked), ("e4m3", None, pingpong)]
    assert table["provenance"]["runs"][0] == {"file": "attention_hopper.json", "chip": "H100", "date": "2026-12-06",
                                              "command": "c"}
