// --dtype for the trainers (precision.h).
#include "samples/common/precision.h"

#include <sys/resource.h>

#include "core/error.h"

namespace minidl::samples {

DType parse_precision(const std::string& text, const char* flag) {
  if (text == "fp32" || text == "float32") return DType::Float32;
  if (text == "bf16" || text == "bfloat16") return DType::BFloat16;
  if (text == "fp16" || text == "float16") return DType::Float16;
  throw Error(detail::make_message(flag, ": '", text, "' is not a training precision; expected fp32, bf16 or fp16"));
}

std::string precision_name(DType dtype) {
  switch (dtype) {
    case DType::BFloat16: return "bf16";
    case DType::Float16: return "fp16";
    default: return "fp32";
  }
}

MixedPrecision::MixedPrecision(DType dtype)
    : dtype_(dtype), scaler_(optim::GradScalerOptions{.enabled = dtype == DType::Float16}) {
  MINIDL_CHECK(dtype == DType::Float32 || is_half(dtype), "MixedPrecision: ", dtype,
               " is not a training precision (float32, bfloat16 or float16)");
}

std::unique_ptr<AutocastGuard> MixedPrecision::autocast(Device device) const {
  if (!enabled()) return nullptr;
  return std::make_unique<AutocastGuard>(device, dtype_);
}

int64_t peak_resident_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace minidl::samples
