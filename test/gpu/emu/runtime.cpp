//===- runtime.cpp - The emulated GPU: threads, streams, memory, checks ---===//
//
// Why: this is the device the emulated kernels run on (see README.md). Each block
// runs as blockDim cooperative threads (fibers on one host thread) that meet at
// __syncthreads and at warp-collective operations, in a seeded random order per
// launch. Streams defer their work until a synchronisation, as a GPU does, so a
// missing sync shows. Device memory is host memory with red zones, poisoned when
// allocated. The kernels are compiled with load/store tracing
// (-fsanitize-coverage=trace-loads,trace-stores); every traced access of a thread
// is checked here: bounds against its allocation, device variable or shared array
// and, inside an allocation that holds the launch's operands (the runtime names them
// through ortc_launch_operands, runtime/include/ortc/kernel_abi.h), against the
// operand it falls in; and races between threads (shared memory between barriers, global memory within
// a launch; atomics, which run here untraced, are exempt).
//
// Environment: ORTC_EMU_ARCH (the device's arch; default sm_90 for the CUDA API,
// gfx90a for HIP; "none": no device), ORTC_EMU_SEED (thread order), ORTC_EMU_CHECKS=0
// (no access checks; "all": every launch, not only the first of each kernel and
// configuration), ORTC_EMU_STATS (a JSON file written at exit: launches per
// kernel, checked accesses).
//
//===----------------------------------------------------------------------===//
#define EMU_WARP_SIZE 0 // this file is not a front; launches come from the fronts
#define EMU_HIP_FRONT false
#include "emu/api.h"
#include "emu/device.h"
#include "ortc/kernel_abi.h"
// The builtins are fields of emu::Thread here.
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace emu {

Thread *emu_current = nullptr;
extern "C" bool emu_checking; // defined below, read by the fronts' tracing callbacks

namespace {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

std::string gError;      ///< the first error since the last GetLastError / sync
int gErrorCode = 0;      ///< its code (cudaError_t values; HIP shares them)
long gReports = 0;

void fail(int code, const std::string &message) {
  if (gReports++ < 20)
    std::fprintf(stderr, "ortc-emu: %s\n", message.c_str());
  if (!gErrorCode) {
    gErrorCode = code;
    gError = message;
  }
}

int takeError() {
  int e = gErrorCode;
  gErrorCode = 0;
  return e;
}

std::string hex(uintptr_t a) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%lx", static_cast<unsigned long>(a));
  return b;
}

//===----------------------------------------------------------------------===//
// The device: arch and its launch limits
//===----------------------------------------------------------------------===//

/// One row of the generated file's ortc_gpu_launch_limits (codegen/gpu/TargetInfo).
struct Limits {
  const char *arch;
  unsigned threads, gridX, gridY, gridZ, staticShared, dynamicShared;
};

std::string gArch; ///< the device's arch
const Limits *gLimitsTable = nullptr; ///< the kernel object's table (loadModule)

const std::string &arch(bool hip) {
  if (gArch.empty()) {
    const char *a = std::getenv("ORTC_EMU_ARCH");
    gArch = a && *a && std::strcmp(a, "none") ? a : (hip ? "gfx90a" : "sm_90");
  }
  return gArch;
}

/// The device's limits, from the table the target wrote into the kernel object.
/// Null (and an error) when that table lacks the arch.
const Limits *limits(bool hip) {
  const std::string &a = arch(hip);
  for (const Limits *l = gLimitsTable; l && l->arch; ++l)
    if (a == l->arch)
      return l;
  return nullptr;
}

/// The wavefront sizes the device's hardware runs: 32 on NVIDIA, 64 on CDNA (gfx9),
/// 32 or 64 on RDNA (gfx10 and later; the code object says which). As a bit mask:
/// 32 -> 1, 64 -> 2.
unsigned hardwareWarps(const std::string &a) {
  if (a.compare(0, 3, "gfx") != 0)
    return 1;
  return a.size() >= 7 ? 3 : 2; // gfx9xx vs gfx1xxx
}
int hardwareWarp(const std::string &a) { return hardwareWarps(a) == 2 ? 64 : 32; }

bool deviceVisible() {
  const char *a = std::getenv("ORTC_EMU_ARCH");
  return !(a && std::strcmp(a, "none") == 0);
}

uint64_t splitmix(uint64_t &s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t seedBase() {
  static const uint64_t s = [] {
    const char *e = std::getenv("ORTC_EMU_SEED");
    return e ? std::strtoull(e, nullptr, 10) : 1ull;
  }();
  return s;
}

/// ORTC_EMU_CHECKS: "0" none, "all" every launch, else (the default) the first
/// launch of each kernel and configuration (later ones replay the same code on the
/// same shapes; the checks are what makes the emulator slow).
int checkMode() {
  static const int mode = [] {
    const char *e = std::getenv("ORTC_EMU_CHECKS");
    return e && std::strcmp(e, "0") == 0 ? 0 : e && std::strcmp(e, "all") == 0 ? 2 : 1;
  }();
  return mode;
}

//===----------------------------------------------------------------------===//
// Device memory
//===----------------------------------------------------------------------===//

constexpr size_t kRedZone = 256;

struct Allocation {
  size_t bytes;
  long id;
};
std::map<uintptr_t, Allocation> gAllocs; ///< by base address
long gAllocCount = 0;

/// findAlloc's last hits (kernels alternate between a few allocations: the arena,
/// a weight, its gradient).
const std::pair<const uintptr_t, Allocation> *gLastAlloc[4] = {};

const std::pair<const uintptr_t, Allocation> *findAlloc(uintptr_t a) {
  for (auto *last : gLastAlloc)
    if (last && a >= last->first && a < last->first + last->second.bytes)
      return last;
  auto it = gAllocs.upper_bound(a);
  if (it == gAllocs.begin())
    return nullptr;
  --it;
  if (a >= it->first + it->second.bytes)
    return nullptr;
  static unsigned next = 0;
  return gLastAlloc[next++ % 4] = &*it;
}

std::string describeAddress(uintptr_t a) {
  auto it = gAllocs.upper_bound(a);
  std::string s;
  if (it != gAllocs.begin()) {
    auto p = std::prev(it);
    if (a >= p->first + p->second.bytes)
      s = std::to_string(a - (p->first + p->second.bytes)) + " bytes past the end of allocation #" +
          std::to_string(p->second.id) + " (" + std::to_string(p->second.bytes) + " bytes)";
    else
      return "allocation #" + std::to_string(p->second.id) + " + " + std::to_string(a - p->first);
  }
  if (it != gAllocs.end() && it->first - a <= kRedZone)
    s += std::string(s.empty() ? "" : "; ") + std::to_string(it->first - a) + " bytes before allocation #" +
         std::to_string(it->second.id);
  return s.empty() ? "in no device allocation" : s;
}

/// The operands of the runtime's launch being enqueued (ortc_launch_operands):
/// device ranges with a known size. Work enqueued while they are set keeps them.
struct Operands {
  std::string kernel, node;
  std::vector<std::pair<uintptr_t, size_t>> ranges;
};
std::shared_ptr<const Operands> gOperands;

/// Why [a, a + n) inside the allocation at `base` of `size` bytes lies in none of
/// `ops`' ranges, when some of them are in that allocation (the arena); "" if it
/// lies in one, or the allocation holds none (a workspace of the launcher's own).
std::string operandMiss(const Operands &ops, const std::pair<const uintptr_t, Allocation> &al, uintptr_t a,
                        size_t n) {
  const uintptr_t base = al.first;
  const size_t size = al.second.bytes;
  std::string there;
  for (const auto &[lo, len] : ops.ranges) {
    if (a >= lo && a + n <= lo + len)
      return "";
    if (lo >= base && lo < base + size && there.size() < 200)
      there += (there.empty() ? "" : ", ") + std::string("[") + std::to_string(lo - base) + ", " +
               std::to_string(lo - base + len) + ")";
  }
  if (there.empty())
    return "";
  return "offset " + std::to_string(a - base) + " of allocation #" + std::to_string(al.second.id) +
         ", outside every operand of launch '" + ops.kernel + "'" +
         (ops.node.empty() ? "" : " (ONNX node '" + ops.node + "')") + " there: " + there;
}

int deviceMalloc(void **p, size_t bytes) {
  char *raw = static_cast<char *>(std::aligned_alloc(256, bytes + 2 * kRedZone + 255 & ~size_t(255)));
  if (!raw)
    return cudaErrorMemoryAllocation;
  // Fresh device memory holds garbage: all-ones bytes (NaN floats, -1 integers),
  // so a kernel that relies on zeroed memory shows.
  std::memset(raw + kRedZone, 0xff, bytes);
  *p = raw + kRedZone;
  gAllocs[reinterpret_cast<uintptr_t>(*p)] = {bytes, ++gAllocCount};
  return 0;
}

int deviceFree(void *p) {
  if (!p)
    return 0;
  auto it = gAllocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == gAllocs.end())
    return cudaErrorInvalidValue;
  gAllocs.erase(it);
  for (auto *&last : gLastAlloc)
    last = nullptr;
  std::free(static_cast<char *>(p) - kRedZone);
  return 0;
}

//===----------------------------------------------------------------------===//
// Symbols of the kernel modules: device variables and shared arrays
//===----------------------------------------------------------------------===//

struct Symbol {
  uintptr_t start;
  size_t size;
  std::string name;
  bool shared;
};
struct Module {
  uintptr_t lo = 0, hi = 0;   ///< the loaded image
  uintptr_t sharedLo = 0, sharedHi = 0;
  std::vector<Symbol> symbols; ///< data objects, sorted by address
};
std::vector<Module> gModules;

std::string demangle(const char *n) {
  int st = 0;
  char *d = abi::__cxa_demangle(n, nullptr, nullptr, &st);
  std::string r = st == 0 && d ? d : n;
  std::free(d);
  return r;
}

/// Reads the object's symbol table from its file (local statics, such as the
/// __shared__ arrays of non-template kernels, are not in the dynamic table).
void loadModule(const void *anyAddress) {
  Dl_info info;
  if (!dladdr(anyAddress, &info) || !info.dli_fname)
    return;
  const uintptr_t base = reinterpret_cast<uintptr_t>(info.dli_fbase);
  for (const Module &m : gModules)
    if (m.lo == base)
      return;
  FILE *f = std::fopen(info.dli_fname, "rb");
  if (!f)
    return;
  std::fseek(f, 0, SEEK_END);
  std::vector<char> file(static_cast<size_t>(std::ftell(f)));
  std::fseek(f, 0, SEEK_SET);
  size_t got = std::fread(file.data(), 1, file.size(), f);
  std::fclose(f);
  if (got != file.size() || file.size() < sizeof(ElfW(Ehdr)))
    return;
  auto *eh = reinterpret_cast<const ElfW(Ehdr) *>(file.data());
  auto *sh = reinterpret_cast<const ElfW(Shdr) *>(file.data() + eh->e_shoff);
  const char *shstr = file.data() + sh[eh->e_shstrndx].sh_offset;
  Module m;
  m.lo = base;
  int sharedIndex = -1;
  for (int i = 0; i < eh->e_shnum; ++i) {
    m.hi = std::max<uintptr_t>(m.hi, base + sh[i].sh_addr + sh[i].sh_size);
    if (std::strcmp(shstr + sh[i].sh_name, "emu_shared") == 0) {
      sharedIndex = i;
      m.sharedLo = base + sh[i].sh_addr;
      m.sharedHi = m.sharedLo + sh[i].sh_size;
    }
  }
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_SYMTAB)
      continue;
    auto *syms = reinterpret_cast<const ElfW(Sym) *>(file.data() + sh[i].sh_offset);
    const char *str = file.data() + sh[sh[i].sh_link].sh_offset;
    for (size_t k = 0; k < sh[i].sh_size / sizeof(ElfW(Sym)); ++k) {
      const ElfW(Sym) &s = syms[k];
      if (ELF64_ST_TYPE(s.st_info) != STT_OBJECT || s.st_size == 0 || s.st_shndx == SHN_UNDEF ||
          s.st_shndx >= eh->e_shnum)
        continue;
      m.symbols.push_back({base + s.st_value, s.st_size, demangle(str + s.st_name), s.st_shndx == sharedIndex});
      if (std::strcmp(str + s.st_name, "ortc_gpu_launch_limits") == 0)
        gLimitsTable = reinterpret_cast<const Limits *>(base + s.st_value);
    }
  }
  std::sort(m.symbols.begin(), m.symbols.end(), [](const Symbol &a, const Symbol &b) { return a.start < b.start; });
  gModules.push_back(std::move(m));
}

