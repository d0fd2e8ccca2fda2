//===- PrebuiltKernels.h - kernel library objects built with ortc -*- C++ -*-===//
//
// Why: every CPU artifact links the float instantiations of the kernel library
// (ortc_kernels.h with ORTC_KERN_INSTANTIATE), about four seconds of compile on its
// own. ortc's build compiles that object once per --cpu level with the system C++
// compiler and carries the bytes, so a cold `ortc build` with that compiler and the
// default flags compiles only the model's own kernels.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_CODEGEN_PREBUILTKERNELS_H
#define ORTC_CODEGEN_PREBUILTKERNELS_H

#include <cstddef>
#include <string>
#include <vector>

namespace ortc {

/// One prebuilt ortc_kernels_lib.o: the --cpu level, the exact compile flags, bytes.
struct PrebuiltKernelObject {
  const char *level;
  const char *flags;
  const unsigned char *data;
  size_t size;
};

/// The first line of `c++ --version` of the compiler that built them.
extern const char *const kPrebuiltKernelCompilerVersion;

/// Every prebuilt object (empty when ortc was built without them).
const std::vector<PrebuiltKernelObject> &prebuiltKernelObjects();

} // namespace ortc

#endif // ORTC_CODEGEN_PREBUILTKERNELS_H
