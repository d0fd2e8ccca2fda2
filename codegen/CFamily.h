//===- CFamily.h - The kernel printer shared by every target ----*- C++ -*-===//
//
// Why: the CPU (C++), CUDA and HIP emitters print the same planned IR into the same
// kind of text: one `extern "C"` kernel per op, elementwise ops as one scalar
// expression, everything else as a call into the target's kernel library, its sizes
// read from launch values (sizeArg). Kernels are functions of their operands
// (runtime/include/ortc/kernel_abi.h): every buffer an op touches is a pointer
// argument `ptrs[k]`, and the launch records where the memory plan put it (a
// persistent tensor or an arena offset). Launches whose printed bodies are equal
// share one kernel, so the identical layers of a model compile once. That walk,
// the operand binding, the deduplication, the scalar expressions and the conv/pool
// geometry live here once; a target subclasses KernelPrinter and prints only what
// differs (how a loop or a launch looks, how a constant or a copy is spelled,
// library calls).
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_CODEGEN_CFAMILY_H
#define ORTC_CODEGEN_CFAMILY_H

#include "codegen/Artifact.h"
#include "compiler/Dialect/Ortc/OrtcDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <map>
#include <set>
#include <optional>
#include <sstream>

namespace ortc {

/// How a target spells scalar math inside kernels.
struct ScalarSpelling {
  std::string math;   ///< prefix of exp/log/sqrt/erf/tanh/pow: "ortc::kern::vm::" or ""
  std::string minMax; ///< prefix of max<T>/min<T>: "std::" or "ortc::gpu::ortc_"
  std::string abs;    ///< "std::abs" or "ortc::gpu::ortc_abs"
  bool device = false; ///< NaN/inf as ortc::gpu::ortc_nan<T>() (device code)
};

/// C type of an element type ("float", "int64_t", bool -> "uint8_t"), "" if none.
std::string cType(mlir::Type elementType);
/// "{1, 2, 3}" ("{0}" for an empty list, so that it can initialise an array).
std::string cList(llvm::ArrayRef<int64_t> xs);
/// A literal of `type` exactly representing `v` (NaN and infinities included).
std::string cLiteral(double v, const std::string &type, const ScalarSpelling &sp);
int64_t numElements(mlir::Value v);
int64_t byteSize(mlir::Value v);
/// The communicator's dtype code of C element type `T` (kernel_abi.h: ORTC_COMM_F32,
/// _F64, else _U8 for i1 flags).
std::string commDtype(const std::string &T);
/// Whether `module` talks to the other ranks of a data-parallel run (collectives,
/// BatchNorm synced over the ranks): its kernels then hold the communicator the
/// runtime installs through `ortc_set_communicator`.
bool usesCommunicator(mlir::ModuleOp module);
/// The definition of that communicator and of its setter (one per kernels.so).
extern const char *const kCommunicatorDefinition;
/// Product of s[from, to).
int64_t dimProduct(llvm::ArrayRef<int64_t> s, size_t from, size_t to);

class KernelPrinter {
public:
  KernelPrinter(const TensorTable &table, ScalarSpelling spelling)
      : table(table), sp(std::move(spelling)) {}
  virtual ~KernelPrinter() = default;

