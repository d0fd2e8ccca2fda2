//===- CppEmitter.cpp - Planned ortc IR -> C++ kernels for the CPU -------===//
//
// Every op becomes one kernel function. Elementwise ops are written out as OpenMP
// loops; everything else calls the shared kernel library (ortc_kernels.h, shipped in
// the artifact) with the static shapes spelled out, so a reader sees exactly what
// runs. Operands are addressed through the memory plan: arena offsets, persistent
// tensors (bufs[i]) or file-scope constants.
//
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CppEmitter.h"

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "compiler/Dialect/Ortc/StepFunction.h"
#include "passes/memory_planning/Passes.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <sstream>

using namespace mlir;

namespace ortc {
namespace {

std::string cType(Type elt) {
  if (elt.isF32())
    return "float";
  if (elt.isF64())
    return "double";
  if (elt.isInteger(64))
    return "int64_t";
  if (elt.isInteger(32))
    return "int32_t";
  if (elt.isInteger(1))
    return "uint8_t";
  return "";
}

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }
std::string cType(Value v) { return cType(typeOf(v).getElementType()); }
int64_t numel(Value v) {
  int64_t n = 1;
  for (int64_t d : typeOf(v).getShape())
    n *= d;
  return n;
}

std::string list(ArrayRef<int64_t> xs) {
  std::string s = "{";
  for (size_t i = 0; i < xs.size(); ++i)
    s += (i ? ", " : "") + std::to_string(xs[i]);
  return xs.empty() ? "{0}" : s + "}";
}

std::string literal(double v, const std::string &type) {
  if (type == "float" || type == "double") {
    if (std::isnan(v))
      return "std::numeric_limits<" + type + ">::quiet_NaN()";
    if (std::isinf(v))
      return std::string(v < 0 ? "-" : "") + "std::numeric_limits<" + type + ">::infinity()";
    std::string s = llvm::formatv("{0:e17}", v).str();
    return type == "float" ? "static_cast<float>(" + s + ")" : s;
  }
  return "static_cast<" + type + ">(" + std::to_string(static_cast<int64_t>(v)) + "LL)";
}

class Emitter {
public:
  Emitter(const TensorTable &table, std::ostringstream &out) : table(table), out(out) {}

  LogicalResult emitFunction(func::FuncOp fn, FunctionKernels &fk, std::string &error);
  std::string constants() const { return constOut.str(); }

private:
  const TensorTable &table;
  std::ostringstream &out;
  std::ostringstream constOut;
  std::ostringstream body;
  func::FuncOp fn;
  int constCount = 0;
  DenseMap<Value, std::string> constNames;

