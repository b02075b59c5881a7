// data/idx: small handcrafted IDX files round trip (every type code, plain and gzipped),
// every malformed case is a minidl::Error naming the file and the problem, the gzip bomb
// guard stops early, and the real Fashion-MNIST files (a required dependency) read correctly.
#include <catch2/catch.hpp>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "data/idx.h"
#include "data/mnist.h"
#include "data/idx_bytes.h"
#include "error_message.h"
#include "temp_dir.h"

using namespace minidl;
using namespace minidl::data;
using minidl::testing::error_message;
using namespace minidl::testing;
using minidl::testing::TempDir;
using Catch::Contains;

namespace {

IdxArray parse(const std::string& bytes, const std::string& name = "mem.idx") {
  return parse_idx(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), name);
}

// Big-endian bytes of a value of any arithmetic type.
template <typename T>
std::string be(T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof v);
  std::string s;
  for (size_t i = sizeof(T); i-- > 0;) s.push_back(static_cast<char>(b[i]));
  return s;
}

}  // namespace

TEST_CASE("parse_idx reads a ubyte file: dims, raw payload and converted values", "[data][idx]") {
  const std::string bytes = idx_file(kIdxUint8, {2, 3}, ubytes({0, 1, 2, 127, 128, 255}));
  IdxArray a = parse(bytes);
  CHECK(a.type_code == kIdxUint8);
  CHECK(a.dims == std::vector<int64_t>{2, 3});
  CHECK(a.numel() == 6);
  CHECK(a.payload == std::vector<unsigned char>{0, 1, 2, 127, 128, 255});
  Tensor f = idx_to_tensor(a, DType::Float32);
  CHECK(f.shape() == Shape{2, 3});
  CHECK(f.to_vector<float>() == std::vector<float>{0, 1, 2, 127, 128, 255});
  CHECK(idx_to_tensor(a, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 127, 128, 255});
  CHECK(idx_to_tensor(a, DType::Float64).to_vector<double>() == std::vector<double>{0, 1, 2, 127, 128, 255});
}

