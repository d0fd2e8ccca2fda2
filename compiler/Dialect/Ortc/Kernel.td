// The kernel level: a region op that holds the ortc ops one generated kernel computes.
// Kernel formation (passes/fusion) moves fused ops into its body; codegen prints the
// body as one kernel and the evaluator runs it; the memory plan sees only what the
// kernel yields, so values inside never reach the arena.
#ifndef ORTC_KERNEL_TD
#define ORTC_KERNEL_TD

include "compiler/Dialect/Ortc/OrtcBase.td"

def Ortc_FusedOp : Ortc_Op<"fused", [IsolatedFromAbove, SingleBlock,
    RecursiveMemoryEffects]> {
  let summary = "One generated kernel: its body's ops over one iteration space";
  let description = [{
    The body's block arguments are the operands (what the kernel reads); `ortc.yield`
    names the values that leave the kernel (its results, what it writes). `kind`
    says how codegen iterates: "pointwise" runs one loop over the shape of the
    yielded values (all equal), reading each operand at the element's index or, for
    operands only read through `ortc.broadcast_to`, at the broadcast index. It may
    also yield sums over the leading dims of values it computes (`ortc.reduce_sum`
    in the body), accumulated as the loop goes.
    "rows" holds one row op (FusionRole::Row: a softmax along the last axis) with
    the pointwise ops that compute its operands (prologue) and read its result
    (epilogue), all of one shape: codegen runs the rows in parallel, each through
    the kernel library's line function of the op, and the prologue's and
    epilogue's values never leave the row. It may also hold one float32 ortc.matmul
    whose product (or a reshape of it that keeps the last dim) the prologue reads, as
    in a "gemm" kernel: codegen computes the product's rows as the row op reads them
    (the CPU: in panels, each row run while it is in cache; GPUs: each element as the
    block loads it), so attention's scores QK^T and the softmax gradient's dP never
    reach memory.
    "gemm" holds one float32 ortc.matmul (FusionRole::Epilogue) whose operands are
    block arguments, at most one reshape of its product that keeps the last dim, and
    the pointwise ops of that shape that read it (epilogue: bias, activation, residual
    add, scale), and sums over all but the last dim of values it also yields (bias
    gradients); the product is not yielded. Codegen computes the product in panels
    of rows and runs the epilogue on each panel while it is in cache (the CPU: a
    per-thread panel buffer, or, for a product of up to 4M elements on several
    threads, one oneDNN GEMM on the pool into a scratch buffer and the epilogue on
    its row blocks after; GPUs: the tiled GEMM's registers), so its results may be
    written over inputs the epilogue reads at their own index.
    "multi_tensor" holds several ops of one kind (FusionRole::MultiTensor: the
    optimizer's updates) over different tensors with the same scalar operands and
    attributes, and runs their elements as one index space. The location fuses the
    ONNX node names of every op inside.
  }];
  let arguments = (ins Variadic<Ortc_Tensor>:$inputs, StrAttr:$kind);
  let results = (outs Variadic<Ortc_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind `(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The yielded values, one per result.
    ::mlir::Operation::operand_range getYielded();
    /// True when every element of input `i` is read only at the index of the
    /// element being computed (no broadcast): a result may then be written over it
    /// in place.
    bool readsAtOwnIndex(unsigned i);
    /// The shape a pointwise kernel iterates over (its sums reduce the leading dims).
    ::llvm::ArrayRef<int64_t> getIterationShape();
    /// The matmul of a gemm kernel or of a rows kernel that computes its product
    /// (null otherwise).
    MatMulOp getGemm();
  }];
}

def Ortc_YieldOp : Ortc_Op<"yield", [Pure, Terminator, HasParent<"FusedOp">]> {
  let summary = "The values that leave an ortc.fused kernel";
  let arguments = (ins Variadic<Ortc_Tensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

def Ortc_EmptyOp : Ortc_Op<"empty", []> {
  let summary = "A buffer whose every element ortc.matmul_into ops write";
  let description = [{
    Not pure: two of them are two buffers (CSE must not merge them). Codegen
    launches nothing for it; the memory plan gives it a slot. The evaluator
    fills it with zeros.
  }];
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Ortc_MatMulIntoOp : Ortc_Op<"matmul_into", [Pure]> {
  let summary = "dest with the product op(a) x op(b) written into a strided slot of it";
  let description = [{
    The product is ortc.matmul's ([batch..., M, N], float32 operands, float32
    sums); its element `idx` lands at offset + sum(idx[d] * strides[d]) of the
    result, whose other elements are dest's. Kernel formation (passes/fusion)
    makes it from a matmul whose product is only transposed and reshaped (the
    merge of attention's heads) or concatenated (the q, k, v gradients into the
    QKV projection's), chained through one ortc.empty: the memory plan gives the
    result dest's buffer (dest has no other reader) and codegen passes the slot
    to the GEMM as its result layout, so neither the transpose nor the concat is
    launched. The slot has unit-stride columns (matrixLayout, not transposed).
  }];
  let arguments = (ins Ortc_FloatTensor:$a, Ortc_FloatTensor:$b, Ortc_FloatTensor:$dest,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_b,
                       I64Attr:$offset, DenseI64ArrayAttr:$strides);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = [{
    $a `,` $b `into` $dest attr-dict `:` type($a) `,` type($b) `,` type($dest) `->` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The product's shape: [batch..., M, N].
    ::llvm::SmallVector<int64_t> getProductShape();
  }];
}

#endif // ORTC_KERNEL_TD
