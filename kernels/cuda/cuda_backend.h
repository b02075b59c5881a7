// CudaBackend: the Backend of one CUDA device (kernels/cuda implements core/backend.h).
// Each device has one compute stream on which every kernel, copy and cuBLAS call of that
// device is queued in order; the host only waits where it must read a result (a copy to the
// CPU, item(), synchronize()); errors the device finds in the targets of a loss are raised
// there too (Note [deferred target errors], cross_entropy.cu). Methods are defined by family,
// one .cu file each:
//   cuda_backend.cu  registry, streams, allocator statistics, synchronize, deferred errors
//   stream_event.cu  the events of the caching allocators' stream-aware frees
//   graph.cu         graph capture and replay (core/cuda_graph.h)
//   memory.cu        copies (host <-> device, device <-> device), strided copy, cast, fill, arange, gather
//   random.cu        uniform / normal / randint from the Philox counters of core/philox.h
//   elementwise.cu   binary ops with broadcasting, ReLU forward/backward, equal
//   reduce.cu        sum over a dim (fixed order, no atomics), argmax of rows
//   gemm/            the GEMM family: the plan (which kernel, which tile), the SIMT kernel
//                    (simt_gemm.cu), the tensor-core kernels, cuBLAS as the baseline
//   linear.cu        matmul, linear forward/backward: picks native or cuBLAS (gemm_impl.h)
//   softmax.cu       log_softmax / softmax forward and backward, on the row engine (row_engine.cuh)
//   cross_entropy.cu softmax-cross-entropy (forward, backward, fused) and the target check
//   optimizer.cu     fused SGD and Adam/AdamW updates
//   conv.cu, pool.cu, batch_norm.cu, dropout.cu   the convolutional-network layers
//   layer_norm.cu, gelu.cu, embedding.cu          the transformer layers (embedding's backward
//                    sorts positions by index: a deterministic scatter-add without atomics)
// float32, bfloat16, float16 and int64 (labels and indices) live on a CUDA device; float64 does
// not. The compute methods run in float32 (computes_in): a 16-bit tensor is computed in float32
// math with one rounding per output, by a kernel that reads and writes 16 bits (half.cuh) where
// the op is hot, else by staging it through float32 copies at the top of the method
// (kernels/half_staging.h, as the CPU does). The op layer asks before it calls, so the methods
// restate their dtype and shape assumptions as MINIDL_INTERNAL_ASSERTs (core/backend.h).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <initializer_list>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/device_guard.h"

