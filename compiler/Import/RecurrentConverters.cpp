//===- RecurrentConverters.cpp - ONNX LSTM and GRU, unrolled --------------===//
//
// ortc has no loop op: shapes are static, so an LSTM or GRU node is unrolled over
// its (static) sequence length into core ops at import time. Training then needs
// no new gradient rule — matmul, slice, sigmoid, tanh, mul, add and concat have
// theirs — and W, R, B stay weights read through `ortc.weight` (sliced, never
// folded), so they train. The input projection X W^T of every time step is one
// GEMM before the loop; each step adds only the recurrent GEMM H R^T.
//
//===----------------------------------------------------------------------===//
#include "compiler/Import/ImportContext.h"

#include "llvm/ADT/StringRef.h"

using namespace mlir;

namespace ortc {
namespace {

using Shape = llvm::SmallVector<int64_t>;

/// What LSTM and GRU share: the operands' shapes, the direction(s) and the layout,
/// checked once, and the few patterns every step builds.
struct Recurrence {
  NodeCtx &nc;
  int64_t gates; ///< 4 for LSTM (i, o, f, c), 3 for GRU (z, r, h)
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1;
  bool reverseOnly = false, batchFirst = false;
  Type elem;
  Value x; ///< [seq, batch, input] whatever the layout

  Recurrence(NodeCtx &nc, int64_t gates) : nc(nc), gates(gates) {}

  Value slice(Value v, ArrayRef<int64_t> starts, ArrayRef<int64_t> sizes) {
    Shape steps(starts.size(), 1);
    if (tensorTypeOf(v).getShape() == sizes)
      return v;
    return SliceOp::create(nc.b, nc.loc, v, starts, sizes, steps);
  }
  /// Columns [from, from + n) of a 2-D value.
  Value cols(Value v, int64_t from, int64_t n) {
    return slice(v, {0, from}, {tensorTypeOf(v).getDimSize(0), n});
  }
  /// Row `d` of a [dirs, ...] operand, without its leading dim.
  Value dirRow(Value v, int64_t d) {
    Shape sizes(tensorTypeOf(v).getShape());
    Shape starts(sizes.size(), 0);
    starts[0] = d;
    sizes[0] = 1;
    Value s = slice(v, starts, sizes);
    return reshapeTo(nc.b, nc.loc, s, ArrayRef<int64_t>(sizes).drop_front());
  }
  Value concat(ArrayRef<Value> vs, int64_t axis) {
    if (vs.size() == 1)
      return vs.front();
    return ConcatOp::create(nc.b, nc.loc, vs, axis);
  }
  Value add(Value a, Value b) { return AddOp::create(nc.b, nc.loc, a, b); }
  Value mul(Value a, Value b) { return MulOp::create(nc.b, nc.loc, a, b); }
  Value sigmoid(Value a) { return SigmoidOp::create(nc.b, nc.loc, a); }
  Value tanh(Value a) { return TanhOp::create(nc.b, nc.loc, a); }
  /// h R^T for h [batch, H] and R [n, H].
  Value matmulT(Value h, Value r) {
    return MatMulOp::create(nc.b, nc.loc, h, r, false, true);
  }

  /// Checks that input i is a float tensor of element type `elem` and `shape`.
  LogicalResult expect(size_t i, const char *name, ArrayRef<int64_t> shape) {
    RankedTensorType t = nc.type(i);
    if (!t || t.getElementType() != elem)
      return nc.fail(Twine(name) + " must be a tensor of X's element type");
    if (t.getShape() != shape) {
      std::string want, got;
      for (int64_t d : shape)
        want += (want.empty() ? "" : "x") + std::to_string(d);
      for (int64_t d : t.getShape())
        got += (got.empty() ? "" : "x") + std::to_string(d);
      return nc.fail(Twine(name) + " must be " + want + ", not " + got);
    }
    return success();
  }

