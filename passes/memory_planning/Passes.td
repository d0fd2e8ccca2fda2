// Scheduling and memory planning of the step functions.
#ifndef ORTC_PASSES_MEMORY_PLANNING_PASSES_TD
#define ORTC_PASSES_MEMORY_PLANNING_PASSES_TD

include "mlir/Pass/PassBase.td"

def MemoryPlan : Pass<"ortc-memory-plan", "mlir::ModuleOp"> {
  let summary = "Orders ops for low peak memory and assigns arena offsets";
  let description = [{
    For @train_step and @eval_step: reorders the ops (a topological order chosen
    greedily to free memory early), computes liveness, and gives every intermediate
    tensor an offset in one arena (best fit, in-place reuse for elementwise ops).
    Results are annotated with `ortc.arena_offsets` (-1: not in the arena: an
    argument, weight, constant, reshape view, or a value written straight into the
    persistent tensor of a function result); functions get `ortc.arena_bytes` and
    `ortc.arena_lower_bound` (max bytes live at once).
  }];
  let dependentDialects = ["::ortc::OrtcDialect"];
}

#endif // ORTC_PASSES_MEMORY_PLANNING_PASSES_TD
