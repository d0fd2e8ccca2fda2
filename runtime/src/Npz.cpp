//===- Npz.cpp - numpy .npy/.npz reading and writing ---------------------===//
//
// Why: see Npz.h. The zip side implements just what numpy produces: local
// headers, the central directory (zip64 extras included, which np.savez writes),
// methods stored and deflate; every member's CRC-32 is checked on reading. The
// .npy header is a Python dict literal, parsed by a tiny tokenizer below.
//
//===----------------------------------------------------------------------===//
#include "Npz.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ortc {
namespace npz {

const char *descr(DType d) {
  switch (d) {
  case DType::F32:
    return "<f4";
  case DType::F64:
    return "<f8";
  case DType::I64:
    return "<i8";
  case DType::I32:
    return "<i4";
  case DType::Bool:
    return "|b1";
  case DType::U8:
    return "|u1";
  case DType::F16:
    return "<f2";
  case DType::U16:
    return "<u2";
  }
  return "?";
}

size_t itemSize(DType d) {
  switch (d) {
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F16:
  case DType::U16:
    return 2;
  case DType::Bool:
  case DType::U8:
    return 1;
  }
  return 0;
}

std::string describe(DType d) {
  static const char *names[] = {"float32", "float64", "int64",   "int32",
                                "bool",    "uint8",   "float16", "uint16"};
  return std::string(names[int(d)]) + " (" + descr(d) + ")";
}

bool parseDescr(const std::string &s, DType &out) {
  if (s.size() < 2)
    return false;
  std::string body = s.substr(1);
  bool single = body == "b1" || body == "u1";
  if (single ? (s[0] != '|' && s[0] != '<' && s[0] != '=') : (s[0] != '<' && s[0] != '='))
    return false;
  for (int i = 0; i < 8; ++i)
    if (body == descr(DType(i)) + 1) {
      out = DType(i);
      return true;
    }
  return false;
}

bool fromManifestDtype(const std::string &d, DType &out) {
  static const std::pair<const char *, DType> table[] = {
      {"f32", DType::F32},   {"f64", DType::F64}, {"i64", DType::I64}, {"i32", DType::I32},
      {"bool", DType::Bool}, {"f16", DType::F16}, {"bf16", DType::U16}};
  for (const auto &[name, dtype] : table)
    if (d == name) {
      out = dtype;
      return true;
    }
  return false;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

uint32_t rd16(const std::string &b, size_t at) {
  return uint32_t(uint8_t(b[at])) | uint32_t(uint8_t(b[at + 1])) << 8;
}
uint32_t rd32(const std::string &b, size_t at) { return rd16(b, at) | rd16(b, at + 2) << 16; }
uint64_t rd64(const std::string &b, size_t at) {
  return uint64_t(rd32(b, at)) | uint64_t(rd32(b, at + 4)) << 32;
}
void wr16(std::string &b, uint32_t v) {
  b += char(v & 0xff);
  b += char((v >> 8) & 0xff);
}
void wr32(std::string &b, uint32_t v) {
  wr16(b, v & 0xffff);
  wr16(b, v >> 16);
}

/// Tokenizer for the .npy header, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
struct DictParser {
  const std::string &s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t'))
      ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  bool quoted(std::string &out) {
    ws();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"'))
      return false;
    char q = s[i++];
    size_t end = s.find(q, i);
    if (end == std::string::npos)
      return false;
    out = s.substr(i, end - i);
    i = end + 1;
    return true;
  }
  bool word(std::string &out) {
    ws();
    size_t start = i;
    while (i < s.size() && (isalnum(uint8_t(s[i])) || s[i] == '_'))
      ++i;
    out = s.substr(start, i - start);
    return !out.empty();
  }
  bool tuple(std::vector<int64_t> &out) {
    if (!eat('('))
      return false;
    while (!eat(')')) {
      std::string w;
      if (!word(w) || w.find_first_not_of("0123456789") != std::string::npos || w.size() > 18)
        return false;
      out.push_back(std::stoll(w));
      if (!eat(',') && (ws(), i >= s.size() || s[i] != ')'))
        return false;
    }
    return true;
  }
};

bool readFile(const std::string &path, std::string &out, std::string &error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  if (f.bad()) {
    error = "cannot read " + path;
    return false;
  }
  return true;
}

bool inflateRaw(const char *in, uint64_t inSize, std::string &out, std::string &error) {
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
    error = "zlib inflateInit2 failed";
    return false;
  }
  zs.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(in));
  uint64_t inLeft = inSize, outDone = 0;
  int rc = Z_OK;
  const uInt chunk = 1u << 30;
  while (rc == Z_OK) {
    if (zs.avail_in == 0 && inLeft) {
      zs.avail_in = uInt(std::min<uint64_t>(inLeft, chunk));
      inLeft -= zs.avail_in;
    }
    outDone = zs.total_out;
    zs.next_out = reinterpret_cast<Bytef *>(&out[0]) + outDone;
    zs.avail_out = uInt(std::min<uint64_t>(out.size() - outDone, chunk));
    if (zs.avail_out == 0 && zs.avail_in == 0 && !inLeft)
      break;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc == Z_BUF_ERROR && zs.avail_out == 0)
      break; // more output than the directory announced
  }
  uint64_t total = zs.total_out;
  inflateEnd(&zs);
  if (rc != Z_STREAM_END || total != out.size()) {
    error = rc == Z_STREAM_END || rc == Z_OK || rc == Z_BUF_ERROR
                ? "the inflated size does not match the zip directory"
                : std::string("corrupt deflate data (zlib: ") + (zs.msg ? zs.msg : "error") + ")";
    return false;
  }
  return true;
}

