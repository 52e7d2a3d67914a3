// Lowering of the combinations: .x1/.x2/.x4, .trans, stmatrix, warpgroup and cta scopes, f32
// containers, several repeat axes, static and dynamic region starts.
// RUN: tile-opt %s --split-input-file --tile-verify-matrix-transfer --tile-lower-matrix-transfer | filecheck %s

// .x1: one matrix, rows 8 words apart (stride 8 -> shift 3); the result is a plain i32.
// CHECK-LABEL: gpu.func @x1_load
// CHECK:       %[[L:.*]] = arith.index_cast %{{.*}} : index to i32
// CHECK-NEXT:  %[[C7:.*]] = arith.constant 7 : i32
// CHECK-NEXT:  %[[ROW:.*]] = arith.andi %[[L]], %[[C7]] : i32
// CHECK-NEXT:  %[[C3:.*]] = arith.constant 3 : i32
// CHECK-NEXT:  %[[OFF:.*]] = arith.shli %[[ROW]], %[[C3]] : i32
// CHECK-NEXT:  %[[S:.*]] = arith.constant 0 : index
// CHECK-NOT:   arith.shrui
// CHECK:       %[[P:.*]] = llvm.getelementptr %{{.*}}[%[[OFF]]]
// CHECK-NEXT:  %[[V:.*]] = nvvm.ldmatrix %[[P]] {{{.*}}layout = #nvvm.mma_layout<row>, num = 1 : i32{{.*}}} : (!llvm.ptr<3>) -> i32
// CHECK-NEXT:  memref.store %[[V]], %{{.*}}[%[[S]]] : memref<1xi32, 5>
// CHECK-NOT:   nvvm.ldmatrix

