//===- ResizeConverters.cpp - ConvTranspose, Resize and Upsample ---------===//
//
// The ONNX ops that grow spatial dims (decoders, U-Nets) import onto ops that already
// have kernels on every target and gradient rules, so models with them train:
// - ConvTranspose is the adjoint of Conv, i.e. `conv_grad_input` with its weight read
//   as the conv weight (the layouts agree), plus a broadcast bias add.
// - Resize/Upsample with scales or sizes known at compile time move each output
//   element to fixed input positions, computed here on the host: nearest is one gather
//   per resized axis, linear two per resized axis blended by constant weights
//   (separable, as ONNX's reference computes it), so the host tables grow with the
//   output's dims, never with its element count.
//
//===----------------------------------------------------------------------===//
#include "compiler/Import/ImportContext.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;

namespace ortc {
namespace {

/// Python's a // b for b > 0.
int64_t floorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

std::string str(int64_t v) { return std::to_string(v); }

/// The largest dim a Resize or Upsample may produce (each resized axis gets a host
/// table of that many positions, built at import: 2^24 took 14-32 s under the fuzz
/// build; real models stay far below 2^20).
constexpr int64_t kMaxResizedDim = int64_t(1) << 20;

/// `v` (an output dim computed from scales) as an int64, or false if it lies outside
/// [1, kMaxResizedDim] (NaN included), before any conversion could overflow.
bool resizedDim(double v, int64_t &out) {
  if (!(v >= 1 && v <= double(kMaxResizedDim)))
    return false;
  out = (int64_t)v;
  return true;
}

//===-- ConvTranspose -----------------------------------------------------===//

/// Pads and output size of ConvTranspose per spatial dim, following ONNX's reference:
/// explicit pads (NOTSET/VALID) keep output_shape as given; SAME_* derive the pads
/// from output_shape (default in * stride).
LogicalResult transposeGeometry(NodeCtx &nc, const Shape &x, const Shape &kernel,
                                const Shape &strides, const Shape &dil,
                                const Shape &outPad, Shape &pads, Shape &out) {
  int64_t ns = kernel.size();
  std::optional<Shape> outShape = nc.attrInts("output_shape");
  if (outShape && (int64_t)outShape->size() == ns + 2)
    outShape = Shape(outShape->begin() + 2, outShape->end());
  if (outShape && (int64_t)outShape->size() != ns)
    return nc.fail("output_shape needs one entry per spatial dim");
  std::string autoPad = nc.attrString("auto_pad", "NOTSET");
  pads = nc.attrInts("pads").value_or(Shape(2 * ns, 0));
  if ((int64_t)pads.size() != 2 * ns)
    return nc.fail("pads need 2 entries per spatial dim");
  out.assign(ns, 0);
  for (int64_t i = 0; i < ns; ++i) {
    int64_t full = strides[i] * (x[i + 2] - 1) + outPad[i] + (kernel[i] - 1) * dil[i] + 1;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      out[i] = outShape ? (*outShape)[i] : x[i + 2] * strides[i];
      int64_t total = full - out[i];
      int64_t half = floorDiv(total, 2);
      pads[i] = autoPad == "SAME_UPPER" ? half : total - half;
      pads[i + ns] = total - pads[i];
    } else if (autoPad == "VALID" || autoPad == "NOTSET") {
      if (autoPad == "VALID")
        pads[i] = pads[i + ns] = 0;
      out[i] = outShape ? (*outShape)[i] : full - pads[i] - pads[i + ns];
    } else {
      return nc.fail("unknown auto_pad '" + autoPad + "'");
    }
    // conv_grad_input reads only the begin pads; the end pad is the one a convolution
    // of the result needs to give back the input's extent (the gradient rule's conv).
    // Output past the last window (output_padding) must stay below a stride.
    int64_t endPad = strides[i] * (x[i + 2] - 1) + (kernel[i] - 1) * dil[i] + 1 -
                     pads[i] - out[i];
    if (pads[i] < 0 || out[i] < 1 || -endPad >= strides[i])
      return nc.fail("spatial dim " + str(i) + ": output size " + str(out[i]) +
                     " with begin pad " + str(pads[i]) +
                     " is not a transposed convolution of input size " + str(x[i + 2]) +
                     " (negative pads or output_padding >= stride are not supported)");
    pads[i + ns] = std::max<int64_t>(endPad, 0);
  }
  return success();
}

} // namespace