bool writeAll(const std::string &path, const std::string &data, std::string &error) {
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) {
    error = "cannot create " + path + ": " + std::strerror(errno);
    return false;
  }
  bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size() && std::fflush(f) == 0 &&
            fsync(fileno(f)) == 0;
  int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    error = "cannot write " + path + ": " + std::strerror(err);
    std::remove(path.c_str());
  }
  return ok;
}

} // namespace

bool parseNpyHeader(const std::string &b, uint64_t available, Array &out, size_t &dataAt,
                    std::string &error) {
  out = Array();
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) {
    error = "not a .npy file (bad magic)";
    return false;
  }
  int major = uint8_t(b[6]);
  if (major < 1 || major > 3) {
    error = "unsupported .npy format version " + std::to_string(major);
    return false;
  }
  size_t headerLen = major == 1 ? rd16(b, 8) : (b.size() >= 12 ? rd32(b, 8) : SIZE_MAX);
  size_t start = major == 1 ? 10 : 12;
  if (b.size() < start || headerLen > b.size() - start) {
    error = "truncated .npy header";
    return false;
  }
  std::string header = b.substr(start, headerLen);
  DictParser p{header};
  std::string descrStr, fortran;
  bool haveShape = false;
  if (!p.eat('{')) {
    error = "bad .npy header: " + header;
    return false;
  }
  while (!p.eat('}')) {
    std::string key;
    if (!p.quoted(key) || !p.eat(':')) {
      error = "bad .npy header: " + header;
      return false;
    }
    bool ok = key == "descr"           ? p.quoted(descrStr)
              : key == "fortran_order" ? p.word(fortran)
              : key == "shape"         ? (haveShape = p.tuple(out.shape))
                                       : false;
    if (!ok || (!p.eat(',') && (p.ws(), p.i >= header.size() || header[p.i] != '}'))) {
      error = "bad .npy header: " + header;
      return false;
    }
  }
  if (descrStr.empty() || fortran.empty() || !haveShape) {
    error = "bad .npy header (needs descr, fortran_order and shape): " + header;
    return false;
  }
  if (fortran != "False") {
    error = "arrays in Fortran order are not supported (fortran_order is " + fortran +
            "; save np.ascontiguousarray(a))";
    return false;
  }
  if (!parseDescr(descrStr, out.dtype)) {
    error = "unsupported dtype '" + descrStr +
            "' (supported: <f4 <f8 <i8 <i4 |b1 |u1 <f2 <u2, little-endian)";
    return false;
  }
  uint64_t count = 1;
  for (int64_t d : out.shape) {
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / 16 / uint64_t(d)) {
      error = "array too large";
      return false;
    }
    count *= uint64_t(d);
  }
  uint64_t bytes = count * itemSize(out.dtype);
  dataAt = start + headerLen;
  if (available - dataAt != bytes) {
    error = "the data holds " + std::to_string(available - dataAt) + " bytes, but shape " +
            shapeString(out.shape) + " of " + describe(out.dtype) + " needs " +
            std::to_string(bytes);
    return false;
  }
  return true;
}

