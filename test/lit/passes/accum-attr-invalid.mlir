// RUN: ortc-opt --split-input-file --verify-diagnostics %s

// ortc.accum (OpAnnotations.h) is checked wherever it appears.
func.func @not_a_sum(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{ortc.accum on an op whose kernel has no sums to accumulate}}
  %y = ortc.tanh %x {ortc.accum = {type = bf16, chunk = 64 : i64}} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @bad_type(%x: tensor<4x3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{ortc.accum must be {type = bf16 | f16, chunk = C : i64} with C >= 0}}
  %s = ortc.reduce_sum %x {axes = array<i64: 0>, keepdims = false, ortc.accum = {type = f32, chunk = 64 : i64}} : tensor<4x3xf32> -> tensor<3xf32>
  return %s : tensor<3xf32>
}

// -----

func.func @negative_chunk(%x: tensor<4x3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{ortc.accum must be {type = bf16 | f16, chunk = C : i64} with C >= 0}}
  %s = ortc.reduce_sum %x {axes = array<i64: 0>, keepdims = false, ortc.accum = {type = bf16, chunk = -1 : i64}} : tensor<4x3xf32> -> tensor<3xf32>
  return %s : tensor<3xf32>
}
