// CpuBackend: the CPU implementation of every kernel behind core/backend.h, templated over
// float and double (and int64 where labels need it). The methods are defined across
// kernels/cpu/*.cpp by kernel family: memory.cpp, elementwise.cpp, reduce.cpp, gemm.cpp,
// linear.cpp, softmax.cpp, optimizer.cpp; conv.cpp, pool.cpp, batch_norm.cpp, dropout.cpp;
// layer_norm.cpp, gelu.cpp, embedding.cpp. Loops above kParallelGrain elements are split over
// the kernels' ThreadPool (kernels/cpu/thread_pool.h), so the tiny tensors of the seed model
// never wake a thread.
#pragma once

#include <algorithm>

#include "core/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace minidl::cpu {

// Below this many elements a loop runs on the calling thread.
inline constexpr int64_t kParallelGrain = 1 << 15;

// [begin, end) of part `part` of `parts` equal slices of [0, n).
inline std::pair<int64_t, int64_t> slice_of(int64_t n, int part, int parts) {
  return {n * part / parts, n * (part + 1) / parts};
}

// f(i) for i in [0, n): independent, vectorisable iterations. Small loops run right here:
// even handing work to a thread that is awake costs about a microsecond, a fifth of the seed
// model's whole training step.
//
// Each loop runs a copy of f: a kernel's lambda captures its pointers and constants, and a
// store through one of those pointers could, for all the compiler knows, change a capture of
// the caller's closure, so it reloads the captures after every store — which left the small
// loop scalar (seen on the SGD update of a 32768-element weight: 13% of the MLP's step) and
// the large one reloading its constants in every iteration. The copy is a local whose address
// never escapes, so its captures live in registers. (Kernel lambdas hold pointers and scalars:
// a copy costs nothing.)
template <typename F>
void parallel_for(int64_t n, F&& f) {
  if (n <= kParallelGrain) {
    std::decay_t<F> body = f;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  ThreadPool& pool = ThreadPool::instance();
  const int parts = static_cast<int>(std::min<int64_t>(pool.max_threads(), (n + kParallelGrain - 1) / kParallelGrain));
  pool.run(parts, [&](int part, int count) {
    // Plain variables, not a structured binding: clang 14 (the fuzz build) cannot capture a
    // binding into the region it outlines for `omp simd`.
    const auto slice = slice_of(n, part, count);
    const int64_t begin = slice.first, end = slice.second;
    std::decay_t<F> body = f;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) body(i);
  });
}

// f(r) for r in [0, rows): independent rows whose total cost is about `work` elements.
template <typename F>
void parallel_rows(int64_t rows, int64_t work, F&& f) {
  if (work <= kParallelGrain || rows < 2) {
    for (int64_t r = 0; r < rows; ++r) f(r);
    return;
  }
  ThreadPool& pool = ThreadPool::instance();
  const int parts = static_cast<int>(
      std::min<int64_t>({pool.max_threads(), rows, (work + kParallelGrain - 1) / kParallelGrain}));
  pool.run(parts, [&](int part, int count) {
    const auto [begin, end] = slice_of(rows, part, count);
    for (int64_t r = begin; r < end; ++r) f(r);
  });
}

