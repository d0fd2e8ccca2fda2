//===- Dataset.cpp - Feeds read a batch at a time -------------------------===//
//
// The file set is fixed at open (sorted, so that batch numbers mean the same thing in
// every run); bind checks every shard against the step's inputs before any step runs,
// so a bad shard late in the set is reported up front, not hours in.
//
//===----------------------------------------------------------------------===//
#include "Dataset.h"

#include "ortc_scalar.h"

#include <glob.h>
#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <dirent.h>

namespace ortc {

/// Converts a float array to f32/f64, or an integer array to i64/i32 (range
/// checked). Returns false (and sets `error` only on overflow) when the kinds
/// differ or a dtype is not convertible.
bool convertFeed(const npz::Array &a, const std::string &dtype, std::string &out,
                 std::string &error) {
  using npz::DType;
  bool srcFloat = a.dtype == DType::F32 || a.dtype == DType::F64;
  bool srcInt = a.dtype == DType::I64 || a.dtype == DType::I32 || a.dtype == DType::U8 ||
                a.dtype == DType::U16;
  size_t n = a.data.size() / npz::itemSize(a.dtype);
  auto read = [&](size_t i, auto zero) {
    decltype(zero) v = 0;
    const char *p = a.data.data() + i * npz::itemSize(a.dtype);
    switch (a.dtype) {
    case DType::F32: {
      float x;
      std::memcpy(&x, p, 4);
      v = decltype(zero)(x);
      break;
    }
    case DType::F64: {
      double x;
      std::memcpy(&x, p, 8);
      v = decltype(zero)(x);
      break;
    }
    case DType::I64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      v = decltype(zero)(x);
      break;
    }
    case DType::I32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      v = decltype(zero)(x);
      break;
    }
    case DType::U16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      v = decltype(zero)(x);
      break;
    }
    default:
      v = decltype(zero)(uint8_t(*p));
      break;
    }
    return v;
  };
  if (srcFloat && (dtype == "f32" || dtype == "f64")) {
    out.resize(n * (dtype == "f32" ? 4 : 8));
    for (size_t i = 0; i < n; ++i) {
      double v = read(i, 0.0);
      float f = float(v);
      std::memcpy(&out[i * (dtype == "f32" ? 4 : 8)], dtype == "f32" ? (void *)&f : (void *)&v,
                  dtype == "f32" ? 4 : 8);
    }
    return true;
  }
  if (srcInt && (dtype == "i64" || dtype == "i32")) {
    out.resize(n * (dtype == "i64" ? 8 : 4));
    for (size_t i = 0; i < n; ++i) {
      int64_t v = read(i, int64_t(0));
      if (dtype == "i64") {
        std::memcpy(&out[i * 8], &v, 8);
        continue;
      }
      if (v < INT32_MIN || v > INT32_MAX) {
        error = "value " + std::to_string(v) + " does not fit in i32";
        return false;
      }
      int32_t x = int32_t(v);
      std::memcpy(&out[i * 4], &x, 4);
    }
    return true;
  }
  return false;
}