TEST_CASE("parse_idx converts every IDX type code from big-endian", "[data][idx]") {
  SECTION("int8 keeps its sign") {
    IdxArray a = parse(idx_file(kIdxInt8, {3}, ubytes({0x80, 0xff, 0x7f})));
    CHECK(idx_to_tensor(a, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{-128, -1, 127});
  }
  SECTION("int16") {
    IdxArray a = parse(idx_file(kIdxInt16, {2}, be<int16_t>(-300) + be<int16_t>(32767)));
    CHECK(idx_to_tensor(a, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{-300, 32767});
  }
  SECTION("int32") {
    IdxArray a = parse(idx_file(kIdxInt32, {1, 2}, be<int32_t>(-2000000000) + be<int32_t>(123456789)));
    CHECK(idx_to_tensor(a, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{-2000000000, 123456789});
    CHECK(idx_to_tensor(a, DType::Float64).to_vector<double>() == std::vector<double>{-2000000000.0, 123456789.0});
  }
  SECTION("float32") {
    IdxArray a = parse(idx_file(kIdxFloat32, {2}, be<float>(1.5f) + be<float>(-0.25f)));
    CHECK(idx_to_tensor(a, DType::Float32).to_vector<float>() == std::vector<float>{1.5f, -0.25f});
    CHECK(idx_to_tensor(a, DType::Float64).to_vector<double>() == std::vector<double>{1.5, -0.25});
  }
  SECTION("float64, rank 8") {
    IdxArray a = parse(idx_file(kIdxFloat64, {1, 1, 1, 1, 1, 1, 1, 2}, be<double>(1e-300) + be<double>(-3.0)));
    CHECK(a.dims.size() == 8);
    Tensor t = idx_to_tensor(a, DType::Float64);
    CHECK(t.shape() == Shape{1, 1, 1, 1, 1, 1, 1, 2});
    CHECK(t.to_vector<double>() == std::vector<double>{1e-300, -3.0});
    // float64 beyond float32's range becomes +-inf, as an IEEE conversion would round it.
    IdxArray big = parse(idx_file(kIdxFloat64, {2}, be<double>(1e300) + be<double>(-1e300)));
    auto f = idx_to_tensor(big, DType::Float32).to_vector<float>();
    CHECK(std::isinf(f[0]));
    CHECK(f[0] > 0);
    CHECK(std::isinf(f[1]));
    CHECK(f[1] < 0);
  }
}

TEST_CASE("idx_to_tensor refuses a float that int64 cannot hold", "[data][idx]") {
  IdxArray nan = parse(idx_file(kIdxFloat32, {2}, be<float>(1.0f) + be<float>(std::numeric_limits<float>::quiet_NaN())));
  CHECK_THAT(error_message([&] { idx_to_tensor(nan, DType::Int64); }),
             Contains("element 1") && Contains("int64 cannot hold"));
  IdxArray huge = parse(idx_file(kIdxFloat64, {1}, be<double>(1e19)));
  CHECK_THAT(error_message([&] { idx_to_tensor(huge, DType::Int64); }), Contains("int64 cannot hold"));
}

TEST_CASE("parse_idx refuses each malformed header with the file name and the problem", "[data][idx]") {
  auto err = [](const std::string& bytes) { return error_message([&] { parse(bytes, "bad.idx"); }); };
  CHECK_THAT(err(""), Contains("parse_idx: bad.idx") && Contains("truncated") && Contains("4-byte magic"));
  CHECK_THAT(err(std::string("\0\0\x08", 3)), Contains("truncated"));
  CHECK_THAT(err(std::string("\x01\0\x08\x01", 4) + be32(1) + "x"), Contains("bad.idx") && Contains("two zero bytes"));
  CHECK_THAT(err(std::string("\0\x02\x08\x01", 4) + be32(1) + "x"), Contains("two zero bytes"));
  CHECK_THAT(err(idx_file(0x0A, {1}, "x")), Contains("unknown IDX type code 0xa"));
  CHECK_THAT(err(idx_file(0x07, {1}, "x")), Contains("unknown IDX type code 0x7"));
  CHECK_THAT(err(idx_file(kIdxUint8, {}, "")), Contains("rank 0") && Contains("1..8"));
  CHECK_THAT(err(idx_file(kIdxUint8, {1, 1, 1, 1, 1, 1, 1, 1, 1}, "x")), Contains("rank 9") && Contains("1..8"));
  // Rank 3 promises 12 bytes of dims; only 8 are there.
  CHECK_THAT(err(std::string("\0\0\x08\x03", 4) + be32(2) + be32(2)),
             Contains("truncated header") && Contains("16 header bytes"));
  CHECK_THAT(err(idx_file(kIdxUint8, {2, 0, 3}, "")), Contains("dimension 1 is 0"));
  // 8 dims of 2^32-1 bytes: far beyond 2^63.
  CHECK_THAT(err(idx_file(kIdxUint8, std::vector<uint32_t>(8, 0xffffffffu), "")), Contains("element count overflows"));
  // 2^32-1 x 2^32-1 int32 elements: the element count fits, the byte count does not fit int64.
  CHECK_THAT(err(idx_file(kIdxInt32, {0xffffffffu, 0xffffffffu}, "")), Contains("element count overflows"));
}

TEST_CASE("parse_idx refuses a payload shorter or longer than the header says", "[data][idx]") {
  auto err = [](const std::string& bytes) { return error_message([&] { parse(bytes, "/x/train-images-idx3-ubyte"); }); };
  CHECK_THAT(err(idx_file(kIdxUint8, {2, 3}, "12345")),
             Contains("parse_idx: /x/train-images-idx3-ubyte: truncated: header says 2x3 (6 bytes of ubyte), the file "
                      "holds 5 bytes after the 12-byte header"));
  CHECK_THAT(err(idx_file(kIdxInt16, {3}, "12345")), Contains("truncated") && Contains("(6 bytes of int16)"));
  CHECK_THAT(err(idx_file(kIdxUint8, {2, 3}, "1234567")),
             Contains("trailing garbage: header says 2x3 (6 bytes of ubyte), the file holds 7 bytes"));
  // A header that promises 47 MB over a tiny payload is refused without allocating it.
  CHECK_THAT(err(idx_file(kIdxUint8, {60000, 28, 28}, "x")),
             Contains("truncated: header says 60000x28x28 (47040000 bytes of ubyte), the file holds 1 bytes"));
}

TEST_CASE("read_idx reads plain and gzipped files alike", "[data][idx]") {
  TempDir dir;
  const std::string bytes = idx_file(kIdxInt16, {2, 2}, be<int16_t>(1) + be<int16_t>(-2) + be<int16_t>(3) + be<int16_t>(-4));
  testing::write_bytes(dir.file("a.idx"), bytes);
  write_gzip(dir.file("a.idx.gz"), bytes);
  IdxArray plain = read_idx(dir.file("a.idx"));
  IdxArray gz = read_idx(dir.file("a.idx.gz"));
  CHECK(plain.dims == std::vector<int64_t>{2, 2});
  CHECK(gz.dims == plain.dims);
  CHECK(gz.type_code == kIdxInt16);
  CHECK(gz.payload == plain.payload);
  CHECK(idx_to_tensor(gz, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3, -4});

  // gzip allows several members back to back (cat a.gz b.gz); they decompress as one stream.
  write_gzip(dir.file("two.gz"), bytes.substr(0, 10));
  write_gzip(dir.file("two.gz"), bytes.substr(10), "ab");
  CHECK(read_idx(dir.file("two.gz")).payload == plain.payload);
}

TEST_CASE("read_idx refuses a malformed file on disk, naming it", "[data][idx]") {
  TempDir dir;
  const std::string good = idx_file(kIdxUint8, {4}, ubytes({1, 2, 3, 4}));

  SECTION("a missing file gives the strerror text") {
    CHECK_THAT(error_message([&] { read_idx(dir.file("nope.gz")); }),
               Contains("read_idx: " + dir.file("nope.gz")) && Contains("cannot open: No such file or directory"));
    CHECK_THAT(error_message([&] { read_idx(dir.path()); }), Contains("not a regular file"));
  }
  SECTION("a plain file that is truncated, or has trailing garbage") {
    testing::write_bytes(dir.file("short"), good.substr(0, good.size() - 1));
    CHECK_THAT(error_message([&] { read_idx(dir.file("short")); }),
               Contains(dir.file("short")) && Contains("truncated: header says 4 (4 bytes of ubyte), the file holds 3"));
    testing::write_bytes(dir.file("long"), good + "zz");
    CHECK_THAT(error_message([&] { read_idx(dir.file("long")); }), Contains("trailing garbage"));
    testing::write_bytes(dir.file("hdr"), good.substr(0, 6));
    CHECK_THAT(error_message([&] { read_idx(dir.file("hdr")); }), Contains("truncated header"));
  }
  SECTION("a gzip file whose contents are truncated or too long") {
    write_gzip(dir.file("short.gz"), good.substr(0, good.size() - 1));
    CHECK_THAT(error_message([&] { read_idx(dir.file("short.gz")); }),
               Contains(dir.file("short.gz")) && Contains("truncated") && Contains("(decompressed)"));
    write_gzip(dir.file("long.gz"), good + "zz");
    CHECK_THAT(error_message([&] { read_idx(dir.file("long.gz")); }), Contains("trailing garbage"));
    write_gzip(dir.file("bad.gz"), "\x01\x02\x03\x04zzzz");
    CHECK_THAT(error_message([&] { read_idx(dir.file("bad.gz")); }), Contains("two zero bytes"));
  }
  SECTION("a damaged gzip stream") {
    write_gzip(dir.file("a.gz"), good);
    const std::string gz = testing::read_bytes(dir.file("a.gz"));
    testing::write_bytes(dir.file("cut.gz"), gz.substr(0, gz.size() / 2));
    CHECK_THAT(error_message([&] { read_idx(dir.file("cut.gz")); }), Contains("truncated"));
    std::string flipped = gz;
    flipped[12] = static_cast<char>(flipped[12] ^ 0x55);  // inside the deflate data
    flipped[13] = static_cast<char>(flipped[13] ^ 0x55);
    testing::write_bytes(dir.file("flipped.gz"), flipped);
    CHECK_THAT(error_message([&] { read_idx(dir.file("flipped.gz")); }), Contains(dir.file("flipped.gz")));
    testing::write_bytes(dir.file("tail.gz"), gz + "garbage");
    CHECK_THAT(error_message([&] { read_idx(dir.file("tail.gz")); }),
               Contains("trailing bytes after the gzip stream"));
  }
}

TEST_CASE("read_idx stops decompressing a gzip bomb once it passes what the header promised", "[data][idx]") {
  // Header: 16 ubytes, then 512 gzip members of 1 MiB of zeros each (about 1 KiB apiece): 512 MiB
  // of output from a file of about half a MiB.
  TempDir dir;
  write_gzip(dir.file("header.gz"), idx_file(kIdxUint8, {16}, ""));
  write_gzip(dir.file("zeros.gz"), std::string(1 << 20, '\0'), "wb9");
  const std::string zeros_member = testing::read_bytes(dir.file("zeros.gz"));
  std::string bomb = testing::read_bytes(dir.file("header.gz"));
  for (int i = 0; i < 512; ++i) bomb += zeros_member;
  const std::string path = dir.file("bomb.gz");
  testing::write_bytes(path, bomb);

  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(error_message([&] { read_idx(path); }),
             Contains("trailing garbage") && Contains("holds more than 16 bytes (decompressed)"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Inflating all 512 MiB takes about 0.7 s here (measured with Python's zlib); stopping early
  // takes well under a millisecond, so 0.25 s separates the two with room for a loaded machine.
  CHECK(seconds < 0.25);
}

TEST_CASE("read_idx reads the four real Fashion-MNIST files", "[data][idx][fashion-mnist]") {
  const std::string dir = default_fashion_mnist_dir();
  auto read = [&](const std::string& name) {
    const std::string path = dir + "/" + name;
    INFO("Fashion-MNIST is a required dependency: run scripts/setup-deps (Debian package dataset-fashion-mnist)");
    REQUIRE(std::filesystem::exists(path));
    return read_idx(path);
  };
  IdxArray train_x = read("train-images-idx3-ubyte.gz");
  IdxArray train_y = read("train-labels-idx1-ubyte.gz");
  IdxArray test_x = read("t10k-images-idx3-ubyte.gz");
  IdxArray test_y = read("t10k-labels-idx1-ubyte.gz");
  CHECK(train_x.type_code == kIdxUint8);
  CHECK(train_x.dims == std::vector<int64_t>{60000, 28, 28});
  CHECK(train_y.dims == std::vector<int64_t>{60000});
  CHECK(test_x.dims == std::vector<int64_t>{10000, 28, 28});
  CHECK(test_y.dims == std::vector<int64_t>{10000});
  // The first labels, as `python3 -c "import gzip; print(list(gzip.open(path).read()[8:13]))"` prints them.
  CHECK(std::vector<unsigned char>(train_y.payload.begin(), train_y.payload.begin() + 5) ==
        std::vector<unsigned char>{9, 0, 0, 3, 0});
  CHECK(std::vector<unsigned char>(test_y.payload.begin(), test_y.payload.begin() + 5) ==
        std::vector<unsigned char>{9, 2, 1, 1, 6});
}
