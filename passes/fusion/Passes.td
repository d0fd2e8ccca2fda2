// Fusion passes: recognise multi-op patterns and replace them by one ortc op.
#ifndef ORTC_PASSES_FUSION_PASSES_TD
#define ORTC_PASSES_FUSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def FuseGelu : Pass<"ortc-fuse-gelu", "mlir::ModuleOp"> {
  let summary = "Fuses exporter-decomposed GELU into ortc.gelu";
  let description = [{
    torch.onnx.export writes exact GELU as x * 0.5 * (1 + erf(x / sqrt(2))) with
    float32 constants. One `ortc.gelu` runs as one kernel with one gradient kernel,
    and computes with an exact sqrt(2) (so float64 evaluation matches PyTorch).
    Matches the Div-by-sqrt(2) and Mul-by-1/sqrt(2) forms and either operand order.
  }];
  let dependentDialects = ["::ortc::OrtcDialect"];
}

def FormKernels : Pass<"ortc-form-kernels", "mlir::ModuleOp"> {
  let summary = "Partitions each step function into kernels (ortc.fused regions)";
  let description = [{
    Runs after the training passes and before memory planning. Ops join a kernel by
    their FusionOpInterface: chains of pointwise ops over one shape become one
    `ortc.fused "pointwise"` region that yields only the values used outside it;
    broadcasts feeding the chain are read as index maps inside it (and recomputed
    in every kernel that reads them: they cost nothing), splat constants become
    literals. An op with several users is computed once: it joins the kernel of its
    consumers only where that keeps every other user after the kernel. A lone
    pointwise op that reads no broadcast stays as it is (it already is one kernel).
  }];
  let dependentDialects = ["::ortc::OrtcDialect"];
}

#endif // ORTC_PASSES_FUSION_PASSES_TD
