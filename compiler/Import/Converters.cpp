//===- Converters.cpp - One small converter per ONNX op ------------------===//
//
// Each converter maps one ONNX node onto ortc ops, reading ONNX's attribute/input
// forms for every opset from 7 to 28 (ONNX 1.23) (axes as attributes or as inputs, Split's
// num_outputs...). Nodes whose inputs are all known at import time are evaluated on
// the host, which is how shape subgraphs (Shape, ConstantOfShape, Range...) fold.
//
//===----------------------------------------------------------------------===//
#include "compiler/Import/ImportContext.h"

#include <cmath>
#include <functional>
#include <numeric>

using namespace mlir;

namespace ortc {
namespace {

int64_t normAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

//===-- host evaluation ---------------------------------------------------===//

/// Numpy broadcast of host tensors through `f`.
HostTensor hostMap(const std::vector<const HostTensor *> &in, int32_t outType,
                   const std::function<double(const std::vector<double> &)> &f) {
  Shape shape;
  for (auto *t : in) {
    auto s = broadcastShapes(shape, t->shape);
    shape.assign(s->begin(), s->end());
  }
  HostTensor out;
  out.elemType = outType;
  out.shape = shape;
  int64_t n = numElements(shape);
  Shape outStrides = stridesOf(shape);
  std::vector<double> args(in.size());
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < in.size(); ++k) {
      const HostTensor &t = *in[k];
      size_t lead = shape.size() - t.shape.size();
      Shape ts = stridesOf(t.shape);
      int64_t idx = 0;
      for (size_t d = 0; d < t.shape.size(); ++d) {
        int64_t coord = (i / outStrides[d + lead]) % shape[d + lead];
        idx += (t.shape[d] == 1 ? 0 : coord) * ts[d];
      }
      args[k] = t.data[idx];
    }
    out.data.push_back(f(args));
  }
  if (!out.isFloat())
    for (double &d : out.data)
      d = std::trunc(d);
  return out;
}

/// Gathers host elements at `indices` (flat, into `src`) with a new shape.
HostTensor hostTake(const HostTensor &src, const Shape &shape,
                    const std::vector<int64_t> &indices) {
  HostTensor out;
  out.elemType = src.elemType;
  out.shape = shape;
  for (int64_t i : indices)
    out.data.push_back(src.data[i]);
  return out;
}

/// Flat source indices of a strided slice (normalised starts/sizes/steps).
std::vector<int64_t> sliceIndices(const Shape &in, const Shape &starts, const Shape &sizes,
                                  const Shape &steps) {
  Shape st = stridesOf(in), outSt = stridesOf(sizes);
  int64_t n = numElements(sizes);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = 0;
    for (size_t d = 0; d < in.size(); ++d)
      src += (starts[d] + ((i / outSt[d]) % sizes[d]) * steps[d]) * st[d];
    idx.push_back(src);
  }
  return idx;
}

//===-- binders -----------------------------------------------------------===//

/// Fails unless the host inputs broadcast together (hostMap assumes they do).
LogicalResult checkHostBroadcast(NodeCtx &nc, const std::vector<const HostTensor *> &in) {
  Shape shape;
  for (auto *t : in) {
    auto s = broadcastShapes(shape, t->shape);
    if (failed(s))
      return nc.fail("inputs cannot be broadcast together");
    shape.assign(s->begin(), s->end());
  }
  return success();
}

/// Reads an int list that is an attribute before `inputOpset` and input `idx` after.
LogicalResult intsFrom(NodeCtx &nc, const char *attrName, size_t idx, int64_t inputOpset,
                       std::optional<Shape> &out) {
  if (nc.ic.opset < inputOpset) {
    out = nc.attrInts(attrName);
    return success();
  }
  if (!nc.has(idx))
    return success();
  const HostTensor *c = nc.constant(idx);
  if (!c)
    return nc.fail(std::string(attrName) + " must be known at compile time (input '" +
                   nc.node.input(idx) + "' is computed at run time)");
  out = c->ints();
  return success();
}

/// Checks one axis against `rank` and normalises it (negative counts from the end).
LogicalResult checkAxis(NodeCtx &nc, int64_t &axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return nc.fail("axis out of range");
  axis = normAxis(axis, rank);
  return success();
}

/// Normalises and sorts axes; fails on out-of-range or repeated axes.
LogicalResult normAxes(NodeCtx &nc, Shape &axes, int64_t rank) {
  for (int64_t &a : axes) {
    if (a < -rank || a >= rank)
      return nc.fail("axis " + std::to_string(a) + " out of range for rank " +
                     std::to_string(rank));
    a = normAxis(a, rank);
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return nc.fail("repeated axis");
  return success();
}

Value reshape(NodeCtx &nc, Value v, const Shape &shape) {
  return reshapeTo(nc.b, nc.loc, v, shape);
}

/// Broadcasts every input to the common shape; fails if they are incompatible.
LogicalResult broadcastAll(NodeCtx &nc, std::vector<Value> &vals) {
  Shape shape;
  for (Value v : vals) {
    auto s = broadcastShapes(shape, tensorTypeOf(v).getShape());
    if (failed(s))
      return nc.fail("inputs cannot be broadcast together");
    shape.assign(s->begin(), s->end());
  }
  for (Value &v : vals)
    v = broadcastTo(nc.b, nc.loc, v, shape);
  return success();
}

//===-- elementwise -------------------------------------------------------===//

template <typename OpT> LogicalResult unary(NodeCtx &nc) {
  nc.setOutput(0, OpT::create(nc.b, nc.loc, nc.in(0)));
  return success();
}

/// Host formula for the foldable unary ops.
template <typename OpT>
LogicalResult unaryFoldable(NodeCtx &nc, double (*f)(double)) {
  if (nc.allHost()) {
    const HostTensor &x = *nc.constant(0);
    nc.setOutputHost(0, hostMap({&x}, x.elemType, [f](auto &a) { return f(a[0]); }));
    return success();
  }
  return unary<OpT>(nc);
}

LogicalResult convNeg(NodeCtx &nc) { return unaryFoldable<NegOp>(nc, [](double a) { return -a; }); }
LogicalResult convSqrt(NodeCtx &nc) { return unaryFoldable<SqrtOp>(nc, [](double a) { return std::sqrt(a); }); }
LogicalResult convNot(NodeCtx &nc) { return unaryFoldable<NotOp>(nc, [](double a) { return a ? 0.0 : 1.0; }); }

LogicalResult convReciprocal(NodeCtx &nc) {
  Value x = nc.in(0);
  nc.setOutput(0, DivOp::create(nc.b, nc.loc, splatLike(nc.b, nc.loc, x, 1.0), x));
  return success();
}

LogicalResult convGelu(NodeCtx &nc) {
  std::string approx = nc.attrString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return nc.fail("unknown approximate='" + approx + "'");
  nc.setOutput(0, GeluOp::create(nc.b, nc.loc, nc.in(0), approx == "tanh"));
  return success();
}

LogicalResult convClip(NodeCtx &nc) {
  std::optional<double> lo, hi;
  if (nc.ic.opset < 11) {
    if (nc.attr("min")) lo = nc.attrFloat("min", 0);
    if (nc.attr("max")) hi = nc.attrFloat("max", 0);
  } else {
    for (size_t i : {1, 2}) {
      if (!nc.has(i))
        continue;
      const HostTensor *c = nc.constant(i);
      if (!c || c->numel() != 1)
        return nc.fail("Clip bounds must be scalars known at compile time");
      (i == 1 ? lo : hi) = c->data[0];
    }
  }
  FloatAttr loA = lo ? nc.b.getF64FloatAttr(*lo) : FloatAttr();
  FloatAttr hiA = hi ? nc.b.getF64FloatAttr(*hi) : FloatAttr();
  nc.setOutput(0, ClipOp::create(nc.b, nc.loc, nc.in(0), loA, hiA));
  return success();
}

/// Input 0 converted to `elt` (ONNX type `to`): on the host when known at import
/// time, else an `ortc.cast` (none when the type already matches).
LogicalResult castInput0(NodeCtx &nc, int32_t to, Type elt) {
  if (nc.allHost()) {
    const HostTensor &x = *nc.constant(0);
    bool toBool = to == onnx::TensorProto::BOOL;
    nc.setOutputHost(0, hostMap({&x}, to, [toBool](auto &a) {
      return toBool ? (a[0] != 0 ? 1.0 : 0.0) : a[0];
    }));
    return success();
  }
  Value x = nc.in(0);
  nc.setOutput(0, tensorTypeOf(x).getElementType() == elt
                      ? x
                      : CastOp::create(nc.b, nc.loc, tensorTypeOf(x).clone(elt), x).getResult());
  return success();
}

LogicalResult convCast(NodeCtx &nc) {
  int32_t to = nc.attrInt("to", 0);
  Type elt = elementTypeOf(nc.ic.ctx, to);
  if (!elt)
    return nc.fail("cast to unsupported dtype " + onnxTypeName(to));
  return castInput0(nc, to, elt);
}

using HostFn = double (*)(double, double);

/// A binary (or, for Min/Max/Sum, variadic) elementwise op with broadcasting.
template <typename OpT, bool IsCompare = false>
LogicalResult binary(NodeCtx &nc, HostFn f) {
  if (nc.allHost()) {
    std::vector<const HostTensor *> in;
    for (size_t i = 0; i < nc.numInputs(); ++i)
      in.push_back(nc.constant(i));
    if (failed(checkHostBroadcast(nc, in)))
      return failure();
    int32_t outType = IsCompare ? (int32_t)onnx::TensorProto::BOOL : in[0]->elemType;
    nc.setOutputHost(0, hostMap(in, outType, [f](const std::vector<double> &a) {
      double r = a[0];
      for (size_t k = 1; k < a.size(); ++k)
        r = f(r, a[k]);
      return r;
    }));
    return success();
  }
  std::vector<Value> vals;
  for (size_t i = 0; i < nc.numInputs(); ++i)
    vals.push_back(nc.in(i));
  if (failed(broadcastAll(nc, vals)))
    return failure();
  for (Value v : vals)
    if (tensorTypeOf(v).getElementType() != tensorTypeOf(vals[0]).getElementType())
      return nc.fail("inputs have different element types");
  Value acc = vals[0];
  for (size_t k = 1; k < vals.size(); ++k) {
    if constexpr (IsCompare)
      acc = OpT::create(nc.b, nc.loc, tensorTypeOf(acc).clone(nc.b.getI1Type()), acc,
                        vals[k]);
    else
      acc = OpT::create(nc.b, nc.loc, acc, vals[k]);
  }
  nc.setOutput(0, acc);
  return success();
}

LogicalResult convAdd(NodeCtx &nc) { return binary<AddOp>(nc, [](double a, double b) { return a + b; }); }
LogicalResult convSub(NodeCtx &nc) { return binary<SubOp>(nc, [](double a, double b) { return a - b; }); }
LogicalResult convMul(NodeCtx &nc) { return binary<MulOp>(nc, [](double a, double b) { return a * b; }); }
LogicalResult convDiv(NodeCtx &nc) { return binary<DivOp>(nc, [](double a, double b) { return a / b; }); }
LogicalResult convPow(NodeCtx &nc) {
  // ONNX allows the exponent to have another element type: cast it to the base's.
  if (!nc.allHost() && nc.type(1).getElementType() != nc.type(0).getElementType()) {
    Value x = nc.in(0), e = nc.in(1);
    e = CastOp::create(nc.b, nc.loc, tensorTypeOf(e).clone(tensorTypeOf(x).getElementType()), e);
    std::vector<Value> vals{x, e};
    if (failed(broadcastAll(nc, vals)))
      return failure();
    nc.setOutput(0, PowOp::create(nc.b, nc.loc, vals[0], vals[1]));
    return success();
  }
  return binary<PowOp>(nc, [](double a, double b) { return std::pow(a, b); });
}
LogicalResult convMin(NodeCtx &nc) { return binary<MinOp>(nc, [](double a, double b) { return std::min(a, b); }); }
LogicalResult convMax(NodeCtx &nc) { return binary<MaxOp>(nc, [](double a, double b) { return std::max(a, b); }); }
LogicalResult convSum(NodeCtx &nc) { return binary<AddOp>(nc, [](double a, double b) { return a + b; }); }
LogicalResult convEqual(NodeCtx &nc) { return binary<EqualOp, true>(nc, [](double a, double b) { return a == b ? 1.0 : 0.0; }); }
LogicalResult convLess(NodeCtx &nc) { return binary<LessOp, true>(nc, [](double a, double b) { return a < b ? 1.0 : 0.0; }); }
LogicalResult convGreater(NodeCtx &nc) { return binary<GreaterOp, true>(nc, [](double a, double b) { return a > b ? 1.0 : 0.0; }); }
LogicalResult convAnd(NodeCtx &nc) { return binary<AndOp, true>(nc, [](double a, double b) { return a && b ? 1.0 : 0.0; }); }

LogicalResult convWhere(NodeCtx &nc) {
  if (nc.allHost()) {
    const HostTensor *c = nc.constant(0), *x = nc.constant(1), *y = nc.constant(2);
    if (failed(checkHostBroadcast(nc, {c, x, y})))
      return failure();
    nc.setOutputHost(0, hostMap({c, x, y}, x->elemType,
                                [](auto &a) { return a[0] ? a[1] : a[2]; }));
    return success();
  }
  std::vector<Value> vals{nc.in(0), nc.in(1), nc.in(2)};
  if (failed(broadcastAll(nc, vals)))
    return failure();
  nc.setOutput(0, SelectOp::create(nc.b, nc.loc, vals[0], vals[1], vals[2]));
  return success();
}

//===-- constants and shape subgraphs -------------------------------------===//

LogicalResult hostFromTensorProto(NodeCtx &nc, const onnx::TensorProto &t, HostTensor &h) {
  h.elemType = t.data_type();
  h.shape.assign(t.dims().begin(), t.dims().end());
  if (failed(nc.checkShape(h.shape, "tensor '" + t.name() + "'", kMaxHostElements)))
    return failure();
  int64_t n = numElements(h.shape);
  const std::string &raw = t.raw_data();
  size_t esize = t.data_type() == onnx::TensorProto::DOUBLE || t.data_type() == onnx::TensorProto::INT64 ? 8
                 : t.data_type() == onnx::TensorProto::BOOL ? 1 : 4;
  bool supported = llvm::is_contained({onnx::TensorProto::FLOAT, onnx::TensorProto::DOUBLE,
                                       onnx::TensorProto::INT64, onnx::TensorProto::INT32,
                                       onnx::TensorProto::BOOL},
                                      t.data_type());
  // Check raw_data's size before reading it.
  if (supported && t.has_raw_data() && raw.size() != n * esize)
    return nc.fail("constant data does not match its shape");
  auto rd = [&](auto tag, size_t i) {
    decltype(tag) v;
    memcpy(&v, raw.data() + i * sizeof(v), sizeof(v));
    return static_cast<double>(v);
  };
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      v = t.has_raw_data() ? rd(float(), i) : (i < t.float_data_size() ? t.float_data(i) : NAN);
      break;
    case onnx::TensorProto::DOUBLE:
      v = t.has_raw_data() ? rd(double(), i) : (i < t.double_data_size() ? t.double_data(i) : NAN);
      break;
    case onnx::TensorProto::INT64:
      v = t.has_raw_data() ? rd(int64_t(), i) : (i < t.int64_data_size() ? (double)t.int64_data(i) : NAN);
      break;
    case onnx::TensorProto::INT32:
      v = t.has_raw_data() ? rd(int32_t(), i) : (i < t.int32_data_size() ? t.int32_data(i) : NAN);
      break;
    case onnx::TensorProto::BOOL:
      v = t.has_raw_data() ? rd(uint8_t(), i) : (i < t.int32_data_size() ? t.int32_data(i) : NAN);
      break;
    default:
      return nc.fail("constant of unsupported dtype " + onnxTypeName(t.data_type()));
    }
    h.data.push_back(v);
  }
  if (!t.has_raw_data()) {
    int64_t have = std::max({t.float_data_size(), t.double_data_size(), t.int64_data_size(),
                             t.int32_data_size()});
    if (have != n)
      return nc.fail("constant has " + std::to_string(have) + " values for " +
                     std::to_string(n) + " elements");
  }
  return success();
}

