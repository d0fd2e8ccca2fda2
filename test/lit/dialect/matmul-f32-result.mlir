// RUN: ortc-opt --split-input-file --verify-diagnostics %s | FileCheck %s

// matmul f32_result: bf16 or f16 operands, a float32 result (mixed precision's GEMM).
// CHECK-LABEL: func.func @wide
// CHECK: ortc.matmul %arg0, %arg1 {f32_result = true} : tensor<2x3xbf16>, tensor<3x4xbf16> -> tensor<2x4xf32>
func.func @wide(%a: tensor<2x3xbf16>, %b: tensor<3x4xbf16>) -> tensor<2x4xf32> {
  %y = ortc.matmul %a, %b {f32_result = true} : tensor<2x3xbf16>, tensor<3x4xbf16> -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

func.func @float_operands(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+2 {{f32_result takes bf16 or f16 operands}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = ortc.matmul %a, %b {f32_result = true} : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
