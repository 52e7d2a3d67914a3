"""TMA boxes (tma.py): the layout a box of each swizzle mode and element size writes is where the reference
model's write from the definition (bits [4, 4 + B) of each 16-byte chunk's address xor'ed with bits [7, 7 + B))
puts every element; `box_for` finds the mode of the project's synthesized tiles and names the element where a
layout no box writes differs; boxes past TMA's limits are refused."""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlir_tile.algebra.layout import Layout, Swizzle
from mlir_tile.models.reference import tma_box_write
from mlir_tile.tiling.synthesize import Tile, synthesize
from mlir_tile.isa.tma import ALIGNMENT, Box, TmaMismatch, box_for

DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


@settings(max_examples=60, deadline=None)
@given(element_bits=st.sampled_from([8, 16, 32, 64]), swizzle_bytes=st.sampled_from([0, 32, 64, 128]),
       data=st.data())
def test_a_boxs_layout_is_where_the_tma_write_puts_each_element(element_bits, swizzle_bytes, data):
    """Narrow swizzled boxes included: rows narrower than the swizzle's span lie a span apart, and the write
    leaves the rest of each span as it was ([tma-swizzle-span])."""
    element_bytes = element_bits // 8
    widest = (swizzle_bytes or 256) // element_bytes
    columns = data.draw(st.sampled_from([c for c in range(16 // element_bytes, min(widest, 256) + 1,
                                                          16 // element_bytes)]))
    rows = (8 if swizzle_bytes else 1) * data.draw(st.integers(1, 5))  # whole repeats: 8 rows of a span
    box = Box(rows, columns, element_bits, swizzle_bytes)
    assert box.bytes == rows * columns * element_bytes
    assert box.shared_bytes == rows * max(columns * element_bytes, swizzle_bytes)
    start = ALIGNMENT[swizzle_bytes] * data.draw(st.integers(0, 3))
    values = np.arange(1, rows * columns + 1, dtype=DTYPES[element_bits]).reshape(rows, columns)
    shared = np.full(start + box.shared_bytes + ALIGNMENT[swizzle_bytes], 0xA5, np.uint8)
    tma_box_write(values, swizzle_bytes, shared, start)
    assert (shared[:start] == 0xA5).all() and (shared[start + box.shared_bytes:] == 0xA5).all()
    elements = shared[start:start + box.shared_bytes].view(DTYPES[element_bits])
    image = np.zeros(len(elements), bool)
    for r in range(rows):
        for c in range(columns):
            assert elements[box.layout.offset(r, c)] == values[r, c], (r, c)
            image[box.layout.offset(r, c)] = True
    untouched = elements[~image].view(np.uint8)
    assert (untouched == 0xA5).all()  # the padding of a narrow box's spans


def test_a_narrow_swizzled_boxs_rows_lie_a_span_apart():
    """The issue's example: 16 rows of 8 halves with the 32-byte swizzle, row r at 32 r (then swizzled)."""
    box = Box(16, 8, 16, 32)
    assert (box.row_bytes, box.pitch_bytes, box.bytes, box.shared_bytes) == (16, 32, 256, 512)
    assert [box.layout.offset(r, 0) * 2 for r in range(8)] == [0, 32, 64, 96, 144, 176, 208, 240]
    assert str(box.layout) == "Sw<1,3,3> o (16,8):(16,1)"


def test_a_tile_with_dense_narrow_rows_is_refused_with_the_span_and_the_fix():
    dense = Layout(((8, 2), 8), ((8, 64), 1), Swizzle(1, 3, 3))  # the tile: rows 16 bytes apart
    with pytest.raises(TmaMismatch, match=r"with the 32-byte swizzle element \(1, 0\) lands at offset 16, the layout "
                                          r"puts it at 8.*\[tma-swizzle-span\] a box's rows of 16 bytes lie a whole "
                                          r"32-byte span apart .* rows 16 elements apart \(Sw<1,3,3> o \(16,8\):\(16,1\)"
                                          r"\), or take the unswizzled box"):
        box_for(dense, 16)
    assert box_for(Box(16, 8, 16, 32).layout, 16) == Box(16, 8, 16, 32)
    assert box_for("(16,8):(8,1)", 16) == Box(16, 8, 16, 0)  # the unswizzled box of dense rows


@pytest.mark.parametrize("rows, columns, element_bits, swizzle_bytes", [
    (128, 64, 16, 128), (64, 32, 16, 64), (64, 16, 16, 32), (128, 32, 32, 128), (64, 128, 8, 128)])
def test_box_for_finds_the_mode_that_writes_the_tile(rows, columns, element_bits, swizzle_bytes):
    assert box_for(Box(rows, columns, element_bits, swizzle_bytes).layout, element_bits) == Box(
        rows, columns, element_bits, swizzle_bytes)


def test_the_synthesized_tiles_of_64_half_rows_are_128_byte_boxes():
    words = synthesize(Tile(128, 64)).layout(Tile(128, 64))  # (rows, 32-bit words): the GEMM's A tile
    assert box_for(words, 32) == Box(128, 32, 32, 128)


def test_a_layout_no_box_writes_names_the_element_that_differs():
    with pytest.raises(TmaMismatch, match=r"with the 128-byte swizzle element \(4, 0\) lands at offset 288, the layout "
                                          r"puts it at 256"):
        box_for(Layout((64, 64), (64, 1), Swizzle(2, 3, 3)), 16)  # 64B's pattern on 128-byte rows
    with pytest.raises(TmaMismatch, match=r"modes tried: none"):
        box_for(Layout((8, 8), (16, 1)), 16)  # padded rows: a box's rows are contiguous
    with pytest.raises(TmaMismatch, match=r"a box's rows are multiples of 16 bytes"):
        box_for("(8,4):(4,1)", 16)


@pytest.mark.parametrize("fields, message", [
    ((8, 300, 16, 0), r"1 to 256 elements"), ((8, 128, 16, 128), r"wider than the 128-byte swizzle's span"),
    ((9, 32, 16, 64), r"not whole 512-byte repeats"), ((12, 8, 16, 32), r"12 rows 32 bytes apart are not whole"),
    ((8, 8, 12, 0), r"elements of 8, 16, 32 or 64 bits"), ((8, 64, 16, 96), r"swizzle of \(0, 32, 64, 128\)")])
def test_boxes_past_tmas_limits_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        Box(*fields)


def test_the_gpu_bundles_kernels_compile_for_sm_90a_and_assemble(tmp_path):
    """The build half of test_runtime_gpu's TMA test: one kernel per box, each a bulk tensor copy on an
    mbarrier that ptxas -arch=sm_90a takes."""
    import shutil
    import subprocess

    from mlir_tile.testing import tma_boxes

    tma_boxes.build(tmp_path)
    for box, store in [(box, False) for box in tma_boxes.BOXES] + [(box, True) for box in tma_boxes.STORE_BOXES]:
        ptx = tmp_path / f"{tma_boxes.name(box, store)}.ptx"
        text = ptx.read_text()
        if store:
            assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group" in text
        else:  # (the mbarrier expects the box's elements' bytes, not its image's span)
            assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in text
            assert re.search(rf"mov.b32\s+%r\d+, {box.bytes};\s+mbarrier.arrive.expect_tx", text), box
        if shutil.which("ptxas"):
            assembled = subprocess.run(["ptxas", "-arch=sm_90a", str(ptx), "-o", str(tmp_path / "box.cubin")],
                                       capture_output=True, text=True)
            assert assembled.returncode == 0, assembled.stderr


def _tma_kernel(action):
    """A kernel of a tensor map, a row and a column, its shared tile 64 x 64 halves on 1024 bytes."""
    from mlir import ir

    from mlir_tile.builder import Kernel, TensorMap

    with Kernel("k", [TensorMap(), "index", "index"], block=(128, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        tensor_map, row, column = k.arguments
        barriers = k.mbarriers("loaded", 1, 1)
        return action(k, tensor_map, row, column, barriers)


@pytest.mark.parametrize("case, message", [
    ("the 64B pattern on 128-byte rows", r"tma_load: no TMA box writes .* element \(4, 0\) lands at offset 288"),
    ("a column of any value", r"the column must be a proven multiple of 16 bytes \(8 elements\)"),
    ("a tile at 512 bytes", r"\[tma-alignment\] tma_load: .* must start on 1024 bytes, but 512 bytes are proven"),
])
def test_tma_load_refuses_what_it_cannot_prove(case, message):
    from mlir.dialects import arith

    from mlir_tile.builder import BuilderError

    def action(k, tensor_map, row, column, barriers):
        shared = k.dynamic_shared(alignment=1024)
        layout, offset = Box(64, 64, 16, 128).layout, 0
        if case == "the 64B pattern on 128-byte rows":
            layout = Layout((64, 64), (64, 1), Swizzle(2, 3, 3))
        if case == "a tile at 512 bytes":
            offset = 512
        else:
            column = arith.muli(column, k.index(8)) if case != "a column of any value" else column
        tile = k.tensor(k.view(shared, (64 * 64,), "f16", offset), layout)
        with pytest.raises(BuilderError, match=message):
            k.tma_load(tile, tensor_map, (row, column if case != "a tile at 512 bytes" else k.index(0)), barriers)
    _tma_kernel(action)


def test_tma_load_returns_the_box_the_host_encodes():
    from mlir.dialects import arith

    def action(k, tensor_map, row, column, barriers):
        tile = k.tensor(k.view(k.dynamic_shared(alignment=1024), (64 * 32,), "f16"), Box(64, 32, 16, 64).layout)
        box = k.tma_load(tile, tensor_map, (row, arith.muli(column, k.index(8))), barriers)
        k.expect_bytes(barriers, 0, box)
        return box
    assert _tma_kernel(action) == Box(64, 32, 16, 64)


def test_the_reference_store_clips_rows_exactly_and_columns_in_whole_chunks():
    """[tma-store-chunks] as the model holds it (the GPU bundle checks the H100 against it): a matrix of 10
    halves a row (20 bytes) in rows of 32 bytes: a box over its last column writes bytes 16-31, past byte 20."""
    from mlir_tile.models.reference import tma_box_store

    destination = np.zeros((4, 32), np.uint8)
    box = np.arange(1, 2 * 32 + 1, dtype=np.uint8).reshape(2, 32)
    tma_box_store(box, destination, 3, 16, 20)  # rows 3 and 4 (past the matrix), columns from byte 16
    assert (destination[3, 16:32] == box[0, :16]).all() and not destination[:3].any() and not destination[3, :16].any()
    destination[:] = 0
    tma_box_store(box, destination, 0, 0, 16)  # rows of whole chunks: nothing past byte 16
    assert (destination[:2, :16] == box[:, :16]).all() and not destination[:, 16:].any()


def test_the_bundles_model_fills_zeros_before_the_first_row_and_column_and_keeps_a_narrow_boxs_padding():
    from mlir_tile.testing.tma_boxes import box_values, expected

    matrix = np.arange(1, 41, dtype=np.uint16).reshape(4, 10)
    box = Box(8, 8, 16, 32)
    values = box_values(matrix, box, -2, -8)
    assert not values[:, :].any()  # (columns -8 to -1: all before the matrix)
    values = box_values(matrix, box, -2, 0)
    assert not values[:2].any() and (values[2:6] == matrix[:, :8]).all() and not values[6:].any()
    image = np.full(box.shared_bytes // 2, 0xBEEF, np.uint16)
    shared = expected(matrix, box, 0, 8, image)
    layout = box.layout
    written = {layout.offset(r, c) for r in range(8) for c in range(8)}
    assert all(shared[i] == 0xBEEF for i in range(len(shared)) if i not in written)
    assert shared[layout.offset(1, 1)] == matrix[1, 9] and shared[layout.offset(1, 2)] == 0


def test_a_tensor_map_is_a_grid_constant_parameter_read_where_the_launch_put_it(filecheck):
    """`TensorMap()` parameters are passed by value (`tile-grid-constant-tensor-maps`): 128 bytes on 64 in the
    parameter space, the TMA load reading them there through `cvta.param` (no copy to local memory); the index
    parameter between them stays a 64-bit value."""
    from mlir import ir

    from mlir_tile.builder import Kernel, TensorMap
    from mlir_tile.compiler.compile import compile_to_ptx

    with Kernel("k", [TensorMap(), "index", TensorMap()], block=(128, 1, 1), chip="sm_90a",
                context=ir.Context()) as k:
        tensor_map, row, _ = k.arguments
        barriers = k.mbarriers("loaded", 1, 1)
        tile = k.tensor(k.view(k.dynamic_shared(alignment=1024), (64 * 64,), "f16"), Box(64, 64, 16, 128).layout)
        k.expect_bytes(barriers, 0, k.tma_load(tile, tensor_map, (row, k.index(0)), barriers))
    ptx = compile_to_ptx(k.module)
    filecheck(ptx, """
    CHECK: .param .align 64 .b8 k_param_0[128],
    CHECK-NEXT: .param .u64 k_param_1,
    CHECK-NEXT: .param .align 64 .b8 k_param_2[128]
    CHECK: mov.b64 [[PARAM:%rd[0-9]+]], k_param_0;
    CHECK: cvta.param.u64 [[MAP:%rd[0-9]+]], [[PARAM]];
    CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{{%rd[0-9]+}}], [[[MAP]], {{{.*}}}]
    """)
    assert "tile.tensor_maps" not in ptx and ".local" not in ptx