const Module *moduleOf(uintptr_t a) {
  for (const Module &m : gModules)
    if (a >= m.lo && a < m.hi)
      return &m;
  return nullptr;
}

const Symbol *symbolAt(const Module &m, uintptr_t a) {
  auto it = std::upper_bound(m.symbols.begin(), m.symbols.end(), a,
                             [](uintptr_t v, const Symbol &s) { return v < s.start; });
  if (it == m.symbols.begin())
    return nullptr;
  --it;
  return a < it->start + it->size ? &*it : nullptr;
}

//===----------------------------------------------------------------------===//
// Fibers
//===----------------------------------------------------------------------===//

constexpr size_t kStack = 256 << 10;

struct Fiber {
  void *sp = nullptr;
  char *stack = nullptr;
#if !defined(__x86_64__)
  ucontext_t uc;
#endif
};

#if defined(__x86_64__)
extern "C" void emu_switch(void **from, void *to);
extern "C" void emu_fiber_start();
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch, .-emu_switch
.globl emu_fiber_start
.type emu_fiber_start,@function
emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
.size emu_fiber_start, .-emu_fiber_start
)");
#endif

void *gSchedulerSp = nullptr;
#if !defined(__x86_64__)
ucontext_t gSchedulerUc;
#endif

void fiberMain(void *arg);

