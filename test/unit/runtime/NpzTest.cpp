//===- NpzTest.cpp - .npy/.npz reading and writing -----------------------===//
//
// Why: feeds and checkpoints cross the Python boundary as numpy files, so the
// reader must accept exactly what numpy writes (savez, savez_compressed) and numpy
// must load what we write. Both directions are checked against the real numpy when
// /usr/bin/python3 has it (else those tests are skipped), plus our own round trip
// and the refusal of unsupported or corrupt input.
//
//===----------------------------------------------------------------------===//
#include "Npz.h"
#include "TestArtifact.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

using namespace ortc;
using npz::DType;

namespace {

template <typename T> std::string bytesOf(const std::vector<T> &v) {
  return std::string(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(T));
}

const npz::Array *find(const std::vector<npz::Array> &arrays, const std::string &name) {
  for (const auto &a : arrays)
    if (a.name == name)
      return &a;
  return nullptr;
}

} // namespace

TEST(Npz, RoundTripEveryDtype) {
  std::string dir = test::freshDir("Npz.RoundTrip");
  std::vector<float> f32{1.5f, -2, 3, 4, 5, 6};
  std::vector<double> f64{3.25};
  std::vector<int64_t> i64{1, -2, 3, 1LL << 40, 5};
  std::vector<uint8_t> b1{1, 0, 1}, u1{0, 255, 7, 9};
  std::vector<uint16_t> f16{0x3c00, 0xc000}, u16{1, 65535};
  std::vector<npz::ArrayRef> arrays = {
      {"fc1.weight", DType::F32, {2, 3}, f32.data()}, {"scalar", DType::F64, {}, f64.data()},
      {"ids", DType::I64, {5}, i64.data()},           {"empty", DType::I32, {0, 3}, nullptr},
      {"mask", DType::Bool, {3}, b1.data()},          {"bytes", DType::U8, {2, 2}, u1.data()},
      {"half", DType::F16, {2}, f16.data()},          {"bf", DType::U16, {1, 2}, u16.data()}};
  std::string path = dir + "/a.npz", error;
  ASSERT_TRUE(npz::writeNpz(path, arrays, error)) << error;
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::vector<npz::Array> back;
  ASSERT_TRUE(npz::readNpz(path, back, error)) << error;
  ASSERT_EQ(back.size(), arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    EXPECT_EQ(back[i].name, arrays[i].name);
    EXPECT_EQ(back[i].dtype, arrays[i].dtype) << arrays[i].name;
    EXPECT_EQ(back[i].shape, arrays[i].shape) << arrays[i].name;
  }
  EXPECT_EQ(back[0].data, bytesOf(f32));
  EXPECT_EQ(back[1].data, bytesOf(f64));
  EXPECT_EQ(back[2].data, bytesOf(i64));
  EXPECT_EQ(back[3].data, "");
  EXPECT_EQ(back[4].data, bytesOf(b1));
  EXPECT_EQ(back[6].data, bytesOf(f16));
}

