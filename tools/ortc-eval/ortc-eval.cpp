//===- ortc-eval.cpp - Run a model through the reference evaluator -------===//
//
// A test tool (not a product feature): imports an ONNX model, optionally derives the
// loss and gradients, and evaluates the result in float64 (or float32) with the
// reference evaluator, reading inputs from and writing results to .npz files. The
// Python tests compare its numbers with onnxruntime and PyTorch.
//
//   ortc-eval MODEL.onnx --inputs FEED.npz -o OUT.npz [--dim N=V]... [--gradients]
//             [--f32] [--no-dropout] [--seed S] [--labels NAME] [--fused]
//
// --fused forms kernels (ortc-form-kernels) before evaluating, so the evaluator runs
// the ortc.fused regions that codegen prints: fused and unfused must agree.
// --gradients writes `loss`, `grad/<parameter>` and `buffer/<running stat>` (the
// BatchNorm statistics after the step); otherwise every model output by name.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/StepFunction.h"
#include "compiler/Eval/Evaluator.h"
#include "compiler/Import/OnnxImporter.h"
#include "compiler/Pipeline/Registration.h"
#include "passes/autodiff/Passes.h"
#include "passes/fusion/Passes.h"

#include "Npz.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

using namespace mlir;

namespace {

int usage(const char *msg) {
  llvm::errs() << "ortc-eval: error: " << msg
               << "\nusage: ortc-eval MODEL.onnx --inputs FEED.npz -o OUT.npz [--dim N=V]... "
                  "[--gradients] [--f32] [--no-dropout] [--seed S] [--labels NAME] [--fused]\n";
  return 2;
}

template <typename T> ortc::EvalTensor<T> fromArray(const ortc::npz::Array &a) {
  ortc::EvalTensor<T> t;
  t.shape = a.shape;
  int64_t n = t.numel();
  auto read = [&](int64_t i) -> double {
    const char *p = a.data.data();
    switch (a.dtype) {
    case ortc::npz::DType::F32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case ortc::npz::DType::F64: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case ortc::npz::DType::I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return (double)v; }
    case ortc::npz::DType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case ortc::npz::DType::F16:
    case ortc::npz::DType::U16: { // bf16 travels as <u2
      uint16_t bits;
      std::memcpy(&bits, p + 2 * i, 2);
      return llvm::APFloat(a.dtype == ortc::npz::DType::F16 ? llvm::APFloat::IEEEhalf()
                                                             : llvm::APFloat::BFloat(),
                           llvm::APInt(16, bits))
          .convertToDouble();
    }
    default: return (unsigned char)p[i];
    }
  };
  t.isFloat = a.dtype == ortc::npz::DType::F32 || a.dtype == ortc::npz::DType::F64 ||
              a.dtype == ortc::npz::DType::F16 || a.dtype == ortc::npz::DType::U16;
  for (int64_t i = 0; i < n; ++i)
    t.isFloat ? t.f.push_back(static_cast<T>(read(i))) : t.i.push_back((int64_t)read(i));
  return t;
}

template <typename T> ortc::EvalTensor<T> fromWeight(const ortc::WeightData &w) {
  ortc::npz::Array a;
  a.shape = w.shape;
  ortc::npz::fromManifestDtype(w.dtype, a.dtype);
  a.data.assign(w.bytes.begin(), w.bytes.end());
  return fromArray<T>(a);
}

/// Results are written as float64 (floats) or int64.
struct Out {
  std::string name;
  std::vector<int64_t> shape;
  bool isFloat;
  std::vector<double> f;
  std::vector<int64_t> i;
};

