// Neural-network ops: GEMM, convolution, pooling, normalisation, softmax, dropout and
// the gradient-only ops their gradient rules build.
#ifndef ORTC_NN_TD
#define ORTC_NN_TD

include "compiler/Dialect/Ortc/OrtcBase.td"

def Ortc_MatMulOp : Ortc_Op<"matmul", [Pure, InferTypeOpAdaptor, DeclareOpInterfaceMethods<Ortc_PrecisionOpInterface, ["getPrecisionRule", "sumsInLowPrecision"]>,
    DeclareOpInterfaceMethods<Ortc_GradientOpInterface>, DeclareOpInterfaceMethods<Ortc_RecomputeOpInterface, ["getRecomputeFlops"]>,
    DeclareOpInterfaceMethods<Ortc_FusionOpInterface, ["getFusionRole"]>]> {
  let summary = "Batched matrix product op(a) x op(b); batch dims are equal";
  let description = [{
    The result has the operands' element type, except with `f32_result`: 16-bit
    operands (bf16 or f16, both the same) and a float32 result. 16-bit products are
    summed in float32, as a tensor-core GEMM does, and a 16-bit result rounds each sum
    as it is stored (mixed precision reads its 16-bit copies so, and writes 16 bits
    where the product is only rounded).
  }];
  let arguments = (ins Ortc_FloatTensor:$a, Ortc_FloatTensor:$b,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_b,
                       DefaultValuedAttr<BoolAttr, "false">:$f32_result);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$a `,` $b attr-dict `:` type($a) `,` type($b) `->` type($result)";
  // An operand that is a transpose of its last two dims becomes the flag (in place):
  // libraries read transposed operands without a copy.
  let hasFolder = 1;
}

