//===- RecomputeTest.cpp - ortc-recompute's budget against brute force ----===//
//
// Random small steps (a forward of elementwise ops and GEMMs, a backward that reads
// forward values) are recomputed under memory budgets, and the pass is judged against
// brute force over every subset of its candidates (each subset planned as the pass plans
// its trials):
//  - a budget no subset meets is refused, naming the smallest arena reached;
//  - a budget the pass accepts holds: the recorded and the planned arena fit it, and the
//    operations it adds are at least the optimum's;
//  - the recomputed step computes what the original computes (reference evaluator);
//  - over all feasible budgets, the greedy pass meets most and stays near the optimum's
//    operations (the figures are printed).
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "compiler/Eval/Evaluator.h"
#include "compiler/Pipeline/Registration.h"
#include "passes/checkpointing/Passes.h"
#include "passes/memory_planning/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <sstream>

using namespace mlir;

namespace {

const int64_t R = 8, C = 16;

/// A random @train_step(%a, %b, %w, %dy): forward ops of stage "forward" over [R,C]
/// (add, mul, tanh, exp, neg, and GEMMs with the [C,C] weight), then a backward chain that
/// multiplies the incoming gradient by forward values.
std::string randomStep(std::mt19937 &rng, int forwardOps, int backwardOps) {
  const std::string t = "tensor<8x16xf32>";
  std::ostringstream os;
  os << "func.func @train_step(%a: " << t << " {ortc.name = \"a\"}, %b: " << t
     << " {ortc.name = \"b\"}, %w: tensor<16x16xf32> {ortc.name = \"w\"}, %dy: " << t
     << " {ortc.name = \"dy\"}) -> (" << t << " {ortc.name = \"g\"}, " << t
     << " {ortc.name = \"h\"}) {\n";
  std::vector<std::string> fwd{"%a", "%b"};
  auto pick = [&](const std::vector<std::string> &xs) {
    return xs[std::uniform_int_distribution<size_t>(0, xs.size() - 1)(rng)];
  };
  const std::string stage = " {ortc.stage = \"forward\"}";
  for (int i = 0; i < forwardOps; ++i) {
    std::string v = "%f" + std::to_string(i), x = pick(fwd), y = pick(fwd);
    switch (std::uniform_int_distribution<int>(0, 5)(rng)) {
    case 0:
      os << "  " << v << " = ortc.add " << x << ", " << y << stage << " : " << t << "\n";
      break;
    case 1:
      os << "  " << v << " = ortc.mul " << x << ", " << y << stage << " : " << t << "\n";
      break;
    case 2:
      os << "  " << v << " = ortc.tanh " << x << stage << " : " << t << "\n";
      break;
    case 3:
      os << "  " << v << " = ortc.exp " << x << stage << " : " << t << "\n";
      break;
    case 4:
      os << "  " << v << " = ortc.neg " << x << stage << " : " << t << "\n";
      break;
    default:
      os << "  " << v << " = ortc.matmul " << x << ", %w" << stage << " : " << t
         << ", tensor<16x16xf32> -> " << t << "\n";
    }
    fwd.push_back(v);
  }
  std::string g = "%dy";
  for (int i = 0; i < backwardOps; ++i) {
    std::string v = "%g" + std::to_string(i);
    os << "  " << v << " = ortc.mul " << g << ", " << pick(fwd)
       << " {ortc.stage = \"backward\"} : " << t << "\n";
    g = v;
  }
  os << "  return " << g << ", " << fwd.back() << " : " << t << ", " << t << "\n}\n";
  return os.str();
}

struct Outcome {
  bool ok = false;
  int64_t planned = 0, arena = 0, flops = 0;
  std::string error;
};

/// Runs ortc-recompute with `policy` (then the memory plan) on a fresh parse of `text`.
Outcome runPass(MLIRContext &ctx, const std::string &text, const std::string &policy,
                OwningOpRef<ModuleOp> *keep = nullptr) {
  Outcome o;
  auto m = parseSourceString<ModuleOp>(text, &ctx);
  ScopedDiagnosticHandler capture(&ctx, [&](Diagnostic &d) {
    o.error += d.str();
    return success();
  });
  PassManager pm(&ctx);
  ortc::RecomputeOptions opts;
  opts.policy = policy;
  opts.fusion = false;
  pm.addPass(ortc::createRecompute(opts));
  if (failed(pm.run(*m)))
    return o;
  auto fn = m->lookupSymbol<func::FuncOp>("train_step");
  o.ok = true;
  o.flops = fn->getAttrOfType<IntegerAttr>("ortc.recompute_flops").getInt();
  o.planned = fn->getAttrOfType<IntegerAttr>("ortc.recompute_planned").getInt();
  if (keep) {
    *keep = m->clone();
  }
  if (failed(ortc::planMemory(fn)))
    return o;
  o.arena = fn->getAttrOfType<IntegerAttr>("ortc.arena_bytes").getInt();
  return o;
}

std::vector<ortc::EvalTensor<double>> evaluate(func::FuncOp fn, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-0.5, 0.5);
  std::vector<ortc::EvalTensor<double>> in(4);
  for (int i = 0; i < 4; ++i) {
    in[i].shape = i == 2 ? std::vector<int64_t>{C, C} : std::vector<int64_t>{R, C};
    for (int64_t k = 0; k < in[i].shape[0] * in[i].shape[1]; ++k)
      in[i].f.push_back(u(rng));
  }
  std::vector<ortc::EvalTensor<double>> out;
  std::string err;
  EXPECT_TRUE(ortc::evaluate<double>(fn, in, {}, out, err)) << err;
  return out;
}