gpu.module @x1_load [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @x1_load() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<1xi32, 5>
    "tile.matrix_transfer"(%r, %g) {opcode = "ldmatrix.sync.aligned.m8n8.x1.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(1,8,4):(0,4@laneid,1@laneid)">, src_layout = #tile.layout<"(1,8,4):(0,8,1)">} : (memref<1xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// stmatrix .x4 .trans: slots 0, 2, 4, 6 are read and stored with the column layout.
// CHECK-LABEL: gpu.func @x4_trans_store
// CHECK:       %[[M:.*]] = arith.andi %{{.*}}, %{{.*}} : i32
// CHECK:       %[[S0:.*]] = arith.constant 0 : index
// CHECK-NEXT:  %[[S2:.*]] = arith.constant 2 : index
// CHECK-NEXT:  %[[S4:.*]] = arith.constant 4 : index
// CHECK-NEXT:  %[[S6:.*]] = arith.constant 6 : index
// CHECK:       %[[P:.*]] = llvm.getelementptr
// CHECK-NEXT:  %[[V0:.*]] = memref.load %[[R:.*]][%[[S0]]] : memref<8xi32, 5>
// CHECK-NEXT:  %[[V2:.*]] = memref.load %[[R]][%[[S2]]]
// CHECK-NEXT:  %[[V4:.*]] = memref.load %[[R]][%[[S4]]]
// CHECK-NEXT:  %[[V6:.*]] = memref.load %[[R]][%[[S6]]]
// CHECK-NEXT:  nvvm.stmatrix %[[P]], %[[V0]], %[[V2]], %[[V4]], %[[V6]] {{{.*}}layout = #nvvm.mma_layout<col>{{.*}}} : !llvm.ptr<3>, i32, i32, i32, i32

gpu.module @x4_trans_store [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @x4_trans_store() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%g, %r) {opcode = "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(32,4,1)">, src_layout = #tile.layout<"(4,8,4):(2,4@laneid,1@laneid)">} : (memref<512xi32, 3>, memref<8xi32, 5>) -> ()
    gpu.return
  }
}

// -----

// warpgroup: the warp index in the group is (tid.x >> 5) & 3, times the group stride (64 words -> shift 6);
// f32 slots receive the loaded words through a bitcast.
// CHECK-LABEL: gpu.func @warpgroup_f32
// CHECK:       %[[TID:.*]] = gpu.thread_id x
// CHECK-NEXT:  %[[T:.*]] = arith.index_cast %[[TID]] : index to i32
// CHECK-NEXT:  %[[C5:.*]] = arith.constant 5 : i32
// CHECK-NEXT:  %[[W:.*]] = arith.shrui %[[T]], %[[C5]] : i32
// CHECK-NEXT:  %[[C3:.*]] = arith.constant 3 : i32
// CHECK-NEXT:  %[[WG:.*]] = arith.andi %[[W]], %[[C3]] : i32
// CHECK-NEXT:  %[[C6:.*]] = arith.constant 6 : i32
// CHECK-NEXT:  %[[WO:.*]] = arith.shli %[[WG]], %[[C6]] : i32
// CHECK:       %[[OFF:.*]] = arith.addi %{{.*}}, %[[WO]] : i32
// CHECK-NEXT:  %[[S0:.*]] = arith.constant 0 : index
// CHECK:       %[[P:.*]] = llvm.getelementptr %{{.*}}[%[[OFF]]]
// CHECK-NEXT:  %[[R:.*]] = nvvm.ldmatrix %[[P]] {{{.*}}layout = #nvvm.mma_layout<col>, num = 2 : i32{{.*}}}
// CHECK-NEXT:  %[[W0:.*]] = llvm.extractvalue %[[R]][0]
// CHECK-NEXT:  %[[F0:.*]] = arith.bitcast %[[W0]] : i32 to f32
// CHECK-NEXT:  memref.store %[[F0]], %{{.*}}[%[[S0]]] : memref<2xf32, 5>

gpu.module @warpgroup_f32 [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  memref.global "private" @smf : memref<512xf32, 3> {alignment = 16 : i64}
  gpu.func @warpgroup_f32() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %gf = memref.get_global @smf : memref<512xf32, 3>
    %r = memref.alloca() : memref<2xf32, 5>
    "tile.matrix_transfer"(%r, %gf) {opcode = "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", scope = "warpgroup",
        dst_layout = #tile.layout<"(4,2,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,2,8,4):(64,32,4,1)">} : (memref<2xf32, 5>, memref<512xf32, 3>) -> ()
    gpu.return
  }
}

// -----

// stmatrix from f32 slots: bitcast to i32 before the store.
// CHECK-LABEL: gpu.func @f32_store
// CHECK:       %[[V0:.*]] = memref.load %{{.*}} : memref<2xf32, 5>
// CHECK-NEXT:  %[[I0:.*]] = arith.bitcast %[[V0]] : f32 to i32
// CHECK:       %[[V1:.*]] = memref.load %{{.*}} : memref<2xf32, 5>
// CHECK-NEXT:  %[[I1:.*]] = arith.bitcast %[[V1]] : f32 to i32
// CHECK-NEXT:  nvvm.stmatrix %{{.*}}, %[[I0]], %[[I1]] {{{.*}}layout = #nvvm.mma_layout<row>{{.*}}} : !llvm.ptr<3>, i32, i32

gpu.module @f32_store [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  memref.global "private" @smf : memref<512xf32, 3> {alignment = 16 : i64}
  gpu.func @f32_store() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %gf = memref.get_global @smf : memref<512xf32, 3>
    %r = memref.alloca() : memref<2xf32, 5>
    "tile.matrix_transfer"(%gf, %r) {opcode = "stmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,8,4):(32,4,1)">, src_layout = #tile.layout<"(2,8,4):(1,4@laneid,1@laneid)">} : (memref<512xf32, 3>, memref<2xf32, 5>) -> ()
    gpu.return
  }
}

// -----

// Repeats (2,2) with shared strides (256,64): four x2 at constant offsets 0, 64, 256, 320 from one lane
// pointer, into slots (t0,t1,i) -> 4*t0 + 2*t1 + i of a 4x2 register array.
// CHECK-LABEL: gpu.func @two_repeat_axes
// The slot indices, each made once at the entry: 0, 1, 2, 3.
// CHECK:       %[[I0:.*]] = arith.constant 0 : index
// CHECK-NEXT:  %[[I1:.*]] = arith.constant 1 : index
// CHECK-NEXT:  %[[I2:.*]] = arith.constant 2 : index
// CHECK-NEXT:  %[[I3:.*]] = arith.constant 3 : index
// CHECK:       %[[P:.*]] = llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr<3>, i32)
// CHECK-NEXT:  nvvm.ldmatrix %[[P]]
// CHECK:       memref.store %{{.*}}, %{{.*}}[%[[I0]], %[[I0]]] : memref<4x2xi32, 5>
// CHECK:       %[[P1:.*]] = llvm.getelementptr %[[P]][64]
// CHECK-NEXT:  nvvm.ldmatrix %[[P1]]
// CHECK:       %[[P2:.*]] = llvm.getelementptr %[[P]][256]
// CHECK-NEXT:  %[[R2:.*]] = nvvm.ldmatrix %[[P2]]
// CHECK-NEXT:  %[[W20:.*]] = llvm.extractvalue %[[R2]][0]
// CHECK-NEXT:  memref.store %[[W20]], %{{.*}}[%[[I2]], %[[I0]]] : memref<4x2xi32, 5>
// CHECK-NEXT:  %[[W21:.*]] = llvm.extractvalue %[[R2]][1]
// CHECK-NEXT:  memref.store %[[W21]], %{{.*}}[%[[I2]], %[[I1]]] : memref<4x2xi32, 5>
// CHECK-NEXT:  %[[P3:.*]] = llvm.getelementptr %[[P]][320]
// CHECK-NEXT:  %[[R3:.*]] = nvvm.ldmatrix %[[P3]]
// CHECK-NEXT:  %[[W30:.*]] = llvm.extractvalue %[[R3]][0]
// CHECK-NEXT:  memref.store %[[W30]], %{{.*}}[%[[I3]], %[[I0]]] : memref<4x2xi32, 5>
// CHECK-NOT:   nvvm.ldmatrix

gpu.module @two_repeat_axes [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @two_repeat_axes() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4x2xi32, 5>
    "tile.matrix_transfer"(%r, %g) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,2,2,8,4):(4,2,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,2,2,8,4):(256,64,32,4,1)">} : (memref<4x2xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// A static memref offset (8 words) is part of the constant offset.
// CHECK-LABEL: gpu.func @static_offset
// CHECK:       %[[P:.*]] = llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr<3>, i32)
// CHECK-NEXT:  %[[P8:.*]] = llvm.getelementptr %[[P]][8]
// CHECK-NEXT:  nvvm.ldmatrix %[[P8]] {{{.*}}num = 4 : i32{{.*}}} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32, i32, i32)>

gpu.module @static_offset [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @static_offset() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %v = memref.subview %g[8] [256] [1] : memref<512xi32, 3> to memref<256xi32, strided<[1], offset: 8>, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %v) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi32, 5>, memref<256xi32, strided<[1], offset: 8>, 3>) -> ()
    gpu.return
  }
}

