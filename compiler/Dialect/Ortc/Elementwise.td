// Elementwise ops. Operands have identical shapes: the importer makes ONNX's implicit
// broadcasting explicit with `ortc.broadcast_to`, so gradient rules never un-broadcast.
#ifndef ORTC_ELEMENTWISE_TD
#define ORTC_ELEMENTWISE_TD

include "compiler/Dialect/Ortc/OrtcBase.td"

// `precision` is [] for an op that keeps float32 in 16-bit training; the others follow
// their operands (PrecisionOpInterface).
class Ortc_UnaryOp<string mnemonic, list<Trait> traits = [],
                   list<Trait> precision = [Ortc_PrecisionOpInterface]>
    : Ortc_Op<mnemonic, traits # precision # [Pure, Elementwise, SameOperandsAndResultType,
        DeclareOpInterfaceMethods<Ortc_GradientOpInterface>, Ortc_FusionOpInterface,
        Ortc_RecomputeOpInterface]> {
  let arguments = (ins Ortc_Tensor:$x);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($result)";
}

def Ortc_NegOp : Ortc_UnaryOp<"neg">;
def Ortc_ExpOp : Ortc_UnaryOp<"exp">;
def Ortc_LogOp : Ortc_UnaryOp<"log">;
def Ortc_SqrtOp : Ortc_UnaryOp<"sqrt">;
def Ortc_ErfOp : Ortc_UnaryOp<"erf">;
def Ortc_TanhOp : Ortc_UnaryOp<"tanh">;
def Ortc_SinOp : Ortc_UnaryOp<"sin">;
def Ortc_CosOp : Ortc_UnaryOp<"cos">;
def Ortc_SigmoidOp : Ortc_UnaryOp<"sigmoid">;
def Ortc_ReluOp : Ortc_UnaryOp<"relu">;
def Ortc_AbsOp : Ortc_UnaryOp<"abs">;
def Ortc_NotOp : Ortc_UnaryOp<"not">;
// Rounding (ONNX Floor, Ceil, Round: halves to even). Piecewise constant: no gradient.
def Ortc_FloorOp : Ortc_UnaryOp<"floor">;
def Ortc_CeilOp : Ortc_UnaryOp<"ceil">;
def Ortc_RoundOp : Ortc_UnaryOp<"round">;

def Ortc_GeluOp : Ortc_UnaryOp<"gelu"> {
  let summary = "GELU; `tanh` selects PyTorch's approximate='tanh'";
  let arguments = (ins Ortc_Tensor:$x, DefaultValuedAttr<BoolAttr, "false">:$tanh);
}

def Ortc_GeluGradOp : Ortc_Op<"gelu_grad", [Pure, Elementwise, SameOperandsAndResultType,
    Ortc_FusionOpInterface, Ortc_PrecisionOpInterface]> {
  let summary = "dx of GELU given x and dy";
  let arguments = (ins Ortc_FloatTensor:$x, Ortc_FloatTensor:$dy,
                       DefaultValuedAttr<BoolAttr, "false">:$tanh);
  let results = (outs Ortc_FloatTensor:$result);
  let assemblyFormat = "$x `,` $dy attr-dict `:` type($result)";
}

def Ortc_ScaleOp : Ortc_UnaryOp<"scale"> {
  let summary = "x * factor, with the factor kept in f64";
  let description = [{
    Compile-time factors of gradient rules and training passes (1/N of a mean,
    2/sqrt(pi), BatchNorm momentum...) stay exact in float64 evaluation instead of being
    rounded to the tensor's element type as a splat constant would be.
  }];
  let arguments = (ins Ortc_Tensor:$x, F64Attr:$factor);
}

def Ortc_ClipOp : Ortc_UnaryOp<"clip"> {
  let summary = "Clamps to [min, max]; a bound that is absent does not clamp";
  let arguments = (ins Ortc_Tensor:$x, OptionalAttr<F64Attr>:$min,
                       OptionalAttr<F64Attr>:$max);
}