LogicalResult convConstant(NodeCtx &nc) {
  HostTensor h;
  if (auto *a = nc.attr("value")) {
    if (failed(hostFromTensorProto(nc, a->t(), h)))
      return failure();
  } else if (auto *a = nc.attr("value_float")) {
    h.data = {a->f()};
  } else if (auto *a = nc.attr("value_floats")) {
    h.shape = {a->floats_size()};
    h.data.assign(a->floats().begin(), a->floats().end());
  } else if (auto *a = nc.attr("value_int")) {
    h.elemType = onnx::TensorProto::INT64;
    h.data = {(double)a->i()};
  } else if (auto *a = nc.attr("value_ints")) {
    h.elemType = onnx::TensorProto::INT64;
    h.shape = {a->ints_size()};
    for (int64_t v : a->ints())
      h.data.push_back((double)v);
  } else {
    return nc.fail("Constant without a supported value attribute");
  }
  if (!elementTypeOf(nc.ic.ctx, h.elemType))
    return nc.fail("constant of unsupported dtype " + onnxTypeName(h.elemType));
  nc.setOutputHost(0, std::move(h));
  return success();
}

LogicalResult convConstantOfShape(NodeCtx &nc) {
  const HostTensor *s = nc.constant(0);
  if (!s)
    return nc.fail("shape input must be known at compile time");
  HostTensor h;
  h.shape = s->ints();
  if (failed(nc.checkShape(h.shape, "shape", kMaxHostElements)))
    return failure();
  double v = 0;
  if (auto *a = nc.attr("value")) {
    HostTensor val;
    if (failed(hostFromTensorProto(nc, a->t(), val)) || val.numel() != 1)
      return nc.fail("value must hold one element");
    h.elemType = val.elemType;
    v = val.data[0];
  }
  h.data.assign(numElements(h.shape), v);
  nc.setOutputHost(0, std::move(h));
  return success();
}

LogicalResult convShape(NodeCtx &nc) {
  Shape s = shapeOf(nc.type(0));
  int64_t rank = s.size();
  int64_t start = nc.attrInt("start", 0), end = nc.attrInt("end", rank);
  start = std::clamp(normAxis(start, rank), int64_t(0), rank);
  end = std::clamp(normAxis(end, rank), int64_t(0), rank);
  HostTensor h;
  h.elemType = onnx::TensorProto::INT64;
  for (int64_t i = start; i < end; ++i)
    h.data.push_back((double)s[i]);
  h.shape = {(int64_t)h.data.size()};
  nc.setOutputHost(0, std::move(h));
  return success();
}

LogicalResult convSize(NodeCtx &nc) {
  HostTensor h;
  h.elemType = onnx::TensorProto::INT64;
  h.data = {(double)numElements(shapeOf(nc.type(0)))};
  nc.setOutputHost(0, std::move(h));
  return success();
}

LogicalResult convRange(NodeCtx &nc) {
  const HostTensor *s = nc.constant(0), *l = nc.constant(1), *d = nc.constant(2);
  if (!s || !l || !d || s->numel() != 1 || l->numel() != 1 || d->numel() != 1)
    return nc.fail("Range's start, limit and delta must be scalars known at compile time");
  double start = s->data.at(0), limit = l->data.at(0), delta = d->data.at(0);
  if (delta == 0)
    return nc.fail("Range delta is zero");
  int64_t n = std::max<int64_t>(std::ceil((limit - start) / delta), 0);
  if (n > (int64_t(1) << 30))
    return nc.fail("Range is too long");
  HostTensor h;
  h.elemType = s->elemType;
  h.shape = {n};
  for (int64_t i = 0; i < n; ++i)
    h.data.push_back(start + i * delta);
  nc.setOutputHost(0, std::move(h));
  return success();
}

LogicalResult convIdentity(NodeCtx &nc) {
  nc.ic.values[nc.node.output(0)] = nc.operand(0);
  return success();
}

//===-- reshapes ----------------------------------------------------------===//

/// Applies a computed shape to input 0, on the host when it is known.
LogicalResult setReshaped(NodeCtx &nc, const Shape &shape) {
  if (numElements(shape) != numElements(shapeOf(nc.type(0))))
    return nc.fail("cannot reshape " + std::to_string(numElements(shapeOf(nc.type(0)))) +
                   " elements to " + std::to_string(numElements(shape)));
  if (nc.allHost()) {
    HostTensor h = *nc.constant(0);
    h.shape = shape;
    nc.setOutputHost(0, std::move(h));
    return success();
  }
  nc.setOutput(0, reshape(nc, nc.in(0), shape));
  return success();
}

LogicalResult convReshape(NodeCtx &nc) {
  std::optional<Shape> target;
  if (failed(intsFrom(nc, "shape", 1, 5, target)) || !target)
    return nc.fail("Reshape needs a shape known at compile time");
  Shape in = shapeOf(nc.type(0)), out = *target;
  bool allowZero = nc.attrInt("allowzero", 0);
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0 && !allowZero) {
      if (i >= in.size())
        return nc.fail("shape copies dim " + std::to_string(i) + " the input lacks");
      out[i] = in[i];
    }
    if (out[i] == -1) {
      if (infer >= 0)
        return nc.fail("shape has more than one -1");
      infer = i;
    } else if (out[i] < 0) {
      return nc.fail("negative dim " + std::to_string(out[i]) + " in shape");
    } else if (out[i] > kMaxDim || (out[i] && known > kMaxElements / out[i])) {
      return nc.fail("shape dim " + std::to_string(out[i]) + " makes the tensor too large");
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numElements(in) % known)
      return nc.fail("cannot infer the -1 dim");
    out[infer] = numElements(in) / known;
  }
  return setReshaped(nc, out);
}

LogicalResult convFlatten(NodeCtx &nc) {
  Shape in = shapeOf(nc.type(0));
  int64_t axis = normAxis(nc.attrInt("axis", 1), in.size());
  if (axis < 0 || axis > (int64_t)in.size())
    return nc.fail("axis out of range");
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < (int64_t)in.size(); ++i)
    (i < axis ? a : b) *= in[i];
  return setReshaped(nc, {a, b});
}

LogicalResult convSqueeze(NodeCtx &nc) {
  std::optional<Shape> axes;
  if (failed(intsFrom(nc, "axes", 1, 13, axes)))
    return failure();
  Shape in = shapeOf(nc.type(0)), out;
  Shape ax = axes.value_or(Shape{});
  if (failed(normAxes(nc, ax, in.size())))
    return failure();
  for (int64_t i = 0; i < (int64_t)in.size(); ++i) {
    bool listed = llvm::is_contained(ax, i);
    if (listed && in[i] != 1)
      return nc.fail("cannot squeeze dim " + std::to_string(i) + " of size " +
                     std::to_string(in[i]));
    if (!(listed || (!axes && in[i] == 1)))
      out.push_back(in[i]);
  }
  return setReshaped(nc, out);
}

LogicalResult convUnsqueeze(NodeCtx &nc) {
  std::optional<Shape> axes;
  if (failed(intsFrom(nc, "axes", 1, 13, axes)) || !axes)
    return nc.fail("Unsqueeze needs axes known at compile time");
  Shape in = shapeOf(nc.type(0));
  int64_t rank = in.size() + axes->size();
  Shape ax = *axes;
  if (failed(normAxes(nc, ax, rank)))
    return failure();
  Shape out;
  size_t k = 0;
  for (int64_t i = 0; i < rank; ++i)
    out.push_back(llvm::is_contained(ax, i) ? 1 : in[k++]);
  return setReshaped(nc, out);
}

LogicalResult convTranspose(NodeCtx &nc) {
  int64_t rank = nc.type(0).getRank();
  Shape perm;
  if (auto p = nc.attrInts("perm"))
    perm = *p;
  else
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  if (nc.allHost()) {
    const HostTensor &x = *nc.constant(0);
    Shape sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    bool isPerm = (int64_t)perm.size() == rank;
    for (int64_t i = 0; i < (int64_t)sorted.size(); ++i)
      isPerm &= sorted[i] == i;
    if (!isPerm)
      return nc.fail("perm is not a permutation of the input's dims");
    Shape out, st = stridesOf(x.shape);
    for (int64_t p : perm)
      out.push_back(x.shape.at(p));
    Shape ost = stridesOf(out);
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t src = 0;
      for (int64_t d = 0; d < rank; ++d)
        src += ((i / ost[d]) % out[d]) * st[perm[d]];
      idx.push_back(src);
    }
    nc.setOutputHost(0, hostTake(x, out, idx));
    return success();
  }
  auto op = nc.checked<TransposeOp>(1, nc.in(0), perm);
  if (!op)
    return failure();
  nc.setOutput(0, op);
  return success();
}

LogicalResult convConcat(NodeCtx &nc) {
  if (nc.numInputs() == 0)
    return nc.fail("Concat without inputs");
  int64_t rank = nc.type(0).getRank();
  int64_t axis = nc.attrInt("axis", 0);
  if (failed(checkAxis(nc, axis, rank)))
    return failure();
  if (nc.allHost()) {
    HostTensor out;
    out.elemType = nc.constant(0)->elemType;
    out.shape = nc.constant(0)->shape;
    out.shape[axis] = 0;
    for (size_t i = 0; i < nc.numInputs(); ++i) {
      const HostTensor *c = nc.constant(i);
      if ((int64_t)c->shape.size() != rank)
        return nc.fail("inputs differ in rank");
      for (int64_t d = 0; d < rank; ++d)
        if (d != axis && c->shape[d] != out.shape[d])
          return nc.fail("inputs differ in dim " + std::to_string(d));
      out.shape[axis] += c->shape[axis];
    }
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d)
      outer *= out.shape[d];
    for (int64_t o = 0; o < outer; ++o)
      for (size_t i = 0; i < nc.numInputs(); ++i) {
        const HostTensor *c = nc.constant(i);
        int64_t chunk = c->numel() / std::max<int64_t>(outer, 1);
        out.data.insert(out.data.end(), c->data.begin() + o * chunk,
                        c->data.begin() + (o + 1) * chunk);
      }
    nc.setOutputHost(0, std::move(out));
    return success();
  }
  SmallVector<Value> vals;
  for (size_t i = 0; i < nc.numInputs(); ++i)
    if (nc.has(i) && numElements(shapeOf(nc.type(i))) > 0)
      vals.push_back(nc.in(i));
  if (vals.size() == 1) {
    nc.setOutput(0, vals[0]);
    return success();
  }
  auto op = nc.checked<ConcatOp>(1, ValueRange(vals), axis);
  if (!op)
    return failure();
  nc.setOutput(0, op);
  return success();
}

/// ONNX Slice/Split semantics -> normalised (starts, sizes, steps) per dim.
LogicalResult normaliseSlice(NodeCtx &nc, const Shape &in, const Shape &starts,
                             const Shape &ends, Shape axes, const Shape &steps,
                             Shape &oStarts, Shape &oSizes, Shape &oSteps) {
  int64_t rank = in.size();
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      (!steps.empty() && steps.size() != starts.size()))
    return nc.fail("starts/ends/axes/steps differ in length");
  oStarts.assign(rank, 0);
  oSizes = in;
  oSteps.assign(rank, 1);
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t a = axes[k];
    if (a < -rank || a >= rank)
      return nc.fail("slice axis out of range");
    a = normAxis(a, rank);
    int64_t dim = in[a], step = steps.empty() ? 1 : steps[k];
    if (step == 0)
      return nc.fail("slice step is zero");
    auto clampIdx = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0)
        v = v <= INT64_MIN / 2 ? lo : v + dim;
      return std::clamp(v, lo, hi);
    };
    int64_t s, e;
    if (step > 0) {
      s = clampIdx(starts[k], 0, dim);
      e = clampIdx(ends[k], 0, dim);
    } else {
      s = clampIdx(starts[k], -1, dim - 1);
      e = clampIdx(ends[k], -1, dim - 1);
    }
    int64_t size = step > 0 ? (e - s + step - 1) / step : (s - e + (-step) - 1) / (-step);
    oStarts[a] = s;
    oSizes[a] = std::max<int64_t>(size, 0);
    oSteps[a] = step;
    if (oSizes[a] == 0)
      oStarts[a] = 0;
  }
  return success();
}

