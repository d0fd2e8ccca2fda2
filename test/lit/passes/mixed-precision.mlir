// RUN: ortc-opt --ortc-mixed-precision=dtype=bf16 %s | FileCheck %s
// RUN: ortc-opt --ortc-mixed-precision=dtype=fp16 %s | FileCheck %s --check-prefix=FP16

// A GEMM reads 16-bit copies of its operands (the parameter's copy is made once per
// stage; the parameter itself stays float32 for the optimizer) and its result is
// stored in 16 bits; the bias add beside it follows (the bias is rounded as autocast
// rounds a Linear's bias), the scale by a constant too (the constant is read as it is);
// the loss keeps float32 and reads a widened copy of its own. Every reader of a 16-bit
// value reads its own widened copy; the results of the step stay float32.
func.func @train_step(%x: tensor<4x8xf32> {ortc.name = "x"},
                      %l: tensor<4xi64> {ortc.name = "labels"},
                      %w: tensor<3x8xf32> {ortc.name = "w", ortc.role = "parameter"},
                      %b: tensor<3xf32> {ortc.name = "b", ortc.role = "parameter"})
    -> (tensor<f32> {ortc.name = "loss", ortc.role = "loss"},
        tensor<4x3xf32> {ortc.name = "y", ortc.role = "output"},
        tensor<3x8xf32> {ortc.name = "w", ortc.role = "parameter", ortc.tied = 2 : i64}) {
  %c = ortc.constant dense<0.5> : tensor<4x3xf32>
  %m = ortc.matmul %x, %w {ortc.stage = "forward", trans_b = true} : tensor<4x8xf32>, tensor<3x8xf32> -> tensor<4x3xf32>
  %bb = ortc.broadcast_to %b {ortc.stage = "forward"} : tensor<3xf32> -> tensor<4x3xf32>
  %y = ortc.add %m, %bb {ortc.stage = "forward"} : tensor<4x3xf32>
  %h = ortc.mul %y, %c {ortc.stage = "forward"} : tensor<4x3xf32>
  %loss = ortc.softmax_cross_entropy %h, %l {ignore_index = -100 : i64, ortc.stage = "forward"} : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32>
  %g = ortc.matmul %h, %w {ortc.stage = "backward"} : tensor<4x3xf32>, tensor<3x8xf32> -> tensor<4x8xf32>
  %gw = ortc.matmul %h, %x {ortc.stage = "backward", trans_a = true} : tensor<4x3xf32>, tensor<4x8xf32> -> tensor<3x8xf32>
  %nw = ortc.sub %w, %gw {ortc.stage = "optimizer"} : tensor<3x8xf32>
  return %loss, %h, %nw : tensor<f32>, tensor<4x3xf32>, tensor<3x8xf32>
}
// CHECK-LABEL: func.func @train_step
// CHECK: %[[C:.*]] = ortc.constant dense<5.000000e-01> : tensor<4x3xf32>
// CHECK: %[[X16:.*]] = ortc.cast %arg0 {ortc.stage = "forward"} : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: %[[X32:.*]] = ortc.cast %[[X16]] {{.*}} -> tensor<4x8xf32>
// CHECK: %[[W16:.*]] = ortc.cast %arg2 {ortc.stage = "forward"} : tensor<3x8xf32> -> tensor<3x8xbf16>
// CHECK: %[[W32:.*]] = ortc.cast %[[W16]] {{.*}} -> tensor<3x8xf32>
// CHECK: %[[M:.*]] = ortc.matmul %[[X32]], %[[W32]]
// CHECK: %[[M16:.*]] = ortc.cast %[[M]] {{.*}} -> tensor<4x3xbf16>
// CHECK: %[[BB:.*]] = ortc.broadcast_to %arg3
// CHECK: %[[M32:.*]] = ortc.cast %[[M16]] {{.*}} -> tensor<4x3xf32>
// CHECK: %[[BB16:.*]] = ortc.cast %[[BB]] {{.*}} -> tensor<4x3xbf16>
// CHECK: %[[BB32:.*]] = ortc.cast %[[BB16]] {{.*}} -> tensor<4x3xf32>
// CHECK: %[[Y:.*]] = ortc.add %[[M32]], %[[BB32]]
// CHECK: %[[Y16:.*]] = ortc.cast %[[Y]] {{.*}} -> tensor<4x3xbf16>
// CHECK: %[[Y32:.*]] = ortc.cast %[[Y16]] {{.*}} -> tensor<4x3xf32>
// CHECK: %[[H:.*]] = ortc.mul %[[Y32]], %[[C]]
// CHECK: %[[H16:.*]] = ortc.cast %[[H]] {{.*}} -> tensor<4x3xbf16>
// CHECK: %[[H32:.*]] = ortc.cast %[[H16]] {{.*}} -> tensor<4x3xf32>
// CHECK: ortc.softmax_cross_entropy %[[H32]], %arg1
// The backward casts the weight again rather than keep the forward's copy.
// CHECK: ortc.cast %[[H16]] {ortc.stage = "backward"}
// CHECK: %[[WB16:.*]] = ortc.cast %arg2 {ortc.stage = "backward"} : tensor<3x8xf32> -> tensor<3x8xbf16>
// CHECK: %[[WB32:.*]] = ortc.cast %[[WB16]]
// CHECK: ortc.matmul %{{.*}}, %[[WB32]]
// CHECK: ortc.cast %[[H16]] {ortc.stage = "backward"}
// CHECK: ortc.cast %arg0 {ortc.stage = "backward"} : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: %[[GW:.*]] = ortc.matmul
// CHECK: %[[GW16:.*]] = ortc.cast %[[GW]] {{.*}} -> tensor<3x8xbf16>
// The optimizer reads the float32 master weight and a widened gradient, and its
// elementwise ops keep float32.
// CHECK: %[[GW32:.*]] = ortc.cast %[[GW16]] {ortc.stage = "optimizer"} : tensor<3x8xbf16> -> tensor<3x8xf32>
// CHECK: %[[NW:.*]] = ortc.sub %arg2, %[[GW32]]
// CHECK-NOT: ortc.cast %[[NW]]
// CHECK: %[[OUT:.*]] = ortc.cast %[[H16]] : tensor<4x3xbf16> -> tensor<4x3xf32>
// CHECK: return %{{.*}}, %[[OUT]], %[[NW]] : tensor<f32>, tensor<4x3xf32>, tensor<3x8xf32>
// FP16: ortc.cast %arg2 {ortc.stage = "forward"} : tensor<3x8xf32> -> tensor<3x8xf16>

// LayerNorm keeps float32 (its saved statistics too): its output is rounded only by the
// GEMM that reads it.
func.func @forward(%x: tensor<4x8xf32> {ortc.name = "x"},
                   %g: tensor<8xf32> {ortc.name = "g", ortc.role = "parameter"},
                   %w: tensor<8x8xf32> {ortc.name = "w", ortc.role = "parameter"})
    -> (tensor<4x8xf32> {ortc.name = "y", ortc.role = "output"}) {
  %n, %mean, %inv = ortc.layer_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  %y = ortc.matmul %n, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
// CHECK-LABEL: func.func @forward
// CHECK: %[[N:.*]], %{{.*}}, %{{.*}} = ortc.layer_norm %arg0, %arg1 {{.*}} -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
// CHECK: %[[N16:.*]] = ortc.cast %[[N]] : tensor<4x8xf32> -> tensor<4x8xbf16>
