"""The builder's wgmma (builder/warpgroup.py, builder/asynchrony.py): a batch over shared tensors lowers to
fenced, committed `wgmma.mma_async` with the descriptors the tiles' layouts give (checked in the PTX and by
ptxas for sm_90a), and everything it cannot prove is a BuilderError with its [rule] tag: the chip, the block,
the tiles' layouts, alignment and row blocks, fp8's K-major operands, and the accumulators read or written
while a group that writes them is in flight (also in a loop's next iteration, and through a transfer)."""
import re
import shutil
import subprocess

import pytest
from mlir import ir
from mlir.dialects import arith

from mlir_tile.isa.atoms import wgmma
from mlir_tile.builder import BuilderError, Global, Kernel
from mlir_tile.compiler.compile import compile_to_ptx
from mlir_tile.algebra.layout import Layout, Swizzle
from mlir_tile.isa.tma import Box

ATOM = wgmma(64, "f16")
A_TILE, B_TILE = Box(128, 64, 16, 128).layout, Box(64, 64, 16, 128).layout  # K-major, 128-byte swizzle


def _kernel(body, *, chip="sm_90a", threads=256, element="f16"):
    with Kernel("k", [Global("f32")], block=(threads, 1, 1), chip=chip, context=ir.Context()) as k:
        shared = k.dynamic_shared(alignment=1024)
        a = k.tensor(k.view(shared, (A_TILE.cosize,), element), A_TILE)
        b = k.tensor(k.view(shared, (B_TILE.cosize,), element, byte_offset=16384), B_TILE)
        body(k, a, b, k.arguments[0])
    return k.module


def _product(k, a, b, out, atom=ATOM):
    accumulators = k.accumulators(atom)
    k.wgmma(atom, a, b, accumulators, a_row_block=arith.divui(k.thread_id(), k.index(128)))
    k.wgmma_wait(0, [accumulators])
    for slot in range(2):
        k.tensor(out, (1 << 16,))[k.global_thread_id()] = k.load(accumulators.registers, [slot])
    return accumulators


