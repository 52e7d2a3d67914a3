"""Builder misuse raises the documented errors only: BuilderError (or ContractError, a Layout ValueError), both
ValueErrors; never an MLIRError, a TypeError, an interpreter abort, or a context left entered."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlir import ir

from mlir_tile.isa.atoms import MMA_M16N8K16, MMA_M16N8K32
from mlir_tile.builder import BuilderError, Global, Kernel, transfer
from mlir_tile.algebra.layout import S

junk = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=False),
                 st.text(max_size=12), st.sampled_from(["", " ", "i32", "f17", "memref<4xi32", "!llvm.ptr", "sm_90"]))


@settings(max_examples=150, deadline=None)
@given(name=junk, block=st.one_of(junk, st.tuples(junk, junk, junk)), chip=junk, arguments=st.lists(junk, max_size=2))
def test_kernel_misuse_raises_value_errors_and_leaves_no_context(name, block, chip, arguments):
    try:
        with Kernel(name, arguments, block=block, chip=chip, context=ir.Context()):
            pass
    except ValueError:
        pass
    assert ir.Context.current is None


@settings(max_examples=400, deadline=None)
@given(call=st.sampled_from(["shared", "registers", "index", "constant", "thread_id", "load", "store", "loop",
                             "offset", "transfer", "mma16", "mma32", "block_id", "grid_size", "block_size",
                             "minimum", "compare", "if_", "carried", "view", "subview", "dynamic_shared",
                             "load_vector", "store_vector", "copy_async", "copy_tile_async", "copy_tile",
                             "commit_group", "wait_groups", "planned", "tile_chunks", "chunk_addresses", "shuffle", "broadcast", "warp_reduce", "exp2", "divide",
                             "pack_f16", "mbarriers", "arrive", "arrive_on_copies", "wait_phase", "any_lane",
                             "byte_permute", "lane_table", "transpose_bytes"]),
       first=junk, second=junk)
def test_builder_method_misuse_raises_value_errors(call, first, second):
    with Kernel("k", [Global("f16"), "index"], block=(128, 1, 1), context=ir.Context()) as k:
        registers = k.registers(4)
        halves, count = k.arguments
        tile = k.shared("tile", 64 * 64, "f16")
        actions = {
            "block_id": lambda: k.block_id(first),
            "grid_size": lambda: k.grid_size(first),
            "block_size": lambda: k.block_size(first),
            "minimum": lambda: k.minimum(first, second),
            "compare": lambda: k.compare(first, count, second),
            "if_": lambda: k.if_(first, [second]).__enter__(),
            "carried": lambda: k.loop(0, 4, carried=[first, second]).__enter__(),
            "view": lambda: k.view(tile, (first,), "f16", second),
            "subview": lambda: k.subview(tile, first, second),
            "dynamic_shared": lambda: k.dynamic_shared(first),
            "load_vector": lambda: k.load_vector(tile, [first], second),
            "store_vector": lambda: k.store_vector(first, tile, [second]),
            "copy_async": lambda: k.copy_async(tile, [first], halves, [0], bytes=second),
            "copy_tile_async": lambda: k.copy_tile_async(tile, first, halves, 0, 64, rows=second, cols=64),
            "copy_tile": lambda: k.copy_tile(tile, "(64,64):(64,1)", halves, first, 64, rows=64, cols=64,
                                             valid_rows=second, valid_cols=1),
            "commit_group": lambda: k.commit_group([first]),
            "wait_groups": lambda: k.wait_groups(first, second),
            "planned": lambda: k.planned(tile, first, [[second, 0]]),
            "tile_chunks": lambda: k.tile_chunks(tile, first, second, 64),
            "chunk_addresses": lambda: k.chunk_addresses(first, second),
            "shuffle": lambda: k.shuffle(k.constant(1), first, width=second),
            "broadcast": lambda: k.broadcast(first),
            "warp_reduce": lambda: k.warp_reduce(k.constant(1.0, "f32"), first, second),
            "exp2": lambda: k.exp2(first),
            "divide": lambda: k.divide(first, second),
            "pack_f16": lambda: k.pack_f16(first, second),
            "mbarriers": lambda: k.mbarriers("bars", first, second),
            "arrive": lambda: k.arrive(k.mbarriers("bars", 2, 128), first, per_warp=second),
            "arrive_on_copies": lambda: k.arrive_on_copies(first, second),
            "wait_phase": lambda: k.wait_phase(k.mbarriers("bars", 2, 128), first, second),
            "any_lane": lambda: k.any_lane(first),
            "byte_permute": lambda: k.byte_permute(k.constant(1), first, second),
            "lane_table": lambda: k.lane_table([first] * 31 + [second]),
            "transpose_bytes": lambda: k.transpose_bytes(first, tile, second, 0),
            "shared": lambda: k.shared(first, second),
            "registers": lambda: k.registers(first, second),
            "index": lambda: k.index(first),
            "constant": lambda: k.constant(first, second),
            "thread_id": lambda: k.thread_id(first),
            "load": lambda: k.load(registers, [first]),
            "store": lambda: k.store(first, registers, [second]),
            "loop": lambda: k.loop(first, second).__enter__(),
            "offset": lambda: k.offset(first, [second]),
            "transfer": lambda: transfer(first, registers, second, dst_layout=S[(4, 8, 4):(1, 1, 1)],
                                                src_layout="(4,8,4):(32,4,1)"),
            "mma16": lambda: k.mma(MMA_M16N8K16, registers, [0, 1, 2, first], registers, [0, 1], registers, [0, 1, 2, 3],
                                            element=second),
            "mma32": lambda: k.mma(MMA_M16N8K32, registers, [0, 1, 2, 3], registers, [first, 1], registers, [0, 1, 2, 3],
                                            element=second),
        }
        try:
            actions[call]()
        except ValueError:
            pass


def test_an_impossible_block_is_a_builder_error():
    with pytest.raises(BuilderError, match=r"block \(2147483648, 1, 1\) exceeds the largest block"):
        Kernel("k", block=(2**31, 1, 1))


@pytest.mark.parametrize("element, accumulator, message", [
    ("s8", "f32", r"the accumulator registers of the s8 mma hold 32-bit words of i32, got f32"),
    ("f16", "i32", r"the accumulator registers of the f16 mma hold 32-bit words of f32, got i32"),
    ("s4", "i32", r"mma m16n8k32: element one of s8, u8"),
])
def test_mma_operands_of_the_wrong_kind_are_builder_errors(element, accumulator, message):
    with Kernel("k", [], context=ir.Context()) as k:
        words, accumulators = k.registers(4), k.registers(4, accumulator)
        atom = MMA_M16N8K16 if element == "f16" else MMA_M16N8K32
        with pytest.raises(BuilderError, match=message):
            k.mma(atom, words, [0, 1, 2, 3], words, [0, 1], accumulators, [0, 1, 2, 3], element=element)
        with pytest.raises(BuilderError, match=r"mma: an MmaAtom"):
            k.mma("m16n8k16", words, [0, 1, 2, 3], words, [0, 1], accumulators, [0, 1, 2, 3])
        with pytest.raises(BuilderError, match=r"True only for integer accumulators"):
            k.mma(MMA_M16N8K16, words, [0, 1, 2, 3], words, [0, 1], accumulators, [0, 1, 2, 3], saturate=True)
