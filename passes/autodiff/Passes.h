//===- Passes.h - The training passes ---------------------------*- C++ -*-===//
#ifndef ORTC_PASSES_AUTODIFF_PASSES_H
#define ORTC_PASSES_AUTODIFF_PASSES_H

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "mlir/Pass/Pass.h"

#include <cstdint>

namespace ortc {
#define GEN_PASS_DECL
#include "passes/autodiff/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/autodiff/Passes.h.inc"
} // namespace ortc

#endif // ORTC_PASSES_AUTODIFF_PASSES_H
