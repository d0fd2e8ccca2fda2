// RUN: ortc-opt --ortc-attach-loss %s | FileCheck %s --check-prefix=CE
// RUN: ortc-opt --ortc-attach-loss="loss=mse labels=target" %s | FileCheck %s --check-prefix=MSE
// RUN: ortc-opt --ortc-attach-loss="ignore-index=7" %s | FileCheck %s --check-prefix=IGN
// RUN: ortc-opt --ortc-attach-loss="class-axis=1" %s | FileCheck %s --check-prefix=AXIS1
// RUN: ortc-opt --ortc-attach-loss="label-smoothing=0.1" %s | FileCheck %s --check-prefix=SMOOTH
// RUN: not ortc-opt --ortc-attach-loss="class-axis=3" %s 2>&1 | FileCheck %s --check-prefix=BADAXIS
// RUN: not ortc-opt --ortc-attach-loss="logits=nope" %s 2>&1 | FileCheck %s --check-prefix=BAD

ortc.global @w : tensor<8x5xf32> {kind = "weight", onnx_name = "w"}
func.func @forward(%x: tensor<2x3x8xf32> {ortc.name = "x"}) -> (tensor<2x3x5xf32> {ortc.name = "logits"}) {
  %w = ortc.weight @w : tensor<8x5xf32>
  %f = ortc.reshape %x : tensor<2x3x8xf32> -> tensor<6x8xf32>
  %m = ortc.matmul %f, %w : tensor<6x8xf32>, tensor<8x5xf32> -> tensor<6x5xf32>
  %y = ortc.reshape %m : tensor<6x5xf32> -> tensor<2x3x5xf32>
  return %y : tensor<2x3x5xf32>
}

// [B,T,V] logits: labels are [B,T] int64, the loss reads logits as [B*T, V].
// CE: func.func @forward(%{{.*}}: tensor<2x3x8xf32> {ortc.name = "x"}, %[[L:.*]]: tensor<2x3xi64> {ortc.name = "labels"}) -> (tensor<f32> {ortc.name = "loss", ortc.role = "loss"}, tensor<f32> {ortc.name = "correct", ortc.role = "metric"}, tensor<f32> {ortc.name = "counted", ortc.role = "metric"})
// CE: %[[FL:.*]] = ortc.reshape %[[L]] : tensor<2x3xi64> -> tensor<6xi64>
// PyTorch's default ignore_index (-100) is on unless told otherwise.
// CE: ortc.softmax_cross_entropy %{{.*}}, %[[FL]] {ignore_index = -100 : i64} : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<f32>
// Accuracy counts: rows whose arg-max is the label, of the rows not ignored.
// CE: %[[P:.*]] = ortc.argmax %{{.*}} {axis = 1 : i64, keepdims = false} : tensor<6x5xf32> -> tensor<6xi64>
// CE: %[[HIT:.*]] = ortc.equal %[[P]], %[[FL]]
// CE: %[[DROP:.*]] = ortc.equal %[[FL]], %{{.*}}
// CE: %[[KEPT:.*]] = ortc.select %[[DROP]]
// CE: %[[HITS:.*]] = ortc.select %[[HIT]], %[[KEPT]]
// CE: %[[C:.*]] = ortc.reduce_sum %[[HITS]] {{.*}} -> tensor<f32>
// CE: %[[N:.*]] = ortc.reduce_sum %[[KEPT]] {{.*}} -> tensor<f32>
// CE: return %{{.*}}, %[[C]], %[[N]]
// MSE-NOT: ortc.role = "metric"

// Class axis 1 ([N, C, L], as PyTorch's cross_entropy): labels drop dim 1 and the
// logits move their class axis last before flattening.
// AXIS1: %{{.*}}: tensor<2x5xi64> {ortc.name = "labels"}
// AXIS1: ortc.transpose %{{.*}}, [0, 2, 1] : tensor<2x3x5xf32> -> tensor<2x5x3xf32>
// AXIS1: ortc.softmax_cross_entropy %{{.*}} : (tensor<10x3xf32>, tensor<10xi64>) -> tensor<f32>
// BADAXIS: --class-axis 3 is out of range for logits 'tensor<2x3x5xf32>'

// Label smoothing: 0.9 * CE + 0.1 * the kept rows' mean of -mean(log_softmax).
// SMOOTH: %[[XENT:.*]] = ortc.softmax_cross_entropy
// SMOOTH: ortc.log_softmax
// SMOOTH: ortc.equal
// SMOOTH: ortc.scale %[[XENT]] {factor = 9.000000e-01 : f64}

// MSE: func.func @forward(%{{.*}}: tensor<2x3x8xf32> {ortc.name = "x"}, %[[T:.*]]: tensor<2x3x5xf32> {ortc.name = "target"})
// MSE: %[[D:.*]] = ortc.sub %{{.*}}, %[[T]] : tensor<2x3x5xf32>
// MSE: %[[S:.*]] = ortc.mul %[[D]], %[[D]]
// MSE: ortc.reduce_mean %[[S]] {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x5xf32> -> tensor<f32>

// IGN: ortc.softmax_cross_entropy {{.*}}ignore_index = 7 : i64

// BAD: the model has no output 'nope' (outputs: 'logits')
