// io/safetensors and io/atomic_file: round trips of every dtype (0-element and rank-0
// included), metadata, non-contiguous input, the exact bytes of a tiny file, atomic writes
// that leave the old file and no temporary behind when they fail, every malformed file the
// reader must refuse (each message checked), and loading into a module of the wrong shape.
#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <cstring>
#include <limits>

#include "error_message.h"
#include "io/safetensors.h"
#include "nn/linear.h"
#include "temp_dir.h"

using namespace minidl;
using namespace minidl::io;
using minidl::testing::error_message;
using minidl::testing::TempDir;
using Catch::Contains;

namespace {

// A file from a header text and data bytes: [u64 LE length][header][data].
std::string st_file(const std::string& header, const std::string& data = "") {
  std::string s;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return s + header + data;
}

SafetensorsFile parse(const std::string& bytes) {
  return parse_safetensors(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "t.safetensors");
}

std::string parse_error(const std::string& bytes) {
  return error_message([&] { parse(bytes); });
}

// Same dtype, shape and bytes (bitwise: NaN payloads and -0.0 must survive).
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(a.numel()) * dtype_size(a.dtype())) == 0;
}

TensorMap sample_tensors() {
  Generator g(3);
  TensorMap m;
  m["weights.f32"] = randn({2, 3}, {}, &g);
  m["special.f32"] = from_vector(std::vector<float>{-0.0f, std::numeric_limits<float>::infinity(),
                                                   std::numeric_limits<float>::quiet_NaN(), 1e-45f});
  m["f64"] = randn({4}, DType::Float64, &g);
  m["i64"] = from_vector(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, 0,
                                              std::numeric_limits<int64_t>::max()});
  m["empty"] = zeros({0});
  m["empty.i64"] = zeros({2, 0, 3}, DType::Int64);
  m["scalar"] = scalar_tensor(2.5, DType::Float64);
  return m;
}

void check_same_tensors(const TensorMap& got, const TensorMap& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    CHECK(got.at(name).device() == Device::cpu());
    CHECK(same_bits(got.at(name), t));
  }
}

}  // namespace

TEST_CASE("safetensors round trips F32, F64 and I64 with 0-element and rank-0 tensors and metadata", "[io]") {
  const TensorMap tensors = sample_tensors();
  const Metadata metadata{{"format", "pt"}, {"epoch", "3"}, {"ключ", "значение"}, {"empty", ""}};
  const std::string bytes = serialize_safetensors(tensors, metadata);
  SafetensorsFile back = parse(bytes);
  check_same_tensors(back.tensors, tensors);
  CHECK(back.metadata == metadata);
  CHECK(back.tensors.at("scalar").dim() == 0);
  CHECK(back.tensors.at("empty.i64").shape() == Shape{2, 0, 3});

  TempDir dir;
  save_safetensors(tensors, dir.file("m.safetensors"), metadata);
  SafetensorsFile loaded = load_safetensors(dir.file("m.safetensors"));
  check_same_tensors(loaded.tensors, tensors);
  CHECK(loaded.metadata == metadata);
  CHECK(testing::read_bytes(dir.file("m.safetensors")) == bytes);

  // An empty map is a valid file too, and no metadata means no "__metadata__" entry.
  SafetensorsFile empty = parse(serialize_safetensors({}));
  CHECK(empty.tensors.empty());
  CHECK(empty.metadata.empty());
}