  /// Prints one kernel per distinct op body of @train_step and @eval_step and
  /// fills `functions` with their launches (kernel + bound addresses), inputs,
  /// outputs and arena sizes.
  mlir::LogicalResult emitModule(mlir::ModuleOp module, std::vector<FunctionKernels> &functions,
                                 std::string &error);
  /// The distinct kernels, each opening with the ONNX nodes that launch it and
  /// preceded by the constants it reads, cut into units that compile independently
  /// (one unit, in order of first launch, unless `split`). Kernels are named after a
  /// hash of their text; split units hold them sorted by the least name among the ONNX
  /// nodes that launch them (then by first launch), and unit boundaries fall after
  /// kernels whose hash ends a chunk and between modules (the first component of
  /// hierarchical node names): the kernels an edit to one layer adds sort together
  /// (their nodes share the layer's name; every kernel the layers share keeps the
  /// first layer's) into units of their own, so they change no other unit.
  std::vector<std::string> kernelUnits(bool split) const;

protected:
  /// The parameter list of every kernel, e.g. "(void *const *ptrs)" (kernel_abi.h).
  virtual std::string signature() const = 0;
  /// Lines that open every kernel (silencing unused parameters, naming the stream).
  virtual std::string prologue() const = 0;
  /// Appends a copy of `bytes` bytes to the current kernel.
  virtual void emitCopy(const std::string &dest, const std::string &src, int64_t bytes) = 0;
  /// Declares constant `name` (n elements of `type`, initialiser list `init`, or
  /// every element `splat` when init is empty) and returns a pointer expression.
  virtual std::string declareConstant(const std::string &name, const std::string &type,
                                      int64_t n, const std::string &init,
                                      const std::string &splat) = 0;
  /// Appends the statements of `op` to `body` (and device code to `device`).
  virtual mlir::LogicalResult emitOp(mlir::Operation *op, std::string &error) = 0;
  /// "the CPU target", "the CUDA target"... for messages.
  virtual std::string targetDescription() const = 0;

  /// Opens a collective's launcher with `c`, the data-parallel step's communicator;
  /// alone (none, or a world of one) the launcher copies `bytes` from `src` to `dest`
  /// (when `bytes` > 0) and returns.
  void communicatorOrCopy(const std::string &dest = {}, const std::string &src = {},
                          int64_t bytes = 0);

