//===- ModelMapping.cpp - a binary ONNX file mapped, weights left in place -===//
//
// The protobuf wire format is walked by hand only along the path that holds the bulk:
// ModelProto.graph (field 7) -> GraphProto.initializer (field 5) -> TensorProto.raw_data
// (field 9). Every other field is copied byte for byte, so protobuf itself still parses
// and checks everything; only the lengths of the rewritten messages are re-encoded.
//
//===----------------------------------------------------------------------===//
#include "compiler/Import/ModelMapping.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ortc {
namespace {

constexpr uint32_t kModelGraph = 7, kGraphInitializer = 5, kTensorRawData = 9;
constexpr int kLengthDelimited = 2;

using Byte = unsigned char;

/// One field of a message: its number and wire type, the bytes of the whole field
/// [start, end) and, for a length-delimited one, of its payload [payload, end).
struct Field {
  uint32_t number = 0;
  int wire = 0;
  const Byte *start = nullptr, *payload = nullptr, *end = nullptr;
};

bool readVarint(const Byte *&p, const Byte *end, uint64_t &v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end)
      return false;
    Byte b = *p++;
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80))
      return true;
  }
  return false;
}

/// Reads the field at `p` (advancing past it); false on malformed input or a group
/// (wire types 3/4, which ONNX does not use).
bool nextField(const Byte *&p, const Byte *end, Field &f) {
  f.start = p;
  uint64_t tag;
  if (!readVarint(p, end, tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
    return false;
  f.number = uint32_t(tag >> 3);
  f.wire = int(tag & 7);
  f.payload = p;
  switch (f.wire) {
  case 0: {
    uint64_t v;
    if (!readVarint(p, end, v))
      return false;
    break;
  }
  case 1:
    if (end - p < 8)
      return false;
    p += 8;
    break;
  case kLengthDelimited: {
    uint64_t len;
    if (!readVarint(p, end, len) || len > uint64_t(end - p))
      return false;
    f.payload = p;
    p += len;
    break;
  }
  case 5:
    if (end - p < 4)
      return false;
    p += 4;
    break;
  default:
    return false;
  }
  f.end = p;
  return true;
}

void putVarint(std::string &out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(v | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

/// Copies the message [b, e) to `out`, except that each length-delimited field
/// `number` goes through `rewrite(payload, payloadEnd, replacement)`; a rewritten
/// field whose `rewrite` sets `drop` is left out altogether.
template <typename Rewrite>
bool copyRewriting(const Byte *b, const Byte *e, uint32_t number, std::string &out,
                   Rewrite rewrite) {
  const Byte *p = b;
  while (p != e) {
    Field f;
    if (!nextField(p, e, f))
      return false;
    if (f.number != number || f.wire != kLengthDelimited) {
      out.append(reinterpret_cast<const char *>(f.start), size_t(f.end - f.start));
      continue;
    }
    std::string inner;
    bool drop = false;
    if (!rewrite(f.payload, f.end, inner, drop))
      return false;
    if (drop)
      continue;
    putVarint(out, (uint64_t(number) << 3) | kLengthDelimited);
    putVarint(out, inner.size());
    out += inner;
  }
  return true;
}

} // namespace

bool stripInitializerData(const char *buf, size_t n, std::string &stripped,
                          std::vector<RawDataRegion> &regions) {
  const Byte *base = reinterpret_cast<const Byte *>(buf);
  auto tensor = [&](const Byte *b, const Byte *e, std::string &out, bool &) {
    regions.emplace_back();
    return copyRewriting(b, e, kTensorRawData, out,
                         [&](const Byte *pb, const Byte *pe, std::string &, bool &drop) {
                           // Protobuf keeps the last of repeated bytes fields.
                           regions.back() = {true, size_t(pb - base), size_t(pe - pb)};
                           drop = true;
                           return true;
                         });
  };
  auto graph = [&](const Byte *b, const Byte *e, std::string &out, bool &) {
    return copyRewriting(b, e, kGraphInitializer, out, tensor);
  };
  stripped.clear();
  regions.clear();
  return copyRewriting(base, base + n, kModelGraph, stripped, graph);
}

std::shared_ptr<const FileMapping> FileMapping::open(const std::string &path,
                                                     std::string &error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = std::string("cannot read file (") + std::strerror(errno) + ")";
    return nullptr;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    error = st.st_size == 0 ? "file is empty" : std::string("cannot stat file");
    ::close(fd);
    return nullptr;
  }
  // MAP_POPULATE: the pages are entered in one pass instead of a fault each (the
  // writer of params.bin reads every one of them anyway).
  void *p = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    error = std::string("cannot map file (") + std::strerror(err) + ")";
    return nullptr;
  }
  return std::shared_ptr<const FileMapping>(
      new FileMapping(static_cast<const char *>(p), size_t(st.st_size)));
}

FileMapping::~FileMapping() { munmap(const_cast<char *>(base), length); }

} // namespace ortc
