//===- CFamily.cpp - The kernel printer shared by every target -----------===//
//
// See CFamily.h. The walk over a step function: constants, weights and reshapes
// (views) print nothing; every other op prints one kernel body, whose operands are
// bound to pointer arguments in order of first use; a body equal to an earlier
// one is that kernel launched again with other arguments. Each distinct kernel's
// opening comment names every ONNX node, op and result types that launch it (and,
// on GPUs, its launch shape); the return copies results not already written in
// place into their tensors.
//
//===----------------------------------------------------------------------===//
#include "codegen/CFamily.h"

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "compiler/Dialect/Ortc/StepFunction.h"
#include "compiler/Dialect/Ortc/OpAnnotations.h"
#include "ortc/sha256.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cctype>
#include <cmath>
#include <cstring>

using namespace mlir;

namespace ortc {

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
  if (elt.isF16())
    return "ortc_half"; // storage; the kernel library (and the GPU preludes) define it
  if (elt.isBF16())
    return "ortc_bf16";
  return "";
}

std::string cList(ArrayRef<int64_t> xs) {
  std::string s = "{";
  for (size_t i = 0; i < xs.size(); ++i)
    s += (i ? ", " : "") + std::to_string(xs[i]);
  return xs.empty() ? "{0}" : s + "}";
}

std::string cLiteral(double v, const std::string &type, const ScalarSpelling &sp) {
  if (type == "float" || type == "double") {
    if (std::isnan(v))
      return sp.device ? "ortc::gpu::ortc_nan<" + type + ">()"
                       : "std::numeric_limits<" + type + ">::quiet_NaN()";
    if (std::isinf(v))
      return std::string(v < 0 ? "-" : "") +
             (sp.device ? "ortc::gpu::ortc_inf<" + type + ">()"
                        : "std::numeric_limits<" + type + ">::infinity()");
    std::string s = llvm::formatv("{0:e17}", v).str();
    return type == "float" ? "static_cast<float>(" + s + ")" : s;
  }
  return "static_cast<" + type + ">(" + std::to_string(static_cast<int64_t>(v)) + "LL)";
}

static RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

int64_t numElements(Value v) {
  int64_t n = 1;
  for (int64_t d : typeOf(v).getShape())
    n *= d;
  return n;
}

int64_t byteSize(Value v) {
  Type e = typeOf(v).getElementType();
  return numElements(v) * (e.isInteger(1) ? 1 : e.getIntOrFloatBitWidth() / 8);
}

std::string commDtype(const std::string &T) {
  return T == "double" ? "ORTC_COMM_F64" : T == "float" ? "ORTC_COMM_F32" : "ORTC_COMM_U8";
}

bool usesCommunicator(ModuleOp module) {
  return module
      .walk([](Operation *op) {
        auto bn = dyn_cast<BatchNormTrainOp>(op);
        auto bng = dyn_cast<BatchNormGradOp>(op);
        return isa<AllReduceOp, ReduceScatterOp, AllGatherOp, RankShardOp>(op) ||
                       (bn && bn.getSync()) || (bng && bng.getSync())
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      })
      .wasInterrupted();
}

const char *const kCommunicatorDefinition =
    "extern \"C\" const ortc_communicator *ortc_communicator_in_use = nullptr;\n"
    "extern \"C\" void ortc_set_communicator(const ortc_communicator *c) {\n"
    "  ortc_communicator_in_use = c;\n}\n\n";

void KernelPrinter::communicatorOrCopy(const std::string &dest, const std::string &src,
                                       int64_t bytes) {
  body << "  const ortc_communicator *c = ortc_communicator_in_use;\n"
          "  if (!c || c->world == 1) {\n";
  if (bytes > 0)
    emitCopy(dest, src, bytes);
  body << "  return;\n  }\n";
}

int64_t dimProduct(ArrayRef<int64_t> s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < std::min(to, s.size()); ++i)
    p *= s[i];
  return p;
}

/// The value of a splat constant as a double.
static std::optional<double> splatValue(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!dense || !dense.isSplat())
    return std::nullopt;
  Type e = dense.getElementType();
  if (isa<FloatType>(e))
    return dense.getSplatValue<APFloat>().convertToDouble();
  if (e.isInteger(1))
    return dense.getSplatValue<bool>() ? 1.0 : 0.0;
  return (double)dense.getSplatValue<APInt>().getSExtValue();
}

/// The value outside a kernel region that `v` inside it stands for.
static Value outerValue(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    if (auto f = dyn_cast_or_null<FusedOp>(arg.getOwner()->getParentOp()))
      return f.getInputs()[arg.getArgNumber()];
  if (Operation *def = v.getDefiningOp())
    if (auto f = dyn_cast_or_null<FusedOp>(def->getParentOp()))
      for (OpOperand &use : f.getBody().front().getTerminator()->getOpOperands())
        if (use.get() == v)
          return f.getResult(use.getOperandNumber());
  return v;
}

std::optional<LaunchArg> KernelPrinter::launchArgOf(Value v) {
  v = outerValue(v);
  Placement p = placementOf(v);
  switch (p.kind) {
  case Placement::Arena:
    return LaunchArg{LaunchArg::Arena, p.offset, byteSize(v)};
  case Placement::Argument:
    return LaunchArg{LaunchArg::Tensor, table.indexOf(argName(fn, p.index))};
  case Placement::Weight:
    return LaunchArg{LaunchArg::Tensor, table.indexOf(p.name)};
  case Placement::Output:
    return LaunchArg{LaunchArg::Tensor, table.indexOf(resultName(fn, p.index))};
  default:
    return std::nullopt;
  }
}

std::optional<size_t> KernelPrinter::slotIndex(Value v) {
  if (std::optional<LaunchArg> a = launchArgOf(v))
    return slotNumber(*a);
  return std::nullopt;
}

std::string KernelPrinter::ptr(Value v) {
  if (std::optional<LaunchArg> a = launchArgOf(v))
    return slot(*a);
  v = outerValue(v);
  Placement p = placementOf(v);
  switch (p.kind) {
  case Placement::Constant: {
    Value root = v;
    while (auto r = root.getDefiningOp<ReshapeOp>())
      root = r.getX();
    auto it = constNames.find(root);
    if (it != constNames.end()) {
      if (!llvm::is_contained(kernelConsts, it->second.second))
        kernelConsts.push_back(it->second.second);
      return it->second.first;
    }
    auto c = root.getDefiningOp<ConstantOp>();
    std::string t = cType(typeOf(root).getElementType());
    auto dense = cast<DenseElementsAttr>(c.getValue());
    std::string init, splat;
    if (auto s = splatValue(root)) {
      splat = cLiteral(*s, t, sp);
    } else {
      llvm::raw_string_ostream os(init);
      int64_t k = 0;
      if (isa<FloatType>(dense.getElementType()))
        for (APFloat f : dense.getValues<APFloat>())
          os << (k++ ? ", " : "") << cLiteral(f.convertToDouble(), t, sp);
      else if (dense.getElementType().isInteger(1))
        for (bool b : dense.getValues<bool>())
          os << (k++ ? ", " : "") << (b ? 1 : 0);
      else
        for (APInt i : dense.getValues<APInt>())
          os << (k++ ? ", " : "") << cLiteral((double)i.getSExtValue(), t, sp);
    }
    // Equal constants share one declaration (named after their contents), so
    // kernels reading them stay equal.
    std::string content = t + "[" + std::to_string(numElements(root)) + "]" + init + "|" + splat;
    auto known = constByContent.find(content);
    if (known == constByContent.end()) {
      std::string name = "ortc_const_" + sha256Hex(content).substr(0, 12);
      constOut.str("");
      std::string expr = declareConstant(name, t, numElements(root), init, splat);
      constDecls.push_back(constOut.str());
      known = constByContent.emplace(content, std::make_pair(expr, constDecls.size() - 1)).first;
    }
    constNames[root] = known->second;
    if (!llvm::is_contained(kernelConsts, known->second.second))
      kernelConsts.push_back(known->second.second);
    return known->second.first;
  }
  }
  return "nullptr";
}

std::string KernelPrinter::typed(Value v, bool writable) {
  return "((" + std::string(writable ? "" : "const ") + cType(typeOf(v).getElementType()) +
         " *)(" + ptr(v) + "))";
}

std::string KernelPrinter::typedNull(Value like, bool writable) {
  return "(" + std::string(writable ? "" : "const ") + cType(typeOf(like).getElementType()) +
         " *)nullptr";
}

