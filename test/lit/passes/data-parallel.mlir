// RUN: ortc-opt --ortc-autodiff --ortc-optimizer="data-parallel=1 clip-grad-norm=1.0" %s | FileCheck %s --check-prefix=ONE
// RUN: ortc-opt --ortc-autodiff --ortc-optimizer="data-parallel=1 bucket-bytes=16" %s | FileCheck %s --check-prefix=SMALL
// RUN: ortc-opt --ortc-autodiff --ortc-optimizer="data-parallel=1 grad-accum=1" %s | FileCheck %s --check-prefix=ACCUM
// RUN: ortc-opt --ortc-autodiff --ortc-optimizer="data-parallel=1 zero=1 ranks=4 optimizer=adamw clip-grad-norm=1.0" %s | FileCheck %s --check-prefix=ZERO
// RUN: not ortc-opt --ortc-autodiff --ortc-optimizer="data-parallel=1 bucket-bytes=0" %s 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not ortc-opt --ortc-autodiff --ortc-optimizer="zero=1 ranks=2" %s 2>&1 | FileCheck %s --check-prefix=BADZERO

ortc.global @w1 : tensor<3xf32> {kind = "weight", onnx_name = "w1"}
ortc.global @w2 : tensor<3xf32> {kind = "weight", onnx_name = "w2"}
func.func @forward(%x: tensor<3xf32> {ortc.name = "x"}) -> (tensor<f32> {ortc.name = "loss", ortc.role = "loss"}) {
  %w1 = ortc.weight @w1 : tensor<3xf32>
  %w2 = ortc.weight @w2 : tensor<3xf32>
  %h = ortc.mul %x, %w1 : tensor<3xf32>
  %p = ortc.mul %h, %w2 : tensor<3xf32>
  %s = ortc.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<3xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// One bucket (25 MiB) holds the loss and both gradients: flattened, concatenated,
// averaged by one all_reduce and sliced back, before the finite check and the global
// norm, so every rank checks, clips and updates alike.
// ONE-LABEL: func.func @train_step
// ONE-SAME: ortc.all_reduce_buckets = 1 : i64
// ONE: %[[CAT:.*]] = ortc.concat {{.*}} : (tensor<1xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<7xf32>
// (reduction = "mean" is the default, so the printer leaves it out.)
// ONE: %[[AVG:.*]] = ortc.all_reduce %[[CAT]] {ortc.stage = "optimizer"} : tensor<7xf32>
// ONE-DAG: ortc.slice %[[AVG]] {{.*}}sizes = array<i64: 1>, starts = array<i64: 0>
// ONE-DAG: ortc.slice %[[AVG]] {{.*}}sizes = array<i64: 3>, starts = array<i64: 1>
// ONE-DAG: ortc.slice %[[AVG]] {{.*}}sizes = array<i64: 3>, starts = array<i64: 4>
// ONE: ortc.all_finite
// ONE: ortc.sqrt
// ONE-NOT: ortc.all_reduce

// Buckets of 16 bytes: the loss and w2's gradient (the backward's first) share one, w1's
// gradient (12 bytes) is the next.
// SMALL-LABEL: func.func @train_step
// SMALL-SAME: ortc.all_reduce_buckets = 2 : i64
// SMALL: ortc.all_reduce %{{.*}} : tensor<4xf32>
// SMALL: ortc.all_reduce %{{.*}} : tensor<3xf32>
// SMALL: ortc.all_finite

// With accumulation the ranks talk once per optimizer step, after the accumulated
// gradients joined; accumulate_step averages its loss only (for the log).
// ACCUM-LABEL: func.func @train_step
// ACCUM: ortc.add
// ACCUM: ortc.all_reduce
// ACCUM: ortc.all_finite
// ACCUM-LABEL: func.func @accumulate_step
// ACCUM: ortc.all_reduce %{{.*}} : tensor<f32>
// ACCUM-NOT: ortc.all_reduce

// BAD: bucket-bytes must be positive, got 0
// BADZERO: zero=1 needs data-parallel, zero=1 and ranks >= 1 (ranks=2)

// ZeRO-1 over 4 ranks: the AdamW moments are one flat shard of ceil(6 / 4) = 2 elements
// per rank; the loss is averaged, the local finite flags and-ed over the ranks, the
// gradients (padded to 8) reduce-scattered, the norm summed over the ranks' shards; the
// rank updates its shard of the flattened parameters and all ranks gather them.
// ZERO-DAG: ortc.global @zero1.exp_avg : tensor<2xf32> {kind = "state"
// ZERO-DAG: ortc.global @zero1.exp_avg_sq : tensor<2xf32> {kind = "state"
// ZERO-LABEL: func.func @train_step
// ZERO-SAME: ortc.finite_checks = ["loss", "w1", "w2"], ortc.zero_ranks = 4 : i64
// ZERO: ortc.all_reduce %{{.*}} : tensor<f32>
// ZERO: %[[OK:.*]], %[[EACH:.*]] = ortc.all_finite
// ZERO: ortc.all_reduce %{{.*}} {{{.*}}reduction = "min"} : tensor<4xi1>
// ZERO: ortc.reduce_scatter %{{.*}} {{{.*}}ranks = 4 : i64} : tensor<8xf32> -> tensor<2xf32>
// ZERO: ortc.all_reduce %{{.*}} {{{.*}}reduction = "sum"} : tensor<f32>
// ZERO: %[[MINE:.*]] = ortc.rank_shard %{{.*}} {{{.*}}ranks = 4 : i64} : tensor<8xf32> -> tensor<2xf32>
// ZERO: %[[NEW:.*]], %{{.*}}, %{{.*}} = ortc.adamw_update %[[MINE]]
// ZERO: ortc.all_gather %[[NEW]] {{{.*}}ranks = 4 : i64} : tensor<2xf32> -> tensor<8xf32>
