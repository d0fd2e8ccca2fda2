// RUN: ortc-opt --ortc-autodiff %s | FileCheck %s
// RUN: ortc-opt --ortc-autodiff="freeze=b*" %s | FileCheck %s --check-prefix=FROZEN
// RUN: ortc-opt --ortc-autodiff="sync-batchnorm=1" %s | FileCheck %s --check-prefix=SYNC

// A weight used twice (tied) gets the sum of both gradients; an integer mask feeding
// `equal` is a constant, not a parameter; BatchNorm's running stats become buffers.
ortc.global @w : tensor<4x4xf32> {kind = "weight", onnx_name = "w"}
ortc.global @bias : tensor<4xf32> {kind = "weight", onnx_name = "bias"}
ortc.global @mask : tensor<4x4xf32> {kind = "weight", onnx_name = "mask"}
ortc.global @rm : tensor<4xf32> {kind = "weight", onnx_name = "rm"}
ortc.global @rv : tensor<4xf32> {kind = "weight", onnx_name = "rv"}
func.func @forward(%x: tensor<2x4xf32> {ortc.name = "x"}) -> (tensor<f32> {ortc.name = "loss", ortc.role = "loss"}) {
  %w = ortc.weight @w : tensor<4x4xf32>
  %h = ortc.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %h2 = ortc.matmul %h, %w {trans_b = true} : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %b = ortc.weight @bias : tensor<4xf32>
  %rm = ortc.weight @rm : tensor<4xf32>
  %rv = ortc.weight @rv : tensor<4xf32>
  %y, %mean, %var = ortc.batch_norm_train %h2, %b, %b, %rm, %rv {epsilon = 1.0e-5 : f64, momentum = 0.9 : f64} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>)
  %m = ortc.weight @mask : tensor<4x4xf32>
  %z = ortc.constant dense<0.0> : tensor<4x4xf32>
  %c = ortc.equal %m, %z : tensor<4x4xf32> -> tensor<4x4xi1>
  %mw = ortc.select %c, %z, %z : tensor<4x4xi1>, tensor<4x4xf32>
  %y2 = ortc.matmul %y, %mw : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %t = ortc.add %y, %y2 : tensor<2x4xf32>
  %s = ortc.reduce_sum %t {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// CHECK-DAG: ortc.global @w : tensor<4x4xf32> {kind = "parameter"
// CHECK-DAG: ortc.global @bias : tensor<4xf32> {kind = "parameter"
// CHECK-DAG: ortc.global @mask : tensor<4x4xf32> {kind = "constant"
// CHECK-DAG: ortc.global @rm : tensor<4xf32> {kind = "buffer"
// CHECK-DAG: ortc.global @rv : tensor<4xf32> {kind = "buffer"
// CHECK-LABEL: func.func @eval_step
// CHECK: ortc.batch_norm_infer
// CHECK-NOT: ortc.batch_norm_train
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: {ortc.name = "bias", ortc.role = "parameter"}
// CHECK-SAME: {ortc.name = "rm", ortc.role = "buffer"}
// CHECK-SAME: {ortc.name = "rv", ortc.role = "buffer"}
// CHECK-SAME: {ortc.name = "w", ortc.role = "parameter"}
// CHECK-SAME: -> (tensor<f32> {ortc.name = "loss", ortc.role = "loss"}, tensor<4xf32> {ortc.name = "bias", ortc.role = "gradient"}, tensor<4x4xf32> {ortc.name = "w", ortc.role = "gradient"}, tensor<4xf32> {ortc.name = "rm", ortc.role = "buffer", ortc.tied = {{[0-9]+}} : i64}, tensor<4xf32> {ortc.name = "rv", ortc.role = "buffer", ortc.tied = {{[0-9]+}} : i64})
// CHECK: ortc.batch_norm_grad
// The two uses of @w each contribute a gradient, summed:
// CHECK: %[[G1:.*]] = ortc.matmul {{.*}}trans_a = true
// CHECK: %[[G2:.*]] = ortc.matmul {{.*}}trans_a = true
// CHECK: ortc.add %[[G1]], %[[G2]]
// Running variance update uses the unbiased batch variance (n/(n-1) = 2):
// CHECK: ortc.scale %{{.*}} {factor = 2.000000e+00 : f64, ortc.stage = "backward"}

// FROZEN-DAG: ortc.global @bias : tensor<4xf32> {kind = "frozen"
// FROZEN-LABEL: func.func @train_step
// FROZEN-NOT: ortc.name = "bias", ortc.role = "gradient"

// --sync-batchnorm: the training step's BatchNorm and its gradient use every rank's batch;
// the running variance's unbiased factor counts the ranks with an all-reduce of 1; the
// eval step reads the running statistics as before.
// SYNC-LABEL: func.func @eval_step
// SYNC: ortc.batch_norm_infer
// SYNC-LABEL: func.func @train_step
// SYNC: ortc.batch_norm_train {{.*}}sync}
// SYNC: ortc.batch_norm_grad {{.*}}sync}
// SYNC: ortc.all_reduce %{{.*}} {{{.*}}reduction = "sum"} : tensor<f32>