namespace minidl::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_index);
  // Never destroyed: the registry keeps backends for the life of the process, because tearing
  // down streams and handles after the CUDA runtime has shut down (at exit) is an error.
  ~CudaBackend() override = default;

  int device_index() const { return device_; }
  Device device() const { return Device::cuda(device_); }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas();  // created on first use, bound to stream()
  int multiprocessor_count() const { return sm_count_; }
  int compute_capability_major() const { return cc_major_; }  // 9 on Hopper: picks the GEMM kernel (gemm_plan.h)
  int compute_capability_minor() const { return cc_minor_; }
  CachingAllocator& caching_allocator() { return *allocator_; }

  Allocator& allocator() override { return *allocator_; }
  // float32, and the 16-bit formats in float32 math: natively where a kernel reads 16 bits (the
  // elementwise ops), through float32 staging elsewhere (kernels/half_staging.h).
  bool computes_in(const char*, DType dtype) const override { return dtype == DType::Float32 || is_half(dtype); }

  void copy(const Tensor& src, Tensor& dst) override;
  void strided_copy(const Tensor& src, Tensor& dst) override;
  void cast(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& dst, double value) override;
  void arange(Tensor& dst, double start, double step) override;
  void gather_rows(const Tensor& src, const Tensor& indices, Tensor& out) override;

  void uniform(Tensor& dst, double low, double high, uint64_t seed, uint64_t offset) override;
  void normal(Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t offset) override;
  void randint(Tensor& dst, int64_t low, int64_t high, uint64_t seed, uint64_t offset) override;

  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void relu_forward(const Tensor& x, Tensor& y) override;
  void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override;
  void equal(const Tensor& a, const Tensor& b, Tensor& out) override;

  void sum_dim(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) override;
  void argmax_rows(const Tensor& x, Tensor& out) override;

  void matmul(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b) override;
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, Activation act,
                      Tensor* pre_activation) override;
  void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                       Tensor& db) override;

  void log_softmax_forward(const Tensor& x, Tensor& y) override;
  void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override;
  void softmax_forward(const Tensor& x, Tensor& y) override;
  void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override;
  std::optional<std::pair<int64_t, int64_t>> find_invalid_target(const Tensor& targets, int64_t num_classes,
                                                                 std::optional<int64_t> ignore_index) override;
  void check_targets(const Tensor& targets, int64_t num_classes, TargetErrorMessage message,
                     std::optional<int64_t> ignore_index = std::nullopt) override;
  void softmax_cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& stats,
                                     const CrossEntropyOptions& o) override;
  void softmax_cross_entropy_fused(const Tensor& logits, const Tensor& targets, const Tensor& scale, Tensor& loss,
                                   Tensor& dlogits, const CrossEntropyOptions& o) override;
  void softmax_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& stats,
                                      const Tensor& scale, Tensor& dlogits, const CrossEntropyOptions& o) override;

  void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SGDConfig& cfg) override;
  void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamConfig& cfg) override;
  void sgd_step_many(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     std::vector<Tensor>& momentum_buffers, const SGDConfig& cfg) override;
  void adam_step_many(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& exp_avgs,
                      std::vector<Tensor>& exp_avg_sqs, const AdamConfig& cfg) override;

  void synchronize() override;
  void* stream_handle() const override { return stream_; }
  std::shared_ptr<DeviceTimestamp> record_timestamp() override;
  // Throws the first error check_targets recorded on the device since the last call, if any,
  // and forgets them all (Note [deferred target errors], cross_entropy.cu). Call it only after
  // the stream has been synchronised: synchronize() and copies to the host do.
  void raise_deferred_errors();
  void record_stream(const Tensor& t, void* stream) override;

  // ---- graph capture (graph.cu; Backend::begin_capture, core/cuda_graph.h) ----
  void begin_capture() override;
  std::unique_ptr<CapturedGraph> end_capture() override;
  void abort_capture() noexcept override;
  bool capturing() const override { return capturing_.load(std::memory_order_acquire); }
  // During a capture, throws the Error of `op`, which a replay could not repeat: `why` says why.
  void refuse_in_capture(const char* op, const char* why) const;
  // Host memory that a captured copy reads at every replay (tensor_table.cuh): the graph keeps it.
  void keep_for_graph(Tensor host);

  int make_current() override;
  int make_current_quietly() noexcept override;
  void restore_current(int previous) noexcept override;
  MemoryStats memory_stats() override;
  void empty_cache() override;
  void reset_peak_memory_stats() override;

  // ---- convolutional networks (conv.cu, pool.cu, batch_norm.cu, dropout.cu) ----
  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dGeometry& g) override;
  void conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db,
                       const Conv2dGeometry& g) override;
  void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dGeometry& g) override;
  void max_pool2d_backward(const Tensor& dy, const Tensor& indices, Tensor& dx, const Pool2dGeometry& g) override;
  void avg_pool2d_forward(const Tensor& x, Tensor& y, const Pool2dGeometry& g) override;
  void avg_pool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dGeometry& g) override;
  void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                          Tensor& running_var, bool training, double momentum, double eps, Tensor& y, Tensor& save_mean,
                          Tensor& save_invstd) override;
  void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                           const Tensor& save_invstd, bool training, Tensor& dx, Tensor& dweight,
                           Tensor& dbias) override;
  void dropout_mask(Tensor& mask, double p, uint64_t seed, uint64_t offset) override;

  // ---- transformer layers (layer_norm.cu, gelu.cu, embedding.cu) ----
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                          Tensor& mean, Tensor& rstd) override;
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) override;
  void gelu_forward(const Tensor& x, Tensor& y, GeluApproximate approximate) override;
  void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx, GeluApproximate approximate) override;
  void embedding_forward(const Tensor& indices, const Tensor& weight, Tensor& out) override;
  void embedding_backward(const Tensor& dy, const Tensor& indices, Tensor& dweight) override;

  // ---- batched matrix products and masks (linear.cu and gemm/, mask.cu) ----
  void matmul_batched(const Tensor& a, const Tensor& b, Tensor& c, const BatchedMatmul& p) override;
  void triangle(const Tensor& x, Tensor& y, int64_t diagonal, bool upper) override;
  void masked_fill(const Tensor& x, const Tensor& mask, double value, Tensor& y) override;

  // ---- attention (attention/attention.cu; the 16-bit forward in attention/flash_mma.cu) ----
  int64_t attention_max_head_size() const override;
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                         double dropout_p, uint64_t seed, uint64_t offset, Tensor& out, Tensor& lse) override;
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, bool causal, double scale, double dropout_p, uint64_t seed,
                          uint64_t offset, Tensor& dq, Tensor& dk, Tensor& dv) override;

  // ---- training-loop utilities (cross_entropy.cu, multi_tensor.cu, sampling.cu) ----
  void cross_entropy_mean_scale(const Tensor& targets, int64_t ignore_index, Tensor& scale) override;
  void multi_tensor_norm(const std::vector<Tensor>& tensors, double p, Tensor& out) override;
  void multi_tensor_clip(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm) override;
  void unscale_and_check_finite(const std::vector<Tensor>& tensors, float inv_scale, Tensor& found_inf) override;
  void topk(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices) override;
  std::optional<std::pair<int64_t, MultinomialDefect>> find_invalid_distribution(const Tensor& weights,
                                                                                  int64_t min_positive) override;
  void multinomial(const Tensor& weights, int64_t n, bool replacement, uint64_t seed, uint64_t offset,
                   Tensor& out) override;

 private:
  int device_;
  int sm_count_ = 0;
  int cc_major_ = 0, cc_minor_ = 0;
  cudaStream_t stream_ = nullptr;
  std::once_flag cublas_once_;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<CachingAllocator> allocator_;
  // The slots of Note [deferred target errors] (cross_entropy.cu): kMaxDeferredChecks slots of
  // {first bad row, its value} in device memory (cudaMalloc'd once, outside the caching allocator's statistics), and the
  // messages of the checks that use them, in call order.
  static constexpr int kMaxDeferredChecks = 1024;
  std::mutex deferred_mutex_;
  unsigned long long* deferred_slots_ = nullptr;  // [kMaxDeferredChecks, 2]
  std::vector<TargetErrorMessage> deferred_messages_;
  // The capture under way (graph.cu): its pool in the caching allocator, the host memory its
  // copies read.
  std::atomic<bool> capturing_{false};
  CachingAllocator::PoolId capture_pool_ = 0;
  std::vector<Tensor> capture_keep_;
};

// Why an op that draws random numbers refuses a graph capture (CudaBackend::refuse_in_capture).
inline constexpr const char* kRandomInCapture =
    "its random numbers come from Philox counters passed as kernel arguments, so every replay would draw the same "
    "ones";

// Samples per chunk of conv2d_forward / conv2d_backward (Note [conv chunks on the GPU] in
// conv.cu): as many as keep the col buffer under its budget, at least one, at most g.n.
int64_t conv2d_samples_per_chunk(const Conv2dGeometry& g);

// The backend owning t's memory (t must be on a CUDA device).
CudaBackend& backend_of(const Tensor& t);

// For the methods' MINIDL_INTERNAL_ASSERTs: every defined tensor given is float32, or contiguous.
inline bool all_float32(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && t->dtype() != DType::Float32) return false;
  return true;
}
// Every defined tensor given has one dtype, float32 or a 16-bit one (the native 16-bit kernels).
inline bool same_floating(std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (first == nullptr) first = t;
    if (t->dtype() != first->dtype() || !(t->dtype() == DType::Float32 || is_half(t->dtype()))) return false;
  }
  return true;
}
inline bool all_contiguous(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && !t->is_contiguous()) return false;
  return true;
}

}  // namespace minidl::cuda
