// The trainers' --dtype: fp32, bf16 or fp16, and what each means for a training step.
//
//   fp32  everything in float32 (the default)
//   bf16  the forward under bfloat16 autocast (core/autocast.h): matmuls, linears, convolutions
//         and attention in bfloat16, losses and norms in float32; parameters, gradients and the
//         optimizer stay float32 (the master weights). No loss scaling: bfloat16 has float32's
//         range.
//   fp16  the same with float16, plus a GradScaler (optim/grad_scaler.h): float16's range ends at
//         65504 and its precision at 2^-24, so the loss is scaled up before backward and the
//         gradients down before the optimizer, and a step whose gradients overflowed is skipped.
//
// One object per run; the trainer opens autocast() around its forward passes and routes
// backward and the optimizer step through scaler().
#pragma once

#include <memory>
#include <string>

#include "core/autocast.h"
#include "core/device.h"
#include "core/dtype.h"
#include "optim/grad_scaler.h"

namespace minidl::samples {

// "fp32", "bf16", "fp16" (also "float32", "bfloat16", "float16") to a DType; throws naming the
// flag and the choices otherwise.
DType parse_precision(const std::string& text, const char* flag = "--dtype");
// The flag's spelling of a dtype: "fp32", "bf16", "fp16".
std::string precision_name(DType dtype);

class MixedPrecision {
 public:
  explicit MixedPrecision(DType dtype = DType::Float32);
  DType dtype() const { return dtype_; }
  bool enabled() const { return dtype_ != DType::Float32; }
  // An autocast scope on `device`'s type for the forward (nullptr, no scope, for fp32).
  std::unique_ptr<AutocastGuard> autocast(Device device) const;
  // Enabled for fp16 only.
  optim::GradScaler& scaler() { return scaler_; }
  const optim::GradScaler& scaler() const { return scaler_; }

 private:
  DType dtype_;
  optim::GradScaler scaler_;
};

// The process's peak resident memory in bytes so far (getrusage's ru_maxrss).
int64_t peak_resident_bytes();

}  // namespace minidl::samples
