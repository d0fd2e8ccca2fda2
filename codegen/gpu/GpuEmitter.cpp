//===- GpuEmitter.cpp - Planned ortc IR -> CUDA/HIP kernels ---------------===//
//
// The shared GPU emitter: one KernelPrinter (codegen/CFamily.h) for both vendors,
// parameterised by a TargetInfo (warp size, shuffles, headers, runtime API names).
// Every distinct op body becomes one host launcher `ortc_k<N>(ptrs, stream)` that
// only enqueues work on the stream; ptrs are its operands' device addresses, bound
// per launch by the manifest (kernel_abi.h). Elementwise ops get a generated __global__
// kernel (grid-stride, 4-wide vector packs when every pointer is aligned);
// everything else calls the GPU kernel library (kernels/gpu/ortc_gpu_kernels.h), whose
// reductions use warp shuffles. Scalars that live in tensors (learning rate, step,
// seed, dloss, the update gate) stay on the device and are passed as pointers, so
// a captured CUDA graph replays with new values.
//
//===----------------------------------------------------------------------===//
#include "codegen/gpu/GpuEmitter.h"

#include "codegen/CFamily.h"
#include "compiler/Dialect/Ortc/OpAnnotations.h"
#include "compiler/Dialect/Ortc/OrtcDialect.h"

#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

extern const char *const ortcGpuKernelLibrarySource; // generated from ortc_gpu_kernels.h

namespace ortc {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }
std::string elemType(Value v) { return cType(typeOf(v).getElementType()); }
constexpr int kBlock = 256; // ortc::gpu::kBlock
constexpr int kVec = 4;     // elements per vector pack

class GpuPrinter : public KernelPrinter {
public:
  explicit GpuPrinter(const TensorTable &table, const TargetInfo &target)
      : KernelPrinter(table, ScalarSpelling{"", "ortc::gpu::ortc_", "ortc::gpu::ortc_abs", true}),
        target(target) {
    lib = "ortc::gpu::";
    callTail = ", s";
  }

private:
  const TargetInfo &target;
  std::string signature() const override { return "(void *const *ptrs, void *stream)"; }
  std::string prologue() const override {
    return "  (void)ptrs;\n  ortcStream_t s = (ortcStream_t)stream;\n  (void)s;\n";
  }
  std::string targetDescription() const override { return "the " + target.displayName + " target"; }
  void emitCopy(const std::string &dest, const std::string &src, int64_t bytes) override {
    body << "  ORTC_MEMCPY_ASYNC(" << dest << ", " << src << ", " << bytes << ", s);\n";
  }
  std::string declareConstant(const std::string &name, const std::string &type, int64_t n,
                              const std::string &init, const std::string &splat) override {
    if (init.empty()) {
      // A splat the library reads through a pointer: filled on the device at its
      // first use (the runtime's first step runs eagerly, before any graph capture).
      constOut << "__device__ " << type << " " << name << "[" << n << "];\n";
      constOut << "static void *" << name << "_ptr(ortcStream_t s) {\n  static void *p = [s] {\n"
               << "    void *q = ORTC_SYMBOL_ADDRESS(" << name << ");\n"
               << "    ortc::gpu::fill((" << type << " *)q, " << n << ", " << splat
               << ", s);\n    return q;\n  }();\n  return p;\n}\n";
    } else {
      constOut << "__device__ " << type << " " << name << "[" << n << "] = {" << init << "};\n";
      constOut << "static void *" << name << "_ptr(ortcStream_t) {\n"
               << "  static void *p = ORTC_SYMBOL_ADDRESS(" << name << ");\n  return p;\n}\n";
    }
    return "((char *)" + name + "_ptr(s))";
  }
  LogicalResult emitOp(Operation *op, std::string &error) override;

  /// Closes `if (collective failed) {`: the output becomes non-finite (flags false), so
  /// the step's guard refuses it.
  void poisonOnFailure(const std::string &buf, int64_t n, const std::string &T) {
    if (T == "float" || T == "double")
      body << "    " << lib << "fill(" << buf << ", " << n << ", ortc::gpu::ortc_nan<" << T << ">(), s);\n";
    else
      body << "    " << lib << "fill(" << buf << ", " << n << ", (" << T << ")0, s);\n";
    body << "    return;\n  }\n";
  }
  /// The mean of a collective's sum: `buf` divided by the number of ranks, on the stream.
  void divideByWorld(const std::string &buf, int64_t n, const std::string &T) {
    body << "  " << lib << "divide(" << buf << ", " << n << ", (" << T << ")c->world, s);\n";
  }

  /// "<blocks> blocks x 256 threads (<what>)" for one thread per element of n.
  std::string gridShape(int64_t n, const std::string &what) const {
    return std::to_string(std::max<int64_t>(1, (n + kBlock - 1) / kBlock)) + " blocks x " +
           std::to_string(kBlock) + " threads (" + what + ")";
  }
  /// "<rows> blocks x <threads> threads (<what>, warp-shuffle reductions, warp size W)".
  std::string rowShape(int64_t rows, int threads, const std::string &what) const {
    return std::to_string(rows) + " blocks x " + std::to_string(threads) + " threads (" + what +
           ", warp-shuffle reductions, warp size " + target.warpSizeText() + ")";
  }
  std::string lit(double v, const std::string &T) { return cLiteral(v, T, sp); }
  /// Keys a fused kernel reads: parameter name and the launcher's expression.
  std::vector<std::pair<std::string, std::string>> kernelKeys;
  std::string keyInKernel(uint64_t key) override {
    std::string expr = streamKey(key);
    for (auto &[name, e] : kernelKeys) // a rows kernel prints its prologue more than once
      if (e == expr)
        return name;
    std::string name = "key" + std::to_string(kernelKeys.size());
    kernelKeys.push_back({name, expr});
    return name;
  }
  void elementwiseKernel(Operation *op, Value res);
  void fusedKernel(FusedOp op);
  void fusedRowsKernel(FusedOp op);
  void fusedGemmKernel(FusedOp op);
  void fusedSumsKernel(FusedOp op, const PointwiseNest &nest, ArrayRef<int64_t> dense,
                       const std::string &stmts, ArrayRef<std::string> ys);
  void printKernelHead(FusedOp op, const std::string &fnName);
  void printCoordinates(const PointwiseNest &nest, ArrayRef<int64_t> dense);
  std::string launchArguments(FusedOp op);
  /// multiTensorUpdate, and the launch note (device kernels of up to 24 tensors).
  void multiTensorUpdateWithNote(FusedOp op);
  std::string runtimeScalar(Value v) override { return typed(v); }
  std::string launchShape(Operation *op);
};