LogicalResult emitSlice(NodeCtx &nc, size_t outIdx, const Shape &starts,
                        const Shape &sizes, const Shape &steps) {
  if (nc.allHost()) {
    const HostTensor &x = *nc.constant(0);
    nc.setOutputHost(outIdx, hostTake(x, sizes, sliceIndices(x.shape, starts, sizes, steps)));
    return success();
  }
  Value x = nc.in(0);
  if (shapeOf(tensorTypeOf(x)) == sizes &&
      llvm::all_of(steps, [](int64_t s) { return s == 1; })) {
    nc.setOutput(outIdx, x);
    return success();
  }
  auto op = nc.checked<SliceOp>(1, x, starts, sizes, steps);
  if (!op)
    return failure();
  nc.setOutput(outIdx, op);
  return success();
}

LogicalResult convSlice(NodeCtx &nc) {
  std::optional<Shape> starts, ends, axes, steps;
  if (nc.ic.opset < 10) {
    starts = nc.attrInts("starts");
    ends = nc.attrInts("ends");
    axes = nc.attrInts("axes");
  } else if (failed(intsFrom(nc, "starts", 1, 10, starts)) ||
             failed(intsFrom(nc, "ends", 2, 10, ends)) ||
             failed(intsFrom(nc, "axes", 3, 10, axes)) ||
             failed(intsFrom(nc, "steps", 4, 10, steps))) {
    return failure();
  }
  if (!starts || !ends)
    return nc.fail("Slice needs starts and ends known at compile time");
  Shape s, z, st;
  if (failed(normaliseSlice(nc, shapeOf(nc.type(0)), *starts, *ends,
                            axes.value_or(Shape{}), steps.value_or(Shape{}), s, z, st)))
    return failure();
  return emitSlice(nc, 0, s, z, st);
}

LogicalResult convSplit(NodeCtx &nc) {
  Shape in = shapeOf(nc.type(0));
  int64_t rank = in.size();
  int64_t axis = nc.attrInt("axis", 0);
  if (failed(checkAxis(nc, axis, rank)))
    return failure();
  std::optional<Shape> split;
  if (failed(intsFrom(nc, "split", 1, 13, split)))
    return failure();
  int64_t nOut = nc.node.output_size();
  if (!split) {
    // Equal parts; opset 18's num_outputs allows a smaller last part.
    int64_t parts = nc.attrInt("num_outputs", nOut);
    if (parts != nOut || parts < 1)
      return nc.fail("num_outputs " + std::to_string(parts) + " must be at least 1 and equal " +
                     "the node's " + std::to_string(nOut) + " outputs");
    int64_t chunk = (in[axis] + parts - 1) / parts;
    split.emplace();
    for (int64_t i = 0, left = in[axis]; i < parts; ++i, left -= chunk)
      split->push_back(std::min(chunk, left));
  }
  if ((int64_t)split->size() != nOut ||
      llvm::any_of(*split, [&](int64_t s) { return s < 0 || s > in[axis]; }) ||
      std::accumulate(split->begin(), split->end(), int64_t(0)) != in[axis])
    return nc.fail("split sizes do not add up to the axis size");
  int64_t offset = 0;
  for (int64_t i = 0; i < nOut; ++i) {
    Shape starts(rank, 0), sizes = in, steps(rank, 1);
    starts[axis] = offset;
    sizes[axis] = (*split)[i];
    offset += (*split)[i];
    if (failed(emitSlice(nc, i, starts, sizes, steps)))
      return failure();
  }
  return success();
}

LogicalResult convGather(NodeCtx &nc) {
  Shape data = shapeOf(nc.type(0));
  int64_t rank = data.size();
  int64_t axis = nc.attrInt("axis", 0);
  if (failed(checkAxis(nc, axis, rank)))
    return failure();
  if (nc.allHost()) {
    const HostTensor &x = *nc.constant(0), &ix = *nc.constant(1);
    Shape out(data.begin(), data.begin() + axis);
    out.insert(out.end(), ix.shape.begin(), ix.shape.end());
    out.insert(out.end(), data.begin() + axis + 1, data.end());
    int64_t outer = numElements(Shape(data.begin(), data.begin() + axis));
    int64_t inner = numElements(Shape(data.begin() + axis + 1, data.end()));
    std::vector<int64_t> idx;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < ix.numel(); ++k) {
        int64_t j = toInt64(ix.data[k]);
        if (j < -data[axis] || j >= data[axis])
          return nc.fail("index " + std::to_string(j) + " out of range");
        j = j < 0 ? j + data[axis] : j;
        for (int64_t i = 0; i < inner; ++i)
          idx.push_back((o * data[axis] + j) * inner + i);
      }
    nc.setOutputHost(0, hostTake(x, out, idx));
    return success();
  }
  if (const HostTensor *ix = nc.constant(1))
    for (double d : ix->data)
      if (toInt64(d) < -data[axis] || toInt64(d) >= data[axis])
        return nc.fail("index " + std::to_string(toInt64(d)) + " out of range");
  auto op = nc.checked<GatherOp>(1, nc.in(0), nc.in(1), axis);
  if (!op)
    return failure();
  nc.setOutput(0, op);
  return success();
}

LogicalResult convExpand(NodeCtx &nc) {
  const HostTensor *s = nc.constant(1);
  if (!s)
    return nc.fail("Expand needs a shape known at compile time");
  auto shape = broadcastShapes(shapeOf(nc.type(0)), s->ints());
  if (failed(shape))
    return nc.fail("cannot expand to the given shape");
  if (failed(nc.checkShape(*shape, "the expanded shape",
                           nc.allHost() ? kMaxHostElements : kMaxElements)))
    return failure();
  if (nc.allHost()) {
    HostTensor t;
    t.shape = Shape(shape->begin(), shape->end());
    t.data.assign(numElements(t.shape), 0);
    const HostTensor *x = nc.constant(0);
    nc.setOutputHost(0, hostMap({x, &t}, x->elemType, [](auto &a) { return a[0]; }));
    return success();
  }
  nc.setOutput(0, broadcastTo(nc.b, nc.loc, nc.in(0), *shape));
  return success();
}

LogicalResult convTile(NodeCtx &nc) {
  const HostTensor *r = nc.constant(1);
  Shape in = shapeOf(nc.type(0));
  if (!r || r->numel() != (int64_t)in.size())
    return nc.fail("Tile needs one repeat per dim, known at compile time");
  Shape reps = r->ints(), interleaved, expanded, out;
  if (failed(nc.checkShape(reps, "repeats")))
    return failure();
  for (size_t i = 0; i < in.size(); ++i) {
    if (reps[i] && in[i] > kMaxDim / reps[i])
      return nc.fail("repeats make a dim larger than " + std::to_string(kMaxDim));
    interleaved.insert(interleaved.end(), {1, in[i]});
    expanded.insert(expanded.end(), {reps[i], in[i]});
    out.push_back(reps[i] * in[i]);
  }
  if (failed(nc.checkShape(out, "the tiled shape")))
    return failure();
  Value x = reshape(nc, nc.in(0), interleaved);
  x = broadcastTo(nc.b, nc.loc, x, expanded);
  nc.setOutput(0, reshape(nc, x, out));
  return success();
}

LogicalResult convTrilu(NodeCtx &nc) {
  Shape in = shapeOf(nc.type(0));
  if (in.size() < 2)
    return nc.fail("Trilu needs rank >= 2");
  int64_t k = 0;
  if (nc.has(1)) {
    const HostTensor *c = nc.constant(1);
    if (!c || c->numel() != 1)
      return nc.fail("k must be a scalar known at compile time");
    k = toInt64(c->data[0]);
  }
  bool upper = nc.attrInt("upper", 1);
  int64_t rows = in[in.size() - 2], cols = in.back();
  HostTensor mask;
  mask.elemType = onnx::TensorProto::BOOL;
  mask.shape = {rows, cols};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      mask.data.push_back((upper ? j - i >= k : j - i <= k) ? 1.0 : 0.0);
  if (nc.allHost()) {
    const HostTensor *x = nc.constant(0);
    HostTensor zero;
    zero.data = {0};
    nc.setOutputHost(0, hostMap({&mask, x, &zero}, x->elemType,
                                [](auto &a) { return a[0] ? a[1] : a[2]; }));
    return success();
  }
  Operand m;
  m.type = RankedTensorType::get(mask.shape, nc.b.getI1Type());
  m.host = mask;
  Value x = nc.in(0);
  Value cond = broadcastTo(nc.b, nc.loc, nc.ic.materialize(m, nc.loc), in);
  nc.setOutput(0, SelectOp::create(nc.b, nc.loc, cond, x, splatLike(nc.b, nc.loc, x, 0)));
  return success();
}

LogicalResult convPad(NodeCtx &nc) {
  std::string mode = nc.attrString("mode", "constant");
  if (mode != "constant")
    return nc.fail("Pad mode '" + mode + "' is not supported (only constant)");
  std::optional<Shape> pads;
  if (failed(intsFrom(nc, "pads", 1, 11, pads)) || !pads)
    return nc.fail("Pad needs pads known at compile time");
  double value = nc.ic.opset < 11 ? nc.attrFloat("value", 0) : 0;
  if (nc.has(2)) {
    const HostTensor *c = nc.constant(2);
    if (!c || c->numel() != 1)
      return nc.fail("constant_value must be a scalar known at compile time");
    value = c->data[0];
  }
  int64_t rank = nc.type(0).getRank();
  Shape full(2 * rank, 0);
  std::optional<Shape> axes;
  if (nc.ic.opset >= 18 && failed(intsFrom(nc, "axes", 3, 18, axes)))
    return failure();
  Shape ax = axes.value_or(Shape{});
  if (ax.empty())
    for (int64_t i = 0; i < rank; ++i)
      ax.push_back(i);
  if (pads->size() != 2 * ax.size())
    return nc.fail("pads has the wrong length");
  for (size_t i = 0; i < ax.size(); ++i) {
    int64_t a = normAxis(ax[i], rank);
    if (a < 0 || a >= rank)
      return nc.fail("pad axis out of range");
    full[a] = (*pads)[i];
    full[a + rank] = (*pads)[i + ax.size()];
  }
  // Bounded before the shape rule adds them to the dims (no overflow there).
  Shape out(nc.type(0).getShape());
  for (int64_t d = 0; d < rank; ++d) {
    auto outside = [](int64_t p) { return p < -kMaxDim || p > kMaxDim; };
    if (outside(full[d]) || outside(full[d + rank]))
      return nc.fail("pads must lie in [-" + std::to_string(kMaxDim) + ", " +
                     std::to_string(kMaxDim) + "]");
    out[d] += full[d] + full[d + rank];
  }
  if (failed(nc.checkShape(out, "the padded shape")))
    return failure();
  auto op = nc.checked<PadOp>(1, nc.in(0), full, APFloat(value));
  if (!op)
    return failure();
  nc.setOutput(0, op);
  return success();
}

//===-- reductions and softmax --------------------------------------------===//

/// The axes and keepdims of a Reduce* node (attribute or, from `axesInputOpset`, input
/// 1); `noop` is set when the node reduces nothing (noop_with_empty_axes).
LogicalResult reduceAxes(NodeCtx &nc, int64_t axesInputOpset, Shape &ax, bool &keep,
                         bool &noop) {
  std::optional<Shape> axes;
  if (failed(intsFrom(nc, "axes", 1, axesInputOpset, axes)))
    return failure();
  int64_t rank = nc.type(0).getRank();
  keep = nc.attrInt("keepdims", 1);
  ax = axes.value_or(Shape{});
  noop = ax.empty() && nc.attrInt("noop_with_empty_axes", 0);
  if (ax.empty())
    for (int64_t i = 0; i < rank; ++i)
      ax.push_back(i);
  return normAxes(nc, ax, rank);
}

template <typename OpT> LogicalResult reduce(NodeCtx &nc, int64_t axesInputOpset) {
  Shape ax;
  bool keep, noop;
  if (failed(reduceAxes(nc, axesInputOpset, ax, keep, noop)))
    return failure();
  if (noop) {
    nc.ic.values[nc.node.output(0)] = nc.operand(0);
    return success();
  }
  auto op = nc.checked<OpT>(1, nc.in(0), ax, keep);
  if (!op)
    return failure();
  nc.setOutput(0, op);
  return success();
}

LogicalResult convReduceSum(NodeCtx &nc) { return reduce<ReduceSumOp>(nc, 13); }
LogicalResult convReduceMean(NodeCtx &nc) { return reduce<ReduceMeanOp>(nc, 18); }
LogicalResult convReduceMax(NodeCtx &nc) { return reduce<ReduceMaxOp>(nc, 18); }
LogicalResult convReduceProd(NodeCtx &nc) { return reduce<ReduceProdOp>(nc, 18); }

/// ArgMax / ArgMin: int64 indices along one axis (keepdims, select_last_index).
template <typename OpT> LogicalResult convArgReduce(NodeCtx &nc) {
  int64_t rank = nc.type(0).getRank(), axis = nc.attrInt("axis", 0);
  if (failed(checkAxis(nc, axis, rank)))
    return failure();
  auto op = nc.checked<OpT>(1, nc.in(0), axis, nc.attrInt("keepdims", 1) != 0,
                            nc.attrInt("select_last_index", 0) != 0);
  if (!op)
    return failure();
  nc.setOutput(0, op);
  return success();
}

/// TopK with K known at compile time (an attribute before opset 10, then input 1).
/// The result is always sorted, which `sorted=0` (any order) allows.
LogicalResult convTopK(NodeCtx &nc) {
  int64_t rank = nc.type(0).getRank(), axis = nc.attrInt("axis", -1);
  if (failed(checkAxis(nc, axis, rank)))
    return failure();
  int64_t k = nc.attrInt("k", -1);
  if (nc.ic.opset >= 10) {
    const HostTensor *kt = nc.constant(1);
    if (!kt || kt->numel() != 1)
      return nc.fail("K must be a single value known at compile time");
    k = toInt64(kt->data[0]);
  }
  int64_t dim = nc.type(0).getDimSize(axis);
  if (k < 0 || k > dim)
    return nc.fail("K = " + std::to_string(k) + " is outside [0, " + std::to_string(dim) +
                   "]");
  auto op = nc.checked<TopKOp>(2, nc.in(0), k, axis, nc.attrInt("largest", 1) != 0);
  if (!op)
    return failure();
  nc.setOutput(0, op.getValues());
  nc.setOutput(1, op.getIndices());
  return success();
}

