//===- Npz.h - numpy .npy/.npz reading and writing --------------*- C++ -*-===//
//
// Why: feeds, parameter files and checkpoints are exchanged with Python as numpy
// files, and the runtime may depend on nothing but the standard library and zlib.
// This reads .npy (format 1.0-3.0) and .npz written by np.savez (stored) and
// np.savez_compressed (deflate), and writes stored .npz files that np.load reads.
// Only little-endian, C-order arrays of the dtypes below are supported; anything
// else is refused with a message, never misread.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_NPZ_H
#define ORTC_RUNTIME_NPZ_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ortc {
namespace npz {

/// Element types: <f4 <f8 <i8 <i4 |b1 |u1 <f2 <u2 (bf16 travels as raw <u2).
enum class DType { F32, F64, I64, I32, Bool, U8, F16, U16 };

/// The numpy descr string ("<f4"...).
const char *descr(DType dtype);
size_t itemSize(DType dtype);
/// Parses a numpy descr; "=" and "<" are accepted for multi-byte types, "|" for bytes.
bool parseDescr(const std::string &descr, DType &dtype);
/// The npz dtype of a manifest dtype ("f32" -> F32, "bf16" -> U16); false if none.
bool fromManifestDtype(const std::string &dtype, DType &out);
/// Human-readable name for messages, e.g. "float32 (<f4)".
std::string describe(DType dtype);
std::string shapeString(const std::vector<int64_t> &shape);

struct Array {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::string data; ///< raw little-endian elements, C order
};

/// An array to write; `data` must hold prod(shape) * itemSize(dtype) bytes.
struct ArrayRef {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void *data;
};

/// Parses the image of one .npy file. `error` does not name a file.
bool parseNpy(const std::string &bytes, Array &out, std::string &error);
/// Parses the header at the start of `bytes` of a .npy image `available` bytes long
/// (bytes may hold the header only): dtype and shape into `out` (no data), the offset
/// of element 0 into `dataAt`; checks the data's size against the shape.
bool parseNpyHeader(const std::string &bytes, uint64_t available, Array &out, size_t &dataAt,
                    std::string &error);

/// One array of an .npz archive (or a whole .npy file) as its headers describe it, for
/// reading a slice at a time (streamed feeds) without loading the archive.
struct Member {
  std::string name;         ///< without ".npy"
  std::string entry;        ///< the archive's name for it (the file's path for a .npy)
  uint32_t method = 0;      ///< 0 stored, 8 deflate
  uint32_t crc = 0;
  uint64_t dataAt = 0, csize = 0, usize = 0; ///< the member's bytes in the file
  bool plainNpy = false;    ///< a .npy file, not an archive member (no CRC)
  /// The array's dtype and shape (from its .npy header), and for stored members and
  /// .npy files (`indexed`) the file offset of element 0; deflated members are read whole.
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  bool indexed = false;
  uint64_t arrayAt = 0;
};
/// Reads an .npz's directories (and stored members' .npy headers), not its data.
bool indexNpz(const std::string &path, std::vector<Member> &out, std::string &error);
/// Indexes a .npy file as one member named after the file's stem.
bool indexNpyFile(const std::string &path, Member &out, std::string &error);
/// Reads one member whole (inflating it, checking its CRC).
bool readMember(const std::string &path, const Member &m, Array &out, std::string &error);
/// Reads `bytes` bytes of an indexed member's array data from byte `offset`.
bool readSlice(const std::string &path, const Member &m, uint64_t offset, uint64_t bytes,
               std::string &out, std::string &error);
/// A .npy file mapped read-only (numpy's mmap_mode='r'): streamed feeds copy each
/// batch out of the mapping and then drop the mapping's pages from the process
/// (MADV_DONTNEED; they stay in the page cache), so the resident memory stays one batch
/// however large the array is.
class MappedNpy {
public:
  MappedNpy() = default;
  MappedNpy(const MappedNpy &) = delete;
  MappedNpy &operator=(const MappedNpy &) = delete;
  ~MappedNpy();
  bool open(const std::string &path, std::string &error);
  /// Copies `bytes` bytes of the array data of `m` (indexNpyFile of this file) from byte
  /// `offset` into `out`.
  bool copy(const Member &m, uint64_t offset, uint64_t bytes, std::string &out,
            std::string &error) const;

private:
  std::string path;
  const char *base = nullptr;
  uint64_t size = 0;
};

/// Serialises one array as a .npy (format 1.0) image.
std::string makeNpy(const ArrayRef &array);

/// Reads a .npy file; the array is named after the file's stem.
bool readNpy(const std::string &path, Array &out, std::string &error);
/// Reads every array of an .npz file, in archive order. Member names lose ".npy".
bool readNpz(const std::string &path, std::vector<Array> &out, std::string &error);
/// Writes an .npz (stored, with CRC-32) to `path + ".tmp"` and renames it over
/// `path`, so a failure never leaves a partial file at `path`.
bool writeNpz(const std::string &path, const std::vector<ArrayRef> &arrays, std::string &error);

} // namespace npz
} // namespace ortc

#endif // ORTC_RUNTIME_NPZ_H
