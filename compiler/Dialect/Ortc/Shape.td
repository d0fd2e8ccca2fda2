// Data movement and reductions: broadcasting, reshapes, permutations, slicing, gathers.
// Every shape parameter is a static attribute; the importer folds ONNX's shape inputs.
#ifndef ORTC_SHAPE_TD
#define ORTC_SHAPE_TD

include "compiler/Dialect/Ortc/OrtcBase.td"

class Ortc_ShapeOp<string mnemonic, list<Trait> traits = []>
    : Ortc_Op<mnemonic, traits # [Pure,
        DeclareOpInterfaceMethods<Ortc_GradientOpInterface>]>;

def Ortc_BroadcastToOp : Ortc_ShapeOp<"broadcast_to"> {
  let summary = "Numpy broadcast of x to the result shape (x's dims right-aligned)";
  let arguments = (ins Ortc_Tensor:$x);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ortc_ReshapeOp : Ortc_ShapeOp<"reshape"> {
  let summary = "Same elements in row-major order, new static shape";
  let arguments = (ins Ortc_Tensor:$x);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ortc_TransposeOp : Ortc_ShapeOp<"transpose", [InferTypeOpAdaptor]> {
  let summary = "Permutes dims: result dim i is x dim perm[i]";
  let arguments = (ins Ortc_Tensor:$x, DenseI64ArrayAttr:$perm);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x `,` $perm attr-dict `:` type($x) `->` type($result)";
  let hasFolder = 1;
}

def Ortc_ConcatOp : Ortc_ShapeOp<"concat", [InferTypeOpAdaptor]> {
  let summary = "Concatenates along `axis`";
  let arguments = (ins Variadic<Ortc_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, $result)";
}

def Ortc_SliceOp : Ortc_ShapeOp<"slice", [InferTypeOpAdaptor]> {
  let summary = "Strided slice with normalised starts and sizes per dim";
  let description = [{
    Result dim d takes `sizes[d]` elements of x starting at `starts[d]` with stride
    `steps[d]` (which may be negative). The importer normalises ONNX Slice's clamped
    start/end/axes into this form.
  }];
  let arguments = (ins Ortc_Tensor:$x, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$sizes, DenseI64ArrayAttr:$steps);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
}

def Ortc_SliceGradOp : Ortc_Op<"slice_grad", [Pure]> {
  let summary = "Scatters dy into zeros shaped like the slice's input";
  let arguments = (ins Ortc_FloatTensor:$dy, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$steps);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$dy attr-dict `:` type($dy) `->` type($result)";
}

def Ortc_PadOp : Ortc_ShapeOp<"pad", [InferTypeOpAdaptor]> {
  let summary = "Constant padding; pads are [begin..., end...], negative crops";
  let arguments = (ins Ortc_Tensor:$x, DenseI64ArrayAttr:$pads,
                       DefaultValuedAttr<F64Attr, "0.0">:$value);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
}

def Ortc_GatherOp : Ortc_ShapeOp<"gather", [InferTypeOpAdaptor]> {
  let summary = "ONNX Gather along `axis` (negative indices count from the end)";
  let arguments = (ins Ortc_Tensor:$data, Ortc_IndexTensor:$indices, I64Attr:$axis);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` functional-type(operands, $result)";
}

def Ortc_GatherGradOp : Ortc_Op<"gather_grad", [Pure]> {
  let summary = "Scatter-add of dy into zeros shaped like Gather's data";
  let arguments = (ins Ortc_IndexTensor:$indices, Ortc_FloatTensor:$dy, I64Attr:$axis);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$indices `,` $dy attr-dict `:` functional-type(operands, $result)";
}

class Ortc_ReduceOp<string mnemonic> : Ortc_ShapeOp<mnemonic, [InferTypeOpAdaptor]> {
  let summary = "Reduces over `axes` (non-negative, sorted); keeps them as 1 if keepdims";
  let arguments = (ins Ortc_Tensor:$x, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
}

def Ortc_ReduceSumOp : Ortc_ReduceOp<"reduce_sum">;
def Ortc_ReduceMeanOp : Ortc_ReduceOp<"reduce_mean">;
def Ortc_ReduceMaxOp : Ortc_ReduceOp<"reduce_max">;

#endif // ORTC_SHAPE_TD
