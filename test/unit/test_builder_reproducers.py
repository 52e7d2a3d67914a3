"""Every class of builder misuse that once aborted Python, built IR that failed later, read out of bounds in
silence, folded a constant wrongly or escaped as an exception of the bindings (issue 37's reproducers): each is
now a BuilderError (or ContractError) at the user's call, naming the call and the argument; and what the
builder accepts, compile_to_ptx compiles."""
import pytest
from mlir import ir

from mlir_tile.isa.atoms import MMA_M16N8K16
from mlir_tile.builder import BuilderError, Global, Kernel, transfer
from mlir_tile.compiler.compile import compile_to_ptx

ARGUMENTS = [Global("f16"), "index", Global("f32")]


def _build(action, arguments=ARGUMENTS):
    with Kernel("k", arguments, block=(128, 1, 1), context=ir.Context()) as k:
        action(k)
    return k


def _value_of_another_kernel(k):
    with Kernel("other", [], context=k.context) as other:
        lane = other.lane_id()
    k.load(k.arguments[0], [lane])


def _loop_index_after_its_loop(k):
    with k.loop(0, 4) as index:
        pass
    k.load(k.arguments[0], [index])


def _if_value_after_its_branch(k):
    with k.if_(k.compare("eq", k.thread_id(), 0)):
        inside = k.thread_id()
    k.load(k.arguments[0], [inside])


def _build_after_next(k):
    with k.loop(0, 4, carried=[k.index(0)]) as it:
        it.next(it.values[0])
        k.thread_id()


def _tile_copy(k, layout="(64,64):(64,1)", words=64 * 64, source=None, element="f16", asynchronous=True):
    tile = k.shared("tile", words, element)
    src = k.arguments[0] if source is None else source(k)
    if asynchronous:
        return k.copy_tile_async(tile, layout, src, 0, 64, rows=64, cols=64)
    return k.copy_tile(tile, layout, src, 0, 64, rows=64, cols=64, valid_rows=64, valid_cols=64)