namespace {

bool endsWith(const std::string &s, const char *tail) {
  size_t n = std::strlen(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

std::string baseName(const std::string &p) {
  size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

bool isFloat(npz::DType d) { return d == npz::DType::F32 || d == npz::DType::F64; }
bool isInt(npz::DType d) {
  return d == npz::DType::I64 || d == npz::DType::I32 || d == npz::DType::U8 ||
         d == npz::DType::U16;
}

/// The next output of the SplitMix64 generator whose state is x.
uint64_t splitmix64(uint64_t &x) { return ortc::scalar::mix64(x += ortc::scalar::kGoldenGamma); }

} // namespace

bool Dataset::open(const std::string &spec, std::string &error) {
  path = spec;
  shards.clear();
  std::vector<std::string> files;
  bool npyFolder = false;
  struct stat st;
  if (spec.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    if (::glob(spec.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i)
        files.push_back(g.gl_pathv[i]);
    globfree(&g);
    if (files.empty()) {
      error = spec + ": no file matches";
      return false;
    }
  } else if (stat(spec.c_str(), &st) != 0) {
    error = "cannot open " + spec + ": " + std::strerror(errno);
    return false;
  } else if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> npz, npy;
    if (DIR *d = opendir(spec.c_str())) {
      while (dirent *e = readdir(d)) {
        std::string n = e->d_name;
        (endsWith(n, ".npz") ? npz : endsWith(n, ".npy") ? npy : files).push_back(spec + "/" + n);
      }
      closedir(d);
    }
    files = npz.empty() ? npy : npz;
    npyFolder = npz.empty();
    if (files.empty()) {
      error = spec + ": the folder holds no .npz shards and no .npy arrays";
      return false;
    }
  } else {
    files.push_back(spec);
    npyFolder = endsWith(spec, ".npy");
  }
  std::sort(files.begin(), files.end());
  if (npyFolder) { // one shard: an array per file
    Shard s;
    s.path = spec;
    for (const std::string &f : files) {
      s.members.emplace_back();
      if (!npz::indexNpyFile(f, s.members.back(), error))
        return false;
    }
    shards.push_back(std::move(s));
    return true;
  }
  for (const std::string &f : files) {
    Shard s;
    s.path = f;
    if (!endsWith(f, ".npz")) {
      error = f + ": not an .npz shard";
      return false;
    }
    if (!npz::indexNpz(f, s.members, error))
      return false;
    shards.push_back(std::move(s));
  }
  return true;
}

std::string Dataset::arrayNames() const {
  std::string have;
  if (!shards.empty())
    for (const npz::Member &m : shards[0].members)
      have += (have.empty() ? "" : ", ") + m.name;
  return have.empty() ? "nothing" : have;
}

bool Dataset::bind(const std::vector<FeedInput> &wanted, const std::string &what,
                   std::string &error) {
  inputs = wanted;
  total = 0;
  for (Shard &s : shards) {
    s.member.assign(inputs.size(), -1);
    s.sequence.assign(inputs.size(), false);
    s.batches = 0;
    std::string from;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const FeedInput &t = inputs[i];
      for (size_t k = 0; k < s.members.size(); ++k)
        if (s.members[k].name == t.name)
          s.member[i] = int(k);
      if (s.member[i] < 0) {
        std::string have;
        for (const npz::Member &m : s.members)
          have += (have.empty() ? "" : ", ") + m.name;
        error = s.path + ": no array for input '" + t.name + "' " + npz::shapeString(t.shape) +
                " (" + what + " " + t.role + " " + t.dtype + "); the file has: " +
                (have.empty() ? "nothing" : have);
        return false;
      }
      const npz::Member &m = s.members[s.member[i]];
      bool seq = m.shape.size() == t.shape.size() + 1 && m.shape[0] >= 1 &&
                 std::equal(t.shape.begin(), t.shape.end(), m.shape.begin() + 1);
      if ((!seq || t.role == "scalar") && m.shape != t.shape) {
        std::vector<int64_t> k{-1};
        k.insert(k.end(), t.shape.begin(), t.shape.end());
        std::string kShape = npz::shapeString(k);
        kShape.replace(1, 2, "K");
        error = s.path + ": " + (t.role == "scalar" ? "scalar input '" : "input '") + t.name +
                "' needs shape " + npz::shapeString(t.shape) +
                (t.role == "scalar" ? "" : " (or " + kShape + " for a sequence of K batches)") +
                ", got " + npz::shapeString(m.shape);
        return false;
      }
      npz::DType want;
      bool known = npz::fromManifestDtype(t.dtype, want);
      bool convertible = known && (m.dtype == want ||
                                   (isFloat(m.dtype) && (t.dtype == "f32" || t.dtype == "f64")) ||
                                   (isInt(m.dtype) && (t.dtype == "i64" || t.dtype == "i32")));
      if (!convertible) {
        error = s.path + ": input '" + t.name + "' is " + npz::describe(m.dtype) +
                ", the model expects " + t.dtype +
                (known ? " (" + std::string(npz::descr(want)) + ")" : std::string());
        return false;
      }
      if (seq && t.role != "scalar") {
        s.sequence[i] = true;
        if (s.batches && s.batches != m.shape[0]) {
          error = s.path + ": inputs '" + from + "' and '" + t.name +
                  "' hold different numbers of batches (" + std::to_string(s.batches) + " and " +
                  std::to_string(m.shape[0]) + ")";
          return false;
        }
        s.batches = m.shape[0];
        from = t.name;
      }
    }
    s.batches = std::max<int64_t>(s.batches, 1);
    s.first = total;
    total += s.batches;
  }
  cachedShard = -1;
  inflated.clear();
  return true;
}

bool Dataset::read(int64_t b, std::vector<std::string> &out, std::string &error) {
  size_t si = 0;
  while (si + 1 < shards.size() && shards[si + 1].first <= b)
    ++si;
  const Shard &s = shards[si];
  int64_t j = b - s.first;
  if (cachedShard != int(si)) {
    inflated.clear();
    cachedShard = int(si);
  }
  out.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const FeedInput &t = inputs[i];
    const npz::Member &m = s.members[s.member[i]];
    uint64_t n = t.bytes / std::max<size_t>(1, npz::itemSize([&] {
                   npz::DType d;
                   npz::fromManifestDtype(t.dtype, d);
                   return d;
                 }()));
    uint64_t bytes = n * npz::itemSize(m.dtype), at = s.sequence[i] ? uint64_t(j) * bytes : 0;
    npz::Array slice;
    slice.name = t.name;
    slice.dtype = m.dtype;
    slice.shape = t.shape;
    if (m.plainNpy) {
      std::unique_ptr<npz::MappedNpy> &map = mapped[m.entry];
      if (!map) {
        map = std::make_unique<npz::MappedNpy>();
        if (!map->open(m.entry, error)) {
          map.reset();
          return false;
        }
      }
      if (!map->copy(m, at, bytes, slice.data, error))
        return false;
    } else if (m.indexed) {
      if (!npz::readSlice(s.path, m, at, bytes, slice.data, error))
        return false;
    } else {
      auto it = inflated.find(s.member[i]);
      if (it == inflated.end()) {
        npz::Array whole;
        if (!npz::readMember(s.path, m, whole, error))
          return false;
        it = inflated.emplace(s.member[i], std::move(whole)).first;
      }
      if (it->second.data.size() < at + bytes) {
        error = s.path + ": array '" + m.name + "' is shorter than its header says";
        return false;
      }
      slice.data = it->second.data.substr(at, bytes);
    }
    npz::DType want;
    npz::fromManifestDtype(t.dtype, want);
    if (m.dtype == want) {
      out[i] = std::move(slice.data);
      continue;
    }
    std::string why;
    if (!convertFeed(slice, t.dtype, out[i], why)) {
      error = s.path + ": input '" + t.name + "': " + why;
      return false;
    }
  }
  return true;
}

std::string Dataset::where(int64_t b) const {
  size_t si = 0;
  while (si + 1 < shards.size() && shards[si + 1].first <= b)
    ++si;
  const Shard &s = shards[si];
  if (shards.size() == 1)
    return s.batches > 1 ? "batch " + std::to_string(b + 1) + " of " + std::to_string(s.batches) +
                               " in the feed"
                         : "";
  return "batch " + std::to_string(b - s.first + 1) + " of " + std::to_string(s.batches) +
         " in " + baseName(s.path);
}

int64_t BatchOrder::operator()(int64_t m) {
  m = m * ranks + rank;
  int64_t e = m / k, p = m % k;
  if (!shuffle)
    return p;
  if (e != epoch) { // Fisher-Yates from a generator keyed by (seed, epoch)
    epoch = e;
    perm.resize(size_t(k));
    for (int64_t i = 0; i < k; ++i)
      perm[size_t(i)] = i;
    uint64_t state = seed * 0x2545F4914F6CDD1Dull ^ uint64_t(e);
    for (int64_t i = k - 1; i > 0; --i)
      std::swap(perm[size_t(i)], perm[size_t(splitmix64(state) % uint64_t(i + 1))]);
  }
  return perm[size_t(p)];
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> l(mu);
    stopping = true;
  }
  cv.notify_all();
  if (thread.joinable())
    thread.join();
}

