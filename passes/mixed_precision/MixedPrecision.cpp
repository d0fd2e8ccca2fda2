//===- MixedPrecision.cpp - bf16/fp16 storage of a training step ---------===//
//
// Why: activations the backward keeps dominate a training step's arena; stored in 16
// bits they take half. PyTorch's autocast decides per op which tensors are rounded to
// 16 bits; this pass makes the same decisions at compile time, for the whole step
// (forward, backward, optimizer), so that the planner sees 16-bit buffers and every
// target runs the same numerics.
//
// Algorithm (per step function, over its one block, in order):
//  1. A value is *rounded* when its bits are a 16-bit value: the pass records its
//     16-bit copy (a cast after its producer). Every reader of a rounded value reads a
//     widened copy of its own (a cast to f32 just before the reader), never the
//     unrounded f32 result, so all readers agree with the stored bits.
//  2. An op's rule (PrecisionOpInterface; none: float32 kept) decides:
//     - Low (GEMMs, convolutions): every f32 operand is read rounded (a value not yet
//       rounded, such as a parameter or a float32 LayerNorm output, gets one 16-bit copy
//       at its first such reader, shared by the later ones), and its results are
//       rounded.
//     - Follow: when at least one f32 operand is rounded and each of the others is
//       rounded or a parameter or buffer (through broadcasts and reshapes), the others
//       are read rounded and the results are rounded (a bias add after a GEMM, an
//       activation); otherwise nothing is rounded (PyTorch's promotion to the widest
//       type). Constants are read as they are either way (a Python scalar).
//     - Keep: results stay f32 (rounded operands are read widened). Every op of the
//       optimizer stage keeps f32, whatever its rule: it updates the master weights.
//     Results stay f32 inside one ONNX node's ops of one stage (a decomposed op, one
//     op's gradient rule: as inside one PyTorch kernel; rounded where they leave), in a
//     GEMM followed by its bias add (rounded after the add, as addmm), and from a
//     backward GEMM that reads a weight (the transient gradient of an activation).
//     A weight gets one 16-bit copy per stage (the backward casts it again instead of
//     keeping the forward's copy live through the step); an activation that is not
//     rounded (a LayerNorm output read by GEMMs) gets one, which the backward reads.
//  3. The function's results are read widened too: the step's contract stays f32.
//  4. A GEMM reads 16-bit operands directly (f32_result) where both are widened copies:
//     the vendors' bf16/fp16 GEMMs (tensor cores, FP32 accumulation) take them, and no
//     float32 copy takes arena space. One whose result is only rounded to 16 bits writes
//     16 bits itself (a 16-bit matmul: float32 sums, each rounded as it is stored), so
//     no float32 product lives beside its 16-bit copy (a language model's logits).
//  5. An op whose kernels read stored 16-bit floats and write them (the ReadsStoredFloats
//     trait: cross-entropy and its gradient) reads the 16-bit value where it read a
//     widened copy, and writes 16 bits where its result was only cast to 16 bits: the
//     loss of a language model no longer holds float32 logits and dlogits beside their
//     16-bit copies (the same bits: the kernel widens and rounds as the casts did).
//  6. With accum = chunked16 | plain16, an op that computes on 16-bit operands (Low, or
//     Follow with a 16-bit result) and sums (PrecisionOpInterface::sumsInLowPrecision:
//     GEMMs, convolutions, sums and means) gets ortc.accum: its kernel adds in the
//     16-bit type, in chunks of accum-chunk terms (chunked16) or all of them (plain16).
//
//===----------------------------------------------------------------------===//
#include "passes/mixed_precision/Passes.h"

#include "compiler/Dialect/Ortc/OpAnnotations.h"
#include "compiler/Dialect/Ortc/StepFunction.h"

#include "mlir/IR/Builders.h"


using namespace mlir;

