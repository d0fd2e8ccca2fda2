// RUN: ortc-opt --canonicalize %s | FileCheck %s

// A transpose of the last two dims feeding a matmul becomes the operand's trans flag
// (oneDNN/BLAS read the operand in place); a flag already set flips back; a transpose
// that moves a batch dim stays.
// CHECK-LABEL: func.func @fold
func.func @fold(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %w: tensor<3x8xf32>,
                %x: tensor<5x3xf32>, %y: tensor<4x2x8xf32>)
    -> (tensor<2x4x4xf32>, tensor<5x8xf32>, tensor<8x5xf32>, tensor<4x2x4xf32>) {
  // CHECK: %[[S:.*]] = ortc.matmul %arg0, %arg1 {trans_b = true} : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x4xf32>
  %kt = ortc.transpose %k, [0, 2, 1] : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  %s = ortc.matmul %q, %kt : tensor<2x4x8xf32>, tensor<2x8x4xf32> -> tensor<2x4x4xf32>
  // CHECK: %[[L:.*]] = ortc.matmul %arg3, %arg2 : tensor<5x3xf32>, tensor<3x8xf32> -> tensor<5x8xf32>
  %wt = ortc.transpose %w, [1, 0] : tensor<3x8xf32> -> tensor<8x3xf32>
  %l = ortc.matmul %x, %wt {trans_b = true} : tensor<5x3xf32>, tensor<8x3xf32> -> tensor<5x8xf32>
  // CHECK: %[[R:.*]] = ortc.matmul %arg2, %arg3 {trans_a = true, trans_b = true} : tensor<3x8xf32>, tensor<5x3xf32> -> tensor<8x5xf32>
  %r = ortc.matmul %wt, %x {trans_b = true} : tensor<8x3xf32>, tensor<5x3xf32> -> tensor<8x5xf32>
  // CHECK: %[[YT:.*]] = ortc.transpose %arg4, [1, 0, 2]
  // CHECK: ortc.matmul %[[YT]], %[[YT]] {trans_b = true}
  %yt = ortc.transpose %y, [1, 0, 2] : tensor<4x2x8xf32> -> tensor<2x4x8xf32>
  %b = ortc.matmul %yt, %yt {trans_b = true} : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x4xf32>
  %bb = ortc.transpose %b, [1, 0, 2] : tensor<2x4x4xf32> -> tensor<4x2x4xf32>
  return %s, %l, %r, %bb : tensor<2x4x4xf32>, tensor<5x8xf32>, tensor<8x5xf32>, tensor<4x2x4xf32>
}
