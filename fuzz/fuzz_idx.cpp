// libFuzzer target: parse_idx on arbitrary bytes, then idx_to_tensor into every dtype.
// A minidl::Error is the right answer to a bad file; any crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>

#include "data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace minidl;
  try {
    const data::IdxArray a = data::parse_idx(data, size, "fuzz-input");
    for (DType t : {DType::Float32, DType::Float64, DType::Int64}) {
      try {
        data::idx_to_tensor(a, t);  // may refuse a NaN or huge float for Int64
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