std::string KernelPrinter::destFor(unsigned resultIndex) {
  return slot({LaunchArg::Tensor, table.indexOf(resultName(fn, resultIndex))});
}

std::optional<std::string> KernelPrinter::sameElementType(ValueRange values) {
  std::optional<std::string> t;
  for (Value v : values) {
    std::string ti = cType(typeOf(v).getElementType());
    if (t && *t != ti)
      return std::nullopt;
    t = ti;
  }
  return t;
}

SmallVector<SmallVector<Value, 4>> KernelPrinter::tableRows(ValueRange values) {
  SmallVector<SmallVector<Value, 4>> rows;
  for (Value v : values)
    rows.push_back({v});
  return rows;
}

bool KernelPrinter::argTable(ArrayRef<SmallVector<Value, 4>> rows, const std::string &name) {
  size_t width = rows.empty() ? 0 : rows.front().size();
  for (const SmallVector<Value, 4> &row : rows)
    if (row.size() != width ||
        llvm::any_of(row, [&](Value v) { return v && !launchArgOf(v); }))
      return false; // checked first: a refused table adds no arguments
  std::string text;
  for (const SmallVector<Value, 4> &row : rows) {
    text += text.empty() ? "{" : ", {";
    for (Value v : row)
      text += (v ? std::to_string(*slotIndex(v)) : std::string("-1")) + ", ";
    // The count is a launch argument too, one per row even where counts are equal:
    // the kernel's text then depends on the number of rows only, and a model whose
    // one layer changed width still finds it in the kernel cache.
    text += std::to_string(slotNumber({LaunchArg::Value, numElements(row.front())}, true)) + "}";
  }
  // Argument numbers as static data read in a loop: a kernel over hundreds of tensors
  // then compiles in no time (an initializer list of hundreds of pointer loads cost
  // the C++ compiler a second).
  body << "  static const int32_t " << name << "Slot[][" << width + 1 << "] = {" << text
       << "};\n";
  return true;
}

std::string KernelPrinter::tableCount(const std::string &name, size_t width) {
  return "(*(const int64_t *)ptrs[" + name + "Slot[i][" + std::to_string(width) + "]])";
}

std::string KernelPrinter::streamKey(uint64_t key) {
  return "static_cast<uint64_t>(*(const int64_t *)(" +
         slot({LaunchArg::Value, static_cast<int64_t>(key)}) + "))";
}

std::string KernelPrinter::sizeArg(int64_t n) {
  return "(*(const int64_t *)ptrs[" + std::to_string(slotNumber({LaunchArg::Value, n}, true)) +
         "])";
}

size_t KernelPrinter::slotNumber(LaunchArg arg, bool fresh) {
  auto it = fresh ? slots.end() : llvm::find(slots, arg);
  size_t k = it - slots.begin();
  if (it == slots.end())
    slots.push_back(arg);
  else
    it->bytes = std::max(it->bytes, arg.bytes);
  return k;
}

std::string KernelPrinter::slot(LaunchArg arg) {
  return "ptrs[" + std::to_string(slotNumber(arg)) + "]";
}

std::optional<std::string> KernelPrinter::splatLiteral(Value v) {
  if (auto s = splatValue(v))
    return cLiteral(*s, cType(typeOf(v).getElementType()), sp);
  return std::nullopt;
}

std::optional<std::string> KernelPrinter::elementwise(Operation *op, ArrayRef<std::string> a) {
  std::string T = cType(typeOf(op->getResult(0)).getElementType());
  const std::string &m = sp.math;
  auto maxOf = [&](const std::string &x, const std::string &y) {
    return sp.minMax + "max<" + T + ">(" + x + ", " + y + ")";
  };
  auto minOf = [&](const std::string &x, const std::string &y) {
    return sp.minMax + "min<" + T + ">(" + x + ", " + y + ")";
  };
  auto flag = [](const std::string &e) { return "static_cast<uint8_t>(" + e + ")"; };
  bool isFloat = T == "float" || T == "double";
  return llvm::TypeSwitch<Operation *, std::optional<std::string>>(op)
      .Case([&](NegOp) { return "-" + a[0]; })
      .Case([&](ExpOp) { return m + "exp(" + a[0] + ")"; })
      .Case([&](LogOp) { return m + "log(" + a[0] + ")"; })
      .Case([&](SqrtOp) { return m + "sqrt(" + a[0] + ")"; })
      .Case([&](ErfOp) { return m + "erf(" + a[0] + ")"; })
      .Case([&](TanhOp) { return m + "tanh(" + a[0] + ")"; })
      .Case([&](SinOp) { return m + "sin(" + a[0] + ")"; })
      .Case([&](CosOp) { return m + "cos(" + a[0] + ")"; })
      // Formulas of more than one call are the libraries' (kernels/common/ortc_scalar.h).
      .Case([&](SigmoidOp) { return lib + "sigmoidOf<" + T + ">(" + a[0] + ")"; })
      .Case([&](ReluOp) { return maxOf(a[0], T + "(0)"); })
      .Case([&](AbsOp) { return sp.abs + "(" + a[0] + ")"; })
      .Case([&](FloorOp) { return m + "floor(" + a[0] + ")"; })
      .Case([&](CeilOp) { return m + "ceil(" + a[0] + ")"; })
      // rint rounds halves to even under the default rounding mode, as ONNX Round.
      .Case([&](RoundOp) { return m + "rint(" + a[0] + ")"; })
      .Case([&](NotOp) { return flag("!" + a[0]); })
      .Case([&](GeluOp g) {
        return lib + "geluOf(" + a[0] + ", " + boolLiteral(g.getTanh()) + ")";
      })
      .Case<DropoutOp, DropoutGradOp>([&](auto d) -> std::optional<std::string> {
        if (elementIndex.empty())
          return std::nullopt;
        return lib + "dropoutOf(" + a[0] + ", static_cast<uint64_t>(" + a[1] + "), " +
               keyInKernel(d.getKey()) + ", " + elementIndex + ", " +
               llvm::formatv("{0:e17}", d.getRatio().convertToDouble()).str() + ")";
      })
      .Case([&](GeluGradOp g) {
        return lib + "geluGradOf(" + a[0] + ", " + a[1] + ", " +
               boolLiteral(g.getTanh()) + ")";
      })
      .Case([&](ScaleOp s) {
        return "static_cast<" + T + ">(" + a[0] + " * " +
               llvm::formatv("{0:e17}", s.getFactor().convertToDouble()).str() + ")";
      })
      .Case([&](ClipOp c) {
        std::string e = a[0];
        if (c.getMin())
          e = maxOf(e, cLiteral(c.getMin()->convertToDouble(), T, sp));
        if (c.getMax())
          e = minOf(e, cLiteral(c.getMax()->convertToDouble(), T, sp));
        return e;
      })
      .Case([&](CastOp c) {
        // 16-bit floats convert through float (ortc_cvt: round to nearest even).
        Type from = typeOf(c.getX()).getElementType(), to = typeOf(c.getResult()).getElementType();
        std::string x = isa<Float16Type, BFloat16Type>(from) ? "ortc_cvt<float>(" + a[0] + ")" : a[0];
        if (to.isInteger(1))
          return flag(x + " != 0");
        if (isa<Float16Type, BFloat16Type>(to))
          return "ortc_cvt<" + T + ">(static_cast<float>(" + x + "))";
        return "static_cast<" + T + ">(" + x + ")";
      })
      .Case([&](AddOp) { return a[0] + " + " + a[1]; })
      .Case([&](SubOp) { return a[0] + " - " + a[1]; })
      .Case([&](MulOp) { return a[0] + " * " + a[1]; })
      .Case([&](DivOp) { return a[0] + " / " + a[1]; })
      .Case([&](PowOp) {
        // Integer powers go through double, as std::pow does on the CPU.
        std::string x = isFloat ? a[0] : "static_cast<double>(" + a[0] + ")";
        std::string y = isFloat ? a[1] : "static_cast<double>(" + a[1] + ")";
        return "static_cast<" + T + ">(" + m + "pow(" + x + ", " + y + "))";
      })
      .Case([&](ModOp md) {
        return lib + "imod(" + a[0] + ", " + a[1] + ", " + boolLiteral(md.getFmod()) +
               ")";
      })
      .Case([&](MinOp) { return minOf(a[0], a[1]); })
      .Case([&](MaxOp) { return maxOf(a[0], a[1]); })
      .Case([&](EqualOp) { return flag(a[0] + " == " + a[1]); })
      .Case([&](LessOp) { return flag(a[0] + " < " + a[1]); })
      .Case([&](GreaterOp) { return flag(a[0] + " > " + a[1]); })
      .Case([&](AndOp) { return flag(a[0] + " && " + a[1]); })
      .Case([&](SelectOp) { return a[0] + " ? " + a[1] + " : " + a[2]; })
      .Default([](Operation *) { return std::nullopt; });
}

