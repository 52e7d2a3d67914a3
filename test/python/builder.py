# RUN: %python %s | filecheck %s
"""The Python builder API: ops from layout objects, attributes read back, early contract errors, the
spec's kernel module, and compile_to_ptx."""
import gc

from mlir import ir

from mlir_tile.builder import Kernel, transfer
from mlir_tile.contract import ContractError
from mlir_tile.algebra.layout import S, laneid
from mlir_tile.algebra.words import pack_b16_as_b32


def run(f):
    """Upstream's test/python idiom: run, then check that the test left no MLIR context alive."""
    print("\nTEST:", f.__name__)
    f()
    gc.collect()
    assert ir.Context._get_live_count() == 0, f"{f.__name__} leaked {ir.Context._get_live_count()} context(s)"
    return f


def kernel_with_buffers(words=512, slots=8, alignment=16, block=(32, 1, 1)):
    kernel = Kernel("k", [], block=block, context=ir.Context())
    kernel.__enter__()
    return kernel, kernel.shared("sm", words, alignment=alignment), kernel.registers(slots)


# CHECK-LABEL: TEST: test_build_from_layout_objects
# CHECK: "tile.matrix_transfer"(%{{.*}}, %{{.*}}) {dst_layout = #tile.layout<"(2,2,8,4):(8,2,4@laneid,1@laneid)">, opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp", src_layout = #tile.layout<"(2,2,8,4):(128,8,16,1)">} : (memref<12xi32, #gpu.address_space<private>>, memref<256xi32, #gpu.address_space<workgroup>>) -> ()
@run
def test_build_from_layout_objects():
    k, sm, _ = kernel_with_buffers(words=256)
    regs = k.registers(12)
    shared = S[(16, 4, 2):(8, 1, 128)].rearrange("(r m) w k -> k m r w", r=8, m=2)
    op = transfer("ldmatrix.sync.aligned.m8n8.x2.shared.b16", regs, sm,
                         dst_layout=S[(2, 2, 8, 4):(8, 2, 4 @ laneid, 1 @ laneid)], src_layout=shared)
    print(op)
    k.__exit__(None, None, None)


# CHECK-LABEL: TEST: test_read_attributes_back
# CHECK: MatrixTransferOp opcode stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 scope warp
# CHECK: dst (4,8,4):(32,4,1) rank 3 cosize 128
# CHECK: src (4,8,4):(1,4@laneid,1@laneid) slot of matrix 3: 3 lane of (row 7, word 3): 31
@run
def test_read_attributes_back():
    k, sm, regs = kernel_with_buffers()
    op = transfer("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", sm, regs,
                         dst_layout="(4,8,4):(32,4,1)", src_layout="(4,8,4):(1,4@laneid,1@laneid)")
    print(type(op).__name__, "opcode", op.opcode, "scope", op.scope)
    print("dst", op.dst_layout, "rank", op.dst_layout.rank, "cosize", op.dst_layout.cosize)
    src = op.src_layout
    print("src", src, "slot of matrix 3:", src.offset(3, 0, 0), "lane of (row 7, word 3):", src(0, 7, 3).threads["laneid"])
    k.__exit__(None, None, None)


# CHECK-LABEL: TEST: test_builder_fails_early_with_the_contract_messages
# CHECK: [row-alignment] src: the IR proves only 8-byte alignment for the shared buffer
# CHECK: [row-alignment] src_layout (4,8,4):(32,6,1): shared row (matrix=0, row=1, word=0) starts at byte 24 (element 6), not a multiple of 16
# CHECK: [scope] scope "thread" (the specification's default) cannot issue ldmatrix/stmatrix
@run
def test_builder_fails_early_with_the_contract_messages():
    k, sm, regs = kernel_with_buffers(alignment=8)
    for scope, shared in (("warp", "(4,8,4):(32,6,1)"), ("thread", "(4,8,4):(32,4,1)")):
        try:
            transfer("ldmatrix.sync.aligned.m8n8.x4.shared.b16", regs, sm,
                            dst_layout="(4,8,4):(1,4@laneid,1@laneid)", src_layout=shared, scope=scope)
            print("built an illegal transfer")
        except ContractError as error:
            for violation in error.violations:
                print(violation)
    k.__exit__(None, None, None)


# CHECK-LABEL: TEST: test_block_size_reaches_the_builder_check
# CHECK: [participation] known_block_size (48, 1, 1) has 48 threads, not a multiple of 32
@run
def test_block_size_reaches_the_builder_check():
    k, sm, regs = kernel_with_buffers(block=(48, 1, 1))
    try:
        transfer("ldmatrix.sync.aligned.m8n8.x4.shared.b16", regs, sm,
                        dst_layout="(4,8,4):(1,4@laneid,1@laneid)", src_layout="(4,8,4):(32,4,1)")
    except ContractError as error:
        print(error)
    k.__exit__(None, None, None)