void fiberInit(Fiber &f, void *arg) {
  if (!f.stack) {
    f.stack = static_cast<char *>(
        mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (f.stack == MAP_FAILED) {
      std::fprintf(stderr, "ortc-emu: cannot map a thread stack\n");
      std::abort();
    }
  }
#if defined(__x86_64__)
  uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + kStack) & ~uintptr_t(15);
  uint64_t *s = reinterpret_cast<uint64_t *>(top);
  s[-3] = reinterpret_cast<uint64_t>(&emu_fiber_start); // return address of emu_switch
  s[-4] = 0;                                             // rbp
  s[-5] = 0;                                             // rbx
  s[-6] = reinterpret_cast<uint64_t>(arg);               // r12
  s[-7] = reinterpret_cast<uint64_t>(&fiberMain);        // r13
  s[-8] = 0;                                             // r14
  s[-9] = 0;                                             // r15
  f.sp = &s[-9]; // (the floating-point control words are never changed: not switched)
#else
  getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = f.stack;
  f.uc.uc_stack.ss_size = kStack;
  f.uc.uc_link = nullptr;
  makecontext(&f.uc, reinterpret_cast<void (*)()>(fiberMain), 1, arg);
#endif
}

void switchToFiber(Fiber &f) {
#if defined(__x86_64__)
  emu_switch(&gSchedulerSp, f.sp);
#else
  swapcontext(&gSchedulerUc, &f.uc);
#endif
}

void switchToScheduler(Fiber &f) {
#if defined(__x86_64__)
  emu_switch(&f.sp, gSchedulerSp);
#else
  swapcontext(&f.uc, &gSchedulerUc);
#endif
}

//===----------------------------------------------------------------------===//
// Running a launch
//===----------------------------------------------------------------------===//

enum State { Ready, AtBarrier, AtWarp, Done };

struct WarpRequest {
  int op, size, arg, width;
  uint64_t bits, mask, result;
};

struct EmuThread {
  Thread t;
  Fiber fiber;
  State state = Done;
  WarpRequest req;
  unsigned linear = 0; ///< index within the block
};

/// Race shadow: per address granule, the thread that wrote it and the (first)
/// thread that read it in the current epoch. Open addressing, cleared by epoch.
struct Shadow {
  struct Entry {
    uintptr_t key;
    uint32_t epoch;
    int32_t writer, reader;
    bool manyReaders;
  };
  std::vector<Entry> table = std::vector<Entry>(1 << 12);
  size_t used = 0;
  uint32_t epoch = 1;
  void clear() {
    ++epoch;
    used = 0;
    if (table.size() > (1u << 20))
      table.assign(1 << 12, Entry{});
  }
  Entry &at(uintptr_t key) {
    if (2 * (used + 1) > table.size())
      grow();
    size_t mask = table.size() - 1, i = (key * 0x9e3779b97f4a7c15ull >> 20) & mask;
    while (true) {
      Entry &e = table[i];
      if (e.epoch != epoch) {
        e = {key, epoch, -1, -1, false};
        ++used;
        return e;
      }
      if (e.key == key)
        return e;
      i = (i + 1) & mask;
    }
  }
  void grow() {
    std::vector<Entry> old(table.size() * 2);
    old.swap(table);
    used = 0;
    for (const Entry &e : old)
      if (e.epoch == epoch) {
        Entry &n = at(e.key);
        n = e;
      }
  }
};

struct Run {
  Launch *launch;
  EmuThread *threads = nullptr;   ///< of the current block (the pool)
  unsigned count = 0;
  unsigned blockLinear = 0;
  uint64_t rng = 0;
  Shadow globalShadow, sharedShadow;
  std::vector<const Symbol *> sharedUsed;
  bool failed = false;
  bool checked = false; ///< whether this launch's accesses are checked
  long accesses = 0;
  const Operands *operands = nullptr; ///< the runtime launch it belongs to, if named
};
Run *gRun = nullptr;
std::map<std::string, long> gLaunchCounts; ///< kernel (site) -> launches, for ORTC_EMU_STATS
long gCheckedAccesses = 0;
EmuThread *gThread = nullptr;
std::vector<EmuThread> gThreadPool;

std::string threadName(const Run &r, unsigned block, unsigned t) {
  const dim3 g = r.launch->grid, b = r.launch->block;
  char s[128];
  std::snprintf(s, sizeof s, "block (%u,%u,%u) thread (%u,%u,%u)", block % g.x, block / g.x % g.y,
                block / (g.x * g.y), t % b.x, t / b.x % b.y, t / (b.x * b.y));
  return s;
}

std::string where(const Launch &l) {
  return std::string("kernel ") + l.kernel + " (" + l.file + ":" + std::to_string(l.line) + ")";
}

void fiberMain(void *arg) {
  EmuThread *self = static_cast<EmuThread *>(arg);
  while (true) {
    gRun->launch->invoke(gRun->launch->call.get());
    self->state = Done;
    switchToScheduler(self->fiber);
  }
}

void yieldToScheduler() { switchToScheduler(gThread->fiber); }

unsigned threadsPerBlock(const Launch &l) { return l.block.x * l.block.y * l.block.z; }