/// The grid of the library's tiled GEMM for a product [batch..., M, N].
static std::string tiledGemmGrid(ArrayRef<int64_t> ys) {
  size_t r = ys.size();
  return std::to_string((ys[r - 1] + 63) / 64) + " x " + std::to_string((ys[r - 2] + 63) / 64) +
         " x " + std::to_string(dimProduct(ys, 0, r - 2)) +
         " blocks of 256 threads (64x64 tiles)";
}

/// A generated __global__ kernel for one elementwise op and its launcher body.
void GpuPrinter::elementwiseKernel(Operation *op, Value res) {
  SmallVector<Value> params;
  SmallVector<std::string> args;
  for (Value v : op->getOperands()) {
    if (auto literal = splatLiteral(v)) {
      args.push_back(*literal);
      continue;
    }
    auto it = llvm::find(params, v);
    size_t j = it - params.begin();
    if (it == params.end())
      params.push_back(v);
    args.push_back("a" + std::to_string(j) + "[l]");
  }
  std::string expr = *elementwise(op, args);
  std::string T = elemType(res), fnName = kernelName + "_ew";
  int64_t n = numElements(res);

  device << "template <int V>\n__global__ void ORTC_LAUNCH_BOUNDS(" << kBlock << ") " << fnName
         << "(";
  for (auto [j, v] : llvm::enumerate(params))
    device << "const " << elemType(v) << " *in" << j << ", ";
  device << T << " *out, int64_t n) {\n"
         << "  const int64_t stride = (int64_t)gridDim.x * blockDim.x * V;\n"
         << "  for (int64_t base = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V; base < n;"
            " base += stride) {\n";
  for (auto [j, v] : llvm::enumerate(params))
    device << "    " << elemType(v) << " a" << j << "[V];\n    ortc::gpu::loadPack<V>(a" << j
           << ", in" << j << ", base, n);\n";
  device << "    " << T << " r[V];\n#pragma unroll\n    for (int l = 0; l < V; ++l)\n"
         << "      r[l] = " << expr << ";\n"
         << "    ortc::gpu::storePack<V>(out, r, base, n);\n  }\n}\n";

  std::string call = "(";
  std::string alignedAll;
  for (auto [j, v] : llvm::enumerate(params)) {
    std::string name = "in" + std::to_string(j);
    body << "  const " << elemType(v) << " *" << name << " = " << typed(v) << ";\n";
    call += name + ", ";
    alignedAll += "ortc::gpu::aligned(" + name + ", " + std::to_string(kVec) + " * sizeof(*" +
                  name + ")) && ";
  }
  body << "  " << T << " *out = " << typed(res, true) << ";\n";
  call += "out, " + std::to_string(n) + ")";
  alignedAll += "ortc::gpu::aligned(out, " + std::to_string(kVec) + " * sizeof(*out))";
  int64_t vecBlocks = std::max<int64_t>(1, (n + kVec * kBlock - 1) / (kVec * kBlock));
  int64_t blocks = std::max<int64_t>(1, (n + kBlock - 1) / kBlock);
  body << "  if (" << alignedAll << ")\n    " << fnName << "<" << kVec << "><<<" << vecBlocks
       << ", " << kBlock << ", 0, s>>>" << call << ";\n  else\n    " << fnName << "<1><<<"
       << blocks << ", " << kBlock << ", 0, s>>>" << call << ";\n";
  launchNote = std::to_string(vecBlocks) + " blocks x " + std::to_string(kBlock) +
               " threads, " + std::to_string(kVec) + "-wide vector packs when aligned (else " +
               std::to_string(blocks) + " blocks, one element per thread)";
}

/// A generated __global__ kernel for a pointwise kernel region: one thread per
/// element (grid-stride); an input read through a broadcast finds its element from
/// the coordinates of the collapsed iteration dims it varies along.
void GpuPrinter::fusedKernel(FusedOp op) {
  PointwiseNest nest = pointwiseNest(op);
  size_t rank = nest.dims.size();
  std::string fnName = kernelName + "_pw";
  int64_t n = nest.numElements();
  // Row-major strides of the iteration dims: an input with these reads element i.
  SmallVector<int64_t> dense(rank, 1);
  for (size_t d = rank - 1; d-- > 0;)
    dense[d] = dense[d + 1] * nest.dims[d + 1];
  auto read = [&](unsigned k) {
    if (nest.strides[k] == ArrayRef<int64_t>(dense))
      return "in" + std::to_string(k) + "[i]";
    std::string idx;
    for (size_t d = 0; d < rank; ++d)
      if (nest.strides[k][d])
        idx += (idx.empty() ? "" : " + ") + std::string("c") + std::to_string(d) + " * " +
               std::to_string(nest.strides[k][d]);
    return "in" + std::to_string(k) + "[" + (idx.empty() ? "0" : idx) + "]";
  };
  std::ostringstream stmts;
  int64_t numOps = 0;
  kernelKeys.clear();
  elementIndex = "i";
  SmallVector<std::string> ys = pointwiseStatements(op, read, "    ", stmts, numOps);
  elementIndex.clear();

  if (nest.sums) {
    fusedSumsKernel(op, nest, dense, stmts.str(), ys);
    return;
  }
  printKernelHead(op, fnName);
  device << "int64_t n) {\n"
         << "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;"
            " i += (int64_t)gridDim.x * blockDim.x) {\n";
  printCoordinates(nest, dense);
  device << stmts.str();
  for (auto [k, y] : llvm::enumerate(ys))
    device << "    out" << k << "[i] = " << y << ";\n";
  device << "  }\n}\n";
  body << "  " << fnName << "<<<" << std::max<int64_t>(1, (n + kBlock - 1) / kBlock) << ", "
       << kBlock << ", 0, s>>>" << launchArguments(op) << n << ");\n";
  launchNote = gridShape(n, "fused pointwise kernel, one element per thread");
}