LogicalResult globalPool(NodeCtx &nc, bool isMax) {
  int64_t rank = nc.type(0).getRank();
  if (rank < 3)
    return nc.fail("global pooling needs rank >= 3");
  Shape ax;
  for (int64_t i = 2; i < rank; ++i)
    ax.push_back(i);
  Value x = nc.in(0);
  Value r = isMax ? Value(ReduceMaxOp::create(nc.b, nc.loc, x, ax, true))
                  : Value(ReduceMeanOp::create(nc.b, nc.loc, x, ax, true));
  nc.setOutput(0, r);
  return success();
}
LogicalResult convGlobalAveragePool(NodeCtx &nc) { return globalPool(nc, false); }
LogicalResult convGlobalMaxPool(NodeCtx &nc) { return globalPool(nc, true); }

template <typename OpT> LogicalResult softmaxLike(NodeCtx &nc) {
  Value x = nc.in(0);
  Shape in = shapeOf(tensorTypeOf(x));
  int64_t rank = in.size();
  int64_t axis = nc.attrInt("axis", nc.ic.opset < 13 ? 1 : -1);
  if (failed(checkAxis(nc, axis, rank)))
    return failure();
  if (nc.ic.opset >= 13) {
    nc.setOutput(0, OpT::create(nc.b, nc.loc, x, axis));
    return success();
  }
  // Before opset 13 the input is coerced to 2-D at `axis`.
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < rank; ++i)
    (i < axis ? a : b) *= in[i];
  Value r = OpT::create(nc.b, nc.loc, reshape(nc, x, {a, b}), 1);
  nc.setOutput(0, reshape(nc, r, in));
  return success();
}
LogicalResult convSoftmax(NodeCtx &nc) { return softmaxLike<SoftmaxOp>(nc); }
LogicalResult convLogSoftmax(NodeCtx &nc) { return softmaxLike<LogSoftmaxOp>(nc); }

//===-- GEMM, conv, pooling, normalisation --------------------------------===//

LogicalResult convMatMul(NodeCtx &nc) {
  Value a = nc.in(0), b = nc.in(1);
  Shape sa = shapeOf(tensorTypeOf(a)), sb = shapeOf(tensorTypeOf(b));
  if (sa.empty() || sb.empty())
    return nc.fail("MatMul of a scalar");
  if (tensorTypeOf(a).getElementType() != tensorTypeOf(b).getElementType())
    return nc.fail("inputs have different element types");
  bool vecA = sa.size() == 1, vecB = sb.size() == 1;
  if (vecA) { sa.insert(sa.begin(), 1); a = reshape(nc, a, sa); }
  if (vecB) { sb.push_back(1); b = reshape(nc, b, sb); }
  int64_t m = sa[sa.size() - 2], n = sb.back();
  if (sa.back() != sb[sb.size() - 2])
    return nc.fail("contraction sizes differ: " + std::to_string(sa.back()) + " vs " +
                   std::to_string(sb[sb.size() - 2]));
  if (sa.back() == 0)
    return nc.fail("MatMul over an empty contraction (K = 0) is not supported");
  Shape batchA(sa.begin(), sa.end() - 2), batchB(sb.begin(), sb.end() - 2);
  auto batch = broadcastShapes(batchA, batchB);
  if (failed(batch))
    return nc.fail("batch dims cannot be broadcast");
  Shape outShape(batch->begin(), batch->end());
  outShape.insert(outShape.end(), {m, n});
  Value r;
  if (sb.size() == 2 && sa.size() > 2) {
    // [..., M, K] x [K, N]: one 2-D GEMM over the flattened rows, B not broadcast.
    Value flat = reshape(nc, a, {numElements(sa) / sa.back(), sa.back()});
    r = reshape(nc, MatMulOp::create(nc.b, nc.loc, flat, b, false, false), outShape);
  } else {
    Shape fa(batch->begin(), batch->end()), fb = fa;
    fa.insert(fa.end(), {m, sa.back()});
    fb.insert(fb.end(), {sb[sb.size() - 2], n});
    auto padRank = [&](const Shape &s) {
      Shape p(outShape.size() - s.size(), 1);
      p.insert(p.end(), s.begin(), s.end());
      return p;
    };
    a = broadcastTo(nc.b, nc.loc, reshape(nc, a, padRank(sa)), fa);
    b = broadcastTo(nc.b, nc.loc, reshape(nc, b, padRank(sb)), fb);
    r = MatMulOp::create(nc.b, nc.loc, a, b, false, false);
  }
  Shape final = outShape;
  if (vecB) final.pop_back();
  if (vecA) final.erase(final.end() - (vecB ? 1 : 2));
  nc.setOutput(0, reshape(nc, r, final));
  return success();
}

LogicalResult convGemm(NodeCtx &nc) {
  Value a = nc.in(0), b = nc.in(1);
  if (tensorTypeOf(a).getRank() != 2 || tensorTypeOf(b).getRank() != 2)
    return nc.fail("Gemm needs 2-D A and B");
  bool ta = nc.attrInt("transA", 0), tb = nc.attrInt("transB", 0);
  double alpha = nc.attrFloat("alpha", 1.0), beta = nc.attrFloat("beta", 1.0);
  auto mm = nc.checked<MatMulOp>(1, a, b, ta, tb);
  if (!mm)
    return failure();
  Value y = mm;
  if (alpha != 1.0)
    y = scale(nc.b, nc.loc, y, alpha);
  if (nc.has(2) && beta != 0.0) {
    Value c = nc.in(2);
    auto shape = broadcastShapes(tensorTypeOf(c).getShape(), tensorTypeOf(y).getShape());
    if (failed(shape) || ArrayRef<int64_t>(*shape) != tensorTypeOf(y).getShape())
      return nc.fail("C cannot be broadcast to the output");
    if (beta != 1.0)
      c = scale(nc.b, nc.loc, c, beta);
    y = AddOp::create(nc.b, nc.loc, y, broadcastTo(nc.b, nc.loc, c, *shape));
  }
  nc.setOutput(0, y);
  return success();
}

/// Window geometry of Conv/MaxPool/AveragePool, with auto_pad resolved.
struct Window {
  Shape kernel, strides, pads, dilations;
};

LogicalResult windowOf(NodeCtx &nc, const Shape &in, const Shape &kernel, Window &w) {
  int64_t ns = kernel.size();
  w.kernel = kernel;
  w.strides = nc.attrInts("strides").value_or(Shape(ns, 1));
  w.dilations = nc.attrInts("dilations").value_or(Shape(ns, 1));
  w.pads = nc.attrInts("pads").value_or(Shape(2 * ns, 0));
  if ((int64_t)w.strides.size() != ns || (int64_t)w.dilations.size() != ns ||
      (int64_t)w.pads.size() != 2 * ns)
    return nc.fail("strides/dilations/pads do not match the kernel rank");
  for (int64_t i = 0; i < ns; ++i)
    if (w.strides[i] < 1 || w.strides[i] > kMaxDim || w.dilations[i] < 1 ||
        w.dilations[i] > kMaxDim || kernel[i] < 1 || kernel[i] > kMaxDim)
      return nc.fail("strides, dilations and kernel sizes must lie in [1, " +
                     std::to_string(kMaxDim) + "]");
  for (int64_t p : w.pads)
    if (p < 0 || p > kMaxDim)
      return nc.fail("pads must lie in [0, " + std::to_string(kMaxDim) + "]");
  std::string autoPad = nc.attrString("auto_pad", "NOTSET");
  if (autoPad == "VALID") {
    w.pads.assign(2 * ns, 0);
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (int64_t i = 0; i < ns; ++i) {
      int64_t out = (in[i + 2] + w.strides[i] - 1) / w.strides[i];
      int64_t total = std::max<int64_t>(
          (out - 1) * w.strides[i] + (kernel[i] - 1) * w.dilations[i] + 1 - in[i + 2], 0);
      int64_t small = total / 2, big = total - small;
      w.pads[i] = autoPad == "SAME_UPPER" ? small : big;
      w.pads[i + ns] = autoPad == "SAME_UPPER" ? big : small;
    }
  } else if (autoPad != "NOTSET") {
    return nc.fail("unknown auto_pad '" + autoPad + "'");
  }
  return success();
}

LogicalResult convConv(NodeCtx &nc) {
  Shape x = shapeOf(nc.type(0)), wShape = shapeOf(nc.type(1));
  if (x.size() < 3 || x.size() > 5 || wShape.size() != x.size())
    return nc.fail("Conv needs 1-3 spatial dims");
  Window w;
  if (failed(windowOf(nc, x, Shape(wShape.begin() + 2, wShape.end()), w)))
    return failure();
  Value bias = nc.has(2) ? nc.in(2) : Value();
  auto op = nc.checked<ConvOp>(1, nc.in(0), nc.in(1), bias, w.strides, w.pads,
                               w.dilations, nc.attrInt("group", 1));
  if (!op)
    return failure();
  nc.setOutput(0, op);
  return success();
}

template <typename OpT> LogicalResult pool(NodeCtx &nc) {
  Shape x = shapeOf(nc.type(0));
  auto kernel = nc.attrInts("kernel_shape");
  if (!kernel || x.size() < 3 || x.size() > 5 || kernel->size() != x.size() - 2)
    return nc.fail("pooling needs kernel_shape and 1-3 spatial dims");
  if (nc.outputUsed(1))
    return nc.fail("the Indices output of MaxPool is not supported");
  if (nc.attrInt("storage_order", 0))
    return nc.fail("storage_order=1 is not supported");
  Window w;
  if (failed(windowOf(nc, x, *kernel, w)))
    return failure();
  if (std::is_same_v<OpT, AvgPoolOp> && llvm::any_of(w.dilations, [](int64_t d) { return d != 1; }))
    return nc.fail("AveragePool with dilations is not supported");
  auto op = nc.checked<OpT>(1, nc.in(0), w.kernel, w.strides, w.pads, w.dilations,
                            (bool)nc.attrInt("ceil_mode", 0),
                            (bool)nc.attrInt("count_include_pad", 0));
  if (!op)
    return failure();
  nc.setOutput(0, op);
  return success();
}
LogicalResult convMaxPool(NodeCtx &nc) { return pool<MaxPoolOp>(nc); }
LogicalResult convAveragePool(NodeCtx &nc) { return pool<AvgPoolOp>(nc); }

LogicalResult convBatchNorm(NodeCtx &nc) {
  double eps = nc.attrFloat("epsilon", 1e-5), momentum = nc.attrFloat("momentum", 0.9);
  bool training = nc.ic.opset >= 14 ? nc.attrInt("training_mode", 0) != 0
                                    : nc.node.output_size() > 1;
  Value x = nc.in(0);
  if (tensorTypeOf(x).getRank() < 2)
    return nc.fail("BatchNormalization needs rank >= 2");
  Value args[] = {nc.in(1), nc.in(2), nc.in(3), nc.in(4)};
  auto stat = RankedTensorType::get({tensorTypeOf(x).getDimSize(1)},
                                    tensorTypeOf(x).getElementType());
  for (Value v : args)
    if (v.getType() != stat)
      return nc.fail("scale, bias, mean and var must be tensors of type " +
                     std::to_string(stat.getDimSize(0)) + " channels");
  if (!training) {
    nc.setOutput(0, BatchNormInferOp::create(nc.b, nc.loc, x.getType(), x, args[0],
                                             args[1], args[2], args[3],
                                             nc.b.getF64FloatAttr(eps)));
    return success();
  }
  auto op = BatchNormTrainOp::create(nc.b, nc.loc, x, args[0], args[1], args[2], args[3],
                                     APFloat(eps), APFloat(momentum));
  nc.setOutput(0, op.getY());
  return success();
}

LogicalResult convLayerNorm(NodeCtx &nc) {
  Value x = nc.in(0);
  int64_t rank = tensorTypeOf(x).getRank();
  int64_t axis = nc.attrInt("axis", -1);
  if (failed(checkAxis(nc, axis, rank)))
    return failure();
  Value bias = nc.has(2) ? nc.in(2) : Value();
  Shape norm(tensorTypeOf(x).getShape().begin() + axis, tensorTypeOf(x).getShape().end());
  // ONNX broadcasts scale/bias to the normalised shape.
  Value sc = nc.in(1);
  if (failed(broadcastShapes(tensorTypeOf(sc).getShape(), norm)))
    return nc.fail("scale cannot be broadcast to the normalised shape");
  sc = broadcastTo(nc.b, nc.loc, sc, norm);
  if (bias)
    bias = broadcastTo(nc.b, nc.loc, bias, norm);
  auto op = nc.checked<LayerNormOp>(3, x, sc, bias, nc.b.getI64IntegerAttr(axis),
                                    nc.b.getF64FloatAttr(nc.attrFloat("epsilon", 1e-5)));
  if (!op)
    return failure();
  for (unsigned i = 0; i < 3; ++i)
    nc.setOutput(i, op->getResult(i));
  return success();
}

LogicalResult convDropout(NodeCtx &nc) {
  double ratio = nc.ic.opset < 12 ? nc.attrFloat("ratio", 0.5) : 0.5;
  bool training = false;
  if (nc.ic.opset >= 12) {
    if (nc.has(1)) {
      const HostTensor *r = nc.constant(1);
      if (!r || r->numel() != 1)
        return nc.fail("ratio must be a scalar known at compile time");
      // A float32 ratio is taken as the decimal it stands for (0.1f -> 0.1).
      ratio = r->elemType == onnx::TensorProto::FLOAT ? floatAsDecimal(r->data[0]) : r->data[0];
    }
    if (nc.has(2)) {
      const HostTensor *t = nc.constant(2);
      if (!t || t->numel() != 1)
        return nc.fail("training_mode must be a scalar known at compile time");
      training = t->data[0] != 0;
    }
  }
  if (nc.outputUsed(1))
    return nc.fail("the mask output of Dropout is not supported");
  if (ratio < 0 || ratio >= 1)
    return nc.fail("ratio must be in [0, 1)");
  if (!training || ratio == 0) {
    nc.ic.values[nc.node.output(0)] = nc.operand(0);
    return success();
  }
  nc.setOutput(0, DropoutOp::create(nc.b, nc.loc, nc.in(0), nc.ic.seed, APFloat(ratio),
                                    nc.ic.nextDropoutKey++));
  return success();
}