MISUSE = {
    # once an abort (an LLVM assertion) of the interpreter
    "copy_tile from a value that is no memref": (
        lambda k: _tile_copy(k, source=lambda k: k.thread_id(), asynchronous=False),
        r"copy_tile src: expected a memref value, got a value of type index"),
    "two shared buffers of one name": (lambda k: (k.shared("s", 4), k.shared("s", 4)),
                                       r"shared: the name 's' is taken in this gpu.module"),
    "a shared buffer named like the kernel": (lambda k: k.shared("k", 4), r"shared: the name 'k' is taken"),
    "a value of another kernel": (_value_of_another_kernel, r"load: the value \(gpu.lane_id's result, of type index\) "
                                                            r"was made in kernel 'other', and cannot be used in kernel 'k'"),
    # once accepted, then invalid IR at compile_to_ptx
    "shared alignment 3": (lambda k: k.shared("s", 4, alignment=3), r"shared alignment must be a power of two .* got 3"),
    "commit_group of an index": (lambda k: k.commit_group([k.index(1)]),
                                 r"commit_group: expected a value of type !nvgpu.device.async.token, got a value of "
                                 r"type index"),
    "pack_f16 of i32 values": (lambda k: k.pack_f16(k.constant(1), k.constant(2)),
                               r"pack_f16: expected a value of type f32, got a value of type i32"),
    "pack_f16 to i8": (lambda k: k.pack_f16(k.constant(1.0, "f32"), k.constant(2.0, "f32"), "i8"),
                       r"pack_f16: element f16 or bf16, got 'i8'"),
    "wait_phase with an f32 parity": (lambda k: k.wait_phase(k.mbarriers("b", 1, 128), 0, k.constant(1.0, "f32")),
                                      r"wait_phase parity: expected a value of type i32 or index, got a value of type f32"),
    "wait_phase with an i1 parity": (lambda k: k.wait_phase(k.mbarriers("b", 1, 128), 0, k.constant(1, "i1")),
                                     r"wait_phase parity: expected a value of type i32 or index, got a value of type i1"),
    "copy_tile from a global of another element type": (
        lambda k: _tile_copy(k, source=lambda k: k.arguments[2], asynchronous=False),
        r"copy_tile: src holds f32 elements, dst f16; a tile copy does not convert"),
    "dynamic_shared(2**31)": (lambda k: k.dynamic_shared(2**31),
                              r"dynamic_shared alignment must be a power of two from 16 to 262144, got 2147483648"),
    "an mma with f32 words as its bf16 A operand": (
        lambda k: k.mma(MMA_M16N8K16, k.registers(4, "f32"), [0, 1, 2, 3], k.registers(2), [0, 1], k.registers(4, "f32"),
                                 [0, 1, 2, 3], element="bf16"),
        r"mma: the A registers of the bf16 mma hold 32-bit words of i32, got f32"),
    "a loop index after its loop": (_loop_index_after_its_loop, r"was made inside a loop or branch that has ended"),
    "an if_ value after its branch": (_if_value_after_its_branch, r"was made inside a loop or branch that has ended"),
    "building after it.next": (_build_after_next, r"thread_id: this loop body or branch was ended by it.next"),
    # once silently out of bounds
    "a constant load index past the end": (lambda k: k.load(k.registers(4), [4]),
                                           r"load: index 4 of dimension 0 is outside memref<4xi32"),
    "a negative constant load index": (lambda k: k.load(k.registers(4), [-1]), r"load: index -1 of dimension 0"),
    "a constant load_vector index past the end": (lambda k: k.load_vector(k.shared("s", 16, "f16"), [16], 8),
                                                  r"load_vector: index 16 of dimension 0 is outside"),
    "a negative constant store index": (lambda k: k.store(k.constant(1), k.registers(4), [k.index(-2)]),
                                        r"store: index -2 of dimension 0"),
    "a view larger than its buffer": (lambda k: k.view(k.shared_bytes("b", 64), (32,), "f32"),
                                      r"view: memref<32xf32.* passes the end of the 64-byte buffer"),
    "a view past its buffer": (lambda k: k.view(k.shared_bytes("b", 64), (16,), "f32", 16),
                               r"view: memref<16xf32.* at byte offset up to 16 passes the end of the 64-byte buffer"),
    "a view at an unaligned byte offset": (lambda k: k.view(k.shared_bytes("b", 64), (4,), "f32", 2),
                                           r"view: byte_offset 2 is not a proven multiple of the 4-byte f32 elements"),
    "a copy_tile_async layout larger than its destination": (
        lambda k: _tile_copy(k, words=64 * 32), r"copy_tile_async: layout \(64,64\):\(64,1\) reaches offset 4095, "
                                                r"past the end of memref<2048xf16"),
    "a copy_tile_async layout with a negative stride": (
        lambda k: _tile_copy(k, layout="(64,64):(-64,1)"), r"reaches offset -4032, before the buffer's start"),
    "an mma slot past its registers": (
        lambda k: k.mma(MMA_M16N8K16, k.registers(4), [0, 1, 2, 9], k.registers(2), [0, 1], k.registers(4, "f32"),
                                 [0, 1, 2, 3]),
        r"mma: the A slots \[0, 1, 2, 9\] are not all slots of memref<4xi32"),
    "an mma's accumulator slots repeated": (
        lambda k: k.mma(MMA_M16N8K16, k.registers(4), [0, 1, 2, 3], k.registers(2), [0, 1], k.registers(4, "f32"),
                                 [0, 1, 1, 3]),
        r"the accumulator slots \[0, 1, 1, 3\] repeat a slot"),
    # once silently wrong constants
    "constant(2**40) of i32": (lambda k: k.constant(2**40), r"constant: 1099511627776 does not fit i32"),
    "constant(-2**40) of i8": (lambda k: k.constant(-2**40, "i8"), r"constant: -1099511627776 does not fit i8"),
    "constant(5) of i1": (lambda k: k.constant(5, "i1"), r"constant: 5 does not fit i1 \(from 0 to 1\)"),
    "constant(1e6) of f16": (lambda k: k.constant(1e6, "f16"), r"constant: 1000000.0 is outside the range of f16"),
    # once an exception of the bindings or of Python's internals
    "shared alignment 2**70": (lambda k: k.shared("s", 4, alignment=2**70), r"shared alignment must be a power of two"),
    "constant(2**64) of i64": (lambda k: k.constant(2**64, "i64"), r"constant: 18446744073709551616 does not fit i64"),
    "loop(carried=5)": (lambda k: k.loop(0, 4, carried=5).__enter__(), r"loop carried: expected a list of ir.Values"),
    "planned with a coordinate that is no list": (lambda k: k.planned(k.shared("s", 64), "(8,8):(8,1)", [5]),
                                                  r"planned: coordinates is a list of coordinates"),
    "transfer(loc='here')": (
        lambda k: transfer("ldmatrix.sync.aligned.m8n8.x1.shared.b16", k.registers(1), k.shared("s", 64),
                           dst_layout="(1,8,4):(0,4@laneid,1@laneid)", src_layout="(1,8,4):(0,8,1)", loc="here"),
        r"transfer: loc is an ir.Location, got 'here'"),
    "a shared buffer of 2**40 elements": (lambda k: k.shared("s", 2**40),
                                         r"a memref extent must be an integer from 1 to 2147483647"),
    "more static shared memory than a kernel declares": (lambda k: (k.shared("a", 8192), k.shared("b", 8192)),
                                                         r"shared 'b': the kernel declares 65536 bytes"),
    # found by the fuzzer's builder channel
    "a view of a subview": (lambda k: k.view(k.subview(k.shared_bytes("b", 64), 4, 16), (4,), "i8"),
                            r"view: the buffer must be 1-D bytes \(i8\) from its start"),
    "warp_reduce of an operation that is a list": (lambda k: k.warp_reduce(k.constant(1.0, "f32"), [1]),
                                                   r"warp_reduce: operation is one of"),
    "planned with an empty coordinate": (lambda k: k.planned(k.shared("s", 64), "(8,8):(8,1)", [()]),
                                         r"offset: layout \(8,8\):\(8,1\) has 2 modes; give one coordinate per mode"),
    "copy_async whole with a partial constant": (
        lambda k: k.copy_async(k.shared("s", 64, "f16"), [0], k.arguments[0], [0], bytes=4, valid=3, whole=True),
        r"copy_async: whole=True takes a valid proven to be 0 or all 2 elements .*, got 3"),
    "copy_async whole with an unproven count": (
        lambda k: k.copy_async(k.shared("s", 64, "f16"), [0], k.arguments[0], [0], valid=k.arguments[1], whole=True),
        r"copy_async: whole=True takes a valid proven to be 0 or all 8 elements .*, got not proven"),
}