# CHECK-LABEL: TEST: test_spec_example_module
# CHECK: module attributes {gpu.container_module}
# CHECK: gpu.module @kernels [#nvvm.target<chip = "sm_90">]
# CHECK: memref.global "private" @sm : memref<256xi32, #gpu.address_space<workgroup>> {alignment = 16 : i64}
# CHECK: gpu.func @matrix_kernel(%{{.*}}: memref<16x4x2xi32>, %{{.*}}: memref<32x12xi32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>}
# CHECK-NEXT: %[[RAW:.*]] = memref.alloca() : memref<12xi32, #gpu.address_space<private>>
# CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
# CHECK: memref.load %{{.*}} : memref<16x4x2xi32>
# CHECK: memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<256xi32, #gpu.address_space<workgroup>>
# CHECK-NEXT: }
# CHECK-NEXT: gpu.barrier
# CHECK: %[[SENTINEL:.*]] = arith.constant -777 : i32
# CHECK-COUNT-12: memref.store %[[SENTINEL]], %[[RAW]]
# CHECK: "tile.matrix_transfer"(%[[RAW]], %{{.*}}) {dst_layout = #tile.layout<"(2,2,8,4):(8,2,4@laneid,1@laneid)">, opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp", src_layout = #tile.layout<"(2,2,8,4):(128,8,16,1)">}
# CHECK-COUNT-12: memref.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<32x12xi32>
@run
def test_spec_example_module():
    import seed_example

    print(seed_example.build_module(ir.Context()))


# CHECK-LABEL: TEST: test_compile_to_ptx
# CHECK: .target sm_90
# CHECK: .entry matrix_kernel(
# CHECK-COUNT-2: ldmatrix.sync.aligned.m8n8.x2.shared.b16
# CHECK-NOT: ldmatrix
@run
def test_compile_to_ptx():
    import mlir_tile
    import seed_example

    print(mlir_tile.compile_to_ptx(seed_example.build_module(ir.Context()), chip="sm_90"))


# CHECK-LABEL: TEST: test_compile_error_names_the_pass
# CHECK: [target] stmatrix needs sm_90 or newer, but the gpu.module targets sm_80
# CHECK: pass 'tile-verify-matrix-transfer' failed; the IR it received is this error's failure.reproducer (run it with tile-opt FILE --pass-pipeline='builtin.module(tile-verify-matrix-transfer)')
@run
def test_compile_error_names_the_pass():
    from mlir_tile.compiler.compile import CompileError, compile_to_ptx

    with Kernel("k", [], chip="sm_80", context=ir.Context()) as k:
        sm, regs = k.shared("sm", 128), k.registers(4)
        transfer("stmatrix.sync.aligned.m8n8.x4.shared.b16", sm, regs, dst_layout="(4,8,4):(32,4,1)",
                        src_layout="(4,8,4):(1,4@laneid,1@laneid)", check=False)
    try:
        compile_to_ptx(k.module, chip="sm_80")
    except CompileError as error:
        print(error)


# CHECK-LABEL: TEST: test_packed_half_storage_as_words
# CHECK: (16,8):(8,1) -> (16,4):(4,1)
@run
def test_packed_half_storage_as_words():
    half = S[(16, 8):(8, 1)]
    print(half, "->", pack_b16_as_b32(half))


# CHECK-LABEL: TEST: test_the_irs_chip_decides_and_the_module_is_not_changed
# CHECK: .target sm_80
# CHECK: unchanged True same PTX again True
# CHECK: [target] this gpu.module's #nvvm.target names chip sm_80, but the pipeline asks for chip=sm_90
@run
def test_the_irs_chip_decides_and_the_module_is_not_changed():
    from mlir_tile.compiler.compile import CompileError, compile_to_ptx

    with Kernel("k", [], chip="sm_80", context=ir.Context()) as k:
        sm, regs = k.shared("sm", 128), k.registers(4)
        transfer("ldmatrix.sync.aligned.m8n8.x4.shared.b16", regs, sm,
                        dst_layout="(4,8,4):(1,4@laneid,1@laneid)", src_layout="(4,8,4):(32,4,1)")
    before = str(k.module)
    ptx = compile_to_ptx(k.module)
    print(ptx)
    print("unchanged", str(k.module) == before, "same PTX again", compile_to_ptx(k.module) == ptx)
    try:
        compile_to_ptx(k.module, chip="sm_90")
    except CompileError as error:
        print(error)


# CHECK-LABEL: TEST: test_nested_and_swizzled_layouts
# CHECK: src_layout = #tile.layout<"((2,2),8,4):((288,4),36,1)">
# CHECK: src_layout = #tile.layout<"Sw<3,2,3> o (4,(2,2),8,4):(8,(256,4),32,1)">
# CHECK: [shared-row] {{.*}}(after the swizzle), not 4 consecutive words
@run
def test_nested_and_swizzled_layouts():
    from mlir_tile.algebra.layout import Sw

    k, _, _ = kernel_with_buffers(words=2048)
    tile = k.shared("tile", 576)
    swizzled = k.shared("swizzled", 2048, alignment=1024)
    regs = k.registers(16)
    a_operand = S[(16, 8):(36, 1)].rearrange("(mh r) (kh w) -> (kh mh) r w", mh=2, kh=2)  # one x4 per block
    print(transfer("ldmatrix.sync.aligned.m8n8.x4.shared.b16", regs, tile,
                          dst_layout=S[(4, 8, 4):(1, 4 @ laneid, 1 @ laneid)], src_layout=a_operand))
    band = Sw(3, 2, 3).compose(S[(4, (2, 2), 8, 4):(8, (256, 4), 32, 1)])
    print(transfer("ldmatrix.sync.aligned.m8n8.x4.shared.b16", regs, swizzled,
                          dst_layout=S[(4, 4, 8, 4):(4, 1, 4 @ laneid, 1 @ laneid)], src_layout=band))
    try:
        transfer("ldmatrix.sync.aligned.m8n8.x4.shared.b16", regs, swizzled,
                        dst_layout=S[(4, 4, 8, 4):(4, 1, 4 @ laneid, 1 @ laneid)],
                        src_layout=Sw(3, 1, 3).compose(S[(4, (2, 2), 8, 4):(16, (256, 4), 32, 1)]))
    except ContractError as error:
        print(error)
    k.__exit__(None, None, None)
