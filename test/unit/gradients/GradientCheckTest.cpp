//===- GradientCheckTest.cpp - Every gradient rule vs finite differences -===//
//
// Each case is a tiny @forward over weights (so autodiff treats them as parameters)
// whose output y is reduced to loss = sum(y * r) with a random r. The harness runs
// ortc-attach-loss + ortc-autodiff, evaluates @train_step in float64 with the
// reference evaluator, and compares every gradient element with a central finite
// difference of the loss. Shapes include broadcasting cases and random sizes.
//
//===----------------------------------------------------------------------===//
#include "compiler/Eval/Evaluator.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Dialect/Ortc/StepFunction.h"
#include "passes/autodiff/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <regex>
#include <sstream>

using namespace mlir;

namespace {

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  double lo = -1, hi = 1;
};

struct Case {
  std::string name;
  std::vector<Param> params;
  std::string body;              ///< MLIR ops; uses %<param> and defines %y
  std::vector<int64_t> outShape; ///< shape of %y
};

/// gtest prints the case by name, not as bytes.
void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

std::string typeOf(const std::vector<int64_t> &shape) {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + "f64>";
}

std::string moduleText(const Case &c) {
  std::ostringstream os;
  for (const Param &p : c.params)
    os << "ortc.global @" << p.name << " : " << typeOf(p.shape)
       << " {kind = \"weight\", onnx_name = \"" << p.name << "\"}\n";
  os << "ortc.global @r : " << typeOf(c.outShape) << " {kind = \"weight\", onnx_name = \"r\"}\n";
  os << "func.func @forward() -> (tensor<f64> {ortc.name = \"loss\"}) {\n";
  for (const Param &p : c.params)
    os << "  %" << p.name << " = ortc.weight @" << p.name << " : " << typeOf(p.shape) << "\n";
  os << c.body << "\n";
  os << "  %r = ortc.weight @r : " << typeOf(c.outShape) << "\n";
  os << "  %yr = ortc.mul %y, %r : " << typeOf(c.outShape) << "\n";
  std::string axes;
  for (size_t i = 0; i < c.outShape.size(); ++i)
    axes += (i ? ", " : "") + std::to_string(i);
  if (c.outShape.empty())
    os << "  %loss = ortc.reshape %yr : tensor<f64> -> tensor<f64>\n";
  else
    os << "  %loss = ortc.reduce_sum %yr {axes = array<i64: " << axes
       << ">, keepdims = false} : " << typeOf(c.outShape) << " -> tensor<f64>\n";
  os << "  return %loss : tensor<f64>\n}\n";
  return os.str();
}

using Tensor = ortc::EvalTensor<double>;

class GradientCheck : public ::testing::TestWithParam<Case> {};