TEST_CASE("serialize_safetensors copies non-contiguous and offset views as their row-major values", "[io]") {
  Tensor base = arange(12, DType::Float32).reshape({3, 4});
  Tensor transposed = base.t();                      // [4, 3], strides [1, 4]
  Tensor narrowed = base.narrow(1, 1, 2);            // [3, 2], offset 1
  REQUIRE(!transposed.is_contiguous());
  SafetensorsFile back = parse(serialize_safetensors({{"t", transposed}, {"n", narrowed}}));
  CHECK(back.tensors.at("t").shape() == Shape{4, 3});
  CHECK(back.tensors.at("t").to_vector<float>() == transposed.contiguous().to_vector<float>());
  CHECK(back.tensors.at("n").to_vector<float>() == std::vector<float>{1, 2, 5, 6, 9, 10});
  // requires_grad tensors are saved as their values.
  Tensor p = ones({2}).requires_grad_(true);
  CHECK(parse(serialize_safetensors({{"p", p}})).tensors.at("p").to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("serialize_safetensors writes exactly the bytes of a hand-written file", "[io]") {
  const std::string bytes = serialize_safetensors(
      {{"a", from_vector(std::vector<float>{1.0f, -2.0f})}, {"b", scalar_tensor(5, DType::Int64)}}, {{"k", "v"}});
  // 132 bytes of JSON padded with 4 spaces to 136 = 0x88, so the data starts 8-byte aligned.
  const std::string header =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}}    )";
  const std::string expected = std::string("\x88\0\0\0\0\0\0\0", 8) + header +
                               std::string("\x00\x00\x80\x3f", 4) +   // 1.0f little-endian
                               std::string("\x00\x00\x00\xc0", 4) +   // -2.0f
                               std::string("\x05\0\0\0\0\0\0\0", 8);  // int64 5
  CHECK(bytes == expected);
}

TEST_CASE("parse_safetensors accepts tensors in any order of data_offsets", "[io]") {
  const std::string data = std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8) + std::string("\x00\x00\x40\x40", 4);
  SafetensorsFile f = parse(st_file(R"({"z":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                                    R"("e":{"dtype":"F64","shape":[0,5],"data_offsets":[12,12]}})",
                                    data));
  CHECK(f.tensors.at("z").to_vector<float>() == std::vector<float>{1, 2});
  CHECK(f.tensors.at("a").to_vector<float>() == std::vector<float>{3});
  CHECK(f.tensors.at("e").shape() == Shape{0, 5});
}

TEST_CASE("serialize_safetensors refuses undefined tensors and the reserved name, and non-UTF-8 text", "[io]") {
  CHECK_THAT(error_message([] { serialize_safetensors({{"w", Tensor()}}); }), Contains("tensor 'w' is undefined"));
  // An empty name is legal in the format (and so kept, as the reader keeps it).
  CHECK(parse(serialize_safetensors({{"", ones({1})}})).tensors.count("") == 1);
  CHECK_THAT(error_message([] { serialize_safetensors({{"__metadata__", zeros({1})}}); }), Contains("reserved"));
  CHECK_THAT(error_message([] { serialize_safetensors({{"x", zeros({1})}}, {{"k", "\xff\xfe"}}); }),
             Contains("cannot write the header"));
}

TEST_CASE("parse_safetensors refuses a bad header length or a header that is not a JSON object", "[io]") {
  CHECK_THAT(parse_error(""), Contains("parse_safetensors: t.safetensors") && Contains("8-byte header length"));
  CHECK_THAT(parse_error(std::string("\x10\0\0", 3)), Contains("truncated"));
  std::string longer = st_file("{}");
  longer[0] = 100;  // says 100 bytes of header, the file has 2
  CHECK_THAT(parse_error(longer), Contains("header length 100 is larger than the file"));
  std::string huge = st_file("{}");
  huge[3] = 0x10;  // 0x10000000 + 2 bytes = 256 MiB
  CHECK_THAT(parse_error(huge), Contains("above the 100 MiB limit"));
  std::string max = std::string(8, '\xff') + "{}";
  CHECK_THAT(parse_error(max), Contains("header length 18446744073709551615 is above the 100 MiB limit"));
  CHECK_THAT(parse_error(st_file("{not json")), Contains("bad header: not valid JSON"));
  CHECK_THAT(parse_error(st_file("")), Contains("not valid JSON"));
  CHECK_THAT(parse_error(st_file("{} trailing")), Contains("not valid JSON"));
  CHECK_THAT(parse_error(st_file("[1, 2]")), Contains("bad header: not a JSON object (got array)"));
  CHECK_THAT(parse_error(st_file("\"x\"")), Contains("not a JSON object"));
  CHECK_THAT(parse_error(st_file("{\"\xff\": 1}")), Contains("not valid JSON"));  // not UTF-8
  CHECK_THAT(parse_error(st_file(R"({"a":[[[[[[[[[[[[1]]]]]]]]]]]]})")), Contains("nested more than 8 levels"));
}

