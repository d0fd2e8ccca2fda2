//===- InferenceGraph.cpp - The model as given, for `ortc export` --------===//
//
// Both directions touch only the top-level graph's initializers: their data is cleared
// at build (kept for those the artifact does not hold) and set from trained values at
// export. Nodes, value infos, opsets and metadata pass through untouched.
//
//===----------------------------------------------------------------------===//
#include "compiler/Import/InferenceGraph.h"
#include "compiler/Import/ImportContext.h"

#include <onnx/onnx_pb.h>

#include <set>

namespace ortc {

void clearTensorData(onnx::TensorProto &t) {
  t.clear_raw_data();
  t.clear_float_data();
  t.clear_double_data();
  t.clear_int32_data();
  t.clear_int64_data();
  t.clear_uint64_data();
  t.clear_string_data();
  t.clear_external_data();
  t.clear_data_location();
}

namespace {

bool parseGraph(const std::string &bytes, onnx::ModelProto &model, std::string &error) {
  if (!model.ParseFromString(bytes)) {
    error = "the stored ONNX graph does not parse";
    return false;
  }
  return true;
}

bool hasData(const onnx::TensorProto &t) {
  return t.has_raw_data() || t.float_data_size() || t.double_data_size() ||
         t.int32_data_size() || t.int64_data_size() || t.uint64_data_size() ||
         t.string_data_size() || t.external_data_size();
}

std::string shapeText(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

/// What ortc's eval_step computes, as ONNX: a graph exported in training mode gets
/// BatchNormalization on its running statistics (training_mode 0, the statistics
/// outputs dropped) and Dropout as the identity (its training_mode input dropped), so
/// that onnxruntime's inference on the export is the trained model's inference. An
/// extra output something reads is kept (and the node left as it was).
void toInference(onnx::GraphProto &g) {
  std::set<std::string> read;
  for (const onnx::NodeProto &n : g.node())
    read.insert(n.input().begin(), n.input().end());
  for (const onnx::ValueInfoProto &v : g.output())
    read.insert(v.name());
  auto extrasUnread = [&](const onnx::NodeProto &n) {
    for (int i = 1; i < n.output_size(); ++i)
      if (!n.output(i).empty() && read.count(n.output(i)))
        return false;
    return true;
  };
  for (onnx::NodeProto &n : *g.mutable_node()) {
    if (n.op_type() == "BatchNormalization" && extrasUnread(n)) {
      while (n.output_size() > 1)
        n.mutable_output()->RemoveLast();
      for (onnx::AttributeProto &a : *n.mutable_attribute())
        if (a.name() == "training_mode")
          a.set_i(0);
    } else if (n.op_type() == "Dropout" && extrasUnread(n)) {
      while (n.output_size() > 1)
        n.mutable_output()->RemoveLast();
      while (n.input_size() > 2)
        n.mutable_input()->RemoveLast();
    }
  }
}

} // namespace

bool completeInferenceGraph(std::string &graph, const WeightStore &weights,
                            const std::function<bool(const std::string &)> &held,
                            std::string &error) {
  onnx::ModelProto model;
  if (!parseGraph(graph, model, error))
    return false;
  bool changed = false;
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    if (held(t.name()))
      continue;
    auto it = weights.find(t.name());
    if (it == weights.end()) {
      error = "initializer '" + t.name() + "' has no imported value";
      return false;
    }
    t.set_raw_data(it->second.bytes.data(), it->second.bytes.size());
    changed = true;
  }
  return !changed || model.SerializeToString(&graph);
}

bool fillInferenceGraph(const std::string &graph,
                        const std::map<std::string, TensorValue> &values, std::string &out,
                        std::string &error) {
  onnx::ModelProto model;
  if (!parseGraph(graph, model, error))
    return false;
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    auto it = values.find(t.name());
    if (it == values.end()) {
      if (hasData(t))
        continue;
      error = "initializer '" + t.name() + "' has no value: neither the parameters given " +
              "nor the artifact's params.bin hold a tensor of that name";
      return false;
    }
    const TensorValue &v = it->second;
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    std::string dtype = dtypeName(t.data_type());
    if (v.dtype != dtype || v.shape != dims) {
      error = "initializer '" + t.name() + "' is " + (dtype.empty() ? onnxTypeName(t.data_type()) : dtype) +
              " " + shapeText(dims) + " in the model, but its trained value is " + v.dtype + " " +
              shapeText(v.shape);
      return false;
    }
    clearTensorData(t);
    t.set_raw_data(v.bytes.data(), v.bytes.size());
  }
  toInference(*model.mutable_graph());
  if (model.ByteSizeLong() > size_t(INT32_MAX)) {
    error = "the trained model is over 2 GB, more than one ONNX protobuf holds (external "
            "data is not written yet)";
    return false;
  }
  return model.SerializeToString(&out);
}

} // namespace ortc
