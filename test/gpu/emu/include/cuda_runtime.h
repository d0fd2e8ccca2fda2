//===- cuda_runtime.h - The CUDA front of the emulated device --*- C++ -*-===//
//
// Why: the generated .cu file includes <cuda_runtime.h>; with the emulator's
// include folder first, it gets warp size 32, the *_sync warp intrinsics with
// their masks, and the runtime API of emu/api.h.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_EMU_CUDA_RUNTIME_H
#define ORTC_EMU_CUDA_RUNTIME_H

#define EMU_WARP_SIZE 32
#define EMU_HIP_FRONT false
#define __CUDACC__ 1
#include "emu/api.h"
#include "emu/device.h"

constexpr int warpSize = 32;

template <typename T> inline T __shfl_sync(unsigned mask, T v, int lane, int width = 32) {
  return emu::shuffle(emu::ShflIdx, mask, v, lane, width);
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  return emu::shuffle(emu::ShflUp, mask, v, static_cast<int>(d), width);
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  return emu::shuffle(emu::ShflDown, mask, v, static_cast<int>(d), width);
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
  return emu::shuffle(emu::ShflXor, mask, v, m, width);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return static_cast<unsigned>(emu::emu_warp(emu::Ballot, pred != 0, 4, 0, 32, mask));
}
inline int __any_sync(unsigned mask, int pred) {
  return static_cast<int>(emu::emu_warp(emu::Any, pred != 0, 4, 0, 32, mask));
}
inline int __all_sync(unsigned mask, int pred) {
  return static_cast<int>(emu::emu_warp(emu::All, pred != 0, 4, 0, 32, mask));
}
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::emu_warp(emu::SyncWarp, 0, 4, 0, 32, mask); }

#endif // ORTC_EMU_CUDA_RUNTIME_H
