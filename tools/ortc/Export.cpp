//===- Export.cpp - `ortc export`: the trained model back as ONNX ----------===//
//
// Why: users arrive with an ONNX inference graph and want it back trained, to serve
// with onnxruntime or anything else that reads ONNX. The artifact keeps that graph
// (model.onnx, InferenceGraph.h); this fills its initializers: trained parameters and
// BatchNorm running statistics from --params (an .npz of `ortc train --save-params`)
// or --checkpoint, every other tensor from the artifact's params.bin. Reads only the
// artifact folder and the file given; writes the output atomically.
//
//===----------------------------------------------------------------------===//
#include "compiler/Import/InferenceGraph.h"
#include "compiler/Import/ModelMapping.h"
#include "tools/ortc/Commands.h"

#include "Manifest.h"
#include "Npz.h"
#include "ortc/digest.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

namespace ortc {
namespace {

bool readWhole(const std::string &path, std::string &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::stringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return bool(in) || in.eof();
}

int fail(const std::string &message) {
  std::cerr << "ortc: error: " << message << "\n";
  return 1;
}

} // namespace

int runExport(const ExportOptions &o) {
  const std::string dir = o.artifact + "/";
  std::string text, error;
  if (!readWhole(dir + "manifest.json", text))
    return fail(o.artifact + ": not an ortc artifact (no readable manifest.json)");
  Manifest m;
  if (parseManifest(text, m, error) != ManifestError::None)
    return fail(o.artifact + "/manifest.json: " + error);
  auto file = [&](const std::string &name, std::string &bytes) {
    auto it = m.files.find(name);
    if (it == m.files.end())
      return false;
    if (!readWhole(dir + name, bytes)) {
      error = dir + name + ": cannot read (" + std::strerror(errno) + ")";
      return false;
    }
    if (digestLike(it->second, bytes.data(), bytes.size()) != it->second) {
      error = dir + name + ": " + digestName(it->second) +
              " differs from the manifest's (the file was changed)";
      return false;
    }
    return true;
  };
  std::string graph;
  if (!file("model.onnx", graph))
    return fail(error.empty() ? o.artifact +
                                    " holds no model.onnx (it was built before `ortc export` "
                                    "existed): build it again"
                              : error);

  // Values by tensor name: the artifact's initial values, then the trained ones.
  std::map<std::string, TensorValue> values;
  std::shared_ptr<const FileMapping> params;
  if (m.files.count("params.bin")) {
    params = FileMapping::open(dir + "params.bin", error);
    if (!params)
      return fail(dir + "params.bin: " + error);
    const std::string &want = m.files["params.bin"];
    if (digestLike(want, params->data(), params->size()) != want)
      return fail(dir + "params.bin: " + digestName(want) +
                  " differs from the manifest's (the file was changed)");
  }
  for (const TensorDesc &t : m.tensors) {
    if (!t.hasInit || t.initOmitted || !params)
      continue;
    if (t.initOffset + t.initBytes > int64_t(params->size()))
      return fail(dir + "params.bin: tensor '" + t.name + "' lies outside the file");
    values[t.name] = {t.dtype, t.shape,
                      std::string_view(params->data() + t.initOffset, size_t(t.initBytes))};
  }
  std::vector<npz::Array> trained;
  const std::string &from = o.params.empty() ? o.checkpoint : o.params;
  if (!from.empty()) {
    if (!npz::readNpz(from, trained, error))
      return fail(error);
    for (const npz::Array &a : trained) {
      auto it = m.byName.find(a.name);
      if (it == m.byName.end())
        return fail(from + ": '" + a.name + "' is no tensor of " + o.artifact);
      const TensorDesc &t = m.tensors[it->second];
      if (t.role == "state")
        continue; // optimizer state: not part of the model
      npz::DType want;
      if (!npz::fromManifestDtype(t.dtype, want) || a.dtype != want || a.shape != t.shape)
        return fail(from + ": '" + a.name + "' is " + npz::describe(a.dtype) + " " +
                    npz::shapeString(a.shape) + ", the artifact's tensor is " + t.dtype + " " +
                    npz::shapeString(t.shape));
      values[t.name] = {t.dtype, t.shape, std::string_view(a.data)};
    }
  }
  std::string out;
  if (!fillInferenceGraph(graph, values, out, error))
    return fail(o.artifact + ": " + error +
                (params ? "" : " (the artifact was built with --no-params: give --params)"));
  std::string tmp = o.output + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f || !f.write(out.data(), std::streamsize(out.size())) || !f.flush()) {
      std::remove(tmp.c_str());
      return fail("cannot write " + o.output + ": " + std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), o.output.c_str()) != 0) {
    std::remove(tmp.c_str());
    return fail("cannot write " + o.output + ": " + std::strerror(errno));
  }
  std::cerr << "ortc: wrote " << o.output << " (" << out.size() / 1024 << " KB"
            << (from.empty() ? ", the artifact's initial values" : ", trained values of " + from)
            << ")\n";
  return 0;
}

} // namespace ortc
