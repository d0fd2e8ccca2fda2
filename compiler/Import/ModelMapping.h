//===- ModelMapping.h - a binary ONNX file mapped, weights left in place -*- C++ -*-===//
//
// Why: a 500 MB model is nearly all initializer raw data. Parsing it with protobuf copies
// every byte twice (read() into a buffer, then into the message's strings, faulting in
// fresh pages for each), and writing params.bin copies it again. Instead the file is
// mapped read-only, the top-level graph's initializers are re-encoded without their
// `raw_data` (a few MB of structure that protobuf parses as usual), and each
// initializer's raw data stays a view into the mapping until params.bin is written.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_IMPORT_MODELMAPPING_H
#define ORTC_IMPORT_MODELMAPPING_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ortc {

/// Where one initializer's raw_data lies in the file (offset, size); `present` is
/// false for an initializer that has none (typed fields or external data).
struct RawDataRegion {
  bool present = false;
  size_t offset = 0;
  size_t size = 0;
};

/// Copies the serialized ModelProto `buf[0, n)` to `stripped` with the raw_data of the
/// top-level graph's initializers left out, and records in `regions` where each
/// initializer's raw data was (in initializer order, as protobuf will parse them from
/// `stripped`). Returns false on anything it does not read as well-formed wire format
/// (the caller then parses the file the ordinary way, which reports the error).
bool stripInitializerData(const char *buf, size_t n, std::string &stripped,
                          std::vector<RawDataRegion> &regions);

/// A read-only mapping of a whole file, unmapped when the last owner lets go.
class FileMapping {
public:
  /// Maps `path`; null (and `error` set) if it cannot be opened or mapped.
  static std::shared_ptr<const FileMapping> open(const std::string &path, std::string &error);
  ~FileMapping();
  FileMapping(const FileMapping &) = delete;
  FileMapping &operator=(const FileMapping &) = delete;

  const char *data() const { return base; }
  size_t size() const { return length; }

private:
  FileMapping(const char *base, size_t length) : base(base), length(length) {}
  const char *base;
  size_t length;
};

} // namespace ortc

#endif // ORTC_IMPORT_MODELMAPPING_H