TEST_CASE("parse_safetensors refuses entries with a bad dtype or shape", "[io]") {
  auto entry = [](const std::string& body, const std::string& data = "") {
    return parse_error(st_file("{\"w\":" + body + "}", data));
  };
  CHECK_THAT(entry("3"), Contains("tensor 'w': the entry is not a JSON object"));
  CHECK_THAT(entry("[]"), Contains("not a JSON object"));
  CHECK_THAT(entry(R"({"shape":[1],"data_offsets":[0,4]})", "abcd"), Contains("tensor 'w': missing \"dtype\""));
  CHECK_THAT(entry(R"({"dtype":32,"shape":[1],"data_offsets":[0,4]})", "abcd"), Contains("\"dtype\" must be a string"));
  CHECK_THAT(entry(R"({"dtype":"F33","shape":[1],"data_offsets":[0,4]})", "abcd"), Contains("unknown dtype \"F33\""));
  for (const char* dt : {"U8", "I32", "BOOL", "F8_E4M3", "U64"}) {
    INFO(dt);
    CHECK_THAT(entry(std::string(R"({"dtype":")") + dt + R"(","shape":[1],"data_offsets":[0,2]})", "ab"),
               Contains(std::string("unsupported dtype ") + dt + "; minidl reads F32, F64, I64, BF16, F16"));
  }
  CHECK_THAT(entry(R"({"dtype":"F32","data_offsets":[0,4]})", "abcd"), Contains("missing \"shape\""));
  for (const char* shape : {"3", "[-1]", "[2.0]", "[\"2\"]", "[null]", "{}", "[[1]]"}) {
    INFO(shape);
    CHECK_THAT(entry(std::string(R"({"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,4]})", "abcd"),
               Contains("\"shape\" must be an array of non-negative integers"));
  }
  CHECK_THAT(entry(R"({"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]})", "abcd"),
             Contains("has rank 9; minidl tensors have at most 8 dims"));
  CHECK_THAT(entry(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})", "abcd"),
             Contains("element count overflows: shape [4294967296, 4294967296] of F32"));
  // A 0 dim does not hide an overflow of the others (Shape::numel multiplies them all).
  CHECK_THAT(entry(R"({"dtype":"I64","shape":[4611686018427387904,4611686018427387904,0],"data_offsets":[0,0]})"),
             Contains("element count overflows"));
  CHECK_THAT(entry(R"({"dtype":"F64","shape":[18446744073709551615],"data_offsets":[0,8]})", "abcdefgh"),
             Contains("element count overflows"));
}

TEST_CASE("parse_safetensors refuses bad data_offsets", "[io]") {
  auto entry = [](const std::string& offsets, const std::string& data = "abcdefgh") {
    return parse_error(st_file(R"({"w":{"dtype":"F32","shape":[2])" + offsets + "}}", data));
  };
  CHECK_THAT(entry(""), Contains("tensor 'w': missing \"data_offsets\""));
  for (const char* bad : {"3", "[0]", "[0,4,8]", "[-1,7]", "[0.0,8]", "[\"0\",8]", "{}"}) {
    INFO(bad);
    CHECK_THAT(entry(std::string(R"(,"data_offsets":)") + bad),
               Contains("\"data_offsets\" must be two non-negative integers [begin, end]"));
  }
  CHECK_THAT(entry(R"(,"data_offsets":[8,0])"), Contains("data_offsets [8, 0]: begin > end"));
  CHECK_THAT(entry(R"(,"data_offsets":[4,12])"),
             Contains("data_offsets [4, 12] run past the end of the data section, which holds 8 bytes") &&
                 Contains("out of bounds"));
  CHECK_THAT(entry(R"(,"data_offsets":[0,18446744073709551615])"), Contains("out of bounds"));
  CHECK_THAT(entry(R"(,"data_offsets":[0,4])"),
             Contains("data_offsets [0, 4] cover 4 bytes, but dtype F32 x shape [2] needs 8"));
}

