// RUN: ortc-opt --ortc-fuse-gelu --canonicalize %s | FileCheck %s

// The exporter's exact GELU, x * 0.5 * (1 + erf(x / sqrt 2)) with float32 constants,
// in both orders, becomes one ortc.gelu; a near-miss constant does not.
func.func @forward(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %s2 = ortc.constant dense<1.41421354> : tensor<4xf32>
  %is2 = ortc.constant dense<0.707106769> : tensor<4xf32>
  %one = ortc.constant dense<1.0> : tensor<4xf32>
  %half = ortc.constant dense<0.5> : tensor<4xf32>
  %d = ortc.div %x, %s2 : tensor<4xf32>
  %e = ortc.erf %d : tensor<4xf32>
  %a = ortc.add %e, %one : tensor<4xf32>
  %m = ortc.mul %x, %a : tensor<4xf32>
  %g1 = ortc.mul %m, %half : tensor<4xf32>
  %xh = ortc.mul %half, %x : tensor<4xf32>
  %d2 = ortc.mul %x, %is2 : tensor<4xf32>
  %e2 = ortc.erf %d2 : tensor<4xf32>
  %a2 = ortc.add %one, %e2 : tensor<4xf32>
  %g2 = ortc.mul %xh, %a2 : tensor<4xf32>
  %d3 = ortc.div %x, %half : tensor<4xf32>
  %e3 = ortc.erf %d3 : tensor<4xf32>
  %a3 = ortc.add %e3, %one : tensor<4xf32>
  %m3 = ortc.mul %x, %a3 : tensor<4xf32>
  %g3 = ortc.mul %m3, %half : tensor<4xf32>
  return %g1, %g2, %g3 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
// CHECK: %[[G1:.*]] = ortc.gelu %arg0 : tensor<4xf32>
// CHECK: %[[G2:.*]] = ortc.gelu %arg0 : tensor<4xf32>
// CHECK: ortc.erf
// CHECK: return %[[G1]], %[[G2]], %{{.*}}