/// ONNX NegativeLogLikelihoodLoss on log-probabilities x [N, C, d...] and targets
/// [N, d...], as a one-hot selection (x where class == target), so that every part has
/// a gradient rule: loss_i = -w[t_i] * x[i, t_i], ignored targets contribute 0;
/// "mean" divides by the sum of the kept weights (PyTorch and ONNX).
Value nllLoss(NodeCtx &nc, Value x, Value target, Value weight,
              std::optional<int64_t> ignore, const std::string &reduction) {
  OpBuilder &b = nc.b;
  Location loc = nc.loc;
  auto xt = tensorTypeOf(x);
  Shape xs = shapeOf(xt), ts = shapeOf(tensorTypeOf(target));
  int64_t classes = xs[1];
  if (!tensorTypeOf(target).getElementType().isInteger(64))
    target = CastOp::create(b, loc, tensorTypeOf(target).clone(b.getI64Type()), target);
  // [N, 1, d...] targets against a [1, C, 1...] class index.
  Shape tk = ts;
  tk.insert(tk.begin() + 1, 1);
  Value t = broadcastTo(b, loc, reshape(nc, target, tk), xs);
  Shape cshape(xs.size(), 1);
  cshape[1] = classes;
  std::vector<int64_t> iota(classes);
  std::iota(iota.begin(), iota.end(), 0);
  auto ct = RankedTensorType::get(cshape, b.getI64Type());
  Value cls = broadcastTo(b, loc, ConstantOp::create(b, loc, DenseElementsAttr::get(ct, ArrayRef<int64_t>(iota))), xs);
  auto bx = xt.clone(b.getI1Type());
  Value hit = EqualOp::create(b, loc, bx, t, cls);
  Value zero = splatLike(b, loc, x, 0.0);
  SmallVector<int64_t> classAxis{1};
  Value picked = ReduceSumOp::create(b, loc, SelectOp::create(b, loc, hit, x, zero), classAxis, false);
  // Per-element weight w[t] (1 without class weights), 0 where ignored.
  Value w;
  if (weight) {
    Value wb = broadcastTo(b, loc, reshape(nc, weight, cshape), xs);
    w = ReduceSumOp::create(b, loc, SelectOp::create(b, loc, hit, wb, zero), classAxis, false);
  } else {
    w = splatLike(b, loc, picked, 1.0);
  }
  if (ignore) {
    auto bt = tensorTypeOf(target).clone(b.getI1Type());
    Value ig = EqualOp::create(b, loc, bt, target, splatLike(b, loc, target, double(*ignore)));
    w = SelectOp::create(b, loc, ig, splatLike(b, loc, w, 0.0), w);
  }
  Value perElem = NegOp::create(b, loc, MulOp::create(b, loc, picked, w));
  if (reduction == "none")
    return perElem;
  SmallVector<int64_t> all;
  for (size_t d = 0; d < ts.size(); ++d)
    all.push_back(d);
  Value total = ReduceSumOp::create(b, loc, perElem, all, false);
  if (reduction == "sum")
    return total;
  return DivOp::create(b, loc, total, ReduceSumOp::create(b, loc, w, all, false));
}

LogicalResult lossReduction(NodeCtx &nc, std::string &reduction) {
  reduction = nc.attrString("reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return nc.fail("unknown reduction '" + reduction + "'");
  return success();
}

LogicalResult lossShapes(NodeCtx &nc, size_t weightIdx) {
  Shape ls = shapeOf(nc.type(0)), ys = shapeOf(nc.type(1));
  if (ls.size() < 2 || ys.size() != ls.size() - 1 || ys[0] != ls[0])
    return nc.fail("scores must be [N,C,...] and labels [N,...]");
  if (ls[1] < 1)
    return nc.fail("scores need at least one class (C = " + std::to_string(ls[1]) + ")");
  for (size_t d = 2; d < ls.size(); ++d)
    if (ys[d - 1] != ls[d])
      return nc.fail("labels must be the scores' shape without the class dim");
  if (!isa<IntegerType>(nc.type(1).getElementType()) || nc.type(1).getElementType().isInteger(1))
    return nc.fail("labels must be integers");
  if (nc.has(weightIdx) && shapeOf(nc.type(weightIdx)) != Shape{ls[1]})
    return nc.fail("class weights must be a [C] tensor");
  return success();
}

LogicalResult convNegativeLogLikelihoodLoss(NodeCtx &nc) {
  std::string reduction;
  if (failed(lossReduction(nc, reduction)) || failed(lossShapes(nc, 2)))
    return failure();
  std::optional<int64_t> ignore;
  if (nc.attr("ignore_index"))
    ignore = nc.attrInt("ignore_index", 0);
  nc.setOutput(0, nllLoss(nc, nc.in(0), nc.in(1), nc.has(2) ? nc.in(2) : Value(), ignore,
                          reduction));
  return success();
}

LogicalResult convSoftmaxCrossEntropy(NodeCtx &nc) {
  std::string reduction;
  if (failed(lossReduction(nc, reduction)) || failed(lossShapes(nc, 2)))
    return failure();
  Value logits = nc.in(0), labels = nc.in(1);
  Shape ls = shapeOf(tensorTypeOf(logits)), ys = shapeOf(tensorTypeOf(labels));
  std::optional<int64_t> ignore;
  if (nc.attr("ignore_index"))
    ignore = nc.attrInt("ignore_index", 0);
  // Weights, per-element losses or the log_prob output: log_softmax + NLL.
  if (nc.has(2) || reduction == "none" || nc.outputUsed(1)) {
    Value logp = LogSoftmaxOp::create(nc.b, nc.loc, logits, 1);
    nc.setOutput(0, nllLoss(nc, logp, labels, nc.has(2) ? nc.in(2) : Value(), ignore, reduction));
    nc.setOutput(1, logp);
    return success();
  }
  // The common case: one fused op over [rows, C].
  if (ls.size() > 2) {
    // [N,C,d...] -> [N,d...,C] -> [N*d..., C]
    Shape perm{0};
    for (size_t i = 2; i < ls.size(); ++i)
      perm.push_back(i);
    perm.push_back(1);
    logits = TransposeOp::create(nc.b, nc.loc, logits, perm);
    logits = reshape(nc, logits, {numElements(ls) / ls[1], ls[1]});
    labels = reshape(nc, labels, {numElements(ys)});
  }
  if (!tensorTypeOf(labels).getElementType().isInteger(64))
    labels = CastOp::create(nc.b, nc.loc, tensorTypeOf(labels).clone(nc.b.getI64Type()), labels);
  IntegerAttr ignoreAttr = ignore ? nc.b.getI64IntegerAttr(*ignore) : IntegerAttr();
  nc.setOutput(0, SoftmaxCrossEntropyOp::create(nc.b, nc.loc, logits, labels, ignoreAttr,
                                                nc.b.getStringAttr(reduction)));
  return success();
}

//===-- ops that exporters write, as compositions of core ops ---------------===//
//
// Activations, predicates and rounding that PyTorch 2.x and torchvision exports use.
// Each becomes a few core ops whose gradient rules (and kernels, on every target)
// exist already; the compositions are written so that no branch overflows where
// the other is selected (exp of a clamped argument), since a select's gradient
// multiplies the unselected branch by zero and inf * 0 would poison it.

RankedTensorType boolLike(NodeCtx &nc, Value v) {
  return tensorTypeOf(v).clone(nc.b.getI1Type());
}

/// ONNX element type of an MLIR element type (the inverse of elementTypeOf).
int32_t onnxTypeOf(Type t) {
  if (t.isF32()) return onnx::TensorProto::FLOAT;
  if (t.isF64()) return onnx::TensorProto::DOUBLE;
  if (t.isF16()) return onnx::TensorProto::FLOAT16;
  if (t.isBF16()) return onnx::TensorProto::BFLOAT16;
  if (t.isInteger(64)) return onnx::TensorProto::INT64;
  if (t.isInteger(32)) return onnx::TensorProto::INT32;
  if (t.isInteger(1)) return onnx::TensorProto::BOOL;
  return onnx::TensorProto::UNDEFINED;
}

/// Float input 0, or a failure naming the op's float-only contract.
LogicalResult floatInput(NodeCtx &nc, Value &x) {
  x = nc.in(0);
  if (!isa<FloatType>(tensorTypeOf(x).getElementType()))
    return nc.fail("input must be a float tensor");
  return success();
}

/// exp(min(x, 0)) - 1: the negative branch of ELU-like ops, finite for every x.
Value expm1OfNegativePart(NodeCtx &nc, Value x) {
  Value e = ExpOp::create(nc.b, nc.loc, MinOp::create(nc.b, nc.loc, x, splatLike(nc.b, nc.loc, x, 0)));
  return SubOp::create(nc.b, nc.loc, e, splatLike(nc.b, nc.loc, x, 1.0));
}

/// x > 0 ? x : neg (PyTorch's convention at 0: the negative branch's slope).
Value positiveOr(NodeCtx &nc, Value x, Value neg) {
  Value pos = GreaterOp::create(nc.b, nc.loc, boolLike(nc, x), x, splatLike(nc.b, nc.loc, x, 0));
  return SelectOp::create(nc.b, nc.loc, pos, x, neg);
}

LogicalResult convLeakyRelu(NodeCtx &nc) {
  Value x;
  if (failed(floatInput(nc, x)))
    return failure();
  nc.setOutput(0, positiveOr(nc, x, scale(nc.b, nc.loc, x, nc.attrFloat("alpha", 0.01))));
  return success();
}

LogicalResult convElu(NodeCtx &nc) {
  Value x;
  if (failed(floatInput(nc, x)))
    return failure();
  Value neg = scale(nc.b, nc.loc, expm1OfNegativePart(nc, x), nc.attrFloat("alpha", 1.0));
  nc.setOutput(0, positiveOr(nc, x, neg));
  return success();
}

LogicalResult convSelu(NodeCtx &nc) {
  Value x;
  if (failed(floatInput(nc, x)))
    return failure();
  // ONNX's defaults are float32 roundings of SELU's constants; use the exact ones
  // PyTorch uses when the attributes are absent.
  double alpha = nc.attrFloat("alpha", 1.6732632423543772848170429916717);
  double gamma = nc.attrFloat("gamma", 1.0507009873554804934193349852946);
  if (!nc.attr("alpha")) alpha = 1.6732632423543772848170429916717;
  if (!nc.attr("gamma")) gamma = 1.0507009873554804934193349852946;
  Value neg = scale(nc.b, nc.loc, expm1OfNegativePart(nc, x), alpha);
  nc.setOutput(0, scale(nc.b, nc.loc, positiveOr(nc, x, neg), gamma));
  return success();
}

/// log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|)), finite for every x.
Value softplus(NodeCtx &nc, Value x) {
  Value relu = ReluOp::create(nc.b, nc.loc, x);
  Value e = ExpOp::create(nc.b, nc.loc, NegOp::create(nc.b, nc.loc, AbsOp::create(nc.b, nc.loc, x)));
  Value l = LogOp::create(nc.b, nc.loc, AddOp::create(nc.b, nc.loc, splatLike(nc.b, nc.loc, x, 1.0), e));
  return AddOp::create(nc.b, nc.loc, relu, l);
}

LogicalResult convSoftplus(NodeCtx &nc) {
  Value x;
  if (failed(floatInput(nc, x)))
    return failure();
  nc.setOutput(0, softplus(nc, x));
  return success();
}

LogicalResult convMish(NodeCtx &nc) {
  Value x;
  if (failed(floatInput(nc, x)))
    return failure();
  nc.setOutput(0, MulOp::create(nc.b, nc.loc, x, TanhOp::create(nc.b, nc.loc, softplus(nc, x))));
  return success();
}

/// clip(alpha * x + beta, 0, 1).
Value hardSigmoid(NodeCtx &nc, Value x, double alpha, double beta) {
  Value lin = AddOp::create(nc.b, nc.loc, scale(nc.b, nc.loc, x, alpha), splatLike(nc.b, nc.loc, x, beta));
  return ClipOp::create(nc.b, nc.loc, lin, nc.b.getF64FloatAttr(0.0), nc.b.getF64FloatAttr(1.0));
}

LogicalResult convHardSigmoid(NodeCtx &nc) {
  Value x;
  if (failed(floatInput(nc, x)))
    return failure();
  nc.setOutput(0, hardSigmoid(nc, x, nc.attrFloat("alpha", 0.2), nc.attrFloat("beta", 0.5)));
  return success();
}

LogicalResult convHardSwish(NodeCtx &nc) {
  Value x;
  if (failed(floatInput(nc, x)))
    return failure();
  nc.setOutput(0, MulOp::create(nc.b, nc.loc, x, hardSigmoid(nc, x, 1.0 / 6.0, 0.5)));
  return success();
}

LogicalResult convPRelu(NodeCtx &nc) {
  Value x;
  if (failed(floatInput(nc, x)))
    return failure();
  Value slope = nc.in(1);
  // The slope broadcasts to x (unidirectionally); its gradient sums back.
  auto shape = broadcastShapes(tensorTypeOf(slope).getShape(), tensorTypeOf(x).getShape());
  if (failed(shape) || llvm::ArrayRef<int64_t>(*shape) != tensorTypeOf(x).getShape())
    return nc.fail("slope cannot be broadcast to the input's shape");
  if (tensorTypeOf(slope).getElementType() != tensorTypeOf(x).getElementType())
    return nc.fail("slope and input have different element types");
  slope = broadcastTo(nc.b, nc.loc, slope, tensorTypeOf(x).getShape());
  nc.setOutput(0, positiveOr(nc, x, MulOp::create(nc.b, nc.loc, x, slope)));
  return success();
}

LogicalResult convSign(NodeCtx &nc) {
  if (nc.allHost()) {
    const HostTensor &x = *nc.constant(0);
    nc.setOutputHost(0, hostMap({&x}, x.elemType, [](auto &a) {
      return double((a[0] > 0) - (a[0] < 0));
    }));
    return success();
  }
  Value x = nc.in(0), zero = splatLike(nc.b, nc.loc, x, 0);
  Value pos = GreaterOp::create(nc.b, nc.loc, boolLike(nc, x), x, zero);
  Value neg = LessOp::create(nc.b, nc.loc, boolLike(nc, x), x, zero);
  Value r = SelectOp::create(nc.b, nc.loc, neg, splatLike(nc.b, nc.loc, x, -1.0), zero);
  nc.setOutput(0, SelectOp::create(nc.b, nc.loc, pos, splatLike(nc.b, nc.loc, x, 1.0), r));
  return success();
}

template <typename OpT> LogicalResult rounding(NodeCtx &nc, double (*f)(double)) {
  if (nc.allHost())
    return unaryFoldable<OpT>(nc, f);
  Value x;
  if (failed(floatInput(nc, x)))
    return failure();
  nc.setOutput(0, OpT::create(nc.b, nc.loc, x));
  return success();
}
LogicalResult convFloor(NodeCtx &nc) { return rounding<FloorOp>(nc, [](double a) { return std::floor(a); }); }
LogicalResult convCeil(NodeCtx &nc) { return rounding<CeilOp>(nc, [](double a) { return std::ceil(a); }); }
LogicalResult convRound(NodeCtx &nc) { return rounding<RoundOp>(nc, [](double a) { return std::nearbyint(a); }); }

LogicalResult convIsNaN(NodeCtx &nc) {
  if (nc.allHost()) {
    const HostTensor &x = *nc.constant(0);
    nc.setOutputHost(0, hostMap({&x}, onnx::TensorProto::BOOL,
                                [](auto &a) { return std::isnan(a[0]) ? 1.0 : 0.0; }));
    return success();
  }
  Value x;
  if (failed(floatInput(nc, x)))
    return failure();
  // NaN is the only value that is not equal to itself.
  Value eq = EqualOp::create(nc.b, nc.loc, boolLike(nc, x), x, x);
  nc.setOutput(0, NotOp::create(nc.b, nc.loc, eq));
  return success();
}

LogicalResult convIsInf(NodeCtx &nc) {
  bool pos = nc.attrInt("detect_positive", 1) != 0, neg = nc.attrInt("detect_negative", 1) != 0;
  if (nc.allHost()) {
    const HostTensor &x = *nc.constant(0);
    nc.setOutputHost(0, hostMap({&x}, onnx::TensorProto::BOOL, [=](auto &a) {
      return std::isinf(a[0]) && ((a[0] > 0 && pos) || (a[0] < 0 && neg)) ? 1.0 : 0.0;
    }));
    return success();
  }
  Value x;
  if (failed(floatInput(nc, x)))
    return failure();
  // Beyond the largest finite value of the type means infinite (NaN compares false).
  auto ft = cast<FloatType>(tensorTypeOf(x).getElementType());
  double largest = APFloat::getLargest(ft.getFloatSemantics()).convertToDouble();
  Value big = splatLike(nc.b, nc.loc, x, largest);
  Value r;
  if (pos && neg)
    r = GreaterOp::create(nc.b, nc.loc, boolLike(nc, x), AbsOp::create(nc.b, nc.loc, x), big);
  else if (pos)
    r = GreaterOp::create(nc.b, nc.loc, boolLike(nc, x), x, big);
  else if (neg)
    r = LessOp::create(nc.b, nc.loc, boolLike(nc, x), x, splatLike(nc.b, nc.loc, x, -largest));
  else
    r = splat(nc.b, nc.loc, boolLike(nc, x), 0);
  nc.setOutput(0, r);
  return success();
}

LogicalResult convCastLike(NodeCtx &nc) {
  // Only the type of `target_type` matters; it is never read at run time.
  Type elt = nc.type(1).getElementType();
  return castInput0(nc, nc.constant(1) ? nc.constant(1)->elemType : onnxTypeOf(elt), elt);
}

/// Comparisons and logic without an op of their own, composed so that NaN compares
/// false as in IEEE (a >= b is a > b or a == b, not !(a < b)).
template <typename CmpOp>
LogicalResult orEqual(NodeCtx &nc, HostFn f) {
  if (nc.allHost())
    return binary<CmpOp, true>(nc, f);
  std::vector<Value> v{nc.in(0), nc.in(1)};
  if (failed(broadcastAll(nc, v)))
    return failure();
  if (tensorTypeOf(v[0]).getElementType() != tensorTypeOf(v[1]).getElementType())
    return nc.fail("inputs have different element types");
  auto bt = boolLike(nc, v[0]);
  Value strict = CmpOp::create(nc.b, nc.loc, bt, v[0], v[1]);
  Value eq = EqualOp::create(nc.b, nc.loc, bt, v[0], v[1]);
  // a || b == !(!a && !b)
  Value both = AndOp::create(nc.b, nc.loc, bt, NotOp::create(nc.b, nc.loc, strict),
                             NotOp::create(nc.b, nc.loc, eq));
  nc.setOutput(0, NotOp::create(nc.b, nc.loc, both));
  return success();
}
LogicalResult convGreaterOrEqual(NodeCtx &nc) {
  return orEqual<GreaterOp>(nc, [](double a, double b) { return a >= b ? 1.0 : 0.0; });
}
LogicalResult convLessOrEqual(NodeCtx &nc) {
  return orEqual<LessOp>(nc, [](double a, double b) { return a <= b ? 1.0 : 0.0; });
}

LogicalResult convOr(NodeCtx &nc) {
  if (nc.allHost())
    return binary<AndOp, true>(nc, [](double a, double b) { return a || b ? 1.0 : 0.0; });
  std::vector<Value> v{nc.in(0), nc.in(1)};
  if (failed(broadcastAll(nc, v)))
    return failure();
  auto bt = boolLike(nc, v[0]);
  Value both = AndOp::create(nc.b, nc.loc, bt, NotOp::create(nc.b, nc.loc, v[0]),
                             NotOp::create(nc.b, nc.loc, v[1]));
  nc.setOutput(0, NotOp::create(nc.b, nc.loc, both));
  return success();
}

LogicalResult convXor(NodeCtx &nc) {
  if (nc.allHost())
    return binary<EqualOp, true>(nc, [](double a, double b) { return (a != 0) != (b != 0) ? 1.0 : 0.0; });
  std::vector<Value> v{nc.in(0), nc.in(1)};
  if (failed(broadcastAll(nc, v)))
    return failure();
  Value eq = EqualOp::create(nc.b, nc.loc, boolLike(nc, v[0]), v[0], v[1]);
  nc.setOutput(0, NotOp::create(nc.b, nc.loc, eq));
  return success();
}

//===-- index ops -----------------------------------------------------------===//
//
// Exporters compute the indices of GatherElements / GatherND from shapes and masks,
// so they are usually import-time constants. Then both ops are a `gather` of the
// flattened data at precomputed flat offsets: one kernel on every target, and
// `gather`'s gradient rule (a scatter-add) trains through them. GatherElements with
// indices computed at run time is `gather_elements` (its gradient a scatter_elements
// add); GatherND's run-time indices are refused with the reason.

} // namespace