TEST_CASE("parse_safetensors refuses data sections with overlaps, holes or bytes left over", "[io]") {
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  CHECK_THAT(parse_error(st_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 +
                                     R"(,"data_offsets":[4,12]}})",
                                 std::string(12, 'x'))),
             Contains("tensors 'a' [0, 8] and 'b' [4, 12] overlap"));
  // Two names for the same bytes are an overlap too.
  CHECK_THAT(parse_error(st_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 +
                                     R"(,"data_offsets":[0,8]}})",
                                 std::string(8, 'x'))),
             Contains("overlap"));
  CHECK_THAT(parse_error(st_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 +
                                     R"(,"data_offsets":[12,20]}})",
                                 std::string(20, 'x'))),
             Contains("hole in the data section: bytes [8, 12) belong to no tensor (before 'b')"));
  CHECK_THAT(parse_error(st_file("{\"b\":{" + f32x2 + R"(,"data_offsets":[4,12]}})", std::string(12, 'x'))),
             Contains("hole in the data section: bytes [0, 4)"));
  CHECK_THAT(parse_error(st_file("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]}})", std::string(11, 'x'))),
             Contains("bytes [8, 11) at the end of the data section belong to no tensor"));
  CHECK_THAT(parse_error(st_file("{}", "x")), Contains("bytes [0, 1) at the end of the data section"));
}

TEST_CASE("parse_safetensors refuses duplicate names, truncated data and bad metadata", "[io]") {
  const std::string e = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  CHECK_THAT(parse_error(st_file("{\"a\":" + e + ",\"a\":" + e + "}", "abcd")), Contains("duplicate name 'a'"));
  CHECK_THAT(parse_error(st_file(R"({"a":{"dtype":"F32","dtype":"I64","shape":[1],"data_offsets":[0,4]}})", "abcd")),
             Contains("duplicate key 'dtype' inside 'a'"));
  CHECK_THAT(parse_error(st_file(R"({"__metadata__":{"k":"1","k":"2"}})")), Contains("duplicate key 'k' inside '__metadata__'"));
  CHECK_THAT(parse_error(st_file(R"({"__metadata__":{},"__metadata__":{}})")), Contains("duplicate name '__metadata__'"));

  const std::string good = serialize_safetensors({{"w", ones({4})}, {"v", ones({2}, DType::Int64)}});
  REQUIRE_NOTHROW(parse(good));
  CHECK_THAT(parse_error(good.substr(0, good.size() - 1)), Contains("truncated"));
  CHECK_THAT(parse_error(good.substr(0, good.size() - 16)), Contains("truncated"));

  CHECK_THAT(parse_error(st_file(R"({"__metadata__":{"epoch":3}})")),
             Contains("\"__metadata__\" value for key 'epoch' is not a string (got 3)"));
  CHECK_THAT(parse_error(st_file(R"({"__metadata__":{"a":"x","b":null}})")), Contains("key 'b' is not a string"));
  CHECK_THAT(parse_error(st_file(R"({"__metadata__":["x"]})")), Contains("must be an object of strings"));
}

TEST_CASE("load_safetensors names the path when the file is missing or malformed", "[io]") {
  TempDir dir;
  CHECK_THAT(error_message([&] { load_safetensors(dir.file("none.safetensors")); }),
             Contains("load_safetensors: " + dir.file("none.safetensors")) && Contains("No such file or directory"));
  testing::write_bytes(dir.file("bad.safetensors"), st_file("{\"a\":1}"));
  CHECK_THAT(error_message([&] { load_safetensors(dir.file("bad.safetensors")); }),
             Contains("load_safetensors: " + dir.file("bad.safetensors") + ": tensor 'a'"));
  CHECK_THAT(error_message([&] { load_safetensors(dir.path()); }), Contains("not a regular file"));
}

