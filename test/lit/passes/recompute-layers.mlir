// RUN: ortc-opt --ortc-recompute="policy=layers plan=false" %s --split-input-file 2>/dev/null | FileCheck %s
// RUN: ortc-opt --ortc-recompute=policy=layers %s --split-input-file 2>/dev/null | FileCheck %s --check-prefix=PLAN
// RUN: ortc-opt --ortc-recompute=policy=layers %s --split-input-file 2>&1 >/dev/null | FileCheck %s --check-prefix=NONE

// Two residual blocks y = gelu(x*w + b) + x, found by their node name scopes
// ("/blocks.0/...", "/blocks.1/..."). layers keeps what crosses the block boundaries (x,
// y0: each read by a forward op outside its block) and recomputes inside each block what
// the backward reads (hb = x*w + b, for gelu_grad) from the block's input: the clones of
// the matmul and the bias add run right before the block's backward.
func.func @train_step(%x: tensor<4x16xf32> {ortc.name = "x", ortc.role = "input"},
                      %w0: tensor<16x16xf32> {ortc.name = "w0", ortc.role = "parameter"},
                      %b0: tensor<4x16xf32> {ortc.name = "b0", ortc.role = "parameter"},
                      %w1: tensor<16x16xf32> {ortc.name = "w1", ortc.role = "parameter"},
                      %b1: tensor<4x16xf32> {ortc.name = "b1", ortc.role = "parameter"},
                      %dy: tensor<4x16xf32> {ortc.name = "dy", ortc.role = "input"})
    -> (tensor<16x16xf32> {ortc.name = "dw0"}, tensor<16x16xf32> {ortc.name = "dw1"},
        tensor<4x16xf32> {ortc.name = "dx"}) {
  %h0 = ortc.matmul %x, %w0 {ortc.stage = "forward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32> loc("/blocks.0/fc/MatMul")
  %hb0 = ortc.add %h0, %b0 {ortc.stage = "forward"} : tensor<4x16xf32> loc("/blocks.0/fc/Add")
  %g0 = ortc.gelu %hb0 {ortc.stage = "forward"} : tensor<4x16xf32> loc("/blocks.0/act/Gelu")
  %y0 = ortc.add %g0, %x {ortc.stage = "forward"} : tensor<4x16xf32> loc("/blocks.0/Add")
  %h1 = ortc.matmul %y0, %w1 {ortc.stage = "forward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32> loc("/blocks.1/fc/MatMul")
  %hb1 = ortc.add %h1, %b1 {ortc.stage = "forward"} : tensor<4x16xf32> loc("/blocks.1/fc/Add")
  %g1 = ortc.gelu %hb1 {ortc.stage = "forward"} : tensor<4x16xf32> loc("/blocks.1/act/Gelu")
  %y1 = ortc.add %g1, %y0 {ortc.stage = "forward"} : tensor<4x16xf32> loc("/blocks.1/Add")
  %dhb1 = ortc.gelu_grad %hb1, %dy {ortc.stage = "backward"} : tensor<4x16xf32>
  %dw1 = ortc.matmul %y0, %dhb1 {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  %dy0a = ortc.matmul %dhb1, %w1 {trans_b = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %dy0 = ortc.add %dy0a, %dy {ortc.stage = "backward"} : tensor<4x16xf32>
  %dhb0 = ortc.gelu_grad %hb0, %dy0 {ortc.stage = "backward"} : tensor<4x16xf32>
  %dw0 = ortc.matmul %x, %dhb0 {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  %dxa = ortc.matmul %dhb0, %w0 {trans_b = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %dx = ortc.add %dxa, %dy0 {ortc.stage = "backward"} : tensor<4x16xf32>
  return %dw0, %dw1, %dx : tensor<16x16xf32>, tensor<16x16xf32>, tensor<4x16xf32>
}
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: ortc.recompute_blocks = array<i64: 4, 4>
// CHECK-SAME: ortc.recomputed = 2 : i64
// CHECK-SAME: ortc.recomputed_blocks = 2 : i64
// The forward is unchanged.
// CHECK: %[[H0:.*]] = ortc.matmul %arg0, %arg1 {ortc.stage = "forward"}
// CHECK: %[[HB0:.*]] = ortc.add %[[H0]], %arg2 {ortc.stage = "forward"}
// CHECK: %[[Y0:.*]] = ortc.add %{{.*}}, %arg0 {ortc.stage = "forward"}
// CHECK: %[[H1:.*]] = ortc.matmul %[[Y0]], %arg3 {ortc.stage = "forward"}
// CHECK: %[[Y1:.*]] = ortc.add
// Block 1 runs again from y0 before its backward...
// CHECK: %[[H1R:.*]] = ortc.matmul %[[Y0]], %arg3 {ortc.recompute, ortc.stage = "forward"}
// CHECK: %[[HB1R:.*]] = ortc.add %[[H1R]], %arg4 {ortc.recompute, ortc.stage = "forward"}
// CHECK: ortc.gelu_grad %[[HB1R]], %arg5
// ... and block 0 from x before its own.
// CHECK: %[[H0R:.*]] = ortc.matmul %arg0, %arg1 {ortc.recompute, ortc.stage = "forward"}
// CHECK: %[[HB0R:.*]] = ortc.add %[[H0R]], %arg2 {ortc.recompute, ortc.stage = "forward"}
// CHECK: ortc.gelu_grad %[[HB0R]]

// Planned (the default), a block is recomputed only if the arena gets smaller: here
// neither does (the peak, 768 bytes, is where dx's operands meet, whatever is recomputed).
// PLAN-LABEL: func.func @train_step
// PLAN-SAME: ortc.recompute_planned = 768 : i64, ortc.recompute_without = 768 : i64, ortc.recomputed = 0 : i64, ortc.recomputed_blocks = 0 : i64

// -----

// The same blocks without node names (as PyTorch 2's exporter names nodes): found as two
// repeats of the activation ops' sequence, cut between the heavy ops (the matmuls) where
// the fewest bytes cross: after each residual add.
func.func @train_step(%x: tensor<4x16xf32> {ortc.name = "x", ortc.role = "input"},
                      %w0: tensor<16x16xf32> {ortc.name = "w0", ortc.role = "parameter"},
                      %b0: tensor<4x16xf32> {ortc.name = "b0", ortc.role = "parameter"},
                      %w1: tensor<16x16xf32> {ortc.name = "w1", ortc.role = "parameter"},
                      %b1: tensor<4x16xf32> {ortc.name = "b1", ortc.role = "parameter"},
                      %dy: tensor<4x16xf32> {ortc.name = "dy", ortc.role = "input"})
    -> (tensor<16x16xf32> {ortc.name = "dw0"}, tensor<16x16xf32> {ortc.name = "dw1"}) {
  %h0 = ortc.matmul %x, %w0 {ortc.stage = "forward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %hb0 = ortc.add %h0, %b0 {ortc.stage = "forward"} : tensor<4x16xf32>
  %g0 = ortc.gelu %hb0 {ortc.stage = "forward"} : tensor<4x16xf32>
  %y0 = ortc.add %g0, %x {ortc.stage = "forward"} : tensor<4x16xf32>
  %h1 = ortc.matmul %y0, %w1 {ortc.stage = "forward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %hb1 = ortc.add %h1, %b1 {ortc.stage = "forward"} : tensor<4x16xf32>
  %g1 = ortc.gelu %hb1 {ortc.stage = "forward"} : tensor<4x16xf32>
  %y1 = ortc.add %g1, %y0 {ortc.stage = "forward"} : tensor<4x16xf32>
  %dhb1 = ortc.gelu_grad %hb1, %dy {ortc.stage = "backward"} : tensor<4x16xf32>
  %dw1 = ortc.matmul %y0, %dhb1 {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  %dy0 = ortc.matmul %dhb1, %w1 {trans_b = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %dhb0 = ortc.gelu_grad %hb0, %dy0 {ortc.stage = "backward"} : tensor<4x16xf32>
  %dw0 = ortc.matmul %x, %dhb0 {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  return %dw0, %dw1 : tensor<16x16xf32>, tensor<16x16xf32>
}
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: ortc.recompute_blocks = array<i64: 4, 4>
// CHECK-SAME: ortc.recomputed_blocks = 2 : i64
// CHECK: ortc.matmul %{{.*}}, %arg3 {ortc.recompute, ortc.stage = "forward"}
// CHECK: ortc.matmul %arg0, %arg1 {ortc.recompute, ortc.stage = "forward"}
// Planned: one block lowers the arena (kernels formed, memory planned) from 768 to 512 bytes; the
// second one adds nothing.
// PLAN-LABEL: func.func @train_step
// PLAN-SAME: ortc.recompute_planned = 512 : i64, ortc.recompute_without = 768 : i64, ortc.recomputed = 1 : i64, ortc.recomputed_blocks = 1 : i64

// -----

// A forward without repeats: a warning, nothing recomputed.
func.func @train_step(%x: tensor<4x16xf32> {ortc.name = "x", ortc.role = "input"},
                      %w0: tensor<16x16xf32> {ortc.name = "w0", ortc.role = "parameter"},
                      %dy: tensor<4x16xf32> {ortc.name = "dy", ortc.role = "input"})
    -> (tensor<16x16xf32> {ortc.name = "dw0"}) {
  %h0 = ortc.matmul %x, %w0 {ortc.stage = "forward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %g0 = ortc.gelu %h0 {ortc.stage = "forward"} : tensor<4x16xf32>
  %dh = ortc.gelu_grad %h0, %dy {ortc.stage = "backward"} : tensor<4x16xf32>
  %dw0 = ortc.matmul %x, %dh {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  return %dw0 : tensor<16x16xf32>
}
// NONE: warning: ortc-recompute: layers: no repeated blocks in the forward of @train_step; nothing recomputed
