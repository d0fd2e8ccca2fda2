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

def Ortc_FusionOpInterface : OpInterface<"FusionOpInterface"> {
  let cppNamespace = "::ortc";
  let description = [{
    How an op joins a generated kernel (passes/fusion/FormKernels.cpp). The rule lives
    with the op, like its gradient: `Pointwise` ops compute each result element from the
    operands' elements at the same index (one scalar expression each); `IndexMap` ops
    move no data, they only say at which index an operand element is read (broadcasts),
    so a kernel reads through them instead of materialising their result. Ops without
    the interface form kernels of their own.
  }];
  let methods = [
    InterfaceMethod<"How the op joins a kernel.", "::ortc::FusionRole", "getFusionRole",
      (ins), [{}], [{ return ::ortc::FusionRole::Pointwise; }]>,
    InterfaceMethod<[{True when recomputing the op inside every consuming kernel costs
      less than writing its result to memory and reading it back (index maps, cheap
      arithmetic). An expensive op with several users is computed once.}],
      "bool", "isCheapToRecompute", (ins), [{}], [{ return false; }]>,
    InterfaceMethod<[{True when this op and `other`, computed in one kernel, share work
      beyond the operands they both read: a dropout and a dropout_grad with the same
      seed, key and ratio draw the same mask, which the kernel then draws once. The
      fusion pass joins a recompute clone to such a sibling.}],
      "bool", "sharesWorkWith", (ins "::mlir::Operation *":$other), [{}],
      [{ return false; }]>
  ];
}

def Ortc_RecomputeOpInterface : OpInterface<"RecomputeOpInterface"> {
  let cppNamespace = "::ortc";
  let description = [{
    An op the recompute pass (passes/checkpointing) may run a second time in the
    backward instead of keeping its results live from the forward: pure and
    deterministic (dropout and random_uniform included: their counter-based generator
    draws the same bits again). `getRecomputeFlops` estimates the arithmetic of one
    run; the policies weigh it against the bytes the recompute frees. Ops without the
    interface (convolutions, losses, updates) are never recomputed.
  }];
  let methods = [
    InterfaceMethod<"Arithmetic of one run of the op (about one per result element by default).",
      "int64_t", "getRecomputeFlops", (ins), [{}],
      [{ return ::ortc::resultElements($_op); }]>,
    InterfaceMethod<[{
        Builds, at `b`'s insertion point and nowhere else, ops that compute result
        `index` again more cheaply than a clone of the op, from values the backward keeps
        anyway: `kept(v)` says whether the forward value `v` stays live into the
        backward, and `map` gives the value to read for an operand that is itself
        recomputed; `flops` receives the arithmetic of the new ops. Returns null, having
        built nothing, where a clone is the way (the default). The new ops must give the
        clone's bits on the CPU target. The recompute pass asks only when kernels will be
        formed (the new ops are meant to fuse).
      }],
      "::mlir::Value", "buildCheaperRecompute",
      (ins "::mlir::OpBuilder &":$b, "unsigned":$index, "::mlir::IRMapping &":$map,
           "::llvm::function_ref<bool(::mlir::Value)>":$kept, "int64_t &":$flops), [{}],
      [{ return {}; }]>
  ];
}

def Ortc_PrecisionOpInterface : OpInterface<"PrecisionOpInterface"> {
  let cppNamespace = "::ortc";
  let description = [{
    How an op takes part in 16-bit training (`ortc build --precision bf16|fp16`,
    passes/mixed_precision), as PyTorch's CPU autocast decides it. `Low` ops (GEMMs,
    convolutions and their gradients) read their float operands rounded to the 16-bit
    type and their results are rounded to it. `Follow` ops (elementwise arithmetic,
    activations, data movement, pooling, dropout, softmax, reductions) give a 16-bit
    result when every float operand is 16-bit (a parameter or constant beside them is
    rounded too: a bias add after a GEMM), and a float32 one otherwise (PyTorch's type
    promotion); they still compute and accumulate in float32. **Ops without the
    interface keep float32**: their 16-bit operands are widened and their results
    stay float32. That is the keep list: losses (autocast's float32 list), LayerNorm
    and BatchNorm (their saved statistics and running averages stay float32), casts,
    scatters, collectives and the optimizer's updates.
  }];
  let methods = [
    InterfaceMethod<"How the op's operands and results are rounded.", "::ortc::PrecisionRule",
      "getPrecisionRule", (ins), [{}], [{ return ::ortc::PrecisionRule::Follow; }]>,
    InterfaceMethod<[{True when the op's kernel adds many terms (a GEMM, a convolution, a
      sum or mean): with `--accum-dtype chunked16 | plain16` it adds them in the 16-bit
      type (the ortc.accum attribute, OpAnnotations.h) when it computes in 16 bits.}],
      "bool", "sumsInLowPrecision", (ins), [{}], [{ return false; }]>
  ];
}

def Ortc_IndexOperandOpInterface : OpInterface<"IndexOperandOpInterface"> {
  let cppNamespace = "::ortc";
  let description = [{
    Integer operands whose values index something (class labels, gather indices) and
    the values they may hold. The artifact records the ranges of those that are step
    inputs, so that the runtime can name an out-of-range element of a feed (its input,
    position, value and the valid range) before a step computes garbage from it.
  }];
  let methods = [
    InterfaceMethod<"Appends each index operand with its valid values.", "void", "getIndexRanges",
      (ins "::llvm::SmallVectorImpl<::ortc::IndexRange> &":$ranges)>
  ];
}

#endif // ORTC_INTERFACES_TD