LogicalResult convConvTranspose(NodeCtx &nc) {
  Shape x = shapeOf(nc.type(0)), w = shapeOf(nc.type(1));
  int64_t ns = (int64_t)x.size() - 2, group = nc.attrInt("group", 1);
  if (ns < 1 || ns > 3 || w.size() != x.size())
    return nc.fail("ConvTranspose needs 1-3 spatial dims and a weight of the input's rank");
  if (nc.type(0).getElementType() != nc.type(1).getElementType())
    return nc.fail("input and weight element types differ");
  if (group < 1 || x[1] != w[0] || w[0] % group)
    return nc.fail("input channels " + str(x[1]) + " do not match the weight's " +
                   str(w[0]) + " (weight is [C_in, C_out/group, k...], group " +
                   str(group) + ")");
  Shape kernel(w.begin() + 2, w.end());
  if (auto ks = nc.attrInts("kernel_shape"); ks && *ks != kernel)
    return nc.fail("kernel_shape does not match the weight");
  Shape strides = nc.attrInts("strides").value_or(Shape(ns, 1));
  Shape dil = nc.attrInts("dilations").value_or(Shape(ns, 1));
  Shape outPad = nc.attrInts("output_padding").value_or(Shape(ns, 0));
  if ((int64_t)strides.size() != ns || (int64_t)dil.size() != ns ||
      (int64_t)outPad.size() != ns)
    return nc.fail("strides/dilations/output_padding need one entry per spatial dim");
  for (int64_t i = 0; i < ns; ++i)
    if (strides[i] < 1 || dil[i] < 1 || outPad[i] < 0)
      return nc.fail("strides and dilations must be >= 1, output_padding >= 0");
  Shape pads, out;
  if (failed(transposeGeometry(nc, x, kernel, strides, dil, outPad, pads, out)))
    return failure();
  Shape shape{x[0], w[1] * group};
  shape.insert(shape.end(), out.begin(), out.end());
  auto type = nc.type(0).clone(shape);
  Value y = ConvGradInputOp::create(nc.b, nc.loc, type, nc.in(0), nc.in(1), strides, pads,
                                    dil, group);
  if (nc.has(2)) {
    if (nc.type(2).getRank() != 1 || nc.type(2).getDimSize(0) != shape[1])
      return nc.fail("bias must be [" + str(shape[1]) + "]");
    Shape chan(shape.size(), 1);
    chan[1] = shape[1];
    Value bias = broadcastTo(nc.b, nc.loc, reshapeTo(nc.b, nc.loc, nc.in(2), chan), shape);
    y = AddOp::create(nc.b, nc.loc, y, bias);
  }
  nc.setOutput(0, y);
  return success();
}

//===-- Resize and Upsample -----------------------------------------------===//

