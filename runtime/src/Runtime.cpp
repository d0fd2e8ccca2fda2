//===- Runtime.cpp - Artifact loading and the step executor --------------===//
//
// An artifact is checked once at load (schema, version, target, hashes, kernel
// symbols); a session then owns one buffer per persistent tensor and a single arena,
// and running a function is a walk over its kernel list.
//
//===----------------------------------------------------------------------===//
#include "ortc/runtime.h"

#include "Manifest.h"
#include "Npz.h"
#include "SchemaCheck.h"
#include "ortc/sha256.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using nlohmann::json;

namespace {
thread_local std::string lastError;

ortc_status fail(const std::string &msg) {
  lastError = msg;
  return ORTC_ERROR;
}

using Kernel = void (*)(void *const *, char *);

struct TensorDesc {
  std::string name, role, dtype;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  int64_t initOffset = -1;
};

struct Function {
  std::vector<Kernel> kernels;
  std::vector<std::string> inputs, outputs;
};

bool readAll(const std::string &path, std::string &out) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

/// 64-byte aligned zeroed storage.
struct Aligned {
  void *p = nullptr;
  size_t n = 0;
  explicit Aligned(size_t bytes) : n(bytes) {
    p = std::aligned_alloc(64, ((bytes + 63) / 64) * 64 + 64);
    if (p)
      std::memset(p, 0, ((bytes + 63) / 64) * 64 + 64);
  }
  ~Aligned() { std::free(p); }
  Aligned(const Aligned &) = delete;
};
} // namespace

constexpr int kFormatVersion = 1;

struct ortc_artifact {
  std::string dir;
  std::vector<TensorDesc> tensors;
  std::map<std::string, int> byName;
  std::map<std::string, Function> functions;
  std::string params;
  int64_t arenaBytes = 0;
  void *so = nullptr;
  ~ortc_artifact() {
    if (so)
      dlclose(so);
  }
};

struct ortc_session {
  const ortc_artifact *artifact;
  std::vector<std::unique_ptr<Aligned>> storage;
  std::vector<void *> bufs;
  std::unique_ptr<Aligned> arena;
};

extern "C" {

const char *ortc_last_error(void) { return lastError.c_str(); }

ortc_status ortc_artifact_load(const char *dirArg, ortc_artifact **out) {
  *out = nullptr;
  std::string dir = dirArg;
  std::string manifestPath = dir + "/manifest.json", text;
  if (!readAll(manifestPath, text))
    return fail(dir + ": not an ortc artifact (cannot read manifest.json)");
  json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded())
    return fail(manifestPath + ": not valid JSON");
  if (m.is_object() && m.contains("format_version") && m["format_version"] != kFormatVersion)
    return fail(manifestPath + ": format version " + m["format_version"].dump() +
                ", but this runtime reads version " + std::to_string(kFormatVersion) +
                " (rebuild the artifact with a matching ortc)");
  if (std::string e = ortc::checkSchema(ortc::manifestSchema(), m); !e.empty())
    return fail(manifestPath + ": " + e);
  if (m["target"] != "cpu")
    return fail(dir + ": built for target '" + m["target"].get<std::string>() +
                "', but this runtime has only the cpu backend (rebuild with --target cpu)");

  auto a = std::make_unique<ortc_artifact>();
  a->dir = dir;
  a->arenaBytes = m["arena_bytes"];
  for (auto it = m["files"].begin(); it != m["files"].end(); ++it) {
    std::string name = it.key(), bytes;
    if (name.find('/') != std::string::npos || name.find("..") != std::string::npos)
      return fail(manifestPath + ": file name '" + name + "' leaves the artifact folder");
    if (!readAll(dir + "/" + name, bytes))
      return fail(dir + "/" + name + ": missing");
    if (ortc::sha256Hex(bytes) != it.value().get<std::string>())
      return fail(dir + "/" + name + ": SHA-256 does not match the manifest (corrupted or edited)");
    if (name == "params.bin")
      a->params = std::move(bytes);
  }
  std::string object = m["kernels_object"];
  if (!m["files"].contains(object) || !m["files"].contains("params.bin"))
    return fail(manifestPath + ": the kernel object and params.bin must be listed in 'files'");
  for (const json &t : m["tensors"]) {
    TensorDesc d{t["name"], t["role"], t["dtype"], t["shape"].get<std::vector<int64_t>>()};
    int64_t n = 1;
    for (int64_t s : d.shape)
      n *= s;
    d.bytes = n * ortc::manifest::dtypeSize(d.dtype);
    if (t.contains("init")) {
      int64_t off = t["init"]["offset"], bytes = t["init"]["bytes"];
      if (bytes != d.bytes || off + bytes > (int64_t)a->params.size())
        return fail(dir + "/params.bin: the initial value of '" + d.name +
                    "' does not fit (offset " + std::to_string(off) + ", " +
                    std::to_string(bytes) + " bytes)");
      d.initOffset = off;
    }
    if (a->byName.count(d.name))
      return fail(manifestPath + ": tensor '" + d.name + "' is listed twice");
    a->byName[d.name] = a->tensors.size();
    a->tensors.push_back(d);
  }
  char real[PATH_MAX];
  std::string soPath = dir + "/" + object;
  if (!realpath(soPath.c_str(), real))
    return fail(soPath + ": missing");
  // RTLD_NODELETE: unloading a library whose OpenMP threads still exist crashes.
  a->so = dlopen(real, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!a->so)
    return fail(soPath + ": cannot load (" + std::string(dlerror()) + ")");
  for (auto it = m["functions"].begin(); it != m["functions"].end(); ++it) {
    Function f;
    for (const json &k : it.value()["kernels"]) {
      auto sym = reinterpret_cast<Kernel>(dlsym(a->so, k.get<std::string>().c_str()));
      if (!sym)
        return fail(soPath + ": kernel '" + k.get<std::string>() + "' of " + it.key() +
                    " is missing");
      f.kernels.push_back(sym);
    }
    for (const json &n : it.value()["inputs"])
      f.inputs.push_back(n);
    for (const json &n : it.value()["outputs"])
      f.outputs.push_back(n);
    for (const std::string &n : f.inputs)
      if (!a->byName.count(n))
        return fail(manifestPath + ": " + it.key() + " reads unknown tensor '" + n + "'");
    a->functions[it.key()] = std::move(f);
  }
  *out = a.release();
  return ORTC_OK;
}

