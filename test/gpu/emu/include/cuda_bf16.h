// The emulated device's bf16 type (emu/half.h).
#include "emu/half.h"