bool parseNpy(const std::string &b, Array &out, std::string &error) {
  size_t dataAt = 0;
  if (!parseNpyHeader(b, b.size(), out, dataAt, error))
    return false;
  out.data = b.substr(dataAt);
  return true;
}

std::string makeNpy(const ArrayRef &a) {
  std::string shape = "(";
  for (int64_t d : a.shape)
    shape += std::to_string(d) + (a.shape.size() == 1 ? "," : ", ");
  if (a.shape.size() > 1)
    shape.resize(shape.size() - 2);
  shape += ")";
  std::string dict = std::string("{'descr': '") + descr(a.dtype) +
                     "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that magic + length + dict + '\n' is a multiple of 64.
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  wr16(out, uint32_t(dict.size()));
  out += dict;
  size_t bytes = itemSize(a.dtype);
  for (int64_t d : a.shape)
    bytes *= size_t(d);
  if (bytes)
    out.append(static_cast<const char *>(a.data), bytes);
  return out;
}

bool readNpy(const std::string &path, Array &out, std::string &error) {
  std::string bytes;
  if (!readFile(path, bytes, error))
    return false;
  if (!parseNpy(bytes, out, error)) {
    error = path + ": " + error;
    return false;
  }
  size_t slash = path.find_last_of('/');
  out.name = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (out.name.size() > 4 && out.name.compare(out.name.size() - 4, 4, ".npy") == 0)
    out.name.resize(out.name.size() - 4);
  return true;
}

namespace {

/// A file read at offsets (pread), closed when done.
struct File {
  int fd = -1;
  uint64_t size = 0;
  ~File() {
    if (fd >= 0)
      close(fd);
  }
  bool open(const std::string &path, std::string &error) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
      error = "cannot open " + path + ": " + std::strerror(errno);
      return false;
    }
    if (!S_ISREG(st.st_mode)) {
      error = "cannot read " + path + ": not a regular file";
      return false;
    }
    size = uint64_t(st.st_size);
    return true;
  }
  /// Reads [at, at + n) (inside the file: callers check) into `out`.
  bool read(uint64_t at, uint64_t n, std::string &out) const {
    out.resize(n);
    for (uint64_t done = 0; done < n;) {
      ssize_t got = pread(fd, &out[done], size_t(std::min<uint64_t>(n - done, 1u << 30)),
                          off_t(at + done));
      if (got <= 0)
        return false;
      done += uint64_t(got);
    }
    return true;
  }
};

/// Parses the .npy header of a stored member (or .npy file) whose `size` bytes start at
/// `at`: reads only the header. Sets dtype, shape and arrayAt.
bool indexNpy(const File &f, uint64_t at, uint64_t size, Member &m, std::string &error) {
  std::string head;
  if (!f.read(at, std::min<uint64_t>(size, 12), head)) {
    error = "cannot read the .npy header";
    return false;
  }
  uint64_t headerLen = head.size() >= 10 ? (uint8_t(head[6]) == 1 ? rd16(head, 8)
                                                                  : head.size() >= 12 ? rd32(head, 8) : 0)
                                         : 0;
  uint64_t want = std::min<uint64_t>(size, 12 + std::min<uint64_t>(headerLen, 1u << 20));
  if (!f.read(at, want, head)) {
    error = "cannot read the .npy header";
    return false;
  }
  Array a;
  size_t dataAt = 0;
  if (!parseNpyHeader(head, size, a, dataAt, error))
    return false;
  m.dtype = a.dtype;
  m.shape = a.shape;
  m.arrayAt = at + dataAt;
  m.indexed = true;
  return true;
}