Shape stridesOf(const Shape &s) {
  Shape st(s.size(), 1);
  for (int i = (int)s.size() - 2; i >= 0; --i)
    st[i] = st[i + 1] * s[i + 1];
  return st;
}

Value hostConstant(NodeCtx &nc, HostTensor t, Type elementType) {
  Operand o;
  o.type = RankedTensorType::get(t.shape, elementType);
  o.host = std::move(t);
  return nc.ic.materialize(o, nc.loc);
}

LogicalResult gatherFlat(NodeCtx &nc, const std::vector<int64_t> &flat, const Shape &shape) {
  if (const HostTensor *x = nc.constant(0); x && !nc.operand(0).isTrainableCandidate()) {
    nc.setOutputHost(0, hostTake(*x, shape, flat));
    return success();
  }
  Value x = nc.in(0);
  Value flatX = reshape(nc, x, {numElements(shapeOf(tensorTypeOf(x)))});
  HostTensor idx;
  idx.elemType = onnx::TensorProto::INT64;
  idx.shape = shape;
  idx.data.assign(flat.begin(), flat.end());
  Value ixv = hostConstant(nc, std::move(idx), nc.b.getI64Type());
  auto op = nc.checked<GatherOp>(1, flatX, ixv, int64_t(0));
  if (!op)
    return failure();
  nc.setOutput(0, op);
  return success();
}

namespace {

/// Input i as int64 indices (ONNX allows int32 ones too).
Value indicesI64(NodeCtx &nc, size_t i) {
  Value v = nc.in(i);
  if (!tensorTypeOf(v).getElementType().isInteger(64))
    v = CastOp::create(nc.b, nc.loc, tensorTypeOf(v).clone(nc.b.getI64Type()), v);
  return v;
}

/// Flat offsets of GatherElements(data, indices, axis), or failure.
LogicalResult gatherElementsOffsets(NodeCtx &nc, const Shape &data, const HostTensor &ix,
                                    int64_t axis, std::vector<int64_t> &flat) {
  if (ix.shape.size() != data.size())
    return nc.fail("indices must have the rank of the data");
  Shape ds = stridesOf(data), is = stridesOf(ix.shape);
  for (int64_t k = 0; k < ix.numel(); ++k) {
    int64_t off = 0;
    for (size_t d = 0; d < data.size(); ++d) {
      int64_t c = (k / is[d]) % ix.shape[d];
      if ((int64_t)d == axis) {
        c = toInt64(ix.data[k]);
        if (c < -data[d] || c >= data[d])
          return nc.fail("index " + std::to_string(c) + " out of range");
        c = c < 0 ? c + data[d] : c;
      } else if (c >= data[d]) {
        return nc.fail("indices are larger than the data outside the axis");
      }
      off += c * ds[d];
    }
    flat.push_back(off);
  }
  return success();
}

LogicalResult convGatherElements(NodeCtx &nc) {
  Shape data = shapeOf(nc.type(0));
  int64_t rank = data.size(), axis = nc.attrInt("axis", 0);
  if (failed(checkAxis(nc, axis, rank)))
    return failure();
  const HostTensor *ix = nc.constant(1);
  if (!ix) {
    auto op = nc.checked<GatherElementsOp>(1, nc.in(0), indicesI64(nc, 1), axis);
    if (!op)
      return failure();
    nc.setOutput(0, op);
    return success();
  }
  std::vector<int64_t> flat;
  if (failed(gatherElementsOffsets(nc, data, *ix, axis, flat)))
    return failure();
  return gatherFlat(nc, flat, ix->shape);
}

/// ScatterElements (and its opset 9-10 name, Scatter) with run-time indices.
LogicalResult convScatterElements(NodeCtx &nc) {
  Shape data = shapeOf(nc.type(0)), ix = shapeOf(nc.type(1)), upd = shapeOf(nc.type(2));
  int64_t rank = data.size(), axis = nc.attrInt("axis", 0);
  if (failed(checkAxis(nc, axis, rank)))
    return failure();
  std::string red = nc.attrString("reduction", "none");
  if (!llvm::is_contained({"none", "add", "mul", "max", "min"}, red))
    return nc.fail("unknown reduction '" + red + "'");
  if ((int64_t)ix.size() != rank || upd != ix)
    return nc.fail("indices and updates must have the data's rank and one shape");
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && ix[d] > data[d])
      return nc.fail("indices are larger than the data outside the axis");
  if (nc.type(2).getElementType() != nc.type(0).getElementType())
    return nc.fail("updates and data have different element types");
  nc.setOutput(0, ScatterElementsOp::create(nc.b, nc.loc, nc.type(0), nc.in(0),
                                            indicesI64(nc, 1), nc.in(2), axis, red));
  return success();
}

LogicalResult convGatherND(NodeCtx &nc) {
  Shape data = shapeOf(nc.type(0));
  int64_t b = nc.attrInt("batch_dims", 0);
  const HostTensor *ix = nc.constant(1);
  if (!ix)
    return nc.fail("indices computed at run time are not supported (only indices known at "
                   "compile time, as exporters write them)");
  if (ix->shape.empty())
    return nc.fail("indices must have rank >= 1");
  int64_t q = ix->shape.size(), last = ix->shape.back(), r = data.size();
  if (b < 0 || b >= std::min<int64_t>(q, r) || last < 1 || b + last > r)
    return nc.fail("indices do not fit the data (batch_dims " + std::to_string(b) + ")");
  for (int64_t d = 0; d < b; ++d)
    if (ix->shape[d] != data[d])
      return nc.fail("batch dims of indices and data differ");
  // out = indices.shape[:-1] + data.shape[b + last:]
  Shape out(ix->shape.begin(), ix->shape.end() - 1);
  Shape tail(data.begin() + b + last, data.end());
  out.insert(out.end(), tail.begin(), tail.end());
  int64_t inner = numElements(tail);
  Shape ds = stridesOf(data);
  Shape bs(data.begin(), data.begin() + b);
  Shape bst = stridesOf(bs);
  int64_t tuples = ix->numel() / last;
  int64_t perBatch = tuples / std::max<int64_t>(1, numElements(bs));
  std::vector<int64_t> flat;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t batch = perBatch ? t / perBatch : 0, off = 0;
    for (int64_t d = 0; d < b; ++d)
      off += ((batch / bst[d]) % bs[d]) * ds[d];
    for (int64_t k = 0; k < last; ++k) {
      int64_t c = toInt64(ix->data[t * last + k]), dim = data[b + k];
      if (c < -dim || c >= dim)
        return nc.fail("index " + std::to_string(c) + " out of range");
      off += (c < 0 ? c + dim : c) * ds[b + k];
    }
    for (int64_t i = 0; i < inner; ++i)
      flat.push_back(off + i);
  }
  return gatherFlat(nc, flat, out);
}

