//===- CppEmitter.cpp - Planned ortc IR -> C++ kernels for the CPU -------===//
//
// Every op becomes one kernel function of its operands (the walk and the
// deduplication of equal bodies are KernelPrinter's, CFamily.h).
// Elementwise ops are written out as OpenMP loops; everything else calls the CPU
// kernel library (ortc_kernels.h, shipped in the artifact), its sizes read from
// launch values (the manifest's {"value": n} args). Scalars that live in tensors
// (learning rate, step, seed, dloss) are read on the host.
//
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CppEmitter.h"

#include "codegen/CFamily.h"
#include "compiler/Dialect/Ortc/OrtcDialect.h"

#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

namespace ortc {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

class CppPrinter : public KernelPrinter {
public:
  explicit CppPrinter(const TensorTable &table)
      // Transcendentals through the kernel library's vectorisation-stable versions.
      : KernelPrinter(table, ScalarSpelling{"ortc::kern::vm::", "std::", "std::abs", false}) {
    lib = "ortc::kern::";
  }

private:
  std::string signature() const override { return "(void *const *ptrs)"; }
  std::string elementStore(const std::string &dest, Type element,
                           const std::string &value) override {
    if (isa<Float16Type, BFloat16Type>(element))
      return dest + ".bits = (" + value + ").bits;";
    return KernelPrinter::elementStore(dest, element, value);
  }
  static Type elementOf(FusedOp op, size_t k) {
    return cast<RankedTensorType>(op.getResult(k).getType()).getElementType();
  }
  std::string prologue() const override { return "  (void)ptrs;\n"; }
  std::string targetDescription() const override { return "the CPU target"; }
  void emitCopy(const std::string &dest, const std::string &src, int64_t bytes) override {
    body << "  std::memcpy(" << dest << ", " << src << ", " << bytes << ");\n";
  }
  std::string declareConstant(const std::string &name, const std::string &type, int64_t n,
                              const std::string &init, const std::string &splat) override {
    if (init.empty())
      constOut << "static const std::vector<" << type << "> " << name << "(" << n << ", "
                 << splat << ");\n";
    else
      constOut << "static const std::vector<" << type << "> " << name << " = {" << init
                 << "};\n";
    return "(void *)" + name + ".data()";
  }
  LogicalResult emitOp(Operation *op, std::string &error) override;

