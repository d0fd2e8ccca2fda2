//===- Evaluator.cpp - Reference interpreter of the ortc IR --------------===//
//
// One case per op. Heavy ops call the host kernel library (kernels/cpu: the same code
// the CPU target compiles in), instantiated for T; elementwise ops are written out
// here, those of more than one operation through kernels/common/ortc_scalar.h, the
// formulas every target's kernels use.
//
//===----------------------------------------------------------------------===//
#include "compiler/Eval/Evaluator.h"

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "compiler/Dialect/Ortc/OpAnnotations.h"
#include "ortc_kernels.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;

namespace ortc {

static bool dropoutDisabled = false;
void setEvalDropoutDisabled(bool disabled) { dropoutDisabled = disabled; }

namespace {

/// The math policy of the shared scalar formulas here: the C++ library's.
struct StdMath {
  template <typename T> static T exp(T x) { return std::exp(x); }
  template <typename T> static T erf(T x) { return std::erf(x); }
  template <typename T> static T tanh(T x) { return std::tanh(x); }
};

using Shape = std::vector<int64_t>;

Shape shapeOf(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return Shape(t.getShape().begin(), t.getShape().end());
}
bool isFloatType(Value v) {
  return isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType());
}
int64_t product(const Shape &s, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t p = 1;
  size_t end = std::min(to, s.size());
  for (size_t i = from; i < end; ++i)
    p *= s[i];
  return p;
}

/// Where element `e` (row-major in `shape`) of a strided layout lies: offset +
/// sum(index[d] * strides[d]) (ortc.strided_view, ortc.matmul_into).
int64_t stridedAt(int64_t e, const Shape &shape, int64_t offset, ArrayRef<int64_t> strides) {
  for (size_t d = shape.size(); d-- > 0;) {
    offset += (e % shape[d]) * strides[d];
    e /= shape[d];
  }
  return offset;
}

/// `v` as a tensor of element type `to` holds it: 16-bit floats rounded through float (as
/// the generated code and PyTorch round), other types as they are.
double stored(double v, Type to) {
  if (to.isF16())
    return double(ortc_cvt<float>(ortc_cvt<ortc_half>(v)));
  if (to.isBF16())
    return double(ortc_cvt<float>(ortc_cvt<ortc_bf16>(v)));
  return v;
}

template <typename T> class Interp {
public:
  DenseMap<Value, EvalTensor<T>> env;
  const std::map<std::string, EvalTensor<T>> &weights;
  std::string error;

  explicit Interp(const std::map<std::string, EvalTensor<T>> &w) : weights(w) {}

  const EvalTensor<T> &get(Value v) { return env.find(v)->second; }
  EvalTensor<T> make(Value v) {
    EvalTensor<T> t;
    t.shape = shapeOf(v);
    t.isFloat = isFloatType(v);
    (t.isFloat ? t.f.resize(t.numel()) : t.i.resize(t.numel()));
    return t;
  }
  /// A 16-bit float value holds what the generated code stores: the ops that write 16
  /// bits (casts, 16-bit GEMMs, ReadsStoredFloats ops) round their float sums so.
  void set(Value v, EvalTensor<T> t) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (Type element = type ? type.getElementType() : Type();
        isa_and_nonnull<Float16Type, BFloat16Type>(element))
      for (T &x : t.f)
        x = static_cast<T>(stored(double(x), element));
    env[v] = std::move(t);
  }

  LogicalResult fail(Operation *op, const Twine &msg) {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << op->getName() << " at " << op->getLoc() << ": " << msg;
    error = s;
    return failure();
  }

  /// Elementwise over same-shape operands; float or integer by the result type.
  template <typename FF, typename FI>
  LogicalResult map(Operation *op, FF ff, FI fi) {
    Value res = op->getResult(0);
    EvalTensor<T> out = make(res);
    int64_t n = out.numel();
    bool floatIn = isFloatType(op->getOperand(0));
    std::vector<const EvalTensor<T> *> in;
    for (Value v : op->getOperands())
      in.push_back(&get(v));
    for (int64_t k = 0; k < n; ++k) {
      if (floatIn) {
        T a = in[0]->f[k], b = in.size() > 1 ? in[1]->f[k] : T(0);
        if (out.isFloat)
          out.f[k] = ff(a, b);
        else
          out.i[k] = static_cast<int64_t>(ff(a, b));
      } else {
        int64_t a = in[0]->i[k], b = in.size() > 1 ? in[1]->i[k] : 0;
        out.i[k] = fi(a, b);
      }
    }
    set(res, std::move(out));
    return success();
  }

  LogicalResult run(Operation *op);
};

/// Reads a DenseElementsAttr into a tensor.
template <typename T> EvalTensor<T> fromAttr(ElementsAttr attr) {
  EvalTensor<T> t;
  auto type = cast<ShapedType>(attr.getType());
  t.shape = Shape(type.getShape().begin(), type.getShape().end());
  t.isFloat = isa<FloatType>(type.getElementType());
  auto dense = cast<DenseElementsAttr>(attr);
  if (t.isFloat)
    for (APFloat v : dense.getValues<APFloat>())
      t.f.push_back(static_cast<T>(v.convertToDouble()));
  else if (type.getElementType().isInteger(1))
    for (bool v : dense.getValues<bool>())
      t.i.push_back(v);
  else
    for (APInt v : dense.getValues<APInt>())
      t.i.push_back(v.getSExtValue());
  return t;
}

