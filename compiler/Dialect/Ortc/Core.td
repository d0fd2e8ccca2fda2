// Constants and named weights. Weights are symbols (`ortc.global`) read by `ortc.weight`:
// tensor data never lives in the IR, and nothing folds through a weight.
#ifndef ORTC_CORE_TD
#define ORTC_CORE_TD

include "compiler/Dialect/Ortc/OrtcBase.td"

def Ortc_ConstantOp : Ortc_Op<"constant", [ConstantLike, Pure,
    AllTypesMatch<["value", "result"]>]> {
  let summary = "A small constant tensor (shape data, scalars, folded masks)";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
  let hasVerifier = 1;
}

def Ortc_GlobalOp : Ortc_Op<"global", [Symbol]> {
  let summary = "A named weight of the model (an ONNX initializer); data lives outside the IR";
  let description = [{
    `kind` classifies the weight: "weight" straight after import, then "parameter",
    "buffer" (non-trained state, e.g. BatchNorm running stats), "frozen", "constant" or
    "state" (optimizer state) once the training passes ran. `onnx_name` is the
    initializer's name in the model.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$type,
                       StrAttr:$kind, StrAttr:$onnx_name);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
}

def Ortc_WeightOp : Ortc_Op<"weight", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Reads the current value of a named weight";
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

#endif // ORTC_CORE_TD
