// Mixed-precision passes: 16-bit storage of activations with float32 master weights.
#ifndef ORTC_PASSES_MIXED_PRECISION_PASSES_TD
#define ORTC_PASSES_MIXED_PRECISION_PASSES_TD

include "mlir/Pass/PassBase.td"

def MixedPrecision : Pass<"ortc-mixed-precision", "mlir::ModuleOp"> {
  let summary = "Rounds activations and GEMM/convolution operands to bf16 or fp16";
  let description = [{
    Runs after the training passes (autodiff and optimizer) and before recompute,
    kernel formation and memory planning, on every step function. Each op's
    PrecisionOpInterface rule (absent: float32 kept) decides which of its float32
    values are rounded to `dtype`: a rounded value is stored in 16 bits (an
    `ortc.cast` to the 16-bit type after its producer) and every reader reads it
    widened (its own `ortc.cast` back to float32, placed just before the reader, so the
    float32 copy lives only as long as that reader needs it and the 16-bit one is
    what the backward keeps). Every op still computes in float32: 16 bits is storage,
    and each rounding is a round-to-nearest-even as PyTorch's autocast does at the
    same places. Parameters stay float32 master weights (arguments of the step); a GEMM
    reads a 16-bit copy made once per step at its first reader. The gradients that
    reach the optimizer, the loss and every step result are float32. Float64 models
    are left as they are. With `accum` chunked16 or plain16, the ops that compute on
    16-bit operands and sum (GEMMs, convolutions, sums and means) accumulate in
    `dtype` (the ortc.accum attribute): chunks of `accum-chunk` terms whose sums add in
    float, or one 16-bit sum throughout.
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", /*default=*/"\"bf16\"", "bf16 | fp16">,
    Option<"accum", "accum", "std::string", /*default=*/"\"fp32\"",
           "How GEMMs and sums on 16-bit operands accumulate: fp32 | chunked16 | plain16">,
    Option<"accumChunk", "accum-chunk", "int64_t", /*default=*/"0",
           "Terms per 16-bit partial sum with chunked16; 0: by dtype (fp16 64, bf16 16)">
  ];
  let dependentDialects = ["::ortc::OrtcDialect"];
}

#endif // ORTC_PASSES_MIXED_PRECISION_PASSES_TD