// Convolution geometry shared by conv and its gradients: strides, pads ([begin...,
// end...]), dilations per spatial dim, and the group count.
def Ortc_ConvOp : Ortc_Op<"conv", [Pure, InferTypeOpAdaptor, DeclareOpInterfaceMethods<Ortc_PrecisionOpInterface, ["getPrecisionRule", "sumsInLowPrecision"]>,
    DeclareOpInterfaceMethods<Ortc_GradientOpInterface>, DeclareOpInterfaceMethods<Ortc_RecomputeOpInterface, ["getRecomputeFlops"]>]> {
  let summary = "N-d convolution (ONNX Conv, NC... layout, weight MC/g k...)";
  let arguments = (ins Ortc_FloatTensor:$x, Ortc_FloatTensor:$w,
                       Optional<Ortc_FloatTensor>:$bias,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$x `,` $w (`,` $bias^)? attr-dict `:` functional-type(operands, $result)";
}

def Ortc_ConvGradInputOp : Ortc_Op<"conv_grad_input", [Pure, DeclareOpInterfaceMethods<Ortc_PrecisionOpInterface, ["getPrecisionRule", "sumsInLowPrecision"]>,
    DeclareOpInterfaceMethods<Ortc_GradientOpInterface>]> {
  let summary = "dx of conv given dy and w; the result type gives x's shape";
  let description = [{
    The transposed convolution of `dy` by `w` (also ONNX ConvTranspose, which imports
    as this op). Input positions no window reads are 0, so the result may extend past
    the last window by less than a stride (ConvTranspose's output_padding); the end
    pads are not read.
  }];
  let arguments = (ins Ortc_FloatTensor:$dy, Ortc_FloatTensor:$w,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$dy `,` $w attr-dict `:` functional-type(operands, $result)";
}

def Ortc_ConvGradWeightOp : Ortc_Op<"conv_grad_weight", [Pure, DeclareOpInterfaceMethods<Ortc_PrecisionOpInterface, ["getPrecisionRule", "sumsInLowPrecision"]>]> {
  let summary = "dw of conv given dy and x; the result type gives w's shape";
  let arguments = (ins Ortc_FloatTensor:$dy, Ortc_FloatTensor:$x,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$dy `,` $x attr-dict `:` functional-type(operands, $result)";
}

class Ortc_PoolOp<string mnemonic> : Ortc_Op<mnemonic, [Pure, InferTypeOpAdaptor,
    Ortc_PrecisionOpInterface,
    DeclareOpInterfaceMethods<Ortc_GradientOpInterface>]> {
  let arguments = (ins Ortc_FloatTensor:$x, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                       DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
}

def Ortc_MaxPoolOp : Ortc_PoolOp<"max_pool">;
def Ortc_AvgPoolOp : Ortc_PoolOp<"avg_pool">;

def Ortc_MaxPoolGradOp : Ortc_Op<"max_pool_grad", [Pure, Ortc_PrecisionOpInterface]> {
  let summary = "dx of max_pool: dy routed to the first maximum of each window";
  let arguments = (ins Ortc_FloatTensor:$x, Ortc_FloatTensor:$dy,
                       DenseI64ArrayAttr:$kernel_shape, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$x `,` $dy attr-dict `:` functional-type(operands, $result)";
}

def Ortc_AvgPoolGradOp : Ortc_Op<"avg_pool_grad", [Pure, Ortc_PrecisionOpInterface]> {
  let summary = "dx of avg_pool; the result type gives x's shape";
  let arguments = (ins Ortc_FloatTensor:$dy, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$dy attr-dict `:` type($dy) `->` type($result)";
}

def Ortc_BatchNormTrainOp : Ortc_Op<"batch_norm_train", [Pure, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<Ortc_GradientOpInterface>, DeclareOpInterfaceMethods<Ortc_RecomputeOpInterface, ["getRecomputeFlops"]>]> {
  let summary = "BatchNorm on batch statistics: y, batch mean, biased batch variance";
  let description = [{
    `running_mean`/`running_var` are the running statistics this op maintains (ONNX:
    new = running * momentum + batch * (1 - momentum)); the training pass writes that
    update, with PyTorch's unbiased batch variance, and the eval step reads them.
    With `sync` (data parallel, --sync-batchnorm) the batch is every rank's: mean and
    variance are over all ranks' x, as torch.nn.SyncBatchNorm's.
  }];
  let arguments = (ins Ortc_FloatTensor:$x, Ortc_FloatTensor:$scale,
                       Ortc_FloatTensor:$bias, Ortc_FloatTensor:$running_mean,
                       Ortc_FloatTensor:$running_var, F64Attr:$epsilon,
                       F64Attr:$momentum, UnitAttr:$sync);
  let results = (outs Ortc_FloatTensor:$y, Ortc_FloatTensor:$mean, Ortc_FloatTensor:$var);
  let assemblyFormat = "$x `,` $scale `,` $bias `,` $running_mean `,` $running_var attr-dict `:` functional-type(operands, results)";
}

def Ortc_BatchNormGradOp : Ortc_Op<"batch_norm_grad", [Pure]> {
  let summary = "dx, dscale, dbias of batch_norm_train through the batch statistics";
  let description = [{
    With `sync`, the statistics were every rank's: dx also carries the other ranks'
    losses through them (the sums of dy and dy * xhat over all ranks, as
    torch.nn.SyncBatchNorm's backward); dscale and dbias stay this rank's own (the
    data-parallel average adds them up).
  }];
  let arguments = (ins Ortc_FloatTensor:$x, Ortc_FloatTensor:$scale,
                       Ortc_FloatTensor:$mean, Ortc_FloatTensor:$var,
                       Ortc_FloatTensor:$dy, F64Attr:$epsilon, UnitAttr:$sync);
  let results = (outs Ortc_FloatTensor:$dx, Ortc_FloatTensor:$dscale,
                      Ortc_FloatTensor:$dbias);
  let assemblyFormat = "$x `,` $scale `,` $mean `,` $var `,` $dy attr-dict `:` functional-type(operands, results)";
}

def Ortc_BatchNormInferOp : Ortc_Op<"batch_norm_infer", [Pure,
    DeclareOpInterfaceMethods<Ortc_GradientOpInterface>, DeclareOpInterfaceMethods<Ortc_RecomputeOpInterface, ["getRecomputeFlops"]>]> {
  let summary = "BatchNorm with given (running) statistics";
  let description = [{
    Trains like a PyTorch BatchNorm module in eval mode: x, scale and bias get
    gradients, the statistics are frozen (no gradient, never updated).
  }];
  let arguments = (ins Ortc_FloatTensor:$x, Ortc_FloatTensor:$scale,
                       Ortc_FloatTensor:$bias, Ortc_FloatTensor:$mean,
                       Ortc_FloatTensor:$var, F64Attr:$epsilon);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$x `,` $scale `,` $bias `,` $mean `,` $var attr-dict `:` functional-type(operands, results)";
}

def Ortc_LayerNormOp : Ortc_Op<"layer_norm", [Pure, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<Ortc_GradientOpInterface>,
    DeclareOpInterfaceMethods<Ortc_RecomputeOpInterface, ["getRecomputeFlops", "buildCheaperRecompute"]>]> {
  let summary = "Normalises over dims [axis, rank); returns y, mean and 1/std (kept dims)";
  let arguments = (ins Ortc_FloatTensor:$x, Ortc_FloatTensor:$scale,
                       Optional<Ortc_FloatTensor>:$bias, I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Ortc_FloatTensor:$y, Ortc_FloatTensor:$mean,
                      Ortc_FloatTensor:$inv_std);
  let assemblyFormat = "$x `,` $scale (`,` $bias^)? attr-dict `:` functional-type(operands, results)";
}

def Ortc_LayerNormGradOp : Ortc_Op<"layer_norm_grad", [Pure]> {
  let summary = "dx, dscale, dbias of layer_norm";
  let arguments = (ins Ortc_FloatTensor:$x, Ortc_FloatTensor:$scale,
                       Ortc_FloatTensor:$mean, Ortc_FloatTensor:$inv_std,
                       Ortc_FloatTensor:$dy, I64Attr:$axis);
  let results = (outs Ortc_FloatTensor:$dx, Ortc_FloatTensor:$dscale,
                      Ortc_FloatTensor:$dbias);
  let assemblyFormat = "$x `,` $scale `,` $mean `,` $inv_std `,` $dy attr-dict `:` functional-type(operands, results)";
}

class Ortc_SoftmaxLikeOp<string mnemonic> : Ortc_Op<mnemonic, [Pure,
    SameOperandsAndResultType, Ortc_PrecisionOpInterface,
    DeclareOpInterfaceMethods<Ortc_FusionOpInterface, ["getFusionRole"]>, DeclareOpInterfaceMethods<Ortc_GradientOpInterface>, DeclareOpInterfaceMethods<Ortc_RecomputeOpInterface, ["getRecomputeFlops"]>]> {
  let arguments = (ins Ortc_FloatTensor:$x, I64Attr:$axis);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($result)";
}
def Ortc_SoftmaxOp : Ortc_SoftmaxLikeOp<"softmax">;
def Ortc_LogSoftmaxOp : Ortc_SoftmaxLikeOp<"log_softmax">;

class Ortc_SoftmaxGradLikeOp<string mnemonic> : Ortc_Op<mnemonic, [Pure,
    SameOperandsAndResultType, Ortc_PrecisionOpInterface,
    DeclareOpInterfaceMethods<Ortc_FusionOpInterface, ["getFusionRole"]>]> {
  let summary = "dx given the forward output y and dy";
  let arguments = (ins Ortc_FloatTensor:$y, Ortc_FloatTensor:$dy, I64Attr:$axis);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$y `,` $dy attr-dict `:` type($result)";
}
def Ortc_SoftmaxGradOp : Ortc_SoftmaxGradLikeOp<"softmax_grad">;
def Ortc_LogSoftmaxGradOp : Ortc_SoftmaxGradLikeOp<"log_softmax_grad">;

def Ortc_DropoutOp : Ortc_Op<"dropout", [Pure,
    AllTypesMatch<["x", "result"]>, DeclareOpInterfaceMethods<Ortc_GradientOpInterface>,
    DeclareOpInterfaceMethods<Ortc_FusionOpInterface, ["sharesWorkWith"]>,
    Ortc_RecomputeOpInterface, Ortc_PrecisionOpInterface]> {
  let summary = "Inverted dropout; mask from a counter-based RNG keyed by (seed, key, i)";
  let arguments = (ins Ortc_FloatTensor:$x, TensorOf<[I64]>:$seed, F64Attr:$ratio,
                       I64Attr:$key);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$x `,` $seed attr-dict `:` type($x) `,` type($seed)";
}

def Ortc_RandomUniformOp : Ortc_Op<"random_uniform", [Pure,
    DeclareOpInterfaceMethods<Ortc_GradientOpInterface>, Ortc_RecomputeOpInterface]> {
  let summary = "Uniform [low, high) draws from the dropout RNG, keyed by (seed, key, i)";
  let description = [{
    ONNX RandomUniform(Like) and the uniforms behind Bernoulli / RandomNormal(Like):
    element i is low + (high - low) * u(seed, key, i) with the same counter-based
    generator as `dropout`, so a training-mode export's hand-written dropout draws
    the same masks on every target, under recompute and after a resume. The model's
    own `seed` attribute is not used: the step's seed (mixed with the step count)
    is, as for Dropout.
  }];
  let arguments = (ins TensorOf<[I64]>:$seed, F64Attr:$low, F64Attr:$high, I64Attr:$key);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$seed attr-dict `:` type($seed) `->` type($result)";
}

def Ortc_DropoutGradOp : Ortc_Op<"dropout_grad", [Pure, AllTypesMatch<["dy", "result"]>,
    DeclareOpInterfaceMethods<Ortc_FusionOpInterface, ["sharesWorkWith"]>,
    Ortc_PrecisionOpInterface]> {
  let summary = "dy through the same dropout mask";
  let arguments = (ins Ortc_FloatTensor:$dy, TensorOf<[I64]>:$seed, F64Attr:$ratio,
                       I64Attr:$key);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$dy `,` $seed attr-dict `:` type($dy) `,` type($seed)";
}

#endif // ORTC_NN_TD