  /// Reads the attributes and X, W, R, sequence_lens; refuses what ortc leaves out.
  LogicalResult parse(ArrayRef<const char *> defaultActivations) {
    std::string direction = nc.attrString("direction", "forward");
    if (direction == "bidirectional")
      dirs = 2;
    else if (direction == "reverse")
      reverseOnly = true;
    else if (direction != "forward")
      return nc.fail("unknown direction '" + direction + "'");
    if (nc.attr("clip"))
      return nc.fail("the 'clip' attribute (cell clipping) is not supported");
    if (auto *acts = nc.attr("activations")) {
      size_t n = defaultActivations.size();
      if ((size_t)acts->strings_size() != n * dirs)
        return nc.fail("activations must list " + std::to_string(n * dirs) + " functions");
      for (int i = 0; i < acts->strings_size(); ++i)
        if (!llvm::StringRef(acts->strings(i)).equals_insensitive(defaultActivations[i % n]))
          return nc.fail("only the default activations are supported, not '" +
                         acts->strings(i) + "'");
    }
    batchFirst = nc.ic.opset >= 14 && nc.attrInt("layout", 0) == 1;

    RankedTensorType xt = nc.type(0);
    if (!xt || xt.getRank() != 3 || !isa<FloatType>(xt.getElementType()))
      return nc.fail("X must be a 3-D float tensor");
    elem = xt.getElementType();
    seq = xt.getDimSize(batchFirst ? 1 : 0);
    batch = xt.getDimSize(batchFirst ? 0 : 1);
    input = xt.getDimSize(2);
    if (seq < 1)
      return nc.fail("X has no time steps (its sequence dim is " + std::to_string(seq) + ")");
    if (!nc.has(1) || !nc.has(2))
      return nc.fail("W and R are required");
    RankedTensorType rt = nc.type(2);
    if (!rt || rt.getRank() != 3)
      return nc.fail("R must be a 3-D tensor");
    hidden = nc.attrInt("hidden_size", rt.getDimSize(2));
    if (hidden < 1 || hidden > kMaxDim)
      return nc.fail("hidden_size " + std::to_string(hidden) + " is not in [1, " +
                     std::to_string(kMaxDim) + "]");
    if (failed(expect(1, "W", {dirs, gates * hidden, input})) ||
        failed(expect(2, "R", {dirs, gates * hidden, hidden})) ||
        (nc.has(3) && failed(expect(3, "B", {dirs, 2 * gates * hidden}))))
      return failure();
    if (nc.has(4)) {
      const HostTensor *lens = nc.constant(4);
      if (!lens)
        return nc.fail("sequence_lens must be known at compile time");
      for (int64_t l : lens->ints())
        if (l != seq)
          return nc.fail("sequence_lens shorter than the sequence (" + std::to_string(l) +
                         " of " + std::to_string(seq) + ") are not supported");
    }
    x = nc.in(0);
    if (batchFirst)
      x = TransposeOp::create(nc.b, nc.loc, x, ArrayRef<int64_t>{1, 0, 2});
    return success();
  }

  /// initial_h / initial_c (input i) of direction d as [batch, H], or null (zeros).
  FailureOr<Value> initialState(size_t i, const char *name, int64_t d) {
    if (!nc.has(i))
      return Value();
    Shape shape = batchFirst ? Shape{batch, dirs, hidden} : Shape{dirs, batch, hidden};
    if (failed(expect(i, name, shape)))
      return failure();
    Value v = nc.in(i);
    if (batchFirst)
      v = TransposeOp::create(nc.b, nc.loc, v, ArrayRef<int64_t>{1, 0, 2});
    return dirRow(v, d);
  }

  /// X W_d^T + bias for every step, as [seq, batch, gates*H]. `bias` may be null.
  Value inputProjection(int64_t d, Value bias) {
    Value flat = reshapeTo(nc.b, nc.loc, x, {seq * batch, input});
    Value xw = matmulT(flat, dirRow(nc.in(1), d));
    if (bias)
      xw = add(xw, broadcastTo(nc.b, nc.loc, bias, {seq * batch, gates * hidden}));
    return reshapeTo(nc.b, nc.loc, xw, {seq, batch, gates * hidden});
  }
  /// Step t of an input projection, [batch, gates*H].
  Value step(Value xw, int64_t t) {
    return reshapeTo(nc.b, nc.loc, slice(xw, {t, 0, 0}, {1, batch, gates * hidden}),
                     {batch, gates * hidden});
  }
  /// Time steps of direction d, in the order they are computed.
  int64_t timeAt(int64_t d, int64_t k) const {
    bool backward = reverseOnly || d == 1;
    return backward ? seq - 1 - k : k;
  }

