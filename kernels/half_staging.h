// How a backend computes an op on 16-bit tensors when it has no 16-bit kernel for it: through
// float32 stand-ins. Shared by the CPU (kernels/cpu) and CUDA (kernels/cuda) backends.
//
// A bfloat16 or float16 op here means float32 math with one rounding per output element, which
// is what a fused 16-bit kernel computes too (read 16 bits, widen, compute and accumulate in
// float32, round on store). For the ops that are not hot — the softmax family, the norms,
// pooling, attention, the optimizer updates — a backend gets there by staging: each 16-bit input
// is widened into a float32 copy on its own device (exact: every bfloat16 and float16 value is a
// float32 value), the float32 kernel runs, and each 16-bit output is rounded from its float32
// buffer once the kernel is done. The widening and the rounding are the device's own cast
// (backend_for(t.device()).cast), so on a GPU the staged copies never leave the device and are
// queued on its stream in order with the kernel. Statistics an op keeps for backward (mean,
// rstd, log-sum-exp) are float32 already for 16-bit inputs (compute_dtype in core/dtype.h), so
// they pass through untouched, as do int64 indices and undefined tensors. The cost is a float32
// copy of each 16-bit operand for the length of one call. The hot ops read 16 bits directly
// instead: on the CPU the GEMM converts while it packs (gemm.cpp) and the elementwise kernels
// convert per element; on CUDA the elementwise kernels (arithmetic, ReLU, GELU, dropout) convert
// per element, and the hand-written GEMM of matmul and linear, forward and backward (simt_gemm.cu,
// linear.cu), widens its operands as it loads them and rounds C as it stores it. CUDA's cuBLAS
// GEMM path (gemm_impl() == GemmImpl::Cublas) stages, since it calls cublasSgemm.
//
// Use, at the top of a method:
//   if (HalfStaging::needed({&x, &y})) {
//     HalfStaging s;
//     softmax_forward(s.in(x), s.out(y));
//     return s.commit();
//   }
#pragma once

#include <deque>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace minidl {

class HalfStaging {
 public:
  // Whether any of the (possibly undefined) tensors is 16-bit.
  static bool needed(std::initializer_list<const Tensor*> tensors);
  static bool needed(const std::vector<Tensor>& tensors);

  // t itself unless it is 16-bit; then a float32 copy of it on t's device, kept alive by this
  // object.
  const Tensor& in(const Tensor& t);
  // t itself unless it is 16-bit; then a float32 buffer of its shape, which commit() rounds into
  // t. An output the kernel also reads (an in-place update) is passed as inout: its buffer starts
  // as a copy of t.
  Tensor& out(Tensor& t);
  Tensor& inout(Tensor& t);
  // Lists of tensors (the multi-tensor methods): each element as in() / inout().
  std::vector<Tensor> in(const std::vector<Tensor>& ts);
  std::vector<Tensor>& inout(std::vector<Tensor>& ts);

  // Rounds every staged output into its 16-bit tensor.
  void commit();

 private:
  std::deque<Tensor> inputs_;                      // deque: the references handed out stay valid
  std::deque<std::pair<Tensor*, Tensor>> outputs_;  // (the 16-bit tensor, its float32 buffer)
  std::deque<std::vector<Tensor>> lists_;
  std::vector<std::pair<std::vector<Tensor>*, size_t>> list_outputs_;  // (the 16-bit list, its staged copy's index)
};

}  // namespace minidl