bool KernelPrinter::isSum(FusedOp op, unsigned i) {
  return static_cast<bool>(op.getYielded()[i].getDefiningOp<ReduceSumOp>());
}

KernelPrinter::PointwiseNest KernelPrinter::pointwiseNest(FusedOp op) {
  ArrayRef<int64_t> shape = op.getIterationShape();
  size_t rank = shape.size();
  // Each input's shape right-aligned to the iteration shape (1 where broadcast).
  SmallVector<SmallVector<int64_t>> padded;
  for (auto [k, in] : llvm::enumerate(op.getInputs())) {
    if (readByGemmOnly(op, k)) { // not read element by element
      padded.push_back(SmallVector<int64_t>(rank, 1));
      continue;
    }
    ArrayRef<int64_t> s = typeOf(in).getShape();
    SmallVector<int64_t> p(rank - std::min(rank, s.size()), 1);
    p.append(s.begin(), s.end());
    padded.push_back(p);
  }
  PointwiseNest nest;
  // Sums over the leading dims: the summed and the kept dims never share a run (a
  // pattern no input reads, dropped again below).
  op.getBody().walk([&](ReduceSumOp r) {
    SmallVector<int64_t> boundary(shape.begin(), shape.end());
    for (size_t d = 0; d < r.getAxes().size(); ++d)
      boundary[d] = 1;
    padded.push_back(boundary);
    nest.sums = true;
  });
  // Group the dims of size > 1 into runs that every input treats alike.
  SmallVector<SmallVector<size_t>> runs;
  for (size_t d = 0; d < rank; ++d) {
    if (shape[d] == 1)
      continue;
    bool joins = !runs.empty() && llvm::all_of(padded, [&](const SmallVector<int64_t> &p) {
      return (p[runs.back().back()] == 1) == (p[d] == 1);
    });
    if (joins)
      runs.back().push_back(d);
    else
      runs.push_back({d});
  }
  for (auto &run : runs)
    nest.dims.push_back(dimProduct(shape, run.front(), run.back() + 1));
  if (nest.dims.empty()) {
    nest.dims.push_back(1);
    runs.push_back({});
  }
  padded.resize(op.getInputs().size());
  for (auto &p : padded) {
    SmallVector<int64_t> strides(nest.dims.size(), 0);
    int64_t acc = 1;
    for (size_t r = nest.dims.size(); r-- > 0;) {
      bool varies = !runs[r].empty() && p[runs[r].front()] != 1;
      if (varies) {
        strides[r] = acc;
        acc *= nest.dims[r];
      }
    }
    nest.strides.push_back(std::move(strides));
  }
  if (op.getKind() == "rows" || op.getKind() == "gemm") {
    // Rows kernel: the row (the last dim) is a dim of its own, split off the run it
    // was merged into (an input varying along the run is contiguous along it). A
    // gemm kernel's epilogue runs along the product's rows so.
    int64_t n = shape.empty() ? 1 : shape.back();
    if (n == 1) {
      nest.dims.push_back(1);
      for (auto &st : nest.strides)
        st.push_back(0);
    } else if (nest.dims.back() != n) {
      nest.dims.back() /= n;
      nest.dims.push_back(n);
      for (auto &st : nest.strides) {
        int64_t inner = st.back();
        st.back() = inner * n;
        st.push_back(inner);
      }
    }
  }
  return nest;
}

void KernelPrinter::rowPointers(FusedOp op, const PointwiseNest &nest, const std::string &indent,
                                const std::string &column, std::ostream &os) {
  size_t rank = nest.dims.size();
  // Coordinates of the row along the outer dims (only where some input needs them).
  for (size_t d = 0; d + 1 < rank; ++d) {
    bool used = llvm::any_of(nest.strides, [&](auto &s) { return s[d] != 0; });
    if (!used)
      continue;
    int64_t below = dimProduct(nest.dims, d + 1, rank - 1);
    os << indent << "const int64_t c" << d << " = o";
    if (below > 1)
      os << " / " << below;
    if (d > 0)
      os << " % " << nest.dims[d];
    os << ";\n";
  }
  for (auto [k, v] : llvm::enumerate(op.getInputs())) {
    if (readByGemmOnly(op, k))
      continue;
    std::string offset;
    for (size_t d = 0; d + 1 < rank; ++d)
      if (nest.strides[k][d])
        offset += (offset.empty() ? "" : " + ") + std::string("c") + std::to_string(d) + " * " +
                  std::to_string(nest.strides[k][d]);
    if (!column.empty() && nest.strides[k][rank - 1])
      offset += (offset.empty() ? "" : " + ") + column;
    os << indent << "const " << cType(typeOf(v).getElementType()) << " *row" << k << " = in"
         << k << (offset.empty() ? "" : " + (" + offset + ")") << ";\n";
  }
}

SmallVector<std::string> KernelPrinter::pointwiseStatements(
    FusedOp op, function_ref<std::string(unsigned)> read, const std::string &indent,
    std::ostream &os, int64_t &numOps, ArrayRef<std::pair<Value, std::string>> given,
    DenseMap<Value, std::string> *exprs, const SmallPtrSetImpl<Operation *> *only) {
  Block &block = op.getBody().front();
  DenseMap<Value, std::string> local;
  DenseMap<Value, std::string> &expr = exprs ? *exprs : local;
  for (BlockArgument a : block.getArguments())
    expr[a] = read(a.getArgNumber());
  for (auto &[v, e] : given)
    expr[v] = e;
  numOps = 0;
  // In a rows kernel the row op has no scalar expression: it and what depends on it
  // are printed only where its result is given.
  bool rows = op.getKind() == "rows";
  for (Operation &inner : block.without_terminator()) {
    Value r = inner.getResult(0);
    if (expr.count(r) || (only && !only->count(&inner)))
      continue;
    if (auto lit = splatLiteral(r)) {
      expr[r] = *lit;
      continue;
    }
    if (rows && llvm::any_of(inner.getOperands(), [&](Value v) { return !expr.count(v); }))
      continue;
    // A broadcast reads its source; a sum is added up by the printer's loop.
    if (isa<BroadcastToOp, ReduceSumOp>(inner)) {
      expr[r] = expr.lookup(inner.getOperand(0));
      continue;
    }
    SmallVector<std::string> args;
    for (Value v : inner.getOperands())
      args.push_back(expr.lookup(v));
    std::optional<std::string> e = elementwise(&inner, args);
    if (rows && !e)
      continue;
    std::string name = "v" + std::to_string(numOps++);
    os << indent << "const " << cType(typeOf(r).getElementType()) << " " << name << " = " << *e
       << ";\n";
    expr[r] = name;
  }
  SmallVector<std::string> yielded;
  for (Value v : op.getYielded())
    yielded.push_back(expr.lookup(v));
  return yielded;
}

/// The ops of a kernel body that `v` depends on, not looking past `stop`.
static SmallPtrSet<Operation *, 16> dependencies(Value v, Operation *stop) {
  SmallPtrSet<Operation *, 16> slice;
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Operation *p = work.pop_back_val().getDefiningOp();
    if (p && slice.insert(p).second && p != stop)
      llvm::append_range(work, p->getOperands());
  }
  return slice;
}

Operation *KernelPrinter::rowOp(FusedOp op) {
  for (Operation &inner : op.getBody().front().without_terminator())
    if (auto f = dyn_cast<FusionOpInterface>(inner); f && f.getFusionRole() == FusionRole::Row)
      return &inner;
  return nullptr;
}

