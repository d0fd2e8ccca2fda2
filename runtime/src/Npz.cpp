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

bool parseNpy(const std::string &b, Array &out, std::string &error) {
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
  size_t dataAt = start + headerLen;
  if (b.size() - dataAt != bytes) {
    error = "the data holds " + std::to_string(b.size() - dataAt) + " bytes, but shape " +
            shapeString(out.shape) + " of " + describe(out.dtype) + " needs " +
            std::to_string(bytes);
    return false;
  }
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

bool readNpz(const std::string &path, std::vector<Array> &out, std::string &error) {
  std::string z;
  if (!readFile(path, z, error))
    return false;
  auto bad = [&](const std::string &what) {
    error = path + ": " + what;
    return false;
  };
  if (z.compare(0, 6, "\x93NUMPY") == 0)
    return bad("this is a .npy file; an .npz archive (np.savez) is expected");
  // End of central directory: the last "PK\5\6" within the final 64 KiB + 22 bytes.
  if (z.size() < 22)
    return bad("not a zip archive (too short)");
  size_t eocd = std::string::npos;
  size_t lowest = z.size() > 22 + 65535 ? z.size() - 22 - 65535 : 0;
  for (size_t at = z.size() - 22 + 1; at-- > lowest;)
    if (rd32(z, at) == 0x06054b50) {
      eocd = at;
      break;
    }
  if (eocd == std::string::npos)
    return bad("not a zip archive (no end of central directory)");
  uint64_t entries = rd16(z, eocd + 10), cdOffset = rd32(z, eocd + 16);
  if ((entries == 0xffff || cdOffset == 0xffffffff) && eocd >= 20 &&
      rd32(z, eocd - 20) == 0x07064b50) {
    uint64_t z64 = rd64(z, eocd - 20 + 8);
    if (z64 > z.size() - 56 || rd32(z, z64) != 0x06064b50)
      return bad("corrupt zip64 end of central directory");
    entries = rd64(z, z64 + 32);
    cdOffset = rd64(z, z64 + 48);
  }
  size_t at = cdOffset;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at > z.size() || z.size() - at < 46 || rd32(z, at) != 0x02014b50)
      return bad("corrupt zip central directory");
    uint32_t flags = rd16(z, at + 8), method = rd16(z, at + 10), crc = rd32(z, at + 16);
    uint64_t csize = rd32(z, at + 20), usize = rd32(z, at + 24), local = rd32(z, at + 42);
    size_t nameLen = rd16(z, at + 28), extraLen = rd16(z, at + 30), commentLen = rd16(z, at + 32);
    if (z.size() - at - 46 < nameLen + extraLen + commentLen)
      return bad("corrupt zip central directory");
    std::string name = z.substr(at + 46, nameLen);
    // Zip64 extra field: the 8-byte values of the fields saturated at 0xffffffff.
    for (size_t x = at + 46 + nameLen, xEnd = x + extraLen; x + 4 <= xEnd;) {
      uint32_t id = rd16(z, x), len = rd16(z, x + 2);
      size_t v = x + 4;
      if (id == 0x0001) {
        for (uint64_t *field : {&usize, &csize, &local})
          if (*field == 0xffffffff && v + 8 <= x + 4 + len) {
            *field = rd64(z, v);
            v += 8;
          }
      }
      x += 4 + len;
    }
    at += 46 + nameLen + extraLen + commentLen;
    if (flags & 1)
      return bad("member '" + name + "' is encrypted");
    if (local > z.size() || z.size() - local < 30 || rd32(z, local) != 0x04034b50)
      return bad("corrupt local header of member '" + name + "'");
    uint64_t dataAt = local + 30 + rd16(z, local + 26) + rd16(z, local + 28);
    if (dataAt > z.size() || z.size() - dataAt < csize)
      return bad("member '" + name + "' is truncated");
    std::string data;
    if (method == 0) {
      if (csize != usize)
        return bad("stored member '" + name + "' has inconsistent sizes");
      data = z.substr(dataAt, csize);
    } else if (method == 8) {
      // Deflate expands at most 1032:1 (zlib's bound): a directory that claims more is
      // corrupt, and must not make the reader allocate what it claims.
      if (usize > (uint64_t(1) << 40) || usize > csize * 1032 + 1024)
        return bad("member '" + name + "' claims " + std::to_string(usize) +
                   " bytes from " + std::to_string(csize) +
                   " compressed ones (deflate expands at most 1032:1)");
      data.resize(usize);
      std::string why;
      if (!inflateRaw(z.data() + dataAt, csize, data, why))
        return bad("member '" + name + "': " + why);
    } else {
      return bad("member '" + name + "' uses zip compression method " + std::to_string(method) +
                 " (only stored and deflate are supported)");
    }
    if (crc32_z(0, reinterpret_cast<const Bytef *>(data.data()), data.size()) != crc)
      return bad("member '" + name + "' fails its CRC-32 check");
    Array a;
    std::string why;
    if (!parseNpy(data, a, why))
      return bad("array '" + name + "': " + why);
    a.name = name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0
                 ? name.substr(0, name.size() - 4)
                 : name;
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