TEST_CASE("a failed save leaves the old file intact and no temporary file behind", "[io][atomic]") {
  TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  save_safetensors({{"w", full({3}, 1.0)}}, path, {{"epoch", "1"}});
  const std::string old_bytes = testing::read_bytes(path);

  // An undefined tensor in the map: the save throws, the old checkpoint stays.
  CHECK_THAT(error_message([&] { save_safetensors({{"w", full({3}, 2.0)}, {"bad", Tensor()}}, path); }),
             Contains("tensor 'bad' is undefined"));
  CHECK(testing::read_bytes(path) == old_bytes);
  CHECK(dir.entries() == std::vector<std::string>{"ck.safetensors"});

  // A write that fails after the temporary file exists (the file-size limit makes write()
  // fail with EFBIG): the temporary file is removed and the old file is untouched.
  struct rlimit old_limit;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the process
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  const std::string msg = error_message([&] { save_safetensors({{"w", zeros({10000})}}, path); });
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  CHECK_THAT(msg, Contains("write_file_atomically: " + path) && Contains("File too large"));
  CHECK(testing::read_bytes(path) == old_bytes);
  CHECK(dir.entries() == std::vector<std::string>{"ck.safetensors"});

  // A rename that fails (the target is a folder): the temporary file is removed.
  std::filesystem::create_directory(dir.file("folder"));
  testing::write_bytes(dir.file("folder/keep"), "x");
  CHECK_THAT(error_message([&] { write_file_atomically(dir.file("folder"), "new"); }),
             Contains("cannot rename") && Contains("Is a directory"));
  CHECK(dir.entries() == std::vector<std::string>{"ck.safetensors", "folder"});

  // A folder that does not exist: strerror text, nothing created.
  CHECK_THAT(error_message([&] { write_file_atomically(dir.file("no/such/x"), "new"); }),
             Contains("cannot create a temporary file in " + dir.file("no/such")) &&
                 Contains("No such file or directory"));

  // A good save replaces the file and leaves nothing else.
  save_safetensors({{"w", full({3}, 2.0)}}, path);
  CHECK(load_safetensors(path).tensors.at("w").to_vector<float>() == std::vector<float>{2, 2, 2});
  CHECK(dir.entries() == std::vector<std::string>{"ck.safetensors", "folder"});
}

TEST_CASE("write_file_atomically gives a new file mode 0644 and keeps an existing file's mode", "[io][atomic]") {
  TempDir dir;
  const std::string path = dir.file("f");
  write_file_atomically(path, "one");
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  write_file_atomically(path, "two");
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(testing::read_bytes(path) == "two");
  write_file_atomically(path, "");  // empty contents are fine
  CHECK(testing::read_bytes(path).empty());
}

TEST_CASE("a saved module state loads back, and into a module of another shape is refused unchanged", "[io][nn]") {
  Generator g(11);
  nn::Linear small(3, 4, true, &g);
  TempDir dir;
  const std::string path = dir.file("linear.safetensors");
  save_safetensors(small.state_dict(), path);

  nn::Linear same(3, 4, true, &g);
  same.load_state_dict(load_safetensors(path).tensors);
  CHECK(same.weight.to_vector<float>() == small.weight.to_vector<float>());
  CHECK(same.bias.to_vector<float>() == small.bias.to_vector<float>());

  nn::Linear wider(3, 5, true, &g);
  const std::vector<float> w_before = wider.weight.to_vector<float>();
  const std::vector<float> b_before = wider.bias.to_vector<float>();
  CHECK_THAT(error_message([&] { wider.load_state_dict(load_safetensors(path).tensors); }),
             Contains("load_state_dict failed (nothing was loaded)") &&
                 Contains("weight: expected shape [5, 3], got [4, 3]") && Contains("bias: expected shape [5], got [4]"));
  CHECK(wider.weight.to_vector<float>() == w_before);
  CHECK(wider.bias.to_vector<float>() == b_before);
}
