// The emulated device's hip_bfloat16 (emu/half.h), a class as in ROCm.
#ifndef ORTC_EMU_HIP_BFLOAT16_H
#define ORTC_EMU_HIP_BFLOAT16_H
#include "emu/half.h"
typedef __nv_bfloat16 hip_bfloat16;
#endif