  std::string scalar(Value v) { return "(*" + typed(v) + ")"; }
  /// Closes the `if (call failed) {` of a collective: its output becomes non-finite, so
  /// the step's guard refuses it (i1 flags become false).
  void poisonOnFailure(const std::string &buf, int64_t n, const std::string &T) {
    if (T == "double" || T == "float")
      body << "    ortc_poison(" << buf << ", " << n << ");\n";
    else
      body << "    std::memset(" << buf << ", 0, " << n << ");\n";
    body << "    return;\n  }\n";
  }
  /// `sumRanks(v, n)` for the kernel library's sync BatchNorm: sums doubles over the
  /// ranks in place, returns their number (a failed sum becomes NaN, which the step's
  /// guard refuses).
  void sumRanksLambda() {
    body << "  auto sumRanks = [](double *v, int64_t n) {\n"
            "    const ortc_communicator *c = ortc_communicator_in_use;\n"
            "    if (!c || c->world == 1)\n      return 1.0;\n"
            "    if (c->all_reduce(c->ctx, v, n, ORTC_COMM_F64, ORTC_COMM_SUM, nullptr) != 0)\n"
            "      ortc_poison(v, n);\n"
            "    return double(c->world);\n  };\n";
  }
  void divideByWorld(const std::string &buf, int64_t n, const std::string &T) {
    body << "  const " << T << " world = " << T << "(c->world);\n"
         << "  ORTC_KERN_PARALLEL_FOR_SIMD(" << n << ")\n"
         << "  for (int64_t i = 0; i < " << n << "; ++i)\n    " << buf << "[i] /= world;\n";
  }
  std::string runtimeScalar(Value v) override { return scalar(v); }
  /// Element i of an elementwise operand: a literal for splat constants.
  std::string elem(Value v) {
    if (auto lit = splatLiteral(v))
      return *lit;
    return typed(v) + "[i]";
  }
  void fusedPointwise(FusedOp op);
  void fusedPointwiseSums(FusedOp op, const PointwiseNest &nest);
  /// Rows per block of a kernel's sums: each block's double partial sums add its rows in
  /// order, then the blocks are added in order (whatever the thread count).
  static constexpr int64_t kSumRows = 64;
  /// Prints the loop that adds the blocks' partial sums (`partial`) of each sum `sums[s]`
  /// (a result index) into its result.
  void sumBlocks(FusedOp op, ArrayRef<size_t> sums, int64_t blocks, int64_t cols);
  /// The results of a kernel that are sums over its leading dims (isSum).
  static SmallVector<size_t> sumResults(FusedOp op);
  /// Prints the innermost statements that write yielded value k at element (o, j) of a
  /// [rows, cols] kernel, or add it into its block's partial sum `sum<k>[j]`.
  void storeOrAdd(FusedOp op, ArrayRef<std::string> ys, int64_t cols, std::ostream &os);
  /// Declares in<k> (inputs other than a GEMM's operands) and out<k> of a fused kernel.
  void kernelPointers(FusedOp op);
  void fusedRows(FusedOp op);
  void fusedGemm(FusedOp op);
  /// The `epilogue(o0, o1, panel)` lambda of a kernel with a GEMM and its
  /// matmulEpilogue call: for each row o of a panel, the row pointers, `rowDecls`,
  /// `prod` (row o of the product) and `rowCode`; panels hold whole blocks of
  /// `blockRows` rows.
  void panelEpilogue(FusedOp op, const PointwiseNest &nest, const std::string &rowDecls,
                     const std::string &rowCode, int64_t blockRows);
  void loop(Value out, const std::string &expr) {
    int64_t n = numElements(out);
    body << "  " << cType(typeOf(out).getElementType()) << " *y = " << typed(out, true)
         << ";\n";
    body << "  ORTC_KERN_PARALLEL_FOR_SIMD(" << n << ")\n";
    body << "  for (int64_t i = 0; i < " << n << "; ++i)\n    "
         << elementStore("y[i]", typeOf(out).getElementType(), expr) << "\n";
  }

};

/// One loop nest for a pointwise kernel: a single parallel SIMD loop over a plain
/// chain; with broadcasts, a parallel loop over the outer dims (each input's row
/// located once per row) around a SIMD loop over the innermost dim, where every
/// input is contiguous or one value held in a register.
void CppPrinter::fusedPointwise(FusedOp op) {
  PointwiseNest nest = pointwiseNest(op);
  auto inputs = op.getInputs();
  kernelPointers(op);
  int64_t n = nest.numElements();
  std::ostringstream stmts;
  int64_t numOps = 0;
  size_t rank = nest.dims.size();
  if (nest.sums) {
    fusedPointwiseSums(op, nest);
    return;
  }
  if (rank == 1) {
    auto read = [&](unsigned k) {
      return "in" + std::to_string(k) + (nest.strides[k][0] ? "[i]" : "[0]");
    };
    elementIndex = "i";
    SmallVector<std::string> ys = pointwiseStatements(op, read, "    ", stmts, numOps);
    elementIndex.clear();
    body << "  ORTC_KERN_PARALLEL_FOR_SIMD(" << n * std::max<int64_t>(numOps, 1) << ")\n"
         << "  for (int64_t i = 0; i < " << n << "; ++i) {\n"
         << stmts.str();
    for (auto [k, y] : llvm::enumerate(ys))
      body << "    " << elementStore("out" + std::to_string(k) + "[i]", elementOf(op, k), y)
           << "\n";
    body << "  }\n";
    return;
  }
  int64_t inner = nest.dims.back(), outer = n / inner;
  auto read = [&](unsigned k) {
    return "row" + std::to_string(k) + (nest.strides[k][rank - 1] ? "[j]" : "[0]");
  };
  elementIndex = "(o * " + std::to_string(inner) + " + j)";
  SmallVector<std::string> ys = pointwiseStatements(op, read, "      ", stmts, numOps);
  elementIndex.clear();
  body << "  ORTC_KERN_PARALLEL_FOR(" << n * std::max<int64_t>(numOps, 1) << ")\n"
       << "  for (int64_t o = 0; o < " << outer << "; ++o) {\n";
  rowPointers(op, nest, "    ", "", body);
  body << "    ORTC_KERN_SIMD\n    for (int64_t j = 0; j < " << inner << "; ++j) {\n"
       << stmts.str();
  for (auto [k, y] : llvm::enumerate(ys))
    body << "      "
         << elementStore("out" + std::to_string(k) + "[o * " + std::to_string(inner) + " + j]",
                         elementOf(op, k), y)
         << "\n";
  body << "    }\n  }\n";
}

void CppPrinter::kernelPointers(FusedOp op) {
  for (auto [k, v] : llvm::enumerate(op.getInputs()))
    if (!readByGemmOnly(op, k))
      body << "  const " << cType(typeOf(v).getElementType()) << " *in" << k << " = "
           << typed(v) << ";\n";
  for (auto [k, r] : llvm::enumerate(op.getResults()))
    body << "  " << cType(typeOf(r).getElementType()) << " *out" << k << " = "
         << typed(r, true) << ";\n";
}

void CppPrinter::panelEpilogue(FusedOp op, const PointwiseNest &nest,
                               const std::string &rowDecls, const std::string &rowCode,
                               int64_t blockRows) {
  body << "  auto epilogue = [&](int64_t o0, int64_t o1, const float *panel) {\n"
       << "    for (int64_t o = o0; o < o1; ++o) {\n";
  rowPointers(op, nest, "      ", "", body);
  body << rowDecls << "      const float *prod = panel + (o - o0) * " << nest.dims.back()
       << ";\n"
       << rowCode << "    }\n  };\n";
  std::string sizes, operands = gemmCall(op, sizes);
  body << "  " << lib << "matmulEpilogue(" << operands << ", " << sizes << ", " << blockRows
       << ", epilogue);\n";
}

/// A rows kernel: a parallel loop over the rows, each computed by the kernel
/// library's line function of the row op (softmaxLine, ...) through the loaders and
/// the store that rowKernel prints (prologue and epilogue inlined into its loops).
/// With a GEMM, matmulEpilogue computes the product in panels of whole rows and the
/// epilogue runs each row of the panel, its product read as prod[j] while in cache.
void CppPrinter::fusedRows(FusedOp op) {
  PointwiseNest nest = pointwiseNest(op);
  kernelPointers(op);
  size_t rank = nest.dims.size();
  int64_t n = nest.dims.back(), rows = nest.numElements() / n;
  auto read = [&](unsigned k) {
    return "row" + std::to_string(k) + (nest.strides[k][rank - 1] ? "[j]" : "[0]");
  };
  std::ostringstream code;
  elementIndex = "(o * " + std::to_string(n) + " + j)";
  bool gemm = static_cast<bool>(op.getGemm());
  int64_t work = rowKernel(op, read, gemm ? "      " : "    ", code, "prod[j]");
  elementIndex.clear();
  if (gemm) {
    panelEpilogue(op, nest, "", code.str(), 1);
    return;
  }
  body << "  ORTC_KERN_PARALLEL_FOR(" << rows * n * work << ")\n"
       << "  for (int64_t o = 0; o < " << rows << "; ++o) {\n";
  rowPointers(op, nest, "    ", "", body);
  body << code.str() << "  }\n";
}

/// A gemm kernel: the kernel library's matmulEpilogue computes the product in panels of
/// rows (a per-thread buffer) and calls `epilogue(o0, o1, panel)` on each while it is
/// in cache; row `o` of the product (flattened to [rows, n]) is read as prod[j] and
/// every result written at its element, or added into its block's partial sums.
void CppPrinter::fusedGemm(FusedOp op) {
  PointwiseNest nest = pointwiseNest(op);
  kernelPointers(op);
  size_t rank = nest.dims.size();
  int64_t n = nest.dims.back();
  auto read = [&](unsigned k) {
    return "row" + std::to_string(k) + (nest.strides[k][rank - 1] ? "[j]" : "[0]");
  };
  std::ostringstream stmts;
  int64_t numOps = 0;
  elementIndex = "(o * " + std::to_string(n) + " + j)";
  SmallVector<std::string> ys = pointwiseStatements(op, read, "        ", stmts, numOps,
                                                    productExprs(op, "prod[j]"));
  elementIndex.clear();
  // Sums (bias gradients) as fusedPointwiseSums adds them: double partial sums per block
  // of kSumRows rows, the rows of a block in order (panels hold whole blocks).
  SmallVector<size_t> sums = sumResults(op);
  int64_t rows = nest.numElements() / n, blocks = (rows + kSumRows - 1) / kSumRows;
  if (!sums.empty())
    body << "  std::vector<double> partial(" << sums.size() * blocks * n << ");\n";
  std::ostringstream sumDecls;
  for (auto [s, k] : llvm::enumerate(sums))
    sumDecls << "      double *sum" << k << " = partial.data() + " << s * blocks * n
             << " + (o / " << kSumRows << ") * " << n << ";\n";
  std::ostringstream rowLoop;
  rowLoop << "      ORTC_KERN_SIMD\n      for (int64_t j = 0; j < " << n << "; ++j) {\n"
          << stmts.str();
  storeOrAdd(op, ys, n, rowLoop);
  rowLoop << "      }\n";
  panelEpilogue(op, nest, sumDecls.str(), rowLoop.str(), sums.empty() ? 1 : kSumRows);
  if (!sums.empty())
    sumBlocks(op, sums, blocks, n);
}

/// A pointwise kernel that also sums values over its leading dims (rows). The rows
/// are cut into blocks of kSumRows, whatever the thread count; threads take whole
/// blocks, run the row-major loop nest of a plain pointwise kernel over them and add
/// each row into the block's double partial sums (one per column); the partial sums
/// are then added up block by block. Every sum thus adds its rows in one fixed
/// order, and the values it sums never go back to memory first.
void CppPrinter::fusedPointwiseSums(FusedOp op, const PointwiseNest &nest) {
  size_t rank = nest.dims.size();
  int64_t cols = nest.dims.back(), rows = nest.numElements() / cols;
  int64_t blocks = (rows + kSumRows - 1) / kSumRows;
  auto read = [&](unsigned k) {
    return "row" + std::to_string(k) + (nest.strides[k][rank - 1] ? "[j]" : "[0]");
  };
  std::ostringstream stmts;
  int64_t numOps = 0;
  elementIndex = "(o * " + std::to_string(cols) + " + j)";
  SmallVector<std::string> ys = pointwiseStatements(op, read, "        ", stmts, numOps);
  elementIndex.clear();
  SmallVector<size_t> sums = sumResults(op);
  body << "  std::vector<double> partial(" << sums.size() * blocks * cols << ");\n"
       << "  ORTC_KERN_PARALLEL_FOR(" << nest.numElements() * std::max<int64_t>(numOps, 1)
       << ")\n"
       << "  for (int64_t rb = 0; rb < " << blocks << "; ++rb) {\n";
  for (auto [s, k] : llvm::enumerate(sums))
    body << "    double *sum" << k << " = partial.data() + " << s * blocks * cols << " + rb * "
         << cols << ";\n";
  body << "    for (int64_t o = rb * " << kSumRows << "; o < std::min<int64_t>(" << rows
       << ", (rb + 1) * " << kSumRows << "); ++o) {\n";
  rowPointers(op, nest, "      ", "", body);
  body << "      ORTC_KERN_SIMD\n      for (int64_t j = 0; j < " << cols << "; ++j) {\n"
       << stmts.str();
  storeOrAdd(op, ys, cols, body);
  body << "      }\n    }\n  }\n";
  sumBlocks(op, sums, blocks, cols);
}

SmallVector<size_t> CppPrinter::sumResults(FusedOp op) {
  SmallVector<size_t> sums;
  for (size_t k = 0; k < op.getNumResults(); ++k)
    if (isSum(op, k))
      sums.push_back(k);
  return sums;
}

void CppPrinter::storeOrAdd(FusedOp op, ArrayRef<std::string> ys, int64_t cols,
                            std::ostream &os) {
  for (auto [k, y] : llvm::enumerate(ys))
    if (isSum(op, k))
      os << "        sum" << k << "[j] += static_cast<double>(" << y << ");\n";
    else
      os << "        "
           << elementStore("out" + std::to_string(k) + "[o * " + std::to_string(cols) + " + j]",
                           elementOf(op, k), y)
           << "\n";
}

void CppPrinter::sumBlocks(FusedOp op, ArrayRef<size_t> sums, int64_t blocks, int64_t cols) {
  body << "  ORTC_KERN_PARALLEL_FOR(" << blocks * cols * static_cast<int64_t>(sums.size()) << ")\n"
       << "  for (int64_t j = 0; j < " << cols << "; ++j) {\n";
  for (auto [s, k] : llvm::enumerate(sums))
    body << "    double s" << k << " = 0;\n    for (int64_t rb = 0; rb < " << blocks
         << "; ++rb)\n      s" << k << " += partial[" << s * blocks * cols << " + rb * " << cols
         << " + j];\n    out" << k << "[j] = static_cast<"
         << cType(typeOf(op.getResult(k)).getElementType()) << ">(s" << k << ");\n";
  body << "  }\n";
}

LogicalResult CppPrinter::emitOp(Operation *op, std::string &error) {
  Value res = op->getNumResults() ? op->getResult(0) : Value();
  std::string T = res ? cType(typeOf(res).getElementType()) : "";
  // (A strided view is only a GEMM's operand layout: no element expression.)
  if (llvm::none_of(op->getOperands(), [](Value v) { return v.getDefiningOp<StridedViewOp>(); })) {
    SmallVector<std::string> args;
    for (Value v : op->getOperands())
      args.push_back(elem(v));
    if (res)
      if (auto expr = elementwise(op, args)) {
        loop(res, *expr);
        return success();
      }
  }
  if (emitLibraryCall(op))
    return success();
  auto copyIfDistinct = [&](Value from, Value to) {
    if (ptr(from) != ptr(to))
      emitCopy(ptr(to), ptr(from), byteSize(to));
  };
  auto dims = [&](Value v) { return cList(typeOf(v).getShape()); };
  auto fail = [&](const std::string &msg) { return unsupported(op, msg, error); };

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](FusedOp f) {
        if (f.getKind() == "pointwise")
          fusedPointwise(f);
        else if (f.getKind() == "rows")
          fusedRows(f);
        else if (f.getKind() == "gemm")
          fusedGemm(f);
        else
          multiTensorUpdate(f);
        return success();
      })
      .Case([&](GatherOp g) {
        body << "  static const int64_t dims[] = " << dims(g.getData()) << ";\n";
        body << "  if (!ortc::kern::gather(" << typed(g.getData()) << ", dims, "
             << typeOf(g.getData()).getRank() << ", " << g.getAxis() << ", "
             << typed(g.getIndices()) << ", " << numElements(g.getIndices()) << ", "
             << typed(res, true) << "))\n"
             << "    ortc_poison(" << typed(res, true) << ", " << numElements(res) << ");\n";
        return success();
      })
      .Case([&](GatherGradOp g) {
        body << "  static const int64_t dims[] = " << dims(res) << ";\n";
        body << "  if (!ortc::kern::gatherGrad(" << typed(g.getDy()) << ", dims, "
             << typeOf(res).getRank() << ", " << g.getAxis() << ", " << typed(g.getIndices())
             << ", " << numElements(g.getIndices()) << ", " << typed(res, true) << "))\n"
             << "    ortc_poison(" << typed(res, true) << ", " << numElements(res) << ");\n";
        return success();
      })
      .Case([&](GatherElementsOp g) {
        body << "  static const int64_t dataDims[] = " << dims(g.getData())
             << ", idxDims[] = " << dims(g.getIndices()) << ";\n";
        body << "  if (!ortc::kern::gatherElements(" << typed(g.getData()) << ", dataDims, "
             << typed(g.getIndices()) << ", idxDims, " << typeOf(res).getRank() << ", "
             << g.getAxis() << ", " << typed(res, true) << "))\n"
             << "    ortc_poison(" << typed(res, true) << ", " << numElements(res) << ");\n";
        return success();
      })
      .Case([&](ScatterElementsOp sc) {
        body << "  static const int64_t dataDims[] = " << dims(sc.getData())
             << ", idxDims[] = " << dims(sc.getIndices()) << ";\n";
        body << "  if (!ortc::kern::scatterElements(" << typed(sc.getData()) << ", dataDims, "
             << typed(sc.getIndices()) << ", " << typed(sc.getUpdates()) << ", idxDims, "
             << typeOf(res).getRank() << ", " << sc.getAxis() << ", " << sc.reductionCode()
             << ", " << typed(res, true) << "))\n"
             << "    ortc_poison(" << typed(res, true) << ", " << numElements(res) << ");\n";
        return success();
      })
      .Case([&](BatchNormTrainOp bn) {
        auto xs = typeOf(bn.getX()).getShape();
        if (bn.getSync()) {
          sumRanksLambda();
          body << "  ortc::kern::batchNormTrainSync(" << typed(bn.getX()) << ", "
               << typed(bn.getScale()) << ", " << typed(bn.getBias()) << ", "
               << typed(bn.getY(), true) << ", " << typed(bn.getMean(), true) << ", "
               << typed(bn.getVar(), true) << ", nullptr, " << sizeArg(xs[0]) << ", "
               << sizeArg(xs[1]) << ", " << sizeArg(dimProduct(xs, 2, xs.size())) << ", "
               << cLiteral(bn.getEpsilon().convertToDouble(), T, sp) << ", sumRanks);\n";
          return success();
        }
        body << "  ortc::kern::batchNormTrain(" << typed(bn.getX()) << ", "
             << typed(bn.getScale()) << ", " << typed(bn.getBias()) << ", "
             << typed(bn.getY(), true) << ", " << typed(bn.getMean(), true) << ", "
             << typed(bn.getVar(), true) << ", nullptr, " << sizeArg(xs[0]) << ", "
             << sizeArg(xs[1]) << ", " << sizeArg(dimProduct(xs, 2, xs.size())) << ", "
             << cLiteral(bn.getEpsilon().convertToDouble(), T, sp) << ");\n";
        return success();
      })
      .Case([&](BatchNormGradOp bn) {
        auto xs = typeOf(bn.getX()).getShape();
        // Sizes as launch values (the library's loops take them at run time anyway).
        std::string n = sizeArg(xs[0]), c = sizeArg(xs[1]);
        std::string hw = sizeArg(dimProduct(xs, 2, xs.size()));
        body << "  const int64_t channels = " << c << ";\n  std::vector<" << T
             << "> invStd(channels);\n  for (int64_t c = 0; c < channels; ++c)\n    invStd[c] = "
             << T << "(1) / std::sqrt(" << typed(bn.getVar()) << "[c] + "
             << cLiteral(bn.getEpsilon().convertToDouble(), T, sp) << ");\n";
        if (bn.getSync())
          sumRanksLambda();
        body << "  ortc::kern::batchNormGrad" << (bn.getSync() ? "Sync(" : "(") << typed(bn.getX())
             << ", " << typed(bn.getScale()) << ", " << typed(bn.getMean()) << ", invStd.data(), "
             << typed(bn.getDy()) << ", " << typed(bn.getDx(), true) << ", "
             << typed(bn.getDscale(), true) << ", " << typed(bn.getDbias(), true) << ", " << n
             << ", channels, " << hw
             << (bn.getSync() ? ", sumRanks" : "") << ");\n";
        return success();
      })
      .Case([&](RandomUniformOp r) {
        body << "  ortc::kern::randomUniform(" << typed(res, true) << ", " << numElements(res)
             << ", " << llvm::formatv("{0:e17}", r.getLow().convertToDouble()).str() << ", "
             << llvm::formatv("{0:e17}", r.getHigh().convertToDouble()).str()
             << ", static_cast<uint64_t>(" << scalar(r.getSeed()) << "), " << streamKey(r.getKey()) << ");\n";
        return success();
      })
      .Case<DropoutOp, DropoutGradOp>([&](auto d) {
        body << "  ortc::kern::" << (isa<DropoutOp>(op) ? "dropout" : "dropoutGrad") << "("
             << typed(op->getOperand(0)) << ", " << typed(res, true) << ", " << numElements(res)
             << ", " << llvm::formatv("{0:e17}", d.getRatio().convertToDouble()).str()
             << ", static_cast<uint64_t>(" << scalar(d.getSeed()) << "), " << streamKey(d.getKey()) << ");\n";
        return success();
      })
      .Case<SoftmaxCrossEntropyOp, SoftmaxCrossEntropyGradOp>([&](auto s) {
        auto ls = typeOf(s.getLogits()).getShape();
        auto ignore = s.getIgnoreIndex();
        bool sum = s.getReduction() == "sum";
        std::string ig = std::to_string(static_cast<int64_t>(ignore.value_or(0))) + "LL, " +
                         boolLiteral(ignore.has_value());
        // "sum" is the mean times the number of kept rows. The factor and dloss are of the
        // loss's type (dlogits may be 16-bit: ReadsStoredFloats).
        std::string F = T;
        if constexpr (std::is_same_v<decltype(s), SoftmaxCrossEntropyGradOp>)
          F = cType(typeOf(s.getDloss()).getElementType());
        body << "  const int64_t *labels = " << typed(s.getLabels()) << ";\n";
        body << "  " << F << " factor = 1;\n";
        if (sum)
          body << "  factor = 0;\n  for (int64_t r = 0; r < " << ls[0]
               << "; ++r)\n    factor += " << (ignore ? "labels[r] != " + std::to_string(static_cast<int64_t>(*ignore)) + "LL" : "1")
               << ";\n";
        if constexpr (std::is_same_v<decltype(s), SoftmaxCrossEntropyOp>) {
          body << "  " << T << " *loss = " << typed(res, true) << ";\n";
          body << "  if (!ortc::kern::softmaxCrossEntropy(" << typed(s.getLogits())
               << ", labels, " << ls[0] << ", " << ls[1] << ", " << ig << ", loss))\n"
               << "    ortc_poison(loss, 1); // a label outside [0, C)\n  *loss *= factor;\n";
        } else {
          body << "  " << F << " dloss = " << scalar(s.getDloss()) << " * factor;\n";
          body << "  if (!ortc::kern::softmaxCrossEntropyGrad(" << typed(s.getLogits())
               << ", labels, " << ls[0] << ", " << ls[1] << ", " << ig << ", &dloss, "
               << typed(res, true) << "))\n    ortc_poison(" << typed(res, true) << ", "
               << numElements(res) << ");\n";
        }
        return success();
      })
      .Case([&](AllReduceOp a) {
        // In place in the result, over the ranks (kernel_abi.h); the mean divides after
        // the sum, exactly for a power-of-two world. Alone (no communicator): a copy.
        copyIfDistinct(a.getInput(), res);
        int64_t n = numElements(res);
        communicatorOrCopy();
        body << "  " << T << " *buf = " << typed(res, true) << ";\n"
             << "  if (c->all_reduce(c->ctx, buf, " << n << ", " << commDtype(T) << ", "
             << (a.getReduction() == "min" ? "ORTC_COMM_MIN" : "ORTC_COMM_SUM")
             << ", nullptr) != 0) {\n";
        poisonOnFailure("buf", n, T);
        if (a.getReduction() == "mean")
          divideByWorld("buf", n, T);
        return success();
      })
      .Case([&](ReduceScatterOp r) {
        // ZeRO: rank r's share of the reduction. Built for `ranks`, which the runtime
        // checked the run has; alone (ranks 1) a copy.
        int64_t n = numElements(res);
        communicatorOrCopy(ptr(res), ptr(r.getInput()), byteSize(res));
        body << "  " << T << " *out = " << typed(res, true) << ";\n"
             << "  if (c->reduce_scatter(c->ctx, " << typed(r.getInput()) << ", out, " << n << ", "
             << commDtype(T) << ", ORTC_COMM_SUM, nullptr) != 0) {\n";
        poisonOnFailure("out", n, T);
        if (r.getReduction() == "mean")
          divideByWorld("out", n, T);
        return success();
      })
      .Case([&](AllGatherOp g) {
        int64_t n = numElements(g.getInput());
        communicatorOrCopy(ptr(res), ptr(g.getInput()), byteSize(g.getInput()));
        body << "  " << T << " *out = " << typed(res, true) << ";\n"
             << "  if (c->all_gather(c->ctx, " << typed(g.getInput()) << ", out, " << n << ", "
             << commDtype(T) << ", nullptr) != 0) {\n";
        poisonOnFailure("out", numElements(res), T);
        return success();
      })
      .Case([&](RankShardOp r) {
        int64_t n = numElements(res);
        body << "  const ortc_communicator *c = ortc_communicator_in_use;\n"
             << "  const int64_t rank = c ? c->rank : 0;\n"
             << "  std::memcpy(" << ptr(res) << ", " << typed(r.getInput()) << " + rank * " << n
             << ", " << byteSize(res) << ");\n";
        return success();
      })
      .Case([&](AllFiniteOp f) {
        // each[i]: input i is all finite (which one was not names the culprit).
        body << "  bool ok = true;\n  auto *each = " << typed(f.getEach(), true) << ";\n";
        if (std::optional<std::string> T = sameElementType(f.getInputs());
            T && argTable(tableRows(f.getInputs()), "chk"))
          body << "  for (int i = 0; i < " << f.getInputs().size() << "; ++i) {\n"
               << "    each[i] = ortc::kern::allFinite((const " << *T
               << " *)ptrs[chkSlot[i][0]], " << tableCount("chk", 1) << ");\n"
               << "    ok = ok && each[i];\n  }\n";
        else
          for (auto [k, v] : llvm::enumerate(f.getInputs()))
            body << "  each[" << k << "] = ortc::kern::allFinite(" << typed(v) << ", "
                 << numElements(v) << ");\n  ok = ok && each[" << k << "];\n";
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
             << numElements(u.getParam()) << ", " << scalar(u.getLr()) << ", "
             << cLiteral(u.getMomentum().convertToDouble(), T, sp) << ", "
             << cLiteral(u.getDampening().convertToDouble(), T, sp) << ", "
             << boolLiteral(u.getNesterov()) << ", "
             << cLiteral(u.getWeightDecay().convertToDouble(), T, sp) << ", " << scalar(u.getStep())
             << ", " << typed(u.getApply()) << ");\n";
        return success();
      })
      .Case([&](AdamWUpdateOp u) {
        copyIfDistinct(u.getParam(), u.getNewParam());
        copyIfDistinct(u.getM(), u.getNewM());
        copyIfDistinct(u.getV(), u.getNewV());
        body << "  ortc::kern::adamwUpdate(" << typed(u.getNewParam(), true) << ", "
             << typed(u.getGrad()) << ", " << typed(u.getNewM(), true) << ", "
             << typed(u.getNewV(), true) << ", " << numElements(u.getParam()) << ", "
             << scalar(u.getLr()) << ", " << scalar(u.getBeta1()) << ", " << scalar(u.getBeta2())
             << ", " << scalar(u.getEps()) << ", " << scalar(u.getWeightDecay()) << ", "
             << scalar(u.getStep())
             << ", " << typed(u.getApply()) << ");\n";
        return success();
      })
      .Default([&](Operation *) { return fail("the CPU target has no kernel for this op"); });
}

} // namespace

