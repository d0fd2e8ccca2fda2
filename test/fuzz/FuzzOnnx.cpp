//===- FuzzOnnx.cpp - libFuzzer harness: the ONNX importer ------------------===//
//
// Why: `ortc build` reads models from anywhere; a malformed one must get a message,
// never a crash. The first input byte picks the format (even: binary protobuf, odd:
// protobuf text), the rest is the file, written into a temporary folder that also
// holds `weights.bin` (256 bytes) for external data to point at. The import runs with
// the inputs' symbolic dims bound to 2, so well-formed models reach the converters.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "compiler/Import/OnnxImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <unistd.h>

namespace {

struct Folder {
  std::string dir;
  Folder() {
    char tmpl[] = "/tmp/ortc-fuzz-onnx-XXXXXX";
    if (!mkdtemp(tmpl))
      std::abort();
    dir = tmpl;
    std::string weights(256, 0);
    for (int i = 0; i < 256; ++i)
      weights[i] = char(i);
    std::ofstream(dir + "/weights.bin", std::ios::binary) << weights;
  }
};

/// Every symbolic dim of the model's inputs, bound to 2 (as `--dim NAME=2` would), so
/// that models with a batch dim reach the converters; empty if it does not parse.
std::map<std::string, int64_t> symbolicDims(const uint8_t *data, size_t size, bool text) {
  onnx::ModelProto model;
  std::string bytes(reinterpret_cast<const char *>(data), size);
  struct Quiet : google::protobuf::io::ErrorCollector {
    void AddError(int, google::protobuf::io::ColumnNumber, const std::string &) override {}
  } quiet;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&quiet);
  bool ok = text ? parser.ParseFromString(bytes, &model) : model.ParseFromString(bytes);
  std::map<std::string, int64_t> dims;
  if (ok)
    for (const onnx::ValueInfoProto &in : model.graph().input())
      for (const auto &d : in.type().tensor_type().shape().dim())
        if (d.has_dim_param() && !d.dim_param().empty())
          dims[d.dim_param()] = 2;
  return dims;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static Folder folder;
  static mlir::MLIRContext *ctx = [] {
    mlir::DialectRegistry registry;
    registry.insert<ortc::OrtcDialect, mlir::func::FuncDialect>();
    auto *c = new mlir::MLIRContext(registry);
    c->loadAllAvailableDialects();
    c->printOpOnDiagnostic(false);
    c->getDiagEngine().registerHandler([](mlir::Diagnostic &) { return mlir::success(); });
    return c;
  }();
  if (size == 0)
    return 0;
  std::string path = folder.dir + (data[0] % 2 ? "/model.onnxtxt" : "/model.onnx");
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char *>(data + 1), std::streamsize(size - 1));
  }
  ortc::ImportOptions options;
  options.dims = symbolicDims(data + 1, size - 1, data[0] % 2);
  ortc::WeightStore weights;
  std::string error;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      ortc::importOnnxModel(*ctx, path, options, weights, error);
  if (!module && error.empty())
    std::abort(); // a refusal must say why
  if (std::getenv("ORTC_FUZZ_VERBOSE"))
    std::fprintf(stderr, "%s\n", module ? "imported" : error.c_str());
  std::remove(path.c_str());
  return 0;
}