TEST(RecomputeBudget, AgainstBruteForce) {
  DialectRegistry registry;
  ortc::registerAllDialects(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  int feasible = 0, met = 0, refusedRight = 0;
  double worstRatio = 1, ratioSum = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    std::string text = randomStep(rng, 5 + seed % 5, 2 + seed % 4);
    auto m = parseSourceString<ModuleOp>(text, &ctx);
    ASSERT_TRUE(m) << text;
    auto fn = m->lookupSymbol<func::FuncOp>("train_step");
    std::vector<Value> cands = ortc::budgetCandidates(fn);
    ASSERT_LE(cands.size(), 12u) << text;
    // Brute force: the fewest operations that reach each arena.
    std::map<int64_t, int64_t> fewestFor; // arena -> fewest operations added
    for (uint32_t mask = 0; mask < (1u << cands.size()); ++mask) {
      std::vector<Value> chosen;
      for (size_t i = 0; i < cands.size(); ++i)
        if (mask & (1u << i))
          chosen.push_back(cands[i]);
      auto [arena, flops] = ortc::plannedWith(fn, chosen, /*fusion=*/false);
      auto it = fewestFor.find(arena);
      if (it == fewestFor.end() || flops < it->second)
        fewestFor[arena] = flops;
    }
    const int64_t smallest = fewestFor.begin()->first;
    auto optimum = [&](int64_t budget) { // fewest operations over arenas <= budget
      int64_t best = INT64_MAX;
      for (auto [arena, flops] : fewestFor)
        if (arena <= budget)
          best = std::min(best, flops);
      return best;
    };
    std::vector<ortc::EvalTensor<double>> want = evaluate(fn, seed);
    // Every arena some subset reaches is a budget, and one below the smallest.
    std::set<int64_t> budgets;
    for (auto [arena, flops] : fewestFor)
      budgets.insert(arena);
    budgets.insert(smallest - 64);
    for (int64_t budget : budgets) {
      if (budget <= 0)
        continue;
      OwningOpRef<ModuleOp> recomputed;
      Outcome o = runPass(ctx, text, "budget=" + std::to_string(budget), &recomputed);
      int64_t opt = optimum(budget);
      if (opt == INT64_MAX) {
        EXPECT_FALSE(o.ok) << "budget " << budget << " accepted, no subset meets it\n" << text;
        EXPECT_NE(o.error.find("cannot fit the budget"), std::string::npos) << o.error;
        refusedRight += !o.ok;
        continue;
      }
      ++feasible;
      if (!o.ok) {
        EXPECT_NE(o.error.find("cannot fit the budget"), std::string::npos) << o.error;
        continue;
      }
      ++met;
      EXPECT_LE(o.planned, budget) << text;
      EXPECT_LE(o.arena, budget) << text;
      EXPECT_GE(o.flops, opt) << "fewer operations than brute force's optimum?\n" << text;
      double ratio = double(o.flops + 1) / double(opt + 1);
      worstRatio = std::max(worstRatio, ratio);
      ratioSum += ratio;
      std::vector<ortc::EvalTensor<double>> got =
          evaluate(recomputed->lookupSymbol<func::FuncOp>("train_step"), seed);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(got[i].f, want[i].f) << "result " << i << " changed under budget " << budget;
    }
  }
  std::printf("feasible budgets %d: met %d (%.0f%%); operations vs brute force's optimum: mean "
              "%.2fx, worst %.2fx; infeasible ones refused: %d\n",
              feasible, met, 100.0 * met / std::max(feasible, 1), ratioSum / std::max(met, 1),
              worstRatio, refusedRight);
  // The greedy search is a heuristic: it must meet most budgets that can be met.
  EXPECT_GE(met, feasible * 6 / 10);
}

} // namespace
