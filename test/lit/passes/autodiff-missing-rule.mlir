// RUN: not ortc-opt --ortc-autodiff %s 2>&1 | FileCheck %s
// Every op without a gradient rule on the path to a parameter is listed in one error,
// with the parameter that needs it.
ortc.global @w : tensor<2x4xf32> {kind = "weight", onnx_name = "w"}
ortc.global @s : tensor<4xf32> {kind = "weight", onnx_name = "s"}
func.func @forward() -> (tensor<f32> {ortc.name = "loss", ortc.role = "loss"}) {
  %w = ortc.weight @w : tensor<2x4xf32>
  %s = ortc.weight @s : tensor<4xf32>
  %sb = ortc.broadcast_to %s : tensor<4xf32> -> tensor<2x4xf32>
  %y = ortc.gelu_grad %w, %sb : tensor<2x4xf32> loc("first_node")
  %d = ortc.gelu_grad %y, %y : tensor<2x4xf32> loc("gg_node")
  %r = ortc.reduce_sum %d {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %r : tensor<f32>
}
// CHECK: error: 2 op(s) on the path to a parameter have no gradient rule:
// CHECK-DAG: - ortc.gelu_grad at loc("gg_node") (needed by parameter '{{[sw]}}')
// CHECK-DAG: - ortc.gelu_grad at loc("first_node") (needed by parameter '{{[sw]}}')
