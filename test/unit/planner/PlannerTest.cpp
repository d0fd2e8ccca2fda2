//===- PlannerTest.cpp - ortc-memory-plan on random graphs ---------------===//
//
// Random DAGs of elementwise ops, reductions, broadcasts and reshape views are
// planned, then checked two ways:
//  1. brute force: no two tensors whose arena ranges overlap are ever live at the
//     same time (except an elementwise op writing over an operand that dies there);
//  2. the planned program, executed with its real arena offsets (every tensor read
//     from and written to the one arena), computes what the unplanned program
//     computes in the reference evaluator.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "compiler/Eval/Evaluator.h"
#include "compiler/Pipeline/Registration.h"
#include "passes/memory_planning/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

using namespace mlir;

namespace {

const int64_t R = 4, C = 6; // every tensor is [R,C], [R,1] or [24]

std::string ty(const std::vector<int64_t> &s) {
  std::string t = "tensor<";
  for (int64_t d : s)
    t += std::to_string(d) + "x";
  return t + "f32>";
}

/// A random function @train_step(%a, %b) -> (loss, out) in the ortc dialect.
std::string randomGraph(std::mt19937 &rng, int numOps) {
  std::ostringstream os;
  os << "func.func @train_step(%v0: tensor<4x6xf32> {ortc.name = \"a\"}, %v1: tensor<4x6xf32> "
        "{ortc.name = \"b\"}) -> (tensor<f32> {ortc.name = \"loss\", ortc.role = \"loss\"}, "
        "tensor<4x6xf32> {ortc.name = \"out\", ortc.role = \"output\"}) {\n";
  std::vector<int> full{0, 1}; // values of shape [R,C]
  int next = 2;
  auto pick = [&]() { return full[std::uniform_int_distribution<size_t>(0, full.size() - 1)(rng)]; };
  for (int i = 0; i < numOps; ++i) {
    int kind = std::uniform_int_distribution<int>(0, 6)(rng);
    int a = pick(), b = pick(), v = next++;
    switch (kind) {
    case 0: case 1: case 2: {
      const char *op = kind == 0 ? "add" : kind == 1 ? "mul" : "sub";
      os << "  %v" << v << " = ortc." << op << " %v" << a << ", %v" << b << " : " << ty({R, C}) << "\n";
      break;
    }
    case 3:
      os << "  %v" << v << " = ortc.tanh %v" << a << " : " << ty({R, C}) << "\n";
      break;
    case 4: { // reduce then broadcast back
      int r = v;
      v = next++;
      os << "  %v" << r << " = ortc.reduce_sum %v" << a << " {axes = array<i64: 1>} : "
         << ty({R, C}) << " -> " << ty({R, 1}) << "\n";
      os << "  %v" << v << " = ortc.broadcast_to %v" << r << " : " << ty({R, 1}) << " -> "
         << ty({R, C}) << "\n";
      break;
    }
    case 5: { // a reshape view and back
      int r = v;
      v = next++;
      os << "  %v" << r << " = ortc.reshape %v" << a << " : " << ty({R, C}) << " -> "
         << ty({R * C}) << "\n";
      os << "  %v" << v << " = ortc.reshape %v" << r << " : " << ty({R * C}) << " -> "
         << ty({R, C}) << "\n";
      break;
    }
    default:
      os << "  %v" << v << " = ortc.neg %v" << a << " : " << ty({R, C}) << "\n";
    }
    full.push_back(v);
  }
  int last = full.back(), other = pick();
  os << "  %s = ortc.add %v" << last << ", %v" << other << " : " << ty({R, C}) << "\n";
  os << "  %loss = ortc.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : "
     << ty({R, C}) << " -> tensor<f32>\n";
  os << "  return %loss, %v" << pick() << " : tensor<f32>, " << ty({R, C}) << "\n}\n";
  return os.str();
}

/// Executes a planned function with every tensor at its planned place.
struct ArenaMachine {
  std::vector<float> arena;
  std::map<unsigned, std::vector<float>> args, outputs;

  float *at(Value v) {
    ortc::Placement p = ortc::placementOf(v);
    switch (p.kind) {
    case ortc::Placement::Arena:
      return arena.data() + p.offset / sizeof(float);
    case ortc::Placement::Argument:
      return args[p.index].data();
    case ortc::Placement::Output:
      return outputs[p.index].data();
    default:
      return nullptr;
    }
  }
  static int64_t numel(Value v) {
    int64_t n = 1;
    for (int64_t d : cast<RankedTensorType>(v.getType()).getShape())
      n *= d;
    return n;
  }