/// A generated __global__ kernel for a rows kernel region: one block per row (a
/// grid-stride loop over the rows), the row computed by the library's line function
/// of the row op with the prologue and epilogue inlined (rowKernel). With a GEMM, the
/// block first computes its row of the product (one dot product of K terms, in order,
/// per element) into shared memory, where a row fits kRowCache floats; a longer row
/// computes each element as it is loaded (the line function loads it once per pass).
/// Not the tiled GEMM's speed (each row reads all of B): a flash-style tiling of
/// attention is still to come.
void GpuPrinter::fusedRowsKernel(FusedOp op) {
  constexpr int64_t kRowCache = 2048;
  PointwiseNest nest = pointwiseNest(op);
  size_t rank = nest.dims.size();
  int64_t n = nest.dims.back(), rows = nest.numElements() / n;
  std::string fnName = kernelName + "_rows";
  auto read = [&](unsigned k) {
    return "row" + std::to_string(k) + (nest.strides[k][rank - 1] ? "[j]" : "[0]");
  };
  MatMulOp gemm = op.getGemm();
  bool cached = gemm && n <= kRowCache;
  std::ostringstream code;
  kernelKeys.clear();
  elementIndex = "(o * " + std::to_string(n) + " + j)";
  rowKernel(op, read, "    ", code, cached ? "prodRow[j]" : "prodAt(j)");
  elementIndex.clear();
  printKernelHead(op, fnName);
  device << "int64_t rows) {\n";
  if (cached)
    device << "  __shared__ float prodRow[" << n << "];\n";
  device << "  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {\n";
  rowPointers(op, nest, "    ", "", device);
  if (gemm) {
    GemmParts g = gemmCallParts(op);
    device << "    const int64_t pb = o / " << g.m << ", pm = o % " << g.m << ";\n"
           << "    auto prodAt = [&](int64_t j) -> float {\n"
           << "      float acc = 0.0f;\n"
           << "      for (int64_t q = 0; q < " << g.k << "; ++q)\n"
           << "        acc += gemmA(pb, pm, q) * gemmB(pb, q, j);\n"
           << "      return acc;\n    };\n";
    if (cached)
      device << "    for (int64_t j = threadIdx.x; j < " << n << "; j += blockDim.x)\n"
             << "      prodRow[j] = prodAt(j);\n    __syncthreads();\n";
  }
  device << code.str();
  if (cached) // the next row's product must not overwrite this one's before it is read
    device << "    __syncthreads();\n";
  device << "  }\n}\n";
  body << "  " << fnName << "<<<" << std::clamp<int64_t>(rows, 1, 0x7fffffff) << ", " << kBlock
       << ", 0, s>>>" << launchArguments(op) << rows << ");\n";
  launchNote = rowShape(rows, kBlock, "fused rows kernel, one row per block");
}

/// A gemm kernel: a generated functor runs the epilogue on element (b, m, j) of the
/// product as the library's matmulEpilogue stores it: from the tiled GEMM's registers
/// (one launch; the product never reaches memory), or, where the vendor GEMM runs
/// (contiguous operands and a float32 result not written over an input to receive the
/// product), over the product the vendor wrote (a second launch). Its sums (bias
/// gradients) are of values it also writes: the library's reduce adds them up after.
void GpuPrinter::fusedGemmKernel(FusedOp op) {
  PointwiseNest nest = pointwiseNest(op);
  size_t rank = nest.dims.size();
  int64_t n = nest.dims.back();
  MatMulOp gemm = op.getGemm();
  ArrayRef<int64_t> ys = typeOf(gemm.getResult()).getShape();
  std::string fnName = kernelName + "_epi";
  auto read = [&](unsigned k) {
    return "row" + std::to_string(k) + (nest.strides[k][rank - 1] ? "[j]" : "[0]");
  };
  std::ostringstream stmts;
  int64_t numOps = 0;
  kernelKeys.clear();
  elementIndex = "(o * " + std::to_string(n) + " + j)";
  SmallVector<std::string> yielded =
      pointwiseStatements(op, read, "    ", stmts, numOps, productExprs(op, "prod"));
  elementIndex.clear();
  // The functor's fields, in order: the keys, the inputs the epilogue reads, the results.
  std::string fields;
  device << "struct " << fnName << " {\n";
  for (auto &[name, expr] : kernelKeys) {
    device << "  uint64_t " << name << ";\n";
    fields += (fields.empty() ? "" : ", ") + expr;
  }
  for (auto [k, v] : llvm::enumerate(op.getInputs()))
    if (!readByGemmOnly(op, k)) {
      device << "  const " << elemType(v) << " *in" << k << ";\n";
      fields += (fields.empty() ? "" : ", ") + typed(v);
    }
  for (auto [k, r] : llvm::enumerate(op.getResults())) {
    device << "  " << elemType(r) << " *out" << k << ";\n";
    fields += (fields.empty() ? "" : ", ") + typed(r, true);
  }
  device << "  __device__ void operator()(int64_t b, int64_t m, int64_t j, float prod) const {\n"
         << "    const int64_t o = b * " << ys[ys.size() - 2] << " + m;\n";
  rowPointers(op, nest, "    ", "", device);
  device << stmts.str();
  for (auto [k, y] : llvm::enumerate(yielded))
    if (!isSum(op, k))
      device << "    out" << k << "[o * " << n << " + j] = " << y << ";\n";
  device << "  }\n};\n";
  // Where the vendor GEMM may write the product: a float32 result (not a sum) whose
  // buffer holds no input (the plan may write a result over an input the epilogue reads).
  // (Only the epilogue's inputs can share a result's buffer: kernel formation reads no
  // GEMM operand elementwise, and a GEMM operand's view has no slot of its own.)
  std::string c;
  auto shared = [&](Value r) {
    for (auto [k, v] : llvm::enumerate(op.getInputs()))
      if (!readByGemmOnly(op, k) && !v.getDefiningOp<StridedViewOp>() && ptr(v) == ptr(r))
        return true;
    return false;
  };
  for (auto [k, r] : llvm::enumerate(op.getResults()))
    if (c.empty() && !isSum(op, k) && typeOf(r).getElementType().isF32() && !shared(r))
      c = typed(r, true);
  std::string sizes, operands = gemmCall(op, sizes);
  body << "  " << lib << "matmulEpilogue(" << operands << ", "
       << (c.empty() ? "(float *)nullptr" : c) << ", " << sizes << ", " << fnName << "{"
       << fields << "}, s);\n";
  // A sum (a bias gradient) adds up a value the kernel also yields: summed after the GEMM
  // by the library's reduce (the same kernel as an ortc.reduce_sum's).
  for (auto [k, y] : llvm::enumerate(op.getYielded())) {
    auto sum = y.getDefiningOp<ReduceSumOp>();
    if (!sum)
      continue;
    auto summed = llvm::find(op.getYielded(), sum.getX());
    Value from = op.getResult(std::distance(op.getYielded().begin(), summed));
    body << "  {\n    static const int64_t dims[] = " << cList(typeOf(from).getShape())
         << ", axes[] = " << cList(sum.getAxes()) << ";\n    " << lib << "reduce("
         << typed(from) << ", dims, " << typeOf(from).getRank() << ", axes, "
         << sum.getAxes().size() << ", " << typed(op.getResult(k), true) << ", " << lib
         << "ReduceKind::Sum, s);\n  }\n";
  }
  bool vendor = !target.vendorCode.empty() && !c.empty() &&
                llvm::none_of(op.getInputs(), [](Value v) {
                  return v.getDefiningOp<StridedViewOp>();
                });
  launchNote =
      std::string(vendor ? "vendor BLAS, then the epilogue over its product, else " : "") +
      "ortc tiled GEMM, the epilogue in its store: " + tiledGemmGrid(ys);
}