  /// A C expression for the data pointer of `v`: a kernel argument `ptrs[k]`
  /// bound to its planned address, or a model constant. Inside a kernel region, a
  /// block argument is its operand and a yielded value the region's result.
  std::string ptr(mlir::Value v);
  /// The kernel argument `v` is bound to; none for a model constant.
  std::optional<LaunchArg> launchArgOf(mlir::Value v);
  /// The number k of `v`'s argument `ptrs[k]` (added on first use); none for a
  /// model constant.
  std::optional<size_t> slotIndex(mlir::Value v);
  /// Prints `static const int32_t <name>Slot[][W + 1]` for a loop over many tensors:
  /// each row's W argument numbers (-1 for a null value), then the number of the
  /// {"value"} argument holding the element count of its first value. False, printing
  /// nothing, if a value is a constant.
  bool argTable(llvm::ArrayRef<llvm::SmallVector<mlir::Value, 4>> rows,
                const std::string &name);
  /// The element count of row `i` of argTable `name` of width W, as a C expression.
  static std::string tableCount(const std::string &name, size_t width);
  /// argTable's rows for one value each.
  static llvm::SmallVector<llvm::SmallVector<mlir::Value, 4>> tableRows(mlir::ValueRange values);
  /// The C element type all `values` share; none if they differ.
  std::optional<std::string> sameElementType(mlir::ValueRange values);
  /// The pointer cast to `const T *` (or `T *` when writable).
  std::string typed(mlir::Value v, bool writable = false);
  /// A null pointer typed like `like` (the libraries deduce T from every pointer).
  std::string typedNull(mlir::Value like, bool writable = false);
  /// A C expression for `key`, a per-op constant that only picks a random stream:
  /// read from a launch argument {"value": key} (on the host, also on GPUs) so that
  /// the dropouts of every layer share one kernel.
  std::string streamKey(uint64_t key);
  /// A C expression for the size `n` handed to a library routine, read from a launch
  /// argument {"value": n} of its own (never shared with an equal size, so the text
  /// does not depend on which sizes happen to be equal): the routine takes its sizes
  /// at run time anyway, and the GEMMs of layers of different widths (a transformer's
  /// four weight gradients) then share one kernel. Generated loops keep constant sizes,
  /// and so do the GPU launchers' launch notes (a grid from the sizes): there the
  /// convolutions share kernels, GEMMs and norms of other sizes still do not.
  std::string sizeArg(int64_t n);
  /// How a kernel reads a random-stream key (streamKey's {"value"} argument): on
  /// the CPU in place; a GPU kernel receives it as a parameter from its launcher.
  virtual std::string keyInKernel(uint64_t key) { return streamKey(key); }
  /// The destination tensor of result `i` of the function being printed.
  std::string destFor(unsigned resultIndex);
  /// A splat constant's value as a literal, or nullopt.
  std::optional<std::string> splatLiteral(mlir::Value v);
  /// The scalar expression of an elementwise op over operand expressions `args`,
  /// or nullopt when `op` is not elementwise. Ops whose value depends on the
  /// element's position (dropout's counter-based mask) have one only inside a
  /// pointwise kernel, where `elementIndex` names the flat index.
  std::optional<std::string> elementwise(mlir::Operation *op, llvm::ArrayRef<std::string> args);
  /// The loop nest of a pointwise kernel (ortc.fused "pointwise"): the iteration
  /// shape with size-1 dims dropped and neighbouring dims merged where every input
  /// either varies along both or is broadcast along both, and per input its element
  /// stride along each of those dims (0: broadcast). A plain chain is one dim.
  struct PointwiseNest {
    /// With sums (reduce_sum over leading dims in the body), the last dim is the
    /// kept dims (columns) and the others the summed ones (rows).
    bool sums = false;
    llvm::SmallVector<int64_t> dims;
    llvm::SmallVector<llvm::SmallVector<int64_t>> strides; ///< [input][dim]
    int64_t numElements() const { return dimProduct(dims, 0, dims.size()); }
  };
  PointwiseNest pointwiseNest(FusedOp op);
  /// Prints the scalar statements of a pointwise kernel's body, one
  /// `const T vN = <expr>;` per op, input k read as `read(k)` (splats as literals,
  /// broadcasts as their source's read). Returns the expressions of the yielded
  /// values (for a sum, of the value it adds up: see isSum) and the number of ops
  /// (a work estimate).
  /// In a rows kernel, `given` names values by expression (the row op's element) and
  /// the ops that are not computable without a value not given are left out; `exprs`
  /// receives every value's expression; with `only`, other ops are not printed.
  llvm::SmallVector<std::string> pointwiseStatements(
      FusedOp op, llvm::function_ref<std::string(unsigned)> read, const std::string &indent,
      std::ostream &os, int64_t &numOps,
      llvm::ArrayRef<std::pair<mlir::Value, std::string>> given = {},
      llvm::DenseMap<mlir::Value, std::string> *exprs = nullptr,
      const llvm::SmallPtrSetImpl<mlir::Operation *> *only = nullptr);
  /// Prints, for row `o` of the nest's outer dims, `const T *row<k> = in<k> + offset`
  /// per input (plus `column` where it varies along the last dim), from the
  /// coordinates c<d> of `o` that some input needs.
  void rowPointers(FusedOp op, const PointwiseNest &nest, const std::string &indent,
                   const std::string &column, std::ostream &os);
  /// The row op of a rows kernel (ortc.fused "rows").
  static mlir::Operation *rowOp(FusedOp op);
  /// Prints the body of one row `o` of a rows kernel, the same on every target: a
  /// loader per operand of the row op (`load0(j)`: the prologue's statements for
  /// element j of the row), a `store(j, r)` that runs the epilogue on element j of
  /// the row op's result and writes each yielded value `out<k>[o * n + j]`, and the
  /// call of the kernel library's line function of the op (softmaxLine, ...), which
  /// calls them. Input k is read as `read(k)` (a row pointer indexed by j), element j
  /// of a GEMM's product (a rows kernel that computes one) as `product`. Returns a
  /// work estimate per element.
  int64_t rowKernel(FusedOp op, llvm::function_ref<std::string(unsigned)> read,
                    const std::string &indent, std::ostream &os,
                    const std::string &product = "");
  /// True when input `k` of a gemm kernel (or of a rows kernel that computes a GEMM's
  /// product) is only its GEMM's operand (no row pointer).
  static bool readByGemmOnly(FusedOp op, unsigned k);
  /// The values of a gemm kernel's body that are its product (the GEMM's result and a
  /// reshape of it), each read as `expr` (pointwiseStatements' `given`).
  static llvm::SmallVector<std::pair<mlir::Value, std::string>>
  productExprs(FusedOp op, const std::string &expr);
  /// `{ld, inner, outerStride, innerStride}` of the libraries' MatLayout.
  static std::string layoutLiteral(const MatrixLayout &l);
  /// A C++ bool literal.
  static const char *boolLiteral(bool v) { return v ? "true" : "false"; }
  /// A GEMM op(a) x op(b) -> [batch..., M, N] as the libraries take it: each operand's
  /// pointer (a strided view's root plus offset, else the value's buffer), its MatLayout
  /// literal and whether it is read transposed; the sizes.
  struct GemmParts {
    std::string a, layoutA, b, layoutB;
    bool transA = false, transB = false;
    int64_t batch = 1, m = 0, n = 0, k = 0;
  };
  GemmParts gemmParts(mlir::Value a, mlir::Value b, bool transA, bool transB,
                      llvm::ArrayRef<int64_t> ys);
  /// "A, {layout}, B, {layout}" of `g`, and in `sizes` "batch, M, N, K, transA, transB".
  static std::string gemmArguments(const GemmParts &g, std::string &sizes);
  /// matmulLayout's operand arguments for op(a) x op(b) -> [batch..., M, N] (`ys`),
  /// "A, {layout}, B, {layout}" (a strided view's root and layout, else contiguous),
  /// and in `sizes` "batch, M, N, K, transA, transB".
  std::string gemmOperands(mlir::Value a, mlir::Value b, bool transA, bool transB,
                           llvm::ArrayRef<int64_t> ys, std::string &sizes);
  /// gemmOperands of a gemm kernel's matmul (its operands outside the kernel).
  std::string gemmCall(FusedOp op, std::string &sizes);
  /// gemmParts of a kernel's matmul.
  GemmParts gemmCallParts(FusedOp op);
  /// True when yielded value `i` of a pointwise kernel is a sum over its leading dims.
  static bool isSum(FusedOp op, unsigned i);
  /// The ops of a multi-tensor kernel region, in order.
  static llvm::SmallVector<mlir::Operation *> multiTensorOps(FusedOp op);
  /// A multi-tensor update kernel: copies each parameter and state tensor into its
  /// result where they differ, declares `ts`, the kernel library's UpdateTensor list
  /// of every update, and calls the library's adamwUpdateMulti / sgdUpdateMulti.
  void multiTensorUpdate(FusedOp op);
  /// The statement that writes `value` (an element of type `element`) to `dest`, a
  /// kernel's output element: `dest = value;`. The CPU writes a 16-bit float's bits
  /// (GCC vectorises no loop that copies a struct).
  virtual std::string elementStore(const std::string &dest, mlir::Type element,
                                   const std::string &value) {
    return dest + " = " + value + ";";
  }
  /// How a library call receives a scalar that lives in a tensor (lr, step): its value
  /// (the CPU reads it on the host) or its address (GPUs read it on the device).
  virtual std::string runtimeScalar(mlir::Value v) = 0;
  /// The ONNX nodes of a fused kernel's ops, for its comment: "a, b, c".
  static std::string fusedNodes(mlir::Operation *op);

