"""The kernel builder's new calls: every misuse is a BuilderError naming the reason; alignment proofs accept
what the IR proves and nothing more; planned copy addresses equal the layout's offsets; the grid's thread
index, the lanes that lead their groups and views from a warp's part, interpreted (index_code)."""
import re

import pytest
from mlir import ir
from mlir.dialects import arith

from index_code import kernel as index_kernel
from index_code import run
from mlir_tile import contract
from mlir_tile.builder import BuilderError, Global, Kernel, transfer
from mlir_tile.algebra.layout import as_layout

def kernel(arguments=(Global("f32"), Global("f16"), "index"), **options):
    return Kernel("k", list(arguments), block=(128, 1, 1), context=ir.Context(), **options)


MISUSE = {
    "Global element": (lambda k: None, r"Global: element 'f8' is not one of", [Global("f8")]),
    "Global alignment": (lambda k: None, r"Global alignment 3", [Global("f32", alignment=3)]),
    "block_id dimension": (lambda k: k.block_id("w"), r"block_id: the dimension is 'x', 'y' or 'z'", None),
    "fast_math": (lambda k: None, r"fast_math is True or False", "fast"),
    "loop without next": (lambda k: _loop_without_next(k), r"ends its body with it.next", None),
    "loop next types": (lambda k: _loop_next(k, k.constant(1.0, "f32")), r"it.next takes values of types \['index'\]",
                        None),
    "if_ condition": (lambda k: k.if_(k.index(1)).__enter__(), r"the condition must be an i1 value", None),
    "if_ without otherwise": (lambda k: _if_without_otherwise(k), r"calls branch.otherwise\(...\) and branch.done",
                              None),
    "compare predicate": (lambda k: k.compare("lt", 0, 1), r"unknown predicate 'lt'", None),
    "leads_lanes": (lambda k: k.leads_lanes(3), r"leads_lanes: lanes a power of two up to 32", None),
    "offset_parts swizzled": (lambda k: k.offset_parts("Sw<1,2,3> o (8,8):(8,1)", [0, 0]), r"is swizzled", None),
    "vector width": (lambda k: k.load_vector(k.arguments[0], [0], 3), r"3 x f32 is 12 bytes", None),
    "vector unproven": (lambda k: k.load_vector(k.arguments[0], [k.arguments[2]], 4),
                        r"16-byte access needs 16-byte alignment, but only 4 bytes are proven", None),
    "vector store type": (lambda k: k.store_vector(k.index(0), k.arguments[0], [0]), r"must be a vector value", None),
    "vector past the end": (lambda k: k.load_vector(k.shared("s", 6, "f32"), [4], 4), r"pass the end", None),
    "copy spaces": (lambda k: k.copy_async(k.arguments[0], [0], k.arguments[0], [0]), r"copy_async dst: expected a memref in shared memory", None),
    "copy bytes": (lambda k: k.copy_async(k.shared("s", 64, "f32"), [0], k.arguments[0], [0], bytes=2),
                   r"cp.async copies \(4, 8, 16\) bytes", None),
    "copy elements": (lambda k: k.copy_async(k.shared("s", 64, "f32"), [0], k.arguments[1], [0]),
                      r"dst and src hold different elements", None),
    "copy unaligned": (lambda k: k.copy_async(k.shared("s", 64, "f32"), [0], k.arguments[0], [k.index(2)]),
                       r"copy_async src: a 16-byte access needs 16-byte alignment, but only 8", None),
    "commit nothing": (lambda k: k.commit_group([]), r"the tokens of copy_async calls", None),
    "wait token": (lambda k: k.wait_groups(k.index(0)), r"wait_groups: expected a value of type !nvgpu.device.async.token", None),
    "tile split": (lambda k: k.copy_tile_async(k.shared("s", 24 * 8, "f16"), "(24,8):(8,1)", k.arguments[1], 0, 8,
                                               rows=24, cols=8), r"128 threads cannot share a 24 x 8 tile", None),
    "tile layout": (lambda k: k.copy_tile_async(k.shared("s", 64 * 64, "f16"), "(64,32):(32,1)", k.arguments[1], 0,
                                                64, rows=64, cols=64), r"is not a 64 x 64 layout", None),
    "offset pair on nested mode": (lambda k: k.offset("((2,4),8):((1,16),2)", [(k.index(0), 1), 0]),
                                   r"a \(value, int\) coordinate needs a mode with one leaf", None),
    "shuffle width": (lambda k: k.shuffle(k.constant(1), 3, width=24), r"width a power of two up to 32", None),
    "shuffle mode": (lambda k: k.shuffle(k.constant(1), 1, mode="rotate"), r"mode is one of", None),
    "shuffle value": (lambda k: k.shuffle(k.index(1), 1), r"a 32-bit value", None),
    "broadcast value": (lambda k: k.broadcast(k.constant(1.0, "f16")), r"broadcast: an index or a 32-bit value", None),
    "reduce operation": (lambda k: k.warp_reduce(k.constant(1.0, "f32"), "mul"), r"operation is one of", None),
    "exp2 value": (lambda k: k.exp2(k.constant(1)), r"exp2: expected a value of type f32", None),
    "warp_id block": (lambda k: k.warp_id(), r"is not one-dimensional", "2d"),
    "dynamic_shared alignment": (lambda k: k.dynamic_shared(alignment=48), r"alignment must be a power of two from 16 to 262144, got 48",
                                 None),
    "dynamic_shared small": (lambda k: k.dynamic_shared(alignment=8), r"alignment must be a power of two from 16 to 262144, got 8", None),
    "subview rank": (lambda k: k.subview(k.view(k.shared_bytes("b", 64), (4, 4)), 0, 4), r"a 1-D buffer", None),
    "subview past the end": (lambda k: k.subview(k.shared("s", 8), 4, 8), r"pass the end", None),
    "copy_tile split": (lambda k: k.copy_tile(k.shared("s", 24 * 8, "f16"), "(24,8):(8,1)", k.arguments[1], 0, 8,
                                              rows=24, cols=8, valid_rows=1, valid_cols=1),
                        r"copy_tile: 128 threads cannot share a 24 x 8 tile", None),
    "wait on an ended loop's token": (lambda k: _wait_after_loop(k), r"made inside a loop or branch that has ended",
                                      None),
    "view offset": (lambda k: k.view(k.shared_bytes("b", 64), (4,), byte_offset=-4), r"non-negative integer", None),
    "mbarrier arrivals": (lambda k: k.mbarriers("b", 2, 1 << 20), r"at most 1048575 arrivals a phase", None),
    "mbarrier index": (lambda k: k.arrive(k.mbarriers("b", 2, 128), 2), r"index 2 of 2 mbarriers", None),
    "mbarrier buffer": (lambda k: k.arrive_on_copies(k.shared("s", 2, "i64"), 0), r"the buffer `mbarriers` made",
                        None),
    "wait_phase parity": (lambda k: k.wait_phase(k.mbarriers("b", 1, 128), 0, 2), r"parity 0 or 1, or an i32 or index value, got 2", None),
    "mbarriers in a loop": (lambda k: _mbarriers_in_a_loop(k), r"mbarriers: at the kernel's top level", None),
    "any_lane predicate": (lambda k: k.any_lane(k.index(1)), r"any_lane: an i1 predicate", None),
}