void Prefetcher::work() {
  std::unique_lock<std::mutex> l(mu);
  for (;;) {
    cv.wait(l, [&] { return stopping || next <= wanted; });
    if (stopping)
      return;
    Item item{next++, 0, {}, {}};
    l.unlock();
    item.batch = order(item.m);
    data.read(item.batch, item.buffers, item.error);
    l.lock();
    ready.push_back(std::move(item));
    cv.notify_all();
  }
}

bool Prefetcher::take(int64_t m, std::vector<std::string> &out, int64_t &batch,
                      std::string &error) {
  std::unique_lock<std::mutex> l(mu);
  if (!started) {
    started = true;
    next = m;
    // The reader is born named: a thread inherits its creator's name, so the creator wears
    // "ortc-feed" while it spawns it (thread counts of compute threads leave it out).
    char name[16] = {0};
    pthread_getname_np(pthread_self(), name, sizeof name);
    pthread_setname_np(pthread_self(), "ortc-feed");
    thread = std::thread(&Prefetcher::work, this);
    pthread_setname_np(pthread_self(), name);
  }
  wanted = m + depth;
  cv.notify_all();
  cv.wait(l, [&] { return !ready.empty(); });
  Item item = std::move(ready.front());
  ready.pop_front();
  if (item.m != m) {
    error = "internal error: micro-batch " + std::to_string(m) + " asked, " +
            std::to_string(item.m) + " read";
    return false;
  }
  batch = item.batch;
  if (!item.error.empty()) {
    error = item.error;
    return false;
  }
  out = std::move(item.buffers);
  return true;
}

} // namespace ortc