/// The kernel library's Accum of `op` (ortc.accum; none: float).
kern::Accum accumOf(Operation *op) {
  kern::Accum a;
  if (std::optional<Accumulation> acc = accumulationOf(op)) {
    a.kind = acc->type.isBF16() ? kern::Accum::Bf16 : kern::Accum::Half;
    a.chunk = acc->chunk;
  }
  return a;
}

kern::ConvGeom convGeom(const Shape &x, const Shape &w, const Shape &y,
                        ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                        ArrayRef<int64_t> dil, int64_t group) {
  kern::ConvGeom g{};
  g.nSpatial = x.size() - 2;
  g.N = x[0];
  g.C = x[1];
  g.M = w[0];
  g.group = group;
  for (int i = 0; i < g.nSpatial; ++i) {
    g.in[i] = x[i + 2];
    g.kernel[i] = w[i + 2];
    g.out[i] = y[i + 2];
    g.stride[i] = strides[i];
    g.padBegin[i] = pads[i];
    g.dilation[i] = dil[i];
  }
  return g;
}

kern::PoolGeom poolGeom(const Shape &x, const Shape &y, ArrayRef<int64_t> kernel,
                        ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                        ArrayRef<int64_t> dil, bool countIncludePad) {
  kern::PoolGeom g{};
  g.nSpatial = x.size() - 2;
  g.N = x[0];
  g.C = x[1];
  g.countIncludePad = countIncludePad;
  for (int i = 0; i < g.nSpatial; ++i) {
    g.in[i] = x[i + 2];
    g.kernel[i] = kernel[i];
    g.out[i] = y[i + 2];
    g.stride[i] = strides[i];
    g.padBegin[i] = pads[i];
    g.padEnd[i] = pads[i + g.nSpatial];
    g.dilation[i] = dil[i];
  }
  return g;
}

