//===- ImportContext.h - State shared by the importer and converters -*- C++ -*-===//
//
// The importer keeps, for every ONNX value, either an MLIR value, a host constant
// (shape data folded at import time) or a weight (an initializer, read with
// `ortc.weight`). Op converters (Converters.cpp) see a node through `NodeCtx`.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_IMPORT_IMPORTCONTEXT_H
#define ORTC_IMPORT_IMPORTCONTEXT_H

#include "compiler/Dialect/Ortc/Builders.h"
#include "compiler/Import/OnnxImporter.h"

#include "onnx/onnx_pb.h"

#include <memory>
#include <optional>
#include <set>

namespace ortc {

/// A tensor known at import time. Data is kept as doubles (int64 values beyond 2^53
/// only occur as "to the end" markers and are clamped when read back as integers).
struct HostTensor {
  int32_t elemType = onnx::TensorProto::FLOAT;
  std::vector<int64_t> shape;
  std::vector<double> data;
  int64_t numel() const { return numElements(shape); }
  bool isFloat() const;
  std::vector<int64_t> ints() const;
};

/// The largest dim and element count a tensor of an imported model may have (inputs,
/// initializers and the shapes the importer computes): beyond them a product of dims
/// could overflow int64.
constexpr int64_t kMaxDim = int64_t(1) << 31;
constexpr int64_t kMaxElements = int64_t(1) << 40;
/// Elements of a tensor computed on the host at import time (doubles: 1 GiB).
constexpr int64_t kMaxHostElements = int64_t(1) << 27;

/// Empty if every dim of `shape` lies in [0, kMaxDim] and their product is at most
/// `maxElements` (checked before any product can overflow); else what is wrong, as
/// "[dims] has a dim outside ...".
std::string shapeProblem(llvm::ArrayRef<int64_t> shape, int64_t maxElements = kMaxElements);

/// The shortest decimal that a float32 value prints as, read back as a double
/// (0.9f -> 0.9): how PyTorch hyper-parameters were written before export.
double floatAsDecimal(double f32Value);

/// Clamps a double to int64 (INT64_MAX markers survive the round trip).
int64_t toInt64(double v);

/// What an ONNX value name stands for during import.
struct Operand {
  mlir::Value value;               ///< set when materialised in the IR
  std::optional<HostTensor> host;  ///< set when known at import time
  std::string weight;              ///< initializer name, if it is one
  mlir::RankedTensorType type;     ///< null for a sequence
  /// The elements of an ONNX sequence (SplitToSequence), picked by SequenceAt at
  /// import time; sequences never reach the IR.
  std::shared_ptr<std::vector<Operand>> sequence;
  bool isTrainableCandidate() const {
    return !weight.empty() && host && host->isFloat();
  }
};

class ImportContext {
public:
  ImportContext(mlir::MLIRContext &ctx, WeightStore &weights)
      : ctx(ctx), builder(&ctx), weights(weights) {}

  mlir::MLIRContext &ctx;
  mlir::OpBuilder builder;
  WeightStore &weights;
  std::map<std::string, Operand> values;
  int64_t opset = 0;
  mlir::Value seed;      ///< the dropout seed argument, when the model has Dropout
  std::set<std::string> used; ///< value names read by a node or a graph output
  int64_t nextDropoutKey = 0;

  /// The IR value of `op`, creating an `ortc.weight` or `ortc.constant` on demand.
  mlir::Value materialize(Operand &op, mlir::Location loc);
};

/// MLIR element type of an ONNX element type, or null if ortc does not support it.
mlir::Type elementTypeOf(mlir::MLIRContext &ctx, int32_t onnxType);
/// The ONNX type name for messages ("FLOAT", "STRING"...).
std::string onnxTypeName(int32_t onnxType);
/// ortc's dtype name of an ONNX element type ("f32", "i64", ...), "" if it has none.
std::string dtypeName(int32_t onnxType);

/// One node being converted.
class NodeCtx {
public:
  NodeCtx(ImportContext &ic, const onnx::NodeProto &node, mlir::Location loc)
      : ic(ic), node(node), loc(loc), b(ic.builder) {}

  ImportContext &ic;
  const onnx::NodeProto &node;
  mlir::Location loc;
  mlir::OpBuilder &b;
  std::string error;