TEST(Npz, NpyHeaderVariants) {
  npz::Array a;
  std::string error;
  auto npy = [](int major, const std::string &dict, const std::string &data) {
    std::string h = dict + "\n";
    std::string out = std::string("\x93NUMPY", 6) + char(major) + '\0';
    if (major == 1)
      out += std::string{char(h.size() & 0xff), char(h.size() >> 8)};
    else
      out += std::string{char(h.size() & 0xff), char(h.size() >> 8), 0, 0};
    return out + h + data;
  };
  std::string four(16, '\0');
  ASSERT_TRUE(npz::parseNpy(
      npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", four), a, error))
      << error;
  EXPECT_EQ(a.shape, std::vector<int64_t>{4});
  ASSERT_TRUE(npz::parseNpy(
      npy(2, "{\"shape\": (2, 2), \"descr\": \"<i4\", \"fortran_order\": False}", four), a, error))
      << error;
  EXPECT_EQ(a.dtype, DType::I32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_FALSE(npz::parseNpy(
      npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", four), a, error));
  EXPECT_NE(error.find("Fortran order"), std::string::npos) << error;
  EXPECT_FALSE(npz::parseNpy(
      npy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", four), a, error));
  EXPECT_NE(error.find("'>f4'"), std::string::npos) << error;
  EXPECT_FALSE(npz::parseNpy(
      npy(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", four), a, error));
  EXPECT_FALSE(npz::parseNpy(
      npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", four), a, error));
  EXPECT_NE(error.find("needs 20"), std::string::npos) << error;
  EXPECT_FALSE(npz::parseNpy("garbage", a, error));
  // Found by fuzz-npz: a version-2 magic in 10 or 11 bytes (its 4-byte header length
  // cut off) threw out of the reader.
  for (size_t n : {10, 11}) {
    EXPECT_FALSE(npz::parseNpy(std::string("\x93NUMPY\x02\x00\x00\x00", n), a, error)) << n;
    EXPECT_EQ(error, "truncated .npy header");
  }
}

TEST(Npz, RefusesCorruptArchives) {
  std::string dir = test::freshDir("Npz.Corrupt"), error;
  std::vector<float> v{1, 2, 3, 4};
  std::string path = dir + "/a.npz";
  ASSERT_TRUE(npz::writeNpz(path, {{"v", DType::F32, {4}, v.data()}}, error)) << error;
  std::string bytes = test::readBytes(path);
  std::vector<npz::Array> out;

  std::string flipped = bytes;
  flipped[bytes.find(std::string(reinterpret_cast<char *>(v.data()), 16))] ^= 1;
  test::writeBytes(path, flipped);
  EXPECT_FALSE(npz::readNpz(path, out, error));
  EXPECT_NE(error.find("CRC-32"), std::string::npos) << error;

  test::writeBytes(path, bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(npz::readNpz(path, out, error));
  EXPECT_NE(error.find(path), std::string::npos) << error;

  test::writeBytes(path, "not a zip at all, just some text that is long enough");
  EXPECT_FALSE(npz::readNpz(path, out, error));
  EXPECT_FALSE(npz::readNpz(dir + "/missing.npz", out, error));
  EXPECT_NE(error.find("missing.npz"), std::string::npos) << error;
}

TEST(Npz, WriteIsAtomic) {
  std::string dir = test::freshDir("Npz.Atomic"), error;
  std::vector<float> v{1, 2};
  std::string path = dir + "/no/such/dir/a.npz";
  EXPECT_FALSE(npz::writeNpz(path, {{"v", DType::F32, {2}, v.data()}}, error));
  EXPECT_NE(error.find("a.npz.tmp"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(path));
  // Renaming over a directory fails: the temporary file must not stay behind.
  std::filesystem::create_directories(dir + "/taken");
  EXPECT_FALSE(npz::writeNpz(dir + "/taken", {{"v", DType::F32, {2}, v.data()}}, error));
  EXPECT_FALSE(std::filesystem::exists(dir + "/taken.tmp"));
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/taken"));
}

TEST(Npz, ReadsWhatNumpyWrites) {
  if (!test::haveNumpy())
    GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
  std::string dir = test::freshDir("Npz.FromNumpy");
  test::writeBytes(dir + "/make.py", R"(import sys, numpy as np
d = sys.argv[1]
arrays = dict(a=np.arange(6, dtype=np.float32).reshape(2, 3), b=np.float64(3.5),
              c=np.array([1, -2, 1 << 40], dtype=np.int64), d=np.array([[7]], dtype=np.int32),
              e=np.array([True, False, True]), f=np.arange(4, dtype=np.uint8),
              big=np.linspace(0, 1, 100000, dtype=np.float32))
np.savez(d + '/stored.npz', **arrays)
np.savez_compressed(d + '/compressed.npz', **arrays)
np.save(d + '/one.npy', arrays['a'])
np.savez(d + '/fortran.npz', m=np.asfortranarray(np.ones((3, 2), dtype=np.float32)))
np.savez(d + '/bigendian.npz', m=np.ones(3, dtype='>f4'))
)");
  ASSERT_EQ(test::shell("/usr/bin/python3 " + dir + "/make.py " + dir), 0);
  for (const char *file : {"stored.npz", "compressed.npz"}) {
    std::vector<npz::Array> arrays;
    std::string error;
    ASSERT_TRUE(npz::readNpz(dir + "/" + file, arrays, error)) << error;
    ASSERT_EQ(arrays.size(), 7u) << file;
    const npz::Array *a = find(arrays, "a"), *b = find(arrays, "b"), *c = find(arrays, "c"),
                     *e = find(arrays, "e"), *big = find(arrays, "big");
    ASSERT_TRUE(a && b && c && e && big) << file;
    EXPECT_EQ(a->dtype, DType::F32);
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a->data, bytesOf(std::vector<float>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(b->dtype, DType::F64);
    EXPECT_TRUE(b->shape.empty());
    EXPECT_EQ(b->data, bytesOf(std::vector<double>{3.5}));
    EXPECT_EQ(c->data, bytesOf(std::vector<int64_t>{1, -2, int64_t(1) << 40}));
    EXPECT_EQ(find(arrays, "d")->dtype, DType::I32);
    EXPECT_EQ(e->dtype, DType::Bool);
    EXPECT_EQ(e->data, std::string("\1\0\1", 3));
    EXPECT_EQ(find(arrays, "f")->dtype, DType::U8);
    ASSERT_EQ(big->data.size(), 400000u);
    float last;
    std::memcpy(&last, big->data.data() + 399996, 4);
    EXPECT_EQ(last, 1.0f);
  }
  npz::Array one;
  std::string error;
  ASSERT_TRUE(npz::readNpy(dir + "/one.npy", one, error)) << error;
  EXPECT_EQ(one.name, "one");
  EXPECT_EQ(one.shape, (std::vector<int64_t>{2, 3}));
  std::vector<npz::Array> arrays;
  EXPECT_FALSE(npz::readNpz(dir + "/fortran.npz", arrays, error));
  EXPECT_NE(error.find("Fortran order"), std::string::npos) << error;
  EXPECT_NE(error.find("'m.npy'"), std::string::npos) << error;
  EXPECT_FALSE(npz::readNpz(dir + "/bigendian.npz", arrays, error));
  EXPECT_NE(error.find("'>f4'"), std::string::npos) << error;
}

TEST(Npz, NumpyReadsWhatWeWrite) {
  if (!test::haveNumpy())
    GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
  std::string dir = test::freshDir("Npz.ToNumpy"), error;
  std::vector<float> f32{1.5f, -2, 3, 4, 5, 6};
  std::vector<double> f64{3.25};
  std::vector<int64_t> i64{1, -2, int64_t(1) << 40};
  std::vector<int32_t> i32{7, 8};
  std::vector<uint8_t> b1{1, 0, 1};
  ASSERT_TRUE(npz::writeNpz(dir + "/ours.npz",
                            {{"fc1.weight", DType::F32, {2, 3}, f32.data()},
                             {"s", DType::F64, {}, f64.data()},
                             {"ids", DType::I64, {3}, i64.data()},
                             {"n", DType::I32, {2, 1}, i32.data()},
                             {"mask", DType::Bool, {3}, b1.data()},
                             {"none", DType::F32, {0}, nullptr}},
                            error))
      << error;
  test::writeBytes(dir + "/check.py", R"(import sys, zipfile, numpy as np
p = sys.argv[1]
assert zipfile.ZipFile(p).testzip() is None
z = np.load(p)
assert sorted(z.files) == sorted(['fc1.weight', 's', 'ids', 'n', 'mask', 'none']), z.files
assert z['fc1.weight'].dtype == np.float32 and z['fc1.weight'].shape == (2, 3)
assert (z['fc1.weight'] == np.array([[1.5, -2, 3], [4, 5, 6]], dtype=np.float32)).all()
assert z['s'].shape == () and z['s'] == 3.25 and z['s'].dtype == np.float64
assert (z['ids'] == [1, -2, 1 << 40]).all() and z['ids'].dtype == np.int64
assert z['n'].shape == (2, 1) and z['n'].dtype == np.int32
assert z['mask'].dtype == np.bool_ and list(z['mask']) == [True, False, True]
assert z['none'].shape == (0,)
)");
  EXPECT_EQ(test::shell("/usr/bin/python3 " + dir + "/check.py " + dir + "/ours.npz"), 0);
}
