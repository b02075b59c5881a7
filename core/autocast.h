// Autocast: mixed precision without touching the model. Inside an AutocastGuard scope, each op
// on the scope's device casts its inputs to the precision its policy names, PyTorch's
// torch.autocast semantics:
//
//   AutocastGuard guard(Device::cpu(), DType::BFloat16);  // or Device::cuda(0), DType::Float16
//   Tensor loss = cross_entropy(model.forward(x), y);     // matmuls in bf16, the loss in fp32
//   // (the guard ends here) loss.backward(); optimizer.step();
//
// The policies (policy_for below; the table is kAutocastOps in autocast.cpp, and the same table
// with the reasons is docs/mixed-precision.md):
//   LowerPrecision  matmul, linear, conv2d, attention: the products that tensor cores (and a
//                   16-bit GEMM) speed up, whose float32 accumulation keeps them accurate.
//   Float32         ops whose result is ruined by 16 bits: cross-entropy and the losses, the
//                   norms, and on CUDA softmax, log-softmax and sums (PyTorch's lists differ by
//                   device: its CPU kernels keep a float32 accumulator themselves).
//   Promote         ops of several inputs run in the widest of their floating dtypes. No op in
//                   the table needs it: add, sub, mul and div promote by themselves, autocast
//                   or not (promote_types in core/dtype.h), as PyTorch's do.
//   everything else runs in the dtype of its inputs (relu, gelu, dropout, views, embedding).
//
// Only defined floating tensors on the scope's device type are cast, never float64 (PyTorch:
// a float64 input says the user wants float64). Casts are ops::to, so gradients flow back
// through them: each op's gradient is computed in the dtype that op saw and reaches a float32
// parameter as float32. The 16-bit casts of float32 leaf tensors that require grad (the
// parameters), made while gradients are recorded, are cached for the scope, so a weight used at every step of a loop is cast once;
// the cache is dropped when the outermost scope ends (the optimizer then changes the weights).
// State is per thread, like torch.autocast; a DataParallel replica thread starts with the
// state of the thread that launched it (parallel/replica_threads.h).
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace minidl {

enum class AutocastPolicy : uint8_t {
  None,            // runs in its inputs' dtype
  LowerPrecision,  // inputs cast to the scope's 16-bit dtype
  Float32,         // 16-bit inputs cast to float32
  Promote,         // inputs cast to the widest floating dtype among them
};
const char* autocast_policy_name(AutocastPolicy p);

// Enables autocast for ops on `device`'s type (every CUDA device for a CUDA device, as in
// PyTorch) with `dtype` (bfloat16 or float16) for the scope; enabled = false turns it off for
// the scope (a float32 island inside an autocast region). Nests; restores the previous state.
class AutocastGuard {
 public:
  explicit AutocastGuard(Device device, DType dtype, bool enabled = true, bool cache_enabled = true);
  // The device type's default dtype: bfloat16 on the CPU, float16 on CUDA (PyTorch's defaults).
  explicit AutocastGuard(Device device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  int slot_;
  bool previous_enabled_;
  DType previous_dtype_;
  bool previous_cache_;
};

namespace autocast {

// Whether autocast is on for `device`'s type on this thread, and its dtype there.
bool is_enabled(Device device);
DType dtype(Device device);
// The policy op `op` (an op layer name: "linear", "softmax", ...) follows on `device`'s type.
AutocastPolicy policy_for(const char* op, Device device);
// One row of the table, for docs and tests.
struct OpPolicy {
  const char* op;
  AutocastPolicy cpu, cuda;
};
const std::vector<OpPolicy>& table();

// The op layer's hook, called at the top of an op: when autocast is on for the inputs' device
// and the op's policy changes the dtype of at least one of them, the inputs cast as the policy
// says (undefined and non-eligible ones unchanged), which the op then calls itself with; else
// nullopt (autocast off, nothing to change, or already cast), and the op runs as it is.
std::optional<std::vector<Tensor>> cast_inputs(const char* op, std::initializer_list<const Tensor*> inputs);

// The number of casts in the cache of this thread (tests), and the explicit clear.
size_t cache_size();
void clear_cache();

// This thread's whole autocast state, to hand to a thread that runs part of the same forward
// (a DataParallel replica): capture() on the launching thread, then a Scope on the new one.
struct State {
  std::array<bool, 2> enabled{};
  std::array<DType, 2> dtype{DType::BFloat16, DType::Float16};
  bool cache_enabled = true;
};
State capture();
class Scope {
 public:
  explicit Scope(const State& state);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  State previous_;
};

}  // namespace autocast
}  // namespace minidl
