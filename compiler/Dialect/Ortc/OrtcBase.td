// The `ortc` dialect: a small core of tensor ops with ONNX semantics on static ranked
// tensors. The importer lowers ONNX nodes onto it (explicit broadcasting, shape subgraphs
// folded), so that shape rules, gradient rules and codegen are written once per core op.
#ifndef ORTC_BASE_TD
#define ORTC_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "compiler/Dialect/Ortc/OrtcInterfaces.td"

def Ortc_Dialect : Dialect {
  let name = "ortc";
  let cppNamespace = "::ortc";
  let summary = "Tensor-level training IR with ONNX semantics";
  let hasConstantMaterializer = 1;
  // ortc.stage and ortc.arena_offsets (OpAnnotations.h) are checked where they appear.
  let hasOperationAttrVerify = 1;
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

class Ortc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Ortc_Dialect, mnemonic, traits>;

// The op may write its result over its first operand's buffer (memory planning): a
// row-wise op whose kernels, on every target, read each row of that operand whole before
// they write any element of the same row, and read no other row.
def Ortc_RowInPlace : NativeOpTrait<"RowInPlace"> { let cppNamespace = "::ortc::trait"; }

// The op's kernels, on every target, read each float operand in its own element type
// (a 16-bit one widened exactly as it is read) and compute in float64; a float result
// whose type the op does not infer may be 16-bit, each element rounded through float32,
// the bits a float32 result cast to 16 bits would have. The precision pass lets such an
// op read the 16-bit value instead of a widened copy, and write 16 bits where its result
// was only cast to 16 bits: no float32 copy of either takes arena space.
def Ortc_ReadsStoredFloats : NativeOpTrait<"ReadsStoredFloats"> {
  let cppNamespace = "::ortc::trait";
}

def Ortc_Tensor : RankedTensorOf<[F16, BF16, F32, F64, I1, I32, I64]>;
def Ortc_FloatTensor : RankedTensorOf<[F16, BF16, F32, F64]>;
def Ortc_IndexTensor : RankedTensorOf<[I32, I64]>;
def Ortc_BoolTensor : RankedTensorOf<[I1]>;

#endif // ORTC_BASE_TD