/// The coordinates c<d> of element i along the iteration dims that a broadcast
/// input's index reads.
void GpuPrinter::printCoordinates(const PointwiseNest &nest, ArrayRef<int64_t> dense) {
  for (size_t d = 0; d < nest.dims.size(); ++d) {
    bool used = llvm::any_of(nest.strides, [&](auto &st) {
      return st[d] != 0 && ArrayRef<int64_t>(st) != dense;
    });
    if (used)
      device << "    const int64_t c" << d << " = i"
             << (dense[d] > 1 ? " / " + std::to_string(dense[d]) : std::string())
             << (d ? " % " + std::to_string(nest.dims[d]) : std::string()) << ";\n";
  }
}

/// "__global__ void NAME(uint64_t key0, ..., const T *in0, ..., T *out0, ..., " of a
/// fused kernel.
/// A GEMM's operands (a rows kernel that computes its product) come last, as
/// LayoutOperand<float> gemmA, gemmB.
void GpuPrinter::printKernelHead(FusedOp op, const std::string &fnName) {
  device << "__global__ void ORTC_LAUNCH_BOUNDS(" << kBlock << ") " << fnName << "(";
  for (auto &[name, expr] : kernelKeys)
    device << "uint64_t " << name << ", ";
  for (auto [k, v] : llvm::enumerate(op.getInputs()))
    if (!readByGemmOnly(op, k))
      device << "const " << elemType(v) << " *in" << k << ", ";
  for (auto [k, r] : llvm::enumerate(op.getResults()))
    device << elemType(r) << " *out" << k << ", ";
  if (op.getGemm())
    device << lib << "LayoutOperand<float> gemmA, " << lib << "LayoutOperand<float> gemmB, ";
}

/// "(keys..., inputs..., results..., " of a fused kernel's launch.
std::string GpuPrinter::launchArguments(FusedOp op) {
  std::string call = "(";
  for (auto &[name, expr] : kernelKeys)
    call += expr + ", ";
  for (auto [k, v] : llvm::enumerate(op.getInputs()))
    if (!readByGemmOnly(op, k))
      call += typed(v) + ", ";
  for (Value r : op.getResults())
    call += typed(r, true) + ", ";
  if (op.getGemm()) {
    GemmParts g = gemmCallParts(op);
    call += lib + "LayoutOperand<float>{" + g.a + ", " + g.layoutA + ", " +
            boolLiteral(g.transA) + "}, " + lib + "LayoutOperand<float>{" + g.b + ", " +
            g.layoutB + ", " + boolLiteral(g.transB) + "}, ";
  }
  return call;
}

