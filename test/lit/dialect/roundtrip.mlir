// Every ortc op prints in a form that parses back to the same op: parse, print, parse,
// print, and check the second print.
//
// RUN: ortc-opt %s | ortc-opt | FileCheck %s
// The generic form round-trips too.
// RUN: ortc-opt %s -mlir-print-op-generic | ortc-opt | FileCheck %s

// CHECK: ortc.global @w : tensor<4x3xf32> {kind = "weight", onnx_name = "w"}
// CHECK-NEXT: ortc.global @p : tensor<4x3xf32> {kind = "parameter", onnx_name = "p.weight"}
// CHECK-NEXT: ortc.global @rm : tensor<3xf32> {kind = "buffer", onnx_name = "rm"}
// CHECK-NEXT: ortc.global @fz : tensor<3xf32> {kind = "frozen", onnx_name = "fz"}
// CHECK-NEXT: ortc.global @k : tensor<2xi64> {kind = "constant", onnx_name = "k"}
// CHECK-NEXT: ortc.global @m : tensor<4x3xf32> {kind = "state", onnx_name = "m"}
ortc.global @w : tensor<4x3xf32> {kind = "weight", onnx_name = "w"}
ortc.global @p : tensor<4x3xf32> {kind = "parameter", onnx_name = "p.weight"}
ortc.global @rm : tensor<3xf32> {kind = "buffer", onnx_name = "rm"}
ortc.global @fz : tensor<3xf32> {kind = "frozen", onnx_name = "fz"}
ortc.global @k : tensor<2xi64> {kind = "constant", onnx_name = "k"}
ortc.global @m : tensor<4x3xf32> {kind = "state", onnx_name = "m"}

