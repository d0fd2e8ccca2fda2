// Loss and training ops: cross-entropy and its gradient, optimizer updates gated by a
// device-side flag, the finiteness check that computes that flag, and the all-reduce
// of a data-parallel step.
#ifndef ORTC_TRAINING_TD
#define ORTC_TRAINING_TD

include "compiler/Dialect/Ortc/OrtcBase.td"

def Ortc_SoftmaxCrossEntropyOp : Ortc_Op<"softmax_cross_entropy", [Pure,
    InferTypeOpAdaptor, Ortc_ReadsStoredFloats,
    DeclareOpInterfaceMethods<Ortc_GradientOpInterface>,
    DeclareOpInterfaceMethods<Ortc_IndexOperandOpInterface>]> {
  let summary = "Mean cross-entropy of logits [N,C] against labels [N] (PyTorch semantics)";
  let description = [{
    `reduction` is "mean" (over rows whose label is not `ignore_index`) or "sum".
    The result is a rank-0 tensor of the logits' type, float32 for 16-bit logits (the
    loss is on autocast's float32 list; a --precision build reads the stored logits).
  }];
  let arguments = (ins Ortc_FloatTensor:$logits, Ortc_IndexTensor:$labels,
                       OptionalAttr<I64Attr>:$ignore_index,
                       DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction);
  let results = (outs Ortc_FloatTensor:$loss);
  let assemblyFormat = "$logits `,` $labels attr-dict `:` functional-type(operands, $loss)";
  let hasVerifier = 1;
}

def Ortc_SoftmaxCrossEntropyGradOp : Ortc_Op<"softmax_cross_entropy_grad", [Pure,
    Ortc_RowInPlace, Ortc_ReadsStoredFloats]> {
  let summary = "dlogits of softmax_cross_entropy given the scalar dloss";
  let description = [{
    The result has the logits' shape; its float type may differ from theirs (16-bit
    dlogits from float32 logits or the reverse, ReadsStoredFloats).
  }];
  let arguments = (ins Ortc_FloatTensor:$logits, Ortc_IndexTensor:$labels,
                       Ortc_FloatTensor:$dloss, OptionalAttr<I64Attr>:$ignore_index,
                       DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$logits `,` $labels `,` $dloss attr-dict `:` functional-type(operands, $result)";
  let hasVerifier = 1;
}

def Ortc_AllFiniteOp : Ortc_Op<"all_finite", [Pure]> {
  let summary = "True iff every element of every input is finite";
  let description = [{
    `each[i]` says whether input i is all finite, so that a step that is not can name
    the culprit (the loss, or which gradient).
  }];
  let arguments = (ins Variadic<Ortc_FloatTensor>:$inputs);
  let results = (outs 0DTensorOf<[I1]>:$result, 1DTensorOf<[I1]>:$each);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result) `,` type($each)";
  let hasVerifier = 1;
}