/// A pointwise kernel that also sums some of its values over the leading dims
/// (bias gradients). A block covers 32 columns (a warp's width of consecutive
/// elements, so loads coalesce) and kSumGroups row groups; the rows are split into
/// R chunks along the grid's y. Each thread walks its rows in order into a double
/// accumulator, the block adds its row groups in order, and with R > 1 a second
/// kernel adds the chunks' partial sums (a __device__ array of the kernel) in
/// order: the same sums in the same order on every run, and enough blocks to fill
/// the GPU where one thread per column walked every row (a 768-column bias
/// gradient over 8192 rows ran on 3 blocks).
void GpuPrinter::fusedSumsKernel(FusedOp op, const PointwiseNest &nest, ArrayRef<int64_t> dense,
                                 const std::string &stmts, ArrayRef<std::string> ys) {
  constexpr int64_t kCols = 32, kSumGroups = kBlock / kCols, kWantBlocks = 1024, kMinChunk = 64;
  std::string fnName = kernelName + "_pw";
  int64_t n = nest.numElements(), cols = nest.dims.back(), rows = n / cols;
  int64_t colTiles = (cols + kCols - 1) / kCols;
  int64_t chunks = std::max<int64_t>(
      1, std::min((rows + kMinChunk - 1) / kMinChunk, (kWantBlocks + colTiles - 1) / colTiles));
  int64_t chunk = std::max<int64_t>(1, (rows + chunks - 1) / chunks);
  chunks = std::max<int64_t>(1, (rows + chunk - 1) / chunk);
  SmallVector<unsigned> sums;
  for (size_t k = 0; k < ys.size(); ++k)
    if (isSum(op, k))
      sums.push_back(k);
  std::string part = fnName + "_part";
  std::string nSums = std::to_string(sums.size());
  std::string C = std::to_string(cols);
  if (chunks > 1)
    device << "__device__ double " << part << "[" << nSums << "][" << chunks * cols << "];\n";
  printKernelHead(op, fnName);
  device << "int64_t n) {\n"
         << "  __shared__ double red[" << nSums << "][" << kSumGroups << "][" << kCols << "];\n"
         << "  const int lane = threadIdx.x % " << kCols << ", g = threadIdx.x / " << kCols
         << ";\n"
         << "  const int64_t j = (int64_t)blockIdx.x * " << kCols << " + lane;\n"
         << "  const int64_t end = ((int64_t)blockIdx.y + 1) * " << chunk << " < " << rows
         << " ? ((int64_t)blockIdx.y + 1) * " << chunk << " : " << rows << ";\n";
  for (unsigned k : sums)
    device << "  double sum" << k << " = 0;\n";
  device << "  if (j < " << C << ")\n"
         << "  for (int64_t o = (int64_t)blockIdx.y * " << chunk << " + g; o < end; o += "
         << kSumGroups << ") {\n"
         << "    const int64_t i = o * " << C << " + j;\n";
  printCoordinates(nest, dense);
  device << stmts;
  for (auto [k, y] : llvm::enumerate(ys))
    if (isSum(op, k))
      device << "    sum" << k << " += static_cast<double>(" << y << ");\n";
    else
      device << "    out" << k << "[i] = " << y << ";\n";
  device << "  }\n";
  for (auto [s, k] : llvm::enumerate(sums))
    device << "  red[" << s << "][g][lane] = sum" << k << ";\n";
  device << "  ORTC_BARRIER();\n"
         << "  if (g != 0 || j >= " << C << ")\n    return;\n";
  for (auto [s, k] : llvm::enumerate(sums)) {
    device << "  double t" << k << " = 0;\n  for (int q = 0; q < " << kSumGroups
           << "; ++q)\n    t" << k << " += red[" << s << "][q][lane];\n";
    if (chunks > 1)
      device << "  " << part << "[" << s << "][(int64_t)blockIdx.y * " << C << " + j] = t" << k
             << ";\n";
    else
      device << "  out" << k << "[j] = static_cast<" << elemType(op.getResult(k)) << ">(t" << k
             << ");\n";
  }
  device << "}\n";
  std::string launch = "  " + fnName + "<<<dim3(" + std::to_string(colTiles) + ", " +
                       std::to_string(chunks) + "), " + std::to_string(kBlock) + ", 0, s>>>" +
                       launchArguments(op) + std::to_string(n) + ");\n";
  body << launch;
  launchNote = std::to_string(colTiles) + " x " + std::to_string(chunks) + " blocks x " +
               std::to_string(kBlock) + " threads (fused pointwise kernel with sums over " +
               std::to_string(rows) + " rows: " + std::to_string(kCols) + " columns by " +
               std::to_string(kSumGroups) + " row groups per block, " + std::to_string(chunk) +
               " rows per block";
  if (chunks == 1) {
    launchNote += ")";
    return;
  }
  // The chunks' partial sums of each column, added in chunk order.
  std::string fin = kernelName + "_sum";
  device << "__global__ void ORTC_LAUNCH_BOUNDS(" << kBlock << ") " << fin << "(";
  for (auto [s, k] : llvm::enumerate(sums))
    device << (s ? ", " : "") << elemType(op.getResult(k)) << " *out" << k;
  device << ") {\n"
         << "  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < " << C
         << "; j += (int64_t)gridDim.x * blockDim.x) {\n";
  for (auto [s, k] : llvm::enumerate(sums))
    device << "    double t" << k << " = 0;\n    for (int64_t c = 0; c < " << chunks
           << "; ++c)\n      t" << k << " += " << part << "[" << s << "][c * " << C
           << " + j];\n    out" << k << "[j] = static_cast<" << elemType(op.getResult(k))
           << ">(t" << k << ");\n";
  device << "  }\n}\n";
  body << "  " << fin << "<<<" << (cols + kBlock - 1) / kBlock << ", "
       << kBlock << ", 0, s>>>(";
  for (auto [s, k] : llvm::enumerate(sums))
    body << (s ? ", " : "") << typed(op.getResult(k), true);
  body << ");\n";
  launchNote += "; then one thread per column adds the " + std::to_string(chunks) +
                " chunks' partial sums in order)";
}

/// Every update of a multi-tensor kernel through the library's *Multi function:
/// one device kernel per ortc::gpu::kMultiTensor tensors.
void GpuPrinter::multiTensorUpdateWithNote(FusedOp op) {
  SmallVector<Operation *> ops = multiTensorOps(op);
  int64_t total = 0;
  for (Operation *inner : ops)
    total += numElements(inner->getOperand(0));
  multiTensorUpdate(op);
  int64_t chunks = (static_cast<int64_t>(ops.size()) + 23) / 24;
  launchNote = std::to_string(chunks) + " kernel(s) of up to 24 tensors (" +
               std::to_string(ops.size()) + " tensors, " + std::to_string(total) +
               " elements, one element per thread), gated on the device";
}