namespace {

/// How one Resize/Upsample node maps output to input coordinates.
struct ResizeSpec {
  std::string mode;        ///< nearest | linear
  std::string transform;   ///< coordinate_transformation_mode
  std::string nearestMode; ///< round_prefer_floor | round_prefer_ceil | floor | ceil
  std::vector<double> scales;
  Shape out;
};

/// Input coordinate of output index y along one axis (ONNX reference's _compute_x_ori,
/// same operation order so ties round alike).
double originalCoord(const std::string &t, double y, double scale, int64_t in,
                     int64_t outInt) {
  double outWidth = scale * (double)in;
  if (t == "align_corners")
    return outWidth == 1 ? 0.0 : y * (double)(in - 1) / (outWidth - 1);
  if (t == "asymmetric")
    return y / scale;
  if (t == "pytorch_half_pixel")
    return outWidth == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
  if (t == "tf_half_pixel_for_nn")
    return (y + 0.5) / scale;
  if (t == "half_pixel_symmetric") {
    double adjustment = (double)outInt / outWidth;
    double center = (double)in / 2;
    double offset = center * (1 - adjustment);
    return offset + (y + 0.5) / scale - 0.5;
  }
  return (y + 0.5) / scale - 0.5; // half_pixel
}

int64_t clampIndex(int64_t i, int64_t n) { return std::min(std::max<int64_t>(i, 0), n - 1); }

/// Nearest input index of output index y along an axis (edge-clamped).
int64_t nearestIndex(const ResizeSpec &s, int64_t y, double scale, int64_t in, int64_t out) {
  double x = originalCoord(s.transform, (double)y, scale, in, out);
  double fl = std::floor(x);
  int64_t i = (int64_t)fl;
  if (x != fl) {
    double ratio = x - fl;
    bool up = s.nearestMode == "round_prefer_floor" ? ratio > 0.5
              : s.nearestMode == "round_prefer_ceil" ? ratio >= 0.5
              : s.nearestMode == "ceil";
    i += up;
  }
  return clampIndex(i, in);
}

bool isIdentityAxis(const ResizeSpec &s, int64_t in, int64_t d) {
  return std::abs(s.scales[d] - 1.0) <= 1e-9 && s.out[d] == in;
}

/// An int64 index constant (one resized axis's source positions).
Value indexConstant(NodeCtx &nc, const Shape &ix) {
  HostTensor t;
  t.elemType = onnx::TensorProto::INT64;
  t.shape = {(int64_t)ix.size()};
  t.data.assign(ix.begin(), ix.end());
  return hostConstant(nc, std::move(t), nc.b.getI64Type());
}

LogicalResult resizeNearest(NodeCtx &nc, const ResizeSpec &s) {
  Shape in = shapeOf(nc.type(0));
  Value cur = nc.in(0);
  for (int64_t d = 0; d < (int64_t)in.size(); ++d) {
    if (isIdentityAxis(s, in[d], d))
      continue;
    Shape ix;
    for (int64_t y = 0; y < s.out[d]; ++y)
      ix.push_back(nearestIndex(s, y, s.scales[d], in[d], s.out[d]));
    auto op = nc.checked<GatherOp>(1, cur, indexConstant(nc, ix), d);
    if (!op)
      return failure();
    cur = op.getResult();
  }
  nc.setOutput(0, cur);
  return success();
}

LogicalResult resizeLinear(NodeCtx &nc, const ResizeSpec &s) {
  Shape in = shapeOf(nc.type(0));
  Type elt = nc.type(0).getElementType();
  if (!isa<FloatType>(elt))
    return nc.fail("linear Resize needs a float input");
  int64_t rank = in.size();
  Value cur = nc.in(0);
  for (int64_t d = 0; d < rank; ++d) {
    if (isIdentityAxis(s, in[d], d))
      continue;
    Shape i0, i1;
    std::vector<double> w0, w1;
    bool blend = false;
    for (int64_t y = 0; y < s.out[d]; ++y) {
      double x = originalCoord(s.transform, (double)y, s.scales[d], in[d], s.out[d]);
      double fl = std::floor(x);
      i0.push_back(clampIndex((int64_t)fl, in[d]));
      i1.push_back(clampIndex((int64_t)fl + 1, in[d]));
      w1.push_back(x - fl);
      w0.push_back(1 - (x - fl));
      blend |= x != fl && i0.back() != i1.back();
    }
    auto gather = [&](const Shape &ix) -> Value {
      auto op = nc.checked<GatherOp>(1, cur, indexConstant(nc, ix), d);
      return op ? op.getResult() : Value();
    };
    Value g0 = gather(i0);
    if (!g0)
      return failure();
    if (!blend) { // every output sits on an input position
      cur = g0;
      continue;
    }
    Value g1 = gather(i1);
    if (!g1)
      return failure();
    Shape full = shapeOf(tensorTypeOf(g0)), wShape(rank, 1);
    wShape[d] = s.out[d];
    auto weight = [&](const std::vector<double> &w) {
      HostTensor t;
      t.shape = wShape;
      t.data = w;
      return broadcastTo(nc.b, nc.loc, hostConstant(nc, std::move(t), elt), full);
    };
    cur = AddOp::create(nc.b, nc.loc, MulOp::create(nc.b, nc.loc, g0, weight(w0)),
                        MulOp::create(nc.b, nc.loc, g1, weight(w1)));
  }
  nc.setOutput(0, cur);
  return success();
}

LogicalResult resize(NodeCtx &nc, const ResizeSpec &s) {
  for (size_t d = 0; d < s.out.size(); ++d)
    if (s.out[d] < 1 || s.out[d] > kMaxResizedDim)
      return nc.fail("output dim " + str(int64_t(d)) + " would be " + str(s.out[d]) +
                     " (from the scales or sizes), outside [1, " + str(kMaxResizedDim) + "]");
  if (s.mode == "nearest")
    return resizeNearest(nc, s);
  if (s.mode == "linear")
    return resizeLinear(nc, s);
  if (s.mode == "cubic")
    return nc.fail("mode 'cubic' is not supported (nearest and linear are)");
  return nc.fail("unknown mode '" + s.mode + "'");
}

/// Reads scales (float) from input `i`; failure when it is only known at run time.
LogicalResult constantInput(NodeCtx &nc, size_t i, const char *what,
                            const HostTensor *&out) {
  out = nullptr;
  if (!nc.has(i))
    return success();
  out = nc.constant(i);
  if (!out)
    return nc.fail(std::string(what) + " computed at run time are not supported (ortc "
                   "needs static shapes: give them as constants or initializers)");
  if (out->numel() == 0)
    out = nullptr; // an empty tensor stands for "not given"
  return success();
}

} // namespace

