//===- InferenceGraph.h - The model as given, for `ortc export` -*- C++ -*-===//
//
// Why: a trained model should leave ortc in the format it came in. The artifact keeps
// the user's ONNX graph (model.onnx: every node, input, output and symbolic dim as
// given) with the data of each initializer left out where the artifact holds that
// tensor anyway (params.bin), so it costs a few KB to MB, not a second copy of the
// weights. `ortc export` fills the initializers back in from trained parameters
// (an .npz of --save-params or a checkpoint) and, for the rest, params.bin.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_IMPORT_INFERENCEGRAPH_H
#define ORTC_IMPORT_INFERENCEGRAPH_H

#include "compiler/Import/OnnxImporter.h"

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace onnx {
class TensorProto;
} // namespace onnx

namespace ortc {

/// Leaves out the data of `t` (raw, typed and external), keeping name, type and dims.
void clearTensorData(onnx::TensorProto &t);

/// Puts back into `graph` (importOnnxModel's ImportOptions::inferenceGraph) the data
/// of each initializer that `held(name)` says the artifact does not hold (an
/// initializer folded away at import), from `weights`. False with `error` if the
/// graph does not parse or a weight is missing.
bool completeInferenceGraph(std::string &graph, const WeightStore &weights,
                            const std::function<bool(const std::string &)> &held,
                            std::string &error);

/// One tensor's value for an initializer: raw little-endian bytes.
struct TensorValue {
  std::string dtype; ///< ortc's names: "f32", "i64", ...
  std::vector<int64_t> shape;
  std::string_view bytes;
};

/// Serializes `graph` with every initializer that has no data filled from
/// `values[name]`, and every other initializer that `values` names replaced by it,
/// in inference mode (BatchNormalization on running statistics, Dropout off: what
/// eval_step computes).
/// False with `error` naming the first initializer that has no value, or whose
/// value's dtype or shape is not the initializer's.
bool fillInferenceGraph(const std::string &graph,
                        const std::map<std::string, TensorValue> &values, std::string &out,
                        std::string &error);

} // namespace ortc

#endif // ORTC_IMPORT_INFERENCEGRAPH_H
