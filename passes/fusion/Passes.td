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

#endif // ORTC_PASSES_FUSION_PASSES_TD
