"""TMA boxes (tma.py): the layout a box of each swizzle mode and element size writes is where the reference
model's write from the definition (bits [4, 4 + B) of each 16-byte chunk's address xor'ed with bits [7, 7 + B))
puts every element; `box_for` finds the mode of the project's synthesized tiles and names the element where a
layout no box writes differs; boxes past TMA's limits are refused."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlir_tile.layout import Layout, Swizzle
from mlir_tile.reference import tma_box_write
from mlir_tile.synthesize import Tile, synthesize
from mlir_tile.tma import ALIGNMENT, Box, TmaMismatch, box_for

DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


@settings(max_examples=60, deadline=None)
@given(element_bits=st.sampled_from([8, 16, 32, 64]), swizzle_bytes=st.sampled_from([0, 32, 64, 128]),
       data=st.data())
def test_a_boxs_layout_is_where_the_tma_write_puts_each_element(element_bits, swizzle_bytes, data):
    element_bytes = element_bits // 8
    widest = (swizzle_bytes or 256) // element_bytes
    columns = data.draw(st.sampled_from([c for c in range(16 // element_bytes, min(widest, 256) + 1,
                                                          16 // element_bytes)]))
    row_bytes = columns * element_bytes  # the fewest rows that are whole repeats of the swizzle:
    repeat = math.lcm(row_bytes, ALIGNMENT[swizzle_bytes]) // row_bytes if swizzle_bytes else 1
    rows = repeat * data.draw(st.integers(1, max(1, 40 // repeat)))
    box = Box(rows, columns, element_bits, swizzle_bytes)
    start = ALIGNMENT[swizzle_bytes] * data.draw(st.integers(0, 3))
    values = np.arange(1, rows * columns + 1, dtype=DTYPES[element_bits]).reshape(rows, columns)
    shared = np.zeros(start + rows * columns * element_bytes + ALIGNMENT[swizzle_bytes], np.uint8)
    tma_box_write(values, swizzle_bytes, shared, start)
    elements = shared[start:start + rows * columns * element_bytes].view(DTYPES[element_bits])
    for r in range(rows):
        for c in range(columns):
            assert elements[box.layout.offset(r, c)] == values[r, c], (r, c)


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
    ((9, 32, 16, 64), r"not whole 512-byte repeats"),
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
    for box in tma_boxes.BOXES:
        ptx = tmp_path / f"{tma_boxes.name(box)}.ptx"
        assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx.read_text()
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