/// Dtype and shape of a deflated member: inflates only as much as its .npy header takes.
bool describeDeflated(const File &f, Member &m, std::string &error) {
  std::string in;
  if (!f.read(m.dataAt, std::min<uint64_t>(m.csize, 1u << 20), in)) {
    error = "cannot read";
    return false;
  }
  std::string head(size_t(std::min<uint64_t>(m.usize, (1u << 16) + 12)), '\0');
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
    error = "zlib inflateInit2 failed";
    return false;
  }
  zs.next_in = reinterpret_cast<Bytef *>(&in[0]);
  zs.avail_in = uInt(in.size());
  zs.next_out = reinterpret_cast<Bytef *>(&head[0]);
  zs.avail_out = uInt(head.size());
  int rc = Z_OK;
  while (rc == Z_OK && zs.avail_out > 0 && zs.avail_in > 0)
    rc = inflate(&zs, Z_SYNC_FLUSH);
  head.resize(zs.total_out);
  inflateEnd(&zs);
  if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
    error = std::string("corrupt deflate data (zlib: ") + (zs.msg ? zs.msg : "error") + ")";
    return false;
  }
  Array a;
  size_t dataAt = 0;
  if (!parseNpyHeader(head, m.usize, a, dataAt, error))
    return false;
  m.dtype = a.dtype;
  m.shape = a.shape;
  return true;
}

} // namespace

bool indexNpz(const std::string &path, std::vector<Member> &out, std::string &error) {
  out.clear();
  File f;
  if (!f.open(path, error))
    return false;
  auto bad = [&](const std::string &what) {
    error = path + ": " + what;
    return false;
  };
  std::string tail;
  uint64_t tailAt = f.size > 22 + 65535 ? f.size - 22 - 65535 : 0;
  if (!f.read(tailAt, f.size - tailAt, tail))
    return bad("cannot read");
  if (tailAt == 0 && tail.compare(0, 6, "\x93NUMPY") == 0)
    return bad("this is a .npy file; an .npz archive (np.savez) is expected");
  // End of central directory: the last "PK\5\6" within the final 64 KiB + 22 bytes.
  if (f.size < 22)
    return bad("not a zip archive (too short)");
  size_t eocd = std::string::npos;
  for (size_t at = tail.size() - 22 + 1; at-- > 0;)
    if (rd32(tail, at) == 0x06054b50) {
      eocd = at;
      break;
    }
  if (eocd == std::string::npos)
    return bad("not a zip archive (no end of central directory)");
  uint64_t entries = rd16(tail, eocd + 10), cdOffset = rd32(tail, eocd + 16);
  uint64_t eocdAt = tailAt + eocd;
  std::string loc;
  if ((entries == 0xffff || cdOffset == 0xffffffff) && eocdAt >= 20 && f.read(eocdAt - 20, 20, loc) &&
      rd32(loc, 0) == 0x07064b50) {
    uint64_t z64 = rd64(loc, 8);
    std::string rec;
    if (z64 > f.size - 56 || f.size < 56 || !f.read(z64, 56, rec) || rd32(rec, 0) != 0x06064b50)
      return bad("corrupt zip64 end of central directory");
    entries = rd64(rec, 32);
    cdOffset = rd64(rec, 48);
  }
  // The directory runs from cdOffset to the end records.
  if (cdOffset > eocdAt)
    return bad("corrupt zip central directory");
  std::string cd;
  if (!f.read(cdOffset, eocdAt - cdOffset, cd))
    return bad("cannot read");
  if (entries > cd.size() / 46 + 1)
    return bad("corrupt zip central directory");
  size_t at = 0;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at > cd.size() || cd.size() - at < 46 || rd32(cd, at) != 0x02014b50)
      return bad("corrupt zip central directory");
    Member m;
    uint32_t flags = rd16(cd, at + 8);
    m.method = rd16(cd, at + 10);
    m.crc = rd32(cd, at + 16);
    m.csize = rd32(cd, at + 20);
    m.usize = rd32(cd, at + 24);
    uint64_t local = rd32(cd, at + 42);
    size_t nameLen = rd16(cd, at + 28), extraLen = rd16(cd, at + 30), commentLen = rd16(cd, at + 32);
    if (cd.size() - at - 46 < nameLen + extraLen + commentLen)
      return bad("corrupt zip central directory");
    std::string name = cd.substr(at + 46, nameLen);
    // Zip64 extra field: the 8-byte values of the fields saturated at 0xffffffff.
    for (size_t x = at + 46 + nameLen, xEnd = x + extraLen; x + 4 <= xEnd;) {
      uint32_t id = rd16(cd, x), len = rd16(cd, x + 2);
      size_t v = x + 4;
      if (id == 0x0001) {
        for (uint64_t *field : {&m.usize, &m.csize, &local})
          if (*field == 0xffffffff && v + 8 <= x + 4 + len && v + 8 <= xEnd) {
            *field = rd64(cd, v);
            v += 8;
          }
      }
      x += 4 + len;
    }
    at += 46 + nameLen + extraLen + commentLen;
    if (flags & 1)
      return bad("member '" + name + "' is encrypted");
    std::string lh;
    if (local > f.size || f.size - local < 30 || !f.read(local, 30, lh) ||
        rd32(lh, 0) != 0x04034b50)
      return bad("corrupt local header of member '" + name + "'");
    m.dataAt = local + 30 + rd16(lh, 26) + rd16(lh, 28);
    if (m.dataAt > f.size || f.size - m.dataAt < m.csize)
      return bad("member '" + name + "' is truncated");
    if (m.method == 0) {
      if (m.csize != m.usize)
        return bad("stored member '" + name + "' has inconsistent sizes");
    } else if (m.method == 8) {
      // Deflate expands at most 1032:1 (zlib's bound): a directory that claims more is
      // corrupt, and must not make the reader allocate what it claims.
      if (m.usize > (uint64_t(1) << 40) || m.usize > m.csize * 1032 + 1024)
        return bad("member '" + name + "' claims " + std::to_string(m.usize) +
                   " bytes from " + std::to_string(m.csize) +
                   " compressed ones (deflate expands at most 1032:1)");
    } else {
      return bad("member '" + name + "' uses zip compression method " + std::to_string(m.method) +
                 " (only stored and deflate are supported)");
    }
    m.entry = name;
    m.name = name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0
                 ? name.substr(0, name.size() - 4)
                 : name;
    std::string why;
    if (m.method == 0 ? !indexNpy(f, m.dataAt, m.csize, m, why) : !describeDeflated(f, m, why))
      return bad("array '" + name + "': " + why);
    out.push_back(std::move(m));
  }
  return true;
}