/// Completes the warp-collective operations whose lanes have all arrived.
/// Returns whether any lane was released; reports misuse.
bool releaseWarps(Run &r) {
  const int ws = r.launch->warpSize;
  const unsigned n = r.count;
  bool released = false;
  for (unsigned w0 = 0; w0 < n; w0 += ws) {
    const unsigned lanes = std::min<unsigned>(ws, n - w0);
    for (unsigned l = 0; l < lanes; ++l) {
      EmuThread &lead = r.threads[w0 + l];
      if (lead.state != AtWarp)
        continue;
      // The group: the lanes named by the mask (mask 0, HIP's form: every lane
      // still running).
      uint64_t group = 0;
      bool ready = true, bad = false;
      for (unsigned k = 0; k < lanes; ++k) {
        EmuThread &o = r.threads[w0 + k];
        const bool named = lead.req.mask ? ((lead.req.mask >> k) & 1) : o.state != Done;
        if (!named)
          continue;
        if (o.state == Done) {
          fail(cudaErrorLaunchFailure, where(*r.launch) + ": lane " + std::to_string(k) +
                                           " is named in the mask of a warp operation but has exited (" +
                                           threadName(r, r.blockLinear, o.linear) + ")");
          bad = true;
          break;
        }
        if (o.state != AtWarp) {
          ready = false;
          break;
        }
        if (o.req.op != lead.req.op || o.req.mask != lead.req.mask || o.req.width != lead.req.width) {
          fail(cudaErrorLaunchFailure, where(*r.launch) + ": lanes " + std::to_string(l) + " and " +
                                           std::to_string(k) + " of a warp meet at different warp operations");
          bad = true;
          break;
        }
        group |= uint64_t(1) << k;
      }
      if (bad) {
        r.failed = true;
        return false;
      }
      if (!ready || !((group >> l) & 1))
        continue;
      const int width = lead.req.width;
      uint64_t ballot = 0;
      for (unsigned k = 0; k < lanes; ++k)
        if ((group >> k) & 1)
          ballot |= uint64_t(r.threads[w0 + k].req.bits != 0) << k;
      for (unsigned k = 0; k < lanes; ++k) {
        if (!((group >> k) & 1))
          continue;
        WarpRequest &q = r.threads[w0 + k].req;
        const int seg = static_cast<int>(k) / width * width, pos = static_cast<int>(k) % width;
        int src = static_cast<int>(k);
        switch (q.op) {
        case ShflIdx: src = seg + (q.arg & (width - 1)); break;
        case ShflUp: src = pos - q.arg >= 0 ? static_cast<int>(k) - q.arg : static_cast<int>(k); break;
        case ShflDown: src = pos + q.arg < width ? static_cast<int>(k) + q.arg : static_cast<int>(k); break;
        case ShflXor: src = (static_cast<int>(k) ^ q.arg) / width == static_cast<int>(k) / width
                                ? static_cast<int>(k) ^ q.arg
                                : static_cast<int>(k);
          break;
        default: break;
        }
        if (q.op <= ShflXor) {
          if (src >= static_cast<int>(lanes) || !((group >> src) & 1)) {
            fail(cudaErrorLaunchFailure, where(*r.launch) + ": lane " + std::to_string(k) + " shuffles from lane " +
                                             std::to_string(src) + ", which is not taking part (" +
                                             threadName(r, r.blockLinear, r.threads[w0 + k].linear) + ")");
            r.failed = true;
            return false;
          }
          q.result = r.threads[w0 + src].req.bits;
        } else if (q.op == Ballot) {
          q.result = ballot;
        } else if (q.op == Any) {
          q.result = ballot != 0;
        } else if (q.op == All) {
          q.result = ballot == group;
        }
      }
      for (unsigned k = 0; k < lanes; ++k)
        if ((group >> k) & 1)
          r.threads[w0 + k].state = Ready;
      released = true;
    }
  }
  return released;
}

void runBlock(Run &r, unsigned bx, unsigned by, unsigned bz) {
  const Launch &l = *r.launch;
  const unsigned n = threadsPerBlock(l);
  if (gThreadPool.size() < n)
    gThreadPool.resize(n);
  r.sharedShadow.clear();
  // Shared memory holds garbage when a block starts.
  for (const Module &m : gModules)
    if (m.sharedHi > m.sharedLo)
      std::memset(reinterpret_cast<void *>(m.sharedLo), 0xff, m.sharedHi - m.sharedLo);
  for (unsigned i = 0; i < n; ++i) {
    EmuThread &t = gThreadPool[i];
    t.t.threadIdx = {i % l.block.x, i / l.block.x % l.block.y, i / (l.block.x * l.block.y)};
    t.t.blockIdx = {bx, by, bz};
    t.t.blockDim = l.block;
    t.t.gridDim = l.grid;
    t.linear = i;
    t.state = Ready;
    fiberInit(t.fiber, &t);
  }
  r.threads = gThreadPool.data();
  r.count = n;
  std::vector<unsigned> order(n);
  for (unsigned i = 0; i < n; ++i)
    order[i] = i;
  auto th = [&](unsigned i) -> EmuThread & { return r.threads[i]; };
  while (true) {
    // Threads run in a new seeded random order after every meeting point.
    for (unsigned i = n; i > 1; --i)
      std::swap(order[i - 1], order[splitmix(r.rng) % i]);
    for (unsigned i : order) {
      EmuThread &t = th(i);
      if (t.state != Ready)
        continue;
      gThread = &t;
      emu_current = &t.t;
      emu_checking = r.checked;
      switchToFiber(t.fiber);
      emu_checking = false;
      emu_current = nullptr;
      gThread = nullptr;
    }
    const bool released = releaseWarps(r);
    if (r.failed)
      break;
    unsigned live = 0, atBarrier = 0;
    for (unsigned i = 0; i < n; ++i) {
      live += th(i).state != Done;
      atBarrier += th(i).state == AtBarrier;
    }
    if (live == 0)
      break;
    if (released)
      continue;
    if (atBarrier == live) {
      for (unsigned i = 0; i < n; ++i)
        if (th(i).state == AtBarrier)
          th(i).state = Ready;
      r.sharedShadow.clear();
      continue;
    }
    std::string stuck;
    for (unsigned i = 0; i < n && stuck.size() < 200; ++i)
      if (th(i).state != Done)
        stuck += std::string(stuck.empty() ? "" : ", ") + "thread " + std::to_string(i) +
                 (th(i).state == AtBarrier ? " at __syncthreads" : " at a warp operation");
    fail(cudaErrorLaunchFailure, where(l) + ": block " + std::to_string(r.blockLinear) +
                                     " deadlocks: some threads wait at __syncthreads while others wait at a "
                                     "warp operation (" + stuck + ")");
    r.failed = true;
    break;
  }
  if (r.failed) // threads left mid-kernel keep their stacks; give them fresh fibers
    for (unsigned i = 0; i < n; ++i)
      th(i).state = Done;
}

