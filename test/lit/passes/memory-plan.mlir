// RUN: ortc-opt --ortc-memory-plan %s | FileCheck %s

// Intermediates get arena offsets; an elementwise op whose operand dies reuses its slot
// (in place); a reshape is a view; the loss, used only by the return, is written straight
// into its output tensor; the value returned straight into a tied result is
// written in place into the argument's tensor (-1), after every other reader of it.
func.func @train_step(%x: tensor<16xf32> {ortc.name = "x"},
                      %p: tensor<16xf32> {ortc.name = "p", ortc.role = "parameter"})
    -> (tensor<f32> {ortc.name = "loss", ortc.role = "loss"},
        tensor<16xf32> {ortc.name = "p", ortc.role = "parameter", ortc.tied = 1 : i64}) {
  %a = ortc.mul %x, %p : tensor<16xf32>
  %b = ortc.exp %a : tensor<16xf32>
  %r = ortc.reshape %b : tensor<16xf32> -> tensor<4x4xf32>
  %s = ortc.reduce_sum %r {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x4xf32> -> tensor<f32>
  %n = ortc.sub %p, %b : tensor<16xf32>
  return %s, %n : tensor<f32>, tensor<16xf32>
}
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: ortc.arena_bytes = 64 : i64, ortc.arena_lower_bound = 64 : i64
// CHECK: ortc.mul {{.*}}ortc.arena_offsets = array<i64: 0>
// CHECK: ortc.exp {{.*}}ortc.arena_offsets = array<i64: 0>
// CHECK: ortc.reshape {{.*}}ortc.arena_offsets = array<i64: -1>
// CHECK: ortc.reduce_sum {{.*}}ortc.arena_offsets = array<i64: -1>
// CHECK: ortc.sub {{.*}}ortc.arena_offsets = array<i64: -1>

// In place needs the same bytes, not only the same aligned slot: an f32 select over a
// dying i64 operand (8 and 4 bytes an element, both one 64-byte slot) gets a slot of its
// own, else element j's i64 would be overwritten by element j/2's float before it is read.
func.func @eval_step(%x: tensor<4x3xf32> {ortc.name = "x"},
                     %l: tensor<4xi64> {ortc.name = "labels", ortc.role = "input"})
    -> (tensor<f32> {ortc.name = "correct", ortc.role = "output"}) {
  %p = ortc.argmax %x {axis = 1 : i64, keepdims = false} : tensor<4x3xf32> -> tensor<4xi64>
  %h = ortc.equal %p, %l : tensor<4xi64> -> tensor<4xi1>
  %one = ortc.constant dense<1.0> : tensor<4xf32>
  %zero = ortc.constant dense<0.0> : tensor<4xf32>
  %k = ortc.select %h, %one, %zero : tensor<4xi1>, tensor<4xf32>
  %c = ortc.reduce_sum %k {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %c : tensor<f32>
}
// CHECK-LABEL: func.func @eval_step
// CHECK-SAME: ortc.arena_bytes = 128
// CHECK: ortc.argmax {{.*}}ortc.arena_offsets = array<i64: 0>
// CHECK: ortc.equal {{.*}}ortc.arena_offsets = array<i64: 64>
// CHECK: ortc.select {{.*}}ortc.arena_offsets = array<i64: 0>

// The gradient of cross-entropy (RowInPlace: each row of the logits read whole before it
// is written) writes dlogits over the logits when they die at it; not over the logits
// a later op still reads.
func.func @loss_grad(%x: tensor<4x8xf32> {ortc.name = "x"},
                     %l: tensor<4xi64> {ortc.name = "labels", ortc.role = "input"},
                     %d: tensor<f32> {ortc.name = "dloss"})
    -> (tensor<8x8xf32> {ortc.name = "g"}, tensor<4x8xf32> {ortc.name = "h"}) {
  %z = ortc.exp %x : tensor<4x8xf32>
  %g = ortc.softmax_cross_entropy_grad %z, %l, %d : (tensor<4x8xf32>, tensor<4xi64>, tensor<f32>) -> tensor<4x8xf32>
  %w = ortc.matmul %g, %g {trans_a = true} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<8x8xf32>
  %y = ortc.exp %x : tensor<4x8xf32>
  %g2 = ortc.softmax_cross_entropy_grad %y, %l, %d : (tensor<4x8xf32>, tensor<4xi64>, tensor<f32>) -> tensor<4x8xf32>
  %h = ortc.add %g2, %y : tensor<4x8xf32>
  return %w, %h : tensor<8x8xf32>, tensor<4x8xf32>
}
// CHECK-LABEL: func.func @loss_grad
// CHECK: %[[Z:.*]] = ortc.exp %arg0 {ortc.arena_offsets = array<i64: [[ZO:[0-9]+]]>}
// CHECK: ortc.softmax_cross_entropy_grad %[[Z]], {{.*}}ortc.arena_offsets = array<i64: [[ZO]]>}
// CHECK: %[[Y:.*]] = ortc.exp %arg0 {ortc.arena_offsets = array<i64: 0>}
// CHECK: ortc.softmax_cross_entropy_grad %[[Y]], {{.*}}ortc.arena_offsets = array<i64: 128>}