bool indexNpyFile(const std::string &path, Member &out, std::string &error) {
  File f;
  if (!f.open(path, error))
    return false;
  out = Member();
  size_t slash = path.find_last_of('/');
  out.name = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (out.name.size() > 4 && out.name.compare(out.name.size() - 4, 4, ".npy") == 0)
    out.name.resize(out.name.size() - 4);
  out.entry = path;
  out.csize = out.usize = f.size;
  if (!indexNpy(f, 0, f.size, out, error)) {
    error = path + ": " + error;
    return false;
  }
  out.plainNpy = true;
  return true;
}

bool readMember(const std::string &path, const Member &m, Array &out, std::string &error) {
  File f;
  if (!f.open(path, error))
    return false;
  auto bad = [&](const std::string &what) {
    error = path + ": " + what;
    return false;
  };
  std::string raw, data;
  if (m.dataAt > f.size || f.size - m.dataAt < m.csize || !f.read(m.dataAt, m.csize, raw))
    return bad("member '" + m.entry + "' is truncated");
  if (m.method == 8) {
    data.resize(m.usize);
    std::string why;
    if (!inflateRaw(raw.data(), raw.size(), data, why))
      return bad("member '" + m.entry + "': " + why);
  } else {
    data = std::move(raw);
  }
  if (!m.plainNpy && crc32_z(0, reinterpret_cast<const Bytef *>(data.data()), data.size()) != m.crc)
    return bad("member '" + m.entry + "' fails its CRC-32 check");
  std::string why;
  if (!parseNpy(data, out, why))
    return bad((m.plainNpy ? "" : "array '" + m.entry + "': ") + why);
  out.name = m.name;
  return true;
}

bool readSlice(const std::string &path, const Member &m, uint64_t offset, uint64_t bytes,
               std::string &out, std::string &error) {
  File f;
  if (!f.open(path, error))
    return false;
  uint64_t at = m.arrayAt + offset;
  if (!m.indexed || at < m.arrayAt || at > f.size || f.size - at < bytes || !f.read(at, bytes, out)) {
    error = path + ": array '" + m.name + "' is shorter than its header says";
    return false;
  }
  return true;
}