def Ortc_CastOp : Ortc_Op<"cast", [Pure, Elementwise, SameOperandsAndResultShape,
    DeclareOpInterfaceMethods<Ortc_GradientOpInterface>, Ortc_FusionOpInterface,
        Ortc_RecomputeOpInterface]> {
  let summary = "Converts the element type (ONNX Cast)";
  let arguments = (ins Ortc_Tensor:$x);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasFolder = 1;
}

class Ortc_BinaryOp<string mnemonic, list<Trait> traits = [],
                    list<Trait> precision = [Ortc_PrecisionOpInterface]>
    : Ortc_Op<mnemonic, traits # precision # [Pure, Elementwise, SameOperandsAndResultType,
        DeclareOpInterfaceMethods<Ortc_GradientOpInterface>, Ortc_FusionOpInterface,
        Ortc_RecomputeOpInterface]> {
  let arguments = (ins Ortc_Tensor:$lhs, Ortc_Tensor:$rhs);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Ortc_AddOp : Ortc_BinaryOp<"add", [Commutative]>;
def Ortc_SubOp : Ortc_BinaryOp<"sub">;
def Ortc_MulOp : Ortc_BinaryOp<"mul", [Commutative]>;
def Ortc_DivOp : Ortc_BinaryOp<"div">;
def Ortc_PowOp : Ortc_BinaryOp<"pow">;
def Ortc_MinOp : Ortc_BinaryOp<"min", [Commutative]>;
def Ortc_MaxOp : Ortc_BinaryOp<"max", [Commutative]>;

def Ortc_ModOp : Ortc_Op<"mod", [Pure, Elementwise, SameOperandsAndResultType,
    Ortc_FusionOpInterface, Ortc_RecomputeOpInterface]> {
  let summary = "Integer remainder (ONNX Mod): the divisor's sign, or the dividend's if fmod";
  let description = [{
    Float Mod imports as a composition of core ops (which carries its gradient);
    this op is for integers, so it has no gradient. A zero divisor gives 0 (numpy).
  }];
  let arguments = (ins Ortc_IndexTensor:$lhs, Ortc_IndexTensor:$rhs,
                       DefaultValuedAttr<BoolAttr, "false">:$fmod);
  let results = (outs Ortc_IndexTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

class Ortc_CompareOp<string mnemonic>
    : Ortc_Op<mnemonic, [Pure, Elementwise, SameTypeOperands,
        SameOperandsAndResultShape,
        DeclareOpInterfaceMethods<Ortc_FusionOpInterface, ["isCheapToRecompute"]>,
        Ortc_RecomputeOpInterface]> {
  let arguments = (ins Ortc_Tensor:$lhs, Ortc_Tensor:$rhs);
  let results = (outs Ortc_BoolTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `->` type($result)";
}

def Ortc_EqualOp : Ortc_CompareOp<"equal">;
def Ortc_LessOp : Ortc_CompareOp<"less">;
def Ortc_GreaterOp : Ortc_CompareOp<"greater">;
def Ortc_AndOp : Ortc_CompareOp<"and">;

def Ortc_SelectOp : Ortc_Op<"select", [Pure, Elementwise,
    AllTypesMatch<["on_true", "on_false", "result"]>,
    DeclareOpInterfaceMethods<Ortc_GradientOpInterface>, Ortc_FusionOpInterface,
        Ortc_RecomputeOpInterface, Ortc_PrecisionOpInterface]> {
  let summary = "ONNX Where: cond ? on_true : on_false (same shapes)";
  let arguments = (ins Ortc_BoolTensor:$cond, Ortc_Tensor:$on_true,
                       Ortc_Tensor:$on_false);
  let results = (outs Ortc_Tensor:$result);
  let assemblyFormat = "$cond `,` $on_true `,` $on_false attr-dict `:` type($cond) `,` type($result)";
  let hasVerifier = 1;
}

#endif // ORTC_ELEMENTWISE_TD