def test_a_batch_is_fenced_committed_and_reads_through_the_tiles_descriptors(filecheck, tmp_path):
    ptx = compile_to_ptx(_kernel(_product))
    # K-major 128-byte swizzle: LBO 1, SBO 1024 / 16 = 64, mode 1 (bit 62), each K step 32 bytes further
    fields = (1 << 62) | (64 << 32) | (1 << 16)
    filecheck(ptx, f"""
    CHECK: .target sm_90a
    CHECK: wgmma.fence.sync.aligned;
    CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{{{.*}}}}, p, 1, 1, 0, 0;
    CHECK: wgmma.commit_group.sync.aligned;
    CHECK: wgmma.wait_group.sync.aligned 0;
    """)
    assert str(fields) in ptx or str(fields - (1 << 64)) in ptx or hex(fields)[2:] in ptx.lower()
    if shutil.which("ptxas"):
        (tmp_path / "k.ptx").write_text(ptx)
        assembled = subprocess.run(["ptxas", "-v", "-arch=sm_90a", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                                   capture_output=True, text=True)
        assert assembled.returncode == 0, assembled.stderr
        assert "C75" not in assembled.stderr  # no wait injected, nothing serialized
    assert "scale-d" not in ptx


def test_mn_major_operands_transpose_and_accumulate_false_zeroes_the_first_step(filecheck):
    b_tile = Layout((64, 64), (1, 64), Swizzle(3, 3, 3))  # (n, k): n contiguous, a (k, n) TMA box

    def body(k, a, b, out):
        b = k.tensor(b.memory, b_tile)
        accumulators = k.accumulators(ATOM)
        k.wgmma(ATOM, a, b, accumulators, accumulate=False)
        k.wgmma_wait(0, [accumulators])
        k.tensor(out, (1 << 16,))[k.global_thread_id()] = k.load(accumulators.registers, [0])
    filecheck(compile_to_ptx(_kernel(body)), """
    CHECK: setp.ne.b32 p, 0, 0;
    CHECK-NEXT: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}}, p, 1, 1, 0, 1;
    CHECK: setp.ne.b32 p, 1, 0;
    CHECK-NEXT: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}}, p, 1, 1, 0, 1;
    """)


def _refused(body, message, **options):
    with pytest.raises(BuilderError, match=message):
        _kernel(body, **options)


def test_wgmma_needs_sm_90a_and_whole_warpgroups():
    _refused(_product, r"\[wgmma-chip\] .*sm_90a only, the kernel targets sm_90", chip="sm_90")
    _refused(_product, r"\[wgmma-warpgroup\] .*multiple of 128", threads=96)


@pytest.mark.parametrize("case, message", [
    ("rows not K-contiguous", r"\[wgmma-descriptor\] .*reads operand element \(1, 0\) at byte 16 .* puts it at 128"),
    ("a tile at 512 bytes", r"\[wgmma-alignment\] .*start on 1024 bytes, but 512 bytes are proven"),
    ("an unbounded row block", r"\[wgmma-row-block\] .*proven below 2"),
    ("a row block past the tile", r"\[wgmma-row-block\] .*0 to 1"),
    ("fp8 MN-major", r"\[wgmma-k-major\] .*must be K-major"),
    ("another atom's accumulators", r"\[wgmma-accumulators\]"),
    ("a global tensor", r"\[wgmma-operand\] .*rank-2 shared Tensor"),
    ("K of a and b differ", r"\[wgmma-operand\] .*with b's K; got a 128 x 64, b 64 x 32"),
])
def test_wgmma_refuses_what_it_cannot_prove(case, message):
    def body(k, a, b, out):
        atom, accumulators, block = ATOM, None, 0
        if case == "rows not K-contiguous":
            a = k.tensor(a.memory, Layout((128, 64), (64, 1)))
        if case == "a tile at 512 bytes":
            a = k.tensor(k.view(k.dynamic_shared(alignment=1024), (A_TILE.cosize,), "f16", byte_offset=512), A_TILE)
        if case == "an unbounded row block":
            block = k.arguments[0] and arith.index_cast(ir.IndexType.get(), k.constant(5))
            block = arith.addi(block, k.block_id())
        if case == "a row block past the tile":
            block = 2
        if case == "fp8 MN-major":
            atom = wgmma(64, "e4m3")
            memory = k.view(k.dynamic_shared(alignment=1024), (16384,), "i8")
            a = k.tensor(memory, Box(128, 128, 8, 128).layout)
            b = k.tensor(memory, Layout(((16, 4), (8, 16)), ((1, 128), (16, 512))))  # MN-major core matrices
        if case == "another atom's accumulators":
            accumulators = k.accumulators(wgmma(32, "f16"))
        if case == "a global tensor":
            a = k.tensor(out, (128, 64))
        if case == "K of a and b differ":
            b = k.tensor(b.memory, Box(64, 32, 16, 64).layout)
        accumulators = accumulators or k.accumulators(atom)
        k.wgmma(atom, a, b, accumulators, a_row_block=block)
    _refused(body, message)


@pytest.mark.parametrize("thread", [0, 5, 37, 127, 200])
def test_accumulator_coordinates_are_the_atoms_thread_value_layout(thread):
    import index_code

    atom = wgmma(24, "bf16")
    with Kernel("k", ["memref<64xindex>"], block=(256, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        accumulators = k.accumulators(atom)
        for slot in range(12):
            for position, value in enumerate(accumulators.coordinate(slot)):
                k.store(value, k.arguments[0], [2 * slot + position])
    stored = index_code.run(k, [], thread=thread)
    assert [(stored[2 * v], stored[2 * v + 1]) for v in range(12)] == [atom.c.coordinate(thread % 128, v)
                                                                        for v in range(12)]


def test_an_accumulator_as_the_rs_forms_a_needs_no_shared_memory(filecheck):
    """S = A B^T, then S packed in its threads as the A of S V^T: the RS form's inline PTX (A's four words, B's
    descriptor, scale-d 0 for the first K step), after S's wait."""
    v_tile = Box(64, 64, 16, 128).layout  # (n2, k = n1): K-major

    def body(k, a, b, out):
        scores, output = k.accumulators(ATOM), k.accumulators(ATOM)
        k.wgmma(ATOM, a, b, scores, accumulate=False)
        k.wgmma_wait(0, [scores])
        k.wgmma(ATOM, k.accumulators_as_a(scores, ATOM), k.tensor(b.memory, v_tile), output, accumulate=False)
        k.wgmma_wait(0, [output])
        k.tensor(out, (1 << 16,))[k.global_thread_id()] = k.load(output.registers, [0])
    filecheck(compile_to_ptx(_kernel(body)), """
    CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}}, p, 1, 1, 0, 0;
    CHECK: wgmma.wait_group.sync.aligned 0;
    CHECK: cvt.rn.f16x2.f32
    CHECK: setp.ne.b32 p, 0, 0;
    CHECK-NEXT: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 0;
    CHECK-COUNT-3: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}}, p, 1, 1, 0;
    """)


def test_packing_accumulators_in_flight_or_over_other_k_steps_is_refused():
    def in_flight(k, a, b, out):
        scores = k.accumulators(ATOM)
        k.wgmma(ATOM, a, b, scores)
        k.accumulators_as_a(scores, ATOM)
    _refused(in_flight, r"\[wgmma-in-flight\] a load of the m64n64k16 accumulators")

    def wrong_steps(k, a, b, out):
        fragment = k.accumulators_as_a(k.accumulators(wgmma(32, "f16")), ATOM)  # 2 K steps; b has 4
        k.wgmma(ATOM, fragment, b, k.accumulators(ATOM))
    _refused(wrong_steps, r"\[wgmma-operand\] .*register A of f16 over 4 K steps \(b's K\), got one of f16 over 2")


FP8 = wgmma(64, "e4m3")


def _fp8_p_v(v_layout):
    """S = Q K^T (e4m3, 64 x 64 keys over K 128), P = S packed as the e4m3 A of P V, O = P V over a V^T tile (64
    d x 64 keys, 64-byte rows) read through `v_layout` (v_layout(d, key))."""
    with Kernel("k", [Global("f32")], block=(128, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        shared = k.dynamic_shared(alignment=1024)
        q_tile, k_tile = Box(64, 128, 8, 128).layout, Box(64, 128, 8, 128).layout
        q = k.tensor(k.view(shared, (q_tile.cosize,), "i8"), q_tile)
        keys = k.tensor(k.view(shared, (k_tile.cosize,), "i8", byte_offset=8192), k_tile)
        v = k.tensor(k.view(shared, (4096,), "i8", byte_offset=16384), v_layout)
        scores, output = k.accumulators(FP8), k.accumulators(FP8)
        k.wgmma(FP8, q, keys, scores, accumulate=False)
        k.wgmma_wait(0, [scores])
        k.wgmma(FP8, k.accumulators_as_a(scores, FP8), v, output, accumulate=False)
        k.wgmma_wait(0, [output])
        k.tensor(k.arguments[0], (1 << 16,))[k.global_thread_id()] = k.load(output.registers, [0])
    return k.module


V_T = Layout((64, 64), (64, 1), Swizzle(2, 4, 3))  # (d, key): K-major, 64-byte rows, 64-byte swizzle


def test_an_fp8_p_holds_its_keys_in_fa3s_order_and_v_is_read_through_it(filecheck):
    """e4m3 P: four accumulators a word by cvt.rn.satfinite.e4m3x2 (no shuffle: the keys in `atoms.a_key_order`),
    then P V in the RS form, V given by key (V^T written with key j at column order(j), as the fp8 attention's
    transposer writes it) and read K-major through the order; V^T in plain key order has no descriptor."""
    from mlir_tile.isa.atoms import a_key_order
    from mlir_tile.algebra.operations import composition

    order = a_key_order(FP8, FP8)
    filecheck(compile_to_ptx(_fp8_p_v(composition(V_T, (None, order)))), """
    CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {{.*}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1;
    CHECK: cvt.rn.satfinite.e4m3x2.f32
    CHECK: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {{.*}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1;
    """)
    with pytest.raises(BuilderError, match=r"\[wgmma-descriptor\] wgmma: b: "):
        _fp8_p_v(V_T)


def test_transpose_bytes_is_ldmatrix_trans_byte_permutes_and_stmatrix(filecheck, tmp_path):
    """A warpgroup's transposition of a 64 x 64 tile of bytes (one step a warp): two ldmatrix.trans, each lane's
    selectors picked by two bits of its lane id (q >= 2, c >= 4) once, four prmt.b32 a store, two stmatrix."""
    from mlir_tile.tiling.byte_transpose import byte_transpose

    swizzle = Swizzle(2, 2, 3)  # 64-byte rows
    plan = byte_transpose(Layout((64, 16), (16, 1), swizzle), Layout((64, 16), (16, 1), swizzle))
    with Kernel("k", [], block=(128, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        k.transpose_bytes(plan, k.dynamic_shared(alignment=1024), 0, 4096)
    ptx = compile_to_ptx(k.module)
    filecheck(ptx, """
    CHECK-COUNT-2: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
    CHECK-COUNT-8: prmt.b32
    CHECK-COUNT-2: stmatrix.sync.aligned.m8n8.x4.shared.b16
    """)
    assert ptx.count("prmt.b32") == 8 and ptx.count("selp.b32") <= 6
    ptxas = shutil.which("ptxas")
    if ptxas:
        (tmp_path / "k.ptx").write_text(ptx)
        subprocess.run([ptxas, "-arch=sm_90a", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")], check=True)


def test_lane_table_and_byte_permute_refuse_what_they_cannot_take():
    with Kernel("k", [], block=(128, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        for call in (lambda: k.lane_table([0] * 31), lambda: k.lane_table([1 << 32] * 32),
                     lambda: k.byte_permute(k.constant(1), k.constant(2), 1 << 16),
                     lambda: k.byte_permute(k.constant(1.0, "f32"), k.constant(2), 0x3210),
                     lambda: k.transpose_bytes("plan", k.dynamic_shared(), 0, 0)):
            with pytest.raises(BuilderError):
                call()


@pytest.mark.parametrize("threads, calls, refused", [
    (384, [(168, "decrease")], None), (384, [(176, "decrease")], "above the kernel's largest count so far \\(168"),
    (128, [(40, "increase"), (232, "decrease")], "above the kernel's largest count so far \\(40"),
    (128, [(232, "decrease"), (40, "increase")], "below the decrease to 232"),
    (384, [(232, "increase"), (200, "decrease")], None), (384, [(40, "decrease"), (232, "increase")], None),
])
def test_setmaxnreg_counts_ptxas_takes(threads, calls, refused, tmp_path):
    """ptxas refuses a decrease above the kernel's largest count: its largest increase, else what the block's
    size leaves a thread (C7406, found by the builder fuzzer); the builder refuses it at the call."""
    with Kernel("k", [], block=(threads, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        *before, last = calls
        for count, action in before:
            k.set_max_registers(count, action)
        if refused is not None:
            with pytest.raises(BuilderError, match=refused):
                k.set_max_registers(*last)
            return
        k.set_max_registers(*last)
    if shutil.which("ptxas"):  # what the builder accepts, ptxas takes
        (tmp_path / "k.ptx").write_text(compile_to_ptx(k.module))
        subprocess.run(["ptxas", "-arch=sm_90a", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")], check=True)


def test_named_barrier_arrive_is_bar_arrive_and_refuses_what_bar_arrive_cannot_take():
    with Kernel("k", [], block=(256, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        with k.if_(k.compare("eq", k.warpgroup_id(), 0)):
            k.named_barrier_arrive(3, 256)
        with k.if_(k.compare("eq", k.warpgroup_id(), 1)):
            k.named_barrier(3, 256)
        for index, threads in ((0, 256), (16, 256), (3, 48), (3, 512), ("3", 256)):
            with pytest.raises(BuilderError, match="named-barrier"):
                k.named_barrier_arrive(index, threads)
    ptx = compile_to_ptx(k.module)
    assert "bar.arrive 3, 256;" in ptx and re.search(r"bar.sync\s+3, 256;", ptx)


def test_a_role_is_its_warpgroups_branch_with_its_register_reallocation(tmp_path):
    """`k.role`: the producer warpgroup 0 lowered, the consumers (all, or one of them) raised, each under its
    branch on the warpgroup index; no registers, no setmaxnreg; anything else refused at the call."""
    import re

    with Kernel("k", [], block=(384, 1, 1), chip="sm_90a", context=ir.Context()) as k:
        warpgroup = k.warpgroup_id()
        with k.role(warpgroup, "producer", 40):
            k.named_barrier_arrive(2, 256)
        with k.role(warpgroup, 1, 232):
            k.named_barrier(2, 256)
        with k.role(warpgroup, 2):
            k.barrier()
        for which in ("consumer", 0, -1, "1"):
            with pytest.raises(BuilderError, match=r"role: 'producer', 'consumers' or a consumer's warpgroup"):
                with k.role(warpgroup, which):
                    pass
    text = str(k.module)
    assert re.findall(r"setmaxregister +(\w+) +(\d+)", text) == [("decrease", "40"), ("increase", "232")]
    assert text.count("scf.if") == 3
