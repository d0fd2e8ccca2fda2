// RUN: ortc-opt --canonicalize %s | FileCheck %s

// The gradients of a Split (q, k, v): slice grads whose boxes abut along one dim and
// agree on the others add up to one concat, in box order whatever the order of the
// adds; a slice grad covering its whole result is its dy.
// CHECK-LABEL: func.func @split_grads
func.func @split_grads(%a: tensor<2x4x4xf32>, %b: tensor<2x4x4xf32>, %c: tensor<2x4x4xf32>)
    -> tensor<2x4x12xf32> {
  // CHECK-NEXT: %[[C:.*]] = ortc.concat %arg0, %arg1, %arg2 {axis = 2 : i64} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x12xf32>
  // CHECK-NEXT: return %[[C]]
  %ga = ortc.slice_grad %a {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x4x4xf32> -> tensor<2x4x12xf32>
  %gb = ortc.slice_grad %b {starts = array<i64: 0, 0, 4>, steps = array<i64: 1, 1, 1>} : tensor<2x4x4xf32> -> tensor<2x4x12xf32>
  %gc = ortc.slice_grad %c {starts = array<i64: 0, 0, 8>, steps = array<i64: 1, 1, 1>} : tensor<2x4x4xf32> -> tensor<2x4x12xf32>
  %s = ortc.add %gb, %ga : tensor<2x4x12xf32>
  %t = ortc.add %gc, %s : tensor<2x4x12xf32>
  return %t : tensor<2x4x12xf32>
}

// Two abutting pieces of three: one slice grad of their concat at the first's start.
// CHECK-LABEL: func.func @partial
func.func @partial(%a: tensor<3x2xf32>, %b: tensor<3x2xf32>) -> tensor<3x6xf32> {
  // CHECK-NEXT: %[[C:.*]] = ortc.concat %arg0, %arg1 {axis = 1 : i64}
  // CHECK-NEXT: %[[G:.*]] = ortc.slice_grad %[[C]] {starts = array<i64: 0, 2>, steps = array<i64: 1, 1>} : tensor<3x4xf32> -> tensor<3x6xf32>
  // CHECK-NEXT: return %[[G]]
  %ga = ortc.slice_grad %a {starts = array<i64: 0, 2>, steps = array<i64: 1, 1>} : tensor<3x2xf32> -> tensor<3x6xf32>
  %gb = ortc.slice_grad %b {starts = array<i64: 0, 4>, steps = array<i64: 1, 1>} : tensor<3x2xf32> -> tensor<3x6xf32>
  %s = ortc.add %ga, %gb : tensor<3x6xf32>
  return %s : tensor<3x6xf32>
}

// Left alone: a gap between the boxes, boxes that differ in two dims, a strided
// slice grad, and a slice grad with another user.
// CHECK-LABEL: func.func @kept
func.func @kept(%a: tensor<3x2xf32>, %b: tensor<3x2xf32>, %c: tensor<2x2xf32>, %d: tensor<3x3xf32>)
    -> (tensor<3x6xf32>, tensor<3x6xf32>, tensor<3x6xf32>, tensor<3x6xf32>, tensor<3x6xf32>) {
  // CHECK-NOT: ortc.concat
  // CHECK-COUNT-4: ortc.add
  // CHECK-NOT: ortc.concat
  %ga = ortc.slice_grad %a {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<3x2xf32> -> tensor<3x6xf32>
  %gb = ortc.slice_grad %b {starts = array<i64: 0, 4>, steps = array<i64: 1, 1>} : tensor<3x2xf32> -> tensor<3x6xf32>
  %gap = ortc.add %ga, %gb : tensor<3x6xf32>
  %ga2 = ortc.slice_grad %a {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<3x2xf32> -> tensor<3x6xf32>
  %gc = ortc.slice_grad %c {starts = array<i64: 1, 2>, steps = array<i64: 1, 1>} : tensor<2x2xf32> -> tensor<3x6xf32>
  %two = ortc.add %ga2, %gc : tensor<3x6xf32>
  %ga3 = ortc.slice_grad %a {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<3x2xf32> -> tensor<3x6xf32>
  %gd = ortc.slice_grad %d {starts = array<i64: 0, 1>, steps = array<i64: 1, 2>} : tensor<3x3xf32> -> tensor<3x6xf32>
  %strided = ortc.add %ga3, %gd : tensor<3x6xf32>
  %ga4 = ortc.slice_grad %a {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<3x2xf32> -> tensor<3x6xf32>
  %gb4 = ortc.slice_grad %b {starts = array<i64: 0, 2>, steps = array<i64: 1, 1>} : tensor<3x2xf32> -> tensor<3x6xf32>
  %shared = ortc.add %ga4, %gb4 : tensor<3x6xf32>
  return %gap, %two, %strided, %shared, %gb4 : tensor<3x6xf32>, tensor<3x6xf32>, tensor<3x6xf32>, tensor<3x6xf32>, tensor<3x6xf32>
}