namespace ortc {
#define GEN_PASS_DEF_MIXEDPRECISION
#include "passes/mixed_precision/Passes.h.inc"

namespace {

bool isF32(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getElementType().isF32();
}

class Rounder {
public:
  /// `accum`: the ortc.accum of ops that compute in 16 bits and sum (none: float).
  Rounder(func::FuncOp fn, FloatType low, std::optional<Accumulation> accum)
      : fn(fn), low(low), accum(accum) {}

  void run() {
    SmallVector<Operation *> ops;
    for (Operation &op : fn.getBody().front())
      ops.push_back(&op);
    for (Operation *op : ops)
      visit(op);
    readSixteenBitsDirectly();
    readStoredFloats();
  }

private:
  enum class Rule { Keep, Follow, Low };

  static Rule ruleOf(Operation *op) {
    auto p = dyn_cast<PrecisionOpInterface>(op);
    if (!p)
      return Rule::Keep;
    return p.getPrecisionRule() == PrecisionRule::Low ? Rule::Low : Rule::Follow;
  }

  /// A parameter or buffer (or a broadcast/reshape of one): rounded beside a rounded
  /// operand as autocast rounds a Linear's bias.
  bool isWeightLike(Value v) const {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      std::string role = argRole(fn, arg.getArgNumber());
      return role == "parameter" || role == "buffer";
    }
    Operation *def = v.getDefiningOp();
    if (isa<WeightOp>(def))
      return true;
    if (isa<BroadcastToOp, ReshapeOp>(def))
      return isWeightLike(def->getOperand(0));
    return false;
  }

  /// A compile-time constant (or a broadcast/reshape of one): read as it is beside 16-bit
  /// operands, as PyTorch applies a Python scalar to a bf16 tensor in float32.
  static bool isConstant(Value v) {
    Operation *def = v.getDefiningOp();
    if (isa_and_nonnull<ConstantOp>(def))
      return true;
    if (isa_and_nonnull<BroadcastToOp, ReshapeOp>(def))
      return isConstant(def->getOperand(0));
    return false;
  }

  Value castTo(OpBuilder &b, Operation *site, Value v, Type element) {
    auto type = cast<RankedTensorType>(v.getType()).clone(element);
    auto c = CastOp::create(b, site->getLoc(), type, v);
    if (isStage(stageOf(site)))
      setStage(c, stageOf(site));
    created.insert(c);
    return c;
  }

  /// The 16-bit copy of `v`: its stored bits if it is rounded, else a copy made before
  /// `reader` the first time one is asked for (`v` itself stays f32 for other readers:
  /// the optimizer reads the master weight). The backward makes its own copy of a weight
  /// rather than keep the forward's live through the step.
  Value roundedCopy(Value v, Operation *reader) {
    if (Value r = rounded.lookup(v))
      return r;
    // Per stage for weights (persistent: re-casting costs no arena), one for activations
    // (the f32 value would otherwise live until the backward's copy).
    Value &copy = copies[{v, isWeightLike(v) ? stageOf(reader) : StringRef()}];
    if (!copy) {
      OpBuilder b(reader);
      copy = castTo(b, reader, v, low);
    }
    return copy;
  }

