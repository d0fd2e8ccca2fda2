// Recompute (gradient checkpointing) passes: trade FLOPs for activation memory.
#ifndef ORTC_PASSES_CHECKPOINTING_PASSES_TD
#define ORTC_PASSES_CHECKPOINTING_PASSES_TD

include "mlir/Pass/PassBase.td"

def Recompute : Pass<"ortc-recompute", "mlir::ModuleOp"> {
  let summary = "Recomputes forward values in the backward instead of keeping them live";
  let description = [{
    Runs after the training passes and before kernel formation and memory planning.
    A forward value that the backward reads lives in the arena from the forward to
    its last backward use; a recomputed one is computed again (an `ortc.recompute`
    clone of its producer, placed before its first backward reader) from values that
    live anyway, so it lives only in the backward. Which values: the `policy`.
    `selective` recomputes cheap ones (RecomputeOpInterface: at most `cheap-flops`
    operations per result element: elementwise ops, GELU, dropout from its
    counter-based generator, normalisations, softmax, gathers and data movement; and
    at most that many per element of the value freed, so not a normalisation's
    statistics; where kernels are formed a LayerNorm's output is one pointwise kernel from
    the saved statistics),
    through chains of forward values, where every value the chain reads is one the
    backward keeps anyway (a step input, a weight, or a value the backward reads
    itself): most bytes per operation first, each kept only if the arena planned on a
    copy of the step (kernels formed unless `fusion=false`, memory planned) is smaller
    with it (`plan=false`: every candidate). `fused` (what `ortc build` does by default
    where kernels are formed) takes the candidates of `selective` that also launch no
    kernel more on the planned copy: clones that join kernels the step runs anyway
    (FormKernels step 1c: the GELU's clone with its gradient's kernel, the attention
    dropout's with the softmax gradient's row kernel, a LayerNorm's output from its
    statistics in an earlier kernel of its shape), as TorchInductor's partitioner
    recomputes only what it fuses; where taking every candidate at once leaves the
    planned arena as it is, it takes none without trying them one by one. `budget=BYTES` or `budget=PCT%` (of the
    arena without recompute) admits every op with the interface (GEMMs, convolutions
    too) and takes candidates the same way until the planned arena fits; a budget out
    of reach is an error naming the smallest arena reached. `layers` finds the
    forward's repeated blocks (transformer layers, residual blocks: by node name scope,
    else as back-to-back repeats of its GEMMs and convolutions cut where the fewest
    activation bytes cross) and recomputes each block's values in the backward from its
    inputs, block by block where the planned arena shrinks, keeping only what crosses the
    block boundaries (`ortc.recompute_blocks`: how many ops each block
    has; `ortc.recomputed_blocks`: how many are recomputed). Each step function records
    what was chosen: `ortc.recomputed` (how many values) and `ortc.recompute_flops`
    (what the clones add, net of forward ops that moved to the backward) beside
    `ortc.forward_flops` (the forward's RecomputeOpInterface operations), the planned
    arena `ortc.recompute_planned` and the one planned without recompute
    `ortc.recompute_without`, for a budget `ortc.recompute_budget` (bytes), and
    `ortc.recomputed_nodes` ("<ONNX node> (<op>)" of each value, for `--timing`).
  }];
  let options = [
    Option<"policy", "policy", "std::string", /*default=*/"\"selective\"",
           "none | selective | fused | layers | budget=BYTES | budget=PCT%">,
    Option<"plan", "plan", "bool", /*default=*/"true",
           "selective, layers: keep only the candidates that lower the planned arena (false: all)">,
    Option<"fusion", "fusion", "bool", /*default=*/"true",
           "budget: trials form kernels before planning, as `--fusion default` builds">,
    Option<"cheapFlops", "cheap-flops", "int64_t", /*default=*/"16",
           "selective, fused: the most operations per result element of a recomputed op">
  ];
  let dependentDialects = ["::ortc::OrtcDialect"];
}

#endif // ORTC_PASSES_CHECKPOINTING_PASSES_TD