  void run(func::FuncOp fn) {
    for (Operation &op : fn.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
          outputs[i].resize(numel(v));
          float *src = at(v);
          if (src != outputs[i].data())
            std::copy(src, src + numel(v), outputs[i].data());
        }
        return;
      }
      if (isa<ortc::ReshapeOp>(op))
        continue;
      for (Value r : op.getResults())
        if (ortc::placementOf(r).kind == ortc::Placement::Output)
          outputs[ortc::placementOf(r).index].resize(numel(r));
      Value y = op.getResult(0);
      float *out = at(y);
      int64_t n = numel(y);
      auto in = [&](unsigned i) { return at(op.getOperand(i)); };
      // Read every input before writing (an in-place output may alias one).
      std::vector<float> a(in(0), in(0) + numel(op.getOperand(0)));
      std::vector<float> b;
      if (op.getNumOperands() > 1)
        b.assign(in(1), in(1) + numel(op.getOperand(1)));
      if (isa<ortc::AddOp>(op)) for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      else if (isa<ortc::MulOp>(op)) for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
      else if (isa<ortc::SubOp>(op)) for (int64_t i = 0; i < n; ++i) out[i] = a[i] - b[i];
      else if (isa<ortc::TanhOp>(op)) for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(a[i]);
      else if (isa<ortc::NegOp>(op)) for (int64_t i = 0; i < n; ++i) out[i] = -a[i];
      else if (isa<ortc::BroadcastToOp>(op)) for (int64_t i = 0; i < n; ++i) out[i] = a[i / C];
      else if (auto r = dyn_cast<ortc::ReduceSumOp>(op)) {
        if (n == 1) {
          double s = 0;
          for (float x : a) s += x;
          out[0] = s;
        } else {
          for (int64_t i = 0; i < R; ++i) {
            double s = 0;
            for (int64_t j = 0; j < C; ++j) s += a[i * C + j];
            out[i] = s;
          }
        }
      } else {
        FAIL() << "unexpected op";
      }
    }
  }
};

class Planner : public ::testing::TestWithParam<int> {};

TEST_P(Planner, NoOverlapAndSameResults) {
  std::mt19937 rng(GetParam());
  std::string text = randomGraph(rng, 6 + GetParam() % 25);
  DialectRegistry registry;
  ortc::registerAllDialects(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  auto unplanned = parseSourceString<ModuleOp>(text, &ctx);
  auto planned = parseSourceString<ModuleOp>(text, &ctx);
  ASSERT_TRUE(unplanned && planned) << text;
  PassManager pm(&ctx);
  pm.addPass(ortc::createMemoryPlan());
  ASSERT_TRUE(succeeded(pm.run(*planned)));
  auto fn = planned->lookupSymbol<func::FuncOp>("train_step");
  int64_t arenaBytes = fn->getAttrOfType<IntegerAttr>("ortc.arena_bytes").getInt();
  int64_t lower = fn->getAttrOfType<IntegerAttr>("ortc.arena_lower_bound").getInt();
  EXPECT_LE(lower, arenaBytes);

  // 1. Brute force over every pair of arena tensors.
  struct Life {
    int64_t off, size, def, last;
    bool elementwiseDef;
    Operation *defOp;
  };
  std::vector<Operation *> order;
  for (Operation &op : fn.getBody().front())
    order.push_back(&op);
  auto pos = [&](Operation *op) { return std::find(order.begin(), order.end(), op) - order.begin(); };
  std::map<Value, int64_t, std::function<bool(Value, Value)>> lastUse(
      [](Value a, Value b) { return a.getAsOpaquePointer() < b.getAsOpaquePointer(); });
  std::function<int64_t(Value)> lastOf = [&](Value v) -> int64_t {
    int64_t l = -1;
    for (Operation *u : v.getUsers())
      l = std::max<int64_t>(l, isa<ortc::ReshapeOp>(u) ? lastOf(u->getResult(0)) : pos(u));
    return l;
  };
  std::vector<Life> lives;
  for (Operation *op : order)
    for (Value r : op->getResults()) {
      ortc::Placement p = ortc::placementOf(r);
      if (p.kind != ortc::Placement::Arena || isa<ortc::ReshapeOp>(op))
        continue;
      int64_t bytes = ortc::byteSize(r.getType());
      EXPECT_LE(p.offset + bytes, arenaBytes);
      lives.push_back({p.offset, bytes, pos(op), std::max(lastOf(r), pos(op)),
                       op->hasTrait<OpTrait::Elementwise>(), op});
    }
  for (size_t i = 0; i < lives.size(); ++i)
    for (size_t j = i + 1; j < lives.size(); ++j) {
      const Life &x = lives[i], &y = lives[j];
      bool memOverlap = x.off < y.off + y.size && y.off < x.off + x.size;
      bool timeOverlap = x.def <= y.last && y.def <= x.last;
      // In place: y is produced by an elementwise op at the very step x dies.
      bool inPlace = y.elementwiseDef && x.last == y.def;
      EXPECT_FALSE(memOverlap && timeOverlap && !inPlace)
          << "tensors defined at " << x.def << " and " << y.def << " share arena bytes while live\n"
          << text;
    }

  // 2. Same results as the unplanned program.
  std::uniform_real_distribution<float> u(-1, 1);
  ortc::EvalTensor<float> a, b;
  a.shape = b.shape = {R, C};
  for (int i = 0; i < R * C; ++i) {
    a.f.push_back(u(rng));
    b.f.push_back(u(rng));
  }
  std::vector<ortc::EvalTensor<float>> want;
  std::string err;
  ASSERT_TRUE(ortc::evaluate<float>(unplanned->lookupSymbol<func::FuncOp>("train_step"),
                                    {a, b}, {}, want, err))
      << err;
  ArenaMachine m;
  m.arena.assign(arenaBytes / sizeof(float) + 1, NAN);
  m.args[0] = a.f;
  m.args[1] = b.f;
  m.run(fn);
  for (unsigned i = 0; i < want.size(); ++i)
    for (size_t k = 0; k < want[i].f.size(); ++k)
      EXPECT_NEAR(m.outputs[i][k], want[i].f[k], 1e-4 * (1 + std::abs(want[i].f[k])))
          << "result " << i << " element " << k << "\n" << text;
}

INSTANTIATE_TEST_SUITE_P(RandomGraphs, Planner, ::testing::Range(1, 61));

} // namespace