int64_t KernelPrinter::rowKernel(FusedOp op, function_ref<std::string(unsigned)> read,
                                 const std::string &indent, std::ostream &os,
                                 const std::string &product) {
  Operation *row = rowOp(op);
  Value result = row->getResult(0);
  int64_t n = typeOf(result).getShape().back();
  std::string T = cType(typeOf(result).getElementType());
  std::string in = indent + "  ";
  int64_t numOps = 0, ops = 0;
  // One loader per operand of the row op: the prologue's statements for element j.
  std::string call;
  SmallVector<std::pair<Value, std::string>> given;
  if (op.getGemm())
    given = productExprs(op, product);
  for (auto [k, v] : llvm::enumerate(row->getOperands())) {
    SmallPtrSet<Operation *, 16> slice = dependencies(v, row);
    std::ostringstream stmts;
    DenseMap<Value, std::string> exprs;
    pointwiseStatements(op, read, in, stmts, numOps, given, &exprs, &slice);
    ops += numOps;
    os << indent << "auto load" << k << " = [&](int64_t j) -> " << T << " {\n"
       << stmts.str() << in << "return " << exprs.lookup(v) << ";\n" << indent << "};\n";
    call += ", load" + std::to_string(k);
  }
  // The store: the epilogue's statements with the row op's element given, and every
  // yielded value written at its element.
  SmallPtrSet<Operation *, 16> slice;
  for (Value y : op.getYielded())
    slice.insert_range(dependencies(y, row));
  std::ostringstream stmts;
  given.push_back({result, "r"});
  SmallVector<std::string> ys =
      pointwiseStatements(op, read, in, stmts, numOps, given, nullptr, &slice);
  ops += numOps;
  os << indent << "auto store = [&](int64_t j, " << T << " r) {\n" << stmts.str();
  for (auto [k, y] : llvm::enumerate(ys))
    os << in
       << elementStore("out" + std::to_string(k) + "[o * " + std::to_string(n) + " + j]",
                       typeOf(op.getResult(k)).getElementType(), y)
       << "\n";
  os << indent << "};\n";
  std::string name = llvm::TypeSwitch<Operation *, std::string>(row)
                         .Case([](SoftmaxOp) { return "softmaxLine"; })
                         .Case([](LogSoftmaxOp) { return "logSoftmaxLine"; })
                         .Case([](SoftmaxGradOp) { return "softmaxGradLine"; })
                         .Case([](LogSoftmaxGradOp) { return "logSoftmaxGradLine"; });
  os << indent << lib << name << "<" << T << ">(" << n << call << ", store);\n";
  return ops + 5; // the line function's own passes: max, exp, sum, scale (softmaxLine)
}

/// The ONNX node an op came from (its NameLoc), else its printed location.
static std::string nodeName(Location loc) {
  if (auto nl = dyn_cast<NameLoc>(loc))
    return nl.getName().str();
  std::string s;
  llvm::raw_string_ostream os(s);
  os << loc;
  return s;
}

SmallVector<Operation *> KernelPrinter::multiTensorOps(FusedOp op) {
  SmallVector<Operation *> ops;
  for (Operation &inner : op.getBody().front().without_terminator())
    if (!isa<ConstantOp>(inner))
      ops.push_back(&inner);
  return ops;
}

void KernelPrinter::multiTensorUpdate(FusedOp op) {
  SmallVector<Operation *> ops = multiTensorOps(op);
  std::string T = cType(typeOf(op.getResult(0)).getElementType());
  auto copyIfDistinct = [&](Value from, Value to) {
    if (ptr(from) != ptr(to))
      emitCopy(ptr(to), ptr(from), byteSize(to));
  };
  std::ostringstream list;
  SmallVector<SmallVector<Value, 4>> rows;
  for (Operation *inner : ops) {
    if (auto u = dyn_cast<AdamWUpdateOp>(inner)) {
      copyIfDistinct(u.getParam(), u.getNewParam());
      copyIfDistinct(u.getM(), u.getNewM());
      copyIfDistinct(u.getV(), u.getNewV());
      list << "      {" << typed(u.getNewParam(), true) << ", " << typed(u.getGrad()) << ", "
           << typed(u.getNewM(), true) << ", " << typed(u.getNewV(), true) << ", "
           << numElements(u.getParam()) << "},\n";
      rows.push_back({u.getNewParam(), u.getGrad(), u.getNewM(), u.getNewV()});
      continue;
    }
    auto s = cast<SgdUpdateOp>(inner);
    copyIfDistinct(s.getParam(), s.getResult(0));
    if (s.getMomentumBuffer())
      copyIfDistinct(s.getMomentumBuffer(), s.getResult(1));
    list << "      {" << typed(s.getResult(0), true) << ", " << typed(s.getGrad()) << ", "
         << (s.getMomentumBuffer() ? typed(s.getResult(1), true) : typedNull(s.getParam(), true))
         << ", " << typedNull(s.getParam(), true) << ", " << numElements(s.getParam()) << "},\n";
    rows.push_back({s.getResult(0), s.getGrad(),
                    s.getMomentumBuffer() ? s.getResult(1) : Value(), Value()});
  }
  if (argTable(rows, "upd")) {
    auto at = [&](int c, const char *qualifier) {
      std::string k = "updSlot[i][" + std::to_string(c) + "]";
      return "(" + std::string(qualifier) + T + " *)(" + k + " < 0 ? nullptr : ptrs[" + k + "])";
    };
    body << "  " << lib << "UpdateTensor<" << T << "> ts[" << rows.size() << "];\n"
         << "  for (int i = 0; i < " << rows.size() << "; ++i)\n"
         << "    ts[i] = {" << at(0, "") << ", " << at(1, "const ") << ", " << at(2, "")
         << ", " << at(3, "") << ", " << tableCount("upd", 4) << "};\n";
  } else {
    body << "  const " << lib << "UpdateTensor<" << T << "> ts[] = {\n" << list.str() << "  };\n";
  }
  auto lit = [&](APFloat v) { return cLiteral(v.convertToDouble(), T, sp); };
  if (auto u = dyn_cast<AdamWUpdateOp>(ops.front())) {
    body << "  " << lib << "adamwUpdateMulti(ts, " << ops.size() << ", " << runtimeScalar(u.getLr())
         << ", " << runtimeScalar(u.getBeta1()) << ", " << runtimeScalar(u.getBeta2()) << ", "
         << runtimeScalar(u.getEps()) << ", " << runtimeScalar(u.getWeightDecay()) << ", "
         << runtimeScalar(u.getStep()) << ", "
         << typed(u.getApply()) << callTail << ");\n";
    return;
  }
  auto u = cast<SgdUpdateOp>(ops.front());
  body << "  " << lib << "sgdUpdateMulti(ts, " << ops.size() << ", " << runtimeScalar(u.getLr())
       << ", " << lit(u.getMomentum()) << ", " << lit(u.getDampening()) << ", "
       << boolLiteral(u.getNesterov()) << ", " << lit(u.getWeightDecay()) << ", "
       << runtimeScalar(u.getStep()) << ", " << typed(u.getApply()) << callTail << ");\n";
}

std::string KernelPrinter::fusedNodes(Operation *op) {
  std::string out;
  op->walk([&](Operation *inner) {
    if (inner == op || isa<YieldOp, ConstantOp, BroadcastToOp>(inner))
      return;
    out += (out.empty() ? "" : ", ") + nodeName(inner->getLoc()) + " (" +
           inner->getName().stripDialect().str() + ")";
  });
  return out;
}

std::string KernelPrinter::accumLiteral(Operation *op) const {
  std::optional<Accumulation> a = accumulationOf(op);
  if (!a)
    return "";
  return lib + "Accum{" + lib + (a->type.isBF16() ? "Accum::Bf16" : "Accum::Half") + ", " +
         std::to_string(a->chunk) + "}";
}

void KernelPrinter::convGeom(Operation *op, Value x, Value w, Value y,
                             ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                             ArrayRef<int64_t> dil, int64_t group) {
  // The library plans each geometry at run time (oneDNN's plans are cached by it), so
  // the sizes are launch values: the convolutions of every stage share their kernels.
  auto xs = typeOf(x).getShape(), ws = typeOf(w).getShape(), ys = typeOf(y).getShape();
  int ns2 = xs.size() - 2;
  body << "  " << lib << "ConvGeom g{};\n  g.nSpatial = " << ns2 << "; g.N = " << sizeArg(xs[0])
       << "; g.C = " << sizeArg(xs[1]) << "; g.M = " << sizeArg(ws[0])
       << "; g.group = " << sizeArg(group) << ";\n";
  for (int i = 0; i < ns2; ++i)
    body << "  g.in[" << i << "] = " << sizeArg(xs[i + 2]) << "; g.kernel[" << i
         << "] = " << sizeArg(ws[i + 2]) << "; g.out[" << i << "] = " << sizeArg(ys[i + 2])
         << "; g.stride[" << i << "] = " << sizeArg(strides[i]) << "; g.padBegin[" << i
         << "] = " << sizeArg(pads[i]) << "; g.dilation[" << i << "] = " << sizeArg(dil[i])
         << ";\n";
  if (std::string a = accumLiteral(op); !a.empty())
    body << "  g.accum = " << a << ";\n";
}

