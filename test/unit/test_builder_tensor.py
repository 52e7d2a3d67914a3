"""The tensor layer (builder/tensor.py): the index code it emits, interpreted for given kernel arguments and
thread and block ids (index_code), equals what numpy's own indexing gives (np.arange arrays, np.indices,
np.unravel_index); partitions add the tile's origin to the thread-value layouts' positions; `k.copy` on
tensors emits exactly the tiled copy of `copy_tile_async`; misuse is a BuilderError."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlir import ir
from mlir.passmanager import PassManager
from mlir.dialects import arith

from index_code import kernel, run
from mlir_tile.builder import BuilderError, Global, Kernel
from mlir_tile.builder.tensor import ceil_div, in_units, local_tile, whole_tiles
from mlir_tile.algebra.layout import Layout


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 300), depth=st.integers(1, 300), tile=st.sampled_from([(16, 8), (32, 32), (64, 16), (8, 64)]),
       data=st.data())
def test_a_tile_of_a_global_tensor_and_its_coordinates_are_numpys(m, depth, tile, data):
    m_tile = data.draw(st.integers(0, -(-m // tile[0]) - 1))
    k_tile = data.draw(st.integers(0, -(-depth // tile[1]) - 1))
    row, col = data.draw(st.integers(0, tile[0] - 1)), data.draw(st.integers(0, tile[1] - 1))
    row_major = np.arange(m * depth).reshape(m, depth)

    def build(k, m_value, depth_value, m_tile_value, k_tile_value, row_value):
        memory = k.tensor(k.arguments[0], (m_value, depth_value))  # the output stands in for a global array
        tiles = local_tile(memory, tile, (m_tile_value, None))
        coordinates = local_tile(k.identity_tensor((m_value, depth_value)), tile, (m_tile_value, None))
        here = coordinates[None, None, k_tile_value]
        return [tiles[None, None, k_tile_value].offset(((row_value, 0), col)), tiles.shape[2], *here.residue(),
                *here[(row_value, 0), col], here.inside(((row_value, 0), col)), here.holds(tile)]

    stored = run(kernel(5, build), [m, depth, m_tile, k_tile, row])
    r, c = m_tile * tile[0] + row, k_tile * tile[1] + col
    inside = r < m and c < depth
    expected = [row_major[r, c] if inside else r * depth + c, len(range(0, depth, tile[1])),
                m - m_tile * tile[0], depth - k_tile * tile[1], r, c, int(inside),
                int(row_major[m_tile * tile[0]:, k_tile * tile[1]:][:tile[0], :tile[1]].shape == tile)]
    assert [stored[i] for i in range(len(expected))] == expected


@settings(max_examples=30, deadline=None)
@given(shape=st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9)), data=st.data())
def test_slices_domain_offsets_and_row_major_order_are_numpys(shape, data):
    array = np.arange(int(np.prod(shape))).reshape(shape)
    origin = [data.draw(st.integers(0, s - 1)) for s in shape]
    point = [data.draw(st.integers(0, s - o - 1)) for s, o in zip(shape, origin)]
    index = data.draw(st.integers(0, array.size - 1))

    def build(k, *values):
        tensor = k.tensor(k.arguments[0], values[:3])
        moved = tensor.domain_offset(values[3:6])
        sliced = moved[values[6], None, None]
        return [sliced.offset(values[7:9]), moved.shape[1], *k.identity_tensor(values[:3]).coordinate_of(values[9]),
                *k.identity_tensor(values[:3]).clamped([values[0], values[1], 0])]

    stored = run(kernel(10, build), [*shape, *origin, *point, index])
    moved = array[origin[0]:, origin[1]:, origin[2]:]
    expected = [moved[point[0]][point[1], point[2]], moved.shape[1], *np.unravel_index(index, shape),
                shape[0] - 1, shape[1] - 1, 0]
    assert [stored[i] for i in range(len(expected))] == [int(e) for e in expected]


def test_a_partition_adds_the_tiles_origin_to_the_layouts_position():
    rows, columns = Layout((4, 2), (1, 8)), Layout((4, 2), (2, 1))

    def build(k, row0, col0):
        place = k.identity_tensor((100, 100)).domain_offset((row0, col0)).partition([rows, columns])
        return [*place[k.thread_id(), 1]]

    for thread in (0, 3):
        assert run(kernel(2, build), [16, 40], thread=thread) == {0: 16 + rows.offset(thread, 1),
                                                                  1: 40 + columns.offset(thread, 1)}


def test_static_extents_fold_to_constants():
    with Kernel("k", [Global("f16")], context=ir.Context()) as k:
        tensor = local_tile(k.tensor(k.arguments[0], (64, 48)), (16, 16), (1, None))
        assert tensor.shape == (16, 16, 3) and tensor.stride == (48, 1, 16)
        assert ceil_div(k, 48, 16) == 3 and whole_tiles(k, 50, 16) == 3
        assert tensor.offset((2, 3, 1)).owner.name == "arith.constant"


def test_copy_on_tensors_emits_the_tiled_copy():
    texts = []
    for on_tensors in (True, False):
        with Kernel("k", [Global("f16"), "index", "index"], block=(128, 1, 1), context=ir.Context()) as k:
            a, m, depth_units = k.arguments
            depth = in_units(k, depth_units, 8)  # rows on 16 bytes, provably
            tile = k.view(k.dynamic_shared(), (64 * 32,), "f16")
            layout = Layout((64, 32), (32, 1))
            if on_tensors:
                here = local_tile(k.identity_tensor((m, depth)), (64, 32), (1, 0))
                k.copy(local_tile(k.tensor(a, (m, depth)), (64, 32), (1, 0)), k.tensor(tile, layout),
                       valid=here.residue())
            else:
                k.copy_tile_async(tile, layout, a, arith.muli(k.index(64), depth), depth, rows=64, cols=32,
                                  valid_rows=arith.subi(m, k.index(64)), valid_cols=depth)
        with k.module.context:
            PassManager.parse("builtin.module(canonicalize,cse)").run(k.module.operation)
        texts.append(str(k.module))
    assert texts[0] == texts[1]


@pytest.mark.parametrize("misuse, message", [
    (lambda k, t, c: t[0], "has 2 entries"),
    (lambda k, t, c: t.offset((0, None)), "an entry per mode"),
    (lambda k, t, c: local_tile(t, (16,), (0, 0)), "a tile extent per mode"),
    (lambda k, t, c: t[0.5, 0], "an int, an index value"),
    (lambda k, t, c: k.tensor(k.view(k.dynamic_shared(), (64,), "f16"), "(8,8):(8,1)")[None, 0], "static layout"),
    (lambda k, t, c: k.copy(t, t), "dst is a rank-2 shared Tensor"),
    (lambda k, t, c: k.tensor(t.memory, (4, 4), (1,)), "one of each per mode"),
    (lambda k, t, c: c.partition(["4:1"]), "a layout per dimension"),
    (lambda k, t, c: k.tensor(t.memory, (8, 8), base=-3), "tensor: base"),
    (lambda k, t, c: k.copy(k.tensor(t.memory, (8, 8), (1, k.arguments[1])), k.tensor(
        k.view(k.dynamic_shared(), (64,), "f16"), "(8,8):(8,1)")), "its column stride must be 1, got a value"),
])
def test_misuse_is_a_builder_error(misuse, message):
    with Kernel("k", [Global("f16"), "index"], context=ir.Context()) as k:
        tensor = k.tensor(k.arguments[0], (k.arguments[1], 64))
        with pytest.raises(BuilderError, match=message):
            misuse(k, tensor, k.identity_tensor((8, 8)))


def test_a_tensor_made_inside_an_ended_loop_is_refused_after_it():
    with Kernel("k", [Global("f16"), "index"], context=ir.Context()) as k:
        with k.loop(0, 4) as i:
            tile = local_tile(k.tensor(k.arguments[0], (k.arguments[1], 64)), (16, 64), (i, 0))
            tile.offset((0, 0))  # inside: fine
        with pytest.raises(BuilderError, match=r"Tensor.offset: the value .* was made inside a loop or branch that has "
                                               r"ended"):
            tile.offset((0, 0))
    with pytest.raises(BuilderError, match=r"Tensor.offset: its kernel 'k' is not being built"):
        tile.offset((0, 0))
