// The op as the issue writes it parses, verifies and prints in generic form, in tile-opt and in upstream
// mlir-opt loading the same IRDL file; printing again gives the same text.
// RUN: tile-opt %s | filecheck %s
// RUN: mlir-opt --irdl-file=%irdl %s | filecheck %s
// RUN: tile-opt %s | tile-opt | filecheck %s
// RUN: mlir-opt --irdl-file=%irdl %s | mlir-opt --irdl-file=%irdl | filecheck %s

// CHECK-LABEL: func.func @spec_example
// CHECK: "tile.matrix_transfer"(%{{.*}}, %{{.*}}) {dst_layout = #tile.layout<"(2,2,8,4):(8,2,4@laneid,1@laneid)">, opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp", src_layout = #tile.layout<"(2,2,8,4):(128,8,16,1)">} : (memref<12xi32, #gpu.address_space<private>>, memref<256xi32, #gpu.address_space<workgroup>>) -> ()
func.func @spec_example(%regs: memref<12xi32, #gpu.address_space<private>>,
                        %sm: memref<256xi32, #gpu.address_space<workgroup>>) {
  "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
      dst_layout = #tile.layout<"(2,2,8,4):(8,2,4@laneid,1@laneid)">,
      src_layout = #tile.layout<"(2,2,8,4):(128,8,16,1)">}
    : (memref<12xi32, #gpu.address_space<private>>, memref<256xi32, #gpu.address_space<workgroup>>) -> ()
  return
}

// stmatrix: operands (dst = shared, src = registers); integer memory spaces 3 and 5; f32 containers.
// CHECK-LABEL: func.func @store_numeric_spaces
// CHECK: "tile.matrix_transfer"(%{{.*}}, %{{.*}}) {dst_layout = #tile.layout<"(4,8,4):(32,4,1)">, opcode = "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", scope = "warp", src_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">} : (memref<128xf32, 3>, memref<4xf32, 5>) -> ()
func.func @store_numeric_spaces(%sm: memref<128xf32, 3>, %regs: memref<4xf32, 5>) {
  "tile.matrix_transfer"(%sm, %regs) {opcode = "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", scope = "warp",
      dst_layout = #tile.layout<"(4,8,4):(32,4,1)">, src_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">}
    : (memref<128xf32, 3>, memref<4xf32, 5>) -> ()
  return
}

// Nested modes and a swizzle: the layout text round-trips as written.
// CHECK-LABEL: func.func @nested_and_swizzled
// CHECK: dst_layout = #tile.layout<"((2,2),8,4):((1,2),4@laneid,1@laneid)">
// CHECK-SAME: src_layout = #tile.layout<"Sw<3,2,3> o ((2,2),8,4):((256,4),32,1)">
func.func @nested_and_swizzled(%regs: memref<4xi32, 5>, %sm: memref<2048xi32, 3>) {
  "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
      dst_layout = #tile.layout<"((2,2),8,4):((1,2),4@laneid,1@laneid)">,
      src_layout = #tile.layout<"Sw<3,2,3> o ((2,2),8,4):((256,4),32,1)">}
    : (memref<4xi32, 5>, memref<2048xi32, 3>) -> ()
  return
}