  /// A C expression for the data pointer of `v`.
  std::string ptr(Value v);
  /// The pointer with a cast, as `const T *` (or `T *` when writable).
  std::string typed(Value v, bool writable = false) {
    return "((" + std::string(writable ? "" : "const ") + cType(v) + " *)(" + ptr(v) + "))";
  }
  std::string scalar(Value v) { return "(*" + typed(v) + ")"; }
  std::string destFor(unsigned resultIndex);
  LogicalResult emitOp(Operation *op, std::string &error);
  void loop(Value out, const std::string &expr);
  std::string elem(Value v);
};

std::string Emitter::ptr(Value v) {
  Placement p = placementOf(v);
  switch (p.kind) {
  case Placement::Arena:
    return "arena + " + std::to_string(p.offset);
  case Placement::Argument:
    return "bufs[" + std::to_string(table.indexOf(argName(fn, p.index))) + "]";
  case Placement::Weight:
    return "bufs[" + std::to_string(table.indexOf(p.name)) + "]";
  case Placement::Output:
    return destFor(p.index);
  case Placement::Constant: {
    Value root = v;
    while (auto r = root.getDefiningOp<ReshapeOp>())
      root = r.getX();
    auto it = constNames.find(root);
    if (it != constNames.end())
      return it->second;
    auto c = root.getDefiningOp<ConstantOp>();
    std::string name = "ortc_const" + std::to_string(constCount++);
    std::string t = cType(root);
    auto dense = cast<DenseElementsAttr>(c.getValue());
    int64_t n = numel(root);
    if (dense.isSplat()) {
      double v0 = isa<FloatType>(dense.getElementType())
                      ? dense.getSplatValue<APFloat>().convertToDouble()
                      : dense.getElementType().isInteger(1)
                            ? dense.getSplatValue<bool>()
                            : (double)dense.getSplatValue<APInt>().getSExtValue();
      constOut << "static const std::vector<" << t << "> " << name << "(" << n << ", "
               << literal(v0, t) << ");\n";
    } else {
      constOut << "static const std::vector<" << t << "> " << name << " = {";
      int64_t k = 0;
      if (isa<FloatType>(dense.getElementType()))
        for (APFloat f : dense.getValues<APFloat>())
          constOut << (k++ ? ", " : "") << literal(f.convertToDouble(), t);
      else if (dense.getElementType().isInteger(1))
        for (bool b : dense.getValues<bool>())
          constOut << (k++ ? ", " : "") << (b ? 1 : 0);
      else
        for (APInt i : dense.getValues<APInt>())
          constOut << (k++ ? ", " : "") << literal((double)i.getSExtValue(), t);
      constOut << "};\n";
    }
    std::string expr = "(void *)" + name + ".data()";
    constNames[root] = expr;
    return expr;
  }
  }
  return "nullptr";
}

std::string Emitter::destFor(unsigned resultIndex) {
  std::string name = resultName(fn, resultIndex);
  return "bufs[" + std::to_string(table.indexOf(name)) + "]";
}

/// Element i of an elementwise operand: a literal for splat constants.
std::string Emitter::elem(Value v) {
  if (auto c = v.getDefiningOp<ConstantOp>())
    if (auto dense = dyn_cast<DenseElementsAttr>(c.getValue()); dense && dense.isSplat()) {
      double x = isa<FloatType>(dense.getElementType())
                     ? dense.getSplatValue<APFloat>().convertToDouble()
                     : dense.getElementType().isInteger(1)
                           ? dense.getSplatValue<bool>()
                           : (double)dense.getSplatValue<APInt>().getSExtValue();
      return literal(x, cType(v));
    }
  return typed(v) + "[i]";
}

void Emitter::loop(Value outV, const std::string &expr) {
  int64_t n = numel(outV);
  body << "  " << cType(outV) << " *y = " << typed(outV, true) << ";\n";
  body << "  ORTC_KERN_PARALLEL_FOR(" << n << ")\n";
  body << "  for (int64_t i = 0; i < " << n << "; ++i)\n    y[i] = " << expr << ";\n";
}

LogicalResult Emitter::emitOp(Operation *op, std::string &error) {
  auto a = [&](unsigned i) { return elem(op->getOperand(i)); };
  Value res = op->getNumResults() ? op->getResult(0) : Value();
  std::string T = res ? cType(res) : "";
  auto copyIfDistinct = [&](Value from, Value to) {
    if (ptr(from) != ptr(to))
      body << "  std::memcpy(" << ptr(to) << ", " << ptr(from) << ", "
           << numel(to) * (typeOf(to).getElementType().isInteger(1)
                               ? 1
                               : typeOf(to).getElementType().getIntOrFloatBitWidth() / 8)
           << ");\n";
  };
  auto dims = [&](Value v) { return list(typeOf(v).getShape()); };
  auto product = [](ArrayRef<int64_t> s, size_t from, size_t to) {
    int64_t p = 1;
    for (size_t i = from; i < std::min(to, s.size()); ++i)
      p *= s[i];
    return p;
  };
  auto convGeom = [&](Value x, Value w, Value y, ArrayRef<int64_t> strides,
                      ArrayRef<int64_t> pads, ArrayRef<int64_t> dil, int64_t group) {
    auto xs = typeOf(x).getShape(), ws = typeOf(w).getShape(), ys = typeOf(y).getShape();
    int ns = xs.size() - 2;
    body << "  ortc::kern::ConvGeom g{};\n  g.nSpatial = " << ns << "; g.N = " << xs[0]
         << "; g.C = " << xs[1] << "; g.M = " << ws[0] << "; g.group = " << group << ";\n";
    for (int i = 0; i < ns; ++i)
      body << "  g.in[" << i << "] = " << xs[i + 2] << "; g.kernel[" << i << "] = " << ws[i + 2]
           << "; g.out[" << i << "] = " << ys[i + 2] << "; g.stride[" << i << "] = " << strides[i]
           << "; g.padBegin[" << i << "] = " << pads[i] << "; g.dilation[" << i
           << "] = " << dil[i] << ";\n";
  };
  auto poolGeom = [&](Value x, Value y, ArrayRef<int64_t> k, ArrayRef<int64_t> strides,
                      ArrayRef<int64_t> pads, ArrayRef<int64_t> dil, bool cip) {
    auto xs = typeOf(x).getShape(), ys = typeOf(y).getShape();
    int ns = xs.size() - 2;
    body << "  ortc::kern::PoolGeom g{};\n  g.nSpatial = " << ns << "; g.N = " << xs[0]
         << "; g.C = " << xs[1] << "; g.countIncludePad = " << (cip ? "true" : "false") << ";\n";
    for (int i = 0; i < ns; ++i)
      body << "  g.in[" << i << "] = " << xs[i + 2] << "; g.kernel[" << i << "] = " << k[i]
           << "; g.out[" << i << "] = " << ys[i + 2] << "; g.stride[" << i << "] = " << strides[i]
           << "; g.padBegin[" << i << "] = " << pads[i] << "; g.dilation[" << i
           << "] = " << dil[i] << ";\n";
  };
  auto fail = [&](const std::string &msg) {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << op->getName() << " at " << op->getLoc() << ": " << msg;
    error = s;
    return failure();
  };
  for (Value v : llvm::concat<Value>(op->getOperands(), op->getResults()))
    if (cType(v).empty())
      return fail("the CPU target supports f32, f64, i64, i32 and bool tensors");

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](NegOp) { loop(res, "-" + a(0)); return success(); })
      .Case([&](ExpOp) { loop(res, "std::exp(" + a(0) + ")"); return success(); })
      .Case([&](LogOp) { loop(res, "std::log(" + a(0) + ")"); return success(); })
      .Case([&](SqrtOp) { loop(res, "std::sqrt(" + a(0) + ")"); return success(); })
      .Case([&](ErfOp) { loop(res, "std::erf(" + a(0) + ")"); return success(); })
      .Case([&](TanhOp) { loop(res, "std::tanh(" + a(0) + ")"); return success(); })
      .Case([&](SigmoidOp) { loop(res, T + "(1) / (" + T + "(1) + std::exp(-" + a(0) + "))"); return success(); })
      .Case([&](ReluOp) { loop(res, "std::max<" + T + ">(" + a(0) + ", " + T + "(0))"); return success(); })
      .Case([&](AbsOp) { loop(res, "std::abs(" + a(0) + ")"); return success(); })
      .Case([&](NotOp) { loop(res, "static_cast<uint8_t>(!" + a(0) + ")"); return success(); })
      .Case([&](ScaleOp sc) {
        loop(res, "static_cast<" + T + ">(" + a(0) + " * " +
                      llvm::formatv("{0:e17}", sc.getFactor().convertToDouble()).str() + ")");
        return success();
      })
      .Case([&](ClipOp c) {
        std::string e = a(0);
        if (c.getMin())
          e = "std::max<" + T + ">(" + e + ", " + literal(c.getMin()->convertToDouble(), T) + ")";
        if (c.getMax())
          e = "std::min<" + T + ">(" + e + ", " + literal(c.getMax()->convertToDouble(), T) + ")";
        loop(res, e);
        return success();
      })
      .Case([&](CastOp c) {
        bool toBool = typeOf(res).getElementType().isInteger(1);
        loop(res, toBool ? "static_cast<uint8_t>(" + a(0) + " != 0)"
                         : "static_cast<" + T + ">(" + a(0) + ")");
        return success();
      })
      .Case([&](AddOp) { loop(res, a(0) + " + " + a(1)); return success(); })
      .Case([&](SubOp) { loop(res, a(0) + " - " + a(1)); return success(); })
      .Case([&](MulOp) { loop(res, a(0) + " * " + a(1)); return success(); })
      .Case([&](DivOp) { loop(res, a(0) + " / " + a(1)); return success(); })
      .Case([&](PowOp) { loop(res, "static_cast<" + T + ">(std::pow(" + a(0) + ", " + a(1) + "))"); return success(); })
      .Case([&](MinOp) { loop(res, "std::min<" + T + ">(" + a(0) + ", " + a(1) + ")"); return success(); })
      .Case([&](MaxOp) { loop(res, "std::max<" + T + ">(" + a(0) + ", " + a(1) + ")"); return success(); })
      .Case([&](EqualOp) { loop(res, "static_cast<uint8_t>(" + a(0) + " == " + a(1) + ")"); return success(); })
      .Case([&](LessOp) { loop(res, "static_cast<uint8_t>(" + a(0) + " < " + a(1) + ")"); return success(); })
      .Case([&](GreaterOp) { loop(res, "static_cast<uint8_t>(" + a(0) + " > " + a(1) + ")"); return success(); })
      .Case([&](AndOp) { loop(res, "static_cast<uint8_t>(" + a(0) + " && " + a(1) + ")"); return success(); })
      .Case([&](SelectOp) { loop(res, a(0) + " ? " + a(1) + " : " + a(2)); return success(); })
      .Case([&](GeluOp g) {
        body << "  ortc::kern::gelu(" << typed(g.getX()) << ", " << typed(res, true) << ", "
             << numel(res) << ", " << (g.getTanh() ? "true" : "false") << ");\n";
        return success();
      })
      .Case([&](GeluGradOp g) {
        body << "  ortc::kern::geluGrad(" << typed(g.getX()) << ", " << typed(g.getDy()) << ", "
             << typed(res, true) << ", " << numel(res) << ", "
             << (g.getTanh() ? "true" : "false") << ");\n";
        return success();
      })
      .Case([&](BroadcastToOp b) {
        auto in = typeOf(b.getX()).getShape();
        SmallVector<int64_t> padded(typeOf(res).getRank() - in.size(), 1);
        padded.append(in.begin(), in.end());
        body << "  static const int64_t inDims[] = " << list(padded)
             << ", outDims[] = " << dims(res) << ";\n";
        body << "  ortc::kern::broadcastTo(" << typed(b.getX()) << ", inDims, "
             << typed(res, true) << ", outDims, " << padded.size() << ");\n";
        return success();
      })
      .Case([&](ReshapeOp) { return success(); }) // a view: no code
      .Case([&](TransposeOp t) {
        body << "  static const int64_t dims[] = " << dims(t.getX())
             << ", perm[] = " << list(t.getPerm()) << ";\n";
        body << "  ortc::kern::transpose(" << typed(t.getX()) << ", dims, "
             << typeOf(t.getX()).getRank() << ", perm, " << typed(res, true) << ");\n";
        return success();
      })
      .Case([&](ConcatOp c) {
        auto shape = typeOf(res).getShape();
        int64_t axis = c.getAxis();
        SmallVector<int64_t> sizes;
        body << "  const " << T << " *ins[] = {";
        for (auto [i, v] : llvm::enumerate(c.getInputs())) {
          body << (i ? ", " : "") << typed(v);
          sizes.push_back(typeOf(v).getDimSize(axis));
        }
        body << "};\n  static const int64_t sizes[] = " << list(sizes) << ";\n";
        body << "  ortc::kern::concat(ins, sizes, " << sizes.size() << ", "
             << product(shape, 0, axis) << ", " << product(shape, axis + 1, shape.size())
             << ", " << typed(res, true) << ");\n";
        return success();
      })
      .Case([&](SliceOp s) {
        body << "  static const int64_t inDims[] = " << dims(s.getX()) << ", starts[] = "
             << list(s.getStarts()) << ", steps[] = " << list(s.getSteps())
             << ", outDims[] = " << dims(res) << ";\n";
        body << "  ortc::kern::slice(" << typed(s.getX()) << ", inDims, "
             << typeOf(res).getRank() << ", starts, steps, " << typed(res, true)
             << ", outDims);\n";
        return success();
      })
      .Case([&](SliceGradOp s) {
        body << "  static const int64_t dyDims[] = " << dims(s.getDy()) << ", starts[] = "
             << list(s.getStarts()) << ", steps[] = " << list(s.getSteps())
             << ", dxDims[] = " << dims(res) << ";\n";
        body << "  ortc::kern::sliceGrad(" << typed(s.getDy()) << ", dyDims, "
             << typeOf(res).getRank() << ", starts, steps, " << typed(res, true)
             << ", dxDims);\n";
        return success();
      })
      .Case([&](PadOp p) {
        int64_t rank = typeOf(res).getRank();
        body << "  static const int64_t inDims[] = " << dims(p.getX()) << ", begin[] = "
             << list(p.getPads().take_front(rank)) << ", outDims[] = " << dims(res) << ";\n";
        body << "  ortc::kern::pad(" << typed(p.getX()) << ", inDims, " << rank << ", begin, "
             << literal(p.getValue().convertToDouble(), T) << ", " << typed(res, true)
             << ", outDims);\n";
        return success();
      })
      .Case([&](GatherOp g) {
        body << "  static const int64_t dims[] = " << dims(g.getData()) << ";\n";
        body << "  if (!ortc::kern::gather(" << typed(g.getData()) << ", dims, "
             << typeOf(g.getData()).getRank() << ", " << g.getAxis() << ", "
             << typed(g.getIndices()) << ", " << numel(g.getIndices()) << ", "
             << typed(res, true) << "))\n"
             << "    ortc_poison(" << typed(res, true) << ", " << numel(res) << ");\n";
        return success();
      })
      .Case([&](GatherGradOp g) {
        body << "  static const int64_t dims[] = " << dims(res) << ";\n";
        body << "  if (!ortc::kern::gatherGrad(" << typed(g.getDy()) << ", dims, "
             << typeOf(res).getRank() << ", " << g.getAxis() << ", " << typed(g.getIndices())
             << ", " << numel(g.getIndices()) << ", " << typed(res, true) << "))\n"
             << "    ortc_poison(" << typed(res, true) << ", " << numel(res) << ");\n";
        return success();
      })
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp>([&](auto r) {
        const char *kind = isa<ReduceSumOp>(op)    ? "Sum"
                           : isa<ReduceMeanOp>(op) ? "Mean"
                                                   : "Max";
        body << "  static const int64_t dims[] = " << dims(r.getX())
             << ", axes[] = " << list(r.getAxes()) << ";\n";
        body << "  ortc::kern::reduce(" << typed(r.getX()) << ", dims, "
             << typeOf(r.getX()).getRank() << ", axes, " << r.getAxes().size() << ", "
             << typed(res, true) << ", ortc::kern::ReduceKind::" << kind << ");\n";
        return success();
      })
      .Case([&](MatMulOp m) {
        auto as = typeOf(m.getA()).getShape();
        auto ys = typeOf(res).getShape();
        size_t r = as.size();
        int64_t k = m.getTransA() ? as[r - 2] : as[r - 1];
        body << "  ortc::kern::matmul(" << typed(m.getA()) << ", " << typed(m.getB()) << ", "
             << typed(res, true) << ", " << product(as, 0, r - 2) << ", " << ys[r - 2] << ", "
             << ys[r - 1] << ", " << k << ", " << (m.getTransA() ? "true" : "false") << ", "
             << (m.getTransB() ? "true" : "false") << ");\n";
        return success();
      })
      .Case([&](ConvOp c) {
        convGeom(c.getX(), c.getW(), res, c.getStrides(), c.getPads(), c.getDilations(),
                 c.getGroup());
        body << "  ortc::kern::convForward(" << typed(c.getX()) << ", " << typed(c.getW())
             << ", " << (c.getBias() ? typed(c.getBias()) : "nullptr") << ", "
             << typed(res, true) << ", g);\n";
        return success();
      })
      .Case([&](ConvGradInputOp c) {
        convGeom(res, c.getW(), c.getDy(), c.getStrides(), c.getPads(), c.getDilations(),
                 c.getGroup());
        body << "  ortc::kern::convGradInput(" << typed(c.getDy()) << ", " << typed(c.getW())
             << ", " << typed(res, true) << ", g);\n";
        return success();
      })
      .Case([&](ConvGradWeightOp c) {
        convGeom(c.getX(), res, c.getDy(), c.getStrides(), c.getPads(), c.getDilations(),
                 c.getGroup());
        body << "  ortc::kern::convGradWeight(" << typed(c.getDy()) << ", " << typed(c.getX())
             << ", " << typed(res, true) << ", g);\n";
        return success();
      })
      .Case<MaxPoolOp, AvgPoolOp>([&](auto p) {
        poolGeom(p.getX(), res, p.getKernelShape(), p.getStrides(), p.getPads(),
                 p.getDilations(), p.getCountIncludePad());
        body << "  ortc::kern::" << (isa<MaxPoolOp>(op) ? "maxPool" : "avgPool") << "("
             << typed(p.getX()) << ", " << typed(res, true) << ", g);\n";
        return success();
      })
      .Case([&](MaxPoolGradOp p) {
        poolGeom(res, p.getDy(), p.getKernelShape(), p.getStrides(), p.getPads(),
                 p.getDilations(), false);
        body << "  ortc::kern::maxPoolGrad(" << typed(p.getX()) << ", " << typed(p.getDy())
             << ", " << typed(res, true) << ", g);\n";
        return success();
      })
      .Case([&](AvgPoolGradOp p) {
        poolGeom(res, p.getDy(), p.getKernelShape(), p.getStrides(), p.getPads(),
                 p.getDilations(), p.getCountIncludePad());
        body << "  ortc::kern::avgPoolGrad(" << typed(p.getDy()) << ", " << typed(res, true)
             << ", g);\n";
        return success();
      })
      .Case([&](BatchNormTrainOp bn) {
        auto xs = typeOf(bn.getX()).getShape();
        body << "  ortc::kern::batchNormTrain(" << typed(bn.getX()) << ", "
             << typed(bn.getScale()) << ", " << typed(bn.getBias()) << ", "
             << typed(bn.getY(), true) << ", " << typed(bn.getMean(), true) << ", "
             << typed(bn.getVar(), true) << ", nullptr, " << xs[0] << ", " << xs[1] << ", "
             << product(xs, 2, xs.size()) << ", "
             << literal(bn.getEpsilon().convertToDouble(), T) << ");\n";
        return success();
      })
      .Case([&](BatchNormGradOp bn) {
        auto xs = typeOf(bn.getX()).getShape();
        body << "  " << T << " invStd[" << xs[1] << "];\n  for (int64_t c = 0; c < " << xs[1]
             << "; ++c)\n    invStd[c] = " << T << "(1) / std::sqrt(" << typed(bn.getVar())
             << "[c] + " << literal(bn.getEpsilon().convertToDouble(), T) << ");\n";
        body << "  ortc::kern::batchNormGrad(" << typed(bn.getX()) << ", "
             << typed(bn.getScale()) << ", " << typed(bn.getMean()) << ", invStd, "
             << typed(bn.getDy()) << ", " << typed(bn.getDx(), true) << ", "
             << typed(bn.getDscale(), true) << ", " << typed(bn.getDbias(), true) << ", "
             << xs[0] << ", " << xs[1] << ", " << product(xs, 2, xs.size()) << ");\n";
        return success();
      })
      .Case([&](BatchNormInferOp bn) {
        auto xs = typeOf(bn.getX()).getShape();
        body << "  ortc::kern::batchNormInfer(" << typed(bn.getX()) << ", "
             << typed(bn.getScale()) << ", " << typed(bn.getBias()) << ", "
             << typed(bn.getMean()) << ", " << typed(bn.getVar()) << ", " << typed(res, true)
             << ", " << xs[0] << ", " << xs[1] << ", " << product(xs, 2, xs.size()) << ", "
             << literal(bn.getEpsilon().convertToDouble(), T) << ");\n";
        return success();
      })
      .Case([&](LayerNormOp ln) {
        auto xs = typeOf(ln.getX()).getShape();
        int64_t axis = ln.getAxis();
        body << "  ortc::kern::layerNorm(" << typed(ln.getX()) << ", " << typed(ln.getScale())
             << ", " << (ln.getBias() ? typed(ln.getBias()) : "nullptr") << ", "
             << typed(ln.getY(), true) << ", " << typed(ln.getMean(), true) << ", "
             << typed(ln.getInvStd(), true) << ", " << product(xs, 0, axis) << ", "
             << product(xs, axis, xs.size()) << ", "
             << literal(ln.getEpsilon().convertToDouble(), T) << ");\n";
        return success();
      })
      .Case([&](LayerNormGradOp ln) {
        auto xs = typeOf(ln.getX()).getShape();
        int64_t axis = ln.getAxis();
        body << "  ortc::kern::layerNormGrad(" << typed(ln.getX()) << ", "
             << typed(ln.getScale()) << ", " << typed(ln.getMean()) << ", "
             << typed(ln.getInvStd()) << ", " << typed(ln.getDy()) << ", "
             << typed(ln.getDx(), true) << ", " << typed(ln.getDscale(), true) << ", "
             << typed(ln.getDbias(), true) << ", " << product(xs, 0, axis) << ", "
             << product(xs, axis, xs.size()) << ");\n";
        return success();
      })
      .Case<SoftmaxOp, LogSoftmaxOp>([&](auto s) {
        auto xs = typeOf(res).getShape();
        int64_t axis = s.getAxis();
        body << "  ortc::kern::" << (isa<SoftmaxOp>(op) ? "softmax" : "logSoftmax") << "("
             << typed(s.getX()) << ", " << typed(res, true) << ", " << product(xs, 0, axis)
             << ", " << xs[axis] << ", " << product(xs, axis + 1, xs.size()) << ");\n";
        return success();
      })
      .Case<SoftmaxGradOp, LogSoftmaxGradOp>([&](auto s) {
        auto xs = typeOf(res).getShape();
        int64_t axis = s.getAxis();
        body << "  ortc::kern::" << (isa<SoftmaxGradOp>(op) ? "softmaxGrad" : "logSoftmaxGrad")
             << "(" << typed(s.getY()) << ", " << typed(s.getDy()) << ", " << typed(res, true)
             << ", " << product(xs, 0, axis) << ", " << xs[axis] << ", "
             << product(xs, axis + 1, xs.size()) << ");\n";
        return success();
      })
      .Case<DropoutOp, DropoutGradOp>([&](auto d) {
        body << "  ortc::kern::" << (isa<DropoutOp>(op) ? "dropout" : "dropoutGrad") << "("
             << typed(op->getOperand(0)) << ", " << typed(res, true) << ", " << numel(res)
             << ", " << llvm::formatv("{0:e17}", d.getRatio().convertToDouble()).str()
             << ", static_cast<uint64_t>(" << scalar(d.getSeed()) << "), " << d.getKey()
             << "ULL);\n";
        return success();
      })
      .Case<SoftmaxCrossEntropyOp, SoftmaxCrossEntropyGradOp>([&](auto s) {
        auto ls = typeOf(s.getLogits()).getShape();
        auto ignore = s.getIgnoreIndex();
        bool sum = s.getReduction() == "sum";
        std::string ig = std::to_string(ignore.value_or(0)) + "LL, " +
                         (ignore ? "true" : "false");
        // "sum" is the mean times the number of kept rows.
        body << "  const int64_t *labels = " << typed(s.getLabels()) << ";\n";
        body << "  " << T << " factor = 1;\n";
        if (sum)
          body << "  factor = 0;\n  for (int64_t r = 0; r < " << ls[0]
               << "; ++r)\n    factor += " << (ignore ? "labels[r] != " + std::to_string(*ignore) + "LL" : "1")
               << ";\n";
        if constexpr (std::is_same_v<decltype(s), SoftmaxCrossEntropyOp>) {
          body << "  " << T << " *loss = " << typed(res, true) << ";\n";
          body << "  if (!ortc::kern::softmaxCrossEntropy(" << typed(s.getLogits())
               << ", labels, " << ls[0] << ", " << ls[1] << ", " << ig << ", loss))\n"
               << "    ortc_poison(loss, 1); // a label outside [0, C)\n  *loss *= factor;\n";
        } else {
          body << "  " << T << " dloss = " << scalar(s.getDloss()) << " * factor;\n";
          body << "  if (!ortc::kern::softmaxCrossEntropyGrad(" << typed(s.getLogits())
               << ", labels, " << ls[0] << ", " << ls[1] << ", " << ig << ", &dloss, "
               << typed(res, true) << "))\n    ortc_poison(" << typed(res, true) << ", "
               << numel(res) << ");\n";
        }
        return success();
      })
      .Case([&](AllFiniteOp f) {
        body << "  bool ok = true;\n";
        for (Value v : f.getInputs())
          body << "  ok = ok && ortc::kern::allFinite(" << typed(v) << ", " << numel(v)
               << ");\n";
        body << "  *" << typed(res, true) << " = ok;\n";
        return success();
      })
      .Case([&](SgdUpdateOp u) {
        copyIfDistinct(u.getParam(), u.getResult(0));
        if (u.getMomentumBuffer())
          copyIfDistinct(u.getMomentumBuffer(), u.getResult(1));
        body << "  ortc::kern::sgdUpdate(" << typed(u.getResult(0), true) << ", "
             << typed(u.getGrad()) << ", "
             << (u.getMomentumBuffer() ? typed(u.getResult(1), true) : "nullptr") << ", "
             << numel(u.getParam()) << ", " << scalar(u.getLr()) << ", "
             << literal(u.getMomentum().convertToDouble(), T) << ", "
             << literal(u.getDampening().convertToDouble(), T) << ", "
             << (u.getNesterov() ? "true" : "false") << ", "
             << literal(u.getWeightDecay().convertToDouble(), T) << ", " << scalar(u.getStep())
             << ", " << typed(u.getApply()) << ");\n";
        return success();
      })
      .Case([&](AdamWUpdateOp u) {
        copyIfDistinct(u.getParam(), u.getNewParam());
        copyIfDistinct(u.getM(), u.getNewM());
        copyIfDistinct(u.getV(), u.getNewV());
        body << "  ortc::kern::adamwUpdate(" << typed(u.getNewParam(), true) << ", "
             << typed(u.getGrad()) << ", " << typed(u.getNewM(), true) << ", "
             << typed(u.getNewV(), true) << ", " << numel(u.getParam()) << ", "
             << scalar(u.getLr()) << ", " << literal(u.getBeta1().convertToDouble(), T) << ", "
             << literal(u.getBeta2().convertToDouble(), T) << ", "
             << literal(u.getEps().convertToDouble(), T) << ", "
             << literal(u.getWeightDecay().convertToDouble(), T) << ", " << scalar(u.getStep())
             << ", " << typed(u.getApply()) << ");\n";
        return success();
      })
      .Default([&](Operation *) { return fail("the CPU target has no kernel for this op"); });
}

