// Data movement and reductions: broadcasting, reshapes, permutations, slicing, gathers.
// Every shape parameter is a static attribute; the importer folds ONNX's shape inputs.
#ifndef ORTC_SHAPE_TD
#define ORTC_SHAPE_TD

include "compiler/Dialect/Ortc/OrtcBase.td"

class Ortc_ShapeOp<string mnemonic, list<Trait> traits = []>
    : Ortc_Op<mnemonic, traits # [Pure,
        DeclareOpInterfaceMethods<Ortc_GradientOpInterface>]>;

def Ortc_BroadcastToOp : Ortc_ShapeOp<"broadcast_to", [Ortc_PrecisionOpInterface, Ortc_RecomputeOpInterface,
    DeclareOpInterfaceMethods<Ortc_FusionOpInterface,
                              ["getFusionRole", "isCheapToRecompute"]>]> {
  let summary = "Numpy broadcast of x to the result shape (x's dims right-aligned)";
  let arguments = (ins Ortc_Tensor:$x);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ortc_ReshapeOp : Ortc_ShapeOp<"reshape", [Ortc_PrecisionOpInterface,
    DeclareOpInterfaceMethods<Ortc_RecomputeOpInterface, ["getRecomputeFlops"]>]> {
  let summary = "Same elements in row-major order, new static shape";
  let arguments = (ins Ortc_Tensor:$x);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ortc_TransposeOp : Ortc_ShapeOp<"transpose", [Ortc_PrecisionOpInterface, Ortc_RecomputeOpInterface, InferTypeOpAdaptor]> {
  let summary = "Permutes dims: result dim i is x dim perm[i]";
  let arguments = (ins Ortc_Tensor:$x, DenseI64ArrayAttr:$perm);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x `,` $perm attr-dict `:` type($x) `->` type($result)";
  let hasFolder = 1;
}

def Ortc_ConcatOp : Ortc_ShapeOp<"concat", [Ortc_PrecisionOpInterface, Ortc_RecomputeOpInterface, InferTypeOpAdaptor]> {
  let summary = "Concatenates along `axis`";
  let description = [{
    Canonicalization splices an input that is itself a concat along the same axis (with
    no other user) into this one.
  }];
  let arguments = (ins Variadic<Ortc_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, $result)";
  let hasCanonicalizer = 1;
}

def Ortc_SliceOp : Ortc_ShapeOp<"slice", [Ortc_PrecisionOpInterface, Ortc_RecomputeOpInterface, InferTypeOpAdaptor]> {
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

def Ortc_StridedViewOp : Ortc_Op<"strided_view", [Pure]> {
  let summary = "The elements of x at offset + sum(index[d] * strides[d]): a layout, not a copy";
  let description = [{
    Kernel formation (passes/fusion) reads a matmul operand that the step computes
    by slices, reshapes and transposes of one tensor (attention's heads split from
    the fused QKV projection) through this view of that tensor instead, so the
    copies are never made: the view aliases x in the memory plan, and codegen
    passes its offset and strides to the GEMM as the operand's layout
    (getMatrixLayout). The evaluator materialises it. Strides are in elements,
    non-negative; every element read lies inside x.
  }];
  let arguments = (ins Ortc_Tensor:$x, I64Attr:$offset, DenseI64ArrayAttr:$strides);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The view as a batch of row-major matrices (its last two dims) for a GEMM,
    /// or nullopt where a GEMM cannot read it so (MatrixLayout).
    std::optional<MatrixLayout> getMatrixLayout();
  }];
}

def Ortc_SliceGradOp : Ortc_Op<"slice_grad", [Pure, Ortc_PrecisionOpInterface]> {
  let summary = "Scatters dy into zeros shaped like the slice's input";
  let description = [{
    Folds to dy when dy covers the whole result. Canonicalization turns the sum of two
    slice grads whose boxes (unit steps) abut along one dim and agree on the others
    into one slice grad of their concatenation: the gradients of a Split (q, k, v)
    become one concat instead of a zero-filled scatter per piece and their sums.
  }];
  let arguments = (ins Ortc_FloatTensor:$dy, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$steps);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$dy attr-dict `:` type($dy) `->` type($result)";
  let hasFolder = 1;
  let hasCanonicalizer = 1;
  let hasVerifier = 1;
}

def Ortc_PadOp : Ortc_ShapeOp<"pad", [Ortc_PrecisionOpInterface, Ortc_RecomputeOpInterface, InferTypeOpAdaptor]> {
  let summary = "Constant padding; pads are [begin..., end...], negative crops";
  let arguments = (ins Ortc_Tensor:$x, DenseI64ArrayAttr:$pads,
                       DefaultValuedAttr<F64Attr, "0.0">:$value);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
}

def Ortc_GatherOp : Ortc_ShapeOp<"gather", [Ortc_PrecisionOpInterface, Ortc_RecomputeOpInterface, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<Ortc_IndexOperandOpInterface>]> {
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

class Ortc_ReduceOp<string mnemonic, list<Trait> traits = []>
    : Ortc_ShapeOp<mnemonic, traits # [InferTypeOpAdaptor,
        DeclareOpInterfaceMethods<Ortc_PrecisionOpInterface, ["sumsInLowPrecision"]>,
        DeclareOpInterfaceMethods<Ortc_RecomputeOpInterface, ["getRecomputeFlops"]>]> {
  let summary = "Reduces over `axes` (non-negative, sorted); keeps them as 1 if keepdims";
  let arguments = (ins Ortc_Tensor:$x, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
}

def Ortc_ReduceSumOp : Ortc_ReduceOp<"reduce_sum", [
    DeclareOpInterfaceMethods<Ortc_FusionOpInterface, ["getFusionRole"]>]>;
def Ortc_ReduceMeanOp : Ortc_ReduceOp<"reduce_mean">;
def Ortc_ReduceMaxOp : Ortc_ReduceOp<"reduce_max">;
def Ortc_ReduceProdOp : Ortc_ReduceOp<"reduce_prod">;

def Ortc_ReduceProdGradOp : Ortc_Op<"reduce_prod_grad", [Pure]> {
  let summary = "dx[r, j] = dy[r] * product of x[r, k] over k != j (rows of the last dim)";
  let description = [{
    The gradient of a product over the last dim of `x` ([..., n]; `dy` has x's shape
    without it), as the product of the *other* elements (prefix times suffix
    products), so it is right where elements are zero, unlike prod / x.
    reduce_prod's rule moves any reduced axes last before using it.
  }];
  let arguments = (ins Ortc_FloatTensor:$x, Ortc_FloatTensor:$dy);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$x `,` $dy attr-dict `:` functional-type(operands, $result)";
  let hasVerifier = 1;
}

class Ortc_ArgReduceOp<string mnemonic> : Ortc_Op<mnemonic, [Pure, InferTypeOpAdaptor]> {
  let summary = "Index of the extreme element along `axis` (ONNX ArgMax / ArgMin)";
  let description = [{
    int64 indices; ties go to the first index, or the last with `select_last_index`;
    a NaN counts as the extreme (numpy's rule). Integer results: no gradient.
  }];
  let arguments = (ins Ortc_Tensor:$x, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "true">:$keepdims,
                       DefaultValuedAttr<BoolAttr, "false">:$select_last_index);
  let results = (outs RankedTensorOf<[I64]>:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
}

def Ortc_ArgMaxOp : Ortc_ArgReduceOp<"argmax">;
def Ortc_ArgMinOp : Ortc_ArgReduceOp<"argmin">;

def Ortc_TopKOp : Ortc_ShapeOp<"topk", [Ortc_RecomputeOpInterface, InferTypeOpAdaptor]> {
  let summary = "The k largest (or smallest) elements along `axis` and their int64 indices";
  let description = [{
    Always sorted (largest first, or smallest first), equal values in increasing
    index order, as ONNX TopK asks. The gradient scatters d(values) to the
    selected positions (a scatter_elements add into zeros); indices carry none.
  }];
  let arguments = (ins Ortc_Tensor:$x, I64Attr:$k, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "true">:$largest);
  let results = (outs Ortc_Tensor:$values, RankedTensorOf<[I64]>:$indices);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($values) `,` type($indices)";
}

def Ortc_CumSumOp : Ortc_ShapeOp<"cumsum", [Ortc_RecomputeOpInterface, SameOperandsAndResultType]> {
  let summary = "Cumulative sum along `axis` (ONNX CumSum: exclusive, reverse)";
  let description = [{
    Floats accumulate in double. The gradient is the cumulative sum of dy in the
    other direction with the same `exclusive`.
  }];
  let arguments = (ins Ortc_Tensor:$x, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "false">:$exclusive,
                       DefaultValuedAttr<BoolAttr, "false">:$reverse);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Ortc_GatherElementsOp : Ortc_ShapeOp<"gather_elements", [Ortc_RecomputeOpInterface, InferTypeOpAdaptor]> {
  let summary = "ONNX GatherElements with run-time indices (negative ones wrap once)";
  let description = [{
    result[c] = data[c with c[axis] replaced by indices[c]]; the result has the
    indices' shape. An index outside [-dim, dim) makes the whole result NaN on the
    compiled targets (an error in the evaluator). The gradient is a
    scatter_elements add of dy into zeros.
  }];
  let arguments = (ins Ortc_Tensor:$data, RankedTensorOf<[I64]>:$indices, I64Attr:$axis);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` functional-type(operands, $result)";
}

def Ortc_ScatterElementsOp : Ortc_ShapeOp<"scatter_elements"> {
  let summary = "ONNX ScatterElements: data with updates written (or combined) at indices";
  let description = [{
    result = data, then for every element c of `updates`:
    result[c with c[axis] = indices[c]] = updates[c] (reduction "none"), or is
    combined with it by "add", "mul", "max" or "min". Updates apply in row-major
    order, so repeated indices give the same result on every target and thread
    count. Gradients exist for "none" and "add".
  }];
  let arguments = (ins Ortc_Tensor:$data, RankedTensorOf<[I64]>:$indices,
                       Ortc_Tensor:$updates, I64Attr:$axis,
                       DefaultValuedAttr<StrAttr, "\"none\"">:$reduction);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$data `,` $indices `,` $updates attr-dict `:` functional-type(operands, $result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The kernel libraries' `reduction` argument: none 0, add 1, mul 2, max 3, min 4.
    int reductionCode();
  }];
}

#endif // ORTC_SHAPE_TD