// CHECK-LABEL: func.func @elementwise(
// CHECK-SAME: %[[X:[^ ,:]+]]: tensor<2x3xf32>, %[[Y:[^ ,:]+]]: tensor<2x3xf32>, %[[C:[^ ,:]+]]: tensor<2x3xi1>)
func.func @elementwise(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>, %c: tensor<2x3xi1>) -> tensor<2x3xf32> {
  // CHECK: ortc.constant dense<{{\[}}[1.000000e+00, 2.000000e+00, 3.000000e+00], [4.000000e+00, 5.000000e+00, 6.000000e+00]]> : tensor<2x3xf32>
  %k = ortc.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  // CHECK: ortc.neg %[[X]] : tensor<2x3xf32>
  // CHECK: ortc.exp %[[X]] : tensor<2x3xf32>
  // CHECK: ortc.log %[[X]] : tensor<2x3xf32>
  // CHECK: ortc.sqrt %[[X]] : tensor<2x3xf32>
  // CHECK: ortc.erf %[[X]] : tensor<2x3xf32>
  // CHECK: ortc.tanh %[[X]] : tensor<2x3xf32>
  // CHECK: ortc.sigmoid %[[X]] : tensor<2x3xf32>
  // CHECK: ortc.relu %[[X]] : tensor<2x3xf32>
  // CHECK: ortc.abs %[[X]] : tensor<2x3xf32>
  // CHECK: ortc.not %[[C]] : tensor<2x3xi1>
  // CHECK: ortc.gelu %[[X]] : tensor<2x3xf32>
  // CHECK: ortc.gelu %[[X]] {tanh = true} : tensor<2x3xf32>
  // CHECK: ortc.gelu_grad %[[X]], %[[Y]] {tanh = true} : tensor<2x3xf32>
  // CHECK: ortc.clip %[[X]] {max = 6.000000e+00 : f64, min = 0.000000e+00 : f64} : tensor<2x3xf32>
  // CHECK: ortc.clip %[[X]] {min = -1.000000e+00 : f64} : tensor<2x3xf32>
  // CHECK: ortc.cast %[[X]] : tensor<2x3xf32> -> tensor<2x3xbf16>
  %0 = ortc.neg %x : tensor<2x3xf32>
  %1 = ortc.exp %x : tensor<2x3xf32>
  %2 = ortc.log %x : tensor<2x3xf32>
  %3 = ortc.sqrt %x : tensor<2x3xf32>
  %4 = ortc.erf %x : tensor<2x3xf32>
  %5 = ortc.tanh %x : tensor<2x3xf32>
  %6 = ortc.sigmoid %x : tensor<2x3xf32>
  %7 = ortc.relu %x : tensor<2x3xf32>
  %8 = ortc.abs %x : tensor<2x3xf32>
  %9 = ortc.not %c : tensor<2x3xi1>
  %10 = ortc.gelu %x : tensor<2x3xf32>
  %11 = ortc.gelu %x {tanh = true} : tensor<2x3xf32>
  %12 = ortc.gelu_grad %x, %y {tanh = true} : tensor<2x3xf32>
  %13 = ortc.clip %x {min = 0.0 : f64, max = 6.0 : f64} : tensor<2x3xf32>
  %14 = ortc.clip %x {min = -1.0 : f64} : tensor<2x3xf32>
  %15 = ortc.cast %x : tensor<2x3xf32> -> tensor<2x3xbf16>
  // CHECK: ortc.add %[[X]], %[[Y]] : tensor<2x3xf32>
  // CHECK: ortc.sub %[[X]], %[[Y]] : tensor<2x3xf32>
  // CHECK: ortc.mul %[[X]], %[[Y]] : tensor<2x3xf32>
  // CHECK: ortc.div %[[X]], %[[Y]] : tensor<2x3xf32>
  // CHECK: ortc.pow %[[X]], %[[Y]] : tensor<2x3xf32>
  // CHECK: ortc.min %[[X]], %[[Y]] : tensor<2x3xf32>
  // CHECK: ortc.max %[[X]], %[[Y]] : tensor<2x3xf32>
  // CHECK: ortc.equal %[[X]], %[[Y]] : tensor<2x3xf32> -> tensor<2x3xi1>
  // CHECK: ortc.less %[[X]], %[[Y]] : tensor<2x3xf32> -> tensor<2x3xi1>
  // CHECK: %[[GT:[^ ,:]+]] = ortc.greater %[[X]], %[[Y]] : tensor<2x3xf32> -> tensor<2x3xi1>
  // CHECK: ortc.and %[[C]], %[[GT]] : tensor<2x3xi1> -> tensor<2x3xi1>
  // CHECK: %[[SEL:[^ ,:]+]] = ortc.select %[[GT]], %[[X]], %[[Y]] : tensor<2x3xi1>, tensor<2x3xf32>
  // CHECK: return %[[SEL]] : tensor<2x3xf32>
  %20 = ortc.add %x, %y : tensor<2x3xf32>
  %21 = ortc.sub %x, %y : tensor<2x3xf32>
  %22 = ortc.mul %x, %y : tensor<2x3xf32>
  %23 = ortc.div %x, %y : tensor<2x3xf32>
  %24 = ortc.pow %x, %y : tensor<2x3xf32>
  %25 = ortc.min %x, %y : tensor<2x3xf32>
  %26 = ortc.max %x, %y : tensor<2x3xf32>
  %27 = ortc.equal %x, %y : tensor<2x3xf32> -> tensor<2x3xi1>
  %28 = ortc.less %x, %y : tensor<2x3xf32> -> tensor<2x3xi1>
  %29 = ortc.greater %x, %y : tensor<2x3xf32> -> tensor<2x3xi1>
  %30 = ortc.and %c, %29 : tensor<2x3xi1> -> tensor<2x3xi1>
  %31 = ortc.select %29, %x, %y : tensor<2x3xi1>, tensor<2x3xf32>
  return %31 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @shapes(
// CHECK-SAME: %[[X:[^ ,:]+]]: tensor<2x3xf32>, %[[B:[^ ,:]+]]: tensor<3xf32>, %[[IDS:[^ ,:]+]]: tensor<5xi64>, %[[DY:[^ ,:]+]]: tensor<2x2xf32>)
func.func @shapes(%x: tensor<2x3xf32>, %b: tensor<3xf32>, %ids: tensor<5xi64>, %dy: tensor<2x2xf32>) -> tensor<4x3xf32> {
  // CHECK: %[[W:[^ ,:]+]] = ortc.weight @w : tensor<4x3xf32>
  // CHECK: ortc.broadcast_to %[[B]] : tensor<3xf32> -> tensor<4x2x3xf32>
  // CHECK: ortc.reshape %[[X]] : tensor<2x3xf32> -> tensor<3x2xf32>
  // CHECK: ortc.transpose %[[X]], [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
  // CHECK: ortc.concat %[[X]], %[[X]], %[[X]] {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x9xf32>
  // CHECK: ortc.slice %[[X]] {sizes = array<i64: 2, 2>, starts = array<i64: 0, 2>, steps = array<i64: 1, -2>} : tensor<2x3xf32> -> tensor<2x2xf32>
  // CHECK: ortc.slice_grad %[[DY]] {starts = array<i64: 0, 2>, steps = array<i64: 1, -2>} : tensor<2x2xf32> -> tensor<2x3xf32>
  // CHECK: ortc.pad %[[X]] {pads = array<i64: 1, 0, 0, -1>, value = 2.500000e-01 : f64} : tensor<2x3xf32> -> tensor<3x2xf32>
  // CHECK: ortc.pad %[[X]] {pads = array<i64: 0, 0, 0, 0>} : tensor<2x3xf32> -> tensor<2x3xf32>
  // CHECK: %[[G:[^ ,:]+]] = ortc.gather %[[W]], %[[IDS]] {axis = 0 : i64} : (tensor<4x3xf32>, tensor<5xi64>) -> tensor<5x3xf32>
  // CHECK: ortc.gather_grad %[[IDS]], %[[G]] {axis = 0 : i64} : (tensor<5xi64>, tensor<5x3xf32>) -> tensor<4x3xf32>
  // CHECK: ortc.reduce_sum %[[X]] {axes = array<i64: 1>, keepdims = false} : tensor<2x3xf32> -> tensor<2xf32>
  // CHECK: ortc.reduce_mean %[[X]] {axes = array<i64: 0, 1>} : tensor<2x3xf32> -> tensor<1x1xf32>
  // CHECK: ortc.reduce_max %[[X]] {axes = array<i64: 0>} : tensor<2x3xf32> -> tensor<1x3xf32>
  %w = ortc.weight @w : tensor<4x3xf32>
  %0 = ortc.broadcast_to %b : tensor<3xf32> -> tensor<4x2x3xf32>
  %1 = ortc.reshape %x : tensor<2x3xf32> -> tensor<3x2xf32>
  %2 = ortc.transpose %x, [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
  %3 = ortc.concat %x, %x, %x {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x9xf32>
  %4 = ortc.slice %x {starts = array<i64: 0, 2>, sizes = array<i64: 2, 2>, steps = array<i64: 1, -2>} : tensor<2x3xf32> -> tensor<2x2xf32>
  %5 = ortc.slice_grad %dy {starts = array<i64: 0, 2>, steps = array<i64: 1, -2>} : tensor<2x2xf32> -> tensor<2x3xf32>
  %6 = ortc.pad %x {pads = array<i64: 1, 0, 0, -1>, value = 0.25 : f64} : tensor<2x3xf32> -> tensor<3x2xf32>
  %7 = ortc.pad %x {pads = array<i64: 0, 0, 0, 0>} : tensor<2x3xf32> -> tensor<2x3xf32>
  %8 = ortc.gather %w, %ids {axis = 0 : i64} : (tensor<4x3xf32>, tensor<5xi64>) -> tensor<5x3xf32>
  %9 = ortc.gather_grad %ids, %8 {axis = 0 : i64} : (tensor<5xi64>, tensor<5x3xf32>) -> tensor<4x3xf32>
  %10 = ortc.reduce_sum %x {axes = array<i64: 1>, keepdims = false} : tensor<2x3xf32> -> tensor<2xf32>
  %11 = ortc.reduce_mean %x {axes = array<i64: 0, 1>} : tensor<2x3xf32> -> tensor<1x1xf32>
  %12 = ortc.reduce_max %x {axes = array<i64: 0>, keepdims = true} : tensor<2x3xf32> -> tensor<1x3xf32>
  return %9 : tensor<4x3xf32>
}

// CHECK-LABEL: func.func @nn(
// CHECK-SAME: %[[X:[^ ,:]+]]: tensor<1x2x5x5xf32>, %[[W:[^ ,:]+]]: tensor<4x2x3x3xf32>, %[[B:[^ ,:]+]]: tensor<4xf32>, %[[DY:[^ ,:]+]]: tensor<1x4x3x3xf32>, %[[S:[^ ,:]+]]: tensor<2xf32>, %[[T:[^ ,:]+]]: tensor<2x3x4xf32>, %[[LS:[^ ,:]+]]: tensor<4xf32>, %[[SEED:[^ ,:]+]]: tensor<i64>)
func.func @nn(%x: tensor<1x2x5x5xf32>, %w: tensor<4x2x3x3xf32>, %b: tensor<4xf32>, %dy: tensor<1x4x3x3xf32>,
              %s: tensor<2xf32>, %t: tensor<2x3x4xf32>, %ls: tensor<4xf32>, %seed: tensor<i64>) -> tensor<2x3x4xf32> {
  // CHECK: ortc.matmul %{{[^ ,]+}}, %{{[^ ,]+}} {trans_a = true, trans_b = true} : tensor<3x2xf32>, tensor<4x3xf32> -> tensor<2x4xf32>
  // CHECK: ortc.matmul %{{[^ ,]+}}, %{{[^ ,]+}} : tensor<5x2x3xf32>, tensor<5x3x4xf32> -> tensor<5x2x4xf32>
  // CHECK: ortc.conv %[[X]], %[[W]], %[[B]] {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x2x5x5xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>) -> tensor<1x4x3x3xf32>
  // CHECK: ortc.conv %[[X]], %[[W]] {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x5x5xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x3x3xf32>
  // CHECK: ortc.conv_grad_input %[[DY]], %[[W]] {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x4x3x3xf32>, tensor<4x2x3x3xf32>) -> tensor<1x2x5x5xf32>
  // CHECK: ortc.conv_grad_weight %[[DY]], %[[X]] {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x4x3x3xf32>, tensor<1x2x5x5xf32>) -> tensor<4x2x3x3xf32>
  // CHECK: %[[MP:[^ ,:]+]] = ortc.max_pool %[[X]] {ceil_mode = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x2x5x5xf32> -> tensor<1x2x3x3xf32>
  // CHECK: ortc.max_pool_grad %[[X]], %[[MP]] {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x2x5x5xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x5x5xf32>
  // CHECK: %[[AP:[^ ,:]+]] = ortc.avg_pool %[[X]] {count_include_pad = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x2x5x5xf32> -> tensor<1x2x5x5xf32>
  // CHECK: ortc.avg_pool_grad %[[AP]] {count_include_pad = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x2x5x5xf32> -> tensor<1x2x5x5xf32>
  %a = ortc.constant dense<1.0> : tensor<3x2xf32>
  %bw = ortc.constant dense<2.0> : tensor<4x3xf32>
  %ba = ortc.constant dense<1.0> : tensor<5x2x3xf32>
  %bb = ortc.constant dense<1.0> : tensor<5x3x4xf32>
  %0 = ortc.matmul %a, %bw {trans_a = true, trans_b = true} : tensor<3x2xf32>, tensor<4x3xf32> -> tensor<2x4xf32>
  %1 = ortc.matmul %ba, %bb : tensor<5x2x3xf32>, tensor<5x3x4xf32> -> tensor<5x2x4xf32>
  %2 = ortc.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x2x5x5xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>) -> tensor<1x4x3x3xf32>
  %3 = ortc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x2x5x5xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x3x3xf32>
  %4 = ortc.conv_grad_input %dy, %w {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x2x3x3xf32>) -> tensor<1x2x5x5xf32>
  %5 = ortc.conv_grad_weight %dy, %x {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<1x2x5x5xf32>) -> tensor<4x2x3x3xf32>
  %6 = ortc.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = true} : tensor<1x2x5x5xf32> -> tensor<1x2x3x3xf32>
  %7 = ortc.max_pool_grad %x, %6 {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x2x5x5xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x5x5xf32>
  %8 = ortc.avg_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, count_include_pad = true} : tensor<1x2x5x5xf32> -> tensor<1x2x5x5xf32>
  %9 = ortc.avg_pool_grad %8 {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, count_include_pad = true} : tensor<1x2x5x5xf32> -> tensor<1x2x5x5xf32>

  // Multi-result ops.
  // CHECK: %[[BY:[^ ,:]+]], %[[BM:[^ ,:]+]], %[[BV:[^ ,:]+]] = ortc.batch_norm_train %[[X]], %[[S]], %[[S]], %[[S]], %[[S]] {epsilon = 1.000000e-05 : f64, momentum = 9.000000e-01 : f64} : (tensor<1x2x5x5xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<1x2x5x5xf32>, tensor<2xf32>, tensor<2xf32>)
  // CHECK: %{{[^ ,]+}}, %{{[^ ,]+}}, %{{[^ ,]+}} = ortc.batch_norm_grad %[[X]], %[[S]], %[[BM]], %[[BV]], %[[BY]] {epsilon = 1.000000e-05 : f64} : (tensor<1x2x5x5xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<1x2x5x5xf32>) -> (tensor<1x2x5x5xf32>, tensor<2xf32>, tensor<2xf32>)
  // CHECK: ortc.batch_norm_infer %[[X]], %[[S]], %[[S]], %[[BM]], %[[BV]] {epsilon = 1.000000e-03 : f64} : (tensor<1x2x5x5xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x5x5xf32>
  // CHECK: %[[LY:[^ ,:]+]], %[[LM:[^ ,:]+]], %[[LI:[^ ,:]+]] = ortc.layer_norm %[[T]], %[[LS]], %[[LS]] {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  // CHECK: ortc.layer_norm %[[T]], %[[LS]] {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  // CHECK: ortc.layer_norm_grad %[[T]], %[[LS]], %[[LM]], %[[LI]], %[[LY]] {axis = 2 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)
  %y, %mean, %var = ortc.batch_norm_train %x, %s, %s, %s, %s {epsilon = 1.0e-5 : f64, momentum = 0.9 : f64} : (tensor<1x2x5x5xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<1x2x5x5xf32>, tensor<2xf32>, tensor<2xf32>)
  %dx, %ds, %db = ortc.batch_norm_grad %x, %s, %mean, %var, %y {epsilon = 1.0e-5 : f64} : (tensor<1x2x5x5xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<1x2x5x5xf32>) -> (tensor<1x2x5x5xf32>, tensor<2xf32>, tensor<2xf32>)
  %10 = ortc.batch_norm_infer %x, %s, %s, %mean, %var {epsilon = 1.0e-3 : f64} : (tensor<1x2x5x5xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x5x5xf32>
  %ly, %lm, %li = ortc.layer_norm %t, %ls, %ls {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  %ly2, %lm2, %li2 = ortc.layer_norm %t, %ls {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  %ldx, %lds, %ldb = ortc.layer_norm_grad %t, %ls, %lm, %li, %ly {axis = 2 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)

  // CHECK: %[[SM:[^ ,:]+]] = ortc.softmax %[[T]] {axis = 2 : i64} : tensor<2x3x4xf32>
  // CHECK: ortc.softmax_grad %[[SM]], %[[T]] {axis = 2 : i64} : tensor<2x3x4xf32>
  // CHECK: %[[LSM:[^ ,:]+]] = ortc.log_softmax %[[T]] {axis = 1 : i64} : tensor<2x3x4xf32>
  // CHECK: ortc.log_softmax_grad %[[LSM]], %[[T]] {axis = 1 : i64} : tensor<2x3x4xf32>
  // CHECK: %[[D:[^ ,:]+]] = ortc.dropout %[[T]], %[[SEED]] {key = 7 : i64, ratio = 1.000000e-01 : f64} : tensor<2x3x4xf32>, tensor<i64>
  // CHECK: %[[DG:[^ ,:]+]] = ortc.dropout_grad %[[D]], %[[SEED]] {key = 7 : i64, ratio = 1.000000e-01 : f64} : tensor<2x3x4xf32>, tensor<i64>
  // CHECK: return %[[DG]] : tensor<2x3x4xf32>
  %11 = ortc.softmax %t {axis = 2 : i64} : tensor<2x3x4xf32>
  %12 = ortc.softmax_grad %11, %t {axis = 2 : i64} : tensor<2x3x4xf32>
  %13 = ortc.log_softmax %t {axis = 1 : i64} : tensor<2x3x4xf32>
  %14 = ortc.log_softmax_grad %13, %t {axis = 1 : i64} : tensor<2x3x4xf32>
  %15 = ortc.dropout %t, %seed {ratio = 0.1 : f64, key = 7 : i64} : tensor<2x3x4xf32>, tensor<i64>
  %16 = ortc.dropout_grad %15, %seed {ratio = 0.1 : f64, key = 7 : i64} : tensor<2x3x4xf32>, tensor<i64>
  return %16 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @training(
// CHECK-SAME: %[[L:[^ ,:]+]]: tensor<8x5xf32>, %[[Y:[^ ,:]+]]: tensor<8xi64>, %[[LR:[^ ,:]+]]: tensor<f32>, %[[STEP:[^ ,:]+]]: tensor<i64>)
func.func @training(%logits: tensor<8x5xf32>, %labels: tensor<8xi64>, %lr: tensor<f32>, %step: tensor<i64>)
    -> (tensor<f32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>) {
  // CHECK: %[[LOSS:[^ ,:]+]] = ortc.softmax_cross_entropy %[[L]], %[[Y]] {ignore_index = -100 : i64, reduction = "sum"} : (tensor<8x5xf32>, tensor<8xi64>) -> tensor<f32>
  // CHECK: %[[LOSS2:[^ ,:]+]] = ortc.softmax_cross_entropy %[[L]], %[[Y]] : (tensor<8x5xf32>, tensor<8xi64>) -> tensor<f32>
  // CHECK: ortc.softmax_cross_entropy_grad %[[L]], %[[Y]], %[[LOSS]] {ignore_index = -100 : i64, reduction = "sum"} : (tensor<8x5xf32>, tensor<8xi64>, tensor<f32>) -> tensor<8x5xf32>
  %loss = ortc.softmax_cross_entropy %logits, %labels {ignore_index = -100 : i64, reduction = "sum"} : (tensor<8x5xf32>, tensor<8xi64>) -> tensor<f32>
  %loss2 = ortc.softmax_cross_entropy %logits, %labels : (tensor<8x5xf32>, tensor<8xi64>) -> tensor<f32>
  %dl = ortc.softmax_cross_entropy_grad %logits, %labels, %loss {ignore_index = -100 : i64, reduction = "sum"} : (tensor<8x5xf32>, tensor<8xi64>, tensor<f32>) -> tensor<8x5xf32>
  // CHECK: %[[P:[^ ,:]+]] = ortc.weight @p : tensor<4x3xf32>
  // CHECK: %[[M:[^ ,:]+]] = ortc.weight @m : tensor<4x3xf32>
  // CHECK: %[[OK:[^ ,:]+]], %{{[^ ,:]+}} = ortc.all_finite %[[L]], %[[P]] : tensor<8x5xf32>, tensor<4x3xf32> -> tensor<i1>, tensor<2xi1>
  // CHECK: %[[P1:[^ ,:]+]] = ortc.sgd_update %[[P]], %[[M]] lr %[[LR]] step %[[STEP]] apply %[[OK]] {dampening = 0.000000e+00 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<i64>, tensor<i1>) -> tensor<4x3xf32>
  // CHECK: %[[P2:[^ ,:]+]]:2 = ortc.sgd_update %[[P]], %[[M]], %[[M]] lr %[[LR]] step %[[STEP]] apply %[[OK]] {dampening = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, nesterov = true, weight_decay = 1.000000e-04 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<i64>, tensor<i1>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
  // CHECK: %[[NP:[^ ,:]+]], %{{[^ ,]+}}, %[[NV:[^ ,:]+]] = ortc.adamw_update %[[P]], %[[M]], %[[M]], %[[M]] lr %[[LR]] step %[[STEP]] apply %[[OK]] betas %[[LR]], %[[LR]] eps %[[LR]] weight_decay %[[LR]] : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<i64>, tensor<i1>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
  // CHECK: return %[[LOSS2]], %[[P1]], %[[P2]]#1, %[[NV]] :
  %p = ortc.weight @p : tensor<4x3xf32>
  %m = ortc.weight @m : tensor<4x3xf32>
  %ok, %each = ortc.all_finite %logits, %p : tensor<8x5xf32>, tensor<4x3xf32> -> tensor<i1>, tensor<2xi1>
  %p1 = ortc.sgd_update %p, %m lr %lr step %step apply %ok {momentum = 0.0 : f64, dampening = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<i64>, tensor<i1>) -> tensor<4x3xf32>
  %p2:2 = ortc.sgd_update %p, %m, %m lr %lr step %step apply %ok {momentum = 0.9 : f64, dampening = 0.1 : f64, nesterov = true, weight_decay = 1.0e-4 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<i64>, tensor<i1>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
  %np, %nm, %nv = ortc.adamw_update %p, %m, %m, %m lr %lr step %step apply %ok betas %lr, %lr eps %lr weight_decay %lr : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<i64>, tensor<i1>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
  return %loss2, %p1, %p2#1, %nv : tensor<f32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
}
