//===- hip_runtime.h - The HIP front of the emulated device ----*- C++ -*-===//
//
// Why: the generated .hip file includes <hip/hip_runtime.h>; with the emulator's
// include folder first, it gets the 64-lane wavefront of CDNA (or the 32 lanes of an
// RDNA arch: emu_cc.py defines EMU_WARP_SIZE 32 and __gfx1100__ for one), HIP's
// mask-free shuffles (they act on the lanes that are active) and its 64-bit ballot.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_EMU_HIP_RUNTIME_H
#define ORTC_EMU_HIP_RUNTIME_H

#ifndef EMU_WARP_SIZE
#define EMU_WARP_SIZE 64
#endif
#define EMU_HIP_FRONT true
#define __HIPCC__ 1
#include "emu/api.h"
#include "emu/device.h"

constexpr int warpSize = EMU_WARP_SIZE;

// Mask 0: the lanes of the wavefront that have not exited.
template <typename T> inline T __shfl(T v, int lane, int width = EMU_WARP_SIZE) {
  return emu::shuffle(emu::ShflIdx, 0, v, lane, width);
}
template <typename T> inline T __shfl_up(T v, unsigned d, int width = EMU_WARP_SIZE) {
  return emu::shuffle(emu::ShflUp, 0, v, static_cast<int>(d), width);
}
template <typename T> inline T __shfl_down(T v, unsigned d, int width = EMU_WARP_SIZE) {
  return emu::shuffle(emu::ShflDown, 0, v, static_cast<int>(d), width);
}
template <typename T> inline T __shfl_xor(T v, int m, int width = EMU_WARP_SIZE) {
  return emu::shuffle(emu::ShflXor, 0, v, m, width);
}
inline unsigned long long __ballot(int pred) { return emu::emu_warp(emu::Ballot, pred != 0, 4, 0, EMU_WARP_SIZE, 0); }
inline int __any(int pred) { return static_cast<int>(emu::emu_warp(emu::Any, pred != 0, 4, 0, EMU_WARP_SIZE, 0)); }
inline int __all(int pred) { return static_cast<int>(emu::emu_warp(emu::All, pred != 0, 4, 0, EMU_WARP_SIZE, 0)); }

#endif // ORTC_EMU_HIP_RUNTIME_H
