// One case per verifier and shape rule of the ortc dialect. Ops with a shape rule
// (InferTypeOpAdaptor) report the rule's message and then that inference failed.
//
// RUN: ortc-opt %s -split-input-file -verify-diagnostics

func.func @transpose_not_a_permutation(%x: tensor<2x3xf32>) -> tensor<3x3xf32> {
  // expected-error @+2 {{perm is not a permutation}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.transpose %x, [0, 0] : tensor<2x3xf32> -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

func.func @transpose_perm_rank(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+2 {{perm has 3 entries for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.transpose %x, [1, 0, 2] : tensor<2x3xf32> -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

func.func @transpose_wrong_result(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+2 {{inferred type(s) 'tensor<3x2xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.transpose %x, [1, 0] : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @matmul_contraction(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error @+2 {{contraction sizes differ: 3 vs 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.matmul %a, %b : tensor<2x3xf32>, tensor<4x5xf32> -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @matmul_transposed_contraction(%a: tensor<2x3xf32>, %b: tensor<3x5xf32>) -> tensor<2x3xf32> {
  // With trans_b, b is [5,3]^T: K is 5 against a's 3.
  // expected-error @+2 {{contraction sizes differ: 3 vs 5}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.matmul %a, %b {trans_b = true} : tensor<2x3xf32>, tensor<3x5xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @matmul_batch(%a: tensor<2x2x3xf32>, %b: tensor<4x3x5xf32>) -> tensor<2x2x5xf32> {
  // expected-error @+2 {{batch dims differ}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.matmul %a, %b : tensor<2x2x3xf32>, tensor<4x3x5xf32> -> tensor<2x2x5xf32>
  return %0 : tensor<2x2x5xf32>
}

// -----

func.func @matmul_int(%a: tensor<2x3xi32>, %b: tensor<3x5xi32>) -> tensor<2x5xi32> {
  // expected-error @+1 {{operand #0 must be ranked tensor of}}
  %0 = ortc.matmul %a, %b : tensor<2x3xi32>, tensor<3x5xi32> -> tensor<2x5xi32>
  return %0 : tensor<2x5xi32>
}

// -----

func.func @concat_dim_mismatch(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) -> tensor<4x3xf32> {
  // expected-error @+2 {{inputs differ in dim 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.concat %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @concat_axis(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+2 {{axis 2 out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.concat %a {axis = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @reshape_element_count(%x: tensor<2x3xf32>) -> tensor<7xf32> {
  // expected-error @+1 {{element count changes from 'tensor<2x3xf32>' to 'tensor<7xf32>'}}
  %0 = ortc.reshape %x : tensor<2x3xf32> -> tensor<7xf32>
  return %0 : tensor<7xf32>
}

// -----

func.func @reshape_element_type(%x: tensor<2x3xf32>) -> tensor<6xf64> {
  // expected-error @+1 {{element type changes}}
  %0 = ortc.reshape %x : tensor<2x3xf32> -> tensor<6xf64>
  return %0 : tensor<6xf64>
}

// -----

func.func @broadcast_incompatible(%x: tensor<3xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{cannot broadcast 'tensor<3xf32>' to 'tensor<2x4xf32>'}}
  %0 = ortc.broadcast_to %x : tensor<3xf32> -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @broadcast_lower_rank(%x: tensor<2x3xf32>) -> tensor<3xf32> {
  // Broadcasting never drops dims.
  // expected-error @+1 {{cannot broadcast 'tensor<2x3xf32>' to 'tensor<3xf32>'}}
  %0 = ortc.broadcast_to %x : tensor<2x3xf32> -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @conv_channels(%x: tensor<1x3x5x5xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x3x3xf32> {
  // expected-error @+2 {{channels 3 do not match weight 'tensor<4x2x3x3xf32>' with group 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x5x5xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x3x3xf32>
  return %0 : tensor<1x4x3x3xf32>
}

// -----

func.func @conv_bias(%x: tensor<1x2x5x5xf32>, %w: tensor<4x2x3x3xf32>, %b: tensor<3xf32>) -> tensor<1x4x3x3xf32> {
  // expected-error @+2 {{bias must be [4]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x2x5x5xf32>, tensor<4x2x3x3xf32>, tensor<3xf32>) -> tensor<1x4x3x3xf32>
  return %0 : tensor<1x4x3x3xf32>
}

// -----

func.func @conv_geometry(%x: tensor<1x2x5x5xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x3x3xf32> {
  // expected-error @+2 {{strides and dilations must be >= 1, pads >= 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.conv %x, %w {strides = array<i64: 0, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x2x5x5xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x3x3xf32>
  return %0 : tensor<1x4x3x3xf32>
}

// -----

func.func @pool_kernel(%x: tensor<1x2x5x5xf32>) -> tensor<1x2x2x2xf32> {
  // expected-error @+2 {{pooling needs 1-3 spatial dims and a kernel per dim}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.max_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<1x2x5x5xf32> -> tensor<1x2x2x2xf32>
  return %0 : tensor<1x2x2x2xf32>
}

// -----

func.func @slice_out_of_bounds(%x: tensor<4x3xf32>) -> tensor<3x3xf32> {
  // Rows 2, 3, 4 of a 4-row input.
  // expected-error @+2 {{dim 0: slice leaves the input}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.slice %x {starts = array<i64: 2, 0>, sizes = array<i64: 3, 3>, steps = array<i64: 1, 1>} : tensor<4x3xf32> -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

func.func @slice_negative_step_out_of_bounds(%x: tensor<4x3xf32>) -> tensor<2x3xf32> {
  // Rows 1, -1 going backwards by 2.
  // expected-error @+2 {{dim 0: slice leaves the input}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.slice %x {starts = array<i64: 1, 0>, sizes = array<i64: 2, 3>, steps = array<i64: -2, 1>} : tensor<4x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @slice_zero_step(%x: tensor<4x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+2 {{dim 1: zero step or negative size}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.slice %x {starts = array<i64: 0, 0>, sizes = array<i64: 2, 3>, steps = array<i64: 1, 0>} : tensor<4x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @pad_negative_dim(%x: tensor<2x3xf32>) -> tensor<2x0xf32> {
  // expected-error @+2 {{dim 1 becomes negative}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.pad %x {pads = array<i64: 0, -2, 0, -2>} : tensor<2x3xf32> -> tensor<2x0xf32>
  return %0 : tensor<2x0xf32>
}

// -----

func.func @gather_axis(%x: tensor<2x3xf32>, %i: tensor<4xi64>) -> tensor<2x4xf32> {
  // expected-error @+2 {{axis 2 out of range}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.gather %x, %i {axis = 2 : i64} : (tensor<2x3xf32>, tensor<4xi64>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @reduce_repeated_axis(%x: tensor<2x3xf32>) -> tensor<2x1xf32> {
  // expected-error @+2 {{bad or repeated reduction axis 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = ortc.reduce_sum %x {axes = array<i64: 1, 1>} : tensor<2x3xf32> -> tensor<2x1xf32>
  return %0 : tensor<2x1xf32>
}

// -----

func.func @batch_norm_stats(%x: tensor<2x3x4xf32>, %s: tensor<4xf32>) -> tensor<2x3x4xf32> {
  // expected-error @+2 {{scale, bias and running stats must be 'tensor<3xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %y, %m, %v = ortc.batch_norm_train %x, %s, %s, %s, %s {epsilon = 1.0e-5 : f64, momentum = 0.9 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %y : tensor<2x3x4xf32>
}

// -----

func.func @layer_norm_scale(%x: tensor<2x3x4xf32>, %s: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
  // axis 2 normalises [4]: a [3,4] scale does not fit.
  // expected-error @+2 {{scale and bias must be 'tensor<4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %y, %m, %i = ortc.layer_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x3x4xf32>, tensor<3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  return %y : tensor<2x3x4xf32>
}

// -----

ortc.global @w : tensor<4x3xf32> {kind = "weight", onnx_name = "w"}

func.func @weight_unknown_global() -> tensor<4x3xf32> {
  // expected-error @+1 {{refers to unknown weight @v}}
  %0 = ortc.weight @v : tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

ortc.global @w : tensor<4x3xf32> {kind = "weight", onnx_name = "w"}

func.func @weight_type_mismatch() -> tensor<3x4xf32> {
  // expected-error @+1 {{type 'tensor<3x4xf32>' differs from the weight's 'tensor<4x3xf32>'}}
  %0 = ortc.weight @w : tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

// expected-error @+1 {{unknown kind 'weights'}}
ortc.global @w : tensor<4x3xf32> {kind = "weights", onnx_name = "w"}

// -----

// expected-error @+1 {{type must be a static ranked tensor, got 'tensor<?x3xf32>'}}
ortc.global @w : tensor<?x3xf32> {kind = "weight", onnx_name = "w"}

// -----

func.func @select_cond_shape(%c: tensor<3xi1>, %x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // The condition is not broadcast either (the Elementwise trait refuses it before
  // select's own verifier runs).
  // expected-error @+1 {{all non-scalar operands/results must have the same shape and base type}}
  %0 = ortc.select %c, %x, %x : tensor<3xi1>, tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @binary_shapes(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  // Elementwise ops take one shape: broadcasting is explicit.
  // expected-error @+1 {{all non-scalar operands/results must have the same shape and base type}}
  %0 = "ortc.add"(%a, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @binary_types(%a: tensor<2x3xf32>, %b: tensor<2x3xf64>) -> tensor<2x3xf32> {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "ortc.mul"(%a, %b) : (tensor<2x3xf32>, tensor<2x3xf64>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @compare_result(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{result #0 must be ranked tensor of 1-bit signless integer values}}
  %0 = ortc.less %a, %a : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @softmax_cross_entropy_labels(%l: tensor<8x5xf32>, %y: tensor<6xi64>) -> tensor<f32> {
  // expected-error @+1 {{needs logits [N,C] and labels [N], got 'tensor<8x5xf32>' and 'tensor<6xi64>'}}
  %0 = ortc.softmax_cross_entropy %l, %y : (tensor<8x5xf32>, tensor<6xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @softmax_cross_entropy_rank(%l: tensor<2x5x4xf32>, %y: tensor<2x4xi64>) -> tensor<f32> {
  // expected-error @+1 {{needs logits [N,C] and labels [N]}}
  %0 = ortc.softmax_cross_entropy %l, %y : (tensor<2x5x4xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @softmax_cross_entropy_reduction(%l: tensor<8x5xf32>, %y: tensor<8xi64>) -> tensor<f32> {
  // expected-error @+1 {{reduction must be 'mean' or 'sum'}}
  %0 = ortc.softmax_cross_entropy %l, %y {reduction = "none"} : (tensor<8x5xf32>, tensor<8xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @sgd_momentum_without_buffer(%p: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i64>, %ok: tensor<i1>) -> tensor<4xf32> {
  // expected-error @+1 {{a momentum buffer is needed exactly when momentum != 0}}
  %0 = ortc.sgd_update %p, %p lr %lr step %s apply %ok {momentum = 0.9 : f64, dampening = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<i1>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @sgd_buffer_without_momentum(%p: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i64>, %ok: tensor<i1>) -> tensor<4xf32> {
  // expected-error @+1 {{a momentum buffer is needed exactly when momentum != 0}}
  %0:2 = ortc.sgd_update %p, %p, %p lr %lr step %s apply %ok {momentum = 0.0 : f64, dampening = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<i1>) -> (tensor<4xf32>, tensor<4xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

func.func @sgd_results(%p: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i64>, %ok: tensor<i1>) -> tensor<4xf32> {
  // With momentum the buffer is returned too.
  // expected-error @+1 {{returns the parameter and, with momentum, the buffer}}
  %0 = ortc.sgd_update %p, %p, %p lr %lr step %s apply %ok {momentum = 0.9 : f64, dampening = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<i1>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @sgd_result_type(%p: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i64>, %ok: tensor<i1>) -> tensor<2x2xf32> {
  // expected-error @+1 {{results must have the parameter's type}}
  %0 = ortc.sgd_update %p, %p lr %lr step %s apply %ok {momentum = 0.0 : f64, dampening = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<i1>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

func.func @constant_type() -> tensor<3xf32> {
  // expected-error @+1 {{failed to verify that all of {value, result} have same type}}
  %0 = "ortc.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @bad_stage(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{ortc.stage must be "forward", "backward" or "optimizer"}}
  %0 = ortc.neg %x {ortc.stage = "sideways"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @bad_arena_offsets(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{ortc.arena_offsets needs one i64 per result}}
  %0 = ortc.neg %x {ortc.arena_offsets = array<i64: 0, 64>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @fused_yield_types(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{yields}}
  %0 = ortc.fused "pointwise"(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %n = ortc.neg %a : tensor<4xf32>
    %r = ortc.reshape %n : tensor<4xf32> -> tensor<2x2xf32>
    ortc.yield %r : tensor<2x2xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @fused_mixed_kinds(%p: tensor<4xf32>, %g: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i64>, %ok: tensor<i1>) -> (tensor<4xf32>, tensor<4xf32>) {
  // expected-error @+1 {{a multi_tensor kernel holds ops of one multi-tensor kind}}
  %0:2 = ortc.fused "multi_tensor"(%p, %g, %lr, %s, %ok) : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<i1>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>, %l: tensor<f32>, %t: tensor<i64>, %o: tensor<i1>):
    %u = ortc.sgd_update %a, %b lr %l step %t apply %o {momentum = 0.0 : f64, dampening = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<i1>) -> tensor<4xf32>
    %n = ortc.neg %b : tensor<4xf32>
    ortc.yield %u, %n : tensor<4xf32>, tensor<4xf32>
  }
  return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}

// -----

func.func @slice_grad_starts_per_dim(%dy: tensor<2x2xf32>) -> tensor<2x6xf32> {
  // expected-error @+1 {{starts and steps need one entry per dim}}
  %0 = ortc.slice_grad %dy {starts = array<i64: 0>, steps = array<i64: 1, 1>} : tensor<2x2xf32> -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}

// -----

func.func @slice_grad_box_leaves(%dy: tensor<2x2xf32>) -> tensor<2x6xf32> {
  // expected-error @+1 {{dim 1: dy's box leaves the result}}
  %0 = ortc.slice_grad %dy {starts = array<i64: 0, 5>, steps = array<i64: 1, 1>} : tensor<2x2xf32> -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}

// -----

func.func @all_reduce_unknown_reduction(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{reduction must be "mean", "sum" or "min", got "max"}}
  %0 = ortc.all_reduce %x {reduction = "max"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @all_reduce_flags_by_sum(%x: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1 {{reduces i1 flags with "min" only}}
  %0 = ortc.all_reduce %x {reduction = "sum"} : tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @reduce_scatter_shapes(%x: tensor<6xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{the whole tensor has 6 elements, not ranks (2) times the shard's 2}}
  %0 = ortc.reduce_scatter %x {ranks = 2 : i64} : tensor<6xf32> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @all_gather_shapes(%x: tensor<2xf32>) -> tensor<6xf32> {
  // expected-error @+1 {{the whole tensor has 6 elements, not ranks (2) times the shard's 2}}
  %0 = ortc.all_gather %x {ranks = 2 : i64} : tensor<2xf32> -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

func.func @rank_shard_ranks(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{needs ranks >= 1, got 0}}
  %0 = ortc.rank_shard %x {ranks = 0 : i64} : tensor<4xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @strided_view_outside(%x: tensor<2x12xf32>) -> tensor<2x2x4xf32> {
  // expected-error @+1 {{reads outside its operand}}
  %0 = ortc.strided_view %x {offset = 8 : i64, strides = array<i64: 12, 4, 1>} : tensor<2x12xf32> -> tensor<2x2x4xf32>
  return %0 : tensor<2x2x4xf32>
}

// -----

func.func @strided_view_strides(%x: tensor<24xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{needs one stride per result dim}}
  %0 = ortc.strided_view %x {offset = 0 : i64, strides = array<i64: 4>} : tensor<24xf32> -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @matmul_into_outside(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>, %d: tensor<4x6xf32>) -> tensor<4x6xf32> {
  // expected-error @+1 {{writes outside its dest}}
  %0 = ortc.matmul_into %a, %b into %d {offset = 4 : i64, strides = array<i64: 6, 1>} : tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x6xf32> -> tensor<4x6xf32>
  return %0 : tensor<4x6xf32>
}

// -----

func.func @matmul_into_transposed_slot(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>, %d: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{writes a slot a GEMM cannot write (rows need unit-stride columns)}}
  %0 = ortc.matmul_into %a, %b into %d {offset = 0 : i64, strides = array<i64: 1, 4>} : tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}
