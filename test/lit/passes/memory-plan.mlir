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