  /// Declares `<lib>ConvGeom g` for `op` (with its ortc.accum) / `<ns>PoolGeom g` (the
  /// same fields in both libraries).
  void convGeom(mlir::Operation *op, mlir::Value x, mlir::Value w, mlir::Value y,
                llvm::ArrayRef<int64_t> strides, llvm::ArrayRef<int64_t> pads,
                llvm::ArrayRef<int64_t> dilations, int64_t group);
  void poolGeom(const std::string &ns, mlir::Value x, mlir::Value y,
                llvm::ArrayRef<int64_t> kernel, llvm::ArrayRef<int64_t> strides,
                llvm::ArrayRef<int64_t> pads, llvm::ArrayRef<int64_t> dilations,
                bool countIncludePad);
  /// `<lib>Accum{kind, chunk}` for an op with ortc.accum (its sums in 16 bits), else "".
  std::string accumLiteral(mlir::Operation *op) const;
  mlir::LogicalResult unsupported(mlir::Operation *op, const std::string &why,
                                  std::string &error);
  /// Prints the call of `op` into the kernel library when every target calls it the
  /// same way (layout ops, reductions, GEMM, conv, pooling, norms, softmax, GELU):
  /// `<lib>name(args<callTail>);`. Returns false for other ops.
  bool emitLibraryCall(mlir::Operation *op);