LogicalResult convResize(NodeCtx &nc) {
  Shape in = shapeOf(nc.type(0));
  int64_t rank = in.size();
  ResizeSpec s;
  s.mode = nc.attrString("mode", "nearest");
  const HostTensor *scales = nullptr, *sizes = nullptr;
  if (nc.ic.opset < 11) {
    // Resize-10: X, scales; coordinates are asymmetric (as Upsample's).
    s.transform = "asymmetric";
    s.nearestMode = "floor";
    if (failed(constantInput(nc, 1, "scales", scales)))
      return failure();
  } else {
    s.transform = nc.attrString("coordinate_transformation_mode", "half_pixel");
    s.nearestMode = nc.attrString("nearest_mode", "round_prefer_floor");
    if (failed(constantInput(nc, 2, "scales", scales)) ||
        failed(constantInput(nc, 3, "sizes", sizes)))
      return failure();
  }
  static const char *transforms[] = {"half_pixel",   "pytorch_half_pixel",
                                     "align_corners", "asymmetric",
                                     "half_pixel_symmetric", "tf_half_pixel_for_nn"};
  if (s.transform == "tf_crop_and_resize")
    return nc.fail("coordinate_transformation_mode 'tf_crop_and_resize' is not supported");
  if (!llvm::is_contained(transforms, s.transform))
    return nc.fail("unknown coordinate_transformation_mode '" + s.transform + "'");
  if (s.nearestMode != "round_prefer_floor" && s.nearestMode != "round_prefer_ceil" &&
      s.nearestMode != "floor" && s.nearestMode != "ceil")
    return nc.fail("unknown nearest_mode '" + s.nearestMode + "'");
  if (s.mode == "cubic")
    return nc.fail("mode 'cubic' is not supported (nearest and linear are)");
  // exclude_outside renormalises weights of taps outside the input: for linear taps
  // (edge-clamped) that changes nothing, for a nearest tap it would drop the value.
  if (nc.attrInt("exclude_outside", 0) && s.mode != "linear")
    return nc.fail("exclude_outside=1 is not supported with mode '" + s.mode + "'");
  if ((scales == nullptr) == (sizes == nullptr))
    return nc.fail("exactly one of scales and sizes must be given");

  Shape axes;
  if (auto a = nc.attrInts("axes")) {
    for (int64_t ax : *a) {
      if (ax < -rank || ax >= rank)
        return nc.fail("axis " + str(ax) + " out of range");
      axes.push_back(ax < 0 ? ax + rank : ax);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  const HostTensor *given = scales ? scales : sizes;
  if (given->numel() != (int64_t)axes.size())
    return nc.fail(std::string(scales ? "scales" : "sizes") + " need " +
                   str(axes.size()) + " entries, got " + str(given->numel()));
  s.scales.assign(rank, 1.0);
  s.out = in;
  if (scales) {
    for (size_t k = 0; k < axes.size(); ++k) {
      double sc = scales->data[k];
      if (!(sc > 0))
        return nc.fail("scales must be > 0");
      s.scales[axes[k]] = sc;
      if (!resizedDim(std::floor(sc * (double)in[axes[k]]), s.out[axes[k]]))
        return nc.fail("scales[" + str(int64_t(k)) + "] = " + llvm::formatv("{0}", sc).str() +
                       " gives an output dim outside [1, " + str(kMaxResizedDim) + "]");
    }
  } else {
    for (size_t k = 0; k < axes.size(); ++k) {
      if (!resizedDim(sizes->data[k], s.out[axes[k]]) || in[axes[k]] < 1)
        return nc.fail("sizes[" + str(int64_t(k)) + "] must lie in [1, " +
                       str(kMaxResizedDim) + "] and input dims be >= 1");
      s.scales[axes[k]] = (double)s.out[axes[k]] / (double)in[axes[k]];
    }
    std::string policy = nc.attrString("keep_aspect_ratio_policy", "stretch");
    if (policy == "not_larger" || policy == "not_smaller") {
      double sc = s.scales[axes[0]];
      for (int64_t d : axes)
        sc = policy == "not_larger" ? std::min(sc, s.scales[d]) : std::max(sc, s.scales[d]);
      for (int64_t d : axes) {
        s.scales[d] = sc;
        if (!resizedDim(std::floor(sc * (double)in[d] + 0.5), s.out[d]))
          return nc.fail("keep_aspect_ratio_policy gives an output dim outside [1, " +
                         str(kMaxResizedDim) + "]");
      }
    } else if (policy != "stretch") {
      return nc.fail("unknown keep_aspect_ratio_policy '" + policy + "'");
    }
  }
  for (int64_t d = 0; d < rank; ++d)
    if (s.out[d] < 1)
      return nc.fail("the output would be empty along dim " + str(d));
  if (nc.attrInt("antialias", 0) &&
      (s.mode == "nearest" || llvm::any_of(s.scales, [](double v) { return v < 1; })))
    return nc.fail("antialias=1 is not supported when downsampling or with mode nearest");
  return resize(nc, s);
}

LogicalResult convUpsample(NodeCtx &nc) {
  Shape in = shapeOf(nc.type(0));
  ResizeSpec s;
  s.mode = nc.attrString("mode", "nearest");
  if (s.mode == "bilinear")
    s.mode = "linear";
  s.transform = "asymmetric";
  s.nearestMode = "floor";
  std::vector<double> scales;
  if (nc.has(1)) {
    const HostTensor *t = nullptr;
    if (failed(constantInput(nc, 1, "scales", t)))
      return failure();
    if (t)
      scales = t->data;
  } else if (const auto *a = nc.attr("scales")) {
    scales.assign(a->floats().begin(), a->floats().end());
  }
  if (scales.size() != in.size())
    return nc.fail("scales need one entry per dim of the input");
  s.scales = scales;
  for (size_t d = 0; d < in.size(); ++d) {
    int64_t o = 0;
    if (!(scales[d] > 0))
      return nc.fail("scales must be > 0");
    if (!resizedDim(std::floor(scales[d] * (double)in[d]), o))
      return nc.fail("scales[" + str(int64_t(d)) + "] gives an output dim outside [1, " +
                     str(kMaxResizedDim) + "]");
    s.out.push_back(o);
  }
  return resize(nc, s);
}

} // namespace ortc