void KernelPrinter::poolGeom(const std::string &ns, Value x, Value y, ArrayRef<int64_t> k,
                             ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                             ArrayRef<int64_t> dil, bool cip) {
  auto xs = typeOf(x).getShape(), ys = typeOf(y).getShape();
  int ns2 = xs.size() - 2;
  body << "  " << ns << "PoolGeom g{};\n  g.nSpatial = " << ns2 << "; g.N = " << sizeArg(xs[0])
       << "; g.C = " << sizeArg(xs[1]) << "; g.countIncludePad = " << boolLiteral(cip)
       << ";\n";
  for (int i = 0; i < ns2; ++i)
    body << "  g.in[" << i << "] = " << sizeArg(xs[i + 2]) << "; g.kernel[" << i
         << "] = " << sizeArg(k[i]) << "; g.out[" << i << "] = " << sizeArg(ys[i + 2])
         << "; g.stride[" << i << "] = " << sizeArg(strides[i]) << "; g.padBegin[" << i
         << "] = " << sizeArg(pads[i]) << "; g.padEnd[" << i << "] = " << sizeArg(pads[i + ns2])
         << "; g.dilation[" << i << "] = " << sizeArg(dil[i]) << ";\n";
}

LogicalResult KernelPrinter::unsupported(Operation *op, const std::string &why,
                                         std::string &error) {
  llvm::raw_string_ostream os(error);
  os << op->getName() << " at " << op->getLoc() << ": " << why;
  return failure();
}

std::string KernelPrinter::layoutLiteral(const MatrixLayout &l) {
  return "{" + std::to_string(l.ld) + ", " + std::to_string(l.inner) + ", " +
         std::to_string(l.outerStride) + ", " + std::to_string(l.innerStride) + "}";
}

KernelPrinter::GemmParts KernelPrinter::gemmParts(Value a, Value b, bool transA, bool transB,
                                                 ArrayRef<int64_t> ys) {
  size_t r = ys.size();
  GemmParts g;
  g.batch = dimProduct(ys, 0, r - 2);
  g.m = ys[r - 2];
  g.n = ys[r - 1];
  g.k = typeOf(a).getDimSize(r - (transA ? 2 : 1));
  auto operand = [&](Value v, bool trans, int64_t rows, int64_t cols, std::string &p,
                     std::string &layout) {
    MatrixLayout l{cols, 1, rows * cols, 0, false}; // stored [rows, cols], contiguous
    if (auto view = v.getDefiningOp<StridedViewOp>()) {
      l = *view.getMatrixLayout();
      p = "(" + typed(view.getX()) + " + " + std::to_string(view.getOffset()) + ")";
    } else {
      p = typed(v);
    }
    layout = layoutLiteral(l);
    return trans != l.transposed;
  };
  g.transA = operand(a, transA, transA ? g.k : g.m, transA ? g.m : g.k, g.a, g.layoutA);
  g.transB = operand(b, transB, transB ? g.n : g.k, transB ? g.k : g.n, g.b, g.layoutB);
  return g;
}

std::string KernelPrinter::gemmArguments(const GemmParts &g, std::string &sizes) {
  sizes = std::to_string(g.batch) + ", " + std::to_string(g.m) + ", " + std::to_string(g.n) +
          ", " + std::to_string(g.k) + ", " + boolLiteral(g.transA) + ", " +
          boolLiteral(g.transB);
  return g.a + ", " + g.layoutA + ", " + g.b + ", " + g.layoutB;
}

std::string KernelPrinter::gemmOperands(Value a, Value b, bool transA, bool transB,
                                        ArrayRef<int64_t> ys, std::string &sizes) {
  return gemmArguments(gemmParts(a, b, transA, transB, ys), sizes);
}

bool KernelPrinter::readByGemmOnly(FusedOp op, unsigned k) {
  Value arg = op.getBody().front().getArgument(k);
  return op.getGemm() && !arg.use_empty() &&
         llvm::all_of(arg.getUsers(), llvm::IsaPred<MatMulOp>);
}

SmallVector<std::pair<Value, std::string>> KernelPrinter::productExprs(FusedOp op,
                                                                     const std::string &expr) {
  Value product = op.getGemm().getResult();
  SmallVector<std::pair<Value, std::string>> given{{product, expr}};
  for (Operation *u : product.getUsers())
    if (isa<ReshapeOp>(u))
      given.push_back({u->getResult(0), expr});
  return given;
}

std::string KernelPrinter::gemmCall(FusedOp op, std::string &sizes) {
  return gemmArguments(gemmCallParts(op), sizes);
}

KernelPrinter::GemmParts KernelPrinter::gemmCallParts(FusedOp op) {
  MatMulOp mm = op.getGemm();
  return gemmParts(outerValue(mm.getA()), outerValue(mm.getB()), mm.getTransA(), mm.getTransB(),
                   typeOf(mm.getResult()).getShape());
}