/// The launch shape of a library call, for the comment opening its launcher.
std::string GpuPrinter::launchShape(Operation *op) {
  Value res = op->getResult(0);
  auto grid = [&](Value v, const std::string &what) { return gridShape(numElements(v), what); };
  auto rows = [&](int64_t n, const std::string &what) { return rowShape(n, kBlock, what); };
  auto outer = [&](Value v, int64_t axis) {
    return dimProduct(typeOf(v).getShape(), 0, axis);
  };
  auto aroundAxis = [&](Value v, int64_t axis) {
    auto xs = typeOf(v).getShape();
    return dimProduct(xs, 0, axis) * dimProduct(xs, axis + 1, xs.size());
  };
  const char *implicitGemm = "implicit-im2col tiled GEMM, 64x64 tiles of 256 threads";
  return llvm::TypeSwitch<Operation *, std::string>(op)
      .Case<BatchNormInferOp>(
          [&](auto) { return grid(res, "one element per thread"); })
      .Case<BroadcastToOp, TransposeOp, SliceOp, PadOp, MaxPoolOp, AvgPoolOp>(
          [&](auto) { return grid(res, "one output element per thread"); })
      .Case([&](SliceGradOp s) { return grid(s.getDy(), "zero-fill, then one dy element per thread"); })
      .Case<MaxPoolGradOp, AvgPoolGradOp>([&](auto p) {
        return grid(p.getResult(), "one input element per thread, gathering its windows' dy");
      })
      .Case([&](ConcatOp) { return std::string("one grid-stride copy per input"); })
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceProdOp>(
          [&](auto) { return rows(numElements(res), "one block per output element"); })
      .Case<ArgMaxOp, ArgMinOp>([&](auto) {
        return grid(res, "one line along the axis per thread");
      })
      .Case([&](CumSumOp c) {
        return gridShape(aroundAxis(res, c.getAxis()), "one line along the axis per thread");
      })
      .Case([&](TopKOp t) {
        return grid(t.getIndices(), "one line per thread, k selection passes");
      })
      .Case([&](ReduceProdGradOp g) { return grid(g.getDy(), "one row per thread"); })
      .Case([&](MatMulOp m) {
        // Strided-view operands (kernel formation) read as the tiles load: ortc's GEMM.
        bool views = m.getA().getDefiningOp<StridedViewOp>() ||
                     m.getB().getDefiningOp<StridedViewOp>();
        return std::string(target.vendorCode.empty() || views ? "" : "vendor BLAS, else ") +
               "ortc tiled GEMM" + (views ? " over strided operands: " : ": ") +
               tiledGemmGrid(typeOf(res).getShape());
      })
      .Case([&](MatMulIntoOp m) {
        return "ortc tiled GEMM into a strided slot of its result: " +
               tiledGemmGrid(m.getProductShape());
      })
      .Case<ConvOp, ConvGradWeightOp>([&](auto) { return std::string(implicitGemm); })
      .Case([&](ConvGradInputOp) {
        return std::string("gathered dy taps as a tiled GEMM (no atomics), 64x64 tiles of 256 threads");
      })
      .Case([&](LayerNormOp ln) { return rows(outer(ln.getX(), ln.getAxis()), "one block per row"); })
      .Case([&](LayerNormGradOp ln) {
        return rows(outer(ln.getX(), ln.getAxis()),
                    "one block per row for dx, per column for the parameter gradients");
      })
      .Case<SoftmaxOp, LogSoftmaxOp, SoftmaxGradOp, LogSoftmaxGradOp>([&](auto s) {
        return rows(aroundAxis(res, s.getAxis()), "one block per softmax row");
      })
      .Case([&](SoftmaxCrossEntropyOp sce) {
        int64_t n = typeOf(sce.getLogits()).getShape()[0];
        return rows(std::min<int64_t>(std::max<int64_t>(n, 1), 1024),
                    "rows strided over the blocks; then one thread adds the blocks' partial "
                    "sums in order");
      })
      .Case([&](SoftmaxCrossEntropyGradOp sce) {
        return rows(typeOf(sce.getLogits()).getShape()[0], "one block per row");
      })
      .Default([](Operation *) { return std::string(); });
}

