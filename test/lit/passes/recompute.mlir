// RUN: ortc-opt --ortc-recompute="policy=selective plan=false" %s | FileCheck %s
// RUN: ortc-opt --ortc-recompute="policy=selective plan=false" --ortc-memory-plan %s | FileCheck %s --check-prefix=PLAN
// RUN: ortc-opt --ortc-recompute=policy=selective %s | FileCheck %s --check-prefix=KEEP
// RUN: ortc-opt --ortc-recompute=policy=none %s | FileCheck %s --check-prefix=NONE
// RUN: not ortc-opt --ortc-recompute=policy=all %s 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: ortc-opt --ortc-recompute=policy=budget=80%% %s | FileCheck %s --check-prefix=BUDGET
// RUN: ortc-opt --ortc-recompute=policy=budget=100%% %s | FileCheck %s --check-prefix=ALL
// RUN: not ortc-opt --ortc-recompute=policy=budget=100 %s 2>&1 | FileCheck %s --check-prefix=TIGHT

// A two-layer MLP's step. With plan=false selective takes every candidate: The backward reads x (step input), u = x*w1 (for gelu_grad),
// h = gelu(u) (for w2's gradient) and hd = dropout(h) (for w3's gradient):
//  - h is recomputed from u, which the backward keeps anyway;
//  - hd is recomputed from the clone of h (a chain) and the seed;
//  - e = exp(t) is recomputed through t = neg(hd), which the backward never reads (a
//    chain of cheap values that ends at values the backward keeps); as nothing in the
//    forward reads them, t and e then run in the backward only;
//  - u is not: its producer, a matmul, costs 32 operations per element (> cheap-flops);
//  - q = sigmoid(y) is not: y is read by the forward only and is a matmul's.
func.func @train_step(%x: tensor<4x16xf32> {ortc.name = "x"},
                      %w1: tensor<16x16xf32> {ortc.name = "w1", ortc.role = "parameter"},
                      %w2: tensor<16x16xf32> {ortc.name = "w2", ortc.role = "parameter"},
                      %seed: tensor<i64> {ortc.name = "seed"},
                      %dy: tensor<4x16xf32> {ortc.name = "dy"})
    -> (tensor<16x16xf32> {ortc.name = "dw1"}, tensor<16x16xf32> {ortc.name = "dw2"},
        tensor<4x16xf32> {ortc.name = "de"}, tensor<4x16xf32> {ortc.name = "dq"}) {
  %u = ortc.matmul %x, %w1 {ortc.stage = "forward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %h = ortc.gelu %u {ortc.stage = "forward"} : tensor<4x16xf32>
  %hd = ortc.dropout %h, %seed {key = 3 : i64, ratio = 5.000000e-01 : f64, ortc.stage = "forward"} : tensor<4x16xf32>, tensor<i64>
  %t = ortc.neg %hd {ortc.stage = "forward"} : tensor<4x16xf32>
  %e = ortc.exp %t {ortc.stage = "forward"} : tensor<4x16xf32>
  %y = ortc.matmul %hd, %w2 {ortc.stage = "forward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %q = ortc.sigmoid %y {ortc.stage = "forward"} : tensor<4x16xf32>
  %dw2 = ortc.matmul %hd, %dy {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  %dh = ortc.matmul %dy, %w2 {trans_b = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %dhh = ortc.mul %dh, %h {ortc.stage = "backward"} : tensor<4x16xf32>
  %du = ortc.gelu_grad %u, %dhh {ortc.stage = "backward"} : tensor<4x16xf32>
  %dw1 = ortc.matmul %x, %du {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  %de = ortc.mul %e, %dy {ortc.stage = "backward"} : tensor<4x16xf32>
  %dq = ortc.mul %q, %dy {ortc.stage = "backward"} : tensor<4x16xf32>
  return %dw1, %dw2, %de, %dq : tensor<16x16xf32>, tensor<16x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}
// CHECK-LABEL: func.func @train_step
// Forward: two 4x16x16 matmuls (2048 each) and five pointwise ops of 64 elements; the
// clones of gelu and dropout add 64 each (neg and exp only moved).
// CHECK-SAME: ortc.forward_flops = 4416 : i64, ortc.recompute_flops = 128 : i64, ortc.recomputed = 3 : i64
// CHECK: %[[U:.*]] = ortc.matmul %arg0, %arg1 {ortc.stage = "forward"}
// CHECK: %[[H:.*]] = ortc.gelu %[[U]] {ortc.stage = "forward"}
// CHECK: %[[HD:.*]] = ortc.dropout %[[H]], %arg3
// t and e move to the backward: nothing in the forward reads them.
// CHECK-NOT: ortc.neg
// CHECK: %[[Y:.*]] = ortc.matmul %[[HD]], %arg2
// CHECK: %[[Q:.*]] = ortc.sigmoid %[[Y]]
// The first backward reader of hd gets the clones of h and hd, right before it.
// CHECK: %[[H2:.*]] = ortc.gelu %[[U]] {ortc.recompute, ortc.stage = "forward"}
// CHECK: %[[HD2:.*]] = ortc.dropout %[[H2]], %arg3 {key = 3 : i64, ortc.recompute, ortc.stage = "forward", ratio = 5.000000e-01 : f64}
// CHECK: ortc.matmul %[[HD2]], %arg4 {ortc.stage = "backward", trans_a = true}
// CHECK: %[[DH:.*]] = ortc.matmul %arg4, %arg2
// CHECK: ortc.mul %[[DH]], %[[H2]]
// CHECK: ortc.gelu_grad %[[U]]
// CHECK: %[[T2:.*]] = ortc.neg %[[HD2]] {ortc.recompute, ortc.stage = "forward"}
// CHECK: %[[E2:.*]] = ortc.exp %[[T2]] {ortc.recompute, ortc.stage = "forward"}
// CHECK: ortc.mul %[[E2]], %arg4
// CHECK: ortc.mul %[[Q]], %arg4

// The planner keeps the clones in the backward: no earlier than the op before them in
// the pass's order (the forward's last matmul), though their operands are ready sooner.
// PLAN-LABEL: func.func @train_step
// PLAN-NOT: ortc.recompute,
// PLAN: ortc.matmul %{{.*}}, %arg2 {{{.*}}ortc.stage = "forward"}
// PLAN: ortc.gelu {{.*}}ortc.recompute
// PLAN: ortc.dropout {{.*}}ortc.recompute

// NONE-LABEL: func.func @train_step
// NONE-NOT: ortc.recompute

// BAD: unknown policy 'all' (none, selective, layers, budget=BYTES or budget=PCT%)

// A budget of 80% of the 1024-byte arena: recomputing h alone (the most bytes per
// operation) brings the planned arena to 512 bytes; nothing else is needed.
// BUDGET-LABEL: func.func @train_step
// BUDGET-SAME: ortc.recompute_budget = 819 : i64
// BUDGET-SAME: ortc.recompute_planned = 512 : i64, ortc.recompute_without = 1024 : i64, ortc.recomputed = 1 : i64
// BUDGET: ortc.gelu %{{.*}} {ortc.recompute, ortc.stage = "forward"}
// BUDGET-NOT: ortc.recompute,
// ALL-LABEL: func.func @train_step
// ALL-SAME: ortc.recomputed = 0 : i64
// TIGHT: cannot fit the budget of 100 bytes: the smallest one recompute reaches is 512 bytes (1024 without recompute)

// Planned (the default), selective keeps only the candidates that lower the arena: h alone
// (1024 -> 512 bytes), as the 80% budget below.
// KEEP-LABEL: func.func @train_step
// KEEP-SAME: ortc.recompute_planned = 512 : i64, ortc.recompute_without = 1024 : i64, ortc.recomputed = 1 : i64
// KEEP: ortc.gelu %{{.*}} {ortc.recompute, ortc.stage = "forward"}
// KEEP-NOT: ortc.recompute,

// No backward (an eval step): nothing to recompute, nothing recorded.
func.func @eval_step(%x: tensor<4xf32> {ortc.name = "x"}) -> (tensor<4xf32> {ortc.name = "y"}) {
  %a = ortc.exp %x {ortc.stage = "forward"} : tensor<4xf32>
  return %a : tensor<4xf32>
}
// CHECK-LABEL: func.func @eval_step
// CHECK-NOT: ortc.recompute
