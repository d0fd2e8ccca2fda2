// RUN: ortc-opt --ortc-mixed-precision="dtype=bf16 accum=chunked16 accum-chunk=32" %s | FileCheck %s
// RUN: ortc-opt --ortc-mixed-precision="dtype=fp16 accum=plain16" %s | FileCheck %s --check-prefix=PLAIN
// RUN: ortc-opt --ortc-mixed-precision="dtype=bf16" %s | FileCheck %s --check-prefix=FP32
// RUN: not ortc-opt --ortc-mixed-precision="dtype=bf16 accum=int8" %s 2>&1 | FileCheck %s --check-prefix=BAD

// --accum-dtype: the ops that compute on 16-bit operands and sum (the GEMM, the sum over
// the batch of its rounded result) get ortc.accum; a max does not sum, a sum of float32
// values (the loss's input has no 16-bit operand) and the optimizer's sums keep float.
func.func @train_step(%x: tensor<4x8xf32> {ortc.name = "x"},
                      %w: tensor<3x8xf32> {ortc.name = "w", ortc.role = "parameter"})
    -> (tensor<3xf32> {ortc.name = "s", ortc.role = "output"},
        tensor<3xf32> {ortc.name = "mx", ortc.role = "output"},
        tensor<8xf32> {ortc.name = "sx", ortc.role = "output"},
        tensor<f32> {ortc.name = "n", ortc.role = "output"}) {
  %m = ortc.matmul %x, %w {ortc.stage = "forward", trans_b = true} : tensor<4x8xf32>, tensor<3x8xf32> -> tensor<4x3xf32>
  %t = ortc.tanh %m {ortc.stage = "forward"} : tensor<4x3xf32>
  %s = ortc.reduce_sum %t {axes = array<i64: 0>, keepdims = false, ortc.stage = "backward"} : tensor<4x3xf32> -> tensor<3xf32>
  %mx = ortc.reduce_max %t {axes = array<i64: 0>, keepdims = false, ortc.stage = "backward"} : tensor<4x3xf32> -> tensor<3xf32>
  %sx = ortc.reduce_sum %x {axes = array<i64: 0>, keepdims = false, ortc.stage = "backward"} : tensor<4x8xf32> -> tensor<8xf32>
  %n = ortc.reduce_sum %w {axes = array<i64: 0, 1>, keepdims = false, ortc.stage = "optimizer"} : tensor<3x8xf32> -> tensor<f32>
  return %s, %mx, %sx, %n : tensor<3xf32>, tensor<3xf32>, tensor<8xf32>, tensor<f32>
}
// CHECK-LABEL: func.func @train_step
// CHECK: ortc.matmul {{.*}}ortc.accum = {chunk = 32 : i64, type = bf16}
// CHECK: ortc.reduce_sum {{.*}}ortc.accum = {chunk = 32 : i64, type = bf16}{{.*}} : tensor<4x3xf32>
// CHECK-NOT: ortc.accum
// CHECK: return
// PLAIN: ortc.matmul {{.*}}ortc.accum = {chunk = 0 : i64, type = f16}
// PLAIN: ortc.reduce_sum {{.*}}ortc.accum = {chunk = 0 : i64, type = f16}
// PLAIN-NOT: ortc.accum
// FP32-NOT: ortc.accum
// BAD: accum must be fp32, chunked16 or plain16, not 'int8'
// RUN: ortc-opt --ortc-mixed-precision="dtype=bf16 accum=chunked16" %s | FileCheck %s --check-prefix=DEFAULT-BF16
// RUN: ortc-opt --ortc-mixed-precision="dtype=fp16 accum=chunked16" %s | FileCheck %s --check-prefix=DEFAULT-FP16
// The default chunk: 64 terms for float16 (the paper's), 16 for bfloat16.
// DEFAULT-BF16: ortc.matmul {{.*}}ortc.accum = {chunk = 16 : i64, type = bf16}
// DEFAULT-FP16: ortc.matmul {{.*}}ortc.accum = {chunk = 64 : i64, type = f16}