def Ortc_AllReduceOp : Ortc_Op<"all_reduce", [SameOperandsAndResultType]> {
  let summary = "Sum or mean of a tensor over the ranks of a data-parallel run";
  let description = [{
    Every rank passes its value and receives the same reduction of all ranks' values
    (`mean`: their sum divided by the number of ranks; `sum`; `min`, which for i1 flags
    is "true on every rank"). It communicates, so it is not
    pure: nothing removes, merges or recomputes it. Every rank runs the same artifact
    and so issues its all_reduces in the same order. A process that runs alone (no MPI
    launcher) is a world of one: the result is the input.
  }];
  let arguments = (ins AnyTypeOf<[Ortc_FloatTensor, Ortc_BoolTensor]>:$input,
                       DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction);
  let results = (outs AnyTypeOf<[Ortc_FloatTensor, Ortc_BoolTensor]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Ortc_ReduceScatterOp : Ortc_Op<"reduce_scatter"> {
  let summary = "Rank r's share of the sum or mean over the ranks of a 1-D tensor";
  let description = [{
    ZeRO's gradient exchange: the input [ranks * S] of every rank is reduced element-wise
    (`mean` divides by the ranks) and rank r receives elements [r * S, (r + 1) * S). The
    shapes fix the number of ranks (`ranks`), which the run must have. Communicates, so
    it is not pure (see all_reduce).
  }];
  let arguments = (ins 1DTensorOf<[F32, F64]>:$input, I64Attr:$ranks,
                       DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction);
  let results = (outs 1DTensorOf<[F32, F64]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ortc_AllGatherOp : Ortc_Op<"all_gather"> {
  let summary = "The ranks' 1-D tensors [S], concatenated in rank order: [ranks * S]";
  let description = [{
    ZeRO's parameter exchange: after each rank updated its shard, every rank receives all
    shards. Communicates, so it is not pure (see all_reduce).
  }];
  let arguments = (ins 1DTensorOf<[F32, F64]>:$input, I64Attr:$ranks);
  let results = (outs 1DTensorOf<[F32, F64]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ortc_RankShardOp : Ortc_Op<"rank_shard", [Pure]> {
  let summary = "This rank's share [S] of a 1-D tensor [ranks * S]";
  let description = [{
    Elements [r * S, (r + 1) * S) where r is the rank of the process running the step:
    the slice of the parameters a ZeRO rank updates. No communication.
  }];
  let arguments = (ins 1DTensorOf<[F32, F64]>:$input, I64Attr:$ranks);
  let results = (outs 1DTensorOf<[F32, F64]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ortc_SgdUpdateOp : Ortc_Op<"sgd_update", [Pure,
    DeclareOpInterfaceMethods<Ortc_FusionOpInterface, ["getFusionRole"]>]> {
  let summary = "One torch.optim.SGD step of a parameter, skipped when !apply";
  let description = [{
    Returns the new parameter and, when momentum != 0, the new momentum buffer. `step`
    is the 1-based step count (the first step seeds the buffer with the gradient).
  }];
  let arguments = (ins Ortc_FloatTensor:$param, Ortc_FloatTensor:$grad,
                       Optional<Ortc_FloatTensor>:$momentum_buffer,
                       0DTensorOf<[F32, F64]>:$lr, 0DTensorOf<[I64]>:$step,
                       0DTensorOf<[I1]>:$apply,
                       F64Attr:$momentum, F64Attr:$dampening, BoolAttr:$nesterov,
                       F64Attr:$weight_decay);
  let results = (outs Variadic<Ortc_FloatTensor>:$results);
  let assemblyFormat = "$param `,` $grad (`,` $momentum_buffer^)? `lr` $lr `step` $step `apply` $apply attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Ortc_AdamWUpdateOp : Ortc_Op<"adamw_update", [Pure,
    DeclareOpInterfaceMethods<Ortc_FusionOpInterface, ["getFusionRole"]>]> {
  let summary = "One torch.optim.AdamW step (bias-corrected), skipped when !apply";
  let description = [{
    The hyperparameters are run-time scalars like the learning rate (`ortc train
    --beta1 ...` sets them; the build's values are their defaults).
  }];
  let arguments = (ins Ortc_FloatTensor:$param, Ortc_FloatTensor:$grad,
                       Ortc_FloatTensor:$m, Ortc_FloatTensor:$v,
                       0DTensorOf<[F32, F64]>:$lr, 0DTensorOf<[I64]>:$step,
                       0DTensorOf<[I1]>:$apply,
                       0DTensorOf<[F32, F64]>:$beta1, 0DTensorOf<[F32, F64]>:$beta2,
                       0DTensorOf<[F32, F64]>:$eps, 0DTensorOf<[F32, F64]>:$weight_decay);
  let results = (outs Ortc_FloatTensor:$new_param, Ortc_FloatTensor:$new_m,
                      Ortc_FloatTensor:$new_v);
  let assemblyFormat = "$param `,` $grad `,` $m `,` $v `lr` $lr `step` $step `apply` $apply `betas` $beta1 `,` $beta2 `eps` $eps `weight_decay` $weight_decay attr-dict `:` functional-type(operands, results)";
}

#endif // ORTC_TRAINING_TD