@pytest.mark.parametrize("name", sorted(MISUSE))
def test_misuse_is_a_builder_error_at_the_call(name):
    action, message = MISUSE[name]
    with pytest.raises(BuilderError, match=message):
        _build(action)
    assert ir.Context.current is None


@pytest.mark.parametrize("call, message", [
    (lambda k: k.mbarriers("b", 1, 32), r"mbarriers: mbarrier.init needs sm_80 or newer, but the gpu.module targets sm_75"),
    (lambda k: k.copy_async(k.shared("s", 64, "f16"), [0], k.arguments[0], [0]),
     r"copy_async: cp.async.shared.global needs sm_80 or newer, but the gpu.module targets sm_75"),
])
def test_an_instruction_the_kernels_chip_lacks_is_a_builder_error(call, message):
    """(LLVM stopped the process on mbarrier.init for sm_75, at compile_to_ptx.)"""
    with pytest.raises(BuilderError, match=message):
        with Kernel("k", ARGUMENTS, chip="sm_75", context=ir.Context()) as k:
            call(k)


@pytest.mark.parametrize("argument", ["memref<?xf32>", "tensor<4xf32>", "none", "memref<4xf32, 3>",
                                      "memref<4xf32, strided<[2]>>", "vector<4xf32>", "!llvm.ptr"])
def test_a_kernel_argument_of_no_kernel_parameter_type_is_a_builder_error(argument):
    with pytest.raises(BuilderError, match=rf"kernel argument '{argument[:8]}"):
        _build(lambda k: None, [argument])


