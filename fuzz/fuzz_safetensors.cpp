// libFuzzer target: parse_safetensors on arbitrary bytes. A minidl::Error is the right answer
// to a bad file. A file it accepts must also survive a round trip: serializing what was read
// and parsing that again gives the same tensors (bit for bit) and metadata, else we trap.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "io/safetensors.h"

namespace {

bool same(const minidl::io::SafetensorsFile& a, const minidl::io::SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end()) return false;
    const minidl::Tensor& u = it->second;
    if (u.dtype() != t.dtype() || u.shape() != t.shape()) return false;
    const size_t bytes = static_cast<size_t>(t.numel()) * minidl::dtype_size(t.dtype());
    if (bytes > 0 && std::memcmp(t.raw_data(), u.raw_data(), bytes) != 0) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace minidl;
  io::SafetensorsFile first;
  try {
    first = io::parse_safetensors(data, size, "fuzz-input");
  } catch (const Error&) {
    return 0;
  }
  // Accepted: it must round trip. (An exception here escapes and is reported as a crash.)
  const std::string bytes = io::serialize_safetensors(first.tensors, first.metadata);
  const io::SafetensorsFile second =
      io::parse_safetensors(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "round-trip");
  if (!same(first, second)) __builtin_trap();
  return 0;
}