void runLaunch(Launch &l, const Operands *operands) {
  Run r;
  r.launch = &l;
  r.operands = operands;
  static uint64_t launches = 0;
  r.rng = seedBase() * 0x9e3779b97f4a7c15ull + ++launches;
  static std::set<std::string> seen;
  char config[96];
  std::snprintf(config, sizeof config, ":%d (%u,%u,%u) (%u,%u,%u)", l.line, l.grid.x, l.grid.y, l.grid.z,
                l.block.x, l.block.y, l.block.z);
  r.checked = checkMode() == 2 || (checkMode() == 1 && seen.insert(std::string(l.kernel) + l.file + config).second);
  gRun = &r;
  for (unsigned bz = 0; bz < l.grid.z && !r.failed; ++bz)
    for (unsigned by = 0; by < l.grid.y && !r.failed; ++by)
      for (unsigned bx = 0; bx < l.grid.x && !r.failed; ++bx) {
        r.blockLinear = bx + l.grid.x * (by + l.grid.y * bz);
        runBlock(r, bx, by, bz);
      }
  size_t shared = 0;
  for (const Symbol *s : r.sharedUsed)
    shared += s->size;
  const Limits &lim = *limits(l.hip); // checked at the submit
  if (shared > lim.staticShared)
    fail(cudaErrorLaunchFailure, where(l) + " uses " + std::to_string(shared) + " bytes of static shared memory; " +
                                     gArch + " allows " + std::to_string(lim.staticShared));
  gLaunchCounts[std::string(l.kernel) + " " + l.file + ":" + std::to_string(l.line)]++;
  gCheckedAccesses += r.accesses;
  gRun = nullptr;
}

//===----------------------------------------------------------------------===//
// Access checks (called by the traced kernels)
//===----------------------------------------------------------------------===//

void race(Run &r, const char *space, const std::string &object, uintptr_t a, int32_t first, const char *firstDid,
          unsigned second, const char *secondDid) {
  if (r.failed)
    return;
  r.failed = true; // one report per launch
  std::string who1 = std::strcmp(space, "shared") == 0 ? threadName(r, r.blockLinear, first)
                                                        : threadName(r, first / threadsPerBlock(*r.launch),
                                                                     first % threadsPerBlock(*r.launch));
  std::string who2 = std::strcmp(space, "shared") == 0 ? threadName(r, r.blockLinear, second)
                                                        : threadName(r, second / threadsPerBlock(*r.launch),
                                                                     second % threadsPerBlock(*r.launch));
  fail(cudaErrorLaunchFailure, where(*r.launch) + ": race on " + space + " memory at " + hex(a) + " (" +
                                   object +
                                   "): " + who1 + " " + firstDid + " it and " + who2 + " " + secondDid +
                                   " it with no barrier between");
}

/// `object`: what the address is in, for the report (empty: the allocation).
void track(Run &r, Shadow &s, const char *space, const Symbol *object, uintptr_t a, size_t n, bool write,
           unsigned id) {
  auto report = [&](uintptr_t g, int32_t first, const char *did1, const char *did2) {
    race(r, space, object ? object->name + " + " + std::to_string(g - object->start) : describeAddress(g), g, first,
         did1, id, did2);
  };
  const size_t step = n >= 4 ? 4 : 1;
  for (uintptr_t g = a & ~(step - 1); g < a + n; g += step) {
    Shadow::Entry &e = s.at(g);
    if (write) {
      if (e.writer >= 0 && static_cast<unsigned>(e.writer) != id)
        return report(g, e.writer, "wrote", "wrote");
      if (e.reader >= 0 && (e.manyReaders || static_cast<unsigned>(e.reader) != id))
        return report(g, e.reader, "read", "wrote");
      e.writer = static_cast<int32_t>(id);
    } else {
      if (e.writer >= 0 && static_cast<unsigned>(e.writer) != id)
        return report(g, e.writer, "wrote", "read");
      if (e.reader < 0)
        e.reader = static_cast<int32_t>(id);
      else if (static_cast<unsigned>(e.reader) != id)
        e.manyReaders = true;
    }
  }
}

void outOfBounds(Run &r, uintptr_t a, size_t n, bool write, const std::string &what) {
  if (r.failed)
    return;
  r.failed = true;
  fail(cudaErrorIllegalAddress, where(*r.launch) + ": " + threadName(r, r.blockLinear, gThread->linear) + " " +
                                    (write ? "writes " : "reads ") + std::to_string(n) + " bytes at " + hex(a) +
                                    ", " + what);
}

void access(const void *p, size_t n, bool write) {
  Run *r = gRun;
  if (!r || !r->checked || !gThread)
    return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t stack = reinterpret_cast<uintptr_t>(gThread->fiber.stack);
  if (a >= stack && a < stack + kStack)
    return; // the thread's own locals
  // The index builtins: emu_current and the thread it points to.
  const uintptr_t self = reinterpret_cast<uintptr_t>(&gThread->t);
  if (a == reinterpret_cast<uintptr_t>(&emu_current) || (a >= self && a < self + sizeof(Thread)))
    return;
  ++r->accesses;
  const uintptr_t args = reinterpret_cast<uintptr_t>(r->launch->call.get());
  if (a >= args && a + n <= args + r->launch->callSize) {
    if (write)
      outOfBounds(*r, a, n, true, "inside the kernel's arguments");
    return;
  }
  const unsigned global = r->blockLinear * threadsPerBlock(*r->launch) + gThread->linear;
  if (auto *al = findAlloc(a)) {
    if (a + n > al->first + al->second.bytes)
      return outOfBounds(*r, a, n, write, "past the end of allocation #" + std::to_string(al->second.id) + " (" +
                                              std::to_string(al->second.bytes) + " bytes)");
    if (r->operands) {
      std::string miss = operandMiss(*r->operands, *al, a, n);
      if (!miss.empty())
        return outOfBounds(*r, a, n, write, miss);
    }
    return track(*r, r->globalShadow, "global", nullptr, a, n, write, global);
  }
  if (const Module *m = moduleOf(a)) {
    const Symbol *s = symbolAt(*m, a);
    const bool inShared = a >= m->sharedLo && a < m->sharedHi;
    if (!s || a + n > s->start + s->size)
      return outOfBounds(*r, a, n, write,
                         inShared ? "outside every __shared__ array" : "outside every device variable");
    if (s->shared) {
      if (std::find(r->sharedUsed.begin(), r->sharedUsed.end(), s) == r->sharedUsed.end())
        r->sharedUsed.push_back(s);
      return track(*r, r->sharedShadow, "shared", s, a, n, write, gThread->linear);
    }
    return track(*r, r->globalShadow, "global", s, a, n, write, global);
  }
  outOfBounds(*r, a, n, write, describeAddress(a));
}

//===----------------------------------------------------------------------===//
// Streams and graphs
//===----------------------------------------------------------------------===//