def test_min_blocks_per_sm_is_bounded_by_the_blocks_an_sm_holds():
    with pytest.raises(BuilderError, match=r"min_blocks_per_sm must be an integer from 1 to 32, got 1099511627776"):
        Kernel("k", [], min_blocks_per_sm=2**40)


def test_a_call_after_the_with_block_is_a_builder_error():
    kernel = _build(lambda k: None)
    with pytest.raises(BuilderError, match=r"thread_id: kernel 'k' is not being built"):
        kernel.thread_id()


def test_a_call_on_a_kernel_inside_another_kernels_block_is_a_builder_error():
    def nested(outer):
        with Kernel("inner", [], context=outer.context):
            outer.thread_id()

    with pytest.raises(BuilderError, match=r"thread_id: the builder is inside another kernel's `with` block"):
        _build(nested)


def test_a_kernel_is_entered_once():
    kernel = _build(lambda k: None)
    with pytest.raises(BuilderError, match=r"kernel 'k' is built once"):
        kernel.__enter__()


def _exceptions_caught_inside_loops_and_branches(k):
    floats = k.arguments[2]
    try:
        with k.loop(0, 4, carried=[k.constant(1.0, "f32")]) as it:
            k.load(floats, [it.index])
            raise RuntimeError("the user's own error")
    except RuntimeError:
        pass
    try:
        with k.if_(k.compare("eq", k.thread_id(), 0), ["f32", "index"]) as branch:
            branch.otherwise(k.constant(1.0, "f32"), k.index(1))
            raise RuntimeError("the user's own error, in the else-branch")
    except RuntimeError:
        pass
    try:
        with k.loop(0, 4):
            raise RuntimeError("and in a loop without carried values")
    except RuntimeError:
        pass
    k.store(k.load(floats, [0]), floats, [1])


ACCEPTED = {
    "exceptions caught inside loops and branches": _exceptions_caught_inside_loops_and_branches,
    # the dynamic extent's sentinel is no end of the buffer
    "load_vector at a constant index of dynamic_shared()": lambda k: k.store_vector(
        k.load_vector(k.view(k.dynamic_shared(), (64,), "f16"), [16], 8), k.arguments[0], [0]),
    "planned where the values fall on a mode of extent 1": lambda k: k.planned(
        k.shared("s", 64, "f16"), "(1,64):(64,1)", [[(k.thread_id(), 0), 0], [(k.thread_id(), 0), 8]], 8),
    "the offset of a block id (no operands to bound)": lambda k: k.offset("(8,8):(8,1)", [k.block_id(), 0]),
    "an unsigned bit pattern of i32 and the i1 true": lambda k: k.store(
        k.constant(0xFFFFFFFF), k.shared("s", 1), [k.index(0)]) or k.any_lane(k.constant(True, "i1")),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_what_the_builder_accepts_compiles(name):
    kernel = _build(ACCEPTED[name])
    assert ".entry k(" in compile_to_ptx(kernel.module)


def test_a_carried_value_that_the_body_makes_thread_dependent_is_refused_at_it_next():
    """A transfer under a branch on a carried value is legal when built (the value's next iterations are not
    known yet) and illegal once it.next carries a thread id round: the builder judges the loop's transfers
    again there, removes the illegal one and raises, so the kernel still compiles (the pass once rejected it
    at compile_to_ptx, after the builder had accepted it)."""
    with Kernel("k", [Global("f16")], block=(32, 1, 1), context=ir.Context()) as k:
        registers, tile = k.registers(4), k.shared("s", 512)
        with pytest.raises(BuilderError, match=r"loop: it.next\(...\) carries values round that make a transfer of "
                                               r"this loop illegal, so it was removed: \[participation\] .* scf.if"):
            with k.loop(0, 4, carried=[k.index(0)]) as it:
                with k.if_(k.compare("eq", it.values[0], 0)):
                    transfer("ldmatrix.sync.aligned.m8n8.x4.shared.b16", registers, tile,
                             dst_layout="(4,8,4):(1,4@laneid,1@laneid)", src_layout="(4,8,4):(32,4,1)")
                it.next(k.thread_id())
        k.store(k.load(registers, [0]), k.shared("out", 32), [k.lane_id()])
    assert "ldmatrix" not in compile_to_ptx(k.module)