template <typename T> LogicalResult Interp<T>::run(Operation *op) {
  using std::exp;
  auto unaryF = [&](auto f) {
    return map(op, [&](T a, T) { return f(a); }, [](int64_t a, int64_t) { return a; });
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ConstantOp c) {
        set(c.getResult(), fromAttr<T>(c.getValue()));
        return success();
      })
      .Case([&](WeightOp w) {
        auto it = weights.find(w.getName().str());
        if (it == weights.end())
          return fail(op, "no value for weight '" + w.getName() + "'");
        if (it->second.shape != shapeOf(w.getResult()))
          return fail(op, "weight '" + w.getName() + "' has the wrong shape");
        set(w.getResult(), it->second);
        return success();
      })
      .Case([&](FusedOp f) {
        // A kernel region: its body, op by op, on the kernel's inputs.
        Block &block = f.getBody().front();
        for (auto [arg, in] : llvm::zip(block.getArguments(), f.getInputs()))
          set(arg, get(in));
        for (Operation &inner : block.without_terminator())
          if (failed(run(&inner)))
            return failure();
        for (auto [r, y] : llvm::zip(f.getResults(), f.getYielded()))
          set(r, get(y));
        return success();
      })
      .Case([&](NegOp) { return map(op, [](T a, T) { return -a; }, [](int64_t a, int64_t) { return -a; }); })
      .Case([&](ExpOp) { return unaryF([](T a) { return std::exp(a); }); })
      .Case([&](LogOp) { return unaryF([](T a) { return std::log(a); }); })
      .Case([&](SqrtOp) { return unaryF([](T a) { return std::sqrt(a); }); })
      .Case([&](ErfOp) { return unaryF([](T a) { return std::erf(a); }); })
      .Case([&](TanhOp) { return unaryF([](T a) { return std::tanh(a); }); })
      .Case([&](SinOp) { return unaryF([](T a) { return std::sin(a); }); })
      .Case([&](CosOp) { return unaryF([](T a) { return std::cos(a); }); })
      .Case([&](SigmoidOp) { return unaryF([](T a) { return scalar::sigmoid<StdMath>(a); }); })
      .Case([&](ReluOp) { return map(op, [](T a, T) { return a > 0 ? a : T(0); }, [](int64_t a, int64_t) { return a > 0 ? a : 0; }); })
      .Case([&](AbsOp) { return map(op, [](T a, T) { return std::abs(a); }, [](int64_t a, int64_t) { return a < 0 ? -a : a; }); })
      .Case([&](FloorOp) { return unaryF([](T a) { return std::floor(a); }); })
      .Case([&](CeilOp) { return unaryF([](T a) { return std::ceil(a); }); })
      .Case([&](RoundOp) { return unaryF([](T a) { return std::nearbyint(a); }); })
      .Case([&](NotOp) { return map(op, [](T a, T) { return T(!a); }, [](int64_t a, int64_t) { return int64_t(!a); }); })
      .Case([&](ScaleOp sc) {
        double k = sc.getFactor().convertToDouble();
        return map(op, [&](T a, T) { return static_cast<T>(a * k); },
                   [&](int64_t a, int64_t) { return static_cast<int64_t>(a * k); });
      })
      .Case([&](ClipOp c) {
        double lo = c.getMin() ? c.getMin()->convertToDouble() : -INFINITY;
        double hi = c.getMax() ? c.getMax()->convertToDouble() : INFINITY;
        return map(op, [&](T a, T) { return std::min<T>(std::max<T>(a, lo), hi); },
                   [&](int64_t a, int64_t) { return (int64_t)std::min<double>(std::max<double>(a, lo), hi); });
      })
      .Case([&](CastOp c) {
        EvalTensor<T> out = make(c.getResult());
        const EvalTensor<T> &x = get(c.getX());
        Type to = cast<RankedTensorType>(c.getType()).getElementType();
        bool toBool = to.isInteger(1);
        for (int64_t k = 0; k < out.numel(); ++k) {
          double v = x.isFloat ? double(x.f[k]) : double(x.i[k]);
          if (out.isFloat) // a 16-bit one is rounded by set()
            out.f[k] = static_cast<T>(v);
          else
            out.i[k] = toBool ? (v != 0) : static_cast<int64_t>(v);
        }
        set(c.getResult(), std::move(out));
        return success();
      })
      .Case([&](GeluOp g) {
        EvalTensor<T> out = make(g.getResult());
        kern::gelu(get(g.getX()).f.data(), out.f.data(), out.numel(), g.getTanh());
        set(g.getResult(), std::move(out));
        return success();
      })
      .Case([&](GeluGradOp g) {
        EvalTensor<T> out = make(g.getResult());
        kern::geluGrad(get(g.getX()).f.data(), get(g.getDy()).f.data(), out.f.data(),
                       out.numel(), g.getTanh());
        set(g.getResult(), std::move(out));
        return success();
      })
      .Case([&](AddOp) { return map(op, [](T a, T b) { return a + b; }, [](int64_t a, int64_t b) { return a + b; }); })
      .Case([&](SubOp) { return map(op, [](T a, T b) { return a - b; }, [](int64_t a, int64_t b) { return a - b; }); })
      .Case([&](MulOp) { return map(op, [](T a, T b) { return a * b; }, [](int64_t a, int64_t b) { return a * b; }); })
      .Case([&](DivOp) { return map(op, [](T a, T b) { return a / b; }, [](int64_t a, int64_t b) { return b ? a / b : 0; }); })
      .Case([&](PowOp) { return map(op, [](T a, T b) { return std::pow(a, b); }, [](int64_t a, int64_t b) { return (int64_t)std::pow((double)a, (double)b); }); })
      .Case([&](ModOp m) {
        bool fm = m.getFmod();
        return map(op, [](T a, T) { return a; },
                   [fm](int64_t a, int64_t b) { return scalar::imod(a, b, fm); });
      })
      .Case([&](MinOp) { return map(op, [](T a, T b) { return std::min(a, b); }, [](int64_t a, int64_t b) { return std::min(a, b); }); })
      .Case([&](MaxOp) { return map(op, [](T a, T b) { return std::max(a, b); }, [](int64_t a, int64_t b) { return std::max(a, b); }); })
      .Case([&](EqualOp) { return map(op, [](T a, T b) { return T(a == b); }, [](int64_t a, int64_t b) { return int64_t(a == b); }); })
      .Case([&](LessOp) { return map(op, [](T a, T b) { return T(a < b); }, [](int64_t a, int64_t b) { return int64_t(a < b); }); })
      .Case([&](GreaterOp) { return map(op, [](T a, T b) { return T(a > b); }, [](int64_t a, int64_t b) { return int64_t(a > b); }); })
      .Case([&](AndOp) { return map(op, [](T a, T b) { return T(a && b); }, [](int64_t a, int64_t b) { return int64_t(a && b); }); })
      .Case([&](SelectOp s) {
        EvalTensor<T> out = make(s.getResult());
        const auto &c = get(s.getCond()), &a = get(s.getOnTrue()), &b = get(s.getOnFalse());
        for (int64_t k = 0; k < out.numel(); ++k)
          (out.isFloat ? out.f[k] = c.i[k] ? a.f[k] : b.f[k]
                       : out.i[k] = c.i[k] ? a.i[k] : b.i[k]);
        set(s.getResult(), std::move(out));
        return success();
      })
      .Case([&](BroadcastToOp bc) {
        EvalTensor<T> out = make(bc.getResult());
        const auto &x = get(bc.getX());
        Shape in(out.shape.size() - x.shape.size(), 1);
        in.insert(in.end(), x.shape.begin(), x.shape.end());
        if (out.isFloat)
          kern::broadcastTo(x.f.data(), in.data(), out.f.data(), out.shape.data(), in.size());
        else
          kern::broadcastTo(x.i.data(), in.data(), out.i.data(), out.shape.data(), in.size());
        set(bc.getResult(), std::move(out));
        return success();
      })
      .Case([&](ReshapeOp r) {
        EvalTensor<T> out = get(r.getX());
        out.shape = shapeOf(r.getResult());
        set(r.getResult(), std::move(out));
        return success();
      })
      .Case([&](StridedViewOp view) {
        EvalTensor<T> out = make(view.getResult());
        const auto &x = get(view.getX());
        ArrayRef<int64_t> strides = view.getStrides();
        const int64_t n = product(out.shape, 0);
        for (int64_t e = 0; e < n; ++e) {
          int64_t at = stridedAt(e, out.shape, view.getOffset(), strides);
          if (out.isFloat)
            out.f[e] = x.f[at];
          else
            out.i[e] = x.i[at];
        }
        set(view.getResult(), std::move(out));
        return success();
      })
      .Case([&](TransposeOp t) {
        EvalTensor<T> out = make(t.getResult());
        const auto &x = get(t.getX());
        if (out.isFloat)
          kern::transpose(x.f.data(), x.shape.data(), x.shape.size(), t.getPerm().data(), out.f.data());
        else
          kern::transpose(x.i.data(), x.shape.data(), x.shape.size(), t.getPerm().data(), out.i.data());
        set(t.getResult(), std::move(out));
        return success();
      })
      .Case([&](ConcatOp c) {
        EvalTensor<T> out = make(c.getResult());
        int64_t axis = c.getAxis();
        int64_t outer = product(out.shape, 0, axis), inner = product(out.shape, axis + 1);
        std::vector<const T *> fins;
        std::vector<const int64_t *> iins;
        Shape sizes;
        for (Value v : c.getInputs()) {
          fins.push_back(get(v).f.data());
          iins.push_back(get(v).i.data());
          sizes.push_back(shapeOf(v)[axis]);
        }
        if (out.isFloat)
          kern::concat(fins.data(), sizes.data(), sizes.size(), outer, inner, out.f.data());
        else
          kern::concat(iins.data(), sizes.data(), sizes.size(), outer, inner, out.i.data());
        set(c.getResult(), std::move(out));
        return success();
      })
      .Case([&](SliceOp s) {
        EvalTensor<T> out = make(s.getResult());
        const auto &x = get(s.getX());
        if (out.isFloat)
          kern::slice(x.f.data(), x.shape.data(), x.shape.size(), s.getStarts().data(),
                      s.getSteps().data(), out.f.data(), out.shape.data());
        else
          kern::slice(x.i.data(), x.shape.data(), x.shape.size(), s.getStarts().data(),
                      s.getSteps().data(), out.i.data(), out.shape.data());
        set(s.getResult(), std::move(out));
        return success();
      })
      .Case([&](SliceGradOp s) {
        EvalTensor<T> out = make(s.getResult());
        const auto &dy = get(s.getDy());
        kern::sliceGrad(dy.f.data(), dy.shape.data(), dy.shape.size(), s.getStarts().data(),
                        s.getSteps().data(), out.f.data(), out.shape.data());
        set(s.getResult(), std::move(out));
        return success();
      })
      .Case([&](PadOp p) {
        EvalTensor<T> out = make(p.getResult());
        const auto &x = get(p.getX());
        if (!out.isFloat)
          return fail(op, "integer pad is not supported");
        kern::pad(x.f.data(), x.shape.data(), x.shape.size(), p.getPads().data(),
                  p.getValue().convertToDouble(), out.f.data(), out.shape.data());
        set(p.getResult(), std::move(out));
        return success();
      })
      .Case([&](GatherOp g) {
        EvalTensor<T> out = make(g.getResult());
        const auto &x = get(g.getData()), &ix = get(g.getIndices());
        bool ok = out.isFloat
                      ? kern::gather(x.f.data(), x.shape.data(), x.shape.size(), g.getAxis(),
                                     ix.i.data(), ix.numel(), out.f.data())
                      : kern::gather(x.i.data(), x.shape.data(), x.shape.size(), g.getAxis(),
                                     ix.i.data(), ix.numel(), out.i.data());
        if (!ok)
          return fail(op, "index out of range");
        set(g.getResult(), std::move(out));
        return success();
      })
      .Case([&](GatherGradOp g) {
        EvalTensor<T> out = make(g.getResult());
        const auto &dy = get(g.getDy()), &ix = get(g.getIndices());
        if (!kern::gatherGrad(dy.f.data(), out.shape.data(), out.shape.size(), g.getAxis(),
                              ix.i.data(), ix.numel(), out.f.data()))
          return fail(op, "index out of range");
        set(g.getResult(), std::move(out));
        return success();
      })
      .template Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceProdOp>([&](auto r) {
        kern::ReduceKind kind = isa<ReduceSumOp>(op)    ? kern::ReduceKind::Sum
                                : isa<ReduceMeanOp>(op) ? kern::ReduceKind::Mean
                                : isa<ReduceProdOp>(op) ? kern::ReduceKind::Prod
                                                        : kern::ReduceKind::Max;
        EvalTensor<T> out = make(r.getResult());
        const auto &x = get(r.getX());
        ArrayRef<int64_t> axes = r.getAxes();
        if (out.isFloat)
          kern::reduce(x.f.data(), x.shape.data(), x.shape.size(), axes.data(), axes.size(),
                       out.f.data(), kind, accumOf(op));
        else
          kern::reduce(x.i.data(), x.shape.data(), x.shape.size(), axes.data(), axes.size(),
                       out.i.data(), kind);
        // Bools are held as int64 here: the max of no bools is false, not INT64_MIN.
        if (r.getResult().getType().getElementType().isInteger(1))
          for (auto &v : out.i)
            v = v > 0;
        set(r.getResult(), std::move(out));
        return success();
      })
      .Case([&](ReduceProdGradOp g) {
        EvalTensor<T> out = make(g.getResult());
        int64_t n = out.shape.back();
        kern::reduceProdGrad(get(g.getX()).f.data(), get(g.getDy()).f.data(), out.f.data(),
                             n ? out.numel() / n : 0, n);
        set(g.getResult(), std::move(out));
        return success();
      })
      .template Case<ArgMaxOp, ArgMinOp>([&](auto a) {
        EvalTensor<T> out = make(a.getResult());
        const auto &x = get(a.getX());
        int64_t axis = a.getAxis();
        int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis + 1);
        bool isMin = isa<ArgMinOp>(op);
        if (x.isFloat)
          kern::argReduce(x.f.data(), outer, x.shape[axis], inner, isMin,
                          a.getSelectLastIndex(), out.i.data());
        else
          kern::argReduce(x.i.data(), outer, x.shape[axis], inner, isMin,
                          a.getSelectLastIndex(), out.i.data());
        set(a.getResult(), std::move(out));
        return success();
      })
      .Case([&](TopKOp t) {
        EvalTensor<T> values = make(t.getValues()), indices = make(t.getIndices());
        const auto &x = get(t.getX());
        int64_t axis = t.getAxis();
        int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis + 1);
        if (x.isFloat)
          kern::topK(x.f.data(), outer, x.shape[axis], inner, t.getK(), t.getLargest(),
                     values.f.data(), indices.i.data());
        else
          kern::topK(x.i.data(), outer, x.shape[axis], inner, t.getK(), t.getLargest(),
                     values.i.data(), indices.i.data());
        set(t.getValues(), std::move(values));
        set(t.getIndices(), std::move(indices));
        return success();
      })
      .Case([&](CumSumOp c) {
        EvalTensor<T> out = make(c.getResult());
        const auto &x = get(c.getX());
        int64_t axis = c.getAxis();
        int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis + 1);
        if (x.isFloat)
          kern::cumsum(x.f.data(), outer, x.shape[axis], inner, c.getExclusive(),
                       c.getReverse(), out.f.data());
        else
          kern::cumsum(x.i.data(), outer, x.shape[axis], inner, c.getExclusive(),
                       c.getReverse(), out.i.data());
        set(c.getResult(), std::move(out));
        return success();
      })
      .Case([&](GatherElementsOp g) {
        EvalTensor<T> out = make(g.getResult());
        const auto &x = get(g.getData()), &ix = get(g.getIndices());
        int rank = x.shape.size(), axis = g.getAxis();
        bool ok = x.isFloat ? kern::gatherElements(x.f.data(), x.shape.data(), ix.i.data(),
                                                   ix.shape.data(), rank, axis, out.f.data())
                            : kern::gatherElements(x.i.data(), x.shape.data(), ix.i.data(),
                                                   ix.shape.data(), rank, axis, out.i.data());
        if (!ok)
          return fail(op, "index out of range");
        set(g.getResult(), std::move(out));
        return success();
      })
      .Case([&](ScatterElementsOp sc) {
        EvalTensor<T> out = make(sc.getResult());
        const auto &x = get(sc.getData()), &ix = get(sc.getIndices()), &u = get(sc.getUpdates());
        int rank = x.shape.size(), axis = sc.getAxis();
        int red = sc.reductionCode();
        bool ok = x.isFloat
                      ? kern::scatterElements(x.f.data(), x.shape.data(), ix.i.data(),
                                              u.f.data(), ix.shape.data(), rank, axis, red,
                                              out.f.data())
                      : kern::scatterElements(x.i.data(), x.shape.data(), ix.i.data(),
                                              u.i.data(), ix.shape.data(), rank, axis, red,
                                              out.i.data());
        if (!ok)
          return fail(op, "index out of range");
        set(sc.getResult(), std::move(out));
        return success();
      })
      .Case([&](MatMulOp m) {
        EvalTensor<T> out = make(m.getResult());
        Shape a = shapeOf(m.getA()), b = shapeOf(m.getB());
        size_t r = a.size();
        int64_t batch = product(a, 0, r - 2);
        int64_t M = out.shape[r - 2], N = out.shape[r - 1];
        int64_t K = m.getTransA() ? a[r - 2] : a[r - 1];
        kern::matmul(get(m.getA()).f.data(), get(m.getB()).f.data(), out.f.data(), batch, M, N,
                     K, m.getTransA(), m.getTransB(), false, accumOf(op));
        set(m.getResult(), std::move(out));
        return success();
      })
      .Case([&](EmptyOp e) {
        set(e.getResult(), make(e.getResult()));
        return success();
      })
      .Case([&](MatMulIntoOp m) {
        // The product as ortc.matmul computes it, scattered into a copy of dest.
        SmallVector<int64_t> ps = m.getProductShape();
        Shape a = shapeOf(m.getA()), prod(ps.begin(), ps.end());
        size_t r = a.size();
        int64_t batch = product(a, 0, r - 2), M = prod[r - 2], N = prod[r - 1];
        int64_t K = m.getTransA() ? a[r - 2] : a[r - 1];
        std::vector<T> p(static_cast<size_t>(batch * M * N));
        kern::matmul(get(m.getA()).f.data(), get(m.getB()).f.data(), p.data(), batch, M, N, K,
                     m.getTransA(), m.getTransB());
        EvalTensor<T> out = get(m.getDest());
        ArrayRef<int64_t> strides = m.getStrides();
        for (size_t e = 0; e < p.size(); ++e)
          out.f[stridedAt(static_cast<int64_t>(e), prod, m.getOffset(), strides)] = p[e];
        set(m.getResult(), std::move(out));
        return success();
      })
      .Case([&](ConvOp c) {
        EvalTensor<T> out = make(c.getResult());
        auto g = convGeom(shapeOf(c.getX()), shapeOf(c.getW()), out.shape, c.getStrides(),
                          c.getPads(), c.getDilations(), c.getGroup());
        g.accum = accumOf(op);
        const T *bias = c.getBias() ? get(c.getBias()).f.data() : nullptr;
        kern::convForward(get(c.getX()).f.data(), get(c.getW()).f.data(), bias, out.f.data(), g);
        set(c.getResult(), std::move(out));
        return success();
      })
      .Case([&](ConvGradInputOp c) {
        EvalTensor<T> out = make(c.getResult());
        auto g = convGeom(out.shape, shapeOf(c.getW()), shapeOf(c.getDy()), c.getStrides(),
                          c.getPads(), c.getDilations(), c.getGroup());
        g.accum = accumOf(op);
        kern::convGradInput(get(c.getDy()).f.data(), get(c.getW()).f.data(), out.f.data(), g);
        set(c.getResult(), std::move(out));
        return success();
      })
      .Case([&](ConvGradWeightOp c) {
        EvalTensor<T> out = make(c.getResult());
        auto g = convGeom(shapeOf(c.getX()), out.shape, shapeOf(c.getDy()), c.getStrides(),
                          c.getPads(), c.getDilations(), c.getGroup());
        g.accum = accumOf(op);
        kern::convGradWeight(get(c.getDy()).f.data(), get(c.getX()).f.data(), out.f.data(), g);
        set(c.getResult(), std::move(out));
        return success();
      })
      .template Case<MaxPoolOp, AvgPoolOp>([&](auto p) {
        EvalTensor<T> out = make(p.getResult());
        auto g = poolGeom(shapeOf(p.getX()), out.shape, p.getKernelShape(), p.getStrides(),
                          p.getPads(), p.getDilations(), p.getCountIncludePad());
        if (isa<MaxPoolOp>(op))
          kern::maxPool(get(p.getX()).f.data(), out.f.data(), g);
        else
          kern::avgPool(get(p.getX()).f.data(), out.f.data(), g);
        set(p.getResult(), std::move(out));
        return success();
      })
      .Case([&](MaxPoolGradOp p) {
        EvalTensor<T> out = make(p.getResult());
        auto g = poolGeom(out.shape, shapeOf(p.getDy()), p.getKernelShape(), p.getStrides(),
                          p.getPads(), p.getDilations(), false);
        kern::maxPoolGrad(get(p.getX()).f.data(), get(p.getDy()).f.data(), out.f.data(), g);
        set(p.getResult(), std::move(out));
        return success();
      })
      .Case([&](AvgPoolGradOp p) {
        EvalTensor<T> out = make(p.getResult());
        auto g = poolGeom(out.shape, shapeOf(p.getDy()), p.getKernelShape(), p.getStrides(),
                          p.getPads(), p.getDilations(), p.getCountIncludePad());
        kern::avgPoolGrad(get(p.getDy()).f.data(), out.f.data(), g);
        set(p.getResult(), std::move(out));
        return success();
      })
      .Case([&](BatchNormTrainOp bn) {
        EvalTensor<T> y = make(bn.getY()), mean = make(bn.getMean()), var = make(bn.getVar());
        Shape x = shapeOf(bn.getX());
        kern::batchNormTrain(get(bn.getX()).f.data(), get(bn.getScale()).f.data(),
                             get(bn.getBias()).f.data(), y.f.data(), mean.f.data(),
                             var.f.data(), nullptr, x[0], x[1], product(x, 2),
                             bn.getEpsilon().convertToDouble());
        set(bn.getY(), std::move(y));
        set(bn.getMean(), std::move(mean));
        set(bn.getVar(), std::move(var));
        return success();
      })
      .Case([&](BatchNormGradOp bn) {
        EvalTensor<T> dx = make(bn.getDx()), ds = make(bn.getDscale()), db = make(bn.getDbias());
        Shape x = shapeOf(bn.getX());
        const auto &var = get(bn.getVar());
        std::vector<T> invStd(var.numel());
        for (int64_t c = 0; c < var.numel(); ++c)
          invStd[c] = T(1) / std::sqrt(var.f[c] + T(bn.getEpsilon().convertToDouble()));
        kern::batchNormGrad(get(bn.getX()).f.data(), get(bn.getScale()).f.data(),
                            get(bn.getMean()).f.data(), invStd.data(), get(bn.getDy()).f.data(),
                            dx.f.data(), ds.f.data(), db.f.data(), x[0], x[1], product(x, 2));
        set(bn.getDx(), std::move(dx));
        set(bn.getDscale(), std::move(ds));
        set(bn.getDbias(), std::move(db));
        return success();
      })
      .Case([&](BatchNormInferOp bn) {
        EvalTensor<T> y = make(bn.getResult());
        Shape x = shapeOf(bn.getX());
        kern::batchNormInfer(get(bn.getX()).f.data(), get(bn.getScale()).f.data(),
                             get(bn.getBias()).f.data(), get(bn.getMean()).f.data(),
                             get(bn.getVar()).f.data(), y.f.data(), x[0], x[1], product(x, 2),
                             bn.getEpsilon().convertToDouble());
        set(bn.getResult(), std::move(y));
        return success();
      })
      .Case([&](LayerNormOp ln) {
        EvalTensor<T> y = make(ln.getY()), mean = make(ln.getMean()), inv = make(ln.getInvStd());
        Shape x = shapeOf(ln.getX());
        int64_t axis = ln.getAxis();
        const T *bias = ln.getBias() ? get(ln.getBias()).f.data() : nullptr;
        kern::layerNorm(get(ln.getX()).f.data(), get(ln.getScale()).f.data(), bias, y.f.data(),
                        mean.f.data(), inv.f.data(), product(x, 0, axis), product(x, axis),
                        ln.getEpsilon().convertToDouble());
        set(ln.getY(), std::move(y));
        set(ln.getMean(), std::move(mean));
        set(ln.getInvStd(), std::move(inv));
        return success();
      })
      .Case([&](LayerNormGradOp ln) {
        EvalTensor<T> dx = make(ln.getDx()), ds = make(ln.getDscale()), db = make(ln.getDbias());
        Shape x = shapeOf(ln.getX());
        int64_t axis = ln.getAxis();
        kern::layerNormGrad(get(ln.getX()).f.data(), get(ln.getScale()).f.data(),
                            get(ln.getMean()).f.data(), get(ln.getInvStd()).f.data(),
                            get(ln.getDy()).f.data(), dx.f.data(), ds.f.data(), db.f.data(),
                            product(x, 0, axis), product(x, axis));
        set(ln.getDx(), std::move(dx));
        set(ln.getDscale(), std::move(ds));
        set(ln.getDbias(), std::move(db));
        return success();
      })
      .template Case<SoftmaxOp, LogSoftmaxOp>([&](auto s) {
        EvalTensor<T> y = make(s.getResult());
        Shape x = shapeOf(s.getX());
        int64_t axis = s.getAxis();
        auto fn = isa<SoftmaxOp>(op) ? &kern::softmax<T> : &kern::logSoftmax<T>;
        fn(get(s.getX()).f.data(), y.f.data(), product(x, 0, axis), x[axis],
           product(x, axis + 1));
        set(s.getResult(), std::move(y));
        return success();
      })
      .template Case<SoftmaxGradOp, LogSoftmaxGradOp>([&](auto s) {
        EvalTensor<T> dx = make(s.getResult());
        Shape x = shapeOf(s.getY());
        int64_t axis = s.getAxis();
        auto fn = isa<SoftmaxGradOp>(op) ? &kern::softmaxGrad<T> : &kern::logSoftmaxGrad<T>;
        fn(get(s.getY()).f.data(), get(s.getDy()).f.data(), dx.f.data(), product(x, 0, axis),
           x[axis], product(x, axis + 1));
        set(s.getResult(), std::move(dx));
        return success();
      })
      .Case([&](RandomUniformOp r) {
        EvalTensor<T> out = make(r.getResult());
        kern::randomUniform(out.f.data(), out.numel(), r.getLow().convertToDouble(),
                            r.getHigh().convertToDouble(),
                            static_cast<uint64_t>(get(r.getSeed()).i.at(0)), r.getKey());
        set(r.getResult(), std::move(out));
        return success();
      })
      .template Case<DropoutOp, DropoutGradOp>([&](auto d) {
        EvalTensor<T> out = make(op->getResult(0));
        const auto &x = get(op->getOperand(0));
        uint64_t seed = get(d.getSeed()).i.at(0);
        double ratio = d.getRatio().convertToDouble();
        if (dropoutDisabled)
          out.f = x.f;
        else if (isa<DropoutOp>(op))
          kern::dropout(x.f.data(), out.f.data(), out.numel(), ratio, seed, d.getKey());
        else
          kern::dropoutGrad(x.f.data(), out.f.data(), out.numel(), ratio, seed, d.getKey());
        set(op->getResult(0), std::move(out));
        return success();
      })
      .template Case<SoftmaxCrossEntropyOp, SoftmaxCrossEntropyGradOp>([&](auto s) {
        EvalTensor<T> out = make(op->getResult(0));
        Shape l = shapeOf(s.getLogits());
        const auto &labels = get(s.getLabels());
        auto ignore = s.getIgnoreIndex();
        int64_t kept = 0;
        for (int64_t v : labels.i)
          kept += !(ignore && v == *ignore);
        // The kernels compute the mean; "sum" scales by the number of kept rows.
        T factor = s.getReduction() == "sum" ? T(kept) : T(1);
        bool ok;
        if constexpr (std::is_same_v<decltype(s), SoftmaxCrossEntropyOp>) {
          ok = kern::softmaxCrossEntropy(get(s.getLogits()).f.data(), labels.i.data(), l[0],
                                         l[1], ignore.value_or(0), ignore.has_value(),
                                         out.f.data());
          out.f[0] *= factor;
        } else {
          T dloss = get(s.getDloss()).f.at(0) * factor;
          ok = kern::softmaxCrossEntropyGrad(get(s.getLogits()).f.data(), labels.i.data(),
                                             l[0], l[1], ignore.value_or(0),
                                             ignore.has_value(), &dloss, out.f.data());
        }
        if (!ok)
          return fail(op, "label out of range");
        set(op->getResult(0), std::move(out));
        return success();
      })
      .Case([&](AllReduceOp a) { // the evaluator is a world of one rank
        set(a.getResult(), get(a.getInput()));
        return success();
      })
      .template Case<ReduceScatterOp, AllGatherOp, RankShardOp>([&](auto c) {
        if (c.getRanks() != 1)
          return fail(op, "shards for " + std::to_string(c.getRanks()) +
                              " ranks; the evaluator is one process");
        set(c.getResult(), get(c.getInput()));
        return success();
      })
      .Case([&](AllFiniteOp a) {
        EvalTensor<T> out = make(a.getResult()), each = make(a.getEach());
        bool ok = true;
        for (auto [k, v] : llvm::enumerate(a.getInputs())) {
          each.i[k] = kern::allFinite(get(v).f.data(), get(v).numel());
          ok &= each.i[k] != 0;
        }
        out.i[0] = ok;
        set(a.getResult(), std::move(out));
        set(a.getEach(), std::move(each));
        return success();
      })
      .Case([&](SgdUpdateOp u) {
        EvalTensor<T> p = get(u.getParam());
        EvalTensor<T> buf;
        if (u.getMomentumBuffer())
          buf = get(u.getMomentumBuffer());
        uint8_t apply = get(u.getApply()).i[0];
        kern::sgdUpdate(p.f.data(), get(u.getGrad()).f.data(),
                        u.getMomentumBuffer() ? buf.f.data() : nullptr, p.numel(),
                        get(u.getLr()).f[0], u.getMomentum().convertToDouble(),
                        u.getDampening().convertToDouble(), u.getNesterov(),
                        u.getWeightDecay().convertToDouble(), get(u.getStep()).i[0], &apply);
        set(u.getResult(0), std::move(p));
        if (u.getMomentumBuffer())
          set(u.getResult(1), std::move(buf));
        return success();
      })
      .Case([&](AdamWUpdateOp u) {
        EvalTensor<T> p = get(u.getParam()), m = get(u.getM()), v = get(u.getV());
        uint8_t apply = get(u.getApply()).i[0];
        kern::adamwUpdate(p.f.data(), get(u.getGrad()).f.data(), m.f.data(), v.f.data(),
                          p.numel(), get(u.getLr()).f[0], get(u.getBeta1()).f[0],
                          get(u.getBeta2()).f[0], get(u.getEps()).f[0],
                          get(u.getWeightDecay()).f[0], get(u.getStep()).i[0], &apply);
        set(u.getNewParam(), std::move(p));
        set(u.getNewM(), std::move(m));
        set(u.getNewV(), std::move(v));
        return success();
      })
      .Default([&](Operation *) { return fail(op, "the evaluator has no rule for this op"); });
}

} // namespace

