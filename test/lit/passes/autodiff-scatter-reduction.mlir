// RUN: not ortc-opt --ortc-autodiff %s 2>&1 | FileCheck %s
// scatter_elements has gradient rules for reductions "none" and "add" only; a "mul"
// (or "max"/"min") scatter on the path to a parameter is refused, naming the reduction.
ortc.global @d : tensor<3x4xf32> {kind = "weight", onnx_name = "d"}
func.func @forward() -> (tensor<f32> {ortc.name = "loss", ortc.role = "loss"}) {
  %d = ortc.weight @d : tensor<3x4xf32>
  %i = ortc.constant dense<[[0, 1, 2, 0]]> : tensor<1x4xi64>
  %u = ortc.constant dense<2.0> : tensor<1x4xf32>
  %y = ortc.scatter_elements %d, %i, %u {axis = 0 : i64, reduction = "mul"} : (tensor<3x4xf32>, tensor<1x4xi64>, tensor<1x4xf32>) -> tensor<3x4xf32> loc("scatter_node")
  %l = ortc.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK: error: loc("scatter_node"): 'ortc.scatter_elements' op has no gradient rule for reduction 'mul'