struct Op {
  enum Kind { Kernel, Copy, Set, Host } kind;
  std::shared_ptr<Launch> launch;
  void *dst = nullptr;
  const void *src = nullptr;
  size_t bytes = 0;
  int value = 0;
  void (*fn)(void *) = nullptr;
  std::shared_ptr<void> ctx;
  std::shared_ptr<const Operands> operands; ///< of the runtime launch that enqueued it
};

} // namespace

struct Graph {
  std::vector<Op> ops;
};
struct Stream {
  std::deque<Op> pending;
  Graph *capture = nullptr;
};

namespace {
Stream gDefaultStream;
Stream *streamOf(Stream *s) { return s ? s : &gDefaultStream; }


void runOp(Op &op) {
  switch (op.kind) {
  case Op::Kernel:
    runLaunch(*op.launch, op.operands.get());
    break;
  case Op::Copy:
    std::memmove(op.dst, op.src, op.bytes);
    break;
  case Op::Set:
    std::memset(op.dst, op.value, op.bytes);
    break;
  case Op::Host:
    op.fn(op.ctx.get());
    break;
  }
}

void enqueue(Stream *s, Op op) {
  s = streamOf(s);
  op.operands = gOperands;
  if (s->capture)
    s->capture->ops.push_back(std::move(op));
  else
    s->pending.push_back(std::move(op));
}

int synchronize(Stream *s) {
  s = streamOf(s);
  while (!s->pending.empty()) {
    Op op = std::move(s->pending.front());
    s->pending.pop_front();
    runOp(op);
  }
  return takeError();
}

/// Whether [p, p + bytes) is device memory: inside one allocation or one
/// __device__ variable of a kernel object (a model constant).
bool isDevice(const void *p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (auto *al = findAlloc(a))
    return a + bytes <= al->first + al->second.bytes;
  if (const Module *m = moduleOf(a))
    if (const Symbol *s = symbolAt(*m, a))
      return !s->shared && a + bytes <= s->start + s->size;
  return false;
}

int copyAsync(void *dst, const void *src, size_t bytes, int kind, Stream *s) {
  if (bytes == 0)
    return 0;
  const bool dDev = isDevice(dst, bytes), sDev = isDevice(src, bytes);
  const bool wantD = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice,
             wantS = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault && (wantD != dDev || wantS != sDev)) {
    fail(cudaErrorInvalidValue, "memcpy of " + std::to_string(bytes) + " bytes: the " +
                                    (wantD != dDev ? "destination " + hex(reinterpret_cast<uintptr_t>(dst))
                                                   : "source " + hex(reinterpret_cast<uintptr_t>(src))) +
                                    " is not the kind of memory the copy names (" +
                                    describeAddress(reinterpret_cast<uintptr_t>(wantD != dDev ? dst : src)) + ")");
    return cudaErrorInvalidValue;
  }
  if (gOperands)
    for (const void *p : {static_cast<const void *>(dst), src})
      if (auto *al = findAlloc(reinterpret_cast<uintptr_t>(p))) {
        std::string miss = operandMiss(*gOperands, *al, reinterpret_cast<uintptr_t>(p), bytes);
        if (!miss.empty()) {
          fail(cudaErrorInvalidValue, "memcpy of " + std::to_string(bytes) + " bytes at " +
                                          hex(reinterpret_cast<uintptr_t>(p)) + ": " + miss);
          return cudaErrorInvalidValue;
        }
      }
  // The host side of a device-to-host copy is undefined until the stream is
  // synchronised: poison it, so a read before the sync shows.
  if (!dDev && !streamOf(s)->capture)
    std::memset(dst, 0xff, bytes);
  Op op{Op::Copy};
  op.dst = dst;
  op.src = src;
  op.bytes = bytes;
  enqueue(s, std::move(op));
  return 0;
}

int setAsync(void *dst, int v, size_t bytes, Stream *s) {
  if (bytes == 0)
    return 0;
  if (!isDevice(dst, bytes)) {
    fail(cudaErrorInvalidValue, "memset of " + std::to_string(bytes) + " bytes at " +
                                    hex(reinterpret_cast<uintptr_t>(dst)) + ": not inside one device allocation (" +
                                    describeAddress(reinterpret_cast<uintptr_t>(dst)) + ")");
    return cudaErrorInvalidValue;
  }
  if (gOperands) {
    std::string miss = operandMiss(*gOperands, *findAlloc(reinterpret_cast<uintptr_t>(dst)),
                                   reinterpret_cast<uintptr_t>(dst), bytes);
    if (!miss.empty()) {
      fail(cudaErrorInvalidValue, "memset of " + std::to_string(bytes) + " bytes at " +
                                      hex(reinterpret_cast<uintptr_t>(dst)) + ": " + miss);
      return cudaErrorInvalidValue;
    }
  }
  Op op{Op::Set};
  op.dst = dst;
  op.value = v;
  op.bytes = bytes;
  enqueue(s, std::move(op));
  return 0;
}

struct StatsWriter {
  ~StatsWriter() {
    const char *path = std::getenv("ORTC_EMU_STATS");
    if (!path)
      return;
    FILE *f = std::fopen(path, "w");
    if (!f)
      return;
    std::fprintf(f, "{\"checked_accesses\": %ld, \"launches\": {", gCheckedAccesses);
    bool first = true;
    for (const auto &[k, n] : gLaunchCounts) {
      std::fprintf(f, "%s\"%s\": %ld", first ? "" : ", ", k.c_str(), n);
      first = false;
    }
    std::fprintf(f, "}}\n");
    std::fclose(f);
  }
} gStats;

} // namespace


//===----------------------------------------------------------------------===//
// The interface of the fronts (device.h)
//===----------------------------------------------------------------------===//

/// The runtime names each launch's operands (kernel_abi.h); the work enqueued until
/// its call with n = 0 is checked against them. An operand of unknown size (0 bytes)
/// in device memory bounds nothing from its address to its allocation's end.
extern "C" void ortc_launch_operands(const char *kernel, const char *node, int n, void *const *ptrs,
                                     const unsigned long long *bytes) {
  if (n <= 0) {
    gOperands.reset();
    return;
  }
  auto ops = std::make_shared<Operands>();
  ops->kernel = kernel ? kernel : "";
  ops->node = node ? node : "";
  for (int k = 0; k < n; ++k) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(ptrs[k]);
    if (auto *al = findAlloc(a))
      ops->ranges.emplace_back(a, bytes[k] ? size_t(bytes[k]) : al->first + al->second.bytes - a);
  }
  gOperands = std::move(ops);
}