// -----

// A dynamic region start comes from the descriptor's offset field, once per transfer.
// CHECK-LABEL: gpu.func @dynamic_offset
// CHECK:       %[[D:.*]] = builtin.unrealized_conversion_cast %{{.*}} : memref<256xi32, strided<[1], offset: ?>, 3> to
// CHECK-NEXT:  %[[B:.*]] = llvm.extractvalue %[[D]][1]
// CHECK-NEXT:  %[[O:.*]] = llvm.extractvalue %[[D]][2]
// CHECK-NEXT:  %[[BO:.*]] = llvm.getelementptr %[[B]][%[[O]]] : (!llvm.ptr<3>, i64) -> !llvm.ptr<3>, i32
// CHECK-NEXT:  %[[P:.*]] = llvm.getelementptr %[[BO]][%{{.*}}] : (!llvm.ptr<3>, i32)
// CHECK-NEXT:  nvvm.ldmatrix %[[P]]

gpu.module @dynamic_offset [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @dynamic_offset() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %b = gpu.block_id x
    %c64 = arith.constant 64 : index
    %o = arith.muli %b, %c64 : index
    %v = memref.subview %g[%o] [256] [1] : memref<512xi32, 3> to memref<256xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %v) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi32, 5>, memref<256xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

// cta scope in a 32x4 block: warp = (tid.x + 32 * tid.y) >> 5, times the group stride 96; row stride 12.
// CHECK-LABEL: gpu.func @cta_2d_block
// CHECK:       %[[C12:.*]] = arith.constant 12 : i32
// CHECK-NEXT:  %[[ROW:.*]] = arith.muli %{{.*}}, %[[C12]] : i32
// CHECK-NEXT:  %[[TX:.*]] = gpu.thread_id x
// CHECK-NEXT:  %[[X:.*]] = arith.index_cast %[[TX]] : index to i32
// CHECK-NEXT:  %[[TY:.*]] = gpu.thread_id y
// CHECK-NEXT:  %[[Y:.*]] = arith.index_cast %[[TY]] : index to i32
// CHECK-NEXT:  %[[C32:.*]] = arith.constant 32 : i32
// CHECK-NEXT:  %[[YW:.*]] = arith.muli %[[Y]], %[[C32]] : i32
// CHECK-NEXT:  %[[LIN:.*]] = arith.addi %[[X]], %[[YW]] : i32
// CHECK-NEXT:  %[[C5:.*]] = arith.constant 5 : i32
// CHECK-NEXT:  %[[W:.*]] = arith.shrui %[[LIN]], %[[C5]] : i32
// CHECK-NEXT:  %[[C96:.*]] = arith.constant 96 : i32
// CHECK-NEXT:  %[[WO:.*]] = arith.muli %[[W]], %[[C96]] : i32
// CHECK-NEXT:  arith.addi %[[ROW]], %[[WO]] : i32
// CHECK-NOT:   gpu.thread_id z