/// CumSum: folded on the host when its input is known at import time (masks and
/// positions, as exporters write them), else `ortc.cumsum`; the axis must be known.
LogicalResult convCumSum(NodeCtx &nc) {
  const HostTensor *ax = nc.constant(1);
  if (!ax || ax->numel() != 1)
    return nc.fail("axis must be a scalar known at compile time");
  int64_t rank = nc.type(0).getRank(), axis = toInt64(ax->data[0]);
  if (failed(checkAxis(nc, axis, rank)))
    return failure();
  bool exclusive = nc.attrInt("exclusive", 0), reverse = nc.attrInt("reverse", 0);
  if (!nc.allHost()) {
    nc.setOutput(0, CumSumOp::create(nc.b, nc.loc, nc.in(0), axis, exclusive, reverse));
    return success();
  }
  const HostTensor &x = *nc.constant(0);
  HostTensor out = x;
  int64_t n = x.shape[axis], inner = stridesOf(x.shape)[axis];
  int64_t outer = x.numel() / std::max<int64_t>(1, n * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double acc = 0;
      for (int64_t k = 0; k < n; ++k) {
        int64_t j = reverse ? n - 1 - k : k;
        int64_t at = (o * n + j) * inner + i;
        double v = x.data[at];
        out.data[at] = exclusive ? acc : acc + v;
        acc += v;
      }
    }
  nc.setOutputHost(0, out);
  return success();
}

LogicalResult convMod(NodeCtx &nc) {
  bool fmod = nc.attrInt("fmod", 0);
  if (nc.allHost()) {
    const HostTensor *a = nc.constant(0), *b = nc.constant(1);
    if (failed(checkHostBroadcast(nc, {a, b})))
      return failure();
    if (!a->isFloat() && llvm::any_of(b->data, [](double d) { return d == 0; }))
      return nc.fail("integer modulo by zero");
    nc.setOutputHost(0, hostMap({a, b}, a->elemType, [fmod](auto &v) {
      double r = std::fmod(v[0], v[1]);
      // fmod=0: the sign of the divisor (Python's %).
      if (!fmod && r != 0 && ((r < 0) != (v[1] < 0)))
        r += v[1];
      return r;
    }));
    return success();
  }
  std::vector<Value> v{nc.in(0), nc.in(1)};
  if (failed(broadcastAll(nc, v)))
    return failure();
  if (tensorTypeOf(v[0]).getElementType() != tensorTypeOf(v[1]).getElementType())
    return nc.fail("inputs have different element types");
  if (!isa<FloatType>(tensorTypeOf(v[0]).getElementType())) {
    nc.setOutput(0, ModOp::create(nc.b, nc.loc, v[0], v[1], fmod));
    return success();
  }
  // a - q * b with q = floor(a / b) (fmod=0) or trunc(a / b) (fmod=1).
  Value q = DivOp::create(nc.b, nc.loc, v[0], v[1]);
  Value fl = FloorOp::create(nc.b, nc.loc, q);
  if (fmod) {
    Value neg = LessOp::create(nc.b, nc.loc, boolLike(nc, q), q, splatLike(nc.b, nc.loc, q, 0));
    fl = SelectOp::create(nc.b, nc.loc, neg, CeilOp::create(nc.b, nc.loc, q), fl);
  }
  nc.setOutput(0, SubOp::create(nc.b, nc.loc, v[0], MulOp::create(nc.b, nc.loc, fl, v[1])));
  return success();
}

//===-- sequences (import time only) ---------------------------------------===//

LogicalResult convSplitToSequence(NodeCtx &nc) {
  Shape in = shapeOf(nc.type(0));
  int64_t rank = in.size(), axis = nc.attrInt("axis", 0);
  if (failed(checkAxis(nc, axis, rank)))
    return failure();
  bool keep = nc.attrInt("keepdims", 1) != 0;
  Shape sizes;
  if (!nc.has(1)) {
    sizes.assign(in[axis], 1);
  } else {
    const HostTensor *sp = nc.constant(1);
    if (!sp)
      return nc.fail("split must be known at compile time");
    keep = true; // keepdims only applies without `split`
    if (sp->shape.empty()) {
      int64_t chunk = toInt64(sp->data[0]);
      if (chunk <= 0)
        return nc.fail("split must be positive");
      for (int64_t left = in[axis]; left > 0; left -= chunk)
        sizes.push_back(std::min(chunk, left));
    } else {
      sizes = sp->ints();
    }
  }
  if (std::accumulate(sizes.begin(), sizes.end(), int64_t(0)) != in[axis])
    return nc.fail("split sizes do not add up to the axis size");
  auto seq = std::make_shared<std::vector<Operand>>();
  int64_t offset = 0;
  for (int64_t n : sizes) {
    Shape starts(rank, 0), sz = in, steps(rank, 1);
    starts[axis] = offset;
    sz[axis] = n;
    offset += n;
    Operand piece;
    Shape outShape = sz;
    if (!keep)
      outShape.erase(outShape.begin() + axis);
    if (const HostTensor *x = nc.constant(0); x && !nc.operand(0).isTrainableCandidate()) {
      piece.host = hostTake(*x, outShape, sliceIndices(x->shape, starts, sz, steps));
      piece.type = RankedTensorType::get(outShape, nc.type(0).getElementType());
    } else {
      auto op = nc.checked<SliceOp>(1, nc.in(0), starts, sz, steps);
      if (!op)
        return failure();
      piece.value = reshape(nc, op, outShape);
      piece.type = tensorTypeOf(piece.value);
    }
    seq->push_back(std::move(piece));
  }
  Operand out;
  out.sequence = seq;
  nc.ic.values[nc.node.output(0)] = out;
  return success();
}

LogicalResult convSequenceAt(NodeCtx &nc) {
  Operand &s = nc.operand(0);
  if (!s.sequence)
    return nc.fail("input 0 is not a sequence ortc knows at compile time");
  const HostTensor *pos = nc.constant(1);
  if (!pos || pos->numel() != 1)
    return nc.fail("position must be a scalar known at compile time");
  int64_t n = s.sequence->size(), i = toInt64(pos->data[0]);
  if (i < -n || i >= n)
    return nc.fail("position " + std::to_string(i) + " out of range");
  nc.ic.values[nc.node.output(0)] = (*s.sequence)[i < 0 ? i + n : i];
  return success();
}

LogicalResult convSin(NodeCtx &nc) { return unaryFoldable<SinOp>(nc, [](double a) { return std::sin(a); }); }
LogicalResult convCos(NodeCtx &nc) { return unaryFoldable<CosOp>(nc, [](double a) { return std::cos(a); }); }

//===-- random ops through ortc's counter-based RNG -------------------------===//
//
// Training-mode exports write dropout by hand (RandomUniformLike + Less + Where) and
// noise as RandomNormal(Like) / Bernoulli. All draw from `random_uniform`, the
// generator Dropout uses, keyed by (step seed, op key, element); the ONNX `seed`
// attribute is not used (the run's --seed is).

/// The element type a random op produces: `dtype` if given, else `dflt`.
LogicalResult randomType(NodeCtx &nc, Type dflt, Type &elt) {
  elt = dflt;
  if (nc.attr("dtype")) {
    int32_t to = nc.attrInt("dtype", 0);
    elt = elementTypeOf(nc.ic.ctx, to);
    if (!elt)
      return nc.fail("dtype " + onnxTypeName(to) + " is not supported");
  }
  if (!elt || !isa<FloatType>(elt))
    return nc.fail("random values must be floats");
  return success();
}

Value uniform(NodeCtx &nc, RankedTensorType type, double low, double high) {
  return RandomUniformOp::create(nc.b, nc.loc, type, nc.ic.seed, nc.b.getF64FloatAttr(low),
                                 nc.b.getF64FloatAttr(high),
                                 nc.b.getI64IntegerAttr(nc.ic.nextDropoutKey++));
}

/// The shape of a random op: input 0's (the *Like forms) or the `shape` attribute.
LogicalResult randomShape(NodeCtx &nc, bool like, Shape &shape, Type &dflt) {
  if (like) {
    shape = shapeOf(nc.type(0));
    dflt = nc.type(0).getElementType();
    return success();
  }
  auto s = nc.attrInts("shape");
  if (!s)
    return nc.fail("needs a shape attribute");
  shape = *s;
  dflt = nc.b.getF32Type();
  return success();
}

template <bool Like> LogicalResult convRandomUniform(NodeCtx &nc) {
  Shape shape;
  Type dflt, elt;
  if (failed(randomShape(nc, Like, shape, dflt)) || failed(randomType(nc, dflt, elt)))
    return failure();
  nc.setOutput(0, uniform(nc, RankedTensorType::get(shape, elt), nc.attrFloat("low", 0.0),
                          nc.attrFloat("high", 1.0)));
  return success();
}

/// Box-Muller: mean + scale * sqrt(-2 log(1 - u1)) * cos(2 pi u2).
template <bool Like> LogicalResult convRandomNormal(NodeCtx &nc) {
  Shape shape;
  Type dflt, elt;
  if (failed(randomShape(nc, Like, shape, dflt)) || failed(randomType(nc, dflt, elt)))
    return failure();
  auto type = RankedTensorType::get(shape, elt);
  OpBuilder &b = nc.b;
  Location loc = nc.loc;
  // 1 - u1 is in (0, 1]: the log is finite.
  Value u1 = uniform(nc, type, 1.0, 0.0), u2 = uniform(nc, type, 0.0, 2.0 * M_PI);
  Value r = SqrtOp::create(b, loc, scale(b, loc, LogOp::create(b, loc, u1), -2.0));
  Value z = MulOp::create(b, loc, r, CosOp::create(b, loc, u2));
  Value out = AddOp::create(b, loc, scale(b, loc, z, nc.attrFloat("scale", 1.0)),
                            splatLike(b, loc, z, nc.attrFloat("mean", 0.0)));
  nc.setOutput(0, out);
  return success();
}

LogicalResult convBernoulli(NodeCtx &nc) {
  Value p = nc.in(0);
  auto pt = tensorTypeOf(p);
  if (!isa<FloatType>(pt.getElementType()))
    return nc.fail("probabilities must be floats");
  Type elt = pt.getElementType();
  if (nc.attr("dtype")) {
    elt = elementTypeOf(nc.ic.ctx, nc.attrInt("dtype", 0));
    if (!elt)
      return nc.fail("dtype is not supported");
  }
  Value u = uniform(nc, pt, 0.0, 1.0);
  Value hit = LessOp::create(nc.b, nc.loc, boolLike(nc, u), u, p);
  nc.setOutput(0, CastOp::create(nc.b, nc.loc, pt.clone(elt), hit));
  return success();
}

//===-- reductions and normalisations composed of core ops ------------------===//

/// ReduceMin, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp as
/// `pre` (elementwise), a sum or max, and `post`; their gradients come from the parts.
enum class ReduceForm { Min, L1, L2, SumSquare, LogSum, LogSumExp };
template <ReduceForm F> LogicalResult composedReduce(NodeCtx &nc) {
  Shape ax;
  bool keep, noop;
  if (failed(reduceAxes(nc, 18, ax, keep, noop)))
    return failure();
  Value x = nc.in(0);
  if (!isa<FloatType>(tensorTypeOf(x).getElementType()) && F != ReduceForm::Min)
    return nc.fail("input must be a float tensor");
  OpBuilder &b = nc.b;
  Location loc = nc.loc;
  if (noop) {
    // The reduction of nothing: the elementwise part alone.
    Value v = x; // Min and LogSumExp of one element
    if (F == ReduceForm::L1 || F == ReduceForm::L2)
      v = AbsOp::create(b, loc, x);
    else if (F == ReduceForm::SumSquare)
      v = MulOp::create(b, loc, x, x);
    else if (F == ReduceForm::LogSum)
      v = LogOp::create(b, loc, x);
    nc.setOutput(0, v);
    return success();
  }
  auto sum = [&](Value v, bool k) { return ReduceSumOp::create(b, loc, v, ax, k).getResult(); };
  Value r;
  switch (F) {
  case ReduceForm::Min:
    // min = -max(-x); for booleans all = !any(!x).
    if (tensorTypeOf(x).getElementType().isInteger(1))
      r = NotOp::create(b, loc, ReduceMaxOp::create(b, loc, NotOp::create(b, loc, x), ax, keep));
    else
      r = NegOp::create(b, loc, ReduceMaxOp::create(b, loc, NegOp::create(b, loc, x), ax, keep));
    break;
  case ReduceForm::L1:
    r = sum(AbsOp::create(b, loc, x), keep);
    break;
  case ReduceForm::L2:
    r = SqrtOp::create(b, loc, sum(MulOp::create(b, loc, x, x), keep));
    break;
  case ReduceForm::SumSquare:
    r = sum(MulOp::create(b, loc, x, x), keep);
    break;
  case ReduceForm::LogSum:
    r = LogOp::create(b, loc, sum(x, keep));
    break;
  case ReduceForm::LogSumExp: {
    // max + log(sum(exp(x - max))): finite for large x; the max's gradient cancels.
    Value m = ReduceMaxOp::create(b, loc, x, ax, true);
    Value e = ExpOp::create(b, loc, SubOp::create(b, loc, x, broadcastTo(b, loc, m, shapeOf(tensorTypeOf(x)))));
    r = AddOp::create(b, loc, m, LogOp::create(b, loc, sum(e, true)));
    if (!keep) {
      Shape out;
      for (int64_t d = 0; d < tensorTypeOf(x).getRank(); ++d)
        if (!llvm::is_contained(ax, d))
          out.push_back(tensorTypeOf(x).getDimSize(d));
      r = reshape(nc, r, out);
    }
    break;
  }
  }
  nc.setOutput(0, r);
  return success();
}

/// Normalises x [N, C, S...] over the dims from `axis` of its `view` (a reshape of x)
/// with the layer_norm kernel (unit scale, no bias), returned in x's shape.
Value normalizeView(NodeCtx &nc, Value x, const Shape &view, int64_t axis, double eps) {
  Value v = reshape(nc, x, view);
  Shape norm(view.begin() + axis, view.end());
  Value ones = splat(nc.b, nc.loc, RankedTensorType::get(norm, tensorTypeOf(x).getElementType()), 1.0);
  auto op = nc.checked<LayerNormOp>(3, v, ones, Value(), nc.b.getI64IntegerAttr(axis),
                                    nc.b.getF64FloatAttr(eps));
  return op ? reshape(nc, op->getResult(0), shapeOf(tensorTypeOf(x))) : Value();
}