extern "C" void emu_submit(Stream *stream, Launch *l) {
  loadModule(l->module);
  const Limits *found = limits(l->hip);
  if (!found) {
    fail(cudaErrorInvalidConfiguration, "cannot launch " + where(*l) + ": " +
                                            (gLimitsTable ? "the target's launch limits do not list " + gArch
                                                          : std::string("the kernel object has no ortc_gpu_launch_limits "
                                                                        "(the ortc target prelude)")));
    return;
  }
  const Limits &lim = *found;
  const unsigned threads = l->block.x * l->block.y * l->block.z;
  std::string why;
  if (!(hardwareWarps(gArch) & (l->warpSize == 64 ? 2 : 1)))
    why = "it was compiled for " + std::to_string(l->warpSize) + "-lane warps; " + gArch + " runs " +
          std::to_string(hardwareWarp(gArch)) + "-lane ones";
  else if (!l->grid.x || !l->grid.y || !l->grid.z || !threads)
    why = "an empty grid or block";
  else if (threads > lim.threads)
    why = std::to_string(threads) + " threads per block; " + gArch + " allows " + std::to_string(lim.threads);
  else if (l->grid.x > lim.gridX)
    why = "grid.x = " + std::to_string(l->grid.x) + "; " + gArch + " allows " + std::to_string(lim.gridX);
  else if (l->grid.y > lim.gridY)
    why = "grid.y = " + std::to_string(l->grid.y) + "; " + gArch + " allows " + std::to_string(lim.gridY);
  else if (l->grid.z > lim.gridZ)
    why = "grid.z = " + std::to_string(l->grid.z) + "; " + gArch + " allows " + std::to_string(lim.gridZ);
  else if (l->dynamicShared > lim.dynamicShared)
    why = std::to_string(l->dynamicShared) + " bytes of dynamic shared memory; " + gArch + " allows " +
          std::to_string(lim.dynamicShared);
  if (!why.empty()) {
    fail(cudaErrorInvalidConfiguration, "cannot launch " + where(*l) + ": " + why);
    return;
  }
  Op op{Op::Kernel};
  op.launch = std::make_shared<Launch>(std::move(*l));
  enqueue(stream, std::move(op));
}

extern "C" uint64_t emu_warp(int op, uint64_t bits, int size, int arg, int width, uint64_t mask) {
  if (!gThread) {
    std::fprintf(stderr, "ortc-emu: a warp operation outside a kernel\n");
    std::abort();
  }
  const int ws = gRun->launch->warpSize;
  if (width <= 0 || width > ws || (width & (width - 1))) {
    fail(cudaErrorLaunchFailure, where(*gRun->launch) + ": shuffle width " + std::to_string(width) +
                                     " is not a power of two up to the warp size " + std::to_string(ws));
    width = ws;
  }
  if (mask && ws < 64)
    mask &= (uint64_t(1) << ws) - 1;
  const unsigned lane = gThread->linear % ws;
  if (mask && !((mask >> lane) & 1))
    fail(cudaErrorLaunchFailure, where(*gRun->launch) + ": lane " + std::to_string(lane) +
                                     " runs a warp operation whose mask does not name it");
  gThread->req = {op, size, arg, width, bits, mask, 0};
  gThread->state = AtWarp;
  yieldToScheduler();
  return gThread->req.result;
}

extern "C" void emu_syncthreads() {
  if (!gThread)
    return;
  gThread->state = AtBarrier;
  yieldToScheduler();
}

extern "C" void emu_threadfence() {}

extern "C" float emu_atomic_add_f32(float *p, float v) {
  float old = *p;
  *p = old + v;
  return old;
}
extern "C" double emu_atomic_add_f64(double *p, double v) {
  double old = *p;
  *p = old + v;
  return old;
}
extern "C" long long emu_atomic_rmw_i64(long long *p, long long v, int op, int size) {
  // size: bytes, negative for unsigned.
  const int bytes = size < 0 ? -size : size;
  long long old = 0;
  std::memcpy(&old, p, bytes);
  if (bytes < 8) { // sign- or zero-extend
    const int shift = 64 - 8 * bytes;
    old = size < 0 ? static_cast<long long>((static_cast<unsigned long long>(old) << shift) >> shift)
                   : (old << shift) >> shift;
  }
  long long r = old;
  switch (op) {
  case AtomAdd: r = old + v; break;
  case AtomMax: r = size < 0 ? (unsigned long long)old > (unsigned long long)v ? old : v : std::max(old, v); break;
  case AtomMin: r = size < 0 ? (unsigned long long)old < (unsigned long long)v ? old : v : std::min(old, v); break;
  case AtomExch: r = v; break;
  case AtomOr: r = old | v; break;
  case AtomAnd: r = old & v; break;
  }
  std::memcpy(p, &r, bytes);
  return old;
}

extern "C" void emu_enqueue_host(Stream *s, void (*fn)(void *), void *ctx, void (*done)(void *)) {
  Op op{Op::Host};
  op.fn = fn;
  op.ctx = std::shared_ptr<void>(ctx, done);
  enqueue(s, std::move(op));
}

extern "C" bool emu_check_range(const void *p, size_t bytes, const char *what) {
  if (bytes == 0 || isDevice(p, bytes))
    return true;
  fail(cudaErrorIllegalAddress, std::string(what) + ": " + std::to_string(bytes) + " bytes at " +
                                    hex(reinterpret_cast<uintptr_t>(p)) + " are not inside one device allocation (" +
                                    describeAddress(reinterpret_cast<uintptr_t>(p)) + ")");
  return false;
}

extern "C" void emu_fail(const char *message) { fail(cudaErrorLaunchFailure, message); }

/// The launch limits part of cudaDeviceProp / hipDeviceProp_t (zero without a table).
template <typename Props> void fillProperties(Props &p, const Limits *l) {
  p.multiProcessorCount = 1;
  if (!l)
    return;
  p.maxThreadsPerBlock = static_cast<int>(l->threads);
  p.maxGridSize[0] = static_cast<int>(l->gridX);
  p.maxGridSize[1] = static_cast<int>(l->gridY);
  p.maxGridSize[2] = static_cast<int>(l->gridZ);
  p.sharedMemPerBlock = l->staticShared;
}

bool emu_checking = false;
extern "C" void emu_access(const void *p, size_t bytes, bool write) { access(p, bytes, write); }

} // namespace emu

//===----------------------------------------------------------------------===//
// The CUDA and HIP runtime API
//===----------------------------------------------------------------------===//

using emu::Stream;