void ortc_artifact_free(ortc_artifact *artifact) { delete artifact; }

ortc_status ortc_session_create(const ortc_artifact *a, ortc_session **out) {
  auto s = std::make_unique<ortc_session>();
  s->artifact = a;
  for (const TensorDesc &t : a->tensors) {
    auto buf = std::make_unique<Aligned>(t.bytes);
    if (!buf->p)
      return fail("out of memory allocating '" + t.name + "'");
    if (t.initOffset >= 0)
      std::memcpy(buf->p, a->params.data() + t.initOffset, t.bytes);
    s->bufs.push_back(buf->p);
    s->storage.push_back(std::move(buf));
  }
  s->arena = std::make_unique<Aligned>(a->arenaBytes);
  if (!s->arena->p)
    return fail("out of memory allocating the arena");
  *out = s.release();
  return ORTC_OK;
}

void ortc_session_free(ortc_session *session) { delete session; }

int ortc_tensor_count(const ortc_session *s) { return s->artifact->tensors.size(); }

int ortc_tensor_find(const ortc_session *s, const char *name) {
  auto it = s->artifact->byName.find(name);
  return it == s->artifact->byName.end() ? -1 : it->second;
}

ortc_status ortc_tensor_info(const ortc_session *s, int i, const char **name, const char **role,
                             const char **dtype, int *rank, const int64_t **dims) {
  if (i < 0 || i >= ortc_tensor_count(s))
    return fail("tensor index " + std::to_string(i) + " out of range");
  const TensorDesc &t = s->artifact->tensors[i];
  if (name) *name = t.name.c_str();
  if (role) *role = t.role.c_str();
  if (dtype) *dtype = t.dtype.c_str();
  if (rank) *rank = t.shape.size();
  if (dims) *dims = t.shape.data();
  return ORTC_OK;
}

void *ortc_tensor_data(ortc_session *s, int i) {
  return i >= 0 && i < ortc_tensor_count(s) ? s->bufs[i] : nullptr;
}

size_t ortc_tensor_bytes(const ortc_session *s, int i) {
  return i >= 0 && i < ortc_tensor_count(s) ? s->artifact->tensors[i].bytes : 0;
}