/// y * scale + bias with [C] vectors broadcast along dim 1 of y.
Value perChannelAffine(NodeCtx &nc, Value y, Value scaleC, Value biasC) {
  Shape ys = shapeOf(tensorTypeOf(y)), cs(ys.size(), 1);
  cs[1] = ys[1];
  auto bc = [&](Value v) { return broadcastTo(nc.b, nc.loc, reshape(nc, v, cs), ys); };
  Value r = MulOp::create(nc.b, nc.loc, y, bc(scaleC));
  return biasC ? AddOp::create(nc.b, nc.loc, r, bc(biasC)).getResult() : r;
}

LogicalResult convInstanceNorm(NodeCtx &nc) {
  Shape xs = shapeOf(nc.type(0));
  if (xs.size() < 3)
    return nc.fail("InstanceNormalization needs rank >= 3");
  if (shapeOf(nc.type(1)) != Shape{xs[1]} || shapeOf(nc.type(2)) != Shape{xs[1]})
    return nc.fail("scale and B must be [C]");
  Value y = normalizeView(nc, nc.in(0), xs, 2, nc.attrFloat("epsilon", 1e-5));
  if (!y)
    return failure();
  nc.setOutput(0, perChannelAffine(nc, y, nc.in(1), nc.in(2)));
  return success();
}

LogicalResult convGroupNorm(NodeCtx &nc) {
  Shape xs = shapeOf(nc.type(0));
  int64_t groups = nc.attrInt("num_groups", 0);
  if (xs.size() < 3 || groups <= 0 || xs[1] % groups)
    return nc.fail("needs rank >= 3 and num_groups dividing the channels");
  int64_t per = xs[1] / groups;
  Value x = nc.in(0);
  Value y = normalizeView(nc, x, {xs[0], groups, numElements(xs) / (xs[0] * groups)}, 2,
                          nc.attrFloat("epsilon", 1e-5));
  if (!y)
    return failure();
  Value sc = nc.in(1), bi = nc.in(2);
  // Opset 18 gives scale and bias per group, 21 per channel (as PyTorch).
  if (shapeOf(tensorTypeOf(sc)) == Shape{groups} && per != 1) {
    if (nc.ic.opset >= 21)
      return nc.fail("scale and bias must be [C] at opset 21");
    auto perGroup = [&](Value v) {
      return reshape(nc, broadcastTo(nc.b, nc.loc, reshape(nc, v, {groups, 1}), {groups, per}), {xs[1]});
    };
    sc = perGroup(sc);
    bi = perGroup(bi);
  } else if (shapeOf(tensorTypeOf(sc)) != Shape{xs[1]} || shapeOf(tensorTypeOf(bi)) != Shape{xs[1]}) {
    return nc.fail("scale and bias must be [C] (or [num_groups] before opset 21)");
  }
  nc.setOutput(0, perChannelAffine(nc, y, sc, bi));
  return success();
}

//===-- Einsum -------------------------------------------------------------===//
//
// The contractions exporters emit (attention's "bhqd,bhkd->bhqk", "bij,bjk->bik",
// outer products, transposes, sums over a letter): each operand first sums the letters
// no one else uses, then the two operands become [batch, free, contracted] views by
// transpose + reshape, one batched matmul contracts them, and a transpose puts the
// output letters in order. Ellipses and repeated letters in one operand (diagonals)
// are refused.

LogicalResult convEinsum(NodeCtx &nc) {
  std::string eq = nc.attrString("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  if (eq.find("...") != std::string::npos)
    return nc.fail("ellipsis ('...') in the equation is not supported");
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> ins;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    ins.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  if (ins.size() != nc.numInputs() || ins.size() > 2)
    return nc.fail("only one- and two-operand equations are supported");
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
  } else {
    // Implicit output: the letters used once, in alphabetical order.
    std::map<char, int> count;
    for (const auto &s : ins)
      for (char c : s)
        ++count[c];
    for (auto &[c, k] : count)
      if (k == 1)
        out += c;
  }
  std::map<char, int64_t> size;
  std::vector<Value> vals;
  for (size_t i = 0; i < ins.size(); ++i) {
    Shape s = shapeOf(nc.type(i));
    if (s.size() != ins[i].size())
      return nc.fail("operand " + std::to_string(i) + " has rank " + std::to_string(s.size()) +
                     " but '" + ins[i] + "' names " + std::to_string(ins[i].size()) + " dims");
    for (size_t d = 0; d < s.size(); ++d) {
      char c = ins[i][d];
      if (std::count(ins[i].begin(), ins[i].end(), c) > 1)
        return nc.fail(std::string("letter '") + c + "' repeats in one operand (diagonal)");
      if (size.count(c) && size[c] != s[d])
        return nc.fail(std::string("letter '") + c + "' has two sizes");
      size[c] = s[d];
    }
    vals.push_back(nc.in(i));
  }
  for (char c : out)
    if (!size.count(c))
      return nc.fail(std::string("output letter '") + c + "' is not in an input");
  OpBuilder &b = nc.b;
  Location loc = nc.loc;
  auto uses = [&](char c, size_t except) {
    if (out.find(c) != std::string::npos)
      return true;
    for (size_t j = 0; j < ins.size(); ++j)
      if (j != except && ins[j].find(c) != std::string::npos)
        return true;
    return false;
  };
  // Sum the letters only this operand has.
  for (size_t i = 0; i < ins.size(); ++i) {
    Shape axes;
    std::string kept;
    for (size_t d = 0; d < ins[i].size(); ++d) {
      if (uses(ins[i][d], i))
        kept += ins[i][d];
      else
        axes.push_back(d);
    }
    if (!axes.empty()) {
      vals[i] = ReduceSumOp::create(b, loc, vals[i], axes, false);
      ins[i] = kept;
    }
  }
  /// Transposes `v` (letters `from`) to the letter order `to`, then reshapes to `shape`.
  auto arrange = [&](Value v, const std::string &from, const std::string &to, const Shape &shape) {
    Shape perm;
    for (char c : to)
      perm.push_back(from.find(c));
    bool identity = true;
    for (size_t d = 0; d < perm.size(); ++d)
      identity &= perm[d] == (int64_t)d;
    if (!identity)
      v = TransposeOp::create(b, loc, v, perm);
    return reshape(nc, v, shape);
  };
  auto prod = [&](const std::string &letters) {
    int64_t p = 1;
    for (char c : letters)
      p *= size[c];
    return p;
  };
  std::string result;
  Value r;
  if (ins.size() == 1) {
    r = vals[0];
    result = ins[0];
  } else {
    std::string batch, freeA, freeB, contr;
    for (char c : ins[0]) {
      bool inB = ins[1].find(c) != std::string::npos, inOut = out.find(c) != std::string::npos;
      std::string &group = !inB ? freeA : inOut ? batch : contr;
      group += c;
    }
    for (char c : ins[1])
      if (ins[0].find(c) == std::string::npos)
        freeB += c;
    Value a = arrange(vals[0], ins[0], batch + freeA + contr, {prod(batch), prod(freeA), prod(contr)});
    Value bb = arrange(vals[1], ins[1], batch + contr + freeB, {prod(batch), prod(contr), prod(freeB)});
    r = MatMulOp::create(b, loc, a, bb, false, false);
    result = batch + freeA + freeB;
    Shape full;
    for (char c : result)
      full.push_back(size[c]);
    r = reshape(nc, r, full);
  }
  for (char c : result)
    if (out.find(c) == std::string::npos)
      return nc.fail(std::string("letter '") + c + "' is neither summed nor in the output");
  Shape outShape;
  for (char c : out)
    outShape.push_back(size[c]);
  nc.setOutput(0, arrange(r, result, out, outShape));
  return success();
}

} // namespace

const std::map<std::string, ConverterInfo> &converterTable() {
  static const std::map<std::string, ConverterInfo> table = {
      {"Abs", {unary<AbsOp>, 7}},
      {"Add", {convAdd, 7}},
      {"And", {convAnd, 7}},
      {"ArgMax", {convArgReduce<ArgMaxOp>, 7}},
      {"ArgMin", {convArgReduce<ArgMinOp>, 7}},
      {"AveragePool", {convAveragePool, 7}},
      {"BatchNormalization", {convBatchNorm, 7}},
      {"Bernoulli", {convBernoulli, 15}},
      {"Cast", {convCast, 7}},
      {"CastLike", {convCastLike, 15}},
      {"Ceil", {convCeil, 7}},
      {"Clip", {convClip, 7}},
      {"Concat", {convConcat, 7}},
      {"Constant", {convConstant, 7}},
      {"ConstantOfShape", {convConstantOfShape, 9}},
      {"Conv", {convConv, 7}},
      {"ConvTranspose", {convConvTranspose, 7}},
      {"Cos", {convCos, 7}},
      {"CumSum", {convCumSum, 11}},
      {"Div", {convDiv, 7}},
      {"Dropout", {convDropout, 7}},
      {"Einsum", {convEinsum, 12}},
      {"Elu", {convElu, 7}},
      {"Equal", {convEqual, 7}},
      {"Erf", {unary<ErfOp>, 9}},
      {"Exp", {unary<ExpOp>, 7}},
      {"Expand", {convExpand, 8}},
      {"Flatten", {convFlatten, 7}},
      {"Floor", {convFloor, 7}},
      {"GRU", {convGRU, 7}},
      {"Gather", {convGather, 7}},
      {"GatherElements", {convGatherElements, 11}},
      {"GatherND", {convGatherND, 11}},
      {"Gelu", {convGelu, 20}},
      {"Gemm", {convGemm, 7}},
      {"GlobalAveragePool", {convGlobalAveragePool, 7}},
      {"GlobalMaxPool", {convGlobalMaxPool, 7}},
      {"Greater", {convGreater, 7}},
      {"GroupNormalization", {convGroupNorm, 18}},
      {"GreaterOrEqual", {convGreaterOrEqual, 12}},
      {"HardSigmoid", {convHardSigmoid, 7}},
      {"HardSwish", {convHardSwish, 14}},
      {"Identity", {convIdentity, 7}},
      {"InstanceNormalization", {convInstanceNorm, 7}},
      {"IsInf", {convIsInf, 10}},
      {"IsNaN", {convIsNaN, 9}},
      {"LSTM", {convLSTM, 7}},
      {"LayerNormalization", {convLayerNorm, 17}},
      {"LeakyRelu", {convLeakyRelu, 7}},
      {"Less", {convLess, 7}},
      {"LessOrEqual", {convLessOrEqual, 12}},
      {"Log", {unary<LogOp>, 7}},
      {"LogSoftmax", {convLogSoftmax, 7}},
      {"MatMul", {convMatMul, 7}},
      {"Max", {convMax, 7}},
      {"MaxPool", {convMaxPool, 7}},
      {"Min", {convMin, 7}},
      {"Mish", {convMish, 18}},
      {"Mod", {convMod, 10}},
      {"Mul", {convMul, 7}},
      {"NegativeLogLikelihoodLoss", {convNegativeLogLikelihoodLoss, 12}},
      {"Neg", {convNeg, 7}},
      {"Not", {convNot, 7}},
      {"Or", {convOr, 7}},
      {"PRelu", {convPRelu, 7}},
      {"RandomNormal", {convRandomNormal<false>, 7}},
      {"RandomNormalLike", {convRandomNormal<true>, 7}},
      {"RandomUniform", {convRandomUniform<false>, 7}},
      {"RandomUniformLike", {convRandomUniform<true>, 7}},
      {"Pad", {convPad, 7}},
      {"Pow", {convPow, 7}},
      {"Range", {convRange, 11}},
      {"Reciprocal", {convReciprocal, 7}},
      {"ReduceMax", {convReduceMax, 7}},
      {"ReduceMean", {convReduceMean, 7}},
      {"ReduceMin", {composedReduce<ReduceForm::Min>, 7}},
      {"ReduceL1", {composedReduce<ReduceForm::L1>, 7}},
      {"ReduceL2", {composedReduce<ReduceForm::L2>, 7}},
      {"ReduceLogSum", {composedReduce<ReduceForm::LogSum>, 7}},
      {"ReduceLogSumExp", {composedReduce<ReduceForm::LogSumExp>, 7}},
      {"ReduceSumSquare", {composedReduce<ReduceForm::SumSquare>, 7}},
      {"ReduceProd", {convReduceProd, 7}},
      {"ReduceSum", {convReduceSum, 7}},
      {"Relu", {unary<ReluOp>, 7}},
      {"Reshape", {convReshape, 7}},
      {"Resize", {convResize, 10}},
      {"Round", {convRound, 11}},
      {"Scatter", {convScatterElements, 9}},
      {"ScatterElements", {convScatterElements, 11}},
      {"Selu", {convSelu, 7}},
      {"SequenceAt", {convSequenceAt, 11}},
      {"Shape", {convShape, 7}},
      {"Sigmoid", {unary<SigmoidOp>, 7}},
      {"Sign", {convSign, 9}},
      {"Sin", {convSin, 7}},
      {"Size", {convSize, 7}},
      {"Slice", {convSlice, 7}},
      {"Softmax", {convSoftmax, 7}},
      {"SoftmaxCrossEntropyLoss", {convSoftmaxCrossEntropy, 12}},
      {"Softplus", {convSoftplus, 7}},
      {"Split", {convSplit, 7}},
      {"SplitToSequence", {convSplitToSequence, 11}},
      {"Sqrt", {convSqrt, 7}},
      {"Squeeze", {convSqueeze, 7}},
      {"Sub", {convSub, 7}},
      {"Sum", {convSum, 7}},
      {"Tanh", {unary<TanhOp>, 7}},
      {"Tile", {convTile, 7}},
      {"TopK", {convTopK, 7}},
      {"Transpose", {convTranspose, 7}},
      {"Trilu", {convTrilu, 14}},
      {"Unsqueeze", {convUnsqueeze, 7}},
      {"Upsample", {convUpsample, 7}},
      {"Where", {convWhere, 9}},
      {"Xor", {convXor, 7}},
  };
  return table;
}

} // namespace ortc