extern "C" {
cudaError_t cudaGetDeviceCount(int *count) {
  *count = emu::deviceVisible() ? 1 : 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return emu::deviceVisible() && device == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device) {
  if (!emu::deviceVisible() || device != 0)
    return cudaErrorInvalidValue;
  const std::string &arch = emu::arch(false);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "ortc emulated %s", arch.c_str());
  const char *a = arch.c_str() + 3;
  p->major = a[0] - '0';
  p->minor = a[1] - '0';
  if (a[2]) { // sm_100 and later
    p->major = p->major * 10 + p->minor;
    p->minor = a[2] - '0';
  }
  p->warpSize = 32;
  emu::fillProperties(*p, emu::limits(false));
  p->sharedMemPerBlockOptin = p->sharedMemPerBlock ? emu::limits(false)->dynamicShared : 0;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) { return static_cast<cudaError_t>(emu::deviceMalloc(p, bytes)); }
cudaError_t cudaFree(void *p) { return static_cast<cudaError_t>(emu::deviceFree(p)); }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
  return static_cast<cudaError_t>(emu::copyAsync(d, s, n, k, st));
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) {
  int e = emu::copyAsync(d, s, n, k, nullptr);
  return static_cast<cudaError_t>(e ? e : emu::synchronize(nullptr));
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) {
  return static_cast<cudaError_t>(emu::setAsync(d, v, n, st));
}
cudaError_t cudaMemset(void *d, int v, size_t n) {
  int e = emu::setAsync(d, v, n, nullptr);
  return static_cast<cudaError_t>(e ? e : emu::synchronize(nullptr));
}
cudaError_t cudaStreamCreate(cudaStream_t *s) {
  *s = new Stream;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s->pending.empty())
    emu::synchronize(s);
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (emu::streamOf(s)->capture)
    return cudaErrorStreamCaptureInvalidated;
  return static_cast<cudaError_t>(emu::synchronize(s));
}
cudaError_t cudaDeviceSynchronize(void) { return static_cast<cudaError_t>(emu::synchronize(nullptr)); }
cudaError_t cudaGetLastError(void) { return static_cast<cudaError_t>(emu::takeError()); }
cudaError_t cudaPeekAtLastError(void) { return static_cast<cudaError_t>(emu::gErrorCode); }
const char *cudaGetErrorString(cudaError_t e) {
  static std::string text;
  text = e == cudaSuccess ? "no error" : emu::gError.empty() ? "error " + std::to_string(e) : emu::gError;
  return text.c_str();
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  Stream *st = emu::streamOf(s);
  if (st->capture)
    return cudaErrorInvalidValue;
  emu::synchronize(st); // work enqueued before the capture is not part of it
  st->capture = new emu::Graph;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
  Stream *st = emu::streamOf(s);
  if (!st->capture)
    return cudaErrorInvalidValue;
  *g = st->capture;
  st->capture = nullptr;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long) {
  *x = new emu::Graph(*g);
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
  for (const emu::Op &op : x->ops)
    emu::enqueue(s, op);
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
  delete x;
  return cudaSuccess;
}
cudaError_t cudaGetSymbolAddress(void **p, const void *symbol) {
  emu::loadModule(symbol);
  *p = const_cast<void *>(symbol);
  return cudaSuccess;
}

// Events: host time when the stream reaches them (emulated time is host time).
} // extern "C"
struct EmuEvent {
  std::chrono::steady_clock::time_point at;
  Stream *stream = nullptr;
};
extern "C" {
cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = new EmuEvent;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  e->stream = s;
  emu::emu_enqueue_host(s, [](void *p) { static_cast<EmuEvent *>(p)->at = std::chrono::steady_clock::now(); },
                        e, [](void *) {});
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return static_cast<cudaError_t>(emu::synchronize(e->stream)); }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

// HIP: the same device; its arch names a gfx target.
hipError_t hipGetDeviceCount(int *count) { return static_cast<hipError_t>(cudaGetDeviceCount(count)); }
hipError_t hipSetDevice(int device) { return static_cast<hipError_t>(cudaSetDevice(device)); }
hipError_t hipGetDeviceProperties(hipDeviceProp_t *p, int device) {
  if (!emu::deviceVisible() || device != 0)
    return hipErrorInvalidValue;
  const std::string &arch = emu::arch(true);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "ortc emulated %s", arch.c_str());
  std::snprintf(p->gcnArchName, sizeof p->gcnArchName, "%s:sramecc+:xnack-", arch.c_str());
  p->warpSize = emu::hardwareWarp(arch); // an RDNA device reports its native wave32
  emu::fillProperties(*p, emu::limits(true));
  return hipSuccess;
}
hipError_t hipMalloc(void **p, size_t bytes) { return static_cast<hipError_t>(cudaMalloc(p, bytes)); }
hipError_t hipFree(void *p) { return static_cast<hipError_t>(cudaFree(p)); }
hipError_t hipMemcpyAsync(void *d, const void *s, size_t n, hipMemcpyKind k, hipStream_t st) {
  return static_cast<hipError_t>(emu::copyAsync(d, s, n, k, st));
}
hipError_t hipMemsetAsync(void *d, int v, size_t n, hipStream_t st) {
  return static_cast<hipError_t>(emu::setAsync(d, v, n, st));
}
hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned f) {
  return static_cast<hipError_t>(cudaStreamCreateWithFlags(s, f));
}
hipError_t hipStreamDestroy(hipStream_t s) { return static_cast<hipError_t>(cudaStreamDestroy(s)); }
hipError_t hipStreamSynchronize(hipStream_t s) { return static_cast<hipError_t>(cudaStreamSynchronize(s)); }
hipError_t hipDeviceSynchronize(void) { return static_cast<hipError_t>(cudaDeviceSynchronize()); }
hipError_t hipGetLastError(void) { return static_cast<hipError_t>(cudaGetLastError()); }
const char *hipGetErrorString(hipError_t e) { return cudaGetErrorString(static_cast<cudaError_t>(e)); }
hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode m) {
  return static_cast<hipError_t>(cudaStreamBeginCapture(s, static_cast<cudaStreamCaptureMode>(m)));
}
hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t *g) {
  return static_cast<hipError_t>(cudaStreamEndCapture(s, g));
}
hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t *x, hipGraph_t g, unsigned long long f) {
  return static_cast<hipError_t>(cudaGraphInstantiateWithFlags(x, g, f));
}
hipError_t hipGraphDestroy(hipGraph_t g) { return static_cast<hipError_t>(cudaGraphDestroy(g)); }
hipError_t hipGraphLaunch(hipGraphExec_t x, hipStream_t s) { return static_cast<hipError_t>(cudaGraphLaunch(x, s)); }
hipError_t hipGraphExecDestroy(hipGraphExec_t x) { return static_cast<hipError_t>(cudaGraphExecDestroy(x)); }
hipError_t hipGetSymbolAddress(void **p, const void *symbol) {
  return static_cast<hipError_t>(cudaGetSymbolAddress(p, symbol));
}
} // extern "C"