LogicalResult Emitter::emitFunction(func::FuncOp f, FunctionKernels &fk, std::string &error) {
  fn = f;
  fk.name = f.getSymName().str();
  if (auto a = f->getAttrOfType<IntegerAttr>("ortc.arena_bytes"))
    fk.arenaBytes = a.getInt();
  if (auto a = f->getAttrOfType<IntegerAttr>("ortc.arena_lower_bound"))
    fk.arenaLowerBound = a.getInt();
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    std::string role = argRole(f, i);
    if (role == "input" || role == "scalar")
      fk.inputs.push_back(argName(f, i));
  }
  for (unsigned i = 0; i < f.getNumResults(); ++i)
    if (!resultTied(f, i))
      fk.outputs.push_back(resultName(f, i));
  int k = 0;
  auto emitKernel = [&](const std::string &comment) {
    std::string name = "ortc_" + fk.name + "_k" + std::to_string(k++);
    out << "// " << comment << "\n";
    out << "extern \"C\" void " << name << "(void *const *bufs, char *arena) {\n"
        << "  (void)bufs;\n  (void)arena;\n"
        << body.str() << "}\n\n";
    body.str("");
    fk.kernels.push_back(name);
  };
  for (Operation &op : f.getBody().front()) {
    if (isa<ConstantOp, WeightOp, ReshapeOp>(op))
      continue;
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      // Results not already written in place are copied into their tensors.
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        std::string dest = destFor(i);
        if (ptr(v) == dest)
          continue;
        int64_t bytes = numel(v) * (typeOf(v).getElementType().isInteger(1)
                                        ? 1
                                        : typeOf(v).getElementType().getIntOrFloatBitWidth() / 8);
        body << "  std::memcpy(" << dest << ", " << ptr(v) << ", " << bytes << ");\n";
      }
      if (!body.str().empty())
        emitKernel(fk.name + ": copy results into their tensors");
      break;
    }
    std::string loc;
    llvm::raw_string_ostream os(loc);
    if (auto nl = dyn_cast<NameLoc>(op.getLoc()))
      os << nl.getName().str();
    else
      os << op.getLoc();
    if (failed(emitOp(&op, error)))
      return failure();
    std::string shapes;
    for (Value r : op.getResults()) {
      std::string s;
      llvm::raw_string_ostream ss(s);
      ss << r.getType();
      shapes += (shapes.empty() ? "" : ", ") + s;
    }
    emitKernel(fk.name + ": ONNX node '" + loc + "' -> " + op.getName().getStringRef().str() +
               " : " + shapes);
  }
  return success();
}

} // namespace

