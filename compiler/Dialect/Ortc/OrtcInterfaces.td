// Op interfaces of the ortc dialect. The gradient rule of an op lives beside the op
// (in its family's .cpp), so the autodiff pass only walks the graph backwards.
#ifndef ORTC_INTERFACES_TD
#define ORTC_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Ortc_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::ortc";
  let description = [{
    The vector-Jacobian product of an op. `resultGrads` has one entry per result: the
    gradient of the loss w.r.t. that result, or a null Value where none flows.
    `operandGrads` receives one entry per operand: the gradient w.r.t. that operand
    (same type as the operand), or a null Value for non-differentiable operands
    (integer tensors, indices, seeds). The builder is positioned after the op.
  }];
  let methods = [
    InterfaceMethod<"Builds the gradients w.r.t. the operands.",
      "::llvm::LogicalResult", "buildGradient",
      (ins "::mlir::OpBuilder &":$b,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

#endif // ORTC_INTERFACES_TD
