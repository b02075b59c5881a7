// safetensors_tool: minidl's half of the interop test (tests/io/interop.py runs it).
//   safetensors_tool write PATH   writes the known tensors below, metadata producer=minidl
//   safetensors_tool check PATH   reads a file Python wrote and checks it holds exactly the
//                                 known tensors (bit for bit) with metadata producer=python
// interop.py holds the same values; the two must be edited together.
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "io/safetensors.h"

using namespace minidl;

namespace {

io::TensorMap known_tensors() {
  io::TensorMap m;
  m["f32"] = from_vector(std::vector<float>{0.0f, -1.5f, 3.25f, 1e-40f, -0.0f, FLT_MAX}, Shape{2, 3});
  m["f64"] = from_vector(std::vector<double>{1.0 / 3.0, -1e300, 5e-324, 3.141592653589793});
  m["i64"] = from_vector(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, 42,
                                              std::numeric_limits<int64_t>::max()},
                         Shape{2, 2});
  m["scalar"] = scalar_tensor(7.5, DType::Float64);  // rank 0
  m["empty"] = zeros({3, 0});                         // F32, no elements
  return m;
}

// "ünïcode ✓" in UTF-8 (split so that no hex escape swallows the letters after it).
const char* kNote = "\xc3\xbc" "n" "\xc3\xaf" "code " "\xe2\x9c\x93";

int check(const std::string& path) {
  const io::SafetensorsFile file = io::load_safetensors(path);
  const io::TensorMap want = known_tensors();
  int failures = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "safetensors_tool check %s: %s\n", path.c_str(), what.c_str());
    ++failures;
  };
  if (file.tensors.size() != want.size())
    fail("holds " + std::to_string(file.tensors.size()) + " tensors, expected " + std::to_string(want.size()));
  for (const auto& [name, w] : want) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      fail("tensor '" + name + "' is missing");
      continue;
    }
    const Tensor& g = it->second;
    if (g.dtype() != w.dtype() || g.shape() != w.shape()) {
      fail("tensor '" + name + "' is " + dtype_name(g.dtype()) + " " + g.shape().str() + ", expected " +
           dtype_name(w.dtype()) + " " + w.shape().str());
      continue;
    }
    const size_t bytes = static_cast<size_t>(w.numel()) * dtype_size(w.dtype());
    if (bytes > 0 && std::memcmp(g.raw_data(), w.raw_data(), bytes) != 0) fail("tensor '" + name + "' has other values");
  }
  const io::Metadata want_meta{{"producer", "python"}, {"note", kNote}};
  if (file.metadata != want_meta) fail("metadata differs from {producer: python, note: " + std::string(kNote) + "}");
  if (failures == 0) std::printf("safetensors_tool check %s: %zu tensors and the metadata match\n", path.c_str(), want.size());
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "write") != 0 && std::strcmp(argv[1], "check") != 0)) {
    std::fprintf(stderr, "usage: %s write PATH | check PATH\n", argv[0]);
    return 2;
  }
  try {
    if (std::strcmp(argv[1], "write") == 0) {
      io::save_safetensors(known_tensors(), argv[2], {{"producer", "minidl"}, {"note", kNote}});
      return 0;
    }
    return check(argv[2]);
  } catch (const Error& e) {
    std::fprintf(stderr, "safetensors_tool: %s\n", e.what());
    return 1;
  }
}