LogicalResult emitCpuKernels(ModuleOp module, const TensorTable &table,
                             std::vector<FunctionKernels> &functions, std::string &source,
                             std::string &error) {
  std::ostringstream kernels;
  Emitter e(table, kernels);
  for (const char *name : {"train_step", "eval_step"}) {
    auto fn = module.lookupSymbol<func::FuncOp>(name);
    if (!fn) {
      error = std::string("the module has no @") + name;
      return failure();
    }
    FunctionKernels fk;
    if (failed(e.emitFunction(fn, fk, error)))
      return failure();
    functions.push_back(std::move(fk));
  }
  std::ostringstream out;
  out << "// Generated by ortc for the CPU target: one kernel per op of the training\n"
         "// step (@train_step) and the evaluation step (@eval_step), in execution order.\n"
         "// Each kernel receives the persistent tensors (bufs[i], see manifest.json) and\n"
         "// the arena; heavy ops call the shared kernel library ortc_kernels.h.\n"
         "#include \"ortc_kernels.h\"\n\n#include <cmath>\n#include <cstring>\n"
         "#include <limits>\n#include <vector>\n\n"
         "/// Makes a failed kernel's output non-finite so the step's guard refuses it.\n"
         "template <typename T> static void ortc_poison(T *p, int64_t n) {\n"
         "  for (int64_t i = 0; i < n; ++i)\n"
         "    p[i] = std::numeric_limits<T>::quiet_NaN();\n}\n\n";
  out << e.constants() << "\n" << kernels.str();
  source = out.str();
  return success();
}

} // namespace ortc
