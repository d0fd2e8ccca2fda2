// RUN: ortc-opt --ortc-recompute="policy=selective plan=false" %s | FileCheck %s
// RUN: ortc-opt --ortc-recompute="policy=selective plan=false" --ortc-form-kernels %s | FileCheck %s --check-prefix=FUSED
// RUN: ortc-opt --ortc-recompute="policy=selective plan=false fusion=false" %s | FileCheck %s --check-prefix=UNFUSED

// A LayerNorm's output is recomputed from the statistics its gradient keeps anyway:
// ((x - mean) * inv_std) * scale + bias in f64, rounded once to f32, the layer_norm
// kernels' own arithmetic (so the bits are the forward's), where a clone would compute
// the statistics again; its four operations per element are what it adds. Selective does
// not recompute the statistics themselves: 8 operations per element of x for a value of
// one per row.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: ortc.recompute_flops = 128 : i64, ortc.recomputed = 1 : i64
// CHECK: %[[Y:.*]], %[[MEAN:.*]], %[[INV:.*]] = ortc.layer_norm %arg0, %arg1, %arg2 {{.*}}ortc.stage = "forward"
// CHECK-NOT: ortc.layer_norm
// CHECK: %[[X:.*]] = ortc.cast %arg0 {ortc.recompute, ortc.stage = "forward"} : tensor<4x8xf32> -> tensor<4x8xf64>
// CHECK: %[[MB:.*]] = ortc.broadcast_to %[[MEAN]] {{.*}} -> tensor<4x8xf32>
// CHECK: %[[M:.*]] = ortc.cast %[[MB]] {{.*}} -> tensor<4x8xf64>
// CHECK: %[[C:.*]] = ortc.sub %[[X]], %[[M]] {ortc.recompute
// CHECK: %[[IB:.*]] = ortc.broadcast_to %[[INV]]
// CHECK: %[[I:.*]] = ortc.cast %[[IB]]
// CHECK: %[[N:.*]] = ortc.mul %[[C]], %[[I]]
// CHECK: %[[GB:.*]] = ortc.broadcast_to %arg1
// CHECK: %[[G:.*]] = ortc.cast %[[GB]]
// CHECK: %[[S:.*]] = ortc.mul %[[N]], %[[G]]
// CHECK: %[[BB:.*]] = ortc.broadcast_to %arg2
// CHECK: %[[B:.*]] = ortc.cast %[[BB]]
// CHECK: %[[A:.*]] = ortc.add %[[S]], %[[B]]
// CHECK: %[[Y2:.*]] = ortc.cast %[[A]] {ortc.recompute, ortc.stage = "forward"} : tensor<4x8xf64> -> tensor<4x8xf32>
// CHECK: ortc.matmul %[[Y2]], %arg4 {ortc.stage = "backward", trans_a = true}
// CHECK-NOT: ortc.layer_norm %
// CHECK: ortc.layer_norm_grad %arg0, %arg1, %[[MEAN]], %[[INV]]
// Each operand is broadcast before it is widened, so the chain is one kernel.
// FUSED-LABEL: func.func @train_step
// FUSED: %[[K:.*]] = ortc.fused "pointwise"(%arg0, %mean, %inv_std, %arg1, %arg2) {ortc.recompute, ortc.stage = "forward"}
// FUSED: ortc.yield
// FUSED-NEXT: }
// FUSED-NEXT: ortc.matmul %[[K]], %arg4 {ortc.stage = "backward", trans_a = true}
// Without kernels the chain's steps would each write an f64 tensor: a clone then.
// UNFUSED-LABEL: func.func @train_step
// UNFUSED: %[[Y4:.*]], %{{.*}}, %{{.*}} = ortc.layer_norm %arg0, %arg1, %arg2 {{.*}}ortc.recompute, ortc.stage = "forward"
// UNFUSED-NOT: ortc.cast
// UNFUSED: ortc.matmul %[[Y4]], %arg4 {ortc.stage = "backward", trans_a = true}
func.func @train_step(%x: tensor<4x8xf32> {ortc.name = "x"},
                      %g: tensor<8xf32> {ortc.name = "g", ortc.role = "parameter"},
                      %b: tensor<8xf32> {ortc.name = "b", ortc.role = "parameter"},
                      %w: tensor<8x8xf32> {ortc.name = "w", ortc.role = "parameter"},
                      %dz: tensor<4x8xf32> {ortc.name = "dz"})
    -> (tensor<4x8xf32> {ortc.name = "z"}, tensor<8x8xf32> {ortc.name = "dw"}, tensor<4x8xf32> {ortc.name = "dx"},
        tensor<8xf32> {ortc.name = "dg"}, tensor<8xf32> {ortc.name = "db"}) {
  %y, %mean, %inv = ortc.layer_norm %x, %g, %b {axis = 1 : i64, epsilon = 1.000000e-05 : f64, ortc.stage = "forward"} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  %z = ortc.matmul %y, %w {ortc.stage = "forward"} : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %dw = ortc.matmul %y, %dz {trans_a = true, ortc.stage = "backward"} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<8x8xf32>
  %dy = ortc.matmul %dz, %w {trans_b = true, ortc.stage = "backward"} : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %dx, %dg, %db = ortc.layer_norm_grad %x, %g, %mean, %inv, %dy {axis = 1 : i64, ortc.stage = "backward"} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %z, %dw, %dx, %dg, %db : tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
}

// When the backward keeps no statistics (no layer_norm_grad reads them), y's recompute
// is a clone of the whole op.
// CHECK-LABEL: func.func @stats_unread
// CHECK: ortc.layer_norm %arg0, %arg1 {{.*}}ortc.stage = "forward"
// CHECK: %[[Y3:.*]], %{{.*}}, %{{.*}} = ortc.layer_norm %arg0, %arg1 {{.*}}ortc.recompute, ortc.stage = "forward"
// CHECK-NOT: ortc.cast
// CHECK: ortc.matmul %[[Y3]], %arg3 {ortc.stage = "backward", trans_a = true}
func.func @stats_unread(%x: tensor<4x8xf32> {ortc.name = "x"},
                        %g: tensor<8xf32> {ortc.name = "g", ortc.role = "parameter"},
                        %w: tensor<8x8xf32> {ortc.name = "w", ortc.role = "parameter"},
                        %dz: tensor<4x8xf32> {ortc.name = "dz"})
    -> (tensor<4x8xf32> {ortc.name = "z"}, tensor<8x8xf32> {ortc.name = "dw"}) {
  %y, %mean, %inv = ortc.layer_norm %x, %g {axis = 1 : i64, epsilon = 1.000000e-05 : f64, ortc.stage = "forward"} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  %z = ortc.matmul %y, %w {ortc.stage = "forward"} : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %dw = ortc.matmul %y, %dz {trans_a = true, ortc.stage = "backward"} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<8x8xf32>
  return %z, %dw : tensor<4x8xf32>, tensor<8x8xf32>
}