template <typename T>
int run(func::FuncOp fn, const std::vector<ortc::npz::Array> &feed,
        const ortc::WeightStore &store, int64_t seed, bool gradients, const std::string &out) {
  std::map<std::string, const ortc::npz::Array *> byName;
  for (const auto &a : feed)
    byName[a.name] = &a;
  std::map<std::string, ortc::EvalTensor<T>> weights;
  for (const auto &[name, w] : store)
    weights[name] = fromWeight<T>(w);
  std::vector<ortc::EvalTensor<T>> args;
  for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
    std::string name = ortc::argName(fn, i);
    if (name == "seed") {
      ortc::EvalTensor<T> s;
      s.isFloat = false;
      s.i = {seed};
      args.push_back(s);
    } else if (auto it = byName.find(name); it != byName.end()) {
      args.push_back(fromArray<T>(*it->second));
    } else if (auto w = weights.find(name); w != weights.end()) {
      args.push_back(w->second);
    } else if (auto d = fn.getArgAttrOfType<mlir::FloatAttr>(i, "ortc.default")) {
      ortc::EvalTensor<T> s; // a scalar the feed leaves at its default (AdamW's betas...)
      s.isFloat = true;
      s.f = {T(d.getValueAsDouble())};
      args.push_back(s);
    } else {
      llvm::errs() << "ortc-eval: error: no value for input '" << name << "'\n";
      return 1;
    }
  }
  std::vector<ortc::EvalTensor<T>> results;
  std::string error;
  if (!ortc::evaluate<T>(fn, args, weights, results, error)) {
    llvm::errs() << "ortc-eval: error: " << error << "\n";
    return 1;
  }
  std::vector<Out> outs;
  for (unsigned r = 0; r < fn.getNumResults(); ++r) {
    std::string name = ortc::resultName(fn, r), role = ortc::resultRole(fn, r);
    if (gradients && role == "gradient")
      name = "grad/" + name;
    else if (gradients && role == "buffer")
      name = "buffer/" + name;
    Out o{name, results[r].shape, results[r].isFloat, {}, {}};
    if (results[r].isFloat)
      o.f.assign(results[r].f.begin(), results[r].f.end());
    else
      o.i = results[r].i;
    outs.push_back(std::move(o));
  }
  std::vector<ortc::npz::ArrayRef> refs;
  for (const Out &o : outs)
    refs.push_back({o.name, o.isFloat ? ortc::npz::DType::F64 : ortc::npz::DType::I64, o.shape,
                    o.isFloat ? (const void *)o.f.data() : (const void *)o.i.data()});
  if (!ortc::npz::writeNpz(out, refs, error)) {
    llvm::errs() << "ortc-eval: error: " << error << "\n";
    return 1;
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::string model, inputs, out, labels = "labels";
  ortc::ImportOptions opts;
  bool gradients = false, f32 = false, fused = false;
  int64_t seed = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char * { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--gradients") gradients = true;
    else if (a == "--f32") f32 = true;
    else if (a == "--fused") fused = true;
    else if (a == "--no-dropout") ortc::setEvalDropoutDisabled(true);
    else if (a == "--inputs" || a == "-o" || a == "--seed" || a == "--dim" || a == "--labels") {
      const char *v = value();
      if (!v)
        return usage("option needs a value");
      if (a == "--inputs") inputs = v;
      else if (a == "-o") out = v;
      else if (a == "--seed") seed = std::atoll(v);
      else if (a == "--labels") labels = v;
      else {
        const char *eq = std::strchr(v, '=');
        if (!eq)
          return usage("--dim takes NAME=N");
        opts.dims[std::string(v, eq)] = std::atoll(eq + 1);
      }
    } else if (a[0] == '-') return usage(("unknown option " + a).c_str());
    else model = a;
  }
  if (model.empty() || inputs.empty() || out.empty())
    return usage("MODEL, --inputs and -o are required");

  DialectRegistry registry;
  ortc::registerAllDialects(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  ortc::WeightStore store;
  std::string error;
  auto module = ortc::importOnnxModel(ctx, model, opts, store, error);
  if (!module) {
    llvm::errs() << "ortc-eval: error: " << error << "\n";
    return 1;
  }
  PassManager pm(&ctx);
  pm.addPass(createCanonicalizerPass());
  pm.addPass(ortc::createFuseGelu());
  pm.addPass(createCanonicalizerPass());
  if (gradients) {
    ortc::AttachLossOptions lo;
    lo.labels = labels;
    pm.addPass(ortc::createAttachLoss(lo));
    pm.addPass(ortc::createAutodiff());
  }
  if (fused)
    pm.addPass(ortc::createFormKernels());
  if (failed(pm.run(*module)))
    return 1;
  auto fn = module->lookupSymbol<func::FuncOp>(gradients ? "train_step" : "forward");
  if (fused) {
    // Says how many kernels the evaluated function holds (tests check that fusion ran).
    int kernels = 0;
    fn.walk([&](ortc::FusedOp) { ++kernels; });
    llvm::errs() << "ortc-eval: " << kernels << " fused kernels\n";
  }
  std::vector<ortc::npz::Array> feed;
  if (!ortc::npz::readNpz(inputs, feed, error)) {
    llvm::errs() << "ortc-eval: error: " << error << "\n";
    return 1;
  }
  return f32 ? run<float>(fn, feed, store, seed, gradients, out)
             : run<double>(fn, feed, store, seed, gradients, out);
}
