// All op families of the ortc dialect, generated together.
#ifndef ORTC_OPS_TD
#define ORTC_OPS_TD

include "compiler/Dialect/Ortc/Core.td"
include "compiler/Dialect/Ortc/Elementwise.td"
include "compiler/Dialect/Ortc/Shape.td"
include "compiler/Dialect/Ortc/NN.td"
include "compiler/Dialect/Ortc/Training.td"
include "compiler/Dialect/Ortc/Kernel.td"

#endif // ORTC_OPS_TD
