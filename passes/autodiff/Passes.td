// The training passes: from an inference graph to the whole training step.
#ifndef ORTC_PASSES_AUTODIFF_PASSES_TD
#define ORTC_PASSES_AUTODIFF_PASSES_TD

include "mlir/Pass/PassBase.td"

def AttachLoss : Pass<"ortc-attach-loss", "mlir::ModuleOp"> {
  let summary = "Turns @forward into a function that returns the scalar training loss";
  let description = [{
    `cross_entropy` adds an int64 labels input shaped like the logits without their
    class axis and takes PyTorch's `F.cross_entropy(logits, labels,
    ignore_index=-100, label_smoothing=...)`: the class axis is 1 ([N, C, d1...],
    as PyTorch and ONNX's SoftmaxCrossEntropyLoss), except for rank-3 logits, read
    as a language model's [B, T, V] (class axis 2) unless `class-axis` says
    otherwise; `mse` adds a float target shaped like the output; `none`
    uses the model's own scalar output `loss-output`.
  }];
  let options = [
    Option<"loss", "loss", "std::string", "\"cross_entropy\"",
           "cross_entropy | mse | none">,
    Option<"labels", "labels", "std::string", "\"labels\"",
           "Name of the labels (or target) input to add">,
    Option<"logits", "logits", "std::string", "\"\"",
           "Output the loss reads (needed when the model has several)">,
    Option<"ignoreIndex", "ignore-index", "int64_t", "-100",
           "cross_entropy: label value left out of the mean (PyTorch's default -100)">,
    Option<"classAxis", "class-axis", "int64_t", "INT64_MIN",
           "cross_entropy: the class axis of the logits (default: 1, or the last axis "
           "for rank-3 [B, T, V] language-model logits)">,
    Option<"labelSmoothing", "label-smoothing", "double", "0.0",
           "cross_entropy: PyTorch's label_smoothing">,
    Option<"lossOutput", "loss-output", "std::string", "\"\"",
           "none: the model's scalar loss output">
  ];
  let dependentDialects = ["::ortc::OrtcDialect"];
}

def Autodiff : Pass<"ortc-autodiff", "mlir::ModuleOp"> {
  let summary = "Reverse-mode autodiff: builds @train_step (loss + gradients) and @eval_step";
  let description = [{
    Classifies every weight (parameter, buffer, frozen, constant) by the rule of
    WeightRules.h (exporter-made constants never train; --trainable / --freeze
    override; a glob that matches no weight is an error), makes parameters and
    buffers arguments of `@train_step`, walks the forward ops backwards calling each
    op's GradientOpInterface, sums gradients of values used more than once, and
    returns the loss, one gradient per parameter and the updated BatchNorm running
    statistics. Also builds `@eval_step` (inference semantics, loss only).
  }];
  let options = [
    ListOption<"freeze", "freeze", "std::string",
               "Globs of weight names kept out of training">,
    ListOption<"trainable", "trainable", "std::string",
               "Globs of weight names trained even where the rule says constant">,
    Option<"syncBatchnorm", "sync-batchnorm", "bool", "false",
           "Data parallel: BatchNorm statistics over every rank's batch "
           "(torch.nn.SyncBatchNorm)">
  ];
  let dependentDialects = ["::ortc::OrtcDialect"];
}

def Optimizer : Pass<"ortc-optimizer", "mlir::ModuleOp"> {
  let summary = "Replaces @train_step's gradients by gated optimizer updates";
  let description = [{
    Adds the run-time learning rate `lr`, the step count and the optimizer state
    (explicit arguments tied to results), the "loss and all gradients finite" flag
    that gates every update, optional global-norm clipping, and SGD or AdamW updates
    with PyTorch's semantics. With grad-accum, gradient accumulation over
    micro-batches: @accumulate_step runs for all but the last micro-batch of an
    optimizer step, @train_step for the last one. With data-parallel, the loss and the
    gradients (after accumulation) become their mean over the ranks, in buckets of
    gradients packed in the order the backward computes them (DataParallel.h). With
    zero=1 (ZeRO-1) the gradients are reduce-scattered instead and each rank updates
    its shard of the flattened parameters with its shard of the optimizer state, then
    all ranks all-gather the parameters. With loss-scale-init > 0, dynamic loss scaling
    as PyTorch's GradScaler: the backward starts from the scale (the seed autodiff
    marked `ortc.loss_seed`) instead of 1, the gradients are divided by it before the
    finite check, and the scale, init * 2^`loss_scale.exponent` (state), halves after
    a step that is not finite (skipped: nothing else changes) and doubles after
    loss-scale-interval finite steps in a row (`loss_scale.growth`, state). The step
    returns the scale it used (`loss_scale`).
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"sgd\"", "sgd | adamw">,
    Option<"momentum", "momentum", "double", "0.0", "SGD momentum">,
    Option<"dampening", "dampening", "double", "0.0", "SGD dampening">,
    Option<"nesterov", "nesterov", "bool", "false", "SGD Nesterov momentum">,
    Option<"weightDecay", "weight-decay", "double", "-1.0",
           "Weight decay (negative: 0 for sgd, 0.01 for adamw)">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", "0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", "1e-8", "AdamW epsilon">,
    Option<"clipGradNorm", "clip-grad-norm", "double", "0.0",
           "Clip the global gradient norm to this value (0: off)">,
    Option<"gradAccum", "grad-accum", "bool", "false",
           "Also build @accumulate_step (forward, backward, gradients added into "
           "per-parameter accumulators); @train_step then updates with "
           "(accumulated + own gradients) * grad_scale and clears the accumulators">,
    Option<"dataParallel", "data-parallel", "bool", "false",
           "Average the loss and the gradients over the ranks of a data-parallel run "
           "(ortc.all_reduce in buckets, before the finite check and clipping)">,
    Option<"bucketBytes", "bucket-bytes", "int64_t", "25 * 1024 * 1024",
           "data-parallel: the most bytes of gradients one all_reduce carries">,
    Option<"zero", "zero", "int64_t", "0",
           "data-parallel: 1 shards the optimizer state over `ranks` ranks (ZeRO-1)">,
    Option<"ranks", "ranks", "int64_t", "0",
           "zero: the number of ranks the run will have (the shards' shapes)">,
    Option<"lossScaleInit", "loss-scale-init", "double", "0.0",
           "dynamic loss scaling: the first scale (0: none)">,
    Option<"lossScaleInterval", "loss-scale-interval", "int64_t", "2000",
           "dynamic loss scaling: finite steps in a row before the scale doubles">
  ];
  let dependentDialects = ["::ortc::OrtcDialect"];
}

#endif // ORTC_PASSES_AUTODIFF_PASSES_TD