  void visit(Operation *op) {
    if (created.contains(op))
      return;
    bool isReturn = isa<func::ReturnOp>(op);
    // The optimizer updates float32 master weights and state: all of it stays float32.
    Rule rule = isReturn || stageOf(op) == "optimizer" ? Rule::Keep : ruleOf(op);
    bool anyRounded = false, allLowable = true, anyFloat = false;
    bool readsWeight = llvm::any_of(op->getOperands(), [&](Value v) { return isWeightLike(v); });
    for (Value v : op->getOperands()) {
      if (!isF32(v) || (rule == Rule::Follow && isConstant(v)))
        continue;
      anyFloat = true;
      bool r = rounded.count(v) || deferred.count(v);
      anyRounded |= r;
      allLowable &= r || isWeightLike(v);
    }
    bool lowOut = anyFloat && (rule == Rule::Low ||
                               (rule == Rule::Follow && anyRounded && allLowable));
    // Operands: widened copies of rounded values (one per value for this reader); a GEMM's
    // deferred result is read as it is.
    DenseMap<Value, Value> widened;
    OpBuilder b(op);
    for (OpOperand &use : op->getOpOperands()) {
      Value v = use.get();
      if (!isF32(v) || deferred.count(v) || (!lowOut && !rounded.count(v)) ||
          (rule == Rule::Follow && isConstant(v) && !rounded.count(v)))
        continue;
      Value &w = widened[v];
      if (!w)
        w = castTo(b, op, roundedCopy(v, op), b.getF32Type());
      use.set(w);
    }
    if (!lowOut)
      return;
    // Its operands are 16-bit values: with --accum-dtype its sums are too.
    if (accum && cast<PrecisionOpInterface>(op).sumsInLowPrecision())
      setAccumulation(op, *accum);
    // A GEMM whose one reader adds a bias is rounded once, after the add (as PyTorch's
    // addmm and linear: the bias is part of the 16-bit op).
    if (rule == Rule::Low && op->getNumResults() == 1 && op->getResult(0).hasOneUse()) {
      Operation *user = *op->getResult(0).getUsers().begin();
      if (isa<AddOp>(user) && llvm::all_of(user->getOperands(), [&](Value v) {
            return v == op->getResult(0) || isWeightLike(v);
          })) {
        deferred.insert(op->getResult(0));
        return;
      }
    }
    b.setInsertionPointAfter(op);
    // A backward GEMM that reads a weight computes the gradient of an activation (dy W,
    // transient: the rest of the backward reads it at once): it stays float32. Rounded,
    // it put ortc's GPT-2 at twice PyTorch autocast's distance from float64.
    if (rule == Rule::Low && stageOf(op) == "backward" && readsWeight)
      return;
    for (Value r : op->getResults()) {
      if (!isF32(r) || r.use_empty())
        continue;
      // Within one ONNX node's ops of one stage (a decomposed op, the gradient rule of
      // one op) values stay f32, as inside one PyTorch kernel: rounded where they leave.
      if (llvm::all_of(r.getUsers(), [&](Operation *u) {
            return u->getLoc() == op->getLoc() && stageOf(u) == stageOf(op) &&
                   !isa<func::ReturnOp>(u);
          })) {
        deferred.insert(r);
        continue;
      }
      {
        Value copy = castTo(b, op, r, low);
        rounded[r] = copy;
        b.setInsertionPointAfter(copy.getDefiningOp());
      }
    }
  }

  /// A GEMM whose operands are both widened 16-bit values reads the 16-bit values
  /// (f32_result: float32 sums, the same bits, as a tensor-core GEMM reads them): no
  /// float32 copy of either is made. One with ortc.accum keeps its float operands (the
  /// emulated 16-bit sums take float).
  void readSixteenBitsDirectly() {
    SmallVector<MatMulOp> gemms(fn.getBody().front().getOps<MatMulOp>());
    for (MatMulOp m : gemms) {
      auto ca = m.getA().getDefiningOp<CastOp>(), cb = m.getB().getDefiningOp<CastOp>();
      if (!ca || !cb || accumulationOf(m) || m.getF32Result())
        continue;
      Value a = ca.getX(), b = cb.getX();
      if (cast<RankedTensorType>(a.getType()).getElementType() != low ||
          cast<RankedTensorType>(b.getType()).getElementType() != low)
        continue;
      m.getAMutable().assign(a);
      m.getBMutable().assign(b);
      m.setF32Result(true);
      if (cb != ca && cb->use_empty())
        cb->erase();
      if (ca->use_empty()) // x^T x reads one copy twice
        ca->erase();
      narrowResult(m);
    }
  }

  /// True when `r` is float32 and every reader only rounds it to 16 bits.
  bool onlyRounded(Value r) const {
    return isF32(r) && !r.use_empty() && llvm::all_of(r.getUsers(), [&](Operation *u) {
             auto c = dyn_cast<CastOp>(u);
             return c && isLow(c.getResult());
           });
  }

