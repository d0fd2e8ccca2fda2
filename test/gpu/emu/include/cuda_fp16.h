// The emulated device's fp16 type (emu/half.h).
#include "emu/half.h"