def _wait_after_loop(k):
    tile = k.shared("s", 64, "f32")
    with k.loop(0, 4):
        group = k.commit_group([k.copy_async(tile, [0], k.arguments[0], [0])])
    k.wait_groups(group, 0)


def _mbarriers_in_a_loop(k):
    with k.loop(0, 4):
        k.mbarriers("b", 1, 128)


def _loop_without_next(k):
    with k.loop(0, 4, carried=[k.index(0)]):
        pass


def _loop_next(k, value):
    with k.loop(0, 4, carried=[k.index(0)]) as it:
        it.next(value)


def _if_without_otherwise(k):
    with k.if_(k.compare("ult", k.thread_id(), 1), ["index"]):
        pass


@pytest.mark.parametrize("name", sorted(MISUSE))
def test_misuse_is_a_builder_error_with_the_reason(name):
    action, message, special = MISUSE[name]
    options = {}
    arguments = (Global("f32"), Global("f16"), "index")
    if isinstance(special, list):
        arguments = special
    elif special == "fast":
        options["fast_math"] = "yes"
    elif special == "2d":
        options["block"] = (32, 2, 1)
    with pytest.raises(BuilderError, match=message):
        with Kernel("k", list(arguments), **{"block": (128, 1, 1), **options}, context=ir.Context()) as k:
            action(k)
    assert ir.Context.current is None


def test_alignment_is_proven_from_the_argument_the_index_and_the_view():
    with kernel() as k:
        floats, halves, n = k.arguments
        quad = arith.muli(k.thread_id(), k.index(4))
        k.load_vector(floats, [quad], 4)  # 16-byte Global, index a multiple of 4 floats
        k.load_vector(floats, [arith.addi(quad, k.index(2))], 2)  # 8 bytes at an 8-byte offset
        with pytest.raises(BuilderError, match=r"only 8 bytes are proven"):
            k.load_vector(floats, [arith.addi(quad, k.index(2))], 4)
        with k.loop(0, n, 8) as i:  # an induction variable from 0 by 8 halves: 16 bytes
            k.load_vector(halves, [i], 8)
        with k.loop(1, n, 8) as i:
            with pytest.raises(BuilderError, match=r"only 2 bytes are proven"):
                k.load_vector(halves, [i], 8)
        view = k.view(k.shared_bytes("raw", 4096, alignment=128), (256,), "f32", byte_offset=32)
        k.load_vector(view, [quad], 4)
        offset = k.offset("Sw<3,3,3> o (128,64):(64,1)", [k.thread_id(), arith.muli(k.lane_id(), k.index(8))])
        tile = k.shared("tile", 128 * 64, "f16", alignment=1024)
        k.load_vector(tile, [offset], 8)  # the swizzle moves whole 8-element chunks: still 16 bytes
        with pytest.raises(BuilderError, match=r"no alignment of the buffer is proven"):
            with Kernel("u", ["memref<64xf32>"], context=ir.Context()) as u:
                u.load_vector(u.arguments[0], [0], 4)
        k.load_vector(floats, [k.index(2)], 4, assume_aligned=True)  # the explicit opt-out


