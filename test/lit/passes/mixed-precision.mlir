// RUN: ortc-opt --ortc-mixed-precision=dtype=bf16 %s | FileCheck %s
// RUN: ortc-opt --ortc-mixed-precision=dtype=fp16 %s | FileCheck %s --check-prefix=FP16

// A GEMM reads 16-bit copies of its operands directly, its sums and result float32
// (f32_result; the parameter's copy is made once per
// stage; the parameter itself stays float32 for the optimizer) and its result is
// stored in 16 bits after the bias add beside it (the bias is rounded as autocast
// rounds a Linear's bias); the scale by a constant follows (the constant is read as it is);
// the loss keeps float32, its kernel reading the 16-bit value (ReadsStoredFloats). Every
// other reader of a 16-bit value reads its own widened copy; the results of the step stay
// float32.
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
// CHECK-NEXT: %[[W16:.*]] = ortc.cast %arg2 {ortc.stage = "forward"} : tensor<3x8xf32> -> tensor<3x8xbf16>
// The GEMM's result is rounded once, after its bias add (as addmm).
// CHECK-NEXT: %[[M:.*]] = ortc.matmul %[[X16]], %[[W16]] {f32_result = true, {{.*}}} : tensor<4x8xbf16>, tensor<3x8xbf16> -> tensor<4x3xf32>
// CHECK-NEXT: %[[BB:.*]] = ortc.broadcast_to %arg3
// CHECK-NEXT: %[[BB16:.*]] = ortc.cast %[[BB]] {{.*}} -> tensor<4x3xbf16>
// CHECK-NEXT: %[[BB32:.*]] = ortc.cast %[[BB16]] {{.*}} -> tensor<4x3xf32>
// CHECK-NEXT: %[[Y:.*]] = ortc.add %[[M]], %[[BB32]]
// CHECK-NEXT: %[[Y16:.*]] = ortc.cast %[[Y]] {{.*}} -> tensor<4x3xbf16>
// CHECK-NEXT: %[[Y32:.*]] = ortc.cast %[[Y16]] {{.*}} -> tensor<4x3xf32>
// CHECK-NEXT: %[[H:.*]] = ortc.mul %[[Y32]], %[[C]]
// CHECK-NEXT: %[[H16:.*]] = ortc.cast %[[H]] {{.*}} -> tensor<4x3xbf16>
// CHECK-NEXT: ortc.softmax_cross_entropy %[[H16]], %arg1 {{.*}} : (tensor<4x3xbf16>, tensor<4xi64>) -> tensor<f32>
// The backward casts the weight again rather than keep the forward's copy, and the
// gradient of an activation (a backward GEMM reading a weight) stays float32.
// CHECK-NEXT: %[[WB16:.*]] = ortc.cast %arg2 {ortc.stage = "backward"} : tensor<3x8xf32> -> tensor<3x8xbf16>
// CHECK-NEXT: ortc.matmul %[[H16]], %[[WB16]] {f32_result = true, ortc.stage = "backward"}
// CHECK-NOT: ortc.cast
// The step input x is not a weight: the backward reads the forward's 16-bit copy of it.
// The weight's gradient is only rounded: the GEMM writes 16 bits (float sums, rounded).
// CHECK: %[[GW16:.*]] = ortc.matmul %[[H16]], %[[X16]] {ortc.stage = "backward", trans_a = true} : tensor<4x3xbf16>, tensor<4x8xbf16> -> tensor<3x8xbf16>
// The optimizer reads the float32 master weight and a widened gradient, and its
// elementwise ops keep float32.
// CHECK-NEXT: %[[GW32:.*]] = ortc.cast %[[GW16]] {ortc.stage = "optimizer"} : tensor<3x8xbf16> -> tensor<3x8xf32>
// CHECK-NEXT: %[[NW:.*]] = ortc.sub %arg2, %[[GW32]]
// CHECK-NEXT: %[[OUT:.*]] = ortc.cast %[[H16]] : tensor<4x3xbf16> -> tensor<4x3xf32>
// CHECK-NEXT: return %{{.*}}, %[[OUT]], %[[NW]] : tensor<f32>, tensor<4x3xf32>, tensor<3x8xf32>
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
// CHECK: %[[Y16:.*]] = ortc.matmul %[[N16]], %{{.*}} : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
// CHECK-NEXT: ortc.cast %[[Y16]] : tensor<4x8xbf16> -> tensor<4x8xf32>