LogicalResult GpuPrinter::emitOp(Operation *op, std::string &error) {
  Value res = op->getNumResults() ? op->getResult(0) : Value();
  std::string T = res ? elemType(res) : "";
  if (res && elementwise(op, SmallVector<std::string>(op->getNumOperands(), "x"))) {
    elementwiseKernel(op, res);
    return success();
  }
  if (emitLibraryCall(op)) {
    launchNote = launchShape(op);
    return success();
  }
  auto copyIfDistinct = [&](Value from, Value to) {
    if (ptr(from) != ptr(to))
      emitCopy(ptr(to), ptr(from), byteSize(to));
  };
  auto dims = [&](Value v) { return cList(typeOf(v).getShape()); };
  auto rowNote = [&](int64_t rows, int threads, const std::string &what) {
    launchNote = rowShape(rows, threads, what);
  };
  auto gridNote = [&](int64_t n, const std::string &what) { launchNote = gridShape(n, what); };
  const std::string L = "ortc::gpu::";

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](FusedOp f) {
        if (f.getKind() == "pointwise")
          fusedKernel(f);
        else if (f.getKind() == "rows")
          fusedRowsKernel(f);
        else if (f.getKind() == "gemm")
          fusedGemmKernel(f);
        else
          multiTensorUpdateWithNote(f);
        return success();
      })
      .Case([&](GatherOp g) {
        body << "  static const int64_t dims[] = " << dims(g.getData()) << ";\n";
        body << "  " << L << "gather(" << typed(g.getData()) << ", dims, "
             << typeOf(g.getData()).getRank() << ", " << g.getAxis() << ", "
             << typed(g.getIndices()) << ", " << numElements(g.getIndices()) << ", "
             << typed(res, true) << ", s); // out-of-range index: NaN output\n";
        gridNote(numElements(res), "index check, then one output element per thread");
        return success();
      })
      .Case([&](GatherGradOp g) {
        body << "  static const int64_t dims[] = " << dims(res) << ";\n";
        body << "  " << L << "gatherGrad(" << typed(g.getDy()) << ", dims, "
             << typeOf(res).getRank() << ", " << g.getAxis() << ", " << typed(g.getIndices())
             << ", " << numElements(g.getIndices()) << ", " << typed(res, true) << ", s);\n";
        gridNote(numElements(g.getIndices()),
                 "zero-fill, then one block per index position; the first position of each "
                 "row adds that row's positions in order");
        return success();
      })
      .Case([&](GatherElementsOp g) {
        body << "  static const int64_t dataDims[] = " << dims(g.getData())
             << ", idxDims[] = " << dims(g.getIndices()) << ";\n";
        body << "  " << L << "gatherElements(" << typed(g.getData()) << ", dataDims, "
             << typed(g.getIndices()) << ", idxDims, " << typeOf(res).getRank() << ", "
             << g.getAxis() << ", " << typed(res, true)
             << ", s); // out-of-range index: NaN output\n";
        gridNote(numElements(res), "index check, then one output element per thread");
        return success();
      })
      .Case([&](ScatterElementsOp sc) {
        body << "  static const int64_t dataDims[] = " << dims(sc.getData())
             << ", idxDims[] = " << dims(sc.getIndices()) << ";\n";
        body << "  " << L << "scatterElements(" << typed(sc.getData()) << ", dataDims, "
             << typed(sc.getIndices()) << ", " << typed(sc.getUpdates()) << ", idxDims, "
             << typeOf(res).getRank() << ", " << sc.getAxis() << ", " << sc.reductionCode()
             << ", " << typed(res, true) << ", s); // out-of-range index: NaN output\n";
        auto is = typeOf(sc.getIndices()).getShape();
        int64_t a = is[sc.getAxis()];
        gridNote(a ? numElements(sc.getIndices()) / a : 0,
                 "copy, index check, then one line of updates per thread, in order");
        return success();
      })
      .Case([&](BatchNormTrainOp bn) {
        if (bn.getSync())
          return unsupported(op, "BatchNorm over every rank (--sync-batchnorm) has no GPU kernel yet",
                             error);
        auto xs = typeOf(bn.getX()).getShape();
        body << "  " << L << "batchNormTrain(" << typed(bn.getX()) << ", " << typed(bn.getScale())
             << ", " << typed(bn.getBias()) << ", " << typed(bn.getY(), true) << ", "
             << typed(bn.getMean(), true) << ", " << typed(bn.getVar(), true) << ", " << xs[0]
             << ", " << xs[1] << ", " << dimProduct(xs, 2, xs.size()) << ", "
             << lit(bn.getEpsilon().convertToDouble(), T) << ", s);\n";
        rowNote(xs[1], kBlock, "one block per channel");
        return success();
      })
      .Case([&](BatchNormGradOp bn) {
        if (bn.getSync())
          return unsupported(op, "BatchNorm over every rank (--sync-batchnorm) has no GPU kernel yet",
                             error);
        auto xs = typeOf(bn.getX()).getShape();
        body << "  " << L << "batchNormGrad(" << typed(bn.getX()) << ", " << typed(bn.getScale())
             << ", " << typed(bn.getMean()) << ", " << typed(bn.getVar()) << ", "
             << lit(bn.getEpsilon().convertToDouble(), T) << ", " << typed(bn.getDy()) << ", "
             << typed(bn.getDx(), true) << ", " << typed(bn.getDscale(), true) << ", "
             << typed(bn.getDbias(), true) << ", " << xs[0] << ", " << xs[1] << ", "
             << dimProduct(xs, 2, xs.size()) << ", s);\n";
        rowNote(xs[1], kBlock, "one block per channel");
        return success();
      })
      .Case([&](RandomUniformOp r) {
        body << "  " << L << "randomUniform(" << typed(res, true) << ", " << numElements(res)
             << ", " << llvm::formatv("{0:e17}", r.getLow().convertToDouble()).str() << ", "
             << llvm::formatv("{0:e17}", r.getHigh().convertToDouble()).str() << ", "
             << typed(r.getSeed()) << ", " << streamKey(r.getKey()) << ", s);\n";
        gridNote(numElements(res), "one element per thread");
        return success();
      })
      .Case<DropoutOp, DropoutGradOp>([&](auto d) {
        // Same counter-based mask as the CPU; the seed is read on the device.
        body << "  " << L << "dropout(" << typed(op->getOperand(0)) << ", " << typed(res, true)
             << ", " << numElements(res) << ", "
             << llvm::formatv("{0:e17}", d.getRatio().convertToDouble()).str() << ", "
             << typed(d.getSeed()) << ", " << streamKey(d.getKey()) << ", s);\n";
        gridNote(numElements(res), "one element per thread");
        return success();
      })
      .Case<SoftmaxCrossEntropyOp, SoftmaxCrossEntropyGradOp>([&](auto sce) {
        auto ls = typeOf(sce.getLogits()).getShape();
        auto ignore = sce.getIgnoreIndex();
        std::string args = typed(sce.getLogits()) + ", " + typed(sce.getLabels()) + ", " +
                           std::to_string(ls[0]) + ", " + std::to_string(ls[1]) + ", " +
                           std::to_string(static_cast<int64_t>(ignore.value_or(0))) + "LL, " + boolLiteral(ignore.has_value()) +
                           ", " + boolLiteral(sce.getReduction() == "sum");
        if constexpr (std::is_same_v<decltype(sce), SoftmaxCrossEntropyOp>) {
          body << "  " << L << "softmaxCrossEntropy(" << args << ", " << typed(res, true)
               << ", s); // a label outside [0, C): NaN loss\n";
          rowNote(1, 1024, "one block over all rows");
        } else {
          body << "  " << L << "softmaxCrossEntropyGrad(" << args << ", "
               << typed(sce.getDloss()) << ", " << typed(res, true) << ", s);\n";
          rowNote(ls[0], kBlock, "one block per row");
        }
        return success();
      })
      .Case([&](AllReduceOp a) {
        // Enqueued on the stream by the communicator (NCCL/RCCL, kernel_abi.h), in place
        // in the result; the mean divides after the sum. Alone: a copy.
        copyIfDistinct(a.getInput(), res);
        int64_t n = numElements(res);
        std::string T = elemType(res), buf = "(" + T + " *)" + ptr(res);
        communicatorOrCopy();
        body << "  if (c->all_reduce(c->ctx, " << ptr(res) << ", " << n << ", " << commDtype(T)
             << ", " << (a.getReduction() == "min" ? "ORTC_COMM_MIN" : "ORTC_COMM_SUM")
             << ", stream) != 0) {\n";
        poisonOnFailure(buf, n, T);
        if (a.getReduction() == "mean")
          divideByWorld(buf, n, T);
        launchNote = "the communicator's all-reduce of " + std::to_string(n) + " elements";
        return success();
      })
      .Case([&](ReduceScatterOp r) {
        int64_t n = numElements(res);
        std::string T = elemType(res), out = "(" + T + " *)" + ptr(res);
        communicatorOrCopy(ptr(res), ptr(r.getInput()), byteSize(res));
        body << "  if (c->reduce_scatter(c->ctx, " << ptr(r.getInput()) << ", " << ptr(res) << ", "
             << n << ", " << commDtype(T) << ", ORTC_COMM_SUM, stream) != 0) {\n";
        poisonOnFailure(out, n, T);
        if (r.getReduction() == "mean")
          divideByWorld(out, n, T);
        launchNote = "the communicator's reduce-scatter to " + std::to_string(n) + " elements";
        return success();
      })
      .Case([&](AllGatherOp g) {
        int64_t n = numElements(g.getInput());
        std::string T = elemType(res);
        communicatorOrCopy(ptr(res), ptr(g.getInput()), byteSize(res));
        body << "  if (c->all_gather(c->ctx, " << ptr(g.getInput()) << ", " << ptr(res) << ", " << n
             << ", " << commDtype(T) << ", stream) != 0) {\n";
        poisonOnFailure("(" + T + " *)" + ptr(res), numElements(res), T);
        launchNote = "the communicator's all-gather of " + std::to_string(n) + " elements per rank";
        return success();
      })
      .Case([&](RankShardOp r) {
        body << "  const ortc_communicator *c = ortc_communicator_in_use;\n"
             << "  const int64_t rank = c ? c->rank : 0;\n"
             << "  ORTC_MEMCPY_ASYNC(" << ptr(res) << ", (const char *)" << ptr(r.getInput())
             << " + rank * " << byteSize(res) << ", " << byteSize(res) << ", s);\n";
        launchNote = "a device copy of this rank's shard";
        return success();
      })
      .Case([&](AllFiniteOp f) {
        // each[i]: input i is all finite (which one was not names the culprit).
        body << "  uint8_t *ok = " << typed(res, true) << ";\n";
        body << "  uint8_t *each = " << typed(f.getEach(), true) << ";\n";
        body << "  " << L << "fill(ok, 1, (uint8_t)1, s);\n";
        body << "  " << L << "fill(each, " << f.getInputs().size() << ", (uint8_t)1, s);\n";
        int64_t total = 0;
        for (Value v : f.getInputs())
          total += numElements(v);
        if (std::optional<std::string> T = sameElementType(f.getInputs());
            T && argTable(tableRows(f.getInputs()), "chk"))
          body << "  for (int i = 0; i < " << f.getInputs().size() << "; ++i)\n"
               << "    " << L << "allFiniteAnd((const " << *T
               << " *)ptrs[chkSlot[i][0]], " << tableCount("chk", 1) << ", ok, each + i, s);\n";
        else
          for (auto [k, v] : llvm::enumerate(f.getInputs()))
            body << "  " << L << "allFiniteAnd(" << typed(v) << ", " << numElements(v)
                 << ", ok, each + " << k << ", s);\n";
        launchNote = "one grid-stride check per input (" + std::to_string(total) + " elements)";
        return success();
      })
      .Case([&](SgdUpdateOp u) {
        copyIfDistinct(u.getParam(), u.getResult(0));
        if (u.getMomentumBuffer())
          copyIfDistinct(u.getMomentumBuffer(), u.getResult(1));
        body << "  " << L << "sgdUpdate(" << typed(u.getResult(0), true) << ", "
             << typed(u.getGrad()) << ", "
             << (u.getMomentumBuffer() ? typed(u.getResult(1), true) : typedNull(u.getParam(), true))
             << ", " << numElements(u.getParam()) << ", " << typed(u.getLr()) << ", "
             << lit(u.getMomentum().convertToDouble(), T) << ", "
             << lit(u.getDampening().convertToDouble(), T) << ", " << boolLiteral(u.getNesterov()) << ", "
             << lit(u.getWeightDecay().convertToDouble(), T) << ", " << typed(u.getStep())
             << ", " << typed(u.getApply()) << ", s);\n";
        gridNote(numElements(u.getParam()), "one element per thread, gated on the device");
        return success();
      })
      .Case([&](AdamWUpdateOp u) {
        copyIfDistinct(u.getParam(), u.getNewParam());
        copyIfDistinct(u.getM(), u.getNewM());
        copyIfDistinct(u.getV(), u.getNewV());
        body << "  " << L << "adamwUpdate(" << typed(u.getNewParam(), true) << ", "
             << typed(u.getGrad()) << ", " << typed(u.getNewM(), true) << ", "
             << typed(u.getNewV(), true) << ", " << numElements(u.getParam()) << ", "
             << typed(u.getLr()) << ", " << typed(u.getBeta1()) << ", " << typed(u.getBeta2())
             << ", " << typed(u.getEps()) << ", " << typed(u.getWeightDecay()) << ", "
             << typed(u.getStep())
             << ", " << typed(u.getApply()) << ", s);\n";
        gridNote(numElements(u.getParam()), "one element per thread, gated on the device");
        return success();
      })
      .Default([&](Operation *) {
        return unsupported(op, targetDescription() + " has no kernel for this op", error);
      });
}

} // namespace