@pytest.mark.parametrize("layout", ["Sw<3,3,3> o (128,64):(64,1)", "(128,64):(72,1)", "Sw<2,3,3> o (128,32):(32,1)"])
def test_planned_addresses_are_the_layouts_offsets(layout):
    """The copy plan (one per-thread base, constant offsets) addresses the same element as offset()."""
    from mlir_tile.analysis.ir_facts import upper_bound

    rows, cols = as_layout(layout).sizes
    with kernel() as k:
        tile = k.shared("tile", 128 * 72, "f16", alignment=1024)
        row = arith.divui(k.thread_id(), k.index(cols // 8))
        col = arith.muli(arith.remui(k.thread_id(), k.index(cols // 8)), k.index(8))
        points = [[(row, r), col] for r in range(0, rows, 128 * 8 // cols)]
        plan = k.planned(tile, layout, points, 8)
        assert upper_bound(row) == 128 // (cols // 8) - 1
        assert len({view for view, _ in plan}) == 1 and plan[0][0] != tile  # one base for all
        swizzle = as_layout(layout).swizzle
        for thread in (0, 1, 7, 8, 77, 127):
            r0, c0 = thread // (cols // 8), thread % (cols // 8) * 8
            for (_, index), r in zip(plan, range(0, rows, 128 * 8 // cols)):
                expected = as_layout(layout)(r0 + r, c0).offset
                base = r0 * as_layout(layout).flat_strides(0)[0] + c0
                base = swizzle(base) if swizzle else base
                assert base + ir.IntegerAttr(index.owner.attributes["value"]).value == expected


def test_a_buffer_aligned_below_the_swizzle_period_says_the_builders_fix():
    """The contract's [row-alignment] fix for a swizzled tile names the builder's argument too, not only the
    IR's attribute."""
    with kernel() as k:
        words, registers = k.shared("s", 256, alignment=128), k.registers(4)
        with pytest.raises(contract.ContractError, match=r"in the builder: alignment=1024 on k.shared / k.dynamic_shared"):
            transfer("ldmatrix.sync.aligned.m8n8.x4.shared.b16", registers, words,
                     dst_layout="(4,8,4):(1,4@laneid,1@laneid)", src_layout="Sw<3,2,3> o (4,8,4):(8,32,1)")


@pytest.mark.parametrize("thread, block", [(0, 0), (5, 0), (31, 3), (100, 2)])
def test_the_grid_index_and_the_lanes_that_lead_their_group(thread, block):
    def build(k):
        view = k.view(k.dynamic_shared(), (16,), "i32", 64, element_offset=k.thread_id())
        return [k.global_thread_id(), k.leads_lanes(4), k.leads_lanes(32), view.owner.operands[1]]

    stored = run(index_kernel(0, build, block=128), [], thread=thread, block=block)
    assert stored == {0: block * 128 + thread, 1: int(thread % 4 == 0), 2: int(thread % 32 == 0), 3: 64 + 4 * thread}


@pytest.mark.parametrize("mode, offset, width", [("idx", 3, 16), ("down", 2, 8), ("up", 1, 4), ("xor", 4, 8)])
def test_a_shuffle_within_segments_takes_the_whole_warp(mode, offset, width):
    """A shuffle within segments narrower than the warp (CUDA's width) is a full-warp `shfl.sync` (member mask -1:
    upstream's width would leave the lanes past it out, their result undefined): idx from the segment's first lane
    plus the offset, down and up with each lane whose source leaves its segment keeping its value, xor as it is."""
    from mlir_tile.compiler.compile import compile_to_ptx

    with Kernel("shuffles", [Global("f32")], block=(64, 1, 1)) as k:
        value = k.load(k.arguments[0], [k.thread_id()])
        k.store(k.shuffle(value, offset, mode, width=width), k.arguments[0], [k.thread_id()])
    ptx = compile_to_ptx(k.module)
    shuffles = re.findall(r"shfl\.sync\.(\w+)\.b32\s+%r\d+, %r\d+, (%r\d+|\d+), (\d+), (-?\d+);", ptx)
    assert [(kind, member) for kind, _, _, member in shuffles] == [({"xor": "bfly"}.get(mode, mode), "-1")]
    assert (shuffles[0][1].startswith("%r")) == (mode == "idx")  # (idx: a source lane computed from the lane id)
    assert ("selp" in ptx) == (mode in ("down", "up"))