  const TensorTable &table;
  ScalarSpelling sp;
  std::string elementIndex; ///< the flat element index while a pointwise kernel prints
  mlir::func::FuncOp fn;
  /// The name of the kernel being printed (prefix of its device code); a
  /// placeholder until deduplication names it.
  std::string kernelName;
  std::ostringstream setup;   ///< statements before `body` (constant addresses)
  std::ostringstream body;    ///< statements of the kernel being printed
  std::ostringstream device;  ///< device functions the kernel launches (GPU)
  std::string launchNote;     ///< launch shape for the opening comment (GPU)
  std::string lib;            ///< kernel library namespace: "ortc::kern::", "ortc::gpu::"
  std::string callTail;       ///< trailing call arguments: "" or ", s" (the stream)
  std::ostringstream constOut; ///< declareConstant's output (moved into constDecls)

private:
  /// A kernel body shared by every launch that prints the same text.
  struct DistinctKernel {
    std::string name, device, launcher, launchNote; ///< device code: the GPU's kernels
    std::vector<std::string> sites; ///< "train_step: ONNX node ..." per launch
    std::vector<size_t> consts;     ///< indices into constDecls, in order of use
    uint64_t hash = 0;              ///< of the text, which decides unit boundaries
    std::string firstNode; ///< the least ONNX node name launching it: its place in units
  };

  mlir::LogicalResult emitFunction(mlir::func::FuncOp f, FunctionKernels &fk,
                                   std::string &error);
  /// Ends the kernel being printed: finds or adds its distinct body and appends
  /// the launch (with the arguments bound so far) to `fk`.
  void finishKernel(const std::string &site, llvm::StringRef opName, FunctionKernels &fk,
                    const std::string &node = "", int64_t bytes = 0);
  /// "ptrs[k]" for `arg`, adding it to the kernel's arguments on first use.
  std::string slot(LaunchArg arg);
  /// k of slot(arg); `fresh`: a new argument even if an equal one exists.
  size_t slotNumber(LaunchArg arg, bool fresh = false);

  std::vector<LaunchArg> slots;       ///< arguments of the kernel being printed
  std::vector<size_t> kernelConsts;   ///< constants the kernel being printed reads
  std::vector<DistinctKernel> distinct;
  std::map<std::string, size_t> distinctByText;
  std::set<std::string> kernelNames;
  /// Declarations of the model's constants, each printed into the units that read it.
  std::vector<std::string> constDecls;
  /// Per constant value, its pointer expression and index: equal constants are
  /// declared once (so kernels reading them stay equal).
  llvm::DenseMap<mlir::Value, std::pair<std::string, size_t>> constNames;
  std::map<std::string, std::pair<std::string, size_t>> constByContent;
};

} // namespace ortc

#endif // ORTC_CODEGEN_CFAMILY_H