  size_t numInputs() const { return node.input_size(); }
  /// True when output i exists and something reads it.
  bool outputUsed(size_t i) const {
    return i < (size_t)node.output_size() && ic.used.count(node.output(i));
  }
  bool has(size_t i) const { return i < numInputs() && !node.input(i).empty(); }
  Operand &operand(size_t i) { return ic.values.at(node.input(i)); }
  mlir::Value in(size_t i) { return ic.materialize(operand(i), loc); }
  mlir::RankedTensorType type(size_t i) { return operand(i).type; }
  /// The import-time value of input i, or null if it is only known at run time.
  const HostTensor *constant(size_t i) {
    return has(i) && operand(i).host ? &*operand(i).host : nullptr;
  }
  /// True when every present input is known at import time and none is a float
  /// weight (weights are never folded: that would stop them from training).
  bool allHost();

  const onnx::AttributeProto *attr(const std::string &name) const;
  int64_t attrInt(const std::string &name, int64_t dflt) const;
  double attrFloat(const std::string &name, double dflt) const;
  std::string attrString(const std::string &name, const std::string &dflt) const;
  std::optional<std::vector<int64_t>> attrInts(const std::string &name) const;

  /// Creates an op whose result types come from its shape rule; when the rule
  /// rejects the operands (a bad model), records its message and returns null
  /// instead of aborting like the inferring builders do.
  template <typename OpT, typename... Args>
  OpT checked(unsigned numResults, Args &&...args) {
    llvm::SmallVector<mlir::Type> none(numResults, b.getNoneType());
    OpT op = OpT::create(b, loc, mlir::TypeRange(none), std::forward<Args>(args)...);
    llvm::SmallVector<mlir::Type> types;
    if (mlir::failed(OpT::inferReturnTypes(
            b.getContext(), loc, op->getOperands(), op->getRawDictionaryAttrs(),
            op->getPropertiesStorage(), op->getRegions(), types))) {
      op->erase();
      (void)fail("operands do not fit the op's shape rule");
      return nullptr;
    }
    for (auto [r, t] : llvm::zip(op->getResults(), types))
      r.setType(t);
    return op;
  }

  void setOutput(size_t i, mlir::Value v);
  void setOutputHost(size_t i, HostTensor t);
  /// Records an error about this node and returns failure.
  mlir::LogicalResult fail(const llvm::Twine &msg);
  /// Fails, naming `what`, unless every dim of `shape` lies in [0, kMaxDim] and their
  /// product in [0, maxElements] (checked before anything multiplies them).
  mlir::LogicalResult checkShape(llvm::ArrayRef<int64_t> shape, const std::string &what,
                                 int64_t maxElements = kMaxElements);
};

using Shape = std::vector<int64_t>;

inline Shape shapeOf(mlir::RankedTensorType t) {
  return Shape(t.getShape().begin(), t.getShape().end());
}
/// Row-major strides of a shape.
Shape stridesOf(const Shape &s);

/// The IR constant holding `t`'s data with element type `elementType`.
mlir::Value hostConstant(NodeCtx &nc, HostTensor t, mlir::Type elementType);

/// Gathers the flattened input 0 of `nc` at the flat offsets `flat` into output 0,
/// shaped `shape`: folded on the host when input 0 is an import-time constant (not a
/// weight), else one `ortc.gather` with a constant index tensor (whose gradient rule,
/// a scatter-add, trains through it).
mlir::LogicalResult gatherFlat(NodeCtx &nc, const std::vector<int64_t> &flat,
                               const Shape &shape);

using Converter = mlir::LogicalResult (*)(NodeCtx &);
struct ConverterInfo {
  Converter fn;
  int64_t minOpset;
};
/// The converters by ONNX op type (default domain).
const std::map<std::string, ConverterInfo> &converterTable();

// Converter families with files of their own.
/// LSTM and GRU, unrolled over the sequence (RecurrentConverters.cpp).
mlir::LogicalResult convLSTM(NodeCtx &nc);
mlir::LogicalResult convGRU(NodeCtx &nc);
/// Transposed convolution and resizing (ResizeConverters.cpp).
mlir::LogicalResult convConvTranspose(NodeCtx &nc);
mlir::LogicalResult convResize(NodeCtx &nc);
mlir::LogicalResult convUpsample(NodeCtx &nc);

} // namespace ortc

#endif // ORTC_IMPORT_IMPORTCONTEXT_H