LogicalResult emitCpuKernels(ModuleOp module, const TensorTable &table,
                             std::vector<FunctionKernels> &functions,
                             std::vector<std::string> &units, std::string &error) {
  CppPrinter p(table);
  if (failed(p.emitModule(module, functions, error)))
    return failure();
  units.clear();
  // Data-parallel steps: the communicator the runtime installs (kernel_abi.h).
  bool collectives = usesCommunicator(module);
  for (std::string &body : p.kernelUnits(/*split=*/true)) {
    // Nothing here names the unit's position: a unit inserted before this one
    // would change its text, and so its cache key.
    std::ostringstream out;
    out << "// Generated by ortc for the CPU target: kernels of the training step\n"
           "// (@train_step) and the evaluation step (@eval_step), one per distinct op body,\n"
           "// ordered by the ONNX nodes that launch them. A kernel receives the addresses\n"
           "// of its operands (ptrs[k]; each launch's \"args\" in manifest.json say where\n"
           "// they live, ortc_kernel_abi.h the convention); heavy ops call the shared kernel\n"
           "// library ortc_kernels.h.\n"
           "#include \"ortc_kernels.h\" // first: it is precompiled\n"
           "#include \"ortc_kernel_abi.h\"\n\n#include <cmath>\n"
           "#include <cstring>\n#include <limits>\n#include <vector>\n\n";
    if (units.empty())
      out << "extern \"C\" const int ortc_kernel_abi_version = ORTC_KERNEL_ABI_VERSION;\n\n";
    if (collectives && units.empty())
      out << kCommunicatorDefinition;
    else if (collectives)
      out << "extern \"C\" const ortc_communicator *ortc_communicator_in_use;\n\n";
    out << "/// Makes a failed kernel's output non-finite so the step's guard refuses it.\n"
           "template <typename T> static void ortc_poison(T *p, int64_t n) {\n"
           "  for (int64_t i = 0; i < n; ++i)\n"
           "    p[i] = std::numeric_limits<T>::quiet_NaN();\n}\n\n"
        << body;
    units.push_back(out.str());
  }
  return success();
}

} // namespace ortc