// The ops of one ONNX node (one location) and stage keep float32 between them: a GELU
// written as three ops is rounded once, where its value leaves the node.
func.func @eval_step(%x: tensor<4x8xf32> {ortc.name = "x"},
                     %w: tensor<8x8xf32> {ortc.name = "w", ortc.role = "parameter"})
    -> (tensor<4x8xf32> {ortc.name = "y", ortc.role = "output"}) {
  %m = ortc.matmul %x, %w {ortc.stage = "forward"} : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32> loc("fc")
  %a = ortc.tanh %m {ortc.stage = "forward"} : tensor<4x8xf32> loc("act")
  %b = ortc.mul %a, %m {ortc.stage = "forward"} : tensor<4x8xf32> loc("act")
  %c = ortc.relu %b {ortc.stage = "forward"} : tensor<4x8xf32> loc("act")
  return %c : tensor<4x8xf32>
}
// CHECK-LABEL: func.func @eval_step
// CHECK: %[[M16:.*]] = ortc.matmul {{.*}} -> tensor<4x8xbf16>
// CHECK-NEXT: %[[M32:.*]] = ortc.cast %[[M16]]
// CHECK-NEXT: %[[A:.*]] = ortc.tanh %[[M32]]
// CHECK-NEXT: %[[M32B:.*]] = ortc.cast %[[M16]]
// CHECK-NEXT: %[[B:.*]] = ortc.mul %[[A]], %[[M32B]]
// CHECK-NEXT: %[[C:.*]] = ortc.relu %[[B]]
// CHECK-NEXT: %[[C16:.*]] = ortc.cast %[[C]] {{.*}} -> tensor<4x8xbf16>

// Cross-entropy's gradient reads the 16-bit logits and, its result being only rounded
// for the GEMMs that read it, writes 16-bit dlogits: no float32 logits or dlogits.
func.func @loss_grad(%h: tensor<4x3xf32> {ortc.name = "h"},
                     %l: tensor<4xi64> {ortc.name = "labels"},
                     %w: tensor<3x8xf32> {ortc.name = "w", ortc.role = "parameter"})
    -> (tensor<f32> {ortc.name = "loss", ortc.role = "loss"},
        tensor<3x8xf32> {ortc.name = "gw", ortc.role = "output"}) {
  %one = ortc.constant dense<1.0> : tensor<f32>
  %m = ortc.matmul %h, %w {ortc.stage = "forward"} : tensor<4x3xf32>, tensor<3x8xf32> -> tensor<4x8xf32>
  %loss = ortc.softmax_cross_entropy %m, %l {ortc.stage = "forward"} : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<f32>
  %d = ortc.softmax_cross_entropy_grad %m, %l, %one {ortc.stage = "backward"} : (tensor<4x8xf32>, tensor<4xi64>, tensor<f32>) -> tensor<4x8xf32>
  %gw = ortc.matmul %h, %d {ortc.stage = "backward", trans_a = true} : tensor<4x3xf32>, tensor<4x8xf32> -> tensor<3x8xf32>
  return %loss, %gw : tensor<f32>, tensor<3x8xf32>
}
// CHECK-LABEL: func.func @loss_grad
// CHECK: %[[L16:.*]] = ortc.matmul {{.*}} -> tensor<4x8xbf16>
// CHECK-NEXT: ortc.softmax_cross_entropy %[[L16]], %arg1 {{.*}} : (tensor<4x8xbf16>, tensor<4xi64>) -> tensor<f32>
// CHECK-NEXT: %[[D16:.*]] = ortc.softmax_cross_entropy_grad %[[L16]], %arg1, %{{.*}} {{.*}} : (tensor<4x8xbf16>, tensor<4xi64>, tensor<f32>) -> tensor<4x8xbf16>
// CHECK-NEXT: ortc.matmul %{{.*}}, %[[D16]] {{.*}} : tensor<4x3xbf16>, tensor<4x8xbf16> -> tensor<3x8xbf16>
// CHECK-NOT: -> tensor<4x8xf32>
// CHECK: return
