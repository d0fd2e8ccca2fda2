// RUN: ortc-opt --split-input-file --ortc-form-kernels %s | FileCheck %s

// A pointwise chain with the bias broadcast it reads becomes one kernel: the broadcast
// is an index map inside it (no copy), the splat a literal; only the last value leaves.
// CHECK-LABEL: func.func @chain
// CHECK: %[[K:.*]] = ortc.fused "pointwise"(%arg0, %arg1) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>):
// CHECK-NEXT: %[[BB:.*]] = ortc.broadcast_to %[[B]] : tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[A:.*]] = ortc.add %[[X]], %[[BB]]
// CHECK-NEXT: %[[C:.*]] = ortc.constant dense<5.000000e-01>
// CHECK-NEXT: %[[M:.*]] = ortc.mul %[[A]], %[[C]]
// CHECK-NEXT: %[[R:.*]] = ortc.relu %[[M]]
// CHECK-NEXT: ortc.yield %[[R]] : tensor<4x8xf32>
// CHECK: return %[[K]]
// CHECK-NOT: ortc.broadcast_to
func.func @chain(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %bb = ortc.broadcast_to %b : tensor<8xf32> -> tensor<4x8xf32>
  %a = ortc.add %x, %bb : tensor<4x8xf32>
  %h = ortc.constant dense<0.5> : tensor<4x8xf32>
  %m = ortc.mul %a, %h : tensor<4x8xf32>
  %r = ortc.relu %m : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// An expensive producer with several users is computed once: it joins the kernel of
// its consumers and leaves it for its other user (the matmul), which runs after.
// CHECK-LABEL: func.func @shared_producer
// CHECK: %[[K:.*]]:2 = ortc.fused "pointwise"(%arg0) : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
// CHECK: ortc.exp
// CHECK: ortc.neg
// CHECK-NOT: ortc.exp
// CHECK: ortc.matmul %[[K]]#0, %[[K]]#1
func.func @shared_producer(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %e = ortc.exp %x : tensor<4x4xf32>
  %n = ortc.neg %e : tensor<4x4xf32>
  %m = ortc.matmul %e, %n : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  return %m : tensor<4x4xf32>
}

// -----

// Negative: a consumer that must wait for a non-pointwise user of its producer cannot
// join the producer's kernel (the kernel would run after that user needs its value),
// and values of other shapes form their own kernels. A lone op reading no broadcast
// stays as it is.
// CHECK-LABEL: func.func @barrier
// CHECK: %[[E:.*]] = ortc.exp %arg0
// CHECK-NEXT: %[[S:.*]] = ortc.reduce_sum %[[E]]
// CHECK-NEXT: %[[K:.*]] = ortc.fused "pointwise"(%[[E]], %[[S]])
// CHECK: ortc.broadcast_to
// CHECK-NEXT: ortc.div
// CHECK-NEXT: ortc.sqrt
// CHECK-NEXT: ortc.yield
func.func @barrier(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = ortc.exp %x : tensor<4x8xf32>
  %s = ortc.reduce_sum %e {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %sb = ortc.broadcast_to %s : tensor<4x1xf32> -> tensor<4x8xf32>
  %d = ortc.div %e, %sb : tensor<4x8xf32>
  %q = ortc.sqrt %d : tensor<4x8xf32>
  return %q : tensor<4x8xf32>
}

// -----

// A broadcast read by a kernel and by another op stays for that op (and is recomputed
// in the kernel as an index map); ops of different shapes never share a kernel.
// CHECK-LABEL: func.func @shapes
// CHECK: %[[N:.*]] = ortc.neg %arg1 : tensor<8xf32>
// CHECK: %[[BB:.*]] = ortc.broadcast_to %[[N]]
// CHECK: ortc.fused "pointwise"(%arg0, %[[N]])
// CHECK: ortc.matmul %[[BB]]
func.func @shapes(%x: tensor<8x8xf32>, %b: tensor<8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %n = ortc.neg %b : tensor<8xf32>
  %bb = ortc.broadcast_to %n : tensor<8xf32> -> tensor<8x8xf32>
  %a = ortc.add %x, %bb : tensor<8x8xf32>
  %m = ortc.matmul %bb, %x : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  return %a, %m : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// The optimizer's updates that share their scalars are one multi-tensor kernel; an
// update with another weight decay scalar is left out of it.
// CHECK-LABEL: func.func @updates
// CHECK: %[[K:.*]]:6 = ortc.fused "multi_tensor"(%arg0, %arg1, %arg2, %arg3, %arg9, %arg10, %arg11, %arg16, %arg17, %arg18, %arg19, %arg4, %arg5, %arg6, %arg7)
// CHECK-COUNT-2: ortc.adamw_update
// CHECK: ortc.yield
// CHECK: ortc.adamw_update %arg12, {{.*}}weight_decay %arg20
func.func @updates(%p0: tensor<4xf32>, %g0: tensor<4xf32>, %m0: tensor<4xf32>, %v0: tensor<4xf32>,
                   %p1: tensor<2x3xf32>, %g1: tensor<2x3xf32>, %m1: tensor<2x3xf32>, %v1: tensor<2x3xf32>,
                   %x: tensor<f32>, %lr: tensor<f32>, %step: tensor<i64>, %ok: tensor<i1>,
                   %p2: tensor<4xf32>, %g2: tensor<4xf32>, %m2: tensor<4xf32>, %v2: tensor<4xf32>,
                   %b1: tensor<f32>, %b2: tensor<f32>, %eps: tensor<f32>, %wd: tensor<f32>, %wd0: tensor<f32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<4xf32>) {
  %a:3 = ortc.adamw_update %p0, %g0, %m0, %v0 lr %lr step %step apply %ok betas %b1, %b2 eps %eps weight_decay %wd : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<i1>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %b:3 = ortc.adamw_update %p1, %g1, %m1, %v1 lr %lr step %step apply %ok betas %b1, %b2 eps %eps weight_decay %wd : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<f32>, tensor<i64>, tensor<i1>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
  %c:3 = ortc.adamw_update %p2, %g2, %m2, %v2 lr %lr step %step apply %ok betas %b1, %b2 eps %eps weight_decay %wd0 : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<i1>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %a#0, %a#1, %a#2, %b#0, %b#1, %b#2, %c#0 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<4xf32>
}

// -----

// A sum over the leading dims of a value a kernel computes (a bias gradient) joins
// that kernel; a sum over a trailing dim does not.
// CHECK-LABEL: func.func @sums
// CHECK: %[[K:.*]]:2 = ortc.fused "pointwise"(%arg0, %arg1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<1x8xf32>)
// CHECK: ortc.gelu_grad
// CHECK-NEXT: ortc.reduce_sum
// CHECK: ortc.reduce_sum %[[K]]#0 {axes = array<i64: 1>}
func.func @sums(%x: tensor<4x8xf32>, %dy: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<1x8xf32>, tensor<4x1xf32>) {
  %g = ortc.gelu_grad %x, %dy : tensor<4x8xf32>
  %b = ortc.reduce_sum %g {axes = array<i64: 0>} : tensor<4x8xf32> -> tensor<1x8xf32>
  %r = ortc.reduce_sum %g {axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  return %g, %b, %r : tensor<4x8xf32>, tensor<1x8xf32>, tensor<4x1xf32>
}

// -----

// Two sums over different leading dims of one value: only the first joins the kernel
// (a kernel has one split into summed rows and kept columns).
// CHECK-LABEL: func.func @two_sums
// CHECK: %[[K:.*]]:2 = ortc.fused "pointwise"
// CHECK: ortc.reduce_sum {{.*}}axes = array<i64: 0>
// CHECK: ortc.yield
// CHECK: ortc.reduce_sum %[[K]]#0 {axes = array<i64: 0, 1>}
func.func @two_sums(%x: tensor<2x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<1x1x8xf32>) {
  %e = ortc.exp %x : tensor<2x4x8xf32>
  %a = ortc.reduce_sum %e {axes = array<i64: 0>} : tensor<2x4x8xf32> -> tensor<1x4x8xf32>
  %b = ortc.reduce_sum %e {axes = array<i64: 0, 1>} : tensor<2x4x8xf32> -> tensor<1x1x8xf32>
  return %a, %b : tensor<1x4x8xf32>, tensor<1x1x8xf32>
}

// -----

// A recompute clone joins its sibling: the clone of gelu(h) (placed by ortc-recompute before
// its first backward reader, the dW matmul) and the kernel of gelu_grad(h, dg) both read h,
// so they become one kernel (h read once, one launch) where gelu_grad stood; the matmul
// reading the clone moves after it. The GEMM dg = dy . w, read only by gelu_grad, is the
// kernel's GEMM (step 1d).
// CHECK-LABEL: func.func @recompute_sibling
// CHECK: %[[K:.*]]:2 = ortc.fused "gemm"(%arg0, %arg1, %arg2) {ortc.stage = "backward"}
// CHECK-NEXT: ^bb0(%[[H:.*]]: tensor<4x16xf32>, %[[DY:.*]]: tensor<4x16xf32>, %[[W:.*]]: tensor<16x16xf32>):
// CHECK-NEXT: %[[G:.*]] = ortc.gelu %[[H]] {ortc.recompute, ortc.stage = "forward"}
// CHECK-NEXT: %[[D:.*]] = ortc.matmul %[[DY]], %[[W]]
// CHECK-NEXT: %[[GG:.*]] = ortc.gelu_grad %[[H]], %[[D]]
// CHECK-NEXT: ortc.yield %[[G]], %[[GG]]
// CHECK: ortc.matmul %[[K]]#0, %arg1 {ortc.stage = "backward", trans_a = true}
func.func @recompute_sibling(%h: tensor<4x16xf32>, %dy: tensor<4x16xf32>, %w: tensor<16x16xf32>)
    -> (tensor<16x16xf32>, tensor<4x16xf32>) {
  %g = ortc.gelu %h {ortc.recompute, ortc.stage = "forward"} : tensor<4x16xf32>
  %dw = ortc.matmul %g, %dy {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  %dg = ortc.matmul %dy, %w {ortc.stage = "backward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %dh = ortc.gelu_grad %h, %dg {ortc.stage = "backward"} : tensor<4x16xf32>
  return %dw, %dh : tensor<16x16xf32>, tensor<4x16xf32>
}

// -----

// Not when the clone's reader feeds the sibling: the kernel could not run after it.
// CHECK-LABEL: func.func @recompute_sibling_feeds
// CHECK: ortc.gelu %arg0 {ortc.recompute, ortc.stage = "forward"}
// CHECK: ortc.matmul
// CHECK: ortc.gelu_grad
func.func @recompute_sibling_feeds(%h: tensor<4x16xf32>, %w: tensor<16x16xf32>) -> tensor<4x16xf32> {
  %g = ortc.gelu %h {ortc.recompute, ortc.stage = "forward"} : tensor<4x16xf32>
  %dg = ortc.matmul %g, %w {ortc.stage = "backward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %dh = ortc.gelu_grad %h, %dg {ortc.stage = "backward"} : tensor<4x16xf32>
  return %dh : tensor<4x16xf32>
}

// -----

// The clone of a dropout (attention probabilities in a GPT: the clone feeds dV's matmul) and
// the dropout_grad of the same mask (seed, key, ratio) read nothing in common but the seed;
// they share the mask, so they join one kernel that draws it once.
// CHECK-LABEL: func.func @recompute_sibling_mask
// CHECK: %[[K:.*]]:2 = ortc.fused "gemm"(%arg0, %arg3, %arg1, %arg2) {ortc.stage = "backward"}
// CHECK: ortc.dropout {{.*}}key = 7 : i64, ortc.recompute
// CHECK-NEXT: ortc.matmul
// CHECK-NEXT: ortc.dropout_grad {{.*}}key = 7 : i64
// CHECK: ortc.matmul %[[K]]#0, %arg1 {ortc.stage = "backward", trans_a = true}
func.func @recompute_sibling_mask(%p: tensor<4x16xf32>, %dy: tensor<4x16xf32>, %w: tensor<16x16xf32>,
                                  %seed: tensor<i64>) -> (tensor<16x16xf32>, tensor<4x16xf32>) {
  %pd = ortc.dropout %p, %seed {key = 7 : i64, ratio = 1.000000e-01 : f64, ortc.recompute, ortc.stage = "forward"} : tensor<4x16xf32>, tensor<i64>
  %dw = ortc.matmul %pd, %dy {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  %dpd = ortc.matmul %dy, %w {ortc.stage = "backward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %dp = ortc.dropout_grad %dpd, %seed {key = 7 : i64, ratio = 1.000000e-01 : f64, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<i64>
  return %dw, %dp : tensor<16x16xf32>, tensor<4x16xf32>
}

// -----

// Another mask (key) shares nothing: the clone stays before its reader.
// CHECK-LABEL: func.func @recompute_sibling_other_mask
// CHECK: ortc.dropout %arg0, %arg3 {key = 7 : i64, ortc.recompute
// CHECK-NEXT: ortc.matmul
// CHECK: ortc.dropout_grad {{.*}}key = 8 : i64
func.func @recompute_sibling_other_mask(%p: tensor<4x16xf32>, %dy: tensor<4x16xf32>, %w: tensor<16x16xf32>,
                                        %seed: tensor<i64>) -> (tensor<16x16xf32>, tensor<4x16xf32>) {
  %pd = ortc.dropout %p, %seed {key = 7 : i64, ratio = 1.000000e-01 : f64, ortc.recompute, ortc.stage = "forward"} : tensor<4x16xf32>, tensor<i64>
  %dw = ortc.matmul %pd, %dy {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  %dpd = ortc.matmul %dy, %w {ortc.stage = "backward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %dp = ortc.dropout_grad %dpd, %seed {key = 8 : i64, ratio = 1.000000e-01 : f64, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<i64>
  return %dw, %dp : tensor<16x16xf32>, tensor<4x16xf32>
}

// -----

// The clone of a dropout also joins a row kernel holding the dropout_grad of its mask
// (attention's probabilities: softmax_grad reads them too): computed and stored as the row
// kernel stores each element, the mask drawn in the same kernel; dV's matmul moves after.
// The kernel also computes dP = dy v (the rows of the product its row op reads).
// CHECK-LABEL: func.func @recompute_sibling_rows
// CHECK: %[[K:.*]]:2 = ortc.fused "rows"(%arg0, %arg3, %arg1, %arg2) {ortc.stage = "backward"}
// CHECK: ortc.dropout {{.*}}key = 7 : i64, ortc.recompute
// CHECK-NEXT: ortc.matmul
// CHECK-NEXT: ortc.dropout_grad {{.*}}key = 7 : i64
// CHECK-NEXT: ortc.softmax_grad
// CHECK: ortc.matmul %[[K]]#0, %arg1 {ortc.stage = "backward", trans_a = true}
func.func @recompute_sibling_rows(%p: tensor<4x16xf32>, %dy: tensor<4x16xf32>, %v: tensor<16x16xf32>,
                                  %seed: tensor<i64>) -> (tensor<16x16xf32>, tensor<4x16xf32>) {
  %pd = ortc.dropout %p, %seed {key = 7 : i64, ratio = 1.000000e-01 : f64, ortc.recompute, ortc.stage = "forward"} : tensor<4x16xf32>, tensor<i64>
  %dv = ortc.matmul %pd, %dy {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  %dpd = ortc.matmul %dy, %v {ortc.stage = "backward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %dp = ortc.dropout_grad %dpd, %seed {key = 7 : i64, ratio = 1.000000e-01 : f64, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<i64>
  %ds = ortc.softmax_grad %p, %dp {axis = 1 : i64, ortc.stage = "backward"} : tensor<4x16xf32>
  return %dv, %ds : tensor<16x16xf32>, tensor<4x16xf32>
}

// -----

// Clones no later group shares work with (a LayerNorm's output from its statistics, read by
// a GEMM and a library kernel) join the last earlier group of their shape that runs after
// what they read: they move up into its kernel, and launch nothing of their own.
// CHECK-LABEL: func.func @recompute_earlier_sibling
// CHECK: %[[K:.*]]:2 = ortc.fused "pointwise"(%arg2, %arg3, %arg0, %arg1) {ortc.stage = "backward"}
// CHECK: ortc.add
// CHECK-NEXT: ortc.broadcast_to {{.*}}tensor<4x1xf32> -> tensor<4x16xf32>
// CHECK-NEXT: ortc.sub {{.*}}ortc.recompute
// CHECK-NEXT: ortc.mul
// CHECK-NEXT: ortc.yield
// CHECK-NEXT: }
// CHECK-NEXT: ortc.matmul %[[K]]#0, %arg4 {ortc.stage = "backward", trans_a = true}
func.func @recompute_earlier_sibling(%x: tensor<4x16xf32>, %mean: tensor<4x1xf32>, %a: tensor<4x16xf32>,
                                     %b: tensor<4x16xf32>, %dy: tensor<4x16xf32>)
    -> (tensor<4x16xf32>, tensor<16x16xf32>) {
  %s = ortc.add %a, %b {ortc.stage = "backward"} : tensor<4x16xf32>
  %t = ortc.mul %s, %s {ortc.stage = "backward"} : tensor<4x16xf32>
  %mb = ortc.broadcast_to %mean {ortc.recompute, ortc.stage = "forward"} : tensor<4x1xf32> -> tensor<4x16xf32>
  %n = ortc.sub %x, %mb {ortc.recompute, ortc.stage = "forward"} : tensor<4x16xf32>
  %dw = ortc.matmul %n, %dy {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  return %t, %dw : tensor<4x16xf32>, tensor<16x16xf32>
}

// -----

// Not into a group that runs before a value the clone reads is computed (here a GEMM's
// product, which also leaves the function: no epilogue).
// CHECK-LABEL: func.func @recompute_earlier_not_ready
// CHECK: ortc.fused "pointwise"(%arg2, %arg3)
// CHECK: %[[M:.*]] = ortc.matmul %arg2, %arg4 {ortc.stage = "backward"}
// CHECK-NEXT: %[[N:.*]] = ortc.sub %[[M]], %arg0 {ortc.recompute
// CHECK-NEXT: ortc.matmul %[[N]], %arg5 {ortc.stage = "backward", trans_a = true}
func.func @recompute_earlier_not_ready(%x: tensor<4x16xf32>, %mean: tensor<4x1xf32>, %a: tensor<4x16xf32>,
                                       %b: tensor<4x16xf32>, %w: tensor<16x16xf32>, %dy: tensor<4x16xf32>)
    -> (tensor<4x16xf32>, tensor<16x16xf32>, tensor<4x16xf32>) {
  %s = ortc.add %a, %b {ortc.stage = "backward"} : tensor<4x16xf32>
  %t = ortc.mul %s, %s {ortc.stage = "backward"} : tensor<4x16xf32>
  %m = ortc.matmul %a, %w {ortc.stage = "backward"} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %n = ortc.sub %m, %x {ortc.recompute, ortc.stage = "forward"} : tensor<4x16xf32>
  %dw = ortc.matmul %n, %dy {trans_a = true, ortc.stage = "backward"} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  return %t, %dw, %m : tensor<4x16xf32>, tensor<16x16xf32>, tensor<4x16xf32>
}

// -----

// A softmax along the last axis joins the pointwise ops of its shape around it: the
// scale and the mask read through its broadcast compute its operand (prologue), the
// dropout reads its result (epilogue); one "rows" kernel yields the probabilities (the
// backward's) and the dropped-out ones.
// CHECK-LABEL: func.func @rows
// CHECK: %[[K:.*]]:2 = ortc.fused "rows"(%arg0, %arg1, %arg2) : (tensor<2x4x8xf32>, tensor<4x8xi1>, tensor<i64>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK: ortc.div
// CHECK: ortc.broadcast_to
// CHECK: ortc.select
// CHECK-NEXT: %[[P:.*]] = ortc.softmax
// CHECK-NEXT: %[[D:.*]] = ortc.dropout %[[P]]
// CHECK-NEXT: ortc.yield %[[P]], %[[D]]
// CHECK: return %[[K]]#0, %[[K]]#1
func.func @rows(%s: tensor<2x4x8xf32>, %mask: tensor<4x8xi1>, %seed: tensor<i64>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %c = ortc.constant dense<8.0> : tensor<2x4x8xf32>
  %d = ortc.div %s, %c : tensor<2x4x8xf32>
  %mb = ortc.broadcast_to %mask : tensor<4x8xi1> -> tensor<2x4x8xi1>
  %inf = ortc.constant dense<0xFF800000> : tensor<2x4x8xf32>
  %x = ortc.select %mb, %inf, %d : tensor<2x4x8xi1>, tensor<2x4x8xf32>
  %p = ortc.softmax %x {axis = 2 : i64} : tensor<2x4x8xf32>
  %q = ortc.dropout %p, %seed {key = 1 : i64, ratio = 0.1 : f64} : tensor<2x4x8xf32>, tensor<i64>
  return %p, %q : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

// The gradient: the dropout's gradient computes dy, the scale's gradient reads dx.
// CHECK-LABEL: func.func @rows_grad
// CHECK: %[[K:.*]] = ortc.fused "rows"
// CHECK: ortc.dropout_grad
// CHECK-NEXT: ortc.softmax_grad
// CHECK-NEXT: ortc.constant
// CHECK-NEXT: ortc.div
// CHECK-NEXT: ortc.yield
func.func @rows_grad(%y: tensor<2x4x8xf32>, %dq: tensor<2x4x8xf32>, %seed: tensor<i64>) -> tensor<2x4x8xf32> {
  %dp = ortc.dropout_grad %dq, %seed {key = 1 : i64, ratio = 0.1 : f64} : tensor<2x4x8xf32>, tensor<i64>
  %dx = ortc.softmax_grad %y, %dp {axis = 2 : i64} : tensor<2x4x8xf32>
  %c = ortc.constant dense<8.0> : tensor<2x4x8xf32>
  %ds = ortc.div %dx, %c : tensor<2x4x8xf32>
  return %ds : tensor<2x4x8xf32>
}

// -----

// Not a row op: a softmax along another axis than the last forms no kernel with its
// producer; of two softmaxes in a chain only the first gets the exp between them (one
// row op per kernel); a sum over the leading dims does not join a row op.
// CHECK-LABEL: func.func @not_rows
// CHECK: %[[E:.*]] = ortc.exp %arg0
// CHECK-NEXT: %[[A:.*]] = ortc.softmax %[[E]] {axis = 1 : i64}
// CHECK-NEXT: %[[K1:.*]] = ortc.fused "rows"(%[[A]])
// CHECK: ortc.log_softmax
// CHECK-NEXT: ortc.exp
// CHECK-NEXT: ortc.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[S:.*]] = ortc.softmax %[[K1]] {axis = 2 : i64}
// CHECK-NEXT: ortc.reduce_sum %[[S]] {axes = array<i64: 0>}
func.func @not_rows(%x: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<1x4x8xf32>) {
  %e = ortc.exp %x : tensor<2x4x8xf32>
  %a = ortc.softmax %e {axis = 1 : i64} : tensor<2x4x8xf32>
  %l = ortc.log_softmax %a {axis = 2 : i64} : tensor<2x4x8xf32>
  %p = ortc.exp %l : tensor<2x4x8xf32>
  %s = ortc.softmax %p {axis = 2 : i64} : tensor<2x4x8xf32>
  %r = ortc.reduce_sum %s {axes = array<i64: 0>} : tensor<2x4x8xf32> -> tensor<1x4x8xf32>
  return %s, %r : tensor<2x4x8xf32>, tensor<1x4x8xf32>
}

// -----

// A comparison read only through broadcasts is computed in each kernel that reads it
// (from the broadcast buffer and a widened splat), not launched on its own: each of the
// two kernels gets its own copy. One with another reader stays where it is.
// CHECK-LABEL: func.func @cheap_into_broadcasts
// CHECK-NOT: ortc.equal %arg0
// CHECK: ortc.fused "pointwise"(%arg0, %arg1)
// CHECK: ortc.broadcast_to %{{.*}} : tensor<4x8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: ortc.constant dense<0.000000e+00> : tensor<2x4x8xf32>
// CHECK-NEXT: ortc.equal
// CHECK: ortc.select
// CHECK: ortc.fused "pointwise"(%arg0, %arg2)
// CHECK: ortc.equal
// CHECK: %[[KEPT:.*]] = ortc.less %arg0
// CHECK: return {{.*}}, %[[KEPT]]
func.func @cheap_into_broadcasts(%m: tensor<4x8xf32>, %x: tensor<2x4x8xf32>, %y: tensor<2x4x8xf32>)
    -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<4x8xi1>) {
  %zero = ortc.constant dense<0.0> : tensor<4x8xf32>
  %e = ortc.equal %m, %zero : tensor<4x8xf32> -> tensor<4x8xi1>
  %eb = ortc.broadcast_to %e : tensor<4x8xi1> -> tensor<2x4x8xi1>
  %z = ortc.constant dense<0.0> : tensor<2x4x8xf32>
  %a = ortc.select %eb, %z, %x : tensor<2x4x8xi1>, tensor<2x4x8xf32>
  %b = ortc.select %eb, %z, %y : tensor<2x4x8xi1>, tensor<2x4x8xf32>
  %l = ortc.less %m, %zero : tensor<4x8xf32> -> tensor<4x8xi1>
  %lb = ortc.broadcast_to %l : tensor<4x8xi1> -> tensor<2x4x8xi1>
  %c = ortc.select %lb, %z, %x : tensor<2x4x8xi1>, tensor<2x4x8xf32>
  return %a, %b, %l : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<4x8xi1>
}

// -----

// Attention's heads: q and k^T are slices of the QKV projection, split into heads and
// transposed. The GEMM reads them through strided views of the projection (offset of
// the slice, strides of the transposed head layout) and the copies are gone.
// CHECK-LABEL: func.func @heads_as_views
// CHECK-DAG: %[[Q:.*]] = ortc.strided_view %arg0 {offset = 0 : i64, strides = array<i64: 384, 4, 24, 1>} : tensor<2x16x24xf32> -> tensor<2x2x16x4xf32>
// CHECK-DAG: %[[K:.*]] = ortc.strided_view %arg0 {offset = 8 : i64, strides = array<i64: 384, 4, 1, 24>} : tensor<2x16x24xf32> -> tensor<2x2x4x16xf32>
// CHECK: ortc.matmul %[[Q]], %[[K]]
// CHECK-NOT: ortc.slice
// CHECK-NOT: ortc.transpose
func.func @heads_as_views(%qkv: tensor<2x16x24xf32>) -> tensor<2x2x16x16xf32> {
  %q = ortc.slice %qkv {starts = array<i64: 0, 0, 0>, sizes = array<i64: 2, 16, 8>, steps = array<i64: 1, 1, 1>} : tensor<2x16x24xf32> -> tensor<2x16x8xf32>
  %k = ortc.slice %qkv {starts = array<i64: 0, 0, 8>, sizes = array<i64: 2, 16, 8>, steps = array<i64: 1, 1, 1>} : tensor<2x16x24xf32> -> tensor<2x16x8xf32>
  %qh = ortc.reshape %q : tensor<2x16x8xf32> -> tensor<2x16x2x4xf32>
  %kh = ortc.reshape %k : tensor<2x16x8xf32> -> tensor<2x16x2x4xf32>
  %qt = ortc.transpose %qh, [0, 2, 1, 3] : tensor<2x16x2x4xf32> -> tensor<2x2x16x4xf32>
  %kt = ortc.transpose %kh, [0, 2, 3, 1] : tensor<2x16x2x4xf32> -> tensor<2x2x4x16xf32>
  %s = ortc.matmul %qt, %kt : tensor<2x2x16x4xf32>, tensor<2x2x4x16xf32> -> tensor<2x2x16x16xf32>
  return %s : tensor<2x2x16x16xf32>
}

// -----

// A transpose another op reads stays for that reader; the GEMM reads the view. A
// reshape that merges dims a transpose separated is no strided layout: that operand
// keeps its copy.
// CHECK-LABEL: func.func @views_where_they_exist
// CHECK: %[[T:.*]] = ortc.transpose %arg0
// CHECK: %[[V:.*]] = ortc.strided_view %arg0 {offset = 0 : i64, strides = array<i64: 1, 8>} : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK: ortc.matmul %[[V]], %arg1
// CHECK: %[[T2:.*]] = ortc.transpose %arg2
// CHECK: %[[R:.*]] = ortc.reshape %[[T2]]
// CHECK: ortc.matmul %[[R]], %arg1
// CHECK: ortc.exp %[[T]]
func.func @views_where_they_exist(%x: tensor<4x8xf32>, %w: tensor<4x4xf32>, %y: tensor<2x4x2xf32>)
    -> (tensor<8x4xf32>, tensor<4x4xf32>, tensor<8x4xf32>) {
  %t = ortc.transpose %x, [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %m = ortc.matmul %t, %w : tensor<8x4xf32>, tensor<4x4xf32> -> tensor<8x4xf32>
  %t2 = ortc.transpose %y, [1, 0, 2] : tensor<2x4x2xf32> -> tensor<4x2x2xf32>
  %r = ortc.reshape %t2 : tensor<4x2x2xf32> -> tensor<4x4xf32>
  %m2 = ortc.matmul %r, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %e = ortc.exp %t : tensor<8x4xf32>
  return %m, %m2, %e : tensor<8x4xf32>, tensor<4x4xf32>, tensor<8x4xf32>
}

// -----

// 16-bit GEMMs keep contiguous operands (their library paths take no layouts).
// CHECK-LABEL: func.func @sixteen_bit_keeps_copies
// CHECK: ortc.transpose
// CHECK-NOT: ortc.strided_view
func.func @sixteen_bit_keeps_copies(%x: tensor<2x4x8xbf16>, %w: tensor<2x4x4xbf16>) -> tensor<2x8x4xf32> {
  %t = ortc.transpose %x, [0, 2, 1] : tensor<2x4x8xbf16> -> tensor<2x8x4xbf16>
  %m = ortc.matmul %t, %w {f32_result = true} : tensor<2x8x4xbf16>, tensor<2x4x4xbf16> -> tensor<2x8x4xf32>
  return %m : tensor<2x8x4xf32>
}

// -----

// The merge of attention's heads: the product [B, H, T, D] is only transposed to
// [B, T, H, D] and reshaped, so the GEMM writes it there itself (rows H*D apart, heads
// D apart) into a fresh buffer, and the transpose is gone.
// CHECK-LABEL: func.func @heads_merged_in_place
// CHECK: %[[E:.*]] = ortc.empty : tensor<2x16x2x4xf32>
// CHECK: %[[Y:.*]] = ortc.matmul_into %arg0, %arg1 into %[[E]] {offset = 0 : i64, strides = array<i64: 128, 4, 8, 1>}
// CHECK: ortc.reshape %[[Y]] : tensor<2x16x2x4xf32> -> tensor<2x16x8xf32>
// CHECK-NOT: ortc.transpose
func.func @heads_merged_in_place(%p: tensor<2x2x16x16xf32>, %v: tensor<2x2x16x4xf32>) -> tensor<2x16x8xf32> {
  %y = ortc.matmul %p, %v : tensor<2x2x16x16xf32>, tensor<2x2x16x4xf32> -> tensor<2x2x16x4xf32>
  %t = ortc.transpose %y, [0, 2, 1, 3] : tensor<2x2x16x4xf32> -> tensor<2x16x2x4xf32>
  %r = ortc.reshape %t : tensor<2x16x2x4xf32> -> tensor<2x16x8xf32>
  return %r : tensor<2x16x8xf32>
}

// -----

// The q, k, v gradients concatenated into the QKV projection's: each GEMM writes its
// third, in program order through one buffer. dk^T's product has unit-stride rows in
// its slot, so that GEMM computes dk instead (operands swapped, flags flipped).
// CHECK-LABEL: func.func @qkv_gradients_in_place
// CHECK: %[[E:.*]] = ortc.empty : tensor<2x16x24xf32>
// CHECK: %[[Q:.*]] = ortc.matmul_into %arg0, %arg1 into %[[E]] {offset = 0 : i64, strides = array<i64: 384, 4, 24, 1>}
// CHECK: %[[K:.*]] = ortc.matmul_into %arg0, %arg1 into %[[Q]] {offset = 8 : i64, strides = array<i64: 384, 4, 24, 1>, trans_a = true}
// CHECK: %[[V:.*]] = ortc.matmul_into %arg0, %arg1 into %[[K]] {offset = 16 : i64, strides = array<i64: 384, 4, 24, 1>}
// CHECK: return %[[V]]
// CHECK-NOT: ortc.concat
func.func @qkv_gradients_in_place(%ds: tensor<2x2x16x16xf32>, %x: tensor<2x2x16x4xf32>) -> tensor<2x16x24xf32> {
  %dq = ortc.matmul %ds, %x : tensor<2x2x16x16xf32>, tensor<2x2x16x4xf32> -> tensor<2x2x16x4xf32>
  %dkt = ortc.matmul %x, %ds {trans_a = true} : tensor<2x2x16x4xf32>, tensor<2x2x16x16xf32> -> tensor<2x2x4x16xf32>
  %dv = ortc.matmul %ds, %x : tensor<2x2x16x16xf32>, tensor<2x2x16x4xf32> -> tensor<2x2x16x4xf32>
  %tq = ortc.transpose %dq, [0, 2, 1, 3] : tensor<2x2x16x4xf32> -> tensor<2x16x2x4xf32>
  %tk = ortc.transpose %dkt, [0, 3, 1, 2] : tensor<2x2x4x16xf32> -> tensor<2x16x2x4xf32>
  %tv = ortc.transpose %dv, [0, 2, 1, 3] : tensor<2x2x16x4xf32> -> tensor<2x16x2x4xf32>
  %rq = ortc.reshape %tq : tensor<2x16x2x4xf32> -> tensor<2x16x8xf32>
  %rk = ortc.reshape %tk : tensor<2x16x2x4xf32> -> tensor<2x16x8xf32>
  %rv = ortc.reshape %tv : tensor<2x16x2x4xf32> -> tensor<2x16x8xf32>
  %c = ortc.concat %rq, %rk, %rv {axis = 2 : i64} : (tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x24xf32>
  return %c : tensor<2x16x24xf32>
}

// -----

// A product another op also reads stays a matmul; so does a concat with a piece that is
// not a GEMM's.
// CHECK-LABEL: func.func @products_read_elsewhere
// CHECK-NOT: ortc.matmul_into
// CHECK: ortc.transpose
// CHECK: ortc.concat
func.func @products_read_elsewhere(%a: tensor<2x4x8xf32>, %b: tensor<2x8x4xf32>, %c: tensor<2x4x4xf32>)
    -> (tensor<4x2x4xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>) {
  %y = ortc.matmul %a, %b : tensor<2x4x8xf32>, tensor<2x8x4xf32> -> tensor<2x4x4xf32>
  %t = ortc.transpose %y, [1, 0, 2] : tensor<2x4x4xf32> -> tensor<4x2x4xf32>
  %e = ortc.exp %y : tensor<2x4x4xf32>
  %y2 = ortc.matmul %a, %b : tensor<2x4x8xf32>, tensor<2x8x4xf32> -> tensor<2x4x4xf32>
  %cat = ortc.concat %y2, %c {axis = 2 : i64} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x8xf32>
  return %t, %e, %cat : tensor<4x2x4xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>
}

// -----

// A GEMM's epilogue (step 1d): the bias (through its broadcast) and the GELU after a
// projection join the GEMM in one "gemm" kernel; the product stays inside, the
// pre-activation (read by the backward) and the activation leave it.
// CHECK-LABEL: func.func @gemm_epilogue
// CHECK: %[[K:.*]]:2 = ortc.fused "gemm"(%arg0, %arg1, %arg2)
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<8x32xf32>, %[[W:.*]]: tensor<32x64xf32>, %[[B:.*]]: tensor<64xf32>):
// CHECK-NEXT: %[[P:.*]] = ortc.matmul %[[X]], %[[W]]
// CHECK-NEXT: %[[BB:.*]] = ortc.broadcast_to %[[B]]
// CHECK-NEXT: %[[H:.*]] = ortc.add %[[P]], %[[BB]]
// CHECK-NEXT: %[[G:.*]] = ortc.gelu %[[H]]
// CHECK-NEXT: ortc.yield %[[H]], %[[G]]
// CHECK-NOT: ortc.matmul
// CHECK: return %[[K]]#0, %[[K]]#1
func.func @gemm_epilogue(%x: tensor<8x32xf32>, %w: tensor<32x64xf32>, %b: tensor<64xf32>)
    -> (tensor<8x64xf32>, tensor<8x64xf32>) {
  %p = ortc.matmul %x, %w : tensor<8x32xf32>, tensor<32x64xf32> -> tensor<8x64xf32>
  %bb = ortc.broadcast_to %b : tensor<64xf32> -> tensor<8x64xf32>
  %h = ortc.add %p, %bb : tensor<8x64xf32>
  %g = ortc.gelu %h : tensor<8x64xf32>
  return %h, %g : tensor<8x64xf32>, tensor<8x64xf32>
}

// -----

// A residual add alone after a projection: a one-op epilogue is a kernel too.
// CHECK-LABEL: func.func @gemm_residual
// CHECK: ortc.fused "gemm"(%arg0, %arg1, %arg2)
// CHECK: ortc.matmul
// CHECK-NEXT: ortc.add
func.func @gemm_residual(%x: tensor<8x32xf32>, %w: tensor<32x32xf32>, %r: tensor<8x32xf32>)
    -> tensor<8x32xf32> {
  %p = ortc.matmul %x, %w : tensor<8x32xf32>, tensor<32x32xf32> -> tensor<8x32xf32>
  %y = ortc.add %r, %p : tensor<8x32xf32>
  return %y : tensor<8x32xf32>
}

// -----

// Not when the product is read outside the group (here returned): the GEMM writes it to
// memory anyway, and the add stays a kernel reading it back.
// CHECK-LABEL: func.func @gemm_product_escapes
// CHECK: %[[P:.*]] = ortc.matmul %arg0, %arg1
// CHECK-NOT: ortc.fused "gemm"
// CHECK: return
func.func @gemm_product_escapes(%x: tensor<8x32xf32>, %w: tensor<32x32xf32>, %r: tensor<8x32xf32>)
    -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %p = ortc.matmul %x, %w : tensor<8x32xf32>, tensor<32x32xf32> -> tensor<8x32xf32>
  %y = ortc.add %r, %p : tensor<8x32xf32>
  %z = ortc.mul %y, %y : tensor<8x32xf32>
  return %p, %z : tensor<8x32xf32>, tensor<8x32xf32>
}

// -----

// A row kernel computes the product its rows read (attention's scaled scores before the
// softmax): the GEMM joins it, and the product is never stored.
// CHECK-LABEL: func.func @gemm_into_rows
// CHECK: ortc.fused "rows"(%arg0, %arg1)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ortc.matmul
// CHECK-NEXT: ortc.constant
// CHECK-NEXT: ortc.mul
// CHECK-NEXT: ortc.softmax
// CHECK-NEXT: ortc.yield
func.func @gemm_into_rows(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %p = ortc.matmul %x, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %half = ortc.constant dense<5.000000e-01> : tensor<8x8xf32>
  %ps = ortc.mul %p, %half : tensor<8x8xf32>
  %s = ortc.softmax %ps {axis = 1 : i64} : tensor<8x8xf32>
  return %s : tensor<8x8xf32>
}

// -----

// Not into a row kernel when the product is also read elsewhere (here returned: it is
// stored anyway), nor for a 16-bit GEMM (its library path takes no epilogue). The exp
// that feeds a GEMM stays apart from the mul reading the product (it runs before the
// GEMM); the mul is that GEMM's epilogue.
// CHECK-LABEL: func.func @gemm_not_joined
// CHECK: %[[P:.*]] = ortc.matmul %arg0, %arg1
// CHECK: ortc.fused "rows"(%[[P]])
// CHECK: %[[E:.*]] = ortc.exp %arg0
// CHECK: ortc.fused "gemm"(%[[E]], %arg1)
// CHECK: ortc.matmul {{.*}}f32_result = true
// CHECK-NEXT: ortc.tanh
// CHECK: return
func.func @gemm_not_joined(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>, %xh: tensor<8x8xbf16>,
                           %wh: tensor<8x8xbf16>)
    -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
  %p = ortc.matmul %x, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %half = ortc.constant dense<5.000000e-01> : tensor<8x8xf32>
  %ps = ortc.mul %p, %half : tensor<8x8xf32>
  %s = ortc.softmax %ps {axis = 1 : i64} : tensor<8x8xf32>
  %e = ortc.exp %x : tensor<8x8xf32>
  %q = ortc.matmul %e, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %y = ortc.mul %e, %q : tensor<8x8xf32>
  %h = ortc.matmul %xh, %wh {f32_result = true} : tensor<8x8xbf16>, tensor<8x8xbf16> -> tensor<8x8xf32>
  %t = ortc.tanh %h : tensor<8x8xf32>
  return %s, %y, %t, %p : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}
