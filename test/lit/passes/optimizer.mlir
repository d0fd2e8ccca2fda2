// RUN: ortc-opt --ortc-autodiff --ortc-optimizer="optimizer=sgd momentum=0.9 weight-decay=0.01" %s | FileCheck %s --check-prefix=SGD
// RUN: ortc-opt --ortc-autodiff --ortc-optimizer="optimizer=adamw clip-grad-norm=1.0" %s | FileCheck %s --check-prefix=ADAMW
// RUN: ortc-opt --ortc-autodiff --ortc-optimizer %s | FileCheck %s --check-prefix=PLAIN

ortc.global @w : tensor<3xf32> {kind = "weight", onnx_name = "w"}
func.func @forward(%x: tensor<3xf32> {ortc.name = "x"}) -> (tensor<f32> {ortc.name = "loss", ortc.role = "loss"}) {
  %w = ortc.weight @w : tensor<3xf32>
  %p = ortc.mul %x, %w : tensor<3xf32>
  %s = ortc.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<3xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// The learning rate is a run-time scalar, the step count and momentum are state tied to
// results, and every update is gated by the finite flag.
// SGD-DAG: ortc.global @step : tensor<i64> {kind = "state"
// SGD-DAG: ortc.global @w.momentum_buffer : tensor<3xf32> {kind = "state"
// SGD-LABEL: func.func @train_step
// SGD-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {ortc.name = "lr", ortc.role = "scalar"}
// SGD-SAME: {ortc.name = "step", ortc.role = "state"}
// SGD-SAME: tensor<i1> {ortc.name = "finite", ortc.role = "output"}
// SGD-SAME: tensor<2xi1> {ortc.name = "finite_each", ortc.role = "output"}
// SGD-SAME: {ortc.name = "w", ortc.role = "parameter", ortc.tied =
// SGD-SAME: {ortc.name = "w.momentum_buffer", ortc.role = "state", ortc.tied =
// SGD-SAME: {ortc.name = "step", ortc.role = "state", ortc.tied =
// SGD-SAME: ortc.finite_checks = ["loss", "w"]
// SGD: %[[OK:.*]], %{{.*}} = ortc.all_finite
// SGD: ortc.sgd_update {{.*}} lr %[[LR]] step %{{.*}} apply %[[OK]] {dampening = 0.000000e+00 : f64, momentum = 9.000000e-01 : f64, nesterov = false, ortc.stage = "optimizer", weight_decay = 1.000000e-02 : f64}
// SGD: ortc.select %[[OK]]

// ADAMW-DAG: ortc.global @w.exp_avg : tensor<3xf32> {kind = "state"
// ADAMW-DAG: ortc.global @w.exp_avg_sq : tensor<3xf32> {kind = "state"
// AdamW's settings are run-time scalars whose defaults are the pass options.
// ADAMW: %[[B1:[^:]*]]: tensor<f32> {ortc.default = 9.000000e-01 : f64, ortc.name = "beta1", ortc.role = "scalar"}, %[[B2:[^:]*]]: tensor<f32> {ortc.default = 0.99899999999999999 : f64, ortc.name = "beta2", ortc.role = "scalar"}, %[[EPS:[^:]*]]: tensor<f32> {ortc.default = 1.000000e-08 : f64, ortc.name = "eps", ortc.role = "scalar"}, %[[WD:[^:]*]]: tensor<f32> {ortc.default = 1.000000e-02 : f64, ortc.name = "weight_decay", ortc.role = "scalar"}
// ADAMW: ortc.sqrt
// ADAMW: ortc.min
// ADAMW: ortc.adamw_update {{.*}} betas %[[B1]], %[[B2]] eps %[[EPS]] weight_decay %[[WD]] {ortc.stage = "optimizer"}
// PLAIN: ortc.sgd_update %{{.*}}, %{{.*}} lr
// PLAIN-NOT: momentum_buffer