bool KernelPrinter::emitLibraryCall(Operation *op) {
  if (op->getNumResults() == 0)
    return false;
  Value res = op->getResult(0);
  std::string T = cType(typeOf(res).getElementType());
  auto dims = [&](Value v) { return cList(typeOf(v).getShape()); };
  // A float32 GEMM through layouts (matmulLayout): operands read through strided views
  // (kernel formation) or contiguous, the product [batch..., M, N] written where `lc`
  // says from `c`.
  auto layoutGemm = [&](Value a, Value bv, bool transA, bool transB, ArrayRef<int64_t> ys,
                        const std::string &c, MatrixLayout lc) {
    std::string sizes, operands = gemmOperands(a, bv, transA, transB, ys, sizes);
    body << "  " << lib << "matmulLayout(" << operands << ", " << c << ", "
         << layoutLiteral(lc) << ", " << sizes << callTail << ");\n";
  };
  return llvm::TypeSwitch<Operation *, bool>(op)
      .Case([&](BroadcastToOp bc) {
        auto in = typeOf(bc.getX()).getShape();
        SmallVector<int64_t> padded(typeOf(res).getRank() - in.size(), 1);
        padded.append(in.begin(), in.end());
        body << "  static const int64_t inDims[] = " << cList(padded)
             << ", outDims[] = " << dims(res) << ";\n";
        body << "  " << lib << "broadcastTo(" << typed(bc.getX()) << ", inDims, " << typed(res, true)
             << ", outDims, " << padded.size() << callTail << ");\n";
        return true;
      })
      .Case([&](TransposeOp t) {
        body << "  static const int64_t dims[] = " << dims(t.getX())
             << ", perm[] = " << cList(t.getPerm()) << ";\n";
        body << "  " << lib << "transpose(" << typed(t.getX()) << ", dims, "
             << typeOf(t.getX()).getRank() << ", perm, " << typed(res, true) << callTail << ");\n";
        return true;
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
        body << "};\n  static const int64_t sizes[] = " << cList(sizes) << ";\n";
        body << "  " << lib << "concat(ins, sizes, " << sizes.size() << ", "
             << dimProduct(shape, 0, axis) << ", " << dimProduct(shape, axis + 1, shape.size())
             << ", " << typed(res, true) << callTail << ");\n";
        return true;
      })
      .Case([&](SliceOp sl) {
        body << "  static const int64_t inDims[] = " << dims(sl.getX()) << ", starts[] = "
             << cList(sl.getStarts()) << ", steps[] = " << cList(sl.getSteps())
             << ", outDims[] = " << dims(res) << ";\n";
        body << "  " << lib << "slice(" << typed(sl.getX()) << ", inDims, "
             << typeOf(res).getRank() << ", starts, steps, " << typed(res, true)
             << ", outDims" << callTail << ");\n";
        return true;
      })
      .Case([&](SliceGradOp sl) {
        body << "  static const int64_t dyDims[] = " << dims(sl.getDy()) << ", starts[] = "
             << cList(sl.getStarts()) << ", steps[] = " << cList(sl.getSteps())
             << ", dxDims[] = " << dims(res) << ";\n";
        body << "  " << lib << "sliceGrad(" << typed(sl.getDy()) << ", dyDims, "
             << typeOf(res).getRank() << ", starts, steps, " << typed(res, true)
             << ", dxDims" << callTail << ");\n";
        return true;
      })
      .Case([&](PadOp p) {
        int64_t rank = typeOf(res).getRank();
        body << "  static const int64_t inDims[] = " << dims(p.getX()) << ", begin[] = "
             << cList(p.getPads().take_front(rank)) << ", outDims[] = " << dims(res) << ";\n";
        body << "  " << lib << "pad(" << typed(p.getX()) << ", inDims, " << rank << ", begin, "
             << cLiteral(p.getValue().convertToDouble(), T, sp) << ", " << typed(res, true)
             << ", outDims" << callTail << ");\n";
        return true;
      })
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceProdOp>([&](auto r) {
        const char *kind = isa<ReduceSumOp>(op)    ? "Sum"
                           : isa<ReduceMeanOp>(op) ? "Mean"
                           : isa<ReduceProdOp>(op) ? "Prod"
                                                   : "Max";
        body << "  static const int64_t dims[] = " << dims(r.getX())
             << ", axes[] = " << cList(r.getAxes()) << ";\n";
        body << "  " << lib << "reduce(" << typed(r.getX()) << ", dims, "
             << typeOf(r.getX()).getRank() << ", axes, " << r.getAxes().size() << ", "
             << typed(res, true) << ", " << lib << "ReduceKind::" << kind;
        if (std::string a = accumLiteral(op); !a.empty())
          body << ", " << a;
        body << callTail << ");\n";
        return true;
      })
      .Case([&](ReduceProdGradOp g) {
        auto xs = typeOf(g.getX()).getShape();
        int64_t n = xs.back();
        body << "  " << lib << "reduceProdGrad(" << typed(g.getX()) << ", " << typed(g.getDy())
             << ", " << typed(res, true) << ", " << (n ? numElements(res) / n : 0) << ", " << n
             << callTail << ");\n";
        return true;
      })
      .Case<ArgMaxOp, ArgMinOp>([&](auto a) {
        auto xs = typeOf(a.getX()).getShape();
        int64_t axis = a.getAxis();
        body << "  " << lib << "argReduce(" << typed(a.getX()) << ", " << dimProduct(xs, 0, axis)
             << ", " << xs[axis] << ", " << dimProduct(xs, axis + 1, xs.size()) << ", "
             << boolLiteral(isa<ArgMinOp>(op)) << ", " << boolLiteral(a.getSelectLastIndex()) << ", "
             << typed(res, true) << callTail << ");\n";
        return true;
      })
      .Case([&](TopKOp t) {
        auto xs = typeOf(t.getX()).getShape();
        int64_t axis = t.getAxis();
        body << "  " << lib << "topK(" << typed(t.getX()) << ", " << dimProduct(xs, 0, axis)
             << ", " << xs[axis] << ", " << dimProduct(xs, axis + 1, xs.size()) << ", " << t.getK()
             << ", " << boolLiteral(t.getLargest()) << ", " << typed(t.getValues(), true) << ", "
             << typed(t.getIndices(), true) << callTail << ");\n";
        return true;
      })
      .Case([&](CumSumOp c) {
        auto xs = typeOf(c.getX()).getShape();
        int64_t axis = c.getAxis();
        body << "  " << lib << "cumsum(" << typed(c.getX()) << ", " << dimProduct(xs, 0, axis)
             << ", " << xs[axis] << ", " << dimProduct(xs, axis + 1, xs.size()) << ", "
             << boolLiteral(c.getExclusive()) << ", " << boolLiteral(c.getReverse()) << ", " << typed(res, true)
             << callTail << ");\n";
        return true;
      })
      .Case([&](MatMulOp m) {
        auto as = typeOf(m.getA()).getShape();
        auto ys = typeOf(res).getShape();
        size_t r = as.size();
        int64_t k = m.getTransA() ? as[r - 2] : as[r - 1];
        int64_t batch = dimProduct(as, 0, r - 2);
        std::string accum = accumLiteral(op);
        // 16-bit operands: float sums into a float (f32_result) or 16-bit result.
        bool wide = isa<Float16Type, BFloat16Type>(typeOf(m.getA()).getElementType());
        auto viewA = m.getA().getDefiningOp<StridedViewOp>();
        auto viewB = m.getB().getDefiningOp<StridedViewOp>();
        if (viewA || viewB) {
          int64_t n = ys[r - 1];
          layoutGemm(m.getA(), m.getB(), m.getTransA(), m.getTransB(), ys,
                     typed(res, true), MatrixLayout{n, 1, ys[r - 2] * n, 0, false});
          return true;
        }
        const char *name = wide ? "matmulWide(" : accum.empty() ? "matmul(" : "matmulAccum(";
        body << "  " << lib << name << typed(m.getA()) << ", " << typed(m.getB()) << ", "
             << typed(res, true) << ", " << sizeArg(batch) << ", " << sizeArg(ys[r - 2]) << ", "
             << sizeArg(ys[r - 1]) << ", " << sizeArg(k) << ", " << boolLiteral(m.getTransA()) << ", "
             << boolLiteral(m.getTransB())
             << (accum.empty() ? "" : ", " + accum) << callTail << ");\n";
        return true;
      })
      .Case([&](MatMulIntoOp m) {
        // The product into its slot of dest's buffer (the memory plan gives the result
        // that buffer; where it could not, dest is copied first, unless it is an
        // ortc.empty that the GEMMs fill).
        if (!m.getDest().getDefiningOp<EmptyOp>() && ptr(m.getDest()) != ptr(res))
          emitCopy(ptr(res), ptr(m.getDest()), byteSize(res));
        SmallVector<int64_t> ys = m.getProductShape();
        layoutGemm(m.getA(), m.getB(), m.getTransA(), m.getTransB(), ys,
                   "(" + typed(res, true) + " + " + std::to_string(m.getOffset()) + ")",
                   *matrixLayout(ys, m.getStrides()));
        return true;
      })
      .Case([&](ConvOp c) {
        convGeom(op, c.getX(), c.getW(), res, c.getStrides(), c.getPads(), c.getDilations(),
                 c.getGroup());
        body << "  " << lib << "convForward(" << typed(c.getX()) << ", " << typed(c.getW()) << ", "
             << (c.getBias() ? typed(c.getBias()) : typedNull(res)) << ", " << typed(res, true)
             << ", g" << callTail << ");\n";
        return true;
      })
      .Case([&](ConvGradInputOp c) {
        convGeom(op, res, c.getW(), c.getDy(), c.getStrides(), c.getPads(), c.getDilations(),
                 c.getGroup());
        body << "  " << lib << "convGradInput(" << typed(c.getDy()) << ", " << typed(c.getW())
             << ", " << typed(res, true) << ", g" << callTail << ");\n";
        return true;
      })
      .Case([&](ConvGradWeightOp c) {
        convGeom(op, c.getX(), res, c.getDy(), c.getStrides(), c.getPads(), c.getDilations(),
                 c.getGroup());
        body << "  " << lib << "convGradWeight(" << typed(c.getDy()) << ", " << typed(c.getX())
             << ", " << typed(res, true) << ", g" << callTail << ");\n";
        return true;
      })
      .Case<MaxPoolOp, AvgPoolOp>([&](auto p) {
        poolGeom(lib, p.getX(), res, p.getKernelShape(), p.getStrides(), p.getPads(),
                 p.getDilations(), p.getCountIncludePad());
        body << "  " << lib << (isa<MaxPoolOp>(op) ? "maxPool" : "avgPool") << "("
             << typed(p.getX()) << ", " << typed(res, true) << ", g" << callTail << ");\n";
        return true;
      })
      .Case([&](MaxPoolGradOp p) {
        poolGeom(lib, res, p.getDy(), p.getKernelShape(), p.getStrides(), p.getPads(),
                 p.getDilations(), false);
        body << "  " << lib << "maxPoolGrad(" << typed(p.getX()) << ", " << typed(p.getDy())
             << ", " << typed(res, true) << ", g" << callTail << ");\n";
        return true;
      })
      .Case([&](AvgPoolGradOp p) {
        poolGeom(lib, res, p.getDy(), p.getKernelShape(), p.getStrides(), p.getPads(),
                 p.getDilations(), p.getCountIncludePad());
        body << "  " << lib << "avgPoolGrad(" << typed(p.getDy()) << ", " << typed(res, true)
             << ", g" << callTail << ");\n";
        return true;
      })
      .Case([&](BatchNormInferOp bn) {
        auto xs = typeOf(bn.getX()).getShape();
        body << "  " << lib << "batchNormInfer(" << typed(bn.getX()) << ", " << typed(bn.getScale())
             << ", " << typed(bn.getBias()) << ", " << typed(bn.getMean()) << ", "
             << typed(bn.getVar()) << ", " << typed(res, true) << ", " << sizeArg(xs[0]) << ", "
             << sizeArg(xs[1]) << ", " << sizeArg(dimProduct(xs, 2, xs.size())) << ", "
             << cLiteral(bn.getEpsilon().convertToDouble(), T, sp) << callTail << ");\n";
        return true;
      })
      .Case([&](LayerNormOp ln) {
        auto xs = typeOf(ln.getX()).getShape();
        int64_t axis = ln.getAxis();
        body << "  " << lib << "layerNorm(" << typed(ln.getX()) << ", " << typed(ln.getScale())
             << ", " << (ln.getBias() ? typed(ln.getBias()) : typedNull(ln.getX())) << ", "
             << typed(ln.getY(), true) << ", " << typed(ln.getMean(), true) << ", "
             << typed(ln.getInvStd(), true) << ", " << sizeArg(dimProduct(xs, 0, axis)) << ", "
             << sizeArg(dimProduct(xs, axis, xs.size())) << ", "
             << cLiteral(ln.getEpsilon().convertToDouble(), T, sp) << callTail << ");\n";
        return true;
      })
      .Case([&](LayerNormGradOp ln) {
        auto xs = typeOf(ln.getX()).getShape();
        int64_t axis = ln.getAxis();
        body << "  " << lib << "layerNormGrad(" << typed(ln.getX()) << ", " << typed(ln.getScale())
             << ", " << typed(ln.getMean()) << ", " << typed(ln.getInvStd()) << ", "
             << typed(ln.getDy()) << ", " << typed(ln.getDx(), true) << ", "
             << typed(ln.getDscale(), true) << ", " << typed(ln.getDbias(), true) << ", "
             << sizeArg(dimProduct(xs, 0, axis)) << ", " << sizeArg(dimProduct(xs, axis, xs.size()))
             << callTail << ");\n";
        return true;
      })
      .Case<SoftmaxOp, LogSoftmaxOp>([&](auto sm) {
        auto xs = typeOf(res).getShape();
        int64_t axis = sm.getAxis();
        body << "  " << lib << (isa<SoftmaxOp>(op) ? "softmax" : "logSoftmax") << "("
             << typed(sm.getX()) << ", " << typed(res, true) << ", " << dimProduct(xs, 0, axis)
             << ", " << xs[axis] << ", " << dimProduct(xs, axis + 1, xs.size()) << callTail << ");\n";
        return true;
      })
      .Case<SoftmaxGradOp, LogSoftmaxGradOp>([&](auto sm) {
        auto xs = typeOf(res).getShape();
        int64_t axis = sm.getAxis();
        body << "  " << lib << (isa<SoftmaxGradOp>(op) ? "softmaxGrad" : "logSoftmaxGrad") << "("
             << typed(sm.getY()) << ", " << typed(sm.getDy()) << ", " << typed(res, true) << ", "
             << dimProduct(xs, 0, axis) << ", " << xs[axis] << ", "
             << dimProduct(xs, axis + 1, xs.size()) << callTail << ");\n";
        return true;
      })
      .Default([](Operation *) { return false; });
}