TEST_P(GradientCheck, MatchesCentralDifferences) {
  const Case &c = GetParam();
  DialectRegistry registry;
  ortc::registerAllDialects(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  std::string text = moduleText(c);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &ctx);
  ASSERT_TRUE(module) << text;
  PassManager pm(&ctx);
  ortc::AttachLossOptions lo;
  lo.loss = "none";
  lo.lossOutput = "loss";
  pm.addPass(ortc::createAttachLoss(lo));
  ortc::AutodiffOptions ad;
  ad.freeze.push_back("r"); // the random projection is not under test
  ad.trainable.push_back("*"); // scalar weights too (the rule takes scalars as literals)
  pm.addPass(ortc::createAutodiff(ad));
  ASSERT_TRUE(succeeded(pm.run(*module))) << text;
  auto fn = module->lookupSymbol<func::FuncOp>("train_step");
  ASSERT_TRUE(fn);

  std::mt19937_64 rng(std::hash<std::string>()(c.name));
  std::map<std::string, Tensor> values;
  auto randomTensor = [&](const std::vector<int64_t> &shape, double lo, double hi) {
    Tensor t;
    t.shape = shape;
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.f.push_back(u(rng));
    return t;
  };
  for (const Param &p : c.params)
    values[p.name] = randomTensor(p.shape, p.lo, p.hi);
  Tensor r = randomTensor(c.outShape, -1, 1);

  // Arguments of train_step are the parameters (by name); the rest stay weights.
  auto run = [&](std::vector<Tensor> &results) {
    std::vector<Tensor> args;
    std::map<std::string, Tensor> weights{{"r", r}};
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      args.push_back(values.at(ortc::argName(fn, i)));
    for (auto &[n, v] : values)
      weights[n] = v;
    std::string err;
    bool ok = ortc::evaluate<double>(fn, args, weights, results, err);
    EXPECT_TRUE(ok) << err;
    return ok;
  };
  std::vector<Tensor> results;
  ASSERT_TRUE(run(results));
  ASSERT_EQ(fn.getNumResults(), c.params.size() + 1) << "every float input needs a gradient";
  double worst = 0;
  for (unsigned k = 1; k < fn.getNumResults(); ++k) {
    std::string name = ortc::resultName(fn, k);
    const Tensor &grad = results[k];
    Tensor &x = values[name];
    for (int64_t i = 0; i < x.numel(); ++i) {
      double h = 1e-6 * std::max(1.0, std::abs(x.f[i])), saved = x.f[i];
      std::vector<Tensor> plus, minus;
      x.f[i] = saved + h;
      ASSERT_TRUE(run(plus));
      x.f[i] = saved - h;
      ASSERT_TRUE(run(minus));
      x.f[i] = saved;
      double fd = (plus[0].f[0] - minus[0].f[0]) / (2 * h);
      double err = std::abs(fd - grad.f[i]) / std::max(1.0, std::abs(fd));
      worst = std::max(worst, err);
      ASSERT_LT(err, 1e-6) << c.name << ": d loss / d " << name << "[" << i
                           << "]: rule " << grad.f[i] << ", finite difference " << fd;
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", worst);
  RecordProperty("max_error", buf);
}

std::vector<int64_t> randomShape(std::mt19937 &rng, int minRank = 1) {
  std::uniform_int_distribution<int> rank(minRank, 3), dim(1, 4);
  std::vector<int64_t> s(rank(rng));
  for (auto &d : s)
    d = dim(rng);
  return s;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  std::mt19937 rng(7);
  struct Unary {
    const char *op;
    double lo, hi;
  };
  for (Unary u : {Unary{"neg", -1, 1}, {"sin", -3, 3}, {"cos", -3, 3}, {"exp", -1, 1}, {"log", 0.5, 2}, {"sqrt", 0.5, 2},
                  {"erf", -1, 1}, {"tanh", -1, 1}, {"sigmoid", -2, 2}, {"relu", -1, 1},
                  {"abs", -1, 1}, {"gelu", -2, 2}}) {
    for (int v = 0; v < 2; ++v) {
      auto s = randomShape(rng);
      out.push_back({std::string(u.op) + "_" + std::to_string(v), {{"a", s, u.lo, u.hi}},
                     "  %y = ortc." + std::string(u.op) + " %a : " + typeOf(s), s});
    }
  }
  {
    auto s = randomShape(rng);
    out.push_back({"gelu_tanh", {{"a", s, -2, 2}},
                   "  %y = ortc.gelu %a {tanh = true} : " + typeOf(s), s});
    out.push_back({"scale", {{"a", s, -2, 2}},
                   "  %y = ortc.scale %a {factor = 0.3 : f64} : " + typeOf(s), s});
    out.push_back({"clip", {{"a", s, -2, 2}},
                   "  %y = ortc.clip %a {max = 1.0 : f64, min = -0.5 : f64} : " + typeOf(s), s});
  }
  for (const char *op : {"add", "sub", "mul", "div", "pow", "min", "max"}) {
    auto s = randomShape(rng);
    double lo = std::string(op) == "pow" || std::string(op) == "div" ? 0.5 : -1;
    out.push_back({std::string(op), {{"a", s, lo, 2}, {"b", s, lo, 2}},
                   "  %y = ortc." + std::string(op) + " %a, %b : " + typeOf(s), s});
  }
  // Broadcasting: b [1,C] and [C] against a [N,C].
  out.push_back({"add_broadcast", {{"a", {3, 4}}, {"b", {4}}},
                 "  %bb = ortc.broadcast_to %b : tensor<4xf64> -> tensor<3x4xf64>\n"
                 "  %y = ortc.add %a, %bb : tensor<3x4xf64>",
                 {3, 4}});
  out.push_back({"mul_broadcast_keepdim", {{"a", {2, 3, 4}}, {"b", {2, 1, 4}}},
                 "  %bb = ortc.broadcast_to %b : tensor<2x1x4xf64> -> tensor<2x3x4xf64>\n"
                 "  %y = ortc.mul %a, %bb : tensor<2x3x4xf64>",
                 {2, 3, 4}});
  out.push_back({"select", {{"a", {3, 4}}, {"b", {3, 4}}},
                 "  %z = ortc.constant dense<0.0> : tensor<3x4xf64>\n"
                 "  %c = ortc.greater %a, %z : tensor<3x4xf64> -> tensor<3x4xi1>\n"
                 "  %y = ortc.select %c, %a, %b : tensor<3x4xi1>, tensor<3x4xf64>",
                 {3, 4}});
  out.push_back({"reshape", {{"a", {2, 6}}},
                 "  %y = ortc.reshape %a : tensor<2x6xf64> -> tensor<3x2x2xf64>", {3, 2, 2}});
  out.push_back({"transpose", {{"a", {2, 3, 4}}},
                 "  %y = ortc.transpose %a, [2, 0, 1] : tensor<2x3x4xf64> -> tensor<4x2x3xf64>",
                 {4, 2, 3}});
  out.push_back({"concat", {{"a", {2, 3}}, {"b", {2, 2}}},
                 "  %y = ortc.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf64>, tensor<2x2xf64>) -> tensor<2x5xf64>",
                 {2, 5}});
  out.push_back({"slice_strided", {{"a", {5, 6}}},
                 "  %y = ortc.slice %a {starts = array<i64: 1, 5>, sizes = array<i64: 2, 3>, steps = array<i64: 2, -2>} : tensor<5x6xf64> -> tensor<2x3xf64>",
                 {2, 3}});
  out.push_back({"pad", {{"a", {2, 3}}},
                 "  %y = ortc.pad %a {pads = array<i64: 1, 0, 0, 2>, value = 0.5 : f64} : tensor<2x3xf64> -> tensor<3x5xf64>",
                 {3, 5}});
  out.push_back({"gather_repeated", {{"a", {5, 3}}},
                 "  %i = ortc.constant dense<[[0, 2], [2, -1]]> : tensor<2x2xi64>\n"
                 "  %y = ortc.gather %a, %i {axis = 0 : i64} : (tensor<5x3xf64>, tensor<2x2xi64>) -> tensor<2x2x3xf64>",
                 {2, 2, 3}});
  out.push_back({"gather_axis1", {{"a", {2, 4}}},
                 "  %i = ortc.constant dense<[3, 1, 3]> : tensor<3xi64>\n"
                 "  %y = ortc.gather %a, %i {axis = 1 : i64} : (tensor<2x4xf64>, tensor<3xi64>) -> tensor<2x3xf64>",
                 {2, 3}});
  for (const char *r : {"reduce_sum", "reduce_mean", "reduce_max"}) {
    out.push_back({std::string(r) + "_keep", {{"a", {2, 3, 4}}},
                   "  %y = ortc." + std::string(r) +
                       " %a {axes = array<i64: 0, 2>} : tensor<2x3x4xf64> -> tensor<1x3x1xf64>",
                   {1, 3, 1}});
    out.push_back({std::string(r) + "_drop", {{"a", {3, 5}}},
                   "  %y = ortc." + std::string(r) +
                       " %a {axes = array<i64: 1>, keepdims = false} : tensor<3x5xf64> -> tensor<3xf64>",
                   {3}});
  }
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      std::vector<int64_t> sa = ta ? std::vector<int64_t>{2, 4, 3} : std::vector<int64_t>{2, 3, 4};
      std::vector<int64_t> sb = tb ? std::vector<int64_t>{2, 5, 4} : std::vector<int64_t>{2, 4, 5};
      out.push_back({"matmul_t" + std::to_string(ta) + std::to_string(tb),
                     {{"a", sa}, {"b", sb}},
                     "  %y = ortc.matmul %a, %b {trans_a = " + std::string(ta ? "true" : "false") +
                         ", trans_b = " + (tb ? "true" : "false") + "} : " + typeOf(sa) + ", " +
                         typeOf(sb) + " -> tensor<2x3x5xf64>",
                     {2, 3, 5}});
    }
  out.push_back({"conv2d_bias_stride_pad_group",
                 {{"x", {2, 4, 5, 5}}, {"w", {6, 2, 3, 3}}, {"b", {6}}},
                 "  %y = ortc.conv %x, %w, %b {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x5x5xf64>, tensor<6x2x3x3xf64>, tensor<6xf64>) -> tensor<2x6x3x3xf64>",
                 {2, 6, 3, 3}});
  out.push_back({"conv1d_dilated", {{"x", {1, 2, 7}}, {"w", {3, 2, 2}}},
                 "  %y = ortc.conv %x, %w {dilations = array<i64: 2>, group = 1 : i64, pads = array<i64: 0, 1>, strides = array<i64: 1>} : (tensor<1x2x7xf64>, tensor<3x2x2xf64>) -> tensor<1x3x6xf64>",
                 {1, 3, 6}});
  // conv_grad_input is also ONNX ConvTranspose: dy and w both get gradients. The 6x6
  // result extends one row/column past the last window (output_padding 1).
  out.push_back({"conv_grad_input_stride_pad_group_outpad",
                 {{"d", {2, 4, 3, 3}}, {"w", {4, 3, 3, 3}}},
                 "  %y = ortc.conv_grad_input %d, %w {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x4x3x3xf64>, tensor<4x3x3x3xf64>) -> tensor<2x6x6x6xf64>",
                 {2, 6, 6, 6}});
  out.push_back({"conv_grad_input_1d_dilated", {{"d", {1, 3, 4}}, {"w", {3, 2, 2}}},
                 "  %y = ortc.conv_grad_input %d, %w {dilations = array<i64: 2>, group = 1 : i64, pads = array<i64: 0, 1>, strides = array<i64: 1>} : (tensor<1x3x4xf64>, tensor<3x2x2xf64>) -> tensor<1x2x5xf64>",
                 {1, 2, 5}});
  out.push_back({"max_pool", {{"x", {2, 2, 5, 5}}},
                 "  %y = ortc.max_pool %x {ceil_mode = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<2x2x5x5xf64> -> tensor<2x2x3x3xf64>",
                 {2, 2, 3, 3}});
  out.push_back({"avg_pool_pad", {{"x", {1, 2, 4, 4}}},
                 "  %y = ortc.avg_pool %x {count_include_pad = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<1x2x4x4xf64> -> tensor<1x2x2x2xf64>",
                 {1, 2, 2, 2}});
  out.push_back({"avg_pool_nopad", {{"x", {1, 3, 4, 4}}},
                 "  %y = ortc.avg_pool %x {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x3x4x4xf64> -> tensor<1x3x2x2xf64>",
                 {1, 3, 2, 2}});
  out.push_back({"batch_norm_train", {{"x", {3, 2, 2, 2}}, {"s", {2}, 0.5, 1.5}, {"b", {2}}},
                 "  %rm = ortc.constant dense<0.0> : tensor<2xf64>\n"
                 "  %rv = ortc.constant dense<1.0> : tensor<2xf64>\n"
                 "  %y, %m, %v = ortc.batch_norm_train %x, %s, %b, %rm, %rv {epsilon = 1.0e-5 : f64, momentum = 0.9 : f64} : (tensor<3x2x2x2xf64>, tensor<2xf64>, tensor<2xf64>, tensor<2xf64>, tensor<2xf64>) -> (tensor<3x2x2x2xf64>, tensor<2xf64>, tensor<2xf64>)",
                 {3, 2, 2, 2}});
  // Inference form: statistics frozen (constants), x, scale and bias get gradients.
  out.push_back({"batch_norm_infer", {{"x", {3, 2, 2, 2}}, {"s", {2}, 0.5, 1.5}, {"b", {2}}},
                 "  %rm = ortc.constant dense<[0.3, -0.2]> : tensor<2xf64>\n"
                 "  %rv = ortc.constant dense<[0.7, 1.6]> : tensor<2xf64>\n"
                 "  %y = ortc.batch_norm_infer %x, %s, %b, %rm, %rv {epsilon = 1.0e-5 : f64} : (tensor<3x2x2x2xf64>, tensor<2xf64>, tensor<2xf64>, tensor<2xf64>, tensor<2xf64>) -> tensor<3x2x2x2xf64>",
                 {3, 2, 2, 2}});
  // Rounding passes no gradient: zero, as the finite differences away from the steps.
  out.push_back({"floor_plus_a", {{"a", {2, 3}, 0.1, 0.9}},
                 "  %f = ortc.floor %a : tensor<2x3xf64>\n"
                 "  %y = ortc.add %f, %a : tensor<2x3xf64>",
                 {2, 3}});
  out.push_back({"layer_norm", {{"x", {2, 3, 4}}, {"s", {4}}, {"b", {4}}},
                 "  %y, %m, %i = ortc.layer_norm %x, %s, %b {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x3x4xf64>, tensor<4xf64>, tensor<4xf64>) -> (tensor<2x3x4xf64>, tensor<2x3x1xf64>, tensor<2x3x1xf64>)",
                 {2, 3, 4}});
  out.push_back({"layer_norm_2d_nobias", {{"x", {2, 3, 4}}, {"s", {3, 4}}},
                 "  %y, %m, %i = ortc.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x3x4xf64>, tensor<3x4xf64>) -> (tensor<2x3x4xf64>, tensor<2x1x1xf64>, tensor<2x1x1xf64>)",
                 {2, 3, 4}});
  out.push_back({"softmax_mid_axis", {{"x", {2, 3, 4}}},
                 "  %y = ortc.softmax %x {axis = 1 : i64} : tensor<2x3x4xf64>", {2, 3, 4}});
  out.push_back({"log_softmax", {{"x", {3, 5}}},
                 "  %y = ortc.log_softmax %x {axis = 1 : i64} : tensor<3x5xf64>", {3, 5}});
  out.push_back({"dropout", {{"x", {4, 8}}},
                 "  %seed = ortc.constant dense<42> : tensor<i64>\n"
                 "  %y = ortc.dropout %x, %seed {key = 3 : i64, ratio = 0.3 : f64} : tensor<4x8xf64>, tensor<i64>",
                 {4, 8}});
  out.push_back({"softmax_cross_entropy", {{"x", {4, 5}}},
                 "  %l = ortc.constant dense<[1, 0, 4, 1]> : tensor<4xi64>\n"
                 "  %y = ortc.softmax_cross_entropy %x, %l : (tensor<4x5xf64>, tensor<4xi64>) -> tensor<f64>",
                 {}});
  out.push_back({"softmax_cross_entropy_ignore_sum", {{"x", {4, 5}}},
                 "  %l = ortc.constant dense<[1, -100, 4, 1]> : tensor<4xi64>\n"
                 "  %y = ortc.softmax_cross_entropy %x, %l {ignore_index = -100 : i64, reduction = \"sum\"} : (tensor<4x5xf64>, tensor<4xi64>) -> tensor<f64>",
                 {}});
  out.push_back({"cast_f32_roundtrip", {{"a", {3}}},
                 "  %c = ortc.cast %a : tensor<3xf64> -> tensor<3xf32>\n"
                 "  %y = ortc.cast %c : tensor<3xf32> -> tensor<3xf64>",
                 {3}});
  // Products: linear in each element, so the difference quotient is exact; zeros
  // (parameters drawn from [0, 0]) need the product of the others, not prod / x.
  out.push_back({"reduce_prod_keep", {{"a", {2, 3, 4}, 0.5, 1.5}},
                 "  %y = ortc.reduce_prod %a {axes = array<i64: 0, 2>} : tensor<2x3x4xf64> -> tensor<1x3x1xf64>",
                 {1, 3, 1}});
  out.push_back({"reduce_prod_drop", {{"a", {3, 5}, 0.5, 1.5}},
                 "  %y = ortc.reduce_prod %a {axes = array<i64: 1>, keepdims = false} : tensor<3x5xf64> -> tensor<3xf64>",
                 {3}});
  out.push_back({"reduce_prod_one_zero", {{"a", {2, 3}, 0.5, 1.5}, {"z", {2, 1}, 0, 0}},
                 "  %x = ortc.concat %z, %a {axis = 1 : i64} : (tensor<2x1xf64>, tensor<2x3xf64>) -> tensor<2x4xf64>\n"
                 "  %y = ortc.reduce_prod %x {axes = array<i64: 1>, keepdims = false} : tensor<2x4xf64> -> tensor<2xf64>",
                 {2}});
  out.push_back({"reduce_prod_two_zeros", {{"a", {3}, 0.5, 1.5}, {"z", {2}, 0, 0}},
                 "  %x = ortc.concat %a, %z {axis = 0 : i64} : (tensor<3xf64>, tensor<2xf64>) -> tensor<5xf64>\n"
                 "  %y = ortc.reduce_prod %x {axes = array<i64: 0>} : tensor<5xf64> -> tensor<1xf64>",
                 {1}});
  out.push_back({"topk_largest", {{"a", {3, 5}}},
                 "  %y, %i = ortc.topk %a {k = 2 : i64, axis = 1 : i64} : tensor<3x5xf64> -> tensor<3x2xf64>, tensor<3x2xi64>",
                 {3, 2}});
  out.push_back({"topk_smallest_axis0", {{"a", {4, 3}}},
                 "  %y, %i = ortc.topk %a {k = 3 : i64, axis = 0 : i64, largest = false} : tensor<4x3xf64> -> tensor<3x3xf64>, tensor<3x3xi64>",
                 {3, 3}});
  out.push_back({"cumsum", {{"a", {3, 4}}},
                 "  %y = ortc.cumsum %a {axis = 1 : i64} : tensor<3x4xf64>", {3, 4}});
  out.push_back({"cumsum_exclusive_reverse", {{"a", {4, 2, 3}}},
                 "  %y = ortc.cumsum %a {axis = 0 : i64, exclusive = true, reverse = true} : tensor<4x2x3xf64>",
                 {4, 2, 3}});
  out.push_back({"gather_elements_repeated", {{"a", {2, 4}}},
                 "  %i = ortc.constant dense<[[0, 2, -1], [1, 1, 0]]> : tensor<2x3xi64>\n"
                 "  %y = ortc.gather_elements %a, %i {axis = 1 : i64} : (tensor<2x4xf64>, tensor<2x3xi64>) -> tensor<2x3xf64>",
                 {2, 3}});
  out.push_back({"scatter_elements_none", {{"d", {3, 4}}, {"u", {2, 4}}},
                 "  %i = ortc.constant dense<[[0, 1, 2, 0], [2, 2, 0, 1]]> : tensor<2x4xi64>\n"
                 "  %y = ortc.scatter_elements %d, %i, %u {axis = 0 : i64} : (tensor<3x4xf64>, tensor<2x4xi64>, tensor<2x4xf64>) -> tensor<3x4xf64>",
                 {3, 4}});
  out.push_back({"scatter_elements_add_repeated", {{"d", {3, 4}}, {"u", {2, 3}}},
                 "  %i = ortc.constant dense<[[0, 1, 0], [2, 1, -3]]> : tensor<2x3xi64>\n"
                 "  %y = ortc.scatter_elements %d, %i, %u {axis = 1 : i64, reduction = \"add\"} : (tensor<3x4xf64>, tensor<2x3xi64>, tensor<2x3xf64>) -> tensor<3x4xf64>",
                 {3, 4}});
  // A value used twice (residual) must get the sum of both gradients.
  out.push_back({"residual_reuse", {{"a", {3, 3}}, {"w", {3, 3}}},
                 "  %m = ortc.matmul %a, %w : tensor<3x3xf64>, tensor<3x3xf64> -> tensor<3x3xf64>\n"
                 "  %t = ortc.tanh %m : tensor<3x3xf64>\n"
                 "  %y = ortc.add %t, %a : tensor<3x3xf64>",
                 {3, 3}});
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllRules, GradientCheck, ::testing::ValuesIn(cases()),
                         [](const auto &info) { return info.param.name; });

} // namespace