MappedNpy::~MappedNpy() {
  if (base)
    munmap(const_cast<char *>(base), size_t(size));
}

bool MappedNpy::open(const std::string &file, std::string &error) {
  File f;
  if (!f.open(file, error))
    return false;
  path = file;
  size = f.size;
  if (size == 0)
    return true; // nothing to map; copy() reports any read past the end
  void *p = mmap(nullptr, size_t(size), PROT_READ, MAP_SHARED, f.fd, 0);
  if (p == MAP_FAILED) {
    error = "cannot map " + file + ": " + std::strerror(errno);
    return false;
  }
  base = static_cast<const char *>(p);
  return true;
}

bool MappedNpy::copy(const Member &m, uint64_t offset, uint64_t bytes, std::string &out,
                     std::string &error) const {
  uint64_t at = m.arrayAt + offset;
  if (!m.indexed || at < m.arrayAt || at > size || size - at < bytes) {
    error = path + ": array '" + m.name + "' is shorter than its header says";
    return false;
  }
  out.assign(base + at, size_t(bytes));
  // Drop every page of the mapping from this process (the page cache keeps them): not
  // only the slice's, since the kernel maps pages around a fault (fault-around, large
  // folios) too. Walking the page tables of an almost empty mapping costs little.
  madvise(const_cast<char *>(base), size_t(size), MADV_DONTNEED);
  return true;
}

bool readNpz(const std::string &path, std::vector<Array> &out, std::string &error) {
  std::vector<Member> members;
  if (!indexNpz(path, members, error))
    return false;
  out.clear();
  for (const Member &m : members) {
    Array a;
    if (!readMember(path, m, a, error))
      return false;
    out.push_back(std::move(a));
  }
  return true;
}

bool writeNpz(const std::string &path, const std::vector<ArrayRef> &arrays, std::string &error) {
  std::string zip, dir;
  for (const ArrayRef &a : arrays) {
    std::string npy = makeNpy(a), name = a.name + ".npy";
    if (npy.size() >= 0xffffffffu || zip.size() + npy.size() + 30 + name.size() >= 0xffffffffu) {
      error = "cannot write " + path + ": more than 4 GiB (zip64 output is not supported)";
      return false;
    }
    uint32_t crc = uint32_t(crc32_z(0, reinterpret_cast<const Bytef *>(npy.data()), npy.size()));
    uint32_t offset = uint32_t(zip.size());
    // Local header: version 2.0, no flags, stored, 1980-01-01 00:00.
    wr32(zip, 0x04034b50);
    for (uint32_t v : {20u, 0u, 0u, 0u, 0x21u})
      wr16(zip, v);
    for (uint32_t v : {crc, uint32_t(npy.size()), uint32_t(npy.size())})
      wr32(zip, v);
    wr16(zip, uint32_t(name.size()));
    wr16(zip, 0);
    zip += name;
    zip += npy;
    wr32(dir, 0x02014b50);
    for (uint32_t v : {20u, 20u, 0u, 0u, 0u, 0x21u})
      wr16(dir, v);
    for (uint32_t v : {crc, uint32_t(npy.size()), uint32_t(npy.size())})
      wr32(dir, v);
    for (uint32_t v : {uint32_t(name.size()), 0u, 0u, 0u, 0u})
      wr16(dir, v);
    wr32(dir, 0x81a4u << 16); // external attributes: a regular file, rw-r--r--
    wr32(dir, offset);
    dir += name;
  }
  if (arrays.size() >= 0xffff || zip.size() + dir.size() >= 0xffffffffu) {
    error = "cannot write " + path + ": too many arrays or too large for a plain zip";
    return false;
  }
  uint32_t dirOffset = uint32_t(zip.size());
  zip += dir;
  wr32(zip, 0x06054b50);
  for (uint32_t v : {0u, 0u, uint32_t(arrays.size()), uint32_t(arrays.size())})
    wr16(zip, v);
  wr32(zip, uint32_t(dir.size()));
  wr32(zip, dirOffset);
  wr16(zip, 0);
  std::string tmp = path + ".tmp";
  if (!writeAll(tmp, zip, error))
    return false;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

} // namespace npz
} // namespace ortc