/// Stands for the kernel's name while its body is printed: the body decides the
/// name (equal bodies share one), and device functions are named after it.
static constexpr const char *kNamePlaceholder = "@ortc_kernel@";

void KernelPrinter::finishKernel(const std::string &site, StringRef opName,
                                 FunctionKernels &fk, const std::string &node, int64_t bytes) {
  std::string launcher = std::string("extern \"C\" void ") + kNamePlaceholder + signature() +
                         " {\n" + prologue() + setup.str() + body.str() + "}\n";
  std::string text = device.str() + launcher + launchNote;
  auto [it, added] = distinctByText.emplace(text, distinct.size());
  if (added) {
    // Named after the op and a hash of the text: the same kernel keeps its name
    // (and its unit its object) when other kernels come or go.
    std::string hash = sha256Hex(text);
    std::string stem = opName.str();
    for (char &c : stem)
      if (!std::isalnum(static_cast<unsigned char>(c)))
        c = '_';
    std::string name = "ortc_" + stem + "_" + hash.substr(0, 12);
    while (!kernelNames.insert(name).second) // a 48-bit collision: still unique
      name += "x";
    DistinctKernel k{name, device.str(), launcher, launchNote, {}, kernelConsts,
                     std::stoull(hash.substr(0, 16), nullptr, 16)};
    distinct.push_back(std::move(k));
  }
  DistinctKernel &k = distinct[it->second];
  if (k.sites.empty() || node < k.firstNode)
    k.firstNode = node;
  k.sites.push_back(site);
  fk.launches.push_back({k.name, slots, node, opName.str(), bytes});
  for (std::ostringstream *s : {&setup, &body, &device})
    s->str("");
  launchNote.clear();
  slots.clear();
  kernelConsts.clear();
}

/// The first component of a hierarchical ONNX node name ("/blocks.6/mlp/MatMul"
/// -> "/blocks.6", the module that made it), or "" for flat names.
static StringRef topScope(StringRef node) {
  if (!node.starts_with("/"))
    return "";
  size_t end = node.find('/', 1);
  return end == StringRef::npos ? StringRef() : node.take_front(end);
}

std::vector<std::string> KernelPrinter::kernelUnits(bool split) const {
  // Algorithm: walk the kernels by their least ONNX node name (a stable sort of
  // the first-launch order); a unit ends after a kernel whose hash is 0 modulo
  // kChunk (content-defined chunking, as rsync and restic cut files), before a
  // kernel whose node's module (topScope) differs from the last one's, or once it
  // holds kMaxKernels. Boundaries thus move only where kernels changed, and units
  // average kChunk kernels. The order of first launch would scatter one layer's
  // new kernels (forward, backward, evaluation) over the whole list; the module
  // cut keeps them out of the next module's unit (an edited layer's new kernels
  // otherwise share a chunk with the unchanged kernels after them).
  constexpr uint64_t kChunk = 4;
  constexpr size_t kMaxKernels = 24;
  std::vector<const DistinctKernel *> order;
  for (const DistinctKernel &k : distinct)
    order.push_back(&k);
  // One unit (the GPU targets) keeps the order of first launch: easier to read.
  if (split)
    std::stable_sort(order.begin(), order.end(),
                     [](const DistinctKernel *a, const DistinctKernel *b) {
                       return a->firstNode < b->firstNode;
                     });
  std::vector<std::string> units;
  std::string unit;
  std::vector<size_t> declared;
  size_t inUnit = 0;
  auto endUnit = [&] {
    units.push_back(std::move(unit));
    unit.clear();
    declared.clear();
    inUnit = 0;
  };
  StringRef scope;
  for (const DistinctKernel *kp : order) {
    const DistinctKernel &k = *kp;
    if (split && inUnit && topScope(k.firstNode) != scope)
      endUnit();
    scope = topScope(k.firstNode);
    for (size_t c : k.consts)
      if (!llvm::is_contained(declared, c)) {
        declared.push_back(c);
        unit += constDecls[c];
      }
    std::string text = k.device;
    for (const std::string &site : k.sites)
      text += "// " + site + "\n";
    if (!k.launchNote.empty())
      text += "// launch: " + k.launchNote + "\n";
    text += k.launcher;
    for (size_t at = text.find(kNamePlaceholder); at != std::string::npos;
         at = text.find(kNamePlaceholder, at + k.name.size()))
      text.replace(at, std::strlen(kNamePlaceholder), k.name);
    unit += text + "\n";
    ++inUnit;
    if (split && (k.hash % kChunk == 0 || inUnit == kMaxKernels))
      endUnit();
  }
  if (inUnit || units.empty())
    units.push_back(std::move(unit));
  return units;
}