LogicalResult emitGpuKernels(ModuleOp module, const TensorTable &table, const TargetInfo &target,
                             std::vector<FunctionKernels> &functions,
                             std::vector<std::string> &units, std::string &error) {
  GpuPrinter p(table, target);
  if (failed(p.emitModule(module, functions, error)))
    return failure();
  std::ostringstream out;
  out << "// Generated by ortc for the " << target.displayName
      << " target: one host launcher per distinct op\n"
         "// body of the training step (@train_step) and the evaluation step (@eval_step), in\n"
         "// order of first launch. A launcher receives its operands' device addresses\n"
         "// (ptrs[k]; each launch's \"args\" in manifest.json say where they live,\n"
         "// ortc_kernel_abi.h the convention) and a stream, and only enqueues work.\n"
      << target.prelude();
  // The library's 16-bit-summing GEMM and reduction kernels only where an op needs them
  // (see Accum in ortc_gpu_kernels.h).
  bool accum16 = module.walk([](Operation *op) {
                         return accumulationOf(op) ? WalkResult::interrupt() : WalkResult::advance();
                       }).wasInterrupted();
  if (accum16)
    out << "#define ORTC_GPU_ACCUM16 1\n";
  out << "#include \"ortc_kernel_abi.h\"\n#include \"ortc_gpu_kernels.h\"\n\n"
      << "extern \"C\" const int ortc_kernel_abi_version = ORTC_KERNEL_ABI_VERSION;\n\n";
  // Data-parallel steps: the communicator the runtime installs (kernel_abi.h).
  if (usesCommunicator(module))
    out << kCommunicatorDefinition;
  out << p.kernelUnits(/*split=*/false).front();
  units = {out.str()};
  return success();
}

const char *gpuKernelLibrarySource() { return ortcGpuKernelLibrarySource; }

KernelBuild gpuKernelBuild(const TargetInfo &target, const std::string &compiler,
                           const std::vector<std::string> &archs) {
  KernelBuild b;
  b.sourceName = "kernels" + target.fileExtension;
  b.libraryName = "ortc_gpu_kernels.h";
  b.librarySource = ortcGpuKernelLibrarySource;
  b.products = {"kernels.so", target.deviceObject};
  std::vector<std::string> commands = target.commands(compiler, archs, "DIR");
  b.compilerId = compiler + " (" + compilerVersion(compiler) + ")\n";
  for (const std::string &c : commands)
    b.compilerId += c + "\n";
  b.compile = [&target, compiler, archs](const std::string &dir, std::string &error) {
    return runCompileCommands(target.commands(compiler, archs, dir), dir,
                              "compiling the " + target.displayName + " kernels (" + compiler +
                                  ")",
                              error);
  };
  return b;
}

} // namespace ortc
