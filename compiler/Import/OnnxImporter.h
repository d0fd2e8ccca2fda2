//===- OnnxImporter.h - ONNX protobuf -> ortc dialect ----------*- C++ -*-===//
//
// Reads an ONNX model (binary protobuf or `.onnxtxt` text format) into a module holding
// `func.func @forward` over the ortc dialect, with every initializer as a named
// `ortc.global` whose bytes stay outside the IR (in the returned WeightStore).
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_IMPORT_ONNXIMPORTER_H
#define ORTC_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ortc {

/// An initializer's bytes: owned, or a view into the read-only mapping of the model
/// file that holds them (a binary model's raw data is never copied; the mapping lives
/// as long as a view of it).
class WeightBytes {
public:
  WeightBytes() = default;
  WeightBytes(std::string owned) : owned(std::move(owned)) {}
  WeightBytes(std::shared_ptr<const void> keepAlive, const char *data, size_t size)
      : keepAlive(std::move(keepAlive)), viewData(data), viewSize(size) {}

  const char *data() const { return keepAlive ? viewData : owned.data(); }
  size_t size() const { return keepAlive ? viewSize : owned.size(); }
  bool empty() const { return size() == 0; }
  const char *begin() const { return data(); }
  const char *end() const { return data() + size(); }
  std::string_view view() const { return {data(), size()}; }

private:
  std::string owned;
  std::shared_ptr<const void> keepAlive; ///< set for a view
  const char *viewData = nullptr;
  size_t viewSize = 0;
};

/// The data of one weight, as raw little-endian bytes in the global's element type.
/// A view's bytes need not be aligned for the element type: read them with memcpy.
struct WeightData {
  std::vector<int64_t> shape;
  std::string dtype; ///< "f32", "f64", "i64", "i32", "bool", "f16", "bf16"
  WeightBytes bytes;
};

/// Weights by symbol name (the ONNX initializer name).
using WeightStore = std::map<std::string, WeightData>;

struct ImportOptions {
  /// Values for symbolic dims (`--dim NAME=N`).
  std::map<std::string, int64_t> dims;
  /// Whole input shapes (`--shape INPUT=AxBxC`), overriding the model's.
  std::map<std::string, std::vector<int64_t>> shapes;
  /// If set, receives the model as given (serialized ModelProto, symbolic dims kept)
  /// with the data of every top-level initializer left out: what `ortc export` fills
  /// with trained values (InferenceGraph.h).
  std::string *inferenceGraph = nullptr;
};

/// Imports `path`. On failure returns null and sets `error` to one message that lists
/// every problem found (unsupported ops, unbound dims, bad dtypes...) with node names.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxModel(mlir::MLIRContext &ctx,
                                                  const std::string &path,
                                                  const ImportOptions &options,
                                                  WeightStore &weights,
                                                  std::string &error);

/// Bytes per element of a dtype name ("f32" -> 4).
int64_t dtypeSize(const std::string &dtype);

} // namespace ortc

#endif // ORTC_IMPORT_ONNXIMPORTER_H