LogicalResult KernelPrinter::emitFunction(func::FuncOp f, FunctionKernels &fk,
                                          std::string &error) {
  fn = f;
  fk.name = f.getSymName().str();
  if (auto a = f->getAttrOfType<IntegerAttr>("ortc.arena_bytes"))
    fk.arenaBytes = a.getInt();
  if (auto a = f->getAttrOfType<IntegerAttr>("ortc.arena_lower_bound"))
    fk.arenaLowerBound = a.getInt();
  if (auto values = f->getAttrOfType<IntegerAttr>("ortc.recomputed")) {
    FunctionKernels::Recompute &r = fk.recompute.emplace();
    r.values = values.getInt();
    auto i64 = [&](StringRef name, int64_t none) {
      auto a = f->getAttrOfType<IntegerAttr>(name);
      return a ? a.getInt() : none;
    };
    r.addedFlops = i64("ortc.recompute_flops", 0);
    r.forwardFlops = i64("ortc.forward_flops", 0);
    r.budget = i64("ortc.recompute_budget", -1);
    r.arenaWithout = i64("ortc.recompute_without", -1);
    if (auto blocks = f->getAttrOfType<DenseI64ArrayAttr>("ortc.recompute_blocks"))
      r.blocks.emplace(blocks.asArrayRef().begin(), blocks.asArrayRef().end());
    r.blocksRecomputed = i64("ortc.recomputed_blocks", 0);
    if (auto nodes = f->getAttrOfType<ArrayAttr>("ortc.recomputed_nodes"))
      for (Attribute n : nodes)
        r.nodes.push_back(cast<StringAttr>(n).getValue().str());
  }
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    std::string role = argRole(f, i);
    if (role == "input" || role == "scalar")
      fk.inputs.push_back(argName(f, i));
  }
  for (unsigned i = 0; i < f.getNumResults(); ++i)
    if (!resultTied(f, i))
      fk.outputs.push_back(resultName(f, i));
  if (auto zero = f->getAttrOfType<IntegerAttr>("ortc.zero_ranks"))
    fk.shardRanks = zero.getInt();
  f.walk([&](Operation *op) {
    if (!isa<AllReduceOp, ReduceScatterOp, AllGatherOp>(op))
      return;
    // The whole tensor reduced or gathered (an all_gather's result, else the input).
    Value whole = isa<AllGatherOp>(op) ? op->getResult(0) : op->getOperand(0);
    ++fk.collectives;
    fk.collectiveBytes += byteSize(whole);
  });
  if (auto checks = f->getAttrOfType<ArrayAttr>("ortc.finite_checks"))
    for (Attribute a : checks)
      fk.finiteChecks.push_back(cast<StringAttr>(a).str());
  // Step inputs that ops use as indices, with the values they may hold.
  f.walk([&](IndexOperandOpInterface op) {
    SmallVector<IndexRange> ranges;
    op.getIndexRanges(ranges);
    for (const IndexRange &r : ranges) {
      Value root = outerValue(r.operand);
      while (auto reshape = root.getDefiningOp<ReshapeOp>())
        root = outerValue(reshape.getX());
      auto arg = dyn_cast<BlockArgument>(root);
      if (!arg || arg.getOwner()->getParentOp() != f.getOperation() || argRole(f, arg.getArgNumber()) != "input")
        continue;
      IndexInput in{argName(f, arg.getArgNumber()), nodeName(op->getLoc()), r.what, r.low, r.high, r.ignore};
      if (llvm::none_of(fk.indexInputs, [&](const IndexInput &o) {
            return o.input == in.input && o.low == in.low && o.high == in.high && o.ignore == in.ignore;
          }))
        fk.indexInputs.push_back(in);
    }
  });
  kernelName = kNamePlaceholder;
  for (Operation &op : f.getBody().front()) {
    if (!launchesKernel(&op) && !isa<func::ReturnOp>(op))
      continue;
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      // Results not already written in place are copied into their tensors.
      int64_t copied = 0;
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        std::string dest = destFor(i);
        if (ptr(v) != dest) {
          emitCopy(dest, ptr(v), byteSize(v));
          copied += 2 * byteSize(v);
        }
      }
      if (!body.str().empty())
        finishKernel(fk.name + ": copy results into their tensors", "copy", fk, "", copied);
      break;
    }
    for (Value v : llvm::concat<Value>(op.getOperands(), op.getResults()))
      if (cType(typeOf(v).getElementType()).empty())
        return unsupported(&op, targetDescription() +
                                    " supports f32, f64, i64, i32 and bool tensors",
                           error);
    if (failed(emitOp(&op, error)))
      return failure();
    std::string loc = nodeName(op.getLoc());
    std::string shapes;
    for (Value r : op.getResults()) {
      std::string s;
      llvm::raw_string_ostream ss(s);
      ss << r.getType();
      shapes += (shapes.empty() ? "" : ", ") + s;
    }
    // Traffic estimate: every tensor read (literals aside) and written, once.
    int64_t bytes = 0;
    llvm::SmallPtrSet<Value, 8> counted;
    for (Value v : llvm::concat<Value>(op.getOperands(), op.getResults()))
      if (!splatValue(v) && counted.insert(v).second)
        bytes += byteSize(v);
    if (auto into = dyn_cast<MatMulIntoOp>(op)) // only the product's slot is written
      bytes = byteSize(into.getA()) + byteSize(into.getB()) +
              dimProduct(into.getProductShape(), 0, into.getProductShape().size()) * 4;
    if (auto fused = dyn_cast<FusedOp>(op)) {
      // One kernel for several ONNX nodes: the comment and the launch name them all.
      std::string nodes = fusedNodes(fused);
      if (op.getNumResults() > 4)
        shapes = std::to_string(op.getNumResults()) + " tensors";
      finishKernel(fk.name + ": fused " + fused.getKind().str() + " kernel of ONNX nodes " +
                       nodes + " -> " + shapes,
                   "fused_" + fused.getKind().str(), fk, nodes, bytes);
      continue;
    }
    finishKernel(fk.name + ": ONNX node '" + loc + "' -> " + op.getName().getStringRef().str() +
                     " : " + shapes,
                 op.getName().stripDialect(), fk, loc, bytes);
  }
  return success();
}

/// 16-bit floats (float16, bfloat16) are storage between Casts so far: every target holds
/// them in 16 bits and converts (ortc_cvt); no kernel computes in them but the GEMMs that
/// read them and sum in float32 (the vendors' 16-bit GEMMs; not with ortc.accum, whose
/// kernels take float operands) and the ops whose kernels read and write stored 16-bit
/// floats themselves (ReadsStoredFloats), and the step's inputs and outputs are
/// 32/64-bit. Anything else names the node.
static LogicalResult checkSixteenBitFloats(func::FuncOp f, std::string &error) {
  auto sixteen = [](Value v) {
    return isa<Float16Type, BFloat16Type>(typeOf(v).getElementType());
  };
  auto dtypeOf = [](Value v) {
    return typeOf(v).getElementType().isF16() ? std::string("float16") : std::string("bfloat16");
  };
  for (BlockArgument a : f.getArguments())
    if (sixteen(a)) {
      error = "@" + f.getSymName().str() + ": input '" + argName(f, a.getArgNumber()) + "' is " +
              dtypeOf(a) + ": ortc trains models whose inputs and weights are float32 or float64 " +
              "(16-bit floats only between Casts inside the graph, so far)";
      return failure();
    }
  WalkResult r = f.walk([&](Operation *op) {
    if (isa<FusedOp, YieldOp, func::ReturnOp>(op))
      return WalkResult::advance();
    for (Value v : llvm::concat<Value>(op->getOperands(), op->getResults())) {
      auto gemm = dyn_cast<MatMulOp>(op);
      if (!sixteen(v) || isa<CastOp>(op) || (gemm && !accumulationOf(gemm)) ||
          op->hasTrait<trait::ReadsStoredFloats>())
        continue;
      error = "node '" + nodeName(op->getLoc()) + "' (" + op->getName().getStringRef().str() +
              ") computes in " + dtypeOf(v) +
              ": 16-bit floats are storage between Casts (float32 compute) and the operands of "
              "mixed-precision GEMMs so far (ortc build --precision bf16|fp16)";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(r.wasInterrupted());
}

LogicalResult KernelPrinter::emitModule(ModuleOp module, std::vector<FunctionKernels> &functions,
                                        std::string &error) {
  for (const std::string &name : stepFunctionNames(module))
    if (auto f = module.lookupSymbol<func::FuncOp>(name))
      if (failed(checkSixteenBitFloats(f, error)))
        return failure();
  for (const std::string &name : stepFunctionNames(module)) {
    auto f = module.lookupSymbol<func::FuncOp>(name);
    if (!f) {
      error = "the module has no @" + name;
      return failure();
    }
    FunctionKernels fk;
    if (failed(emitFunction(f, fk, error)))
      return failure();
    functions.push_back(std::move(fk));
  }
  return success();
}

} // namespace ortc