ortc_status ortc_bind_input(ortc_session *s, const char *name, const void *data, size_t bytes) {
  int i = ortc_tensor_find(s, name);
  if (i < 0)
    return fail(std::string("the model has no input '") + name + "'");
  const TensorDesc &t = s->artifact->tensors[i];
  if (t.role != "input" && t.role != "scalar")
    return fail("'" + t.name + "' is a " + t.role + ", not an input");
  if ((int64_t)bytes != t.bytes)
    return fail("input '" + t.name + "' needs " + std::to_string(t.bytes) + " bytes, got " +
                std::to_string(bytes));
  std::memcpy(s->bufs[i], data, bytes);
  return ORTC_OK;
}

ortc_status ortc_run(ortc_session *s, const char *function) {
  auto it = s->artifact->functions.find(function);
  if (it == s->artifact->functions.end())
    return fail(std::string("the artifact has no function '") + function + "'");
  void *const *bufs = s->bufs.data();
  char *arena = static_cast<char *>(s->arena->p);
  for (Kernel k : it->second.kernels)
    k(bufs, arena);
  return ORTC_OK;
}

ortc_status ortc_read_output(const ortc_session *s, const char *name, void *dst, size_t bytes) {
  int i = ortc_tensor_find(s, name);
  if (i < 0)
    return fail(std::string("the model has no tensor '") + name + "'");
  if ((int64_t)bytes != s->artifact->tensors[i].bytes)
    return fail(std::string("tensor '") + name + "' has " +
                std::to_string(s->artifact->tensors[i].bytes) + " bytes, asked for " +
                std::to_string(bytes));
  std::memcpy(dst, s->bufs[i], bytes);
  return ORTC_OK;
}

} // extern "C"

namespace {

bool savedRole(const std::string &role, bool withState) {
  return role == "parameter" || role == "buffer" || (withState && role == "state");
}

ortc_status saveNpz(const ortc_session *s, const char *path, bool withState) {
  std::vector<ortc::npz::ArrayRef> arrays;
  for (size_t i = 0; i < s->artifact->tensors.size(); ++i) {
    const TensorDesc &t = s->artifact->tensors[i];
    ortc::npz::DType dtype;
    if (savedRole(t.role, withState) && ortc::npz::fromManifestDtype(t.dtype, dtype))
      arrays.push_back({t.name, dtype, t.shape, s->bufs[i]});
  }
  std::string error;
  return ortc::npz::writeNpz(path, arrays, error) ? ORTC_OK : fail(error);
}

ortc_status loadNpz(ortc_session *s, const char *path, bool withState) {
  std::vector<ortc::npz::Array> list;
  std::string error;
  if (!ortc::npz::readNpz(path, list, error))
    return fail(error);
  std::map<std::string, ortc::npz::Array> arrays;
  for (auto &a : list)
    arrays[a.name] = std::move(a);
  // Check everything first so a bad file changes nothing.
  for (size_t i = 0; i < s->artifact->tensors.size(); ++i) {
    const TensorDesc &t = s->artifact->tensors[i];
    if (!savedRole(t.role, withState))
      continue;
    auto it = arrays.find(t.name);
    if (it == arrays.end())
      return fail(std::string(path) + ": no array for " + t.role + " '" + t.name + "'");
    ortc::npz::DType dtype;
    if (!ortc::npz::fromManifestDtype(t.dtype, dtype) || it->second.dtype != dtype ||
        it->second.shape != t.shape)
      return fail(std::string(path) + ": '" + t.name + "' has the wrong dtype or shape");
  }
  for (size_t i = 0; i < s->artifact->tensors.size(); ++i) {
    const TensorDesc &t = s->artifact->tensors[i];
    if (savedRole(t.role, withState))
      std::memcpy(s->bufs[i], arrays[t.name].data.data(), t.bytes);
  }
  return ORTC_OK;
}

} // namespace

extern "C" {
ortc_status ortc_checkpoint_save(const ortc_session *s, const char *path) {
  return saveNpz(s, path, true);
}
ortc_status ortc_checkpoint_load(ortc_session *s, const char *path) {
  return loadNpz(s, path, true);
}
ortc_status ortc_params_save(const ortc_session *s, const char *path) {
  return saveNpz(s, path, false);
}
ortc_status ortc_params_load(ortc_session *s, const char *path) {
  return loadNpz(s, path, false);
}
} // extern "C"
