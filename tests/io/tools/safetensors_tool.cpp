// safetensors_tool: minidl's half of the interop test (tests/io/interop.py runs it).
//   safetensors_tool write PATH   writes the known tensors below, metadata producer=minidl
//   safetensors_tool check PATH   reads a file Python wrote and checks it holds exactly the
//                                 known tensors (bit for bit) with metadata producer=python
// interop.py holds the same values (KNOWN and HALF_CASES there); the two must be edited together.
// The BF16 and F16 tensors are where minidl's rounding meets PyTorch's and numpy's: `write`
// rounds the float32 inputs of kHalfCases with minidl's own cast, and `check` holds what Python
// rounded to the bits the table says, so a disagreement in either direction shows as a bit.
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>

#include "io/safetensors.h"

using namespace minidl;

namespace {

// One float32 input and the bits it must round to in each 16-bit format: round to nearest, ties to
// even, NaN to 0x7FC0 in BF16 (PyTorch's canonical NaN, whatever the sign) and to a quiet NaN that
// keeps the sign in F16. The input is given as its bits so that -0, NaN and the subnormals are the
// same value in C++ and in Python, with no decimal parsing in between. The NaN inputs carry no
// payload beyond the quiet bit: F16 conversions differ on payloads (numpy keeps the payload's top
// bits, minidl and PyTorch give 0x7E00), which is not what this test is about.
struct HalfCase {
  uint32_t f32;
  uint16_t bf16, f16;
  const char* what;
};

// interop.py's HALF_CASES holds the same rows in the same order: the two lists must match.
constexpr HalfCase kHalfCases[] = {
    {0x00000000, 0x0000, 0x0000, "+0"},
    {0x80000000, 0x8000, 0x8000, "-0 keeps its sign"},
    {0x3F800000, 0x3F80, 0x3C00, "1"},
    {0xC0200000, 0xC020, 0xC100, "-2.5"},
    {0x3DCCCCCD, 0x3DCD, 0x2E66, "0.1f rounds up in both"},
    {0xBDCCCCCD, 0xBDCD, 0xAE66, "-0.1f"},
    {0x3EAAAAAB, 0x3EAB, 0x3555, "1/3"},
    {0x40490FDB, 0x4049, 0x4248, "pi rounds down in both"},
    {0x3F808000, 0x3F80, 0x3C04, "1 + 2^-8: BF16 tie, to even (down)"},
    {0x3F818000, 0x3F82, 0x3C0C, "1 + 3*2^-8: BF16 tie, to even (up)"},
    {0x3F808001, 0x3F81, 0x3C04, "just above a BF16 tie: up"},
    {0x3F7F8000, 0x3F80, 0x3BFC, "1 - 2^-9: BF16 tie up, the carry reaches the exponent"},
    {0x3F801000, 0x3F80, 0x3C00, "1 + 2^-11: F16 tie, to even (down)"},
    {0x3F803000, 0x3F80, 0x3C02, "1 + 3*2^-11: F16 tie, to even (up)"},
    {0x477FE000, 0x4780, 0x7BFF, "65504, F16's largest finite"},
    {0xC77FE000, 0xC780, 0xFBFF, "-65504"},
    {0x477FEFFF, 0x4780, 0x7BFF, "just below 65520: F16 stays finite"},
    {0x477FF000, 0x4780, 0x7C00, "65520: F16 rounds to Inf"},
    {0x7F7FFFFF, 0x7F80, 0x7C00, "FLT_MAX: Inf in both"},
    {0x7F800000, 0x7F80, 0x7C00, "+Inf"},
    {0xFF800000, 0xFF80, 0xFC00, "-Inf"},
    {0x7FC00000, 0x7FC0, 0x7E00, "NaN"},
    {0xFFC00000, 0x7FC0, 0xFE00, "-NaN: BF16 canonical 0x7FC0, F16 keeps the sign"},
    {0x000116C2, 0x0001, 0x0000, "1e-40f: a BF16 subnormal, F16 underflows to 0"},
    {0x00018000, 0x0002, 0x0000, "BF16 subnormal tie, to even (up)"},
    {0x33800000, 0x3380, 0x0001, "2^-24: F16's smallest subnormal"},
    {0x33000000, 0x3300, 0x0000, "2^-25: F16 tie, to even (0)"},
    {0x33000001, 0x3300, 0x0001, "just above 2^-25: F16 up to 2^-24"},
    {0x33C00000, 0x33C0, 0x0002, "3*2^-25: F16 subnormal tie, to even (up)"},
    {0x387FE000, 0x3880, 0x0400, "2^-14 - 2^-25: F16 tie between subnormal and normal, to even (normal)"},
};
constexpr size_t kNumHalfCases = std::size(kHalfCases);

io::TensorMap known_tensors() {
  io::TensorMap m;
  m["f32"] = from_vector(std::vector<float>{0.0f, -1.5f, 3.25f, 1e-40f, -0.0f, FLT_MAX}, Shape{2, 3});
  m["f64"] = from_vector(std::vector<double>{1.0 / 3.0, -1e300, 5e-324, 3.141592653589793});
  m["i64"] = from_vector(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, 42,
                                              std::numeric_limits<int64_t>::max()},
                         Shape{2, 2});
  m["scalar"] = scalar_tensor(7.5, DType::Float64);  // rank 0
  m["empty"] = zeros({3, 0});                         // F32, no elements
  // The 16-bit tensors come from minidl's float32 -> 16-bit cast, the way a model's weights
  // reach BF16 / F16 before they are saved; `check` holds them to the table's bits instead.
  std::vector<float> inputs;
  for (const HalfCase& c : kHalfCases) inputs.push_back(std::bit_cast<float>(c.f32));
  const Tensor f32_inputs = from_vector(inputs);
  m["bf16"] = f32_inputs.to(DType::BFloat16);
  m["f16"] = f32_inputs.to(DType::Float16);
  m["bf16_empty"] = zeros({0, 4}, DType::BFloat16);  // a BF16 entry with no bytes
  return m;
}

// "ünïcode ✓" in UTF-8 (split so that no hex escape swallows the letters after it).
const char* kNote = "\xc3\xbc" "n" "\xc3\xaf" "code " "\xe2\x9c\x93";

// Holds the 16-bit tensor `name` (shape already checked) to the table's bits, element by element.
// The table, not known_tensors() (minidl's own rounding), is the reference: Python's rounding is
// held to the answer both sides wrote down, not merely to whatever minidl computes today.
template <typename Half, uint16_t HalfCase::*expected>
int check_half(const std::string& path, const std::string& name, const Tensor& g) {
  int failures = 0;
  const Half* got = g.data<Half>();
  for (size_t i = 0; i < kNumHalfCases; ++i) {
    const HalfCase& c = kHalfCases[i];
    if (got[i].bits() == c.*expected) continue;
    std::fprintf(stderr,
                 "safetensors_tool check %s: tensor '%s'[%zu] (float32 0x%08X, %s): bits 0x%04X, expected 0x%04X\n",
                 path.c_str(), name.c_str(), i, static_cast<unsigned>(c.f32), c.what,
                 static_cast<unsigned>(got[i].bits()), static_cast<unsigned>(c.*expected));
    ++failures;
  }
  return failures;
}

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
    if (name == "bf16") {
      failures += check_half<bfloat16, &HalfCase::bf16>(path, name, g);
      continue;
    }
    if (name == "f16") {
      failures += check_half<float16, &HalfCase::f16>(path, name, g);
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