class CpuBackend final : public Backend {
 public:
  Allocator& allocator() override { return cpu_allocator(); }
  // Every op in every dtype it accepts: float32 and float64 throughout, bfloat16 and float16 with
  // float32 math (kernels/half_staging.h), int64 wherever an op accepts it (binary, sum, argmax).
  bool computes_in(const char*, DType) const override { return true; }

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
  void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db) override;

  void log_softmax_forward(const Tensor& x, Tensor& y) override;
  void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override;
  void softmax_forward(const Tensor& x, Tensor& y) override;
  void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override;
  std::optional<std::pair<int64_t, int64_t>> find_invalid_target(const Tensor& targets, int64_t num_classes,
                                                                 std::optional<int64_t> ignore_index) override;
  void softmax_cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& stats,
                                     const CrossEntropyOptions& o) override;
  void softmax_cross_entropy_fused(const Tensor& logits, const Tensor& targets, const Tensor& scale, Tensor& loss,
                                   Tensor& dlogits, const CrossEntropyOptions& o) override;
  void softmax_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& stats,
                                      const Tensor& scale, Tensor& dlogits, const CrossEntropyOptions& o) override;

  void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SGDConfig& cfg) override;
  void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamConfig& cfg) override;
  // Every chunk of every tensor of the lists as the tasks of one parallel loop (optimizer.cpp).
  void sgd_step_many(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     std::vector<Tensor>& momentum_buffers, const SGDConfig& cfg) override;
  void adam_step_many(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& exp_avgs,
                      std::vector<Tensor>& exp_avg_sqs, const AdamConfig& cfg) override;

  MemoryStats memory_stats() override;
  void empty_cache() override;
  void reset_peak_memory_stats() override;

  // ---- convolutional networks (conv.cpp, pool.cpp, batch_norm.cpp, dropout.cpp) ----
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

  // ---- transformer layers (layer_norm.cpp, gelu.cpp, embedding.cpp) ----
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                          Tensor& mean, Tensor& rstd) override;
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) override;
  void gelu_forward(const Tensor& x, Tensor& y, GeluApproximate approximate) override;
  void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx, GeluApproximate approximate) override;
  void embedding_forward(const Tensor& indices, const Tensor& weight, Tensor& out) override;
  void embedding_backward(const Tensor& dy, const Tensor& indices, Tensor& dweight) override;

  // ---- batched matrix products and masks (linear.cpp, mask.cpp) ----
  void matmul_batched(const Tensor& a, const Tensor& b, Tensor& c, const BatchedMatmul& p) override;
  void triangle(const Tensor& x, Tensor& y, int64_t diagonal, bool upper) override;
  void masked_fill(const Tensor& x, const Tensor& mask, double value, Tensor& y) override;

  // ---- attention (attention.cpp) ----
  int64_t attention_max_head_size() const override;
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                         double dropout_p, uint64_t seed, uint64_t offset, Tensor& out, Tensor& lse) override;
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, bool causal, double scale, double dropout_p, uint64_t seed,
                          uint64_t offset, Tensor& dq, Tensor& dk, Tensor& dv) override;

  // ---- training-loop utilities (softmax.cpp, multi_tensor.cpp, sampling.cpp) ----
  void cross_entropy_mean_scale(const Tensor& targets, int64_t ignore_index, Tensor& scale) override;
  void multi_tensor_norm(const std::vector<Tensor>& tensors, double p, Tensor& out) override;
  void multi_tensor_clip(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm) override;
  void unscale_and_check_finite(const std::vector<Tensor>& tensors, float inv_scale, Tensor& found_inf) override;
  void topk(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices) override;
  std::optional<std::pair<int64_t, MultinomialDefect>> find_invalid_distribution(const Tensor& weights,
                                                                                  int64_t min_positive) override;
  void multinomial(const Tensor& weights, int64_t n, bool replacement, uint64_t seed, uint64_t offset,
                   Tensor& out) override;
};

// Calls f(T{}) with T the C++ type of float32 or float64; throws naming `op` for other dtypes. A
// kernel that dispatches here computes in T; its 16-bit inputs reach it as float32 through
// half_staging.h, which its method calls first.
template <typename F>
void dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: f(float{}); return;
    case DType::Float64: f(double{}); return;
    case DType::Int64:
    case DType::BFloat16:
    case DType::Float16: break;
  }
  throw Error(detail::make_message(op, ": cpu kernel expects float32 or float64, got ", t));
}

// Calls f(T{}) for every floating dtype, the 16-bit ones included: for kernels written with
// compute_t<T> (core/half.h), which read 16-bit elements, compute in float and round on store.
template <typename F>
void dispatch_floating_and_half(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::BFloat16: f(bfloat16{}); return;
    case DType::Float16: f(float16{}); return;
    default: dispatch_floating(t, op, std::forward<F>(f));
  }
}

// Calls f(T{}) for the dtypes a kernel can compute and accumulate in directly: float32, float64
// and int64 (the 16-bit ones are staged through float32 before it: half_staging.h).
template <typename F>
void dispatch_native(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Int64: f(int64_t{}); return;
    default: dispatch_floating(t, op, std::forward<F>(f));
  }
}

// Calls f(T{}) for any dtype.
template <typename F>
void dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::Float32: f(float{}); return;
    case DType::Float64: f(double{}); return;
    case DType::Int64: f(int64_t{}); return;
    case DType::BFloat16: f(bfloat16{}); return;
    case DType::Float16: f(float16{}); return;
  }
}

// The GEMM core (kernels/cpu/gemm.cpp): C = alpha·op(A)·op(B) + beta·C, row-major, with an
// epilogue that can add a per-column bias and apply ReLU.
// op(A) is [M, K]: element (i, k) at A[i*rs_a + k*cs_a]; op(B) is [K, N] likewise.
// A and B hold elements of type In, C and the bias of type T, the type the product is computed
// in: In = T (float, double), or a 16-bit In with T = float, converted while A and B are packed.
template <typename T, typename In = T>
struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const In* a = nullptr;
  int64_t rs_a = 0, cs_a = 0;
  const In* b = nullptr;
  int64_t rs_b = 0, cs_b = 0;
  T* c = nullptr;
  int64_t ldc = 0;
  T alpha = 1, beta = 0;
  const T* bias = nullptr;  // [N], added once
  bool relu = false;
};

template <typename T, typename In = T>
void gemm(const GemmArgs<T, In>& args);

}  // namespace minidl::cpu
