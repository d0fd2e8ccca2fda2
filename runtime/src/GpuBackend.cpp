//===- GpuBackend.cpp - The runtime's view of a GPU artifact -------------===//
#include "GpuBackend.h"

#include <dlfcn.h>

namespace ortc {

bool GpuApi::resolve(void *handle, std::string &missing) {
  auto get = [&](auto &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (!fn && missing.empty())
      missing = name;
  };
  get(error, "ortc_gpu_error");
  get(init, "ortc_gpu_init");
  get(malloc, "ortc_gpu_malloc");
  get(free, "ortc_gpu_free");
  get(upload, "ortc_gpu_upload");
  get(download, "ortc_gpu_download");
  get(memset, "ortc_gpu_memset");
  get(streamCreate, "ortc_gpu_stream_create");
  get(streamDestroy, "ortc_gpu_stream_destroy");
  get(sync, "ortc_gpu_sync");
  get(captureBegin, "ortc_gpu_capture_begin");
  get(captureEnd, "ortc_gpu_capture_end");
  get(graphLaunch, "ortc_gpu_graph_launch");
  get(graphDestroy, "ortc_gpu_graph_destroy");
  return missing.empty();
}

bool gpuArchRuns(const std::string &target, const std::string &built, const std::string &device) {
  if (target != "cuda")
    return built == device;
  // "sm_86" -> major 8, minor 6; "sm_90a" keeps its suffix out of the comparison.
  auto parse = [](const std::string &a, int &major, int &minor) {
    if (a.size() < 5 || a.compare(0, 3, "sm_") != 0 || !isdigit(a[3]) || !isdigit(a[4]))
      return false;
    major = a[3] - '0';
    minor = a[4] - '0';
    if (a.size() > 5 && isdigit(a[5])) { // sm_100 and later
      major = major * 10 + minor;
      minor = a[5] - '0';
    }
    return true;
  };
  int bM, bm, dM, dm;
  if (built.compare(0, 8, "compute_") == 0) // PTX: the driver compiles it for this GPU or a later one
    return parse("sm_" + built.substr(8), bM, bm) && parse(device, dM, dm) && (dM > bM || (dM == bM && dm >= bm));
  return parse(built, bM, bm) && parse(device, dM, dm) && bM == dM && bm <= dm;
}

std::string gpuKind(const std::string &target) {
  return target == "cuda" ? "an NVIDIA GPU" : "an AMD GPU";
}

} // namespace ortc