  /// Gives `r` (onlyRounded) the 16-bit type and its readers' readers read it: its op's
  /// kernel rounds as the casts did.
  void narrow(Value r) {
    r.setType(cast<RankedTensorType>(r.getType()).clone(low));
    for (Operation *u : llvm::make_early_inc_range(r.getUsers())) {
      u->getResult(0).replaceAllUsesWith(r);
      u->erase();
    }
  }

  /// A 16-bit GEMM (no f32_result) rounds its float32 sums to its operands' type.
  void narrowResult(MatMulOp m) {
    if (!onlyRounded(m.getResult()))
      return;
    m.setF32Result(false);
    narrow(m.getResult());
  }

  /// Step 5: ReadsStoredFloats ops read the 16-bit values behind widening casts and write
  /// 16 bits where every reader of a result (that the op does not infer) narrows it.
  void readStoredFloats() {
    SmallVector<Operation *> ops;
    fn.walk([&](Operation *op) {
      if (op->hasTrait<trait::ReadsStoredFloats>())
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      for (OpOperand &use : op->getOpOperands()) {
        auto widen = use.get().getDefiningOp<CastOp>();
        if (!widen || !isF32(widen.getResult()) || !isLow(widen.getX()))
          continue;
        use.set(widen.getX());
        if (widen->use_empty())
          widen->erase();
      }
      if (isa<InferTypeOpInterface>(op))
        continue;
      for (Value r : op->getResults())
        if (onlyRounded(r))
          narrow(r);
    }
  }

  bool isLow(Value v) const {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t && t.getElementType() == low;
  }

  func::FuncOp fn;
  FloatType low;
  std::optional<Accumulation> accum;
  DenseMap<Value, Value> rounded; ///< f32 value whose readers read 16 bits -> those bits
  DenseSet<Value> deferred;       ///< GEMM results rounded after their bias add
  /// (f32 value kept f32, stage of the readers) -> its 16-bit copy for Low readers
  DenseMap<std::pair<Value, StringRef>, Value> copies;
  llvm::SmallPtrSet<Operation *, 32> created;
};

struct MixedPrecisionPass : impl::MixedPrecisionBase<MixedPrecisionPass> {
  using MixedPrecisionBase::MixedPrecisionBase;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    FloatType low;
    if (dtype == "bf16")
      low = BFloat16Type::get(ctx);
    else if (dtype == "fp16")
      low = Float16Type::get(ctx);
    else {
      getOperation().emitError("ortc-mixed-precision: dtype must be bf16 or fp16, not '")
          << dtype << "'";
      return signalPassFailure();
    }
    std::optional<Accumulation> accumulation;
    if (accum == "chunked16" || accum == "plain16") {
      if (accumChunk < 0) {
        getOperation().emitError("ortc-mixed-precision: accum-chunk must be positive, not ")
            << accumChunk;
        return signalPassFailure();
      }
      // The default chunk: Wang et al. (2018) found 64 for float16's 11-bit significand.
      // bfloat16's 8 bits need shorter chunks; measured on the benchmark GPT (200 AdamW
      // steps, the worst step's loss against float32's): C = 8 1.3% off, 16 0.6%, 32 1.7%,
      // 64 2.7%, plain16 9.7% (the float-accumulating bf16 build: 0.5%).
      int64_t chunk = accumChunk ? int64_t(accumChunk) : (dtype == "fp16" ? 64 : 16);
      accumulation = Accumulation{low, accum == "chunked16" ? chunk : 0};
    } else if (accum != "fp32") {
      getOperation().emitError(
          "ortc-mixed-precision: accum must be fp32, chunked16 or plain16, not '")
          << accum << "'";
      return signalPassFailure();
    }
    for (auto fn : getOperation().getOps<func::FuncOp>())
      if (!fn.isExternal())
        Rounder(fn, low, accumulation).run();
    getOperation()->setAttr("ortc.precision", StringAttr::get(ctx, dtype));
  }
};

} // namespace
} // namespace ortc