template <typename T>
bool evaluate(func::FuncOp fn, const std::vector<EvalTensor<T>> &args,
              const std::map<std::string, EvalTensor<T>> &weights,
              std::vector<EvalTensor<T>> &results, std::string &error) {
  Interp<T> in(weights);
  if (args.size() != fn.getNumArguments()) {
    error = "expected " + std::to_string(fn.getNumArguments()) + " arguments, got " +
            std::to_string(args.size());
    return false;
  }
  for (auto [i, a] : llvm::enumerate(args)) {
    if (a.shape != shapeOf(fn.getArgument(i))) {
      error = "argument " + std::to_string(i) + " has the wrong shape";
      return false;
    }
    in.set(fn.getArgument(i), a);
  }
  for (Operation &op : fn.getBody().front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      results.clear();
      for (Value v : ret.getOperands())
        results.push_back(in.get(v));
      return true;
    }
    if (failed(in.run(&op))) {
      error = in.error;
      return false;
    }
  }
  error = "function has no return";
  return false;
}

template bool evaluate<double>(func::FuncOp, const std::vector<EvalTensor<double>> &,
                               const std::map<std::string, EvalTensor<double>> &,
                               std::vector<EvalTensor<double>> &, std::string &);
template bool evaluate<float>(func::FuncOp, const std::vector<EvalTensor<float>> &,
                              const std::map<std::string, EvalTensor<float>> &,
                              std::vector<EvalTensor<float>> &, std::string &);

} // namespace ortc