  /// Sets Y (always: the importer wants output 0 even when nothing reads it; unread
  /// ops are erased later) from hs[d][t], [batch, H] each.
  void setY(size_t out, ArrayRef<llvm::SmallVector<Value>> hs) {
    llvm::SmallVector<Value> steps;
    for (int64_t t = 0; t < seq; ++t) {
      llvm::SmallVector<Value> perDir;
      for (int64_t d = 0; d < dirs; ++d)
        perDir.push_back(reshapeTo(nc.b, nc.loc, hs[d][t], {1, 1, batch, hidden}));
      steps.push_back(concat(perDir, 1));
    }
    Value y = concat(steps, 0);
    if (batchFirst)
      y = TransposeOp::create(nc.b, nc.loc, y, ArrayRef<int64_t>{2, 0, 1, 3});
    nc.setOutput(out, y);
  }
  /// Sets a final-state output (Y_h, Y_c) from each direction's last state.
  void setState(size_t out, ArrayRef<Value> last) {
    if (!nc.outputUsed(out))
      return;
    llvm::SmallVector<Value> perDir;
    for (Value v : last)
      perDir.push_back(reshapeTo(nc.b, nc.loc, v, {1, batch, hidden}));
    Value s = concat(perDir, 0);
    if (batchFirst)
      s = TransposeOp::create(nc.b, nc.loc, s, ArrayRef<int64_t>{1, 0, 2});
    nc.setOutput(out, s);
  }
};

} // namespace

LogicalResult convLSTM(NodeCtx &nc) {
  Recurrence rnn(nc, 4);
  if (failed(rnn.parse({"Sigmoid", "Tanh", "Tanh"})))
    return failure();
  if (nc.attrInt("input_forget", 0) != 0)
    return nc.fail("input_forget=1 (coupled input and forget gates) is not supported");
  int64_t H = rnn.hidden, dirs = rnn.dirs;
  if (nc.has(7) && failed(rnn.expect(7, "P", {dirs, 3 * H})))
    return failure();

  llvm::SmallVector<llvm::SmallVector<Value>> hs(dirs);
  llvm::SmallVector<Value> lastH, lastC;
  for (int64_t d = 0; d < dirs; ++d) {
    Value bias;
    if (nc.has(3)) {
      Value b = rnn.dirRow(nc.in(3), d);
      bias = rnn.add(rnn.slice(b, {0}, {4 * H}), rnn.slice(b, {4 * H}, {4 * H}));
    }
    Value xw = rnn.inputProjection(d, bias);
    Value r = rnn.dirRow(nc.in(2), d);
    // Peephole weights (ONNX order i, o, f), broadcast to [batch, H].
    Value pi, po, pf;
    if (nc.has(7)) {
      Value p = rnn.dirRow(nc.in(7), d);
      auto peep = [&](int64_t k) {
        return broadcastTo(nc.b, nc.loc, rnn.slice(p, {k * H}, {H}), {rnn.batch, H});
      };
      pi = peep(0), po = peep(1), pf = peep(2);
    }
    FailureOr<Value> h = rnn.initialState(5, "initial_h", d);
    FailureOr<Value> c = rnn.initialState(6, "initial_c", d);
    if (failed(h) || failed(c))
      return failure();
    hs[d].resize(rnn.seq);
    // A null h or c is a zero state: the first step of a model without initial
    // state skips its recurrent GEMM and the terms it would multiply by zero.
    for (int64_t k = 0; k < rnn.seq; ++k) {
      int64_t t = rnn.timeAt(d, k);
      Value g = rnn.step(xw, t);
      if (*h)
        g = rnn.add(g, rnn.matmulT(*h, r));
      Value gi = rnn.cols(g, 0, H), go = rnn.cols(g, H, H);
      Value gf = rnn.cols(g, 2 * H, H), gc = rnn.cols(g, 3 * H, H);
      if (pi && *c) {
        gi = rnn.add(gi, rnn.mul(pi, *c));
        gf = rnn.add(gf, rnn.mul(pf, *c));
      }
      Value cNew = rnn.mul(rnn.sigmoid(gi), rnn.tanh(gc));
      if (*c)
        cNew = rnn.add(rnn.mul(rnn.sigmoid(gf), *c), cNew);
      if (po)
        go = rnn.add(go, rnn.mul(po, cNew));
      *h = rnn.mul(rnn.sigmoid(go), rnn.tanh(cNew));
      *c = cNew;
      hs[d][t] = *h;
    }
    lastH.push_back(*h);
    lastC.push_back(*c);
  }
  rnn.setY(0, hs);
  rnn.setState(1, lastH);
  rnn.setState(2, lastC);
  return success();
}

LogicalResult convGRU(NodeCtx &nc) {
  Recurrence rnn(nc, 3);
  if (failed(rnn.parse({"Sigmoid", "Tanh"})))
    return failure();
  bool linearBeforeReset = nc.attrInt("linear_before_reset", 0) != 0;
  int64_t H = rnn.hidden, dirs = rnn.dirs, batch = rnn.batch;

  llvm::SmallVector<llvm::SmallVector<Value>> hs(dirs);
  llvm::SmallVector<Value> lastH;
  for (int64_t d = 0; d < dirs; ++d) {
    // Wb + Rb go into the input projection, except Rb_h when the reset gate
    // multiplies (H R_h^T + Rb_h): then Rb_h is added per step.
    Value bias, rbh;
    if (nc.has(3)) {
      Value b = rnn.dirRow(nc.in(3), d);
      if (linearBeforeReset) {
        Value zr = rnn.add(rnn.slice(b, {0}, {2 * H}), rnn.slice(b, {3 * H}, {2 * H}));
        bias = rnn.concat({zr, rnn.slice(b, {2 * H}, {H})}, 0);
        rbh = broadcastTo(nc.b, nc.loc, rnn.slice(b, {5 * H}, {H}), {batch, H});
      } else {
        bias = rnn.add(rnn.slice(b, {0}, {3 * H}), rnn.slice(b, {3 * H}, {3 * H}));
      }
    }
    Value xw = rnn.inputProjection(d, bias);
    Value r = rnn.dirRow(nc.in(2), d);
    Value rzr, rh; // R split where the reset gate multiplies h before R_h
    if (!linearBeforeReset) {
      rzr = rnn.slice(r, {0, 0}, {2 * H, H});
      rh = rnn.slice(r, {2 * H, 0}, {H, H});
    }
    FailureOr<Value> h = rnn.initialState(5, "initial_h", d);
    if (failed(h))
      return failure();
    hs[d].resize(rnn.seq);
    for (int64_t k = 0; k < rnn.seq; ++k) {
      int64_t t = rnn.timeAt(d, k);
      Value g = rnn.step(xw, t);
      Value gzr = rnn.cols(g, 0, 2 * H), gh = rnn.cols(g, 2 * H, H);
      Value hrh; // H R_h^T (+ Rb_h) when the reset gate multiplies it
      if (*h && linearBeforeReset) {
        Value hr = rnn.matmulT(*h, r);
        gzr = rnn.add(gzr, rnn.cols(hr, 0, 2 * H));
        hrh = rnn.cols(hr, 2 * H, H);
      } else if (*h) {
        gzr = rnn.add(gzr, rnn.matmulT(*h, rzr));
      }
      if (linearBeforeReset)
        hrh = hrh && rbh ? rnn.add(hrh, rbh) : (hrh ? hrh : rbh);
      Value z = rnn.sigmoid(rnn.cols(gzr, 0, H));
      // The reset gate only matters where it multiplies something non-zero.
      Value resetOf = linearBeforeReset ? hrh : *h;
      if (resetOf) {
        Value reset = rnn.mul(rnn.sigmoid(rnn.cols(gzr, H, H)), resetOf);
        gh = rnn.add(gh, linearBeforeReset ? reset : rnn.matmulT(reset, rh));
      }
      Value cand = rnn.tanh(gh);
      // (1 - z) h~ + z h_prev, written as h~ + z (h_prev - h~).
      Value diff = *h ? SubOp::create(nc.b, nc.loc, *h, cand).getResult()
                      : NegOp::create(nc.b, nc.loc, cand).getResult();
      *h = rnn.add(cand, rnn.mul(z, diff));
      hs[d][t] = *h;
    }
    lastH.push_back(*h);
  }
  rnn.setY(0, hs);
  rnn.setState(1, lastH);
  return success();
}

} // namespace ortc