gpu.module @cta_2d_block [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @cta_2d_block() kernel attributes {known_block_size = array<i32: 32, 4, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<1xi32, 5>
    "tile.matrix_transfer"(%r, %g) {opcode = "ldmatrix.sync.aligned.m8n8.x1.shared.b16", scope = "cta",
        dst_layout = #tile.layout<"(4,1,8,4):(1@warpid,0,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,1,8,4):(96,0,12,1)">} : (memref<1xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// warpgroup without known_block_size: the linear thread id x + y * ntid.x + z * ntid.x * ntid.y from
// gpu.block_dim, then (>> 5) & 3 as above.
// CHECK-LABEL: gpu.func @warpgroup_unknown_block
// CHECK:       %[[TX:.*]] = gpu.thread_id x
// CHECK-NEXT:  %[[X:.*]] = arith.index_cast %[[TX]] : index to i32
// CHECK-NEXT:  %[[BX:.*]] = gpu.block_dim x
// CHECK-NEXT:  %[[NX:.*]] = arith.index_cast %[[BX]] : index to i32
// CHECK-NEXT:  %[[BY:.*]] = gpu.block_dim y
// CHECK-NEXT:  %[[NY:.*]] = arith.index_cast %[[BY]] : index to i32
// CHECK-NEXT:  %[[PLANE:.*]] = arith.muli %[[NX]], %[[NY]] : i32
// CHECK-NEXT:  %[[TY:.*]] = gpu.thread_id y
// CHECK-NEXT:  %[[Y:.*]] = arith.index_cast %[[TY]] : index to i32
// CHECK-NEXT:  %[[YX:.*]] = arith.muli %[[Y]], %[[NX]] : i32
// CHECK-NEXT:  %[[XY:.*]] = arith.addi %[[X]], %[[YX]] : i32
// CHECK-NEXT:  %[[TZ:.*]] = gpu.thread_id z
// CHECK-NEXT:  %[[Z:.*]] = arith.index_cast %[[TZ]] : index to i32
// CHECK-NEXT:  %[[ZP:.*]] = arith.muli %[[Z]], %[[PLANE]] : i32
// CHECK-NEXT:  %[[LINEAR:.*]] = arith.addi %[[XY]], %[[ZP]] : i32
// CHECK-NEXT:  %[[C5:.*]] = arith.constant 5 : i32
// CHECK-NEXT:  %[[WARP:.*]] = arith.shrui %[[LINEAR]], %[[C5]] : i32
// CHECK-NEXT:  %[[C3:.*]] = arith.constant 3 : i32
// CHECK-NEXT:  %[[WG:.*]] = arith.andi %[[WARP]], %[[C3]] : i32
// CHECK-NEXT:  %[[C6:.*]] = arith.constant 6 : i32
// CHECK-NEXT:  %[[WO:.*]] = arith.shli %[[WG]], %[[C6]] : i32
// CHECK:       arith.addi %{{.*}}, %[[WO]] : i32
gpu.module @warpgroup_unknown_block [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @warpgroup_unknown_block() kernel {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<2xi32, 5>
    "tile.matrix_transfer"(%r, %g) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warpgroup",
        dst_layout = #tile.layout<"(4,2,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,2,8,4):(64,32,4,1)">} : (memref<2xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}
