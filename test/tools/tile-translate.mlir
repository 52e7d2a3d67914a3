// tile-translate --mlir-to-ptx prints PTX that ptxas accepts, --mlir-to-cubin writes it assembled (an ELF
// file with the kernel); stmatrix for a chip below sm_90 is a diagnostic at the op, not a ptxas failure later.
// The gpu.module names no chip: --chip fills it in (default sm_90).
// RUN: tile-translate --mlir-to-ptx %s | filecheck %s
// RUN: not tile-translate --mlir-to-ptx --chip=sm_80 %s 2>&1 | filecheck %s --check-prefix=SM80
// RUN: not tile-translate %s 2>&1 | filecheck %s --check-prefix=USAGE
// RUN: not tile-translate --mlir-to-cubin --chip=sm_99 %s -o %t.sm99.cubin 2>&1 | filecheck %s --check-prefix=UNKNOWN-CHIP
// RUN: %if ptxas %{ tile-translate --mlir-to-ptx %s -o %t.ptx && ptxas -arch=sm_90 %t.ptx -o %t.cubin %}
// RUN: tile-translate --mlir-to-cubin %s -o %t.nvjitlink.cubin
// RUN: %python -c "import sys; image = open(sys.argv[1], 'rb').read(); print('elf', image[:4] == bytes([127, 69, 76, 70]), 'kernel', b'.text.store_tile' in image)" %t.nvjitlink.cubin | filecheck %s --check-prefix=CUBIN
// RUN: not tile-translate --mlir-to-cubin %s 2>&1 | filecheck %s --check-prefix=CUBIN-NEEDS-FILE
// Two gpu.modules (and a module with two targets) make one PTX text each, each with its own header: written one
// after another, each named, split by `// -----`; or one file each with --output-dir; several cubins need it.
// RUN: tile-translate --mlir-to-ptx %S/Inputs/two-modules.mlir | filecheck %s --check-prefix=TWO
// RUN: rm -rf %t.dir && tile-translate --mlir-to-cubin %S/Inputs/two-modules.mlir --output-dir %t.dir && ls %t.dir | filecheck %s --check-prefix=DIR
// RUN: not tile-translate --mlir-to-cubin %S/Inputs/two-modules.mlir -o %t.two.cubin 2>&1 | filecheck %s --check-prefix=TWO-CUBINS

// CHECK: .target sm_90
// CHECK-LABEL: .visible .entry store_tile(
// CHECK: stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%rd{{[0-9]+}}], {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}};
// CHECK-NOT: .local
// SM80: error: 'tile.matrix_transfer' op [target] stmatrix needs sm_90 or newer, but the gpu.module targets sm_80
// SM80: pass 'tile-verify-matrix-transfer' failed; --mlir-pass-pipeline-crash-reproducer=FILE writes the IR it received to FILE
// SM80-NOT: ptxas
// USAGE: tile-translate: error: one of the arguments --mlir-to-ptx --mlir-to-cubin is required
// UNKNOWN-CHIP: tile-translate: error: argument --chip: 'sm_99' is not a chip that both LLVM's NVPTX backend and CUDA 13.0's ptxas know; use one of sm_75, {{.*}}, sm_90, sm_90a, {{.*}}, sm_121f
// UNKNOWN-CHIP-NOT: LLVM ERROR
// CUBIN: elf True kernel True
// TWO: // gpu.module @first for sm_90
// TWO-NEXT: //
// TWO: .target sm_90
// TWO: .entry a(
// TWO: // -----
// TWO-NEXT: // gpu.module @second for sm_80
// TWO: .target sm_80
// TWO: .entry b(
// DIR: first.sm_90.cubin
// DIR-NEXT: second.sm_80.cubin
// TWO-CUBINS: tile-translate: error: the input makes 2 cubins (@first (sm_90), @second (sm_80)) and -o names one file: use --output-dir
// CUBIN-NEEDS-FILE: tile-translate: error: --mlir-to-cubin writes binary files: give -o OUT or --output-dir DIR
module attributes {gpu.container_module} {
  gpu.module @kernels {
    memref.global "private" @sm : memref<128xi32, 3> {alignment = 16 : i64}
    gpu.func @store_tile(%out: memref<32xi32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %sm = memref.get_global @sm : memref<128xi32, 3>
      %r = memref.alloca() : memref<4xi32, 5>
      %lane = gpu.lane_id
      %v = arith.index_cast %lane : index to i32
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      memref.store %v, %r[%c0] : memref<4xi32, 5>
      memref.store %v, %r[%c1] : memref<4xi32, 5>
      memref.store %v, %r[%c2] : memref<4xi32, 5>
      memref.store %v, %r[%c3] : memref<4xi32, 5>
      "tile.matrix_transfer"(%sm, %r) {opcode = "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(32,4,1)">, src_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">}
        : (memref<128xi32, 3>, memref<4xi32, 5>) -> ()
      gpu.barrier
      %w = memref.load %sm[%lane] : memref<128xi32, 3>
      memref.store %w, %out[%lane] : memref<32xi32>
      gpu.return
    }
  }
}
